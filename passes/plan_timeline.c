/* passes/plan_timeline.c — the simulated timeline as a Chrome trace (timeline.json,
 * open in chrome://tracing or Perfetto: one process per stage, threads "compute" and
 * "communication") and as a self-contained SVG (one lane per stage, compute on top,
 * communication underneath).
 */
#include "passes/planner.h"

#include <cjson/cJSON.h>
#include <inttypes.h>
#include <string.h>

static const char *event_label(const PlanEvent *e, char *buf, size_t n) {
  switch (e->op) {
  case PI_FWD: snprintf(buf, n, "F%" PRId64, e->mb); break;
  case PI_BWD: snprintf(buf, n, "B%" PRId64, e->mb); break;
  case PI_OPT_STEP: snprintf(buf, n, "step %d", e->batch); break;
  case PI_ALLREDUCE: snprintf(buf, n, "allreduce %d", e->batch); break;
  case PI_TIED_SYNC: snprintf(buf, n, "tied sync %d", e->batch); break;
  case PI_RECV_ACT:
  case PI_SEND_ACT:
  case PI_RECV_GRAD:
  case PI_SEND_GRAD: snprintf(buf, n, "%s %" PRId64, plan_op_name(e->op), e->mb); break;
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
    cJSON_AddStringToObject(o, "name", event_label(e, label, sizeof label));
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

static const char *color(PlanOp op) {
  switch (op) {
  case PI_FWD: return "#4e79a7";
  case PI_BWD: return "#59a14f";
  case PI_OPT_STEP: return "#e15759";
  case PI_ALLREDUCE: return "#f28e2b";
  case PI_TIED_SYNC: return "#b07aa1";
  case PI_RECV_ACT:
  case PI_SEND_ACT:
  case PI_RECV_GRAD:
  case PI_SEND_GRAD:
  case PI_COUNT: break;
  }
  return "#bab0ac";
}

/* A rect being extended: at 1024-device scale a microbatch is well under a pixel,
 * so neighbouring events of one colour within half a pixel (any events under a
 * pixel wide, within two) merge into one rect and
 * the picture shows busy and idle spans instead of a million slivers. */
typedef struct Span {
  double x0, x1;
  const char *color;
  const PlanEvent *first;
  int n;
} Span;

static void span_flush(FILE *f, Span *sp, int y, int h) {
  if (!sp->n) return;
  const PlanEvent *e = sp->first;
  char label[64];
  event_label(e, label, sizeof label);
  double w = sp->x1 - sp->x0 < 0.25 ? 0.25 : sp->x1 - sp->x0;
  fprintf(f, "<rect x=\"%.2f\" y=\"%d\" width=\"%.2f\" height=\"%d\" fill=\"%s\">"
          "<title>stage %d %s%s</title></rect>\n",
          sp->x0, y, w, h, sp->color, e->stage, label, sp->n > 1 ? " and following" : "");
  if (sp->n == 1 && !e->track && w > 16 && (e->op == PI_FWD || e->op == PI_BWD))
    fprintf(f, "<text x=\"%.2f\" y=\"%d\" fill=\"white\" text-anchor=\"middle\">%" PRId64
            "</text>\n", sp->x0 + w / 2, y + 14, e->mb);
  sp->n = 0;
}

void plan_timeline_svg(const Plan *p, FILE *f) {
  const int left = 80, width = 1200, top = 40;
  int d = p->cfg.stages;
  int lane = d > 64 ? 12 : 34;
  double total = p->sim.total_s > 0 ? p->sim.total_s : 1;
  double sx = (width - left - 20) / total;
  int height = top + d * lane + 40;
  fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
          "font-family=\"sans-serif\" font-size=\"10\">\n", width, height);
  fprintf(f, "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n");
  fprintf(f, "<text x=\"%d\" y=\"20\" font-size=\"13\">%s: %s, d=%d w=%d b=%" PRId64
          " m=%" PRId64 ", %.4g s per batch, bubble %.1f%% (blue forward, green backward, "
          "red step, orange all-reduce, grey communication, teal a mix too fine to draw)</text>\n",
          left, p->in.name, plan_schedule_name(p->cfg.schedule), d, p->cfg.replicas,
          p->cfg.microbatch_size, p->cfg.microbatches, p->sim.step_time_s,
          100 * p->sim.bubble_fraction);
  for (int s = 0; s < d; s++)
    if (lane >= 20 || s % 8 == 0)
      fprintf(f, "<text x=\"4\" y=\"%d\">stage %d</text>\n", top + s * lane + lane / 2 + 4, s);
  Span *spans = pd_calloc((size_t)d * 2, sizeof *spans);
  int ch = lane * 6 / 10, cm = lane - ch - 2;
  for (int i = 0; i < p->sim.nevents; i++) {
    const PlanEvent *e = &p->sim.events[i];
    double x0 = left + e->start * sx, x1 = left + e->end * sx;
    if (x1 <= x0) continue;
    Span *sp = &spans[e->stage * 2 + e->track];
    int y = top + e->stage * lane + (e->track ? ch + 1 : 0), h = e->track ? cm : ch;
    const char *col = color(e->op);
    bool narrow = x1 - x0 < 1.0;
    if (sp->n && x0 <= sp->x1 + (narrow ? 2.0 : 0.5) && (sp->color == col || narrow)) {
      if (x1 > sp->x1) sp->x1 = x1;
      if (sp->color != col) sp->color = "#76b7b2"; /* mixed: forwards and backwards */
      sp->n++;
      continue;
    }
    span_flush(f, sp, y, h);
    *sp = (Span){x0, x1, col, e, 1};
  }
  for (int s = 0; s < d; s++)
    for (int t = 0; t < 2; t++)
      span_flush(f, &spans[s * 2 + t], top + s * lane + (t ? ch + 1 : 0), t ? cm : ch);
  free(spans);
  int ay = top + d * lane + 10;
  fprintf(f, "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"black\"/>\n", left, ay,
          width - 20, ay);
  for (int t = 0; t <= 10; t++) {
    double x = left + t * (width - left - 20) / 10.0;
    fprintf(f, "<text x=\"%.2f\" y=\"%d\" text-anchor=\"middle\">%.4g s</text>\n", x, ay + 14,
            total * t / 10);
  }
  fprintf(f, "</svg>\n");
}
