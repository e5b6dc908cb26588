/* runtime/cuda/pipe/cuda_pipe_graph.c — the step's norm and update as CUDA graphs, in every
 * mode of the CUDA pipeline interpreter (cuda_pipe_internal.h), as the one-stage
 * trainer's device (runtime/cuda/exec/cuda_exec_device.c) runs them.
 *
 * A graph per SR: eager on its first sighting, captured on its second, launched
 * after (cx_step_graph_run). A graph freezes kernel arguments, so
 *  - the norm's graphs are keyed by batch parity: a deferred tied gradient lies in
 *    tg[t % 2] (cp_tied_buf), everything else is fixed;
 *  - the update's graphs are keyed by (version written, version read): 2bw alternates
 *    them, the others keep one; past CP_UPD_GRAPHS pairs the update runs eagerly;
 *  - the values that change per step (lr, the bias-correction step, the gradient
 *    scale) live on the device in s->scalars (pkc_step_scalars, one host copy per
 *    step) and the optimizer kernels are the _dev variants that read them there
 *    (bit for bit the by-value kernels: the same element loop).
 * Without graph ops (--cuda-graphs off) every launch is issued as it is, the same
 * kernels, the same bits. The capture covers only s's stream: nothing else is issued
 * on it meanwhile (one host thread). */
#include "runtime/cuda/pipe/cuda_pipe_internal.h"

#include <stdlib.h>

#include "kernels/cuda_kernel_list.h"

/* What a graph's issue function needs. */
typedef struct CpIssue {
  CpRun *x;
  CpSr *s;
  int64_t t;
  int vslot, src;
} CpIssue;

/* Issues `issue`'s work on s's stream through graph g (cx_step_graph_run: eager, then
 * captured, then launched; g NULL: eager). */
static void run_graph(const CpIssue *c, CxStepGraph *g, void (*issue)(void *)) {
  cx_step_graph_run(c->x->ops, c->s->stream, g, issue, (void *)c, &c->x->step_graphs, c->s->stage, c->s->replica);
}

/* ---- the norm ----------------------------------------------------------------------------- */

/* Σ g² of the SR's gradients (each tied parameter counted by its group's first stage,
 * after the sum), into s->norm. */
static void issue_norm(void *arg) { /* a CpIssue */
  const CpIssue *c = arg;
  CpRun *x = c->x;
  CpSr *s = c->s;
  CxPtr part = s->parts;
  void *k_part = cx_program_kernel(s->prog, "pkc_sumsq_partial_f32");
  int np = 0;
  for (int k = 0; k < s->st->nparams; k++) {
    const RtParam *pp = &s->st->params[k];
    int g = cp_tied_group_of(s, k, x->p->ngroups);
    if (g >= 0 ? s->tied[g].member != 0 : !pp->has_grad) continue;
    CxPtr gr = g >= 0 ? cp_tied_buf(s, g, c->t) : s->grads + (CxPtr)pp->offset;
    int64_t n = pp->numel;
    unsigned grid = cp_grid(n);
    void *args[] = {&part, &gr, &n};
    x->ops->launch(x->ops->dev, s->stream, k_part, grid, CP_BLOCK, args);
    part += (CxPtr)grid * 8;
    np += (int)grid;
  }
  CxPtr out = s->norm, parts = s->parts;
  void *args[] = {&out, &parts, &np};
  if (np) x->ops->launch(x->ops->dev, s->stream, cx_program_kernel(s->prog, "pkc_sumsq_final_f32"), 1, 32, args);
  else x->ops->memset0(x->ops->dev, s->stream, s->norm, 8);
}

void cp_norm(CpRun *x, CpSr *s, int64_t t) {
  CpIssue c = {.x = x, .s = s, .t = t};
  run_graph(&c, &s->g_norm[t % 2], issue_norm);
}

/* ---- the update ----------------------------------------------------------------------------- */

/* The parameters cp_update steps: every one but deferred tied ones (their own step
 * follows their sum), in order; a parameter without a gradient keeps its value in the
 * version written. out: s->st->nparams entries of room; returns the count. */
static int adamw_tensors(const CpRun *x, const CpSr *s, CxAdamwTensor *out) {
  int n = 0;
  for (int k = 0; k < s->st->nparams; k++) {
    int g = cp_tied_group_of(s, k, x->p->ngroups);
    if (g >= 0 && s->tied[g].deferred) continue;
    const RtParam *pp = &s->st->params[k];
    out[n++] = (CxAdamwTensor){.off = (int64_t)pp->offset / 4, .n = pp->numel, .decay = pp->decay,
                               .has_grad = cp_has_grad(x, s, k)};
  }
  return n;
}

uint64_t cp_adamw_bytes(const CpRun *x, const CpSr *s) {
  if (x->tc.optimizer == OPT_SGD) return 0;
  CxAdamwTensor *t = pd_malloc(((size_t)s->st->nparams + 1) * sizeof *t);
  uint64_t b = cx_adamw_table_bytes(t, adamw_tensors(x, s, t));
  free(t);
  return b;
}

void cp_adamw_upload(CpRun *x, CpSr *s) {
  if (x->tc.optimizer == OPT_SGD) return;
  CxAdamwTensor *t = pd_malloc(((size_t)s->st->nparams + 1) * sizeof *t);
  s->adamw_tab = cx_adamw_table_upload(x->ops, s->adamw, t, adamw_tensors(x, s, t));
  free(t);
}

/* The optimizer over cp_update's parameters (adamw_tensors), its per-step values read
 * from s->scalars: AdamW as one multi-tensor launch, SGD parameter by parameter. */
static void issue_update(void *arg) { /* a CpIssue */
  const CpIssue *c = arg;
  CpRun *x = c->x;
  CpSr *s = c->s;
  CxPtr sc = s->scalars;
  double b1 = x->tc.beta1, b2 = x->tc.beta2, eps = x->tc.eps, wd = x->tc.weight_decay, dc = x->tc.delay_comp;
  if (x->tc.optimizer != OPT_SGD) {
    CxAdamwLaunch a = {.w_out = s->w[c->vslot], .w_in = s->w[c->src], .grad = s->grads, .m = s->adam_m,
                       .v = s->adam_v, .w16 = s->w16[c->vslot], .scalars = sc, .beta1 = b1, .beta2 = b2, .eps = eps, .weight_decay = wd,
                       .delay_comp = dc};
    cx_adamw_multi_launch(x->ops, cx_program_kernel(s->prog, "pkc_adamw_multi_dev_f32"), s->stream, &s->adamw_tab,
                          &a);
    return;
  }
  void *k_sgd = cx_program_kernel(s->prog, "pkc_sgd_step_dev_f32");
  for (int k = 0; k < s->st->nparams; k++) {
    int g = cp_tied_group_of(s, k, x->p->ngroups);
    if (g >= 0 && s->tied[g].deferred) continue;
    const RtParam *pp = &s->st->params[k];
    CxPtr wout = s->w[c->vslot] + (CxPtr)pp->offset, win = s->w[c->src] + (CxPtr)pp->offset;
    int64_t n = pp->numel;
    if (!cp_has_grad(x, s, k)) {
      if (wout != win) x->ops->dtod(x->ops->dev, s->stream, wout, win, (size_t)pp->bytes);
      continue;
    }
    CxPtr gr = s->grads + (CxPtr)pp->offset, m = s->adam_m + (CxPtr)pp->offset;
    int decay = pp->decay;
    void *args[] = {&wout, &win, &gr, &m, &n, &b1, &wd, &decay, &sc}; /* momentum: beta1 */
    x->ops->launch(x->ops->dev, s->stream, k_sgd, cp_grid(n), CP_BLOCK, args);
  }
  cp_cast_weights(x, s, c->vslot, 0, s->st->blocks[BUF_PARAMS] / 4, s->stream);
}

void cp_cast_weights(CpRun *x, CpSr *s, int v, int64_t off, int64_t n, int stream) {
  if (!s->w16[v] || n <= 0) return;
  CxPtr dst = s->w16[v] + (CxPtr)off * 2, src = s->w[v] + (CxPtr)off * 4;
  void *args[] = {&dst, &src, &n};
  x->ops->launch(x->ops->dev, stream, cx_program_kernel(s->prog, "pkc_cast_f32_to_bf16"),
                 pkc_grid(PKC_ELEM8, n, CP_BLOCK, CP_MAX_GRID), CP_BLOCK, args);
}

void cp_step_scalars(CpRun *x, CpSr *s, int64_t t, double scale) {
  CxStepScalars sv = {.lr = rt_lr_at(&x->tc, t), .grad_scale = scale, .t = t + 1};
  x->ops->htod(x->ops->dev, s->scalars, &sv, sizeof sv);
}

void cp_update(CpRun *x, CpSr *s, int vslot, int src, int64_t t) {
  uint64_t key = (uint64_t)(vslot * PIPE_MAX_SLOTS + src);
  CxStepGraph *g = NULL;
  for (int i = 0; i < s->n_upd && !g; i++)
    if (s->g_upd[i].key == key) g = &s->g_upd[i];
  if (!g && s->n_upd < CP_UPD_GRAPHS) {
    g = &s->g_upd[s->n_upd++];
    g->key = key;
  }
  CpIssue c = {.x = x, .s = s, .t = t, .vslot = vslot, .src = src};
  run_graph(&c, g, issue_update);
}

void cp_graphs_free(CpRun *x, CpSr *s) {
  for (int i = 0; i < 2; i++)
    if (s->g_norm[i].graph) x->ops->graph_destroy(x->ops->dev, s->g_norm[i].graph);
  for (int i = 0; i < s->n_upd; i++)
    if (s->g_upd[i].graph) x->ops->graph_destroy(x->ops->dev, s->g_upd[i].graph);
}
