/* runtime/cuda/exec/cuda_exec_dev_none.c — cuda_exec.h's device functions in a build without
 * the CUDA toolkit: every one reports that, so `--backend cuda` (and multi-GPU mode's
 * link, cx_nccl_link) fails cleanly. */
#include "runtime/cuda/exec/cuda_exec.h"

static const char no_toolkit[] =
    "cuda backend: this pd2bw was built without the CUDA toolkit (CMake found no CUDAToolkit); use --backend cpu";

CxDeviceOps *cx_cuda_open(int device, char *err, size_t errlen) {
  (void)device;
  snprintf(err, errlen, "%s", no_toolkit);
  return NULL;
}

void cx_cuda_close(CxDeviceOps *ops) { (void)ops; }

const char *cx_cuda_name(const CxDeviceOps *ops) {
  (void)ops;
  return "";
}

double cx_cuda_gemm_tflops(int device, GemmType type, int M, int N, int K, char *err, size_t errlen) {
  (void)device, (void)type, (void)M, (void)N, (void)K;
  snprintf(err, errlen, "%s", no_toolkit);
  return -1;
}

ExecLink *cx_nccl_link(Transport *t, const PipePlan *p, ExecDevice *dev, char *err, size_t errlen) {
  (void)t, (void)p, (void)dev;
  snprintf(err, errlen, "--transport nccl: this pd2bw was built without the CUDA toolkit (no NCCL support)");
  return NULL;
}
