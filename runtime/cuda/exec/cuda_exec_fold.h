/* runtime/cuda/exec/cuda_exec_fold.h — weight versions that hold their bf16 copies: the
 * CUDA device's side (cuda_exec_device.c) of a bf16 plan under 2bw's weight prediction
 * whose launch lists say so (cx_program_folded; docs/update-rules.md, "Memory").
 * The master slot holds the float32 weights W; every other version holds, for a weight a
 * GEMM reads (a "folded" one), only its bf16 copy, in the first half of its float32
 * place, and for any other weight its float32 value; no copy lies beside the arena. So:
 *   - the multi-tensor AdamW writes a folded weight's copy into the version it writes
 *     (CxAdamwTensor.fold), and a step that is not the stage's one launch (2bw's deferred
 *     tied steps) is one such launch per parameter, over a table of its own;
 *   - upload and download convert the folded weights (the host sees float32: a copy
 *     widened exactly; an upload rounds to nearest even, the rest of the place zero);
 *   - a pass on the master (validation) borrows a version: its bytes go to the host, the
 *     master's folded weights are cast into it, and it is put back before anything else
 *     touches it (a copy of one version each way per validation; no device memory).
 * The interpreter copies activations and gradients on the device, never a version. */
#ifndef PD2BW_RUNTIME_CUDA_EXEC_FOLD_H
#define PD2BW_RUNTIME_CUDA_EXEC_FOLD_H

#include "runtime/cuda/exec/cuda_adamw_multi.h"
#include "runtime/cuda/exec/cuda_exec.h"
#include "runtime/exec/exec.h"

typedef struct CxFold CxFold;

/* The fold of stage st's program (NULL when its list keeps the copies beside the
 * versions, or after a message in err for a list that names no parameter: *bad). */
CxFold *cx_fold_create(const CudaDeviceOps *ops, const CxProgram *prog, const RtStage *st, char *err, size_t errlen,
                       bool *bad);
void cx_fold_destroy(CxFold *f);
/* Device bytes of the one-parameter AdamW tables; where they go (before any step). */
uint64_t cx_fold_table_bytes(const CxFold *f);
void cx_fold_set_tables(CxFold *f, GpuPtr at);
/* Per parameter, whether it is folded (for the stage's AdamW table). */
const char *cx_fold_flags(const CxFold *f);
/* ExecDeviceOps.versions: the versions and the master (there must be one). */
void cx_fold_versions(CxFold *f, char *const *w, int n, int master);
/* Whether [at, at + bytes) lies in a version (then handled, converted: true) or not. */
bool cx_fold_upload(CxFold *f, void *dst, const void *host, uint64_t bytes);
bool cx_fold_download(CxFold *f, void *host, const void *src, uint64_t bytes);
/* Whether [at, at + bytes) touches a version. */
bool cx_fold_touches(const CxFold *f, const void *at, uint64_t bytes);
/* params_bf16 of a pass on block w (a version, or the master: borrowed). */
GpuPtr cx_fold_pass_base(CxFold *f, const char *w);
/* Before an optimizer step: a borrowed version put back, the master's cast stale. */
void cx_fold_step_begin(CxFold *f);
/* Steps s[0..n) as one launch each (AdamW with a gradient, else an internal error),
 * their per-step values at scalars; cx_fold_issue launches them (in a captured graph). */
void cx_fold_one_launches(CxFold *f, const ExecOptStep *s, int n, GpuPtr scalars);
void cx_fold_issue(const CxFold *f);

#endif /* PD2BW_RUNTIME_CUDA_EXEC_FOLD_H */
