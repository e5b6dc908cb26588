/* bench/train/train_bench.c — end-to-end CPU training speed of generated code.
 *
 *   train_bench [--steps N] [--threads N] [--only tiny|124m]
 *
 * For the GPT-2 124M shape (12 layers, width 768, 12 heads, vocab 50257; B=4, T=64)
 * and the tiny GPT of models/tinygpt.model (4 layers, width 64, 4 heads, vocab 256;
 * B=16 as 4 microbatches of 4, T=64): builds the model through the IR API, compiles
 * its one-stage program exactly as pd2bwrun does (layout, codegen, cc -O3
 * -march=native, dlopen), trains on random tokens and prints ms/step, tokens/s and
 * the achieved GFLOP/s counted as (6·N + 6·L·C·T) per token (N = parameters),
 * beside this machine's SGEMM rate measured in the same run through the same BLAS
 * (pd_sgemm_peak_gflops, right before and after the timed steps; the larger is
 * the reference). One warm-up step is not timed; the median step is reported.
 * Results: RESULTS.md. */
#define _XOPEN_SOURCE 700 /* nftw */
#include "build_models.h"
#include "codegen/codegen.h"
#include "passes/passes.h"
#include "runtime/pipeline/pipeline.h"

#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

typedef struct Shape_ {
  const char *name;
  int V, T, C, H, L;
  int64_t b, m;
} BenchShape;

static int remove_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
  (void)sb, (void)flag, (void)ftw;
  return remove(path);
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int run(const BenchShape *s, int steps, double peak) {
  char dir[] = "/tmp/pd2bw-bench-XXXXXX";
  if (!mkdtemp(dir)) return 1;
  Arena *a = arena_create();
  Diag d;
  diag_init(&d, stderr);
  Graph *g = build_tiny_gpt(a, &d, s->V, s->T, s->C, s->H, s->L);
  g->train = (TrainConfig){.batch = s->b * s->m, .microbatch = s->b, .optimizer = OPT_ADAMW, .lr = 1e-4,
                           .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .weight_decay = 0.01,
                           .schedule = LR_CONSTANT, .clip = 1.0, .seed = 1};
  int64_t N = graph_param_count(g);
  double t0 = now_s();
  if (!pass_autodiff(g, &d) || !codegen_single_stage_plan(g, s->b, s->m, &(CodegenOptions){.fuse = true}, dir, &d))
    return 1;
  char path[128], err[RT_ERR_LEN];
  snprintf(path, sizeof path, "%s/train.bin", dir);
  FILE *f = fopen(path, "wb");
  int64_t ntok = s->b * s->m * (s->T + 1) * 4 + 1;
  uint32_t r = 12345;
  for (int64_t i = 0; i < ntok; i++) {
    r = r * 1664525u + 1013904223u;
    uint16_t t = (uint16_t)((r >> 8) % (uint32_t)s->V);
    fwrite(&t, 2, 1, f);
  }
  fclose(f);
  RtPlan *p = rt_plan_load(dir, err, sizeof err);
  Trainer *t = p ? trainer_create(p, NULL, err, sizeof err) : NULL;
  DataFile *df = t ? data_open(path, DATA_AUTO, s->V, err, sizeof err) : NULL;
  DataLoader *dl = df ? data_loader_create(df, (int)(s->b * s->m), s->T, false, 0, err, sizeof err) : NULL;
  if (!dl) {
    fprintf(stderr, "train_bench: %s\n", err);
    return 1;
  }
  double prep = now_s() - t0;
  StepStats st;
  trainer_step(t, dl, &st); /* warm-up: page faults, BLAS buffers */
  double first_loss = st.loss;
  /* The SGEMM rate right before and after the timed steps, and the median step:
   * on a shared machine both move with the load, and this keeps them comparable. */
  double peak0 = pd_sgemm_peak_gflops();
  double *ms = malloc((size_t)steps * sizeof *ms);
  for (int i = 0; i < steps; i++) {
    trainer_step(t, dl, &st);
    ms[i] = st.ms;
  }
  double peak1 = pd_sgemm_peak_gflops();
  for (int i = 1; i < steps; i++) /* insertion sort: a handful of steps */
    for (int j = i; j > 0 && ms[j] < ms[j - 1]; j--) {
      double x = ms[j];
      ms[j] = ms[j - 1];
      ms[j - 1] = x;
    }
  double med = ms[steps / 2] / 1e3, best = ms[0] / 1e3;
  double tokens = (double)(s->b * s->m * s->T);
  double flops_tok = 6.0 * (double)N + 6.0 * s->L * s->C * s->T;
  double gf = flops_tok * tokens / med / 1e9, sg = peak0 > peak1 ? peak0 : peak1;
  (void)peak;
  double gb = flops_tok * tokens / best / 1e9;
  printf("%s N=%lld B=%lld T=%d: median %.1f ms/step, %.0f tok/s, %.1f GFLOP/s = %.0f%% of SGEMM %.1f GFLOP/s\n"
         "     best step %.1f ms, %.1f GFLOP/s = %.0f%%; SGEMM before %.1f, after %.1f; graph-cost FLOPs at the median "
         "%.1f GFLOP/s; loss %.3f -> %.3f; compile+init %.1f s\n",
         s->name, (long long)N, (long long)(s->b * s->m), s->T, med * 1e3, tokens / med, gf, 100 * gf / sg, sg,
         best * 1e3, gb, 100 * gb / sg, peak0, peak1, trainer_flops_per_step(t) / med / 1e9, first_loss, st.loss,
         prep);
  free(ms);
  data_loader_destroy(dl);
  data_close(df);
  trainer_destroy(t);
  rt_plan_free(p);
  graph_destroy(g);
  arena_destroy(a);
  /* the scratch plan, removed without a shell (nothing in pd2bw hands one a path) */
  return nftw(dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS) == 0 ? 0 : 1;
}

int main(int argc, char **argv) {
  (void)build_mlp;
  int steps = 0, threads = (int)sysconf(_SC_NPROCESSORS_ONLN);
  const char *only = NULL;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--steps") == 0 && i + 1 < argc)
      steps = atoi(argv[++i]);
    else if (strcmp(argv[i], "--threads") == 0 && i + 1 < argc)
      threads = atoi(argv[++i]);
    else if (strcmp(argv[i], "--only") == 0 && i + 1 < argc)
      only = argv[++i];
    else {
      fprintf(stderr, "usage: train_bench [--steps N] [--threads N] [--only tiny|124m]\n");
      return 2;
    }
  }
  if (threads < 1) threads = 1;
  /* as pd2bwrun does: libgomp read OMP_NUM_THREADS at load, so a setenv here came
   * too late; and a BLAS with its own pool leaves the stage program's loops one thread */
  pd_blas_init(threads);
  pipe_rank_threads(threads);
  double peak = pd_sgemm_peak_gflops();
  printf("train_bench: %s, %d threads, SGEMM %.1f GFLOP/s (1024^3, best of ~0.3 s)\n", pd_blas_name(), threads, peak);
  static const BenchShape shapes[] = {
      {"124m", 50257, 64, 768, 12, 12, 4, 1},
      {"tiny", 256, 64, 64, 4, 4, 4, 4},
  };
  int rc = 0;
  for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++) {
    if (only && strcmp(only, shapes[k].name) != 0) continue;
    int n = steps ? steps : (strcmp(shapes[k].name, "tiny") == 0 ? 50 : 5);
    rc |= run(&shapes[k], n, peak);
  }
  return rc;
}
