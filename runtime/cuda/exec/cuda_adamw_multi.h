/* runtime/cuda/exec/cuda_adamw_multi.h — AdamW over all of a stage replica's parameters in one
 * launch: the host half of kernels/cuda_adamw_multi.cuh (pkc_adamw_multi_dev_f32).
 *
 * A stage replica's parameters lie at the same byte offset in each of its blocks (weight
 * versions, gradients, m, v; and its bf16 weight copies at half those offsets), so the
 * table is built once per replica and serves every (version written, version read)
 * pair: the launch passes the blocks' bases. The table on the device is the tensors
 * (CxAdamwTensor each) then the chunk map (one CxAdamwChunk per chunk of
 * CX_ADAMW_CHUNK elements), the kernel's layout field for field; one block steps one
 * chunk. Which of an opt_step call's steps (runtime/exec/exec.h) can be one launch,
 * and the table of those, are here too (cx_adamw_multi_match). */
#ifndef PD2BW_RUNTIME_CUDA_ADAMW_MULTI_H
#define PD2BW_RUNTIME_CUDA_ADAMW_MULTI_H

#include "runtime/cuda/exec/cuda_exec.h"
#include "runtime/exec/exec.h"

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
  int32_t fold;     /* the version written holds only its bf16 copy, in the first half of
                       its float32 place (a bf16 plan's weight prediction; master set) */
  int32_t pad_;
} CxAdamwTensor;
_Static_assert(sizeof(CxAdamwTensor) == 32, "CxAdamwTensor must match pkc_adamw_tensor");

/* One chunk (pkc_adamw_chunk): elements [chunk·CX_ADAMW_CHUNK, ...) of tensor `tensor`. */
typedef struct CxAdamwChunk {
  uint32_t tensor, chunk;
} CxAdamwChunk;

/* A table on the device. */
typedef struct CxAdamwTable {
  GpuPtr tensors, chunks; /* device addresses */
  int64_t nchunks;
} CxAdamwTable;

/* Device bytes of the table of t[0..n) (a multiple of 256). */
uint64_t cx_adamw_table_bytes(const CxAdamwTensor *t, int n);
/* Uploads the table of t[0..n) to `at` (cx_adamw_table_bytes of room) with one host
 * copy (ops->htod: it waits for the device; call at setup). Tensors with n = 0 get no
 * chunk. */
CxAdamwTable cx_adamw_table_upload(const CudaDeviceOps *ops, GpuPtr at, const CxAdamwTensor *t, int n);

/* The blocks and hyperparameters of one launch. master (0: none) holds 2bw's newest
 * weights under weight prediction (w_in is master then: the kernel steps from it,
 * writes W(t+1) back into it and the predicted weights into w_out); w16 (0: none) is
 * the bf16 copy of the version written; scalars: the per-step pkc_step_scalars (lr,
 * gradient scale, t, the delay compensation in force, the prediction's k). */
typedef struct CxAdamwLaunch {
  GpuPtr w_out, w_in, grad, m, v, master, w16, scalars;
  double beta1, beta2, eps, weight_decay;
} CxAdamwLaunch;

/* One launch of `kernel` (the library's pkc_adamw_multi_dev_f32) over table tb on
 * `stream`; nothing when the table has no chunk. */
void cx_adamw_multi_launch(const CudaDeviceOps *ops, void *kernel, int stream, const CxAdamwTable *tb,
                           const CxAdamwLaunch *a);

/* Whether the steps s[0..n) of one opt_step call on stage st can be one launch: AdamW,
 * a gradient for at least one, the parameters in the stage's order, and each step's
 * weights, master (all or none), gradient, m and v at its parameter's offset from one
 * base each (the interpreter's blocks: a deferred tied gradient lies elsewhere). Then
 * in[k] (st->nparams of them, zeroed by the caller) says how parameter k is listed
 * (0 not, 1 without a gradient: its value into the version written, 2 stepped) and *a
 * holds the bases (w_out, w_in, grad, m, v, master; the rest is the caller's). */
bool cx_adamw_multi_match(const RtStage *st, const ExecOptStep *s, int n, char *in, CxAdamwLaunch *a);
/* Device bytes of a table of every parameter of st: room for any table of its
 * (the size does not depend on has_grad). */
uint64_t cx_adamw_stage_table_bytes(const RtStage *st);
/* Uploads the table of the parameters in[] lists (cx_adamw_multi_match's) to `at`;
 * fold (NULL: none) per parameter: CxAdamwTensor.fold. */
CxAdamwTable cx_adamw_stage_table(const CudaDeviceOps *ops, GpuPtr at, const RtStage *st, const char *in,
                                  const char *fold);

#endif /* PD2BW_RUNTIME_CUDA_ADAMW_MULTI_H */
