/* runtime/cuda/pipe/cuda_pipe_trace.c — --trace in single-GPU pipeline mode (cuda_pipe.h,
 * cuda_pipe_internal.h's cp_trace_*): every instruction of every stage replica timed
 * with a pair of device events, read back without extra host waits, the bubble
 * measured as the CPU executor measures it (pipe_measure) and the Chrome trace
 * written by runtime/pipeline/pipeline_trace.c's writer (one process, one thread per SR).
 *
 * Events. Each SR has a ring of event pairs made up front (three batches' worth of its
 * stream's instructions, so it never fills in a normal run); a pair is taken when an
 * instruction starts and given back once read. Reading (cuEventElapsedTime against an
 * origin event recorded before training) needs both records complete, so it happens
 * only where the run waits for the device anyway: run_step's sync once per batch and
 * the end of a stretch. Should a ring fill with unread pairs, the tracer syncs and
 * reads (forced_syncs counts it: a debugging aid, it should stay 0).
 *
 * Why one thread per SR holds without overlap: an SR's stream and the communication
 * stream are fenced both ways around every cross-SR operation (cuda_pipe_run.c), and
 * the SR issues nothing while its send/receive group or collective is pending. */
#include "runtime/cuda/pipe/cuda_pipe_internal.h"
#include "runtime/io/io.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

/* One instruction's pair of events. */
typedef struct CpSlot {
  void *ev[2];          /* start, end */
  const PlanInstr *in;  /* the instruction (in the stream the SR runs now) */
  PipeEvent e;          /* what it was; the times are filled when read */
  bool ended;           /* its end is recorded */
} CpSlot;

/* An SR's pairs: slots [head, tail) (indices mod cap) are in use, oldest first. */
typedef struct CpRing {
  CpSlot *slot;
  int cap;
  int64_t head, tail;
  /* the send/receive instructions of the SR's current group that have a pair */
  const PlanInstr *p2p[PIPE_MAX_BND * 4];
  int np2p;
} CpRing;

struct CpTrace {
  void *origin;
  CpRing *ring; /* [nsr] */
  PipeEvent *ev; /* read so far, in reading order */
  int64_t nev, cap_ev;
  int64_t forced_syncs;
};

/* Three times the most instructions the SR's stage has in any one batch: between two
 * of run_step's syncs an SR issues at most its current batch and the next. */
static int ring_capacity(const CpRun *x, int stage) {
  const PlanStream *S = &x->streams.st[stage];
  int64_t nb = x->steps + 1, most = 0;
  int64_t *per = pd_calloc((size_t)nb + 1, sizeof(int64_t));
  for (int i = 0; i < S->n; i++) {
    int b = S->ins[i].batch;
    if (b >= 0 && b < nb && ++per[b] > most) most = per[b];
  }
  free(per);
  return (int)(3 * most + 16);
}

void cp_trace_open(CpRun *x) {
  const CxDeviceOps *ops = x->ops;
  CpTrace *T = pd_calloc(1, sizeof *T);
  T->ring = pd_calloc((size_t)x->nsr, sizeof *T->ring);
  for (int i = 0; i < x->nsr; i++) {
    CpRing *R = &T->ring[i];
    R->cap = ring_capacity(x, x->sr[i].stage);
    R->slot = pd_calloc((size_t)R->cap, sizeof *R->slot);
    for (int k = 0; k < R->cap; k++)
      for (int e = 0; e < 2; e++) R->slot[k].ev[e] = ops->event_create(ops->dev);
  }
  T->origin = ops->event_create(ops->dev);
  /* before any training work, on an idle device: every later record is after it */
  ops->sync(ops->dev);
  ops->event_record(ops->dev, T->origin, CP_COMM_STREAM);
  ops->sync(ops->dev);
  x->trace = T;
}

void cp_trace_close(CpRun *x) {
  CpTrace *T = x->trace;
  if (!T) return;
  const CxDeviceOps *ops = x->ops;
  for (int i = 0; i < x->nsr; i++) {
    for (int k = 0; k < T->ring[i].cap; k++)
      for (int e = 0; e < 2; e++) ops->event_destroy(ops->dev, T->ring[i].slot[k].ev[e]);
    free(T->ring[i].slot);
  }
  ops->event_destroy(ops->dev, T->origin);
  free(T->ring);
  free(T->ev);
  free(T);
  x->trace = NULL;
}

void cp_trace_harvest(CpRun *x) {
  CpTrace *T = x->trace;
  if (!T) return;
  const CxDeviceOps *ops = x->ops;
  for (int i = 0; i < x->nsr; i++) {
    CpRing *R = &T->ring[i];
    while (R->head < R->tail) {
      CpSlot *sl = &R->slot[R->head % R->cap];
      if (!sl->ended) break; /* a send/receive still waiting for its copy */
      if (T->nev == T->cap_ev) {
        T->cap_ev = T->cap_ev ? 2 * T->cap_ev : 1024;
        T->ev = pd_realloc(T->ev, (size_t)T->cap_ev * sizeof *T->ev);
      }
      PipeEvent e = sl->e;
      e.start = 1e-3 * (double)ops->event_ms(ops->dev, T->origin, sl->ev[0]);
      e.end = 1e-3 * (double)ops->event_ms(ops->dev, T->origin, sl->ev[1]);
      T->ev[T->nev++] = e;
      sl->in = NULL;
      R->head++;
    }
  }
}

void cp_trace_begin(CpRun *x, CpSr *s, const PlanInstr *in, int stream) {
  CpTrace *T = x->trace;
  if (!T) return;
  CpRing *R = &T->ring[s->idx];
  if (R->tail - R->head == R->cap) { /* never in a normal run (ring_capacity) */
    x->ops->sync(x->ops->dev);
    cp_trace_harvest(x);
    T->forced_syncs++;
    PD_CHECK(R->tail - R->head < R->cap, "(trace: stage %d replica %d has %d unfinished instructions)", s->stage,
             s->replica, R->cap);
  }
  CpSlot *sl = &R->slot[R->tail++ % R->cap];
  sl->in = in;
  sl->ended = false;
  sl->e = (PipeEvent){.op = (int)in->op, .stage = s->stage, .replica = s->replica, .mb = in->mb,
                      .batch = in->batch, .version = in->version, .group = in->group};
  x->ops->event_record(x->ops->dev, sl->ev[0], stream);
}

void cp_trace_end(CpRun *x, CpSr *s, const PlanInstr *in, int stream) {
  CpTrace *T = x->trace;
  if (!T) return;
  CpRing *R = &T->ring[s->idx];
  for (int64_t k = R->tail - 1; k >= R->head; k--) {
    CpSlot *sl = &R->slot[k % R->cap];
    if (sl->in != in) continue;
    x->ops->event_record(x->ops->dev, sl->ev[1], stream);
    sl->ended = true;
    return;
  }
  PD_CHECK(0, "(trace: stage %d replica %d ends an instruction it did not begin)", s->stage, s->replica);
}

void cp_trace_p2p(CpRun *x, CpSr *s, const PlanInstr *in, bool end) {
  CpTrace *T = x->trace;
  if (!T) return;
  CpRing *R = &T->ring[s->idx];
  if (end) {
    cp_trace_end(x, s, in, CP_COMM_STREAM);
    return;
  }
  for (int k = 0; k < R->np2p; k++)
    if (R->p2p[k] == in) return; /* an earlier copy of the same instruction began it */
  PD_CHECK(R->np2p < (int)(sizeof R->p2p / sizeof R->p2p[0]), "(trace: a send/receive group of %d)", R->np2p);
  R->p2p[R->np2p++] = in;
  cp_trace_begin(x, s, in, CP_COMM_STREAM);
}

void cp_trace_p2p_done(CpRun *x, CpSr *s, int first, int last) {
  CpTrace *T = x->trace;
  if (!T) return;
  CpRing *R = &T->ring[s->idx];
  for (int j = first; j <= last; j++) {
    const PlanInstr *in = &s->S->ins[j];
    bool timed = false;
    for (int k = 0; k < R->np2p && !timed; k++) timed = R->p2p[k] == in;
    if (!timed) { /* no tensor of its role: nothing copied, an empty span where the SR is */
      cp_trace_begin(x, s, in, s->stream);
      cp_trace_end(x, s, in, s->stream);
    }
  }
  R->np2p = 0;
}

bool cp_trace_finish(CpRun *x, PipeOutcome *out, char *err, size_t errlen) {
  CpTrace *T = x->trace;
  if (!T) return true;
  x->ops->sync(x->ops->dev);
  cp_trace_harvest(x);
  for (int i = 0; i < x->nsr; i++)
    PD_CHECK(T->ring[i].head == T->ring[i].tail, "(trace: stage %d replica %d has an instruction never ended)",
             x->sr[i].stage, x->sr[i].replica);
  double step_time = 0;
  pipe_measure(x->p, T->ev, T->nev, x->first, x->steps, &step_time, out->bubble);
  return pipe_trace_write_gpu(x->p, T->ev, T->nev, x->o->trace_path, err, errlen);
}

double cx_pipe_predicted_bubble(const char *plan_dir) {
  char path[4096], ierr[IO_ERR_LEN];
  snprintf(path, sizeof path, "%s/plan.json", plan_dir);
  size_t len = 0;
  char *text = io_read_all(path, &len, ierr, sizeof ierr);
  cJSON *root = text ? cJSON_ParseWithLength(text, len) : NULL;
  free(text);
  const cJSON *b = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(root, "predicted"),
                                                    "bubble_fraction");
  double v = cJSON_IsNumber(b) ? b->valuedouble : -1;
  cJSON_Delete(root);
  return v;
}
