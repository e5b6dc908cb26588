/* tests/pipeline/pipe_check.c — runs one plan on local threads and checks it against
 * the sequential reference (runtime/pipeline/pipeline.h).
 *
 *   pipe_check PLAN_DIR DATA STEPS [TOL] [--resume CKPT] [--save CKPT] [--timeout S] [--mpi]
 *
 * With --mpi this process is one rank of `mpirun -np d·w pipe_check ... --mpi`; rank 0
 * checks and prints.
 * Prints the reference table and "N passed, N failed"; exit status 0 when it
 * matched. With PIPE_CHECK_NOREF=1 only trains (and saves) — fault tests. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/reference/reference.h"

int main(int argc, char **argv) {
  if (argc < 4) {
    fprintf(stderr, "usage: pipe_check PLAN_DIR DATA STEPS [TOL] [--resume F] [--save F] [--timeout S]\n");
    return 2;
  }
  PipeOptions o = {0};
  o.data_path = argv[2];
  o.steps = atoll(argv[3]);
  o.quiet = true;
  double tol = 1e-5;
  bool mpi = false;
  for (int i = 4; i < argc; i++) {
    if (strcmp(argv[i], "--resume") == 0 && i + 1 < argc) o.resume_path = argv[++i];
    else if (strcmp(argv[i], "--save") == 0 && i + 1 < argc) o.save_path = argv[++i];
    else if (strcmp(argv[i], "--timeout") == 0 && i + 1 < argc) o.timeout_s = atof(argv[++i]);
    else if (strcmp(argv[i], "--trace") == 0 && i + 1 < argc) o.trace_path = argv[++i];
    else if (strcmp(argv[i], "--profile-out") == 0 && i + 1 < argc) o.profile_out = argv[++i];
    else if (strcmp(argv[i], "--mpi") == 0) mpi = true;
    else tol = atof(argv[i]);
  }
  char err[4096];
  Transport *t = NULL;
  if (mpi && !(t = transport_mpi_create(&argc, &argv, o.timeout_s, err, sizeof err))) {
    fprintf(stderr, "pipe_check: %s\n", err);
    printf("0 passed, 1 failed\n");
    return 1;
  }
  PipePlan *p = pipe_plan_load(argv[1], err, sizeof err);
  if (!p) {
    fprintf(stderr, "pipe_check: %s\n", err);
    printf("0 passed, 1 failed\n");
    return 1;
  }
  if (p->rt->train.steps == 0) p->rt->train.steps = o.steps;
  setenv("OMP_NUM_THREADS", "1", 1);
  pd_blas_init(1);
  PipeOutcome r;
  int rc = t ? pipeline_run_rank(p, &o, t, &r, err, sizeof err) : pipeline_run_local(p, &o, &r, err, sizeof err);
  bool ok = rc == 0;
  if (!ok) fprintf(stderr, "pipe_check: %s\n", err);
  if (t && transport_rank(t) != 0) {
    pipe_plan_free(p);
    transport_destroy(t);
    return ok ? 0 : 1;
  }
  if (ok && !getenv("PIPE_CHECK_NOREF")) {
    ok = pipeline_check_reference(p, &o, &r, tol, stdout, err, sizeof err);
    if (!ok) fprintf(stderr, "pipe_check: %s\n", err);
  }
  if (rc == 0)
    for (int s = 0; s < p->d; s++)
      printf("stage %d: memory %llu bytes (plan %llu), bubble %.1f%%, step %.2f ms\n", s, (unsigned long long)r.arena_bytes[s],
             (unsigned long long)r.planned_bytes[s], 100 * r.bubble[s], 1e3 * r.step_time_s);
  pipe_outcome_free(&r);
  pipe_plan_free(p);
  if (t) transport_destroy(t);
  printf("%d passed, %d failed\n", ok ? 1 : 0, ok ? 0 : 1);
  return ok ? 0 : 1;
}
