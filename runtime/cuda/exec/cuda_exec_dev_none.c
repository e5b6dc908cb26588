/* runtime/cuda/exec/cuda_exec_dev_none.c — the GPU's entry points (runtime/cuda/cuda_backend.h
 * cuda_dev_open ... cuda_gemm_tflops, and multi-GPU mode's link, cx_nccl_link) in a build
 * without the CUDA toolkit: every one reports that, so `--backend cuda` fails cleanly. */
#include "runtime/cuda/exec/cuda_exec.h"

static const char no_toolkit[] =
    "cuda backend: this pd2bw was built without the CUDA toolkit (CMake found no CUDAToolkit); use --backend cpu";

CudaDeviceOps *cuda_dev_open(int device, char *err, size_t errlen) {
  (void)device;
  snprintf(err, errlen, "%s", no_toolkit);
  return NULL;
}

void cuda_dev_close(CudaDeviceOps *ops) { (void)ops; }

const char *cuda_dev_name(const CudaDeviceOps *ops) {
  (void)ops;
  return "";
}

double cuda_gemm_tflops(int device, GemmType type, int M, int N, int K, char *err, size_t errlen) {
  (void)device, (void)type, (void)M, (void)N, (void)K;
  snprintf(err, errlen, "%s", no_toolkit);
  return -1;
}

ExecLink *cx_nccl_link(Transport *t, const PipePlan *p, ExecDevice *dev, char *err, size_t errlen) {
  (void)t, (void)p, (void)dev;
  snprintf(err, errlen, "--transport nccl: this pd2bw was built without the CUDA toolkit (no NCCL support)");
  return NULL;
}
