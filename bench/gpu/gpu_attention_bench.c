/* bench/gpu/gpu_attention_bench.c — the tensor-core attention kernels' own rate on a GPU.
 *
 *     gpu_attention_bench [--device N] [--B 8] [--T 1024] [--NH 16] [--hs 64] [--causal 1]
 *                         [--p 0] [--iters 20]
 *
 * Loads the kernel library (pkc_kernels_src.h) through the GPU's device table (NVRTC),
 * with PKC_ATT_HS = hs and PKC_ATT_T = T defined as the code generator does, and times with CUDA events the forward
 * (pkc_flash_attention_fwd_bf16) and the three kernels the code generator launches for
 * attention_bwd (pkc_attention_bwd_delta_f32, pkc_flash_attention_bwd_dq_bf16, _dkv_bf16)
 * on random bf16 qkv and dy (casts untimed: they go away when activations are bf16).
 * FLOPs, FlashAttention's convention: forward 4·B·NH·T²·hs, halved when causal;
 * backward 2.5× forward. Prints "attention fwd|bwd B=.. T=.. NH=.. hs=.. causal=..:
 * X ms, Y TFLOP/s" per pass; scripts/gpu-check.sh step (d) runs it at GPT-2's shape.
 * Exit status: 0, 2 bad usage or setup failure, 77 no GPU. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/ir.h"
#include "pkc_kernels_src.h"
#include "runtime/cuda/cuda_backend.h"

#define EXIT_NO_GPU 77
#define FLASH_THREADS 128 /* PKC_FLASH_THREADS */
#define FLASH_ROWS 64     /* PKC_FLASH_BR */

static int usage(void) {
  fprintf(stderr, "usage: gpu_attention_bench [--device N] [--B n] [--T n] [--NH n] [--hs n] [--causal 0|1] "
                  "[--p P] [--iters n]\n");
  return 2;
}

/* Random bf16 bits in [-1, 1): uniform floats rounded to bf16 by truncation. */
static unsigned short *rand_bf16(size_t n, unsigned long long *s) {
  unsigned short *h = malloc(n * 2);
  for (size_t i = 0; i < n; i++) {
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    float f = (float)((double)(*s >> 11) / 9007199254740992.0 * 2 - 1);
    unsigned u;
    memcpy(&u, &f, 4);
    h[i] = (unsigned short)(u >> 16);
  }
  return h;
}

int main(int argc, char **argv) {
  int device = 0, B = 8, T = 1024, NH = 16, hs = 64, causal = 1, iters = 20;
  double p = 0;
  for (int i = 1; i < argc; i++) {
    if (i + 1 >= argc) return usage();
    const char *a = argv[i], *v = argv[++i];
    char *end;
    long x = strtol(v, &end, 10);
    if (!strcmp(a, "--p")) {
      p = strtod(v, &end);
      if (*end || p < 0 || p >= 1) return usage();
      continue;
    }
    if (*end || x < 0 || x > 1 << 20) return usage();
    if (!strcmp(a, "--device")) device = (int)x;
    else if (!strcmp(a, "--B")) B = (int)x;
    else if (!strcmp(a, "--T")) T = (int)x;
    else if (!strcmp(a, "--NH")) NH = (int)x;
    else if (!strcmp(a, "--hs")) hs = (int)x;
    else if (!strcmp(a, "--causal")) causal = x != 0;
    else if (!strcmp(a, "--iters")) iters = (int)x;
    else return usage();
  }
  if (B < 1 || T < 1 || NH < 1 || iters < 1 || hs < 16 || hs > 128 || hs % 16) {
    fprintf(stderr, "gpu_attention_bench: hs must be a multiple of 16 in 16..128, the rest positive\n");
    return 2;
  }
  char err[1024];
  CudaDeviceOps *o = cuda_dev_open(device, err, sizeof err);
  if (!o) {
    printf("gpu_attention_bench: NO GPU: %s\n", err);
    return EXIT_NO_GPU;
  }
  size_t srclen = strlen(pd_cuda_kernels_src) + 64;
  char *src = malloc(srclen);
  snprintf(src, srclen, "#define PKC_ATT_HS %d\n#define PKC_ATT_T %d\n%s", hs, T, pd_cuda_kernels_src);
  void *mod = o->load(o->dev, src, "pd2bw_kernels.cu", err, sizeof err);
  free(src);
  if (!mod) {
    fprintf(stderr, "gpu_attention_bench: %s\n", err);
    return 2;
  }
  const char *names[4] = {"pkc_flash_attention_fwd_bf16", "pkc_attention_bwd_delta_f32",
                          "pkc_flash_attention_bwd_dq_bf16", "pkc_flash_attention_bwd_dkv_bf16"};
  void *k[4];
  for (int i = 0; i < 4; i++)
    if (!(k[i] = o->kernel(o->dev, mod, names[i]))) {
      fprintf(stderr, "gpu_attention_bench: no kernel %s\n", names[i]);
      return 2;
    }

  int C = NH * hs;
  size_t nq = (size_t)B * T * 3 * C, no = (size_t)B * T * C, rows = (size_t)B * NH * T;
  size_t bytes = nq * 2 + no * 2 + no * 4 + nq * 4 + rows * 8 + no * 4 + 5 * 256 + 256;
  GpuPtr base;
  if (!o->alloc(o->dev, bytes, &base, err, sizeof err)) {
    fprintf(stderr, "gpu_attention_bench: %s\n", err);
    return 2;
  }
  GpuPtr q16 = base, y16 = (q16 + nq * 2 + 255) & ~255ull, out = (y16 + no * 2 + 255) & ~255ull;
  GpuPtr dqkv = (out + no * 4 + 255) & ~255ull, work = (dqkv + nq * 4 + 255) & ~255ull;
  GpuPtr lse = work, D = work + rows * 4, y32 = (work + rows * 8 + 255) & ~255ull;
  GpuPtr mb = (y32 + no * 4 + 255) & ~255ull;
  unsigned long long s = 12345;
  unsigned short *hq = rand_bf16(nq, &s), *hy = rand_bf16(no, &s);
  unsigned mbkey = 0;
  o->htod(o->dev, q16, hq, nq * 2);
  o->htod(o->dev, y16, hy, no * 2);
  float *hy32 = malloc(no * 4); /* dy as fp32, for D */
  for (size_t i = 0; i < no; i++) {
    unsigned u = (unsigned)hy[i] << 16;
    memcpy(&hy32[i], &u, 4);
  }
  o->htod(o->dev, y32, hy32, no * 4);
  free(hy32);
  o->htod(o->dev, mb, &mbkey, 4);
  free(hq), free(hy);

  unsigned long long seed = 1;
  unsigned op = 1;
  unsigned grid = (unsigned)((size_t)B * NH * ((T + FLASH_ROWS - 1) / FLASH_ROWS));
  unsigned dgrid = (unsigned)((rows + 255) / 256);
  void *fwd_args[] = {&out, &lse, &q16, &B, &T, &C, &NH, &causal, &p, &seed, &op, &mb};
  void *delta_args[] = {&D, &y32, &out, &B, &T, &C, &NH};
  void *grad_args[] = {&dqkv, &lse, &D, &y16, &q16, &B, &T, &C, &NH, &causal, &p, &seed, &op, &mb};
  void *e0 = o->event_create(o->dev), *e1 = o->event_create(o->dev), *e2 = o->event_create(o->dev);
  for (int warm = 0; warm < 2; warm++) { /* the first pass loads the code */
    o->event_record(o->dev, e0, CUDA_STREAM_COMPUTE);
    for (int it = 0; it < (warm ? iters : 1); it++)
      o->launch(o->dev, CUDA_STREAM_COMPUTE, k[0], grid, FLASH_THREADS, fwd_args);
    o->event_record(o->dev, e1, CUDA_STREAM_COMPUTE);
    for (int it = 0; it < (warm ? iters : 1); it++) {
      o->launch(o->dev, CUDA_STREAM_COMPUTE, k[1], dgrid, 256, delta_args);
      o->launch(o->dev, CUDA_STREAM_COMPUTE, k[2], grid, FLASH_THREADS, grad_args);
      o->launch(o->dev, CUDA_STREAM_COMPUTE, k[3], grid, FLASH_THREADS, grad_args);
    }
    o->event_record(o->dev, e2, CUDA_STREAM_COMPUTE);
    o->sync(o->dev);
  }
  double fwd_ms = o->event_ms(o->dev, e0, e1) / iters, bwd_ms = o->event_ms(o->dev, e1, e2) / iters;
  double fwd_flops = 4.0 * B * NH * (double)T * T * hs * (causal ? 0.5 : 1.0), bwd_flops = 2.5 * fwd_flops;
  printf("attention fwd B=%d T=%d NH=%d hs=%d causal=%d p=%g: %.3f ms, %.1f TFLOP/s\n", B, T, NH, hs, causal, p,
         fwd_ms, fwd_flops / fwd_ms * 1e-9);
  printf("attention bwd B=%d T=%d NH=%d hs=%d causal=%d p=%g: %.3f ms, %.1f TFLOP/s\n", B, T, NH, hs, causal, p,
         bwd_ms, bwd_flops / bwd_ms * 1e-9);
  o->event_destroy(o->dev, e0), o->event_destroy(o->dev, e1), o->event_destroy(o->dev, e2);
  cuda_dev_close(o);
  return 0;
}
