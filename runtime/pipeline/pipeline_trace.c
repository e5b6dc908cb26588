/* runtime/pipeline/pipeline_trace.c — what the ranks did, measured: the Chrome trace
 * (--trace; the same form as the simulator's timeline.json, one process per rank,
 * thread 0 compute, thread 1 communication; or, for single-GPU pipeline mode,
 * pipe_trace_write_gpu: one process, one thread per stage replica, whose stream
 * and communication-stream work never overlap), the step time and bubble fraction over
 * the simulator's window, and measured compute times per segment in the profile
 * format that `pd2bwc --profile` reads (docs/plan-format.md), for both backends. */
#include "runtime/pipeline/pipeline_rank.h"

#include <cjson/cJSON.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

static bool is_compute(int op) { return op == PI_FWD || op == PI_BWD || op == PI_OPT_STEP; }

static const char *label(const PipeEvent *e, char *buf, size_t n) {
  switch ((PlanOp)e->op) {
  case PI_FWD: snprintf(buf, n, "F%" PRId64 " v%d", e->mb, e->version); break;
  case PI_BWD: snprintf(buf, n, "B%" PRId64 " v%d", e->mb, e->version); break;
  case PI_OPT_STEP: snprintf(buf, n, e->group >= 0 ? "step %d (tied)" : "step %d", e->batch); break;
  case PI_ALLREDUCE: snprintf(buf, n, "allreduce %d", e->batch); break;
  case PI_TIED_SYNC: snprintf(buf, n, "tied sync %d", e->batch); break;
  case PI_RECV_ACT:
  case PI_SEND_ACT:
  case PI_RECV_GRAD:
  case PI_SEND_GRAD: snprintf(buf, n, "%s %" PRId64, plan_op_name((PlanOp)e->op), e->mb); break;
  case PI_COUNT: snprintf(buf, n, "?"); break;
  }
  return buf;
}

static double t_origin(const PipeEvent *ev, int64_t n) {
  double t0 = 1e300;
  for (int64_t i = 0; i < n; i++)
    if (ev[i].start < t0) t0 = ev[i].start;
  return n ? t0 : 0;
}

static cJSON *meta(const char *what, int pid, int tid, const char *name) {
  cJSON *m = cJSON_CreateObject();
  cJSON_AddStringToObject(m, "name", what);
  cJSON_AddStringToObject(m, "ph", "M");
  cJSON_AddNumberToObject(m, "pid", pid);
  if (tid >= 0) cJSON_AddNumberToObject(m, "tid", tid);
  cJSON_AddStringToObject(cJSON_AddObjectToObject(m, "args"), "name", name);
  return m;
}

/* The events and the file; gpu: pid 0, tid = stage·w + replica (else the ranks'). */
static bool trace_write(const PipePlan *p, const PipeEvent *ev, int64_t n, bool gpu, cJSON *root, const char *path,
                        char *err, size_t errlen) {
  cJSON *arr = cJSON_GetObjectItemCaseSensitive(root, "traceEvents");
  double t0 = t_origin(ev, n);
  for (int64_t i = 0; i < n; i++) {
    const PipeEvent *e = &ev[i];
    char lb[64];
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "name", label(e, lb, sizeof lb));
    cJSON_AddStringToObject(o, "cat", is_compute(e->op) ? "compute" : "communication");
    cJSON_AddStringToObject(o, "ph", "X");
    cJSON_AddNumberToObject(o, "pid", gpu ? 0 : p->st[e->stage].rank_of_replica[e->replica]);
    cJSON_AddNumberToObject(o, "tid", gpu ? e->stage * p->w + e->replica : is_compute(e->op) ? 0 : 1);
    cJSON_AddNumberToObject(o, "ts", (e->start - t0) * 1e6);
    cJSON_AddNumberToObject(o, "dur", (e->end - e->start) * 1e6);
    cJSON *a = cJSON_AddObjectToObject(o, "args");
    cJSON_AddNumberToObject(a, "mb", (double)e->mb);
    cJSON_AddNumberToObject(a, "batch", e->batch);
    cJSON_AddNumberToObject(a, "version", e->version);
    cJSON_AddItemToArray(arr, o);
  }
  cJSON_AddStringToObject(root, "displayTimeUnit", "ms");
  char *text = cJSON_Print(root);
  cJSON_Delete(root);
  bool ok = atomic_write_text(path, text, err, errlen);
  free(text);
  return ok;
}

bool pipe_trace_write_gpu(const PipePlan *p, const PipeEvent *ev, int64_t n, const char *path, char *err,
                          size_t errlen) {
  cJSON *root = cJSON_CreateObject();
  cJSON *arr = cJSON_AddArrayToObject(root, "traceEvents");
  char name[64];
  cJSON_AddItemToArray(arr, meta("process_name", 0, -1, "GPU (single-GPU pipeline mode)"));
  for (int s = 0; s < p->d; s++)
    for (int r = 0; r < p->w; r++) {
      snprintf(name, sizeof name, "stage %d replica %d", s, r);
      cJSON_AddItemToArray(arr, meta("thread_name", 0, s * p->w + r, name));
    }
  return trace_write(p, ev, n, true, root, path, err, errlen);
}

bool pipe_trace_write(const PipePlan *p, const PipeEvent *ev, int64_t n, const char *path, char *err,
                      size_t errlen) {
  cJSON *root = cJSON_CreateObject();
  cJSON *arr = cJSON_AddArrayToObject(root, "traceEvents");
  for (int rk = 0; rk < p->nranks; rk++) {
    char name[64];
    snprintf(name, sizeof name, "stage %d replica %d (rank %d)", p->rank_stage[rk], p->rank_replica[rk], rk);
    cJSON_AddItemToArray(arr, meta("process_name", rk, -1, name));
    for (int t = 0; t < 2; t++) cJSON_AddItemToArray(arr, meta("thread_name", rk, t, t ? "communication" : "compute"));
  }
  return trace_write(p, ev, n, false, root, path, err, errlen);
}

static int cmp_double(const void *x, const void *y) {
  double a = *(const double *)x, b = *(const double *)y;
  return (a > b) - (a < b);
}

double pipe_median(double *v, int64_t n) {
  if (n <= 0) return 0;
  qsort(v, (size_t)n, sizeof *v, cmp_double);
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* The step time is the median of stage 0 (replica 0)'s update-to-update times over
 * the whole run after its first step (which fills the pipeline), so a slow start or
 * a loaded stretch does not decide it; the bubble window is the same span. A run of
 * one step: the whole run. */
void pipe_measure(const PipePlan *p, const PipeEvent *ev, int64_t n, int64_t first, int64_t steps,
                  double *step_time, double *bubble) {
  int64_t nb = steps - first > 0 ? steps - first : 0;
  double *end = pd_malloc((size_t)(nb + 1) * sizeof *end); /* end[k]: batch first + k */
  for (int64_t k = 0; k < nb; k++) end[k] = -1;
  for (int64_t i = 0; i < n; i++)
    if (ev[i].op == PI_OPT_STEP && ev[i].group < 0 && ev[i].stage == 0 && ev[i].replica == 0 &&
        ev[i].batch >= first && ev[i].batch < steps)
      end[ev[i].batch - first] = ev[i].end;
  double *dur = pd_malloc((size_t)(nb + 1) * sizeof *dur);
  int64_t nd = 0;
  for (int64_t k = 1; k < nb; k++)
    if (end[k - 1] >= 0 && end[k] > end[k - 1]) dur[nd++] = end[k] - end[k - 1];
  double a, b;
  if (nd > 0) {
    *step_time = pipe_median(dur, nd);
    a = -1, b = -1; /* the first and last update found */
    for (int64_t k = 0; k < nb; k++)
      if (end[k] >= 0) b = end[k], a = a < 0 ? end[k] : a;
  } else { /* too short a run: the whole of it */
    a = t_origin(ev, n);
    b = a;
    for (int64_t i = 0; i < n; i++)
      if (ev[i].end > b) b = ev[i].end;
    *step_time = (b - a) / (double)(nb > 0 ? nb : 1);
  }
  free(end), free(dur);
  for (int s = 0; s < p->d; s++) {
    double busy = 0;
    for (int64_t i = 0; i < n; i++) {
      const PipeEvent *e = &ev[i];
      if (e->stage != s || !is_compute(e->op)) continue;
      double x0 = e->start > a ? e->start : a, x1 = e->end < b ? e->end : b;
      if (x1 > x0) busy += x1 - x0;
    }
    busy /= (double)p->w;
    bubble[s] = b > a ? 1 - busy / (b - a) : 0;
    if (bubble[s] < 0) bubble[s] = 0;
  }
}


/* The median of segment q's column of n rows (0 when there are none). */
static double seg_median(const double *rows, int64_t n, int nsegs, int q) {
  if (!n) return 0;
  double *col = pd_malloc((size_t)n * sizeof(double));
  for (int64_t i = 0; i < n; i++) col[i] = rows[i * nsegs + q];
  double m = pipe_median(col, n);
  free(col);
  return m;
}

/* Each segment's own median time per pass (runtime/exec/seg_times.h: the median, so
 * that a pass the OS preempted does not count as a slower segment), named as plan.json
 * names the stage's segments, in pd2bwc --profile's "segments" form. */
bool pipe_profile_write(const PipePlan *p, const SegTimes *seg, const char *backend, const char *path, char *err,
                        size_t errlen) {
  for (int s = 0; s < p->d; s++)
    if (seg[s].nsegs != p->st[s].nsegs) {
      snprintf(err, errlen, "--profile-out %s: stage %d's program has %d segments, plan.json names %d (the plan "
               "was edited or mixed)", path, s, seg[s].nsegs, p->st[s].nsegs);
      return false;
    }
  cJSON *root = cJSON_CreateObject();
  cJSON_AddNumberToObject(root, "version", 1);
  cJSON_AddNumberToObject(root, "microbatch_size", (double)p->b);
  char note[160];
  snprintf(note, sizeof note, "measured by pd2bwrun --backend %s: each segment's own median time per pass, over the "
           "training passes after the first step", backend);
  cJSON_AddStringToObject(root, "note", note);
  cJSON *segs = cJSON_AddArrayToObject(root, "segments");
  for (int s = 0; s < p->d; s++)
    for (int q = 0; q < p->st[s].nsegs; q++) {
      const SegTimes *t = &seg[s];
      cJSON *o = cJSON_CreateObject();
      cJSON_AddStringToObject(o, "name", p->st[s].seg_names[q]);
      cJSON_AddNumberToObject(o, "forward_s", seg_median(t->fwd, t->nfwd, t->nsegs, q));
      cJSON_AddNumberToObject(o, "backward_s", seg_median(t->bwd, t->nbwd, t->nsegs, q));
      cJSON_AddItemToArray(segs, o);
    }
  char *text = cJSON_Print(root);
  cJSON_Delete(root);
  bool ok = atomic_write_text(path, text, err, errlen);
  free(text);
  return ok;
}
