/* runtime/cuda/pipe/cuda_pipe_dev.c — the CUDA pipeline interpreter's device ops
 * (cuda_pipe_internal.h): a stage's forward and backward pass, the ordered sum, the
 * optimizer step of a deferred tied group (the step's norm and update:
 * cuda_pipe_graph.c), and where a boundary tensor or a tied gradient
 * lies in an SR's part of the arena. Every op is issued on a stream and never waits
 * for the device; the interpreter (cuda_pipe_run.c) and the links decide the order. */
#include "runtime/cuda/pipe/cuda_pipe_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static void launch(CpRun *x, int stream, void *k, int64_t n, void **args) {
  x->ops->launch(x->ops->dev, stream, k, cp_grid(n), CP_BLOCK, args);
}

/* ---- FWD / BWD ---------------------------------------------------------------------- */

static CxReplay replay(CpRun *x, CpSr *s, const PlanInstr *in) {
  int64_t m = x->p->m, t = (in->mb - 1) / m, jref = (int64_t)s->replica * m + (in->mb - 1) % m;
  CxReplay r = {.seed = x->tc.seed, .microbatch = (uint32_t)(t * x->mref + jref), .training = true,
                .stream = s->stream};
  r.base[BUF_PARAMS] = s->w[in->vslot];
  r.base[CX_PARAMS16] = s->w16[in->vslot];
  r.base[BUF_GRADS] = s->grads;
  r.base[BUF_STASH] = x->p->recompute ? s->full : s->stash[in->sslot < 0 ? 0 : in->sslot];
  r.base[BUF_WORK] = s->work;
  r.base[BUF_INPUTS] = s->inputs;
  r.base[BUF_BOUNDARY] = s->bnd;
  r.base[CX_SCRATCH] = s->scratch;
  return r;
}

/* With recomputation the slot keeps only the received input; put it back where the
 * program reads it. */
static void restore_input(CpRun *x, CpSr *s, int sslot) {
  for (int k = 0; k < s->ps->nbnd; k++)
    if (s->ps->bnd[k].role == PIPE_ACT_IN)
      x->ops->dtod(x->ops->dev, s->stream, s->full + (CxPtr)s->ps->bnd[k].offset,
                   s->stash[sslot] + (CxPtr)s->act_in_packed[k], (size_t)s->ps->bnd[k].bytes);
}

bool cp_run_fwd(CpRun *x, CpSr *s, const PlanInstr *in) {
  if (!cp_fill_inputs(x, s, in->mb)) return false;
  if (x->p->recompute && s->stage > 0) restore_input(x, s, in->sslot);
  CxReplay r = replay(x, s, in);
  cx_program_run(s->prog, CX_FORWARD, &r);
  if (s->st->has_loss) {
    CxPtr dst = s->loss + (CxPtr)(in->mb - 1) * 4, src = s->scratch + (CxPtr)cx_program_loss_offset(s->prog);
    int64_t one = 1;
    void *args[] = {&dst, &src, &one};
    launch(x, s->stream, cx_program_kernel(s->prog, "pkc_copy_f32"), 1, args);
  }
  return true;
}

bool cp_run_bwd(CpRun *x, CpSr *s, const PlanInstr *in) {
  if (!cp_fill_inputs(x, s, in->mb)) return false;
  CxReplay r = replay(x, s, in);
  if (x->p->recompute) { /* the forward again, same version and dropout key */
    if (s->stage > 0) restore_input(x, s, in->sslot);
    cx_program_run(s->prog, CX_FORWARD, &r);
  }
  cx_program_run(s->prog, CX_BACKWARD, &r);
  return true;
}

/* ---- boundary tensors and tied gradients ------------------------------------------------ */

PipeRole cp_p2p_role(PlanOp op) {
  return op == PI_RECV_ACT ? PIPE_ACT_IN : op == PI_SEND_ACT ? PIPE_ACT_OUT : op == PI_RECV_GRAD ? PIPE_GRAD_IN
                                                                                         : PIPE_GRAD_OUT;
}

bool cp_bnd_ptr(CpRun *x, CpSr *s, const PlanInstr *in, int k, CxPtr *ptr) {
  const PipeBoundary *b = &s->ps->bnd[k];
  int sslot = s->mb_sslot[in->mb];
  if (b->role == PIPE_ACT_IN)
    *ptr = s->stash[sslot] + (CxPtr)(x->p->recompute ? s->act_in_packed[k] : b->offset);
  else if (b->cls == BUF_BOUNDARY)
    *ptr = s->bnd + (CxPtr)b->offset;
  else if (b->cls == BUF_STASH)
    *ptr = (x->p->recompute ? s->full : s->stash[sslot]) + (CxPtr)b->offset;
  else if (b->cls == BUF_WORK)
    *ptr = s->work + (CxPtr)b->offset;
  else {
    snprintf(x->err, sizeof x->err, "stage %d: a boundary tensor in the %s block", s->stage,
             buf_class_name((BufClass)b->cls));
    return false;
  }
  return true;
}

CxPtr cp_tied_buf(const CpSr *s, int g, int64_t t) {
  const CpTied *T = &s->tied[g];
  return T->deferred ? s->tg[t % 2] + T->tg_off : s->grads + (CxPtr)s->st->params[T->param].offset;
}

int cp_tied_group_of(const CpSr *s, int k, int ngroups) {
  for (int g = 0; g < ngroups; g++)
    if (s->tied[g].param == k) return g;
  return -1;
}

/* ---- the update ------------------------------------------------------------------------- */

bool cp_has_grad(const CpRun *x, const CpSr *s, int k) {
  return s->st->params[k].has_grad || cp_tied_group_of(s, k, x->p->ngroups) >= 0;
}

void cp_step_param(CpRun *x, CpSr *s, int k, CxPtr g, int vslot, int src, int64_t t, double scale) {
  const RtParam *pp = &s->st->params[k];
  CxPtr wout = s->w[vslot] + (CxPtr)pp->offset, win = s->w[src] + (CxPtr)pp->offset;
  int64_t n = pp->numel;
  if (!cp_has_grad(x, s, k)) {
    if (wout != win) x->ops->dtod(x->ops->dev, s->stream, wout, win, (size_t)pp->bytes);
    cp_cast_weights(x, s, vslot, (int64_t)pp->offset / 4, n, s->stream);
    return;
  }
  CxPtr m = s->adam_m + (CxPtr)pp->offset, v = s->adam_v + (CxPtr)pp->offset;
  double lr = rt_lr_at(&x->tc, t), b1 = x->tc.beta1, b2 = x->tc.beta2, eps = x->tc.eps, wd = x->tc.weight_decay;
  int decay = pp->decay;
  if (x->tc.optimizer == OPT_SGD) {
    void *args[] = {&wout, &win, &g, &m, &n, &lr, &b1, &wd, &decay, &scale};
    launch(x, s->stream, cx_program_kernel(s->prog, "pkc_sgd_step_f32"), n, args);
  } else {
    int64_t step = t + 1;
    double dc = x->tc.delay_comp;
    void *args[] = {&wout, &win, &g, &m, &v, &n, &lr, &b1, &b2, &eps, &wd, &decay, &step, &scale, &dc};
    launch(x, s->stream, cx_program_kernel(s->prog, "pkc_adamw_step_f32"), n, args);
  }
  cp_cast_weights(x, s, vslot, (int64_t)pp->offset / 4, n, s->stream);
}

/* ---- the console ---------------------------------------------------------------------- */

void cp_add_losses(CpRun *x, const CpSr *last, int64_t t, double *sum) {
  const PipePlan *p = x->p;
  x->ops->dtoh(x->ops->dev, x->host_loss, last->loss + (CxPtr)(t * p->m) * 4, (size_t)p->m * 4);
  for (int64_t j = 0; j < p->m; j++) *sum += x->host_loss[j];
}

void cp_progress_line(CpRun *x, double loss_sum, int nrep, int64_t t) {
  const PipePlan *p = x->p;
  StepStats ss = {.loss = loss_sum / (double)(p->m * nrep), .lr = rt_lr_at(&x->tc, t),
                  .grad_norm = x->grad_norm[t], .ms = x->step_ms[t]};
  (void)rt_log_step(x->console, t + 1, x->steps, &ss, pipe_tokens_per_step(p), pipe_flops_per_step(p), NAN);
}
