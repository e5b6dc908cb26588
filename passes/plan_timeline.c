/* passes/plan_timeline.c — the simulated timeline as a Chrome trace (timeline.json,
 * open in chrome://tracing or Perfetto: one process per stage, threads "compute" and
 * "communication"). The SVG picture is plan_timeline_svg.c.
 */
#include "passes/planner.h"

#include <cjson/cJSON.h>
#include <inttypes.h>
#include <string.h>

const char *plan_event_label(const PlanEvent *e, char *buf, size_t n) {
  switch (e->op) {
  case PI_FWD: snprintf(buf, n, "F%" PRId64, e->mb); break;
  case PI_BWD: snprintf(buf, n, "B%" PRId64, e->mb); break;
  case PI_OPT_STEP:
    snprintf(buf, n, e->wait ? "wait for tied sum %d" : "step %d", e->batch);
    break;
  case PI_ALLREDUCE: snprintf(buf, n, "allreduce %d", e->batch); break;
  case PI_TIED_SYNC: snprintf(buf, n, "tied sync %d", e->batch); break;
  case PI_RECV_ACT:
  case PI_SEND_ACT:
  case PI_RECV_GRAD:
  case PI_SEND_GRAD:
    snprintf(buf, n, "%s%s %" PRId64, e->wait ? "wait: " : "", plan_op_name(e->op), e->mb);
    break;
  case PI_COUNT: snprintf(buf, n, "?"); break;
  }
  return buf;
}

#define PLAN_TRACE_MAX 100000

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

cJSON *plan_timeline_json(const Plan *p) {
  cJSON *root = cJSON_CreateObject();
  cJSON *ev = cJSON_AddArrayToObject(root, "traceEvents");
  for (int s = 0; s < p->cfg.stages; s++) {
    char name[32];
    cJSON *m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "name", "process_name");
    cJSON_AddStringToObject(m, "ph", "M");
    cJSON_AddNumberToObject(m, "pid", s);
    snprintf(name, sizeof name, "stage %d", s);
    cJSON_AddStringToObject(cJSON_AddObjectToObject(m, "args"), "name", name);
    cJSON_AddItemToArray(ev, m);
    for (int t = 0; t < 2; t++) {
      m = cJSON_CreateObject();
      cJSON_AddStringToObject(m, "name", "thread_name");
      cJSON_AddStringToObject(m, "ph", "M");
      cJSON_AddNumberToObject(m, "pid", s);
      cJSON_AddNumberToObject(m, "tid", t);
      cJSON_AddStringToObject(cJSON_AddObjectToObject(m, "args"), "name",
                              t ? "communication" : "compute");
      cJSON_AddItemToArray(ev, m);
    }
  }
  /* A trace viewer chokes on millions of events (and the file takes long to write):
   * past PLAN_TRACE_MAX events only the earliest ones go in, warm-up and the first
   * steady batches, which is what the trace is for. */
  double cut = 1e300;
  if (p->sim.nevents > PLAN_TRACE_MAX) {
    double *st = pd_malloc((size_t)p->sim.nevents * sizeof(double));
    for (int i = 0; i < p->sim.nevents; i++) st[i] = p->sim.events[i].start;
    qsort(st, (size_t)p->sim.nevents, sizeof *st, cmp_double);
    cut = st[PLAN_TRACE_MAX];
    free(st);
    cJSON *meta = cJSON_AddObjectToObject(root, "otherData");
    cJSON_AddNumberToObject(meta, "truncated_at_s", cut);
    cJSON_AddNumberToObject(meta, "events_total", p->sim.nevents);
  }
  for (int i = 0; i < p->sim.nevents; i++) {
    const PlanEvent *e = &p->sim.events[i];
    if (e->start >= cut) continue;
    char label[64];
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "name", plan_event_label(e, label, sizeof label));
    cJSON_AddStringToObject(o, "cat", e->track ? "communication" : "compute");
    cJSON_AddStringToObject(o, "ph", "X");
    cJSON_AddNumberToObject(o, "pid", e->stage);
    cJSON_AddNumberToObject(o, "tid", e->track);
    cJSON_AddNumberToObject(o, "ts", e->start * 1e6);
    cJSON_AddNumberToObject(o, "dur", (e->end - e->start) * 1e6);
    cJSON *a = cJSON_AddObjectToObject(o, "args");
    cJSON_AddNumberToObject(a, "mb", (double)e->mb);
    cJSON_AddNumberToObject(a, "batch", e->batch);
    cJSON_AddNumberToObject(a, "instruction", e->instr);
    cJSON_AddItemToArray(ev, o);
  }
  cJSON_AddStringToObject(root, "displayTimeUnit", "ms");
  return root;
}
