/* bench/train/kernel_bench.c — the non-GEMM kernels of a GPT-2 124M training step.
 *
 *   kernel_bench [--reps N]
 *
 * Times, on one thread (OMP_NUM_THREADS=1 is what RESULTS.md uses; best of N reps),
 * the kernels that showed up in the 124M step's profile besides BLAS, at that
 * step's shapes (B=4, T=64, C=768, 12 layers, vocab 50257): gelu_fwd/bwd over
 * B·T·4C elements and cross_entropy_fwd/bwd over B·T rows of the vocabulary. It
 * prints each kernel's time and the CPU time per
 * training step they add up to. Against an older cpu_kernels.h:
 *   cc -O3 -march=native -fopenmp -std=c11 -I. -Ikernels \
 *      -DPK_KERNELS_HEADER='"/path/to/old/cpu_kernels.h"' bench/train/kernel_bench.c -lm
 * Instruction-bound single-thread loops: far less sensitive to a loaded machine than
 * train_bench (RESULTS.md). */
#ifdef PK_KERNELS_HEADER
#include PK_KERNELS_HEADER
#else
#include "kernels/cpu_kernels.h"
#endif

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Deterministic values in [-scale, scale]. */
static void fill(float *x, size_t n, float scale) {
  uint32_t r = 12345;
  for (size_t i = 0; i < n; i++) {
    r = r * 1664525u + 1013904223u;
    x[i] = scale * (float)((int)((r >> 8) % 2001) - 1000) * 1e-3f;
  }
}

int main(int argc, char **argv) {
  int reps = 10;
  if (argc == 3 && strcmp(argv[1], "--reps") == 0) reps = atoi(argv[2]);
  else if (argc != 1) {
    fprintf(stderr, "usage: kernel_bench [--reps N]\n");
    return 2;
  }
  enum { B = 4, T = 64, C = 768, L = 12, V = 50257 };
  const int64_t ng = (int64_t)B * T * 4 * C, rows = (int64_t)B * T;
  float *x = malloc(sizeof(float) * ng), *y = malloc(sizeof(float) * ng);
  float *g = malloc(sizeof(float) * ng);
  float *logits = malloc(sizeof(float) * rows * V), *dl = malloc(sizeof(float) * rows * V);
  int32_t *tg = malloc(sizeof(int32_t) * rows);
  if (!x || !y || !g || !logits || !dl || !tg) return 1;
  fill(x, ng, 4), fill(g, ng, 1), fill(logits, rows * V, 8);
  for (int64_t r = 0; r < rows; r++) tg[r] = (int32_t)((r * 7919) % V);
  double best[4] = {1e9, 1e9, 1e9, 1e9};
  float loss = 0;
  for (int k = 0; k < reps; k++) {
    double t[5];
    t[0] = now_s();
    pk_gelu_fwd_f32(y, x, ng);
    t[1] = now_s();
    pk_gelu_bwd_f32(y, g, x, ng);
    t[2] = now_s();
    pk_cross_entropy_fwd_f32(&loss, logits, tg, rows, V, -1);
    t[3] = now_s();
    pk_cross_entropy_bwd_f32(dl, logits, tg, rows, V, -1, 1);
    t[4] = now_s();
    for (int i = 0; i < 4; i++) best[i] = t[i + 1] - t[i] < best[i] ? t[i + 1] - t[i] : best[i];
  }
  const char *name[4] = {"gelu_fwd", "gelu_bwd", "cross_entropy_fwd", "cross_entropy_bwd"};
  const int per_step[4] = {L, L, 1, 1};
  double step = 0;
  printf("kernel_bench: best of %d, one thread per OMP_NUM_THREADS (loss %.6f)\n", reps, loss);
  for (int i = 0; i < 4; i++) {
    printf("  %-18s %8.2f ms  x%-2d per step\n", name[i], best[i] * 1e3, per_step[i]);
    step += best[i] * per_step[i];
  }
  printf("  gelu + cross-entropy per 124M step: %.1f ms of CPU time\n", step * 1e3);
  free(x), free(y), free(g), free(logits), free(dl), free(tg);
  return 0;
}
