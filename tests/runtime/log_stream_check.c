/* tests/runtime/log_stream_check.c — a pipelined run's streamed --log-json against the
 * file the run's outcome gives at the end (log_stream.sh).
 *
 *   log_stream_check PLAN DATA STEPS LOG [--val VAL --eval-every K] [--mpi]
 *
 * Trains PLAN on local threads (or, with --mpi, as one rank of `mpirun -np d·w`) with
 * --log-json LOG, then, on rank 0, writes from the returned outcome the lines the
 * atomic writer of pd2bwrun's report wrote before the log was streamed (per step:
 * the outcome's step_loss, the plan's lr, rank 0's grad norm and step time, the
 * validation loss, console_json_line with the plan's devices' peak) and compares them
 * with LOG byte for byte: the same run, so even the measured fields are the same.
 * Prints "log_stream_check: N lines identical" or the first line that differs; exit 0
 * when identical. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/pipeline/pipeline_rank.h"

/* The lines from the outcome, as the end-of-run writer formatted them (runtime/driver/driver.c's
 * pipe_log_write, before 7414cbb streamed the log). */
static char *outcome_lines(const PipePlan *p, const PipeOutcome *r, size_t *len) {
  size_t cap = 1024 + (size_t)(r->steps - r->first_step) * 512, n = 0;
  char *text = pd_malloc(cap);
  double tokens = pipe_tokens_per_step(p), flops = pipe_flops_per_step(p), peak = pipe_peak_flops(p, false);
  for (int64_t b = 0; b < r->steps - r->first_step; b++) {
    ConsoleStep cs = console_step(r->first_step + b + 1, r->steps, r->step_loss[b],
                                  rt_lr_at(&p->rt->train, r->first_step + b), r->grad_norm[b], r->step_ms[b], tokens,
                                  flops, peak, r->val_loss[b]);
    n += (size_t)console_json_line(&cs, text + n, cap - n);
  }
  *len = n;
  return text;
}

static char *read_file(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  size_t cap = 1 << 16, n = 0, k;
  char *buf = pd_malloc(cap);
  while ((k = fread(buf + n, 1, cap - n - 1, f)) > 0) {
    n += k;
    if (cap - n < 2) buf = pd_realloc(buf, cap *= 2);
  }
  fclose(f);
  buf[n] = 0;
  *len = n;
  return buf;
}

/* 0 when got and want are the same bytes; else prints the first differing line. */
static int compare(const char *got, size_t ng, const char *want, size_t nw) {
  if (ng == nw && memcmp(got, want, ng) == 0) {
    int lines = 0;
    for (size_t i = 0; i < ng; i++) lines += got[i] == '\n';
    printf("log_stream_check: %d lines identical\n", lines);
    return 0;
  }
  size_t i = 0, line = 0;
  while (i < ng && i < nw && got[i] == want[i]) i++;
  for (size_t j = 0; j < i; j++)
    if (got[j] == '\n') line = j + 1;
  const char *ge = strchr(got + line, '\n'), *we = strchr(want + line, '\n');
  printf("log_stream_check: DIFFER at byte %zu\n  streamed: %.*s\n  outcome:  %.*s\n", i,
         (int)(ge ? ge - (got + line) : (long)(ng - line)), got + line,
         (int)(we ? we - (want + line) : (long)(nw - line)), want + line);
  return 1;
}

int main(int argc, char **argv) {
  if (argc < 5) {
    fprintf(stderr, "usage: log_stream_check PLAN DATA STEPS LOG [--val VAL --eval-every K] [--mpi]\n");
    return 2;
  }
  PipeOptions o = {0};
  o.data_path = argv[2];
  o.steps = atoll(argv[3]);
  o.log_json = argv[4];
  o.quiet = true;
  bool mpi = false;
  for (int i = 5; i < argc; i++) {
    if (strcmp(argv[i], "--val") == 0 && i + 1 < argc) o.val_path = argv[++i];
    else if (strcmp(argv[i], "--eval-every") == 0 && i + 1 < argc) o.eval_every = atoll(argv[++i]);
    else if (strcmp(argv[i], "--mpi") == 0) mpi = true;
  }
  char err[4096];
  Transport *t = NULL;
  if (mpi && !(t = transport_mpi_create(&argc, &argv, 0, err, sizeof err))) {
    fprintf(stderr, "log_stream_check: %s\n", err);
    return 1;
  }
  PipePlan *p = pipe_plan_load(argv[1], err, sizeof err);
  if (!p) {
    fprintf(stderr, "log_stream_check: %s\n", err);
    return 1;
  }
  if (p->rt->train.steps == 0) p->rt->train.steps = o.steps;
  setenv("OMP_NUM_THREADS", "1", 1);
  pd_blas_init(1);
  PipeOutcome r = {0};
  int rc = t ? pipeline_run_rank(p, &o, t, &r, err, sizeof err) : pipeline_run_local(p, &o, &r, err, sizeof err);
  if (rc) fprintf(stderr, "log_stream_check: %s\n", err);
  if (!rc && (!t || transport_rank(t) == 0)) {
    size_t ng = 0, nw = 0;
    char *got = read_file(o.log_json, &ng), *want = outcome_lines(p, &r, &nw);
    rc = got ? compare(got, ng, want, nw) : 1;
    if (!got) printf("log_stream_check: %s: cannot read\n", o.log_json);
    free(got);
    free(want);
  }
  pipe_outcome_free(&r);
  pipe_plan_free(p);
  if (t) transport_destroy(t);
  return rc;
}
