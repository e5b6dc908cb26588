/* runtime/cuda/pipe/cuda_pipe_nccl_none.c — multi-GPU pipeline mode (cuda_pipe.h) in a build
 * without the CUDA toolkit (no runtime/cuda library, hence no NCCL): it says so. */
#include "runtime/cuda/pipe/cuda_pipe.h"

#include <string.h>

int cx_pipe_train_nccl(const PipePlan *p, const CxDeviceOps *ops, const CudaExecOptions *o, Transport *t,
                       PipeOutcome *out, uint64_t *extra_bytes, char *err, size_t errlen) {
  (void)p, (void)ops, (void)o, (void)extra_bytes;
  memset(out, 0, sizeof *out);
  snprintf(err, errlen, "--transport nccl: this pd2bw was built without the CUDA toolkit (no NCCL support)");
  transport_abort(t, err);
  return 1;
}
