/* tools/calibrate.c — pd2bwc --calibrate: this machine as a cluster file (calibrate.h;
 * what is measured and how: docs/calibration.md).
 *
 * Three steps, under 30 s on 2 cores:
 *   1. the host's rates (runtime/calibrate): the GEMM on one thread (rate and fixed
 *      cost fitted over a sweep), memcpy, the optimizer kernel;
 *   2. a small GPT compiled by this pd2bwc at a few shapes and profiled by pd2bwrun
 *      --profile-out on one thread: each segment's forward and backward time;
 *   3. the two rates the host's own figures cannot give (nongemm_tflops, launch_us),
 *      fitted to those times with the planner's own cost terms (plan_op_time), least
 *      squares in relative error.
 * The file, with every measurement and the fit's error in its comments, goes to the
 * stage cache's directory (the same trust rule: runtime/io/cache_dir.c), named after
 * the CPU model and core count, written whole or not at all. */
#include "tools/calibrate.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "frontend/frontend.h"
#include "passes/passes.h"
#include "passes/planner.h"
#include "runtime/calibrate/calibrate.h"
#include "runtime/io/io.h"
#include "tools/plan_dir.h"

extern char **environ;

/* The profiled model: models/tinygpt.model's text (a GPT-2 block; tools/CMakeLists.txt
 * embeds it), 2 layers, at three shapes. */
extern const char calibrate_model_text[];

/* The shapes: narrow with small microbatches (fixed costs weigh), the same width
 * with larger ones (how a pass grows with the microbatch: the per-op fixed cost
 * and the per-element costs are told apart only by changing the microbatch at
 * one width), and wide (GEMMs weigh). With the first and the last alone the fit
 * took the narrow shape's time as fixed cost, 3.8 us per op, and under-predicted a
 * 4-sample pass at width 64 by a quarter (bench/pipeline/RESULTS.md). */
typedef struct CalShape {
  const char *defines[4];
  int microbatch;
} CalShape;
static const CalShape shapes[] = {
    {{"dim=64", "seq=64", "train.batch=4", "layers=2"}, 1},
    {{"dim=64", "seq=64", "train.batch=16", "layers=2"}, 8},
    {{"dim=192", "seq=128", "train.batch=8", "layers=2"}, 4},
};
enum { NSHAPES = sizeof shapes / sizeof shapes[0] };

/* Segment passes shorter than this are left out of the fit. */
#define CAL_MIN_ROW_S 20e-6

#define CAL_ERR(...) (snprintf(err, errlen, __VA_ARGS__), false)

static bool write_file(const char *path, const void *p, size_t n, char *err, size_t errlen) {
  FILE *f = fopen(path, "wb");
  bool ok = f && fwrite(p, 1, n, f) == n;
  ok = f && fclose(f) == 0 && ok;
  return ok || CAL_ERR("cannot write %s: %s", path, strerror(errno));
}

/* Runs argv (no shell) with PD2BW_CACHE=cache (the scratch's own: the calibration's
 * stage programs are not the user's to keep) and waits; true on exit status 0. */
static bool spawn_wait(char *const argv[], const char *cache, char *err, size_t errlen) {
  size_t n = 0;
  while (environ[n]) n++;
  char **envp = pd_calloc(n + 2, sizeof *envp), *entry = pd_malloc(strlen(cache) + 16);
  size_t j = 0;
  for (size_t i = 0; i < n; i++)
    if (strncmp(environ[i], "PD2BW_CACHE=", 12) != 0) envp[j++] = environ[i];
  snprintf(entry, strlen(cache) + 16, "PD2BW_CACHE=%s", cache);
  envp[j++] = entry;
  pid_t pid;
  posix_spawn_file_actions_t fa; /* their summaries are not ours to print; errors go to stderr */
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, STDOUT_FILENO, "/dev/null", O_WRONLY, 0);
  int rc = posix_spawn(&pid, argv[0], &fa, NULL, argv, envp), st = 0;
  posix_spawn_file_actions_destroy(&fa);
  free(envp), free(entry);
  if (rc != 0) return CAL_ERR("cannot run %s: %s", argv[0], strerror(rc));
  while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
  }
  if (WIFEXITED(st) && WEXITSTATUS(st) == 0) return true;
  return CAL_ERR("%s %s ended with %s %d (its messages are above)", argv[0], argv[1],
                 WIFEXITED(st) ? "exit status" : "signal", WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st));
}

/* The cluster text: the host's figures, the fitted ones, and where each came from. */
static char *cluster_text(const HostRates *r, double nongemm, double launch_s, double fit_err, const char *table,
                          const char *when) {
  size_t cap = 16384;
  char *t = pd_malloc(cap);
  long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  double mem_gib = pages > 0 && page > 0 ? (double)pages * (double)page / 1073741824.0 : 16;
  double factor = r->gemm_program_factor > 0 ? r->gemm_program_factor : 1;
  /* all cores over one (the sweep's one-thread rate, not the programs'); at least 1 */
  double speedup = r->gemm_flops_all / (r->gemm_flops * factor);
  speedup = speedup > 1 ? (speedup < r->cores ? speedup : r->cores) : 1;
  int n = snprintf(t, cap,
      "# This host, measured by pd2bwc --calibrate on %s (docs/calibration.md):\n"
      "# %s, %d cores, BLAS %s.\n"
      "# One device per core: a CPU plan's rank gets cores / ranks threads.\n"
      "# GEMM, pd_sgemm on 1 thread, best of >= 5 calls per shape (M x N x K as A B, A B^T or\n"
      "# A^T B in turn, microseconds):\n",
      when, r->cpu, r->cores, r->blas);
  for (int i = 0; i < r->ngemm; i++)
    n += snprintf(t + n, cap - (size_t)n, "#   %d x %d x %d %s: %.1f\n", r->gemm_m[i], r->gemm_n[i], r->gemm_k[i],
                  i % 3 == 0 ? "A B" : i % 3 == 1 ? "A B^T" : "A^T B", r->gemm_s[i] * 1e6);
  n += snprintf(t + n, cap - (size_t)n,
      "#   fitted: %.2f GFLOP/s and %.1f us per GEMM (worst point %.0f%% off); %d threads: %.1f GFLOP/s\n"
      "#   in the stage programs (fitted below) %.2fx as slow: tflops and gemm_latency_us say so\n"
      "# memcpy of 64 MiB on 1 thread: %.2f GB/s copied (memory_gbs counts reads and writes)\n"
      "# optimizer step (AdamW + gradient norm, 4 Mi parameters): %.2f ns per parameter\n"
      "# Not GEMMs, and the fixed cost of one op: fitted to pd2bwrun --profile-out of a\n"
      "#   models/tinygpt.model, 2 layers, at dim 64 (microbatch 1 and 8) and dim 192 (microbatch 4), one thread\n"
      "#   per stage, on 2 stages where the host has 2 cores (both cores busy, as a pipeline keeps them);\n"
      "#   mean error of the fitted segment times %.0f%%:\n%s"
      "cluster host {\n"
      "  nodes = 1;\n  devices_per_node = %d;\n  device = \"cpu\";\n  memory_gib = %.1f;\n"
      "  tflops = %.6g;\n  gemm_efficiency = 1;\n  gemm_latency_us = %.3g;\n  all_cores_gemm_speedup = %.3g;\n"
      "  nongemm_tflops = %.6g;\n  launch_us = %.3g;\n"
      "  memory_gbs = %.4g;\n  intra_node_gbs = %.4g;\n  inter_node_gbs = 1;\n  optimizer_gbs = %.4g;\n}\n",
      r->gemm_flops * factor * 1e-9, r->gemm_latency_s / factor * 1e6, r->gemm_worst_err * 100, r->cores,
      r->gemm_flops_all * 1e-9, factor,
      r->copy_bytes_s * 1e-9, r->optimizer_ns, fit_err * 100, table, r->cores, mem_gib, r->gemm_flops * 1e-12,
      r->gemm_latency_s * 1e6 > 0 ? r->gemm_latency_s * 1e6 : 1e-3, speedup, nongemm * 1e-12,
      launch_s * 1e6 > 1e-3 ? launch_s * 1e6 : 1e-3, 2 * r->copy_bytes_s * 1e-9, r->copy_bytes_s * 1e-9,
      PLAN_STEP_BYTES / r->optimizer_ns);
  PD_CHECK(n > 0 && (size_t)n < cap, "cluster text of %d bytes", n);
  return t;
}

/* One shape: compiled by this pd2bwc, profiled by pd2bwrun beside it. */
/* Profiles shape k as the plans run on this host: on 2 stages when it has 2 cores, one
 * thread each, so both cores are busy as a pipeline keeps them. On a quiet host that
 * costs nothing; where two busy cores slow each other (shared caches, a neighbour on
 * the machine) the fitted rates say so (bench/pipeline/RESULTS.md). */
static bool profile_shape(const char *self, const char *dir, int k, int stages, char *err, size_t errlen) {
  char model[4096], cluster[4096], plan[4096], data[4096], prof[4096], mb[16], dirbuf[4096], ns[8];
  snprintf(ns, sizeof ns, "%d", stages);
  snprintf(model, sizeof model, "%.3000s/calibrate.model", dir);
  snprintf(cluster, sizeof cluster, "%.3000s/provisional.cluster", dir);
  snprintf(plan, sizeof plan, "%.3000s/plan%d", dir, k);
  snprintf(data, sizeof data, "%.3000s/tokens.bin", dir);
  snprintf(prof, sizeof prof, "%.3000s/profile%d.json", dir, k);
  snprintf(mb, sizeof mb, "%d", shapes[k].microbatch);
  char *cc[] = {(char *)self, model, "-D", (char *)shapes[k].defines[0], "-D", (char *)shapes[k].defines[1], "-D",
                (char *)shapes[k].defines[2], "-D", (char *)shapes[k].defines[3], "--cluster", cluster, "--backend", "cpu", "--stages", ns,
                "--replicas", "1", "--microbatch-size", mb, "-q", "-o", plan, NULL};
  char cache[4096];
  snprintf(cache, sizeof cache, "%.3000s/cache", dir);
  if (!spawn_wait(cc, cache, err, errlen)) return false;
  snprintf(dirbuf, sizeof dirbuf, "%s", self);
  char *slash = strrchr(dirbuf, '/');
  char run[4096];
  snprintf(run, sizeof run, "%.*s/pd2bwrun", slash ? (int)(slash - dirbuf) : 1, slash ? dirbuf : ".");
  char *rn[] = {run, plan, "--data", data, "--steps", "8", "--threads", "1", "-q", "--profile-out", prof, NULL};
  return spawn_wait(rn, cache, err, errlen);
}

/* The planner's input of shape k with its profile applied (segments' measured times). */
static bool shape_input(const char *dir, int k, Arena *a, PlanInput *in, char *err, size_t errlen) {
  Diag d;
  diag_init(&d, stderr);
  Graph *g = frontend_load_model_buffer(a, &d, "calibrate.model", calibrate_model_text, strlen(calibrate_model_text),
                                        shapes[k].defines, 4);
  PassOptions po = {.verify = true};
  bool ok = g && passes_run(g, &d, &po) && plan_input_from_graph(g, in);
  if (g) graph_destroy(g);
  if (!ok) return CAL_ERR("the calibration model does not compile");
  char prof[4096];
  snprintf(prof, sizeof prof, "%.3000s/profile%d.json", dir, k);
  if (plan_profile_load(in, prof, &d)) return true;
  plan_input_free(in);
  return CAL_ERR("cannot read the profile %s", prof);
}

typedef struct FitRow {
  const PlanSegment *s;
  bool bwd;
  int64_t b;
  double measured;
} FitRow;

/* One pass of a segment, split as the fit needs it: its GEMMs' time at the host's
 * GEMM rate, its bandwidth-bound ops' time, the FLOPs of its compute-bound other ops
 * (at the current x = 1 / nongemm rate), and its op count. */
typedef struct RowTerms {
  double gemm, bw, flops, nops;
} RowTerms;

static RowTerms row_terms(const FitRow *r, const Cluster *c, double x) {
  RowTerms t = {0, 0, 0, 0};
  for (int k = 0; k < r->s->nops; k++) {
    const PlanOpTerm *o = &r->s->ops[k];
    if (o->bwd != r->bwd) continue;
    double f = o->f1 * (double)r->b + o->f0, y = o->y1 * (double)r->b + o->y0, tb = y / c->mem_bandwidth;
    t.nops += 1;
    if (o->gemm) {
      double tf = f / c->flops;
      t.gemm += (tf > tb ? tf : tb) + c->gemm_latency_s;
    } else if (f * x > tb) {
      t.flops += f;
    } else {
      t.bw += tb;
    }
  }
  return t;
}

/* Solves the n x n system A u = v (n <= 3) by elimination; false when singular. */
static bool solve(int n, double A[3][3], double v[3], double u[3]) {
  for (int i = 0; i < n; i++) {
    int piv = i;
    for (int r = i + 1; r < n; r++)
      if (fabs(A[r][i]) > fabs(A[piv][i])) piv = r;
    if (!(fabs(A[piv][i]) > 0)) return false;
    for (int j = 0; j < 3; j++) {
      double tmp = A[i][j];
      A[i][j] = A[piv][j], A[piv][j] = tmp;
    }
    double tv = v[i];
    v[i] = v[piv], v[piv] = tv;
    for (int r = i + 1; r < n; r++) {
      double f = A[r][i] / A[i][i];
      for (int j = i; j < n; j++) A[r][j] -= f * A[i][j];
      v[r] -= f * v[i];
    }
  }
  for (int i = n - 1; i >= 0; i--) {
    double sum = v[i];
    for (int j = i + 1; j < n; j++) sum -= A[i][j] * u[j];
    u[i] = sum / A[i][i];
  }
  return true;
}

/* Least squares of (g·gemm + bw + x·flops + L·nops) / measured = 1 over g (how much
 * slower the stage programs' GEMMs run than the sweep's: cold caches, packing), x and
 * L; an op's compute- or bandwidth-bound choice settled by iterating. L < 0 is
 * dropped (no negative fixed cost), and so is a row whose bandwidth-bound ops alone
 * take longer than it measured (the embedding's bytes are an upper bound). */
static void fit_rows(const FitRow *rows, int n, Cluster *c, double *mean_err, char *table, size_t cap) {
  double g = 1, x = 1 / c->flops, L = 0;
  for (int it = 0; it < 12; it++) {
    for (int nu = 3; nu >= 2; nu--) { /* with L, then without it */
      double A[3][3] = {{0}}, v[3] = {0}, u[3] = {0};
      for (int i = 0; i < n; i++) {
        RowTerms t = row_terms(&rows[i], c, x);
        if (t.bw >= rows[i].measured) continue; /* bandwidth alone over the time: no rate can fit it */
        double w = 1 / rows[i].measured, a[3] = {t.gemm * w, t.flops * w, t.nops * w}, y = 1 - t.bw * w;
        for (int j = 0; j < nu; j++) {
          v[j] += a[j] * y;
          for (int k = 0; k < nu; k++) A[j][k] += a[j] * a[k];
        }
      }
      if (!solve(nu, A, v, u) || !(u[0] > 0) || !(u[1] > 0) || (nu == 3 && !(u[2] >= 0))) continue;
      g = u[0], x = u[1], L = nu == 3 ? u[2] : 0;
      break;
    }
  }
  c->flops /= g, c->gemm_latency_s *= g, c->nongemm_flops = 1 / x, c->launch_s = L;
  double sum = 0;
  size_t at = 0;
  for (int i = 0; i < n; i++) {
    RowTerms t = row_terms(&rows[i], c, x); /* (c's GEMM figures now include g) */
    double fitted = t.gemm + t.bw + t.flops * x + t.nops * L;
    sum += fabs(fitted / rows[i].measured - 1);
    if (at < cap)
      at += (size_t)snprintf(table + at, cap - at, "#   %-9s %s b=%lld: measured %9.1f us, fitted %9.1f us\n",
                             rows[i].s->name, rows[i].bwd ? "bwd" : "fwd", (long long)rows[i].b,
                             rows[i].measured * 1e6, fitted * 1e6);
  }
  *mean_err = n ? sum / n : 0;
}

static bool fit_profiles(const char *dir, HostRates *r, double *nongemm, double *launch_s, double *err_mean,
                         char *table, size_t cap, char *err, size_t errlen) {
  Arena *a = arena_create();
  PlanInput in[NSHAPES];
  int have = 0, n = 0;
  FitRow rows[256];
  bool ok = true;
  for (int k = 0; ok && k < NSHAPES; k++) {
    ok = shape_input(dir, k, a, &in[k], err, errlen);
    if (!ok) break;
    have++;
    for (int s = 0; s < in[k].nsegs && n + 2 <= 256; s++) {
      const PlanSegment *g = &in[k].segs[s];
      int64_t b = shapes[k].microbatch;
      /* (a pass of a few microseconds is mostly the clock's and the cache's noise) */
      if (g->fwd_time_s * (double)b > CAL_MIN_ROW_S) rows[n++] = (FitRow){g, false, b, g->fwd_time_s * (double)b};
      if (g->bwd_time_s * (double)b > CAL_MIN_ROW_S) rows[n++] = (FitRow){g, true, b, g->bwd_time_s * (double)b};
    }
  }
  if (ok && n < 4) ok = CAL_ERR("the profiles hold %d segment times, too few to fit", n);
  if (ok) {
    Cluster c = {.flops = r->gemm_flops, .gemm_latency_s = r->gemm_latency_s, .mem_bandwidth = 2 * r->copy_bytes_s};
    fit_rows(rows, n, &c, err_mean, table, cap);
    *nongemm = c.nongemm_flops, *launch_s = c.launch_s;
    r->gemm_program_factor = r->gemm_flops / c.flops; /* the sweep's rate over the programs' */
    r->gemm_flops = c.flops, r->gemm_latency_s = c.gemm_latency_s;
  }
  for (int k = 0; k < have; k++) plan_input_free(&in[k]);
  arena_destroy(a);
  return ok;
}

/* The calibration's scratch: the model, tokens and a provisional cluster file. */
static bool scratch(const char *dir, const HostRates *r, char *err, size_t errlen) {
  char path[4096];
  snprintf(path, sizeof path, "%.3000s/calibrate.model", dir);
  if (!write_file(path, calibrate_model_text, strlen(calibrate_model_text), err, errlen)) return false;
  uint16_t tok[1 << 15];
  uint32_t s = 12345;
  for (size_t i = 0; i < sizeof tok / sizeof tok[0]; i++) tok[i] = (uint16_t)((s = s * 1664525u + 1013904223u) >> 24);
  snprintf(path, sizeof path, "%.3000s/tokens.bin", dir);
  if (!write_file(path, tok, sizeof tok, err, errlen)) return false;
  char *text = cluster_text(r, r->gemm_flops, 1e-6, 0, "", "(provisional)");
  snprintf(path, sizeof path, "%.3000s/provisional.cluster", dir);
  bool ok = write_file(path, text, strlen(text), err, errlen);
  free(text);
  return ok;
}


bool calibrate_default_path(char *buf, size_t n, char *err, size_t errlen) {
  char *dir = cache_dir_for_run(NULL, NULL, err, errlen);
  if (!dir) return false;
  CpuIdent id = calibrate_cpu_ident();
  const char *cpu = id.name;
  char tag[96];
  size_t j = 0;
  for (size_t i = 0; cpu[i] && j + 1 < sizeof tag; i++) /* the model name as a file name */
    if ((cpu[i] >= 'a' && cpu[i] <= 'z') || (cpu[i] >= 'A' && cpu[i] <= 'Z') || (cpu[i] >= '0' && cpu[i] <= '9'))
      tag[j++] = cpu[i];
    else if (j && tag[j - 1] != '-')
      tag[j++] = '-';
  while (j && tag[j - 1] == '-') j--;
  tag[j] = 0;
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  int len = snprintf(buf, n, "%s/host-%s-%ldc.cluster", dir, j ? tag : "cpu", cores > 0 ? cores : 1);
  free(dir);
  return (len > 0 && (size_t)len < n) || CAL_ERR("the calibration file's path is too long");
}

/* Measures and fits; the cluster text (valid: the frontend checks every key's range)
 * or NULL with err. Says on stderr what it found. */
static char *calibrate_text(const char *self, char *err, size_t errlen) {
  HostRates r;
  double t0 = (double)time(NULL);
  if (!calibrate_host(&r, err, errlen)) return NULL;
  const char *tmpdir = getenv("TMPDIR");
  char dir[4096];
  snprintf(dir, sizeof dir, "%.3000s/pd2bw-calibrate-XXXXXX", tmpdir && *tmpdir ? tmpdir : "/tmp");
  if (!mkdtemp(dir)) {
    snprintf(err, errlen, "cannot make a scratch directory under %s: %s", dir, strerror(errno));
    return NULL;
  }
  bool ok = scratch(dir, &r, err, errlen);
  for (int k = 0; ok && k < NSHAPES; k++) ok = profile_shape(self, dir, k, r.cores >= 2 ? 2 : 1, err, errlen);
  double nongemm = 0, launch = 0, fit_err = 0;
  char table[6144] = "";
  ok = ok && fit_profiles(dir, &r, &nongemm, &launch, &fit_err, table, sizeof table, err, errlen);
  plan_dir_remove_tree(dir); /* our own mkdtemp directory */
  if (!ok) return NULL;
  char when[64];
  time_t now = time(NULL);
  strftime(when, sizeof when, "%Y-%m-%d %H:%M UTC", gmtime(&now));
  char *text = cluster_text(&r, nongemm, launch, fit_err, table, when);
  Arena *a = arena_create();
  Diag d;
  diag_init(&d, stderr);
  Cluster c;
  ok = frontend_load_cluster_buffer(a, &d, "the calibration", text, strlen(text), &c);
  arena_destroy(a);
  if (!ok) {
    free(text);
    snprintf(err, errlen, "the measured figures make no valid cluster file (a BLAS or clock that cannot be measured?)");
    return NULL;
  }
  fprintf(stderr, "pd2bwc: note: calibrated this host in %.0f s: GEMM %.1f GFLOP/s, other ops %.2f GFLOP/s, "
          "%.1f us per op\n",
         (double)time(NULL) - t0, r.gemm_flops * 1e-9, nongemm * 1e-9, launch * 1e6);
  return text;
}

bool calibrate_write(const char *self, const char *out, char *err, size_t errlen) {
  char *text = calibrate_text(self, err, errlen);
  bool ok = text && atomic_write_text(out, text, err, errlen);
  if (ok) fprintf(stderr, "pd2bwc: note: wrote %s\n", out);
  free(text);
  return ok;
}

static bool self_path(char *buf, size_t n, char *err, size_t errlen) {
  ssize_t len = readlink("/proc/self/exe", buf, n - 1);
  if (len <= 0 || (size_t)len >= n - 1) return CAL_ERR("/proc/self/exe: %s", len < 0 ? strerror(errno) : "too long");
  buf[len] = 0;
  return true;
}

int calibrate_main(void) {
  char path[4096], self[4096], err[1024];
  if (calibrate_default_path(path, sizeof path, err, sizeof err) && self_path(self, sizeof self, err, sizeof err) &&
      calibrate_write(self, path, err, sizeof err))
    return 0;
  fprintf(stderr, "pd2bwc: error: --calibrate: %s\n", err);
  return 1;
}

/* One CPU device with this host's memory and deliberately round rates. */
static Cluster builtin_cluster(void) {
  long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  return (Cluster){
      .name = "host",
      .nodes = 1,
      .devices_per_node = 1,
      .device = "cpu",
      .memory_bytes = pages > 0 && page > 0 ? (double)pages * (double)page : 16.0 * (1ull << 30),
      .flops = 100e9,
      .mem_bandwidth = 20e9,
      .intra_bandwidth = 10e9,
      .inter_bandwidth = 1e9,
  };
}

bool calibrate_cluster(Arena *a, Diag *d, Cluster *out, const char **path_used) {
  static char path[4096];
  char err[1024], self[4096];
  const char *env = getenv("PD2BW_CLUSTER");
  *path_used = NULL;
  if (env && strcmp(env, "builtin") == 0) {
    *out = builtin_cluster();
    return true;
  }
  if (env && *env) snprintf(path, sizeof path, "%s", env);
  else if (!calibrate_default_path(path, sizeof path, err, sizeof err)) {
    diag_error(d, (Loc){0}, "no cluster file: %s (give one with --cluster)", err);
    return false;
  }
  struct stat st;
  if (stat(path, &st) == 0 || (env && *env)) {
    *path_used = path;
    return frontend_load_cluster(a, d, path, out);
  }
  fprintf(stderr, "pd2bwc: note: no cluster file for this host yet (%s): calibrating once (pd2bwc --calibrate)\n",
          path);
  char *text = self_path(self, sizeof self, err, sizeof err) ? calibrate_text(self, err, sizeof err) : NULL;
  if (!text) { /* a plan still: the round figures, said */
    fprintf(stderr, "pd2bwc: warning: cannot calibrate this host: %s; planning for the built-in host "
            "(docs/calibration.md)\n", err);
    *out = builtin_cluster();
    return true;
  }
  if (atomic_write_text(path, text, err, sizeof err)) fprintf(stderr, "pd2bwc: note: wrote %s\n", path);
  else
    fprintf(stderr, "pd2bwc: warning: cannot keep this host's calibration: %s; this run plans with it, the next "
            "calibrates again\n", err);
  *path_used = path;
  bool ok = frontend_load_cluster_buffer(a, d, path, text, strlen(text), out);
  free(text);
  return ok;
}
