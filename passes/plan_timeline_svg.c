/* passes/plan_timeline_svg.c — timeline.svg: the simulated run as a picture that stays
 * readable from 2 stages to hundreds and from 4 microbatches to hundreds.
 *
 * From the top: a title and a legend, both fitted to the width; an overview strip of
 * the whole run (one thin row per stage, compute and waits, spans under a pixel merged)
 * with the window marked; the window, a few batches of the steady state at a scale
 * where each forward and backward is a block of its own: one lane per stage, compute on
 * top and communication underneath, blocks one pixel apart (so neighbours never merge
 * into one bar), microbatch numbers where they fit, and a time axis.
 *
 * Every element a reader (or tests/planner/test_timeline.c) looks for is on its own
 * line with a class: text "title"/"key", groups "legend", "overview", "window" (with
 * data-t0/data-t1, seconds), "lane" (data-stage, data-track), rects "ov KIND" and
 * "blk KIND", where KIND is fwd, bwd, step, allreduce, tied, comm, wait or mix.
 */
#include "passes/planner.h"

#include <inttypes.h>
#include <string.h>

enum { WIDTH = 1200, LEFT = 70, RIGHT = 20, PLOT = WIDTH - LEFT - RIGHT };
#define CHAR_EM 0.6 /* a generous average glyph width, in em, for fitting text */

typedef enum Kind { K_FWD, K_BWD, K_STEP, K_ALLREDUCE, K_TIED, K_COMM, K_WAIT, K_MIX, K_N } Kind;

static const struct {
  const char *cls, *color, *legend;
} kinds[K_N] = {
    {"fwd", "#4e79a7", "forward"},           {"bwd", "#59a14f", "backward"},
    {"step", "#e15759", "optimizer step"},   {"allreduce", "#f28e2b", "all-reduce"},
    {"tied", "#b07aa1", "tied sync"},        {"comm", "#bab0ac", "send / receive"},
    {"wait", "#ffffff", "wait (for a peer, a tied sum)"}, {"mix", "#76b7b2", "several, too short to draw"},
};

static Kind kind_of(const PlanEvent *e) {
  if (e->wait) return K_WAIT;
  switch (e->op) {
  case PI_FWD: return K_FWD;
  case PI_BWD: return K_BWD;
  case PI_OPT_STEP: return K_STEP;
  case PI_ALLREDUCE: return K_ALLREDUCE;
  case PI_TIED_SYNC: return K_TIED;
  case PI_RECV_ACT:
  case PI_SEND_ACT:
  case PI_RECV_GRAD:
  case PI_SEND_GRAD:
  case PI_COUNT: break;
  }
  return K_COMM;
}

/* A wait is an outline (nothing is computed), everything else a filled block. */
static void rect(FILE *f, const char *prefix, Kind k, double x, double y, double w, double h,
                 const char *tip) {
  fprintf(f, "<rect class=\"%s %s\" x=\"%.2f\" y=\"%.2f\" width=\"%.2f\" height=\"%.2f\" ", prefix,
          kinds[k].cls, x, y, w, h);
  if (k == K_WAIT)
    fprintf(f, "fill=\"%s\" stroke=\"#79706e\" stroke-width=\"0.6\" stroke-dasharray=\"2,1\"",
            kinds[k].color);
  else
    fprintf(f, "fill=\"%s\"", kinds[k].color);
  if (tip) fprintf(f, "><title>%s</title></rect>\n", tip);
  else fprintf(f, "/>\n");
}

/* Text cut (with an ellipsis) to what fits between x and the right edge; escaped. */
static void text(FILE *f, const char *cls, double x, double y, int size, const char *s) {
  int fit = (int)((WIDTH - 4 - x) / (size * CHAR_EM)), n = (int)strlen(s);
  fprintf(f, "<text class=\"%s\" x=\"%.2f\" y=\"%.2f\" font-size=\"%d\">", cls, x, y, size);
  int keep = n <= fit ? n : fit - 1;
  for (int i = 0; i < keep && i < n; i++) {
    switch (s[i]) {
    case '<': fputs("&lt;", f); break;
    case '>': fputs("&gt;", f); break;
    case '&': fputs("&amp;", f); break;
    default: fputc(s[i], f);
    }
  }
  fprintf(f, "%s</text>\n", n <= fit ? "" : "\xe2\x80\xa6");
}

/* Events by (stage, start): a stage runs one instruction at a time, so one stage's
 * events never overlap and this order is also each track's time order. */
typedef struct Key {
  int stage, index;
  double start;
} Key;

static int by_stage_start(const void *a, const void *b) {
  const Key *x = a, *y = b;
  if (x->stage != y->stage) return x->stage - y->stage;
  if (x->start != y->start) return (x->start > y->start) - (x->start < y->start);
  return x->index - y->index; /* a zero-length event first, as recorded */
}

typedef struct Span {
  double x0, x1;
  Kind k;
  const PlanEvent *first;
  int n;
} Span;

/* The overview: a span under a pixel swallows its neighbours (as "mix" if they
 * differ); same-kind neighbours within half a pixel join. */
static void overview_row(FILE *f, const Plan *p, const int *idx, int lo, int hi, double y,
                         double h, double sx) {
  Span sp = {0};
  for (int i = lo; i <= hi; i++) {
    const PlanEvent *e = i < hi ? &p->sim.events[idx[i]] : NULL;
    /* compute, all-reduces and the tied step's wait; transfers and their waits: see the
     * window (at hundreds of stages they would cover the compute) */
    if (e && e->track && (kind_of(e) == K_COMM || (e->wait && e->op != PI_OPT_STEP))) continue;
    double x0 = e ? LEFT + e->start * sx : 0, x1 = e ? LEFT + e->end * sx : 0;
    if (e && sp.n && x0 <= sp.x1 + 0.5 &&
        (kind_of(e) == sp.k || (x1 - x0 < 1 && sp.x1 - sp.x0 < 1))) {
      if (kind_of(e) != sp.k) sp.k = K_MIX;
      if (x1 > sp.x1) sp.x1 = x1;
      sp.n++;
      continue;
    }
    if (sp.n) rect(f, "ov", sp.k, sp.x0, y, sp.x1 - sp.x0 < 0.3 ? 0.3 : sp.x1 - sp.x0, h, NULL);
    if (e) sp = (Span){x0, x1, kind_of(e), e, 1};
  }
}

/* One lane of the window: adjacent events narrower than 1.5 px join into one span
 * ("mix" if they differ); each span is drawn one pixel short of its end and never
 * before the previous one's end plus a pixel, so consecutive blocks stay apart. */
static void window_lane(FILE *f, const Plan *p, const int *idx, int lo, int hi, int track,
                        double t0, double t1, double y, double h, double sx) {
  Span sp = {0};
  double cursor = 0; /* where the next block may start */
  for (int i = lo; i <= hi; i++) {
    const PlanEvent *e = i < hi ? &p->sim.events[idx[i]] : NULL;
    if (e && (e->track != track || e->end <= t0 || e->start >= t1)) continue;
    double x0 = 0, x1 = 0;
    if (e) {
      x0 = LEFT + ((e->start > t0 ? e->start : t0) - t0) * sx;
      x1 = LEFT + ((e->end < t1 ? e->end : t1) - t0) * sx;
      if (sp.n && sp.x1 - sp.x0 < 1.5 && x1 - x0 < 1.5 && x0 - sp.x1 < 1) {
        if (kind_of(e) != sp.k) sp.k = K_MIX;
        sp.x1 = x1;
        sp.n++;
        continue;
      }
    }
    if (sp.n) {
      double x = sp.x0 > cursor ? sp.x0 : cursor, w = sp.x1 - 1 - x;
      if (w < 0.4) w = 0.4;
      cursor = x + w + 1;
      char tip[96], label[64];
      plan_event_label(sp.first, label, sizeof label);
      snprintf(tip, sizeof tip, "stage %d %s%s", sp.first->stage, label,
               sp.n > 1 ? " and following" : "");
      rect(f, "blk", sp.k, x, y, w, h, tip);
      char mb[24];
      snprintf(mb, sizeof mb, "%" PRId64, sp.first->mb);
      if (sp.n == 1 && (sp.k == K_FWD || sp.k == K_BWD) && w >= strlen(mb) * 9 * CHAR_EM + 2 &&
          h >= 10)
        fprintf(f, "<text x=\"%.2f\" y=\"%.2f\" font-size=\"9\" fill=\"white\" "
                "text-anchor=\"middle\">%s</text>\n", x + w / 2, y + h / 2 + 3, mb);
    }
    if (e) sp = (Span){x0, x1, kind_of(e), e, 1};
  }
}

/* The window: from stage 0's step of batch 1 (the first steady batch), as many batches
 * as leave a microbatch's forward and backward 12 px together, one to three. */
static void pick_window(const Plan *p, double *t0, double *t1, int *nb) {
  const PlanSimResult *r = &p->sim;
  *t0 = 0, *t1 = r->total_s, *nb = p->streams.spec.nbatches;
  if (r->step_time_s <= 0 || r->window_end_s <= r->window_start_s) return;
  int n = (int)(PLOT / (12.0 * (double)p->cfg.microbatches));
  n = n < 1 ? 1 : n > 3 ? 3 : n;
  int steady = (int)((r->window_end_s - r->window_start_s) / r->step_time_s + 0.5);
  if (n > steady && steady >= 1) n = steady;
  *t0 = r->window_start_s, *t1 = *t0 + n * r->step_time_s, *nb = n;
  if (*t1 > r->total_s) *t1 = r->total_s;
}

void plan_timeline_svg(const Plan *p, FILE *f) {
  int d = p->cfg.stages, ne = p->sim.nevents;
  double total = p->sim.total_s > 0 ? p->sim.total_s : 1, t0, t1;
  int nwin;
  pick_window(p, &t0, &t1, &nwin);
  int lane = d > 64 ? 12 : d > 32 ? 20 : 34, ch = lane * 6 / 10, cm = lane - ch - 2;
  double oh = 96.0 / d > 8 ? 8 : 96.0 / d < 1 ? 1 : 96.0 / d; /* overview row height */
  /* legend layout first: its rows decide where the pictures start */
  double kx[K_N], ky[K_N], y = 50;
  double x = 10;
  for (int k = 0; k < K_N; k++) {
    double w = 14 + strlen(kinds[k].legend) * 11 * CHAR_EM + 14;
    if (x + w > WIDTH - 4) x = 10, y += 16;
    kx[k] = x, ky[k] = y, x += w;
  }
  double oy = y + 28, wy = oy + d * oh + 30, ay = wy + d * lane + 8;
  int height = (int)(ay + 30);
  fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
          "font-family=\"sans-serif\" font-size=\"10\">\n", WIDTH, height);
  fprintf(f, "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n");
  char s[512];
  /* the configuration first: a long model name is what gets cut */
  snprintf(s, sizeof s, "%s, d=%d w=%d b=%" PRId64 " m=%" PRId64 ": model %s",
           plan_schedule_name(p->cfg.schedule), d, p->cfg.replicas, p->cfg.microbatch_size,
           p->cfg.microbatches, p->in.name);
  text(f, "title", 10, 18, 14, s);
  snprintf(s, sizeof s, "simulated: %.4g s per batch, bubble %.1f%%, whole run %.4g s",
           p->sim.step_time_s, 100 * p->sim.bubble_fraction, p->sim.total_s);
  text(f, "title", 10, 34, 11, s);
  fprintf(f, "<g class=\"legend\">\n");
  for (int k = 0; k < K_N; k++) {
    rect(f, "key", (Kind)k, kx[k], ky[k] - 9, 10, 10, NULL);
    text(f, "key", kx[k] + 14, ky[k], 11, kinds[k].legend);
  }
  fprintf(f, "</g>\n");
  /* overview */
  Key *key = pd_malloc((size_t)(ne ? ne : 1) * sizeof *key);
  for (int i = 0; i < ne; i++) key[i] = (Key){p->sim.events[i].stage, i, p->sim.events[i].start};
  qsort(key, (size_t)ne, sizeof *key, by_stage_start);
  int *idx = pd_malloc((size_t)(ne ? ne : 1) * sizeof *idx);
  for (int i = 0; i < ne; i++) idx[i] = key[i].index;
  free(key);
  int *first = pd_calloc((size_t)d + 1, sizeof *first); /* stage s: idx[first[s]..first[s+1]) */
  for (int i = 0; i < ne; i++) first[p->sim.events[i].stage + 1]++;
  for (int s2 = 0; s2 < d; s2++) first[s2 + 1] += first[s2];
  text(f, "caption", LEFT, oy - 6, 10,
       "the whole simulated run (stages top to bottom); the box is the window below");
  fprintf(f, "<g class=\"overview\">\n");
  double sxo = PLOT / total;
  for (int st = 0; st < d; st++)
    overview_row(f, p, idx, first[st], first[st + 1], oy + st * oh, oh > 2 ? oh - 0.5 : oh, sxo);
  fprintf(f, "<rect class=\"window-mark\" x=\"%.2f\" y=\"%.2f\" width=\"%.2f\" height=\"%.2f\" "
          "fill=\"none\" stroke=\"black\"/>\n</g>\n", LEFT + t0 * sxo, oy - 1,
          (t1 - t0) * sxo < 1 ? 1 : (t1 - t0) * sxo, d * oh + 2);
  /* window */
  snprintf(s, sizeof s, "steady state: %d batch%s from %.4g s (stage 0's step of batch 1); "
           "compute on top, communication below", nwin, nwin == 1 ? "" : "es", t0);
  text(f, "caption", LEFT, wy - 6, 10, s);
  fprintf(f, "<g class=\"window\" data-t0=\"%.9g\" data-t1=\"%.9g\">\n", t0, t1);
  double sx = PLOT / (t1 > t0 ? t1 - t0 : 1);
  for (int st = 0; st < d; st++) {
    if (lane >= 20 || st % 8 == 0)
      fprintf(f, "<text x=\"4\" y=\"%d\">stage %d</text>\n", (int)wy + st * lane + lane / 2 + 4, st);
    for (int t = 0; t < 2; t++) {
      fprintf(f, "<g class=\"lane\" data-stage=\"%d\" data-track=\"%d\">\n", st, t);
      window_lane(f, p, idx, first[st], first[st + 1], t, t0, t1,
                  wy + st * lane + (t ? ch + 1 : 0), t ? cm : ch, sx);
      fprintf(f, "</g>\n");
    }
  }
  fprintf(f, "</g>\n");
  free(idx), free(first);
  fprintf(f, "<line x1=\"%d\" y1=\"%.2f\" x2=\"%d\" y2=\"%.2f\" stroke=\"black\"/>\n", LEFT, ay,
          WIDTH - RIGHT, ay);
  for (int t = 0; t <= 10; t++)
    fprintf(f, "<text x=\"%.2f\" y=\"%.2f\" text-anchor=\"middle\">%.4g s</text>\n",
            LEFT + t * PLOT / 10.0, ay + 14, t0 + (t1 - t0) * t / 10);
  fprintf(f, "</svg>\n");
}
