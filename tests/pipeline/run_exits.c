/* tests/pipeline/run_exits.c — every way out of a rank's run (runtime/pipeline/
 * pipeline_run.c run_rank, one cleanup for all of them), through the library call with
 * no CLI in front:
 *   - a setup that fails on every rank (a --resume checkpoint that is not there,
 *     before the ranks are made; an --init one, after);
 *   - a --log-json that rank 0 cannot open (the CLI's path check would refuse it
 *     first, so only this call reaches that exit);
 * each ends every rank with exit status 1 and one message naming the file, and no log
 * is left; then a run of the same plan in the same process trains and writes its log.
 * Built with PD2BW_SANITIZE, the exits are also checked for leaks and double frees.
 *
 *   run_exits PLAN_DIR DATA TMPDIR */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "runtime/blas/blas.h"
#include "runtime/pipeline/pipeline.h"

static int fails;

/* One run of p with o; rc and a part of the message as expected, and the log there
 * or not. */
static void run_case(const char *name, const PipePlan *p, const PipeOptions *o, int want_rc, const char *want_msg,
                     bool want_log) {
  char err[4096] = "";
  PipeOutcome r = {0};
  int rc = pipeline_run_local(p, o, &r, err, sizeof err);
  bool log = o->log_json && access(o->log_json, F_OK) == 0;
  bool ok = rc == want_rc && (!want_msg || strstr(err, want_msg)) && log == want_log;
  printf("%s %s: exit %d, log %s, \"%s\"\n", ok ? "ok  " : "FAIL", name, rc, log ? "written" : "none", err);
  if (!ok) {
    printf("     wanted exit %d, log %s, a message with \"%s\"\n", want_rc, want_log ? "written" : "none",
           want_msg ? want_msg : "");
    fails++;
  }
  pipe_outcome_free(&r);
}

int main(int argc, char **argv) {
  if (argc != 4) {
    fprintf(stderr, "usage: run_exits PLAN_DIR DATA TMPDIR\n");
    return 2;
  }
  setvbuf(stdout, NULL, _IOLBF, 0); /* each case's line out before a crash in the next */
  char err[4096], missing[4096], badlog[4096], log[4096];
  PipePlan *p = pipe_plan_load(argv[1], err, sizeof err);
  if (!p) {
    fprintf(stderr, "run_exits: %s\n", err);
    return 1;
  }
  snprintf(missing, sizeof missing, "%s/missing.safetensors", argv[3]);
  snprintf(badlog, sizeof badlog, "%s/no-such-dir/log.json", argv[3]);
  snprintf(log, sizeof log, "%s/log.json", argv[3]);
  if (p->rt->train.steps == 0) p->rt->train.steps = 2;
  setenv("OMP_NUM_THREADS", "1", 1);
  pd_blas_init(1);
  PipeOptions o = {.data_path = argv[2], .steps = 2, .quiet = true};
  o.resume_path = missing, o.log_json = log;
  run_case("setup fails (--resume not there)", p, &o, 1, "missing.safetensors", false);
  o.resume_path = NULL, o.init_path = missing; /* the ranks made first, then --init read */
  run_case("setup fails (--init not there)", p, &o, 1, "missing.safetensors", false);
  o.init_path = NULL;
  o.log_json = badlog;
  run_case("rank 0 cannot open --log-json", p, &o, 1, "cannot write the JSON log", false);
  o.log_json = log;
  run_case("the same plan trains", p, &o, 0, NULL, true);
  pipe_plan_free(p);
  printf("%s\n", fails ? "FAIL" : "all ways out ok");
  return fails ? 1 : 0;
}
