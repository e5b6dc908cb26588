/* contract/contract.h — what the compiler and the runtime must agree on, and nothing else.
 *
 * pd2bwc (passes/, codegen/) writes a plan directory and pd2bwrun (runtime/) reads it;
 * the two meet only in plan.json and the programs it names. contract/ owns the few
 * definitions both sides need to mean the same thing by the same bytes:
 *  - the runtime's limits on a plan (plan_limits.h), which pd2bwc checks before it
 *    writes one;
 *  - the instruction streams: schedules, instructions and their generator
 *    (plan_streams.h), which the planner verifies and the runtime regenerates for the
 *    batches it runs;
 *  - the blocks of a stage program (BufClass) and the buffers of a stage's arena
 *    (PlanBufKind), with the names plan.json spells them by;
 *  - the ABI of a generated stage program (StageCtx) and the format of a CUDA launch
 *    list;
 *  - the hash plan.json carries of every program text, which the caches key on.
 * The kernels both sides share (the text the generated programs paste, the CUDA
 * kernel list) are kernels/'s. Nothing here includes passes/, codegen/ or runtime/
 * (tests/includes checks it), so either side can include this without the other.
 */
#ifndef PD2BW_CONTRACT_H
#define PD2BW_CONTRACT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "contract/plan_limits.h"
#include "contract/plan_streams.h"

/* ---- a stage program's blocks (passes/layout.h places every tensor in one) ------ */

typedef enum BufClass {
  BUF_NONE,     /* the stage does not touch this tensor; offset/bytes unused */
  BUF_PARAMS,   /* a parameter: offset in the PARAMS block */
  BUF_GRADS,    /* a parameter gradient, or a contribution accumulated into one */
  BUF_STASH,    /* kept from forward to backward of one microbatch */
  BUF_WORK,     /* transient; shares offsets with tensors not live at once */
  BUF_INPUTS,   /* a data tensor (TK_INPUT) */
  BUF_BOUNDARY, /* crosses to or from another stage */
  BUF_CLASS_COUNT
} BufClass;

const char *buf_class_name(BufClass c); /* "params", "grads", ... */

/* ---- a stage's arena (plan.json stages[i].memory.buffers) ----------------------- */

typedef enum PlanBufKind {
  PB_WEIGHTS,   /* one weight version; index = version slot */
  PB_GRADS,     /* gradient accumulator */
  PB_OPT_M,     /* AdamW first moment (one copy) */
  PB_OPT_V,     /* AdamW second moment (one copy) */
  PB_STASH,     /* activations kept for the backward; index = stash slot */
  PB_RECV_ACT,  /* incoming activation (stages > 0) */
  PB_SEND_ACT,  /* outgoing activation (stages < d-1) */
  PB_RECV_GRAD, /* incoming output gradient (stages < d-1) */
  PB_SEND_GRAD, /* outgoing input gradient (stages > 0) */
  PB_WORKSPACE, /* scratch for one segment at a time */
  PB_TIED_GRADS,/* gradient of the stage's deferred tied parameters (plan_tied_deferred);
                   index = batch % 2, beside PB_GRADS (which has every parameter: the
                   runtime moves them out of PB_GRADS at each OPT_STEP) */
  /* The kinds below are those of the runtime's arena, which the search's layout and
   * the exact plan (plan_apply_layouts) both use; PB_RECV_ACT .. PB_SEND_GRAD are
   * no longer laid out (plan files of older versions have them). */
  PB_ACTIVATIONS,/* with recomputation: the stage program's whole stash block, where the
                    backward rebuilds one microbatch's activations (the stash slots then
                    keep only the received input) */
  PB_INPUTS,    /* the program's data-inputs block (tokens, targets), refilled from the
                   token file before each FWD and BWD */
  PB_BOUNDARY,  /* the program's boundary block: the outgoing activation and the
                   gradients sent and received (program.pipeline.boundary) */
  PB_TIED_RECV, /* TIED_SYNC receive buffers: the other member stages' gradients of
                   every spanning tied parameter; index = batch % 2 */
  PB_COUNT
} PlanBufKind;

const char *plan_buf_kind_name(PlanBufKind k);

/* ---- the stage program ABI (codegen/codegen.h describes the entry points) -------- */

#define PD2BW_STAGE_ABI 3

/* The context struct's fields, once, so the generated file and the runtime agree:
 * codegen pastes the stringised list into each stageN.c.
 *   abi        PD2BW_STAGE_ABI (the program checks nothing; the runtime checks
 *              pd2bw_stage_abi() before the first call; 3: the per-segment entry
 *              points of codegen/codegen.h)
 *   training   1: dropout draws masks; 0: dropout is the identity (evaluation)
 *   microbatch the microbatch's global index (keys the dropout streams)
 *   rng_base   added to the stage-relative op number of each dropout to give the
 *              graph's op id that keys its stream (program.rng_base in plan.json), so
 *              stages with the same code share one program (ABI 2)
 *   seed       the training seed (keys the dropout streams)
 *   params ... boundary: the bases of the blocks (BufClass above)
 *   sgemm      a pk_sgemm_fn (kernels/cpu_kernels.h), e.g. &pd_sgemm, so
 *              the .so links no BLAS; NULL: the kernels' naive loop
 *   loss       where forward writes the loss (NULL: not wanted)
 *   bad_ids    incremented by the number of out-of-range token ids / targets seen */
#define PD2BW_STAGE_CTX_FIELDS                                                   \
  uint32_t abi;                                                                  \
  uint32_t training;                                                             \
  uint32_t microbatch;                                                           \
  uint32_t rng_base;                                                             \
  uint64_t seed;                                                                 \
  void *params;                                                                  \
  void *grads;                                                                   \
  void *stash;                                                                   \
  void *work;                                                                    \
  void *inputs;                                                                  \
  void *boundary;                                                                \
  void (*sgemm)(void);                                                           \
  double *loss;                                                                  \
  int64_t bad_ids;

typedef struct StageCtx {
  PD2BW_STAGE_CTX_FIELDS
} StageCtx;

/* ---- the CUDA programs ------------------------------------------------------------ */

/* The plan's kernel library file, and the format of a stage's launch list,
 * stageN.launch.json: what the runtime replays, in order, for a pass (codegen/cgen_cuda*.c
 * write it, runtime/cuda/exec/cuda_exec_list.c reads it; history: docs/gpu.md):
 *
 *   { "format": 6, "source", "hash" (of the .cu), "library": {"source": "kernels.cu", "hash"},
 *     "block": 256, "nvrtc_options": [], "gemm_dtype": GemmType's name (fp32|tf32|bf16),
 *     "mixed_precision": "none"|"bf16-fp32-master", "blocks": {params, grads, stash, work,
 *     inputs, boundary, cuda_scratch[, params_bf16]: bytes}, "cuda_scratch": {bad_ids (u64
 *     counter of out-of-range ids), ce_nvalid, loss, microbatch_key (u32, written by the
 *     runtime before every pass), ce_rows[, bf16_staging]: offsets}, "loss": {buf, offset}
 *     | null, "kernels": [names], "forward": [entry], "backward": [entry], "segments" }
 *   entry: {"op": id - the pass's smallest op id, "kernel": name, "module": "library"|"stage",
 *           "grid", "block", "shared": bytes, "args": [arg]}
 *       or {"op": id, "gemm": {transa, transb, M, N, K, lda, ldb, ldc, alpha, beta, A, B, C:
 *           pointer, dtype[, epilogue, bias, bias_accumulate, aux, ldaux]}}: a GpuGemm, below
 *   arg:   {"type": "ptr", "buf": block name|null, "offset", "bytes"}
 *          {"type": "i32"|"i64"|"u32"|"u64"|"f32"|"f64", "value": v}
 *          {"type": ..., "runtime": "seed"|"training"|"dropout_p" (0 when not training)
 *                        |"rng_base" (the stage's program.cuda.rng_base + "value")}
 * A pointer is its block's base for the pass (the microbatch's stash slot, the weight
 * version it uses) plus offset; "bytes" is the most the kernel touches from there.
 * Argument types are exactly the kernel's parameter types. Nothing in a list names its
 * stage or microbatch, so stages with one program share it and a pass's launches are
 * the same for every microbatch (a runtime may replay them as one CUDA graph). */
#define CODEGEN_CUDA_LIBRARY "kernels.cu"
#define CODEGEN_CUDA_LIST_FORMAT 6

/* A launch-list GEMM's epilogue (pd2bwc --gemm-epilogues on; cuBLASLt's epilogues on a
 * GPU), in the GEMM's row-major terms, C[M,N] = alpha·op(A)·op(B) + beta·C first:
 *  - bias:          C[i,j] += bias[j]                  (CUBLASLT_EPILOGUE_BIAS)
 *  - gelu_aux_bias: aux[i,j] = C[i,j] + bias[j]; C[i,j] = gelu(aux[i,j]); beta 0
 *                   (CUBLASLT_EPILOGUE_GELU_AUX_BIAS: aux is the pre-GELU input the
 *                   backward reads)
 *  - dgelu:         C[i,j] *= gelu'(aux[i,j]); beta 0   (CUBLASLT_EPILOGUE_DGELU)
 *  - bgradb:        bias[j] (+)= Σ_k op(B)[k,j], the bias gradient of the row-major B
 *                   operand (a linear's dy in its dW GEMM); "bias_accumulate" 1 adds
 *                   (CUBLASLT_EPILOGUE_BGRADA after the row-to-column-major swap, plus
 *                   an add when accumulating: cuBLASLt only writes)
 * Each is what the unfused kernels compute (pkc_add_bias_fwd_f32, pkc_gelu_fwd_f32,
 * pkc_gelu_bwd_f32, pkc_bias_grad_f32) in the same order, so an emulator can replay
 * them bit for bit. "aux" is float32 M×N at leading dimension "ldaux". */
typedef enum GemmEpilogue {
  GEMM_EPI_NONE,
  GEMM_EPI_BIAS,
  GEMM_EPI_GELU_AUX_BIAS,
  GEMM_EPI_DGELU,
  GEMM_EPI_BGRADB,
  GEMM_EPI_COUNT
} GemmEpilogue;

/* "none", "bias", "gelu_aux_bias", "dgelu", "bgradb": the launch list's spelling. */
const char *gemm_epilogue_name(GemmEpilogue k);
/* The kind spelled `name`; false when there is none. */
bool gemm_epilogue_parse(const char *name, GemmEpilogue *out);

/* ---- the GPU's vocabulary: one set of names for the launch lists pd2bwc writes, the
 * runtime's launch-list interpreter, its devices (a GPU, the emulator) and the CUDA
 * backend (docs/development.md, "Names"). ------------------------------------------ */

/* A device address: an arena base plus a byte offset (a CUdeviceptr on a GPU). */
typedef uint64_t GpuPtr;

/* A GEMM's element and compute types: pd2bwc --precision (the planner's
 * PlanInput.precision), the launch list's "dtype" and what cuBLAS runs. */
typedef enum GemmType {
  GEMM_PLAN,     /* not chosen (zero): as the launch list says to pd2bwrun --gemm ("no
                    override", PipeOptions.gemm); the default tf32 to the planner
                    (passes/planner.h plan_precision) */
  GEMM_FP32,     /* float32 operands and arithmetic (bit-comparable to the CPU) */
  GEMM_TF32,     /* float32 operands, TF32 tensor cores, float32 accumulation */
  GEMM_BF16,     /* A, B bfloat16 (uint16 bits), C float32, float32 accumulation. In a launch
                    list: mixed precision with float32 master weights, cast launches
                    (pkc_cast_f32_to_bf16, round to nearest even) make the operands'
                    bfloat16 copies in cuda_scratch; every other kernel stays float32 */
  GEMM_BF16_OUT, /* A, B, C bfloat16, float32 accumulation (cuBLAS only: the GPU op checks) */
  GEMM_TYPE_COUNT
} GemmType;

/* "plan", "fp32", "tf32", "bf16", "bf16_out": the launch list's "dtype", plan.json's
 * and pd2bwc --precision's spelling (of fp32, tf32 and bf16). */
const char *gemm_type_name(GemmType t);
/* A launch list's dtype, pd2bwc --precision, a profile's "gemm" key: fp32, tf32 or bf16
 * only; false for any other name. */
bool gemm_type_parse(const char *name, GemmType *out);

/* A GEMM's epilogue with its operands, in the runtime (its launch-list entry resolved). */
typedef struct GpuEpilogue {
  GemmEpilogue kind;
  GpuPtr bias;  /* bias, gelu_aux_bias: the vector added (N floats); bgradb: the bias
                   gradient written, or added to when bias_acc */
  int bias_acc; /* bgradb: 1 adds into bias */
  GpuPtr aux;   /* gelu_aux_bias: the pre-GELU output written; dgelu: the pre-GELU input */
  int ldaux;    /* aux's leading dimension (floats), a multiple of 8 */
} GpuEpilogue;

/* One GEMM as a device runs it, its operands resolved to addresses: row-major
 * C[M,N] = alpha·op(A)·op(B) + beta·C (pk_sgemm_fn's semantics: ta, tb transpose A, B as
 * stored; leading dimensions in elements), A and B bfloat16 for GEMM_BF16 (C too for
 * GEMM_BF16_OUT), else float32; then ep (kind GEMM_EPI_NONE: no epilogue). */
typedef struct GpuGemm {
  GemmType type;
  int ta, tb, M, N, K;
  float alpha, beta;
  GpuPtr A, B, C;
  int lda, ldb, ldc;
  GpuEpilogue ep;
} GpuGemm;

/* ---- the hash of program texts (plan.json's "hash" fields, the cache keys) --------- */

/* FNV-1a 64-bit of a byte string, as 16 hex digits in out[17]. */
void codegen_hash_hex(const void *p, size_t n, char out[17]);
/* 64-bit FNV-1a of n bytes continued from h (CONTRACT_FNV_BASIS to start): the one hash
 * of the plans, caches, parameter seeds and the ranks' agreement. */
#define CONTRACT_FNV_BASIS 1469598103934665603ull
uint64_t contract_fnv1a(uint64_t h, const void *p, size_t n);

#endif /* PD2BW_CONTRACT_H */
