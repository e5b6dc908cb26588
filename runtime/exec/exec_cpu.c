/* runtime/exec/exec_cpu.c — the CPU device (runtime/exec/exec.h): the stage program's
 * host functions, the kernels/cpu_kernels.h kernels and plain memory.
 *
 * The arithmetic is exactly what the executor did before it had seams: a pass is the
 * program called with pipe_stage_ctx's context, the tied sum adds in member order per
 * element, sumsq is pk_sumsq_f32, the optimizer step pipe_opt_step. */
#include "runtime/exec/exec.h"

#include <stdlib.h>
#include <string.h>

#include "kernels/cpu_kernels.h"
#include "runtime/exec/exec_rank.h"

typedef struct CpuDevice {
  ExecDevice base;
  const RtStage *st;
  StageProgram prog;
  int T;                      /* window length of the token streams (0: none) */
  int32_t *tok_tmp, *tgt_tmp; /* a stream the stage has no input for */
  SegTimes *prof;             /* --profile-out: per-segment sums; NULL: off */
} CpuDevice;

static CpuDevice *cpu(ExecDevice *d) { return (CpuDevice *)(void *)d; }

static char *cpu_arena_alloc(ExecDevice *d, uint64_t bytes, const char *what) {
  (void)d;
  void *mem = NULL;
  if (posix_memalign(&mem, 256, (size_t)(bytes ? bytes : 256)) != 0) pd_out_of_memory((size_t)bytes, what, __FILE__, __LINE__);
  memset(mem, 0, (size_t)bytes);
  return mem;
}

static void cpu_arena_free(ExecDevice *d, char *arena) {
  (void)d;
  free(arena);
}

static StageCtx ctx_of(CpuDevice *c, const ExecPass *p) {
  StageCtx x = pipe_stage_ctx(c->st, p->seed, p->mb, p->block[BUF_PARAMS], p->block[BUF_GRADS], p->block[BUF_STASH],
                              p->block[BUF_WORK], p->block[BUF_INPUTS], p->block[BUF_BOUNDARY], p->loss);
  x.training = p->training;
  return x;
}

/* --profile-out: the pass segment by segment (forward 0 .. n-1, backward n-1 .. 0:
 * what the whole-pass entry point runs), each one's time into the pass's row; NULL
 * when the pass is not timed (off, evaluation, the first step, the rows full). */
static double *timed_row(CpuDevice *c, const ExecPass *p, bool bwd) {
  return c->prof && p->training && p->mb >= c->prof->from_mb ? seg_times_row(c->prof, bwd) : NULL;
}

static void timed_pass(CpuDevice *c, StageCtx *x, bool bwd, double *row) {
  int n = c->prof->nsegs;
  for (int i = 0; i < n; i++) {
    int k = bwd ? n - 1 - i : i;
    double t0 = transport_now();
    (bwd ? c->prog.backward_segment : c->prog.forward_segment)(x, k);
    row[k] = transport_now() - t0;
  }
}

static void cpu_forward(ExecDevice *d, ExecPass *p) {
  StageCtx x = ctx_of(cpu(d), p);
  double *row = timed_row(cpu(d), p, false);
  if (row) timed_pass(cpu(d), &x, false, row);
  else cpu(d)->prog.forward(&x);
  p->bad_ids = x.bad_ids;
}

static void cpu_backward(ExecDevice *d, ExecPass *p) {
  StageCtx x = ctx_of(cpu(d), p);
  double *row = timed_row(cpu(d), p, true);
  if (row) timed_pass(cpu(d), &x, true, row);
  else cpu(d)->prog.backward(&x);
  p->bad_ids = x.bad_ids;
}

static void cpu_load_samples(ExecDevice *d, char *inputs, DataLoader *dl, int64_t first, int64_t b) {
  CpuDevice *c = cpu(d);
  if (c->T) pipe_fill_samples(c->st, inputs, dl, first, b, c->T, c->tok_tmp, c->tgt_tmp);
}

static void cpu_copy(ExecDevice *d, void *dst, const void *src, uint64_t bytes) {
  (void)d;
  memcpy(dst, src, (size_t)bytes);
}

/* The arena is host memory: upload and download are the copy. */
static void cpu_upload(ExecDevice *d, void *dst, const void *host, uint64_t bytes) { cpu_copy(d, dst, host, bytes); }
static void cpu_download(ExecDevice *d, void *host, const void *src, uint64_t bytes) { cpu_copy(d, host, src, bytes); }

static void cpu_zero(ExecDevice *d, void *dst, uint64_t bytes) {
  (void)d;
  memset(dst, 0, (size_t)bytes);
}

static void cpu_sum_ordered(ExecDevice *d, float *dst, const float *const *src, int n, int64_t numel) {
  (void)d;
  for (int64_t i = 0; i < numel; i++) {
    float a = src[0][i];
    for (int q = 1; q < n; q++) a += src[q][i];
    dst[i] = a;
  }
}

static double cpu_sumsq(ExecDevice *d, const float *const *x, const int64_t *numel, int n) {
  (void)d;
  double ss = 0;
  for (int i = 0; i < n; i++) ss += pk_sumsq_f32(x[i], numel[i]);
  return ss;
}

static void cpu_opt_step(ExecDevice *d, const ExecOptStep *s, int n) {
  (void)d;
  for (int i = 0; i < n; i++) {
    if (!s[i].g) { /* no gradient: its value into the version written */
      if (s[i].wout != s[i].win) memcpy(s[i].wout, s[i].win, (size_t)s[i].param->bytes);
    } else {
      pipe_opt_step(s[i].tc, s[i].param, s[i].wout, s[i].win, s[i].g, s[i].m, s[i].v, s[i].t, s[i].scale,
                    s[i].fresh);
    }
    if (s[i].master) pk_predict_step_f32(s[i].wout, s[i].master, s[i].param->numel, s[i].predict);
  }
}

static void cpu_flush(ExecDevice *d) { (void)d; /* every loss is written by its pass */ }
static int64_t cpu_late_bad_ids(ExecDevice *d) {
  (void)d;
  return 0; /* every pass reports its own */
}

static void cpu_destroy(ExecDevice *d) {
  CpuDevice *c = cpu(d);
  stage_program_unload(&c->prog);
  free(c->tok_tmp);
  free(c->tgt_tmp);
  free(c);
}

static const ExecDeviceOps cpu_ops = {
    .name = "cpu", .arena_alloc = cpu_arena_alloc, .arena_free = cpu_arena_free, .forward = cpu_forward,
    .backward = cpu_backward, .load_samples = cpu_load_samples, .copy = cpu_copy, .zero = cpu_zero,
    .upload = cpu_upload, .download = cpu_download,
    .sum_ordered = cpu_sum_ordered, .sumsq = cpu_sumsq, .opt_step = cpu_opt_step, .flush = cpu_flush,
    .late_bad_ids = cpu_late_bad_ids, .destroy = cpu_destroy,
};

ExecDevice *exec_cpu_device(const RtStage *st, char *err, size_t errlen) {
  CpuDevice *c = pd_calloc(1, sizeof *c);
  c->base.ops = &cpu_ops;
  c->st = st;
  if (!stage_program_load(st->source, 4, &c->prog, err, errlen)) {
    free(c);
    return NULL;
  }
  for (int k = 0; k < st->ninputs; k++)
    if (st->inputs[k].stream != STREAM_OTHER && st->inputs[k].rank == 2) c->T = (int)st->inputs[k].shape[1];
  c->tok_tmp = pd_malloc((size_t)(c->T + 1) * sizeof(int32_t));
  c->tgt_tmp = pd_malloc((size_t)(c->T + 1) * sizeof(int32_t));
  return &c->base;
}

const StageProgram *exec_cpu_program(const ExecDevice *d) { return &((const CpuDevice *)(const void *)d)->prog; }

void exec_cpu_profile(ExecDevice *d, SegTimes *acc) {
  PD_CHECK(!acc || acc->nsegs == cpu(d)->prog.nsegs, "(segment times of %d segments, program of %d)",
           acc ? acc->nsegs : 0, cpu(d)->prog.nsegs);
  cpu(d)->prof = acc;
}

void exec_device_destroy(ExecDevice *d) {
  if (d) d->ops->destroy(d);
}
