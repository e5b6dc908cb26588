/* runtime/cuda/exec/cuda_adamw_multi.h — AdamW over all of a stage replica's parameters in one
 * launch: the host half of kernels/cuda_adamw_multi.cuh (pkc_adamw_multi_dev_f32).
 *
 * A stage replica's parameters lie at the same byte offset in each of its blocks (weight
 * versions, gradients, m, v; and its bf16 weight copies at half those offsets), so the
 * table is built once per replica and serves every (version written, version read)
 * pair: the launch passes the blocks' bases. The table on the device is the tensors
 * (CxAdamwTensor each) then the chunk map (one CxAdamwChunk per chunk of
 * CX_ADAMW_CHUNK elements), the kernel's layout field for field; one block steps one
 * chunk. */
#ifndef PD2BW_RUNTIME_CUDA_ADAMW_MULTI_H
#define PD2BW_RUNTIME_CUDA_ADAMW_MULTI_H

#include "runtime/cuda/exec/cuda_exec.h"

/* Elements per chunk: a multiple of 4 (chunks of a 16-byte-aligned tensor stay
 * aligned for the kernel's 128-bit steps); 16384 = 16 float4 steps per thread of a
 * 256-thread block. */
#define CX_ADAMW_CHUNK 16384

/* One tensor (kernels/cuda_adamw_multi.cuh's pkc_adamw_tensor). */
typedef struct CxAdamwTensor {
  int64_t off;      /* elements from each block's base */
  int64_t n;        /* elements */
  int32_t decay;    /* weight decay applies */
  int32_t has_grad; /* 0: W(t) is copied into the version written, no step */
} CxAdamwTensor;
_Static_assert(sizeof(CxAdamwTensor) == 24, "CxAdamwTensor must match pkc_adamw_tensor");

/* One chunk (pkc_adamw_chunk): elements [chunk·CX_ADAMW_CHUNK, ...) of tensor `tensor`. */
typedef struct CxAdamwChunk {
  uint32_t tensor, chunk;
} CxAdamwChunk;

/* A table on the device. */
typedef struct CxAdamwTable {
  CxPtr tensors, chunks; /* device addresses */
  int64_t nchunks;
} CxAdamwTable;

/* Device bytes of the table of t[0..n) (a multiple of 256). */
uint64_t cx_adamw_table_bytes(const CxAdamwTensor *t, int n);
/* Uploads the table of t[0..n) to `at` (cx_adamw_table_bytes of room) with one host
 * copy (ops->htod: it waits for the device; call at setup). Tensors with n = 0 get no
 * chunk. */
CxAdamwTable cx_adamw_table_upload(const CxDeviceOps *ops, CxPtr at, const CxAdamwTensor *t, int n);

/* The blocks and hyperparameters of one launch. w16 (0: none) is the bf16 copy of the
 * version written; scalars: the per-step pkc_step_scalars. */
typedef struct CxAdamwLaunch {
  CxPtr w_out, w_in, grad, m, v, w16, scalars;
  double beta1, beta2, eps, weight_decay, delay_comp;
} CxAdamwLaunch;

/* One launch of `kernel` (the library's pkc_adamw_multi_dev_f32) over table tb on
 * `stream`; nothing when the table has no chunk. */
void cx_adamw_multi_launch(const CxDeviceOps *ops, void *kernel, int stream, const CxAdamwTable *tb,
                           const CxAdamwLaunch *a);

#endif /* PD2BW_RUNTIME_CUDA_ADAMW_MULTI_H */
