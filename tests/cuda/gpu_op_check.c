/* tests/cuda/gpu_op_check.c — every CUDA op against the CPU op, on the real GPU.
 *
 *     gpu_op_check [--device N] [--only NAME] [--verbose] [--self-test]
 *
 * Loads the kernel text (pkc_kernels_src.h) on the GPU through the backend's device
 * table (cuda_backend.h: NVRTC for the GPU's architecture), and runs the checks of op_check.h with GEMMs through cuBLAS. Built whenever the CUDA toolkit
 * is found, run only by scripts/gpu-check.sh.
 *
 * --self-test compiles the kernels with PKC_SELFTEST_PERTURB (gelu_fwd off by 1%)
 * and succeeds only if the checks catch exactly that: proof the comparison can fail.
 *
 * Exit status: 0 all checks passed (or, with --self-test, the perturbation was
 * caught); 1 a check failed; 2 bad usage or a setup failure (NVRTC, module load);
 * 77 no GPU or no driver on this machine (the message says which; nothing ran).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/ir.h"
#include "op_check.h"
#include "pkc_kernels_src.h"
#include "runtime/cuda/cuda_backend.h"
#include "kernels/cuda_kernel_list.h"

#define EXIT_NO_GPU 77

typedef struct Gpu {
  CudaDeviceOps *o;
  void *mod;
  GpuPtr base;
  size_t size, used;
} Gpu;

static DevPtr g_alloc(void *ctx, size_t bytes) {
  Gpu *g = ctx;
  size_t at = (g->used + 255) & ~(size_t)255;
  PD_CHECK(at + bytes <= g->size, "gpu_op_check arena exhausted");
  g->used = at + bytes;
  g->o->memset0(g->o->dev, CUDA_STREAM_COMPUTE, g->base + at, bytes);
  return g->base + at;
}

static void g_reset(void *ctx) { ((Gpu *)ctx)->used = 0; }

static void g_upload(void *ctx, DevPtr dst, const void *src, size_t bytes) {
  Gpu *g = ctx;
  g->o->htod(g->o->dev, dst, src, bytes);
}

static void g_download(void *ctx, void *dst, DevPtr src, size_t bytes) {
  Gpu *g = ctx;
  g->o->dtoh(g->o->dev, dst, src, bytes);
}

static void g_launch(void *ctx, const char *kernel, unsigned grid, unsigned block, void **args) {
  Gpu *g = ctx;
  void *k = g->o->kernel(g->o->dev, g->mod, kernel);
  PD_CHECK(k != NULL, "no kernel %s in the module", kernel);
  g->o->launch(g->o->dev, CUDA_STREAM_COMPUTE, k, grid, block, args);
  g->o->sync(g->o->dev); /* a fault names this kernel */
}

static void g_gemm(void *ctx, GemmType type, int ta, int tb, int M, int N, int K, float alpha,
                   DevPtr A, int lda, DevPtr B, int ldb, float beta, DevPtr C, int ldc) {
  Gpu *g = ctx;
  GpuGemm gm = {type, ta, tb, M, N, K, alpha, beta, A, B, C, lda, ldb, ldc, {GEMM_EPI_NONE}};
  g->o->gemm(g->o->dev, CUDA_STREAM_COMPUTE, &gm);
  g->o->sync(g->o->dev);
}

static int usage(void) {
  fprintf(stderr, "usage: gpu_op_check [--device N] [--only NAME] [--verbose] [--self-test]\n");
  return 2;
}

int main(int argc, char **argv) {
  int device = 0, verbose = 0, self_test = 0;
  const char *only = NULL;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--device") && i + 1 < argc) {
      char *end;
      device = (int)strtol(argv[++i], &end, 10);
      if (*end) return usage();
    } else if (!strcmp(argv[i], "--only") && i + 1 < argc) {
      only = argv[++i];
    } else if (!strcmp(argv[i], "--verbose")) {
      verbose = 1;
    } else if (!strcmp(argv[i], "--self-test")) {
      self_test = 1;
    } else {
      return usage();
    }
  }

  char err[1024];
  Gpu g = {0};
  g.o = cuda_dev_open(device, err, sizeof err);
  if (!g.o) {
    printf("gpu_op_check: NO GPU: %s\n", err);
    return EXIT_NO_GPU;
  }
  int arch = cuda_dev_arch(g.o);
  printf("gpu_op_check: device %d: %s (sm_%d), %.1f GiB\n", device, cuda_dev_name(g.o), arch,
         (double)cuda_dev_total_mem(g.o) / (1 << 30));

  /* the tensor-core attention for every head size the checks use (op_check_flash.c) */
  size_t srclen = strlen(pd_cuda_kernels_src) + 128;
  char *src = pd_malloc(srclen);
  snprintf(src, srclen, "#define PKC_FLASH_TEST_SIZES 1\n%s%s", self_test ? "#define PKC_SELFTEST_PERTURB 1\n" : "",
           pd_cuda_kernels_src);
  g.mod = g.o->load(g.o->dev, src, "pd2bw_kernels.cu", err, sizeof err);
  free(src);
  if (!g.mod) {
    fprintf(stderr, "gpu_op_check: %s\n", err);
    cuda_dev_close(g.o);
    return 2;
  }
  printf("gpu_op_check: kernels compiled for sm_%d\n", arch);
#define HAVE(k, kind)                                                                              \
  if (!g.o->kernel(g.o->dev, g.mod, #k)) {                                                         \
    fprintf(stderr, "gpu_op_check: kernel %s missing from the module\n", #k);                      \
    cuda_dev_close(g.o);                                                                           \
    return 2;                                                                                      \
  }
  PKC_KERNEL_LIST(HAVE)
#undef HAVE

  g.size = (size_t)256 << 20;
  if (!g.o->alloc(g.o->dev, g.size, &g.base, err, sizeof err)) {
    fprintf(stderr, "gpu_op_check: %s\n", err);
    cuda_dev_close(g.o);
    return 2;
  }
  char name[300];
  snprintf(name, sizeof name, "%s (sm_%d)", cuda_dev_name(g.o), arch);
  OpDev d = {&g, name, g_alloc, g_reset, g_upload, g_download, g_launch, g_gemm, 256, 4096};
  int n = 0;
  int failed = op_check_all(&d, self_test ? "activations" : only, verbose || self_test, &n);
  /* A second launch shape: small blocks, few of them (grid-stride paths on the GPU). */
  OpDev d2 = d;
  d2.block = 64;
  d2.max_grid = 5;
  int n2 = 0;
  int failed2 = self_test ? 0 : op_check_all(&d2, only, 0, &n2);
  cuda_dev_close(g.o);

  if (self_test) {
    /* activations = gelu fwd/bwd, relu fwd/bwd: only gelu_fwd may fail. */
    bool caught = failed == 1;
    printf("gpu_op_check --self-test: %s (%d of %d checks failed; want exactly gelu_fwd)\n",
           caught ? "the perturbed kernel was caught" : "NOT CAUGHT", failed, n);
    return caught ? 0 : 1;
  }
  printf("gpu_op_check: %d of %d checks passed (block 256), %d of %d (block 64, grid <= 5)\n",
         n - failed, n, n2 - failed2, n2);
  return failed || failed2 ? 1 : 0;
}
