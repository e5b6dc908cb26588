/* kernels/cuda_kernel_list.h — every kernel of the kernel library (cuda_kernels.cuh,
 * cuda_mma.cuh, cuda_flash_fwd.cuh, cuda_flash_bwd.cuh, cuda_adamw_multi.cuh), and how to size
 * its grid.
 *
 * An X-macro, plain C, so host code can enumerate the kernels without parsing CUDA:
 * the NVRTC test checks each name is in the cubin (and that the cubin has no other
 * pkc_ kernel, so this list cannot fall behind the header), the emulator
 * (tests/cuda/cuda_emu.cpp) builds its name -> function table from it (a name here
 * that the header lacks fails to compile), and the code generator sizes launches
 * with pkc_grid(). X(name, kind); the comment says the kernel's work items.
 */
#ifndef PD2BW_CUDA_KERNEL_LIST_H
#define PD2BW_CUDA_KERNEL_LIST_H

#include <stdint.h>

/* How a kernel's grid is sized (every kernel is correct with ANY grid: they all
 * stride; the kind only decides the parallelism). */
typedef enum PkcLaunchKind {
  PKC_ELEM,  /* one thread per work item: grid = ceil(items / block) */
  PKC_ELEM4, /* one thread per 4 work items (128-bit float4 steps): ceil(items / 4 / block) */
  PKC_ELEM8, /* one thread per 8 work items (128-bit steps of 8 bf16) */
  PKC_ROW,   /* one block per row: grid = rows */
  PKC_COL,   /* one block per 32 columns: grid = ceil(columns / 32) */
  PKC_ONE    /* exactly one block: grid = 1 (the kernel reduces over everything) */
} PkcLaunchKind;

/* clang-format off */
#define PKC_KERNEL_LIST(X) \
  X(pkc_fill_f32, PKC_ELEM4)                /* n */ \
  X(pkc_set_u32, PKC_ONE)                   /* - */ \
  X(pkc_copy_f32, PKC_ELEM4)                /* n */ \
  X(pkc_scale_inplace_f32, PKC_ELEM4)       /* n */ \
  X(pkc_axpy_f32, PKC_ELEM4)                /* n */ \
  X(pkc_sumsq_partial_f32, PKC_ELEM)        /* n; cap the grid: one part[] per block */ \
  X(pkc_sumsq_final_f32, PKC_ONE)           /* - */ \
  X(pkc_cast_f32_to_bf16, PKC_ELEM8)        /* n */ \
  X(pkc_cast_bf16_to_f32, PKC_ELEM8)        /* n */ \
  X(pkc_embedding_fwd_f32, PKC_ELEM)        /* n*C */ \
  X(pkc_embedding_fwd_bf16_f32, PKC_ELEM)   /* n*C */ \
  X(pkc_embedding_bwd_f32, PKC_ELEM)        /* n*C */ \
  X(pkc_positions_fwd_f32, PKC_ELEM)        /* B*T*C */ \
  X(pkc_positions_bwd_f32, PKC_ELEM)        /* rows*C */ \
  X(pkc_add_fwd_f32, PKC_ELEM4)             /* n */ \
  X(pkc_add_bias_fwd_f32, PKC_ELEM4)        /* M*N */ \
  X(pkc_mul_fwd_f32, PKC_ELEM4)             /* n */ \
  X(pkc_mul_bwd_f32, PKC_ELEM4)             /* n */ \
  X(pkc_scale_fwd_f32, PKC_ELEM4)           /* n */ \
  X(pkc_bias_grad_f32, PKC_COL)             /* N */ \
  X(pkc_layernorm_fwd_f32, PKC_ROW)         /* M */ \
  X(pkc_layernorm_bwd_dx_f32, PKC_ROW)      /* M */ \
  X(pkc_layernorm_bwd_params_f32, PKC_COL)  /* C */ \
  X(pkc_rmsnorm_fwd_f32, PKC_ROW)           /* M */ \
  X(pkc_rmsnorm_bwd_f32, PKC_ROW)           /* M */ \
  X(pkc_rmsnorm_dgamma_f32, PKC_COL)        /* C */ \
  X(pkc_rope_fwd_f32, PKC_ROW)              /* B*T */ \
  X(pkc_rope_bwd_f32, PKC_ROW)              /* B*T */ \
  X(pkc_gelu_fwd_f32, PKC_ELEM4)            /* n */ \
  X(pkc_gelu_bwd_f32, PKC_ELEM4)            /* n */ \
  X(pkc_relu_fwd_f32, PKC_ELEM4)            /* n */ \
  X(pkc_relu_bwd_f32, PKC_ELEM4)            /* n */ \
  X(pkc_silu_fwd_f32, PKC_ELEM4)            /* n */ \
  X(pkc_silu_bwd_f32, PKC_ELEM4)            /* n */ \
  X(pkc_softmax_fwd_f32, PKC_ROW)           /* M */ \
  X(pkc_softmax_bwd_f32, PKC_ROW)           /* M */ \
  X(pkc_dropout_fwd_f32, PKC_ELEM)          /* (n+3)/4 */ \
  X(pkc_dropout_bwd_f32, PKC_ELEM)          /* (n+3)/4 */ \
  X(pkc_gather_fwd_f32, PKC_ELEM)           /* B*P*C */ \
  X(pkc_gather_bwd_f32, PKC_ELEM)           /* B*C */ \
  X(pkc_cross_entropy_rows_f32, PKC_ROW)    /* M */ \
  X(pkc_cross_entropy_reduce_f32, PKC_ONE)  /* - */ \
  X(pkc_cross_entropy_count_f32, PKC_ONE)   /* - */ \
  X(pkc_cross_entropy_bwd_f32, PKC_ROW)     /* M */ \
  X(pkc_classifier_f32, PKC_ROW)            /* M */ \
  X(pkc_classifier_bf16, PKC_ROW)           /* M */ \
  X(pkc_attention_fwd_f32, PKC_ELEM)        /* B*NH*T */ \
  X(pkc_attention_bwd_delta_f32, PKC_ELEM)  /* B*NH*T */ \
  X(pkc_attention_bwd_dq_f32, PKC_ELEM)     /* B*NH*T */ \
  X(pkc_attention_bwd_dkv_f32, PKC_ELEM)    /* B*NH*T */ \
  X(pkc_attention_gqa_fwd_f32, PKC_ELEM)    /* B*NH*T */ \
  X(pkc_attention_gqa_bwd_dq_f32, PKC_ELEM) /* B*NH*T */ \
  X(pkc_attention_gqa_bwd_dkv_f32, PKC_ELEM) /* B*KVH*T */ \
  X(pkc_flash_attention_fwd_bf16, PKC_ROW)  /* B*NH*ceil(T/64) tiles; block PKC_FLASH_THREADS */ \
  X(pkc_flash_attention_bwd_dq_bf16, PKC_ROW)    /* the same */ \
  X(pkc_flash_attention_bwd_dkv_bf16, PKC_ROW)   /* the same */ \
  X(pkc_flash_attention_gqa_fwd_bf16, PKC_ROW)    /* B*NH*ceil(T/64) tiles; block PKC_FLASH_THREADS */ \
  X(pkc_flash_attention_gqa_bwd_dq_bf16, PKC_ROW) /* the same */ \
  X(pkc_flash_attention_gqa_bwd_dkv_bf16, PKC_ROW) /* B*KVH*ceil(T/64) tiles */ \
  X(pkc_mma_check_bf16, PKC_ONE)            /* -; block 32 */ \
  X(pkc_adamw_step_f32, PKC_ELEM)           /* n */ \
  X(pkc_sgd_step_f32, PKC_ELEM)             /* n */ \
  X(pkc_adamw_step_dev_f32, PKC_ELEM)       /* n */ \
  X(pkc_sgd_step_dev_f32, PKC_ELEM)         /* n */ \
  X(pkc_adamw_multi_dev_f32, PKC_ROW)       /* one block per chunk (cuda_adamw_multi.cuh) */ \
  X(pkc_predict_step_dev_f32, PKC_ELEM4)    /* n */ \
  X(pkc_sum_ordered_f32, PKC_ELEM4)         /* n */
/* clang-format on */

/* Blocks for `items` work items (elements, rows or columns by kind) with `block`
 * threads, capped at max_grid (0: no cap). */
static inline unsigned pkc_grid(PkcLaunchKind kind, int64_t items, unsigned block,
                                unsigned max_grid) {
  int64_t g = 1;
  switch (kind) {
  case PKC_ELEM: g = (items + block - 1) / block; break;
  case PKC_ELEM4: g = ((items + 3) / 4 + block - 1) / block; break;
  case PKC_ELEM8: g = ((items + 7) / 8 + block - 1) / block; break;
  case PKC_ROW: g = items; break;
  case PKC_COL: g = (items + 31) / 32; break;
  case PKC_ONE: return 1;
  }
  if (g < 1) g = 1;
  if (max_grid && g > (int64_t)max_grid) g = max_grid;
  if (g > 0x7fffffff) g = 0x7fffffff;
  return (unsigned)g;
}

#endif /* PD2BW_CUDA_KERNEL_LIST_H */
