/* runtime/cuda/pipe/cuda_pipe_threads.c — single-GPU pipeline mode on the shared
 * interpreter: one host thread per stage replica, as the CPU threads pipeline
 * (runtime/pipeline/pipeline_run.c pipeline_run_local: the local transport,
 * pipe_rank_create, exec_run_batches, the driver loop, --init/--resume/--save and
 * validation), each rank with its own CUDA device (cx_exec_device) on a view of the one
 * GPU (cx_share_view: its own stream, its part of the one allocation) and the same-GPU
 * link (cx_local_link). docs/gpu.md ("Single-GPU pipeline mode") says how the devices
 * are made and sized, and what --trace and --profile-out record.
 * NOT done: run on a GPU, one-stage plans included (a rank thread makes the context
 * current through the view: CudaDeviceOps thread_enter; only the emulator has run it). */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/cuda/pipe/cuda_pipe.h"
#include "runtime/pipeline/pipeline_rank.h"

typedef struct ThreadsCtx {
  const PipePlan *p;
  ExecDevice **dev;  /* [nranks] until each rank takes its own */
  ExecDevice **made; /* [nranks] every rank's, to know a device's stage at its end */
  pthread_mutex_t mu;
  CxPipeStats *stats;
  SegTimes *seg; /* --profile-out: [d] each stage's times, all its replicas' */
} ThreadsCtx;

static ExecDevice *take_device(void *ctx, int rank, int stage, char *err, size_t errlen) {
  ThreadsCtx *c = ctx;
  (void)stage;
  pthread_mutex_lock(&c->mu);
  ExecDevice *d = c->dev[rank];
  c->dev[rank] = NULL;
  pthread_mutex_unlock(&c->mu);
  if (!d) snprintf(err, errlen, "rank %d's device was taken already", rank);
  return d;
}

static void add_stats(CxGraphStats *to, CxGraphStats s) {
  to->captured += s.captured;
  to->launches += s.launches;
  to->eager += s.eager;
}

/* A rank's device as it is destroyed: its counts, bytes and segment times. */
static void at_end(void *ctx, ExecDevice *d) {
  ThreadsCtx *c = ctx;
  pthread_mutex_lock(&c->mu);
  for (int r = 0; c->seg && r < c->p->nranks; r++) /* --profile-out: its passes' segment times */
    if (c->made[r] == d) seg_times_add(&c->seg[c->p->rank_stage[r]], cx_program_profile_times(cx_exec_device_program(d)));
  add_stats(&c->stats->graphs, cx_exec_device_pass_stats(d));
  add_stats(&c->stats->steps, cx_exec_device_update_stats(d));
  add_stats(&c->stats->steps, cx_exec_device_norm_stats(d));
  add_stats(&c->stats->updates, cx_exec_device_update_stats(d));
  if (cx_exec_device_bytes(d) > c->stats->bytes) c->stats->bytes = cx_exec_device_bytes(d);
  c->stats->gemm = cx_exec_device_gemm_type(d);
  pthread_mutex_unlock(&c->mu);
}

static ExecLink *make_link(void *ctx, Transport *t, ExecDevice *dev, char *err, size_t errlen) {
  (void)ctx;
  (void)err;
  (void)errlen;
  return cx_local_link(t, dev, cx_exec_device_ops(dev));
}

/* Every rank's device on its view, and the one allocation they share. */
static bool make_devices(const PipePlan *p, CxShare *sh, const CxOptions *o, ThreadsCtx *c, char *err,
                         size_t errlen) {
  ExecDevice **dev = c->dev;
  CxPipeStats *st = c->stats;
  uint64_t *need = pd_calloc((size_t)p->nranks, sizeof *need);
  bool ok = true;
  for (int r = 0; ok && r < p->nranks; r++) {
    int s = p->rank_stage[r];
    dev[r] = cx_exec_device(cx_share_view(sh, r), p->rt, s, o->gemm, p->b * p->m * p->w, err, errlen);
    ok = dev[r] != NULL;
    if (!ok) break;
    cx_exec_device_at_end(dev[r], at_end, c);
    cx_exec_device_set_versions(dev[r], p->st[s].nversions);
    need[r] = cx_exec_device_need(dev[r], p->st[s].planned_bytes);
    uint64_t extra = need[r] - p->st[s].planned_bytes;
    if (extra > st->extra_bytes) st->extra_bytes = extra;
    st->weights_bf16 += cx_exec_device_bf16_bytes(dev[r]);
  }
  ok = ok && cx_share_reserve(sh, need, err, errlen);
  free(need);
  return ok;
}

/* single-GPU mode's step time (cuda_pipe.h): the median of rank 0's update-to-update
 * times after the first step (the whole first step when it is the only one). */
static double median_step(const PipeOutcome *r) {
  int64_t nb = r->steps - r->first_step;
  if (nb <= 1) return nb == 1 ? r->step_ms[0] * 1e-3 : 0;
  double *ms = pd_malloc((size_t)nb * sizeof *ms);
  memcpy(ms, r->step_ms + 1, (size_t)(nb - 1) * sizeof *ms);
  double med = pipe_median(ms, nb - 1);
  free(ms);
  return med * 1e-3;
}

/* --trace: every device's clock marks against one origin event, recorded and waited
 * for before the run. --profile-out: every program times its segments from the second
 * step on (the first too when it is the only one), as the one-stage trainer's. */
static bool observe(const PipePlan *p, const CudaDeviceOps *ops, const CxOptions *o, ThreadsCtx *c, void **origin,
                    char *err, size_t errlen) {
  memcpy(c->made, c->dev, (size_t)p->nranks * sizeof *c->made);
  if (o->trace_path) {
    *origin = ops->event_create(ops->dev);
    ops->event_record(ops->dev, *origin, 0);
    ops->sync(ops->dev);
    for (int r = 0; r < p->nranks; r++) cx_exec_device_set_origin(c->dev[r], *origin);
  }
  if (!o->profile_out) return true;
  int64_t first = 0;
  if (!pipe_ckpt_step(o->resume_path, &first, err, errlen)) return false;
  int64_t from = o->steps - first > 1 ? (first + 1) * p->m * p->w : 0;
  c->seg = pd_calloc((size_t)p->d, sizeof *c->seg);
  for (int r = 0; r < p->nranks; r++) {
    CxProgram *prog = cx_exec_device_program(c->dev[r]);
    cx_program_profile(prog, from);
    if (!c->seg[p->rank_stage[r]].nsegs) seg_times_init(&c->seg[p->rank_stage[r]], cx_program_segments(prog), 0);
  }
  return true;
}

int cx_pipe_train(const PipePlan *p, const CudaDeviceOps *ops, const CxOptions *o, PipeOutcome *out,
                  CxPipeStats *stats, char *err, size_t errlen) {
  CxPipeStats mine = {0};
  if (!stats) stats = &mine;
  memset(stats, 0, sizeof *stats);
  memset(out, 0, sizeof *out);
  CxShare *sh = cx_share_create(ops, p->nranks, err, errlen);
  if (!sh) return 1;
  ThreadsCtx c = {.p = p, .dev = pd_calloc((size_t)p->nranks, sizeof(ExecDevice *)),
                  .made = pd_calloc((size_t)p->nranks, sizeof(ExecDevice *)), .stats = stats};
  pthread_mutex_init(&c.mu, NULL);
  int rc = 1;
  void *origin = NULL;
  if (make_devices(p, sh, o, &c, err, errlen) && observe(p, ops, o, &c, &origin, err, errlen)) {
    /* the CPU driver's options, with this mode's devices and links; the profile is
     * written below from the programs' times (the log: streamed by the driver's rank 0) */
    PipeOptions po = *o;
    po.one_device = true, po.profile_out = NULL;
    po.rank_device = take_device, po.rank_link = make_link, po.rank_ctx = &c;
    rc = pipeline_run_local(p, &po, out, err, errlen);
    if (!rc && o->profile_out) rc = !pipe_profile_write(p, c.seg, "cuda", o->profile_out, err, errlen);
  }
  if (!rc) out->step_time_s = median_step(out);
  for (int r = 0; r < p->nranks; r++) exec_device_destroy(c.dev[r]); /* any a rank did not take */
  if (origin) ops->event_destroy(ops->dev, origin);
  for (int s = 0; c.seg && s < p->d; s++) seg_times_free(&c.seg[s]);
  free(c.seg);
  free(c.made);
  free(c.dev);
  pthread_mutex_destroy(&c.mu);
  cx_share_destroy(sh);
  return rc;
}
