/* tests/cudaexec/test_cudapipe_trace.c — --trace in single-GPU pipeline mode
 * (runtime/cuda/pipe/cuda_pipe_threads.c) on the emulated device (emu_device.h: streams that
 * reorder work, event times from its fake clock of one tick per operation run).
 *
 *  - 2bw4: 2bw, d = 4, w = 1, m = 4, clip 1 (tied groups: TIED_SYNC, deferred tied
 *    steps), 3 steps, highest stream first; the same run with the trace off gives
 *    bit-identical losses and weights;
 *  - 2bw2: 2bw, d = 2, w = 2, m = 2 (the replica ALLREDUCE), lowest stream first,
 *    through cx_pipe_main (pd2bwrun --backend cuda --trace's path: the summary with
 *    graph counts and the measured and predicted bubbles);
 * each trace: it parses as JSON; one process, one named thread per stage replica; one
 * complete ("X") event per instruction of the SR's stream, per kind as many as the
 * plan's streams hold (the instructions themselves: label, batch, microbatch); on each
 * SR the events, by start time, do not overlap (a send/receive group's share one span,
 * its device work between two marks on the SR's stream); a send starts after the
 * producing FWD (activation) or BWD (gradient) ended, and a received activation's copy
 * ends before its FWD starts; the measured bubbles lie in [0, 1);
 *  - errors: a trace path whose directory is a file: status 1 with the path in the
 *    message and nothing left beside it; --trace with --transport nccl is refused
 *    before MPI starts.
 *
 *   test_cudapipe_trace PD2BWC [2bw4|2bw2|errors]   (in the source tree)
 */
#include <dirent.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "emu_train.h"
#include "passes/planner.h"
#include "runtime/cuda/pipe/cuda_pipe.h"
#include "runtime/io/io.h"
#include "test.h"

static char tmp[64] = "/tmp/pd2bw-test-cudatrace-XXXXXX";

/* ---- the trace against the plan's streams --------------------------------------------- */

/* One complete event of the trace. */
typedef struct Ev {
  double ts, dur;
  char name[64];
  int batch;
  int64_t mb;
} Ev;

static int by_ts(const void *a, const void *b) {
  const Ev *x = a, *y = b;
  return x->ts < y->ts ? -1 : x->ts > y->ts ? 1 : 0;
}
static int by_key(const void *a, const void *b) {
  const Ev *x = a, *y = b;
  int c = strcmp(x->name, y->name);
  return c ? c : x->batch - y->batch;
}

/* runtime/pipeline/pipeline_trace.c's label of an instruction (the trace's "name"). */
static void label(const PlanInstr *in, char *buf, size_t n) {
  switch (in->op) {
  case PI_FWD: snprintf(buf, n, "F%lld v%d", (long long)in->mb, in->version); break;
  case PI_BWD: snprintf(buf, n, "B%lld v%d", (long long)in->mb, in->version); break;
  case PI_OPT_STEP: snprintf(buf, n, in->group >= 0 ? "step %d (tied)" : "step %d", in->batch); break;
  case PI_ALLREDUCE: snprintf(buf, n, "allreduce %d", in->batch); break;
  case PI_TIED_SYNC: snprintf(buf, n, "tied sync %d", in->batch); break;
  case PI_RECV_ACT:
  case PI_SEND_ACT:
  case PI_RECV_GRAD:
  case PI_SEND_GRAD: snprintf(buf, n, "%s %lld", plan_op_name(in->op), (long long)in->mb); break;
  case PI_COUNT: snprintf(buf, n, "?"); break;
  }
}

/* Every check of the file above, against the streams of `steps` batches of p. */
static void check_trace(const PipePlan *p, const char *path, int steps) {
  char ierr[IO_ERR_LEN];
  size_t len = 0;
  char *text = io_read_all(path, &len, ierr, sizeof ierr);
  if (!text) fprintf(stderr, "  %s\n", ierr);
  EXPECT(text != NULL);
  cJSON *root = text ? cJSON_ParseWithLength(text, len) : NULL;
  free(text);
  EXPECT(root != NULL); /* it parses as JSON */
  const cJSON *arr = cJSON_GetObjectItemCaseSensitive(root, "traceEvents");
  EXPECT(cJSON_IsArray(arr));
  if (!cJSON_IsArray(arr)) {
    cJSON_Delete(root);
    return;
  }
  /* the run's streams: 2bw's flushed start and weight prediction as runtime/pipeline/pipeline.c sets them */
  bool twobw = p->schedule == PS_2BW;
  int64_t K = p->rt->train.flush_steps < INT32_MAX ? p->rt->train.flush_steps : INT32_MAX;
  PlanStreamSpec spec = {.stages = p->d, .microbatches = p->m, .schedule = p->schedule, .nbatches = steps,
                         .replicas = p->w, .groups = p->groups, .ngroups = p->ngroups,
                         .flush_batches = twobw ? (int)K : 0, .predict = twobw && p->rt->train.predict > 0};
  PlanStreams S;
  char err[256];
  EXPECT(plan_streams_build(&spec, &S, err, sizeof err));
  int nsr = p->d * p->w, nx = cJSON_GetArraySize(arr), procs = 0, threads = 0, bad = 0;
  Ev **ev = calloc((size_t)nsr, sizeof *ev);
  int *nev = calloc((size_t)nsr, sizeof *nev);
  for (int i = 0; i < nsr; i++) ev[i] = calloc((size_t)nx + 1, sizeof **ev);
  const cJSON *o;
  cJSON_ArrayForEach(o, arr) {
    const char *ph = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(o, "ph"));
    const char *name = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(o, "name"));
    const cJSON *tid = cJSON_GetObjectItemCaseSensitive(o, "tid"), *pid = cJSON_GetObjectItemCaseSensitive(o, "pid");
    if (!ph || !name || !cJSON_IsNumber(pid) || pid->valueint != 0) {
      bad++;
      continue;
    }
    if (strcmp(ph, "M") == 0) {
      procs += strcmp(name, "process_name") == 0;
      threads += strcmp(name, "thread_name") == 0;
      continue;
    }
    int t = cJSON_IsNumber(tid) ? tid->valueint : -1;
    const cJSON *args = cJSON_GetObjectItemCaseSensitive(o, "args");
    if (strcmp(ph, "X") != 0 || t < 0 || t >= nsr || !args) {
      bad++;
      continue;
    }
    Ev *e = &ev[t][nev[t]++];
    e->ts = cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(o, "ts"));
    e->dur = cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(o, "dur"));
    snprintf(e->name, sizeof e->name, "%s", name);
    e->batch = (int)cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(args, "batch"));
    e->mb = (int64_t)cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(args, "mb"));
    if (!(e->dur >= 0) || isnan(e->ts)) bad++;
  }
  EXPECT(bad == 0);
  EXPECT(procs == 1 && threads == nsr);
  int total = 0, planned = 0, overlaps = 0, early_sends = 0, late_recvs = 0, mismatched = 0, empty = 0;
  for (int i = 0; i < nsr; i++) {
    const PlanStream *st = &S.st[i / p->w];
    planned += st->n;
    total += nev[i];
    if (nev[i] != st->n) {
      printf("  stage %d replica %d: %d events for %d instructions\n", i / p->w, i % p->w, nev[i], st->n);
      continue;
    }
    /* the same instructions: sorted (label, batch) lists equal */
    Ev *want = calloc((size_t)st->n + 1, sizeof *want), *have = calloc((size_t)st->n + 1, sizeof *have);
    for (int k = 0; k < st->n; k++) {
      label(&st->ins[k], want[k].name, sizeof want[k].name);
      want[k].batch = st->ins[k].batch;
    }
    memcpy(have, ev[i], (size_t)st->n * sizeof *have);
    qsort(want, (size_t)st->n, sizeof *want, by_key);
    qsort(have, (size_t)st->n, sizeof *have, by_key);
    for (int k = 0; k < st->n; k++)
      if (by_key(&want[k], &have[k]) != 0) {
        if (!mismatched++)
          printf("  stage %d replica %d: the trace has %s (batch %d) where the stream has %s (batch %d)\n", i / p->w,
                 i % p->w, have[k].name, have[k].batch, want[k].name, want[k].batch);
      }
    free(want);
    free(have);
    /* ordered on the SR, not overlapping (the instructions of one send/receive group
     * share the group's span: the interpreter waits for them together) */
    Ev *e = ev[i];
    int n = nev[i];
    qsort(e, (size_t)n, sizeof *e, by_ts);
    for (int k = 0; k + 1 < n; k++)
      if (e[k].ts + e[k].dur > e[k + 1].ts + 1e-6 &&
          !(fabs(e[k].ts - e[k + 1].ts) <= 1e-6 && fabs(e[k].dur - e[k + 1].dur) <= 1e-6)) {
        if (!overlaps++)
          printf("  stage %d replica %d: %s [%g, %g] overlaps %s [%g, %g]\n", i / p->w, i % p->w, e[k].name, e[k].ts,
                 e[k].ts + e[k].dur, e[k + 1].name, e[k + 1].ts, e[k + 1].ts + e[k + 1].dur);
      }
    /* a pass runs operations: a positive span on the device's clock */
    for (int k = 0; k < n; k++)
      if ((e[k].name[0] == 'F' || e[k].name[0] == 'B') && !(e[k].dur > 0) && !empty++)
        printf("  stage %d replica %d: %s has no duration on the device's clock\n", i / p->w, i % p->w, e[k].name);
    /* a send's copy after its producer; a received activation before its forward */
    for (int k = 0; k < n; k++) {
      char want_name[64];
      bool send_act = strncmp(e[k].name, "SEND_ACT ", 9) == 0, send_grad = strncmp(e[k].name, "SEND_GRAD ", 10) == 0;
      bool recv_act = strncmp(e[k].name, "RECV_ACT ", 9) == 0;
      if (!send_act && !send_grad && !recv_act) continue;
      const Ev *q = NULL;
      for (int j = 0; j < n && !q; j++) {
        snprintf(want_name, sizeof want_name, "%c%lld v", send_grad ? 'B' : 'F', (long long)e[k].mb);
        if (strncmp(e[j].name, want_name, strlen(want_name)) == 0) q = &e[j];
      }
      if (!q) {
        mismatched++;
        continue;
      }
      if (!recv_act && e[k].ts < q->ts + q->dur - 1e-6) {
        if (!early_sends++)
          printf("  stage %d replica %d: %s starts at %g, before %s ends at %g\n", i / p->w, i % p->w, e[k].name,
                 e[k].ts, q->name, q->ts + q->dur);
      }
      if (recv_act && e[k].ts + e[k].dur > q->ts + 1e-6) late_recvs++;
    }
  }
  printf("  trace %s: %d events for %d instructions of %d stage replicas; %d mismatched, %d overlapping, %d sends "
         "before their producer, %d receives after their forward\n", path, total, planned, nsr, mismatched, overlaps,
         early_sends, late_recvs);
  EXPECT(total == planned);
  EXPECT(empty == 0);
  EXPECT(mismatched == 0);
  EXPECT(overlaps == 0);
  EXPECT(early_sends == 0);
  EXPECT(late_recvs == 0);
  for (int i = 0; i < nsr; i++) free(ev[i]);
  free(ev);
  free(nev);
  plan_streams_free(&S);
  cJSON_Delete(root);
}

/* ---- runs ------------------------------------------------------------------------------ */

static PipePlan *load_plan(const char *name) {
  PipePlan *p = emu_pipe_load(name, 0);
  EXPECT(p != NULL);
  return p;
}

/* `steps` batches of p on the emulated device; trace NULL: none. Status of cx_pipe_train. */
static int train(const PipePlan *p, EmuOrder order, int steps, const char *trace, PipeOutcome *r, char *err,
                 size_t errlen) {
  char data[256];
  emu_path(data, sizeof data, "train.bin");
  CudaDeviceOps ops = emu_device_ops(tmp, order);
  CxOptions o = {.data_path = data, .steps = steps, .quiet = true, .gemm = GEMM_PLAN, .trace_path = trace};
  int rc = cx_pipe_train(p, &ops, &o, r, NULL, err, errlen);
  if (rc) fprintf(stderr, "  %s\n", err);
  return rc;
}

static void test_2bw4(void) {
  enum { STEPS = 3 };
  EXPECT(emu_pipe_make_plan("t2bw4", "--precision fp32 -D clipv=1.0 --stages 4 --replicas 1 --microbatches 4 "
                                    "--schedule 2bw --recompute off"));
  PipePlan *p = load_plan("t2bw4");
  if (!p) return;
  if (p->rt->train.steps == 0) p->rt->train.steps = STEPS;
  char trace[256], err[RT_ERR_LEN];
  emu_path(trace, sizeof trace, "t2bw4.trace.json");
  PipeOutcome on, off;
  double t0 = emu_now_s();
  EXPECT(train(p, EMU_HIGHEST_FIRST, STEPS, trace, &on, err, sizeof err) == 0);
  EXPECT(train(p, EMU_HIGHEST_FIRST, STEPS, NULL, &off, err, sizeof err) == 0);
  printf("  t2bw4: two runs of %d steps, %.1f s\n", STEPS, emu_now_s() - t0);
  check_trace(p, trace, STEPS);
  /* the trace changes the device's work (event records) but not one bit of the results */
  int64_t nl = (on.steps - on.first_step) * on.mb_per_step;
  EXPECT(nl > 0 && nl == (off.steps - off.first_step) * off.mb_per_step);
  EXPECT(memcmp(on.mb_loss, off.mb_loss, (size_t)nl * sizeof(double)) == 0);
  EXPECT(on.nparams == off.nparams && on.nparams > 0);
  int same = 0;
  for (int k = 0; k < on.nparams && k < off.nparams; k++)
    same += memcmp(on.weights[k], off.weights[k], (size_t)on.numel[k] * 4) == 0;
  EXPECT(same == on.nparams);
  for (int s = 0; s < p->d; s++) {
    printf("  stage %d: measured bubble %.3f (emulator clock)\n", s, on.bubble[s]);
    EXPECT(on.bubble[s] >= 0 && on.bubble[s] < 1);
  }
  pipe_outcome_free(&on);
  pipe_outcome_free(&off);
  pipe_plan_free(p);
}

/* The plan's report.html after the run (runtime/report/plan_report.h): its embedded data
 * holds the run's losses and the trace in single-GPU form (a thread per replica). */
static void check_report(const char *dir, const PipeOutcome *r, int steps) {
  char path[300], ierr[IO_ERR_LEN];
  snprintf(path, sizeof path, "%s/report.html", dir);
  size_t len;
  char *page = io_read_all(path, &len, ierr, sizeof ierr);
  EXPECT(page != NULL);
  if (!page) return;
  const char *mark = "id=\"pd2bw-data\">", *open = strstr(page, mark);
  const char *close = open ? strstr(open, "</script>") : NULL;
  EXPECT(open && close);
  size_t m = strlen(mark);
  cJSON *d = open && close ? cJSON_ParseWithLength(open + m, (size_t)(close - open) - m) : NULL;
  const cJSON *run = cJSON_GetObjectItemCaseSensitive(d, "run");
  const cJSON *losses = cJSON_GetObjectItemCaseSensitive(run, "losses");
  const cJSON *trace = cJSON_GetObjectItemCaseSensitive(run, "trace");
  EXPECT(cJSON_GetArraySize(losses) == steps);
  for (int k = 0; k < steps && k < cJSON_GetArraySize(losses); k++)
    EXPECT(cJSON_GetArrayItem(losses, k)->valuedouble == r->step_loss[k]);
  EXPECT(cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(trace, "events")) > 0);
  const cJSON *t = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(trace, "threads"), "0:3");
  EXPECT(cJSON_IsString(t) && strcmp(t->valuestring, "stage 1 replica 1") == 0);
  cJSON_Delete(d);
  free(page);
}

/* Through cx_pipe_main, as pd2bwrun --backend cuda --trace runs it. */
static void test_2bw2(void) {
  enum { STEPS = 3 };
  EXPECT(emu_pipe_make_plan("t2bw2", "--precision fp32 --stages 2 --replicas 2 --microbatches 2 --schedule 2bw "
                                    "--recompute off"));
  char dir[256], data[256], trace[256];
  emu_path(dir, sizeof dir, "t2bw2");
  emu_path(data, sizeof data, "train.bin");
  emu_path(trace, sizeof trace, "t2bw2.trace.json");
  CudaDeviceOps ops = emu_device_ops(tmp, EMU_LOWEST_FIRST);
  CxOptions o = {.data_path = data, .steps = STEPS, .gemm = GEMM_PLAN, .trace_path = trace};
  EXPECT(cx_pipe_main("test_cudapipe_trace", dir, &ops, "emulated", &o, NULL) == 0);
  PipePlan *p = load_plan("t2bw2");
  if (!p) return;
  check_trace(p, trace, STEPS);
  EXPECT(cx_pipe_predicted_bubble(dir) >= 0);
  /* the run's own losses, to compare with the report's (the emulator is deterministic) */
  PipeOutcome r;
  char err[RT_ERR_LEN];
  EXPECT(train(p, EMU_LOWEST_FIRST, STEPS, NULL, &r, err, sizeof err) == 0);
  check_report(dir, &r, STEPS);
  pipe_outcome_free(&r);
  pipe_plan_free(p);
}

/* Files in the work directory whose names start with `prefix`. */
static int files_named(const char *prefix) {
  DIR *d = opendir(tmp);
  int n = 0;
  for (struct dirent *e; d && (e = readdir(d));) n += strncmp(e->d_name, prefix, strlen(prefix)) == 0;
  if (d) closedir(d);
  return n;
}

static void test_errors(void) {
  EXPECT(emu_pipe_make_plan("terr", "--precision fp32 --stages 2 --replicas 1 --microbatches 4 --schedule 2bw"));
  PipePlan *p = load_plan("terr");
  if (!p) return;
  char bad[300], err[RT_ERR_LEN] = "", dir[256], data[256];
  emu_path(bad, sizeof bad, "train.bin/t.json"); /* its directory is a file */
  PipeOutcome r;
  EXPECT(train(p, EMU_IN_ORDER, 1, bad, &r, err, sizeof err) == 1);
  printf("  unwritable trace: %s\n", err);
  EXPECT(strstr(err, "train.bin/t.json") != NULL);
  pipe_outcome_free(&r);
  /* the same through cx_pipe_main: status 1, nothing written next to the data */
  emu_path(dir, sizeof dir, "terr");
  emu_path(data, sizeof data, "train.bin");
  CudaDeviceOps ops = emu_device_ops(tmp, EMU_IN_ORDER);
  CxOptions o = {.data_path = data, .steps = 1, .quiet = true, .gemm = GEMM_PLAN, .trace_path = bad};
  EXPECT(cx_pipe_main("test_cudapipe_trace", dir, &ops, "emulated", &o, NULL) == 1);
  EXPECT(files_named("train.bin") == 1);
  /* a good path: the file and nothing else (no temporary left) */
  char good[300];
  emu_path(good, sizeof good, "terr.trace.json");
  EXPECT(train(p, EMU_IN_ORDER, 1, good, &r, err, sizeof err) == 0);
  pipe_outcome_free(&r);
  EXPECT(files_named("terr.trace.json") == 1);
  /* multi-GPU mode times nothing: refused before MPI starts */
  o.trace_path = good;
  o.nccl = true;
  EXPECT(cx_pipe_nccl_launch("test_cudapipe_trace", dir, &o) == 1);
  pipe_plan_free(p);
}

int main(int argc, char **argv) {
  const char *part =
      emu_test_begin(argc, argv, true, "usage: test_cudapipe_trace PD2BWC [all|2bw4|2bw2|errors]", tmp);
  if (!part) return 2;
  EXPECT(emu_pipe_files());
  if (emu_test_part(part, "2bw4")) RUN(test_2bw4);
  if (emu_test_part(part, "2bw2")) RUN(test_2bw2);
  if (emu_test_part(part, "errors")) RUN(test_errors);
  emu_test_end();
  return TEST_REPORT();
}
