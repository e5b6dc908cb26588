/* tests/pipeline/seq_check.c — checks the sequential multi-stage executor
 * (runtime/reference/pipeline_seq.c) itself, and that a reference check can fail.
 *
 *   seq_check PLAN_DIR DATA STEPS RULE AGAINST [TOL] [--expect-differ]
 *     RULE     vanilla | delayed | stage-delay: the rule the multi-stage executor runs
 *     AGAINST  trainer:  the one-stage reference (PLAN/reference) with the same rule
 *                        (vanilla or delayed), a second, independent implementation
 *              pipeline: the plan trained by the executor on local threads
 * Prints the comparison table and "N passed, N failed"; exit status 0 when the two
 * agree within TOL (default 1e-5) — or, with --expect-differ, when they do not (a
 * wrong rule must be caught). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/reference/reference.h"

int main(int argc, char **argv) {
  if (argc < 6) {
    fprintf(stderr, "usage: seq_check PLAN_DIR DATA STEPS vanilla|delayed|stage-delay trainer|pipeline [TOL] "
                    "[--expect-differ]\n");
    return 2;
  }
  PipeOptions o = {0};
  o.data_path = argv[2];
  o.steps = atoll(argv[3]);
  o.quiet = true;
  PipeRule rule;
  if (strcmp(argv[4], "vanilla") == 0) rule = PIPE_RULE_VANILLA;
  else if (strcmp(argv[4], "delayed") == 0) rule = PIPE_RULE_DELAYED;
  else if (strcmp(argv[4], "stage-delay") == 0) rule = PIPE_RULE_STAGE_DELAY;
  else {
    fprintf(stderr, "seq_check: unknown rule '%s'\n", argv[4]);
    return 2;
  }
  bool vs_pipeline = strcmp(argv[5], "pipeline") == 0;
  if (!vs_pipeline && strcmp(argv[5], "trainer") != 0) {
    fprintf(stderr, "seq_check: compare against trainer or pipeline, not '%s'\n", argv[5]);
    return 2;
  }
  double tol = 1e-5;
  bool expect_differ = false;
  for (int i = 6; i < argc; i++) {
    if (strcmp(argv[i], "--expect-differ") == 0) expect_differ = true;
    else tol = atof(argv[i]);
  }
  char err[4096] = "";
  PipePlan *p = pipe_plan_load(argv[1], err, sizeof err);
  if (!p) {
    fprintf(stderr, "seq_check: %s\n", err);
    printf("0 passed, 1 failed\n");
    return 1;
  }
  if (p->rt->train.steps == 0) p->rt->train.steps = o.steps;
  setenv("OMP_NUM_THREADS", "1", 1);
  pd_blas_init(1);
  PipeOutcome seq = {0}, other = {0};
  bool ok = pipe_seq_run(p, &o, rule, &seq, err, sizeof err);
  if (ok)
    ok = vs_pipeline ? pipeline_run_local(p, &o, &other, err, sizeof err) == 0
                     : pipe_trainer_run(p, &o, rule, 0, &other, err, sizeof err);
  bool match = false;
  if (ok) {
    printf("seq_check: %s plan, %d stages x %d replicas; multi-stage executor with the %s rule vs the %s\n",
           plan_schedule_name(p->schedule), p->d, p->w, pipe_rule_name(rule),
           vs_pipeline ? "pipeline" : "one-stage reference");
    /* the sequential executor in the place of what is checked against the trainer */
    match = vs_pipeline ? pipe_outcome_compare(&other, &seq, tol, stdout, err, sizeof err)
                        : pipe_outcome_compare(&seq, &other, tol, stdout, err, sizeof err);
  }
  if (!ok || (!match && !expect_differ)) fprintf(stderr, "seq_check: %s\n", err);
  /* a difference must be one of the values, not of the structure */
  bool pass = ok && (expect_differ ? !match && strstr(err, "differs from the sequential reference") : match);
  if (ok && !pass) fprintf(stderr, "seq_check: expected %s\n", expect_differ ? "a difference" : "a match");
  pipe_outcome_free(&seq);
  pipe_outcome_free(&other);
  pipe_plan_free(p);
  printf("%d passed, %d failed\n", pass ? 1 : 0, pass ? 0 : 1);
  return pass ? 0 : 1;
}
