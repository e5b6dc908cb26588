/* runtime/cuda/exec/cuda_profile.c — pd2bwrun --backend cuda --profile-out: each segment's
 * own time on the device. A timed pass (a training pass from the run's second step on)
 * is replayed launch by launch by cx_program_run, never as a CUDA graph (a graph's
 * launches cannot be told apart), with a device event before its first launch and after
 * each segment's last (the launch list's "segments"). The events of up to
 * CX_PROFILE_RING passes wait here; when the ring is full, and at the end
 * (cx_profile_times), the device is synchronised once and each segment's time kept
 * (runtime/exec/seg_times.h) for pipe_profile_write, as the CPU backend's are. Without
 * --profile-out no program has a CxProfile and cx_program_run is unchanged. With several
 * stage replicas on one GPU a segment's time is its stream's between the events: other
 * streams' kernels slow it as they slow the step it is part of. */
#include "runtime/cuda/exec/cuda_exec.h"

#include <stdlib.h>

#include "runtime/pipeline/pipeline_rank.h"

#define CX_PROFILE_RING 32

typedef struct CxProfileRec {
  CxPass pass;
  int stream;
  int n;     /* events recorded: 1 + the segments done */
  void **ev; /* [nsegs + 1], created on first use */
} CxProfileRec;

struct CxProfile {
  const CudaDeviceOps *ops;
  SegTimes t;
  CxProfileRec rec[CX_PROFILE_RING];
  int nrec; /* passes recorded, not yet read */
};

CxProfile *cx_profile_create(const CudaDeviceOps *ops, int nsegs, int64_t from_mb) {
  PD_CHECK(ops->event_create && ops->event_record && ops->event_ms && ops->sync,
           "(--profile-out: the device has no events)");
  CxProfile *f = pd_calloc(1, sizeof *f);
  f->ops = ops;
  seg_times_init(&f->t, nsegs, from_mb);
  return f;
}

void cx_profile_destroy(CxProfile *f) {
  if (!f) return;
  for (int i = 0; i < CX_PROFILE_RING; i++) {
    for (int k = 0; f->rec[i].ev && k <= f->t.nsegs; k++) f->ops->event_destroy(f->ops->dev, f->rec[i].ev[k]);
    free(f->rec[i].ev);
  }
  seg_times_free(&f->t);
  free(f);
}

/* Room kept for the passes recorded but not read yet (either direction's). */
bool cx_profile_timed(const CxProfile *f, const CxReplay *r) {
  int64_t kept = f->t.nfwd > f->t.nbwd ? f->t.nfwd : f->t.nbwd;
  return r->training && r->microbatch >= f->t.from_mb && kept + f->nrec < SEG_TIMES_MAX_PASSES;
}

/* Waits for the device, then keeps every recorded pass's segment times. */
static void drain(CxProfile *f) {
  if (!f->nrec) return;
  const CudaDeviceOps *ops = f->ops;
  ops->sync(ops->dev);
  int n = f->t.nsegs;
  for (int i = 0; i < f->nrec; i++) {
    const CxProfileRec *c = &f->rec[i];
    PD_CHECK(c->n == n + 1, "(a timed pass with %d of its %d segment events)", c->n - 1, n);
    bool fwd = c->pass == CX_FORWARD;
    double *row = seg_times_row(&f->t, !fwd);
    PD_CHECK(row != NULL, "(more timed passes than cx_profile_timed allows)");
    for (int q = 0; q < n; q++) /* the q-th interval is segment q forward, n-1-q backward */
      row[fwd ? q : n - 1 - q] = ops->event_ms(ops->dev, c->ev[q], c->ev[q + 1]) / 1e3;
  }
  f->nrec = 0;
}

int cx_profile_begin(CxProfile *f, CxPass pass, int stream) {
  if (f->nrec == CX_PROFILE_RING) drain(f);
  CxProfileRec *c = &f->rec[f->nrec];
  if (!c->ev) {
    c->ev = pd_calloc((size_t)f->t.nsegs + 1, sizeof(void *));
    for (int k = 0; k <= f->t.nsegs; k++) c->ev[k] = f->ops->event_create(f->ops->dev);
  }
  c->pass = pass, c->stream = stream, c->n = 1;
  f->ops->event_record(f->ops->dev, c->ev[0], stream);
  return f->nrec++;
}

void cx_profile_mark(CxProfile *f, int rec, int seg) {
  CxProfileRec *c = &f->rec[rec];
  (void)seg; /* the interval's segment follows from its place in the pass (drain) */
  f->ops->event_record(f->ops->dev, c->ev[c->n++], c->stream);
}

const SegTimes *cx_profile_times(CxProfile *f) {
  drain(f);
  return &f->t;
}
