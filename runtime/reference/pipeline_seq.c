/* runtime/reference/pipeline_seq.c — the sequential multi-stage reference (reference.h):
 * the pipeline plan's own stage programs run on one thread, without a transport and
 * without instruction streams (it is what checks them), each microbatch in the
 * reference order forward through stages 0..d-1 and backward through d-1..0, every
 * stage on the weight version the update rule gives it (kept in a ring per stage);
 * 2bw's flushed start and weight prediction are read from their definition
 * (docs/update-rules.md), not from the streams. It exists because under pipedream the
 * embedding and the LM head read different versions of a tied parameter for one
 * microbatch, which the one-stage reference cannot express. docs/pipelines.md ("The
 * sequential multi-stage reference") has the full rule and why its sums match. */
#include "runtime/reference/reference.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu_kernels.h"

/* ---- the rules ----------------------------------------------------------------------- */

const char *pipe_rule_name(PipeRule r) {
  switch (r) {
  case PIPE_RULE_VANILLA: return "vanilla";
  case PIPE_RULE_DELAYED: return "2bw (delayed)";
  case PIPE_RULE_STAGE_DELAY: return "pipedream (per-stage delay)";
  }
  PD_CHECK(0, "rule %d", (int)r);
  return "";
}

/* How many microbatches stage `stage` lags behind the newest weights. */
static int64_t rule_delay(PipeRule r, int d, int stage, int64_t m) {
  switch (r) {
  case PIPE_RULE_VANILLA: return 0;
  case PIPE_RULE_DELAYED: return m;
  case PIPE_RULE_STAGE_DELAY: return d - 1 - stage;
  }
  PD_CHECK(0, "rule %d", (int)r);
  return 0;
}

int64_t pipe_rule_version(PipeRule r, int d, int stage, int64_t m, int64_t k) {
  int64_t x = k - 1 - rule_delay(r, d, stage, m);
  return x < 0 ? 0 : x / m;
}

PipeRule pipe_rule_of(PlanSchedule s) {
  switch (s) {
  case PS_GPIPE:
  case PS_1F1B: return PIPE_RULE_VANILLA;
  case PS_2BW: return PIPE_RULE_DELAYED;
  case PS_PIPEDREAM: return PIPE_RULE_STAGE_DELAY;
  case PS_COUNT: break;
  }
  PD_CHECK(0, "schedule %d", (int)s);
  return PIPE_RULE_VANILLA;
}

/* ---- one stage ------------------------------------------------------------------------ */

typedef struct SeqStage {
  const RtStage *st;
  const PipeStage *ps;
  StageProgram prog;
  bool loaded;
  int nring;        /* weight buffers; version v lives in ring[v % nring] */
  char **ring;
  int64_t *ring_ver; /* version each buffer holds, -1 none */
  char *grads, *adam_m, *adam_v, *stash, *work, *inputs, *bnd;
  char *pred;       /* weight prediction: the predicted weights of batch pred_batch */
  int64_t pred_batch;
  int T;            /* window of its token/target inputs, 0: none */
  int *group;       /* [nparams] tied group (held by >= 2 stages) of each parameter, -1 none */
} SeqStage;

/* A zeroed, 64-byte aligned block (the stage programs' blocks are aligned so in the
 * executor's arena too). */
static char *block(int64_t bytes) {
  void *mem = NULL;
  size_t n = (size_t)(bytes > 0 ? bytes : 64);
  if (posix_memalign(&mem, 64, n) != 0) pd_out_of_memory(n, "a stage block of the sequential reference", __FILE__, __LINE__);
  memset(mem, 0, n);
  return mem;
}

static void stage_free(SeqStage *s) {
  if (s->loaded) stage_program_unload(&s->prog);
  for (int q = 0; q < s->nring; q++) free(s->ring[q]);
  free(s->ring);
  free(s->ring_ver);
  char *b[] = {s->grads, s->adam_m, s->adam_v, s->stash, s->work, s->inputs, s->bnd, s->pred};
  for (size_t q = 0; q < sizeof b / sizeof b[0]; q++) free(b[q]);
  free(s->group);
}

static bool stage_setup(const PipePlan *p, PipeRule r, int i, uint64_t seed, SeqStage *s, char *err, size_t errlen) {
  s->st = &p->rt->stages[i];
  s->ps = &p->st[i];
  const RtStage *st = s->st;
  for (int k = 0; k < st->ninputs; k++) {
    const RtInput *in = &st->inputs[k];
    if (in->stream == STREAM_OTHER || in->dtype != DT_I32 || in->rank != 2 || in->shape[0] != p->b) {
      snprintf(err, errlen, "%s: input '%s' is not an i32 [b, T] token stream", st->source, in->name);
      return false;
    }
    s->T = (int)in->shape[1];
  }
  if (!stage_program_load(st->source, 4, &s->prog, err, errlen)) return false;
  s->loaded = true;
  int64_t delay = rule_delay(r, p->d, i, p->m);
  s->nring = (int)((delay + p->m - 1) / p->m + 2);
  s->ring = pd_calloc((size_t)s->nring, sizeof(char *));
  s->ring_ver = pd_malloc((size_t)s->nring * sizeof(int64_t));
  for (int q = 0; q < s->nring; q++) {
    s->ring[q] = block(st->blocks[BUF_PARAMS]);
    s->ring_ver[q] = -1;
  }
  for (int k = 0; k < st->nparams; k++)
    rt_init_param((float *)(void *)(s->ring[0] + st->params[k].offset), &st->params[k], seed);
  s->ring_ver[0] = 0;
  s->grads = block(st->blocks[BUF_GRADS]);
  s->adam_m = block(st->blocks[BUF_PARAMS]);
  s->adam_v = block(st->blocks[BUF_PARAMS]);
  s->stash = block(st->blocks[BUF_STASH]);
  s->work = block(st->blocks[BUF_WORK]);
  s->inputs = block(st->blocks[BUF_INPUTS]);
  s->bnd = block(st->blocks[BUF_BOUNDARY]);
  s->pred = block(st->blocks[BUF_PARAMS]);
  s->pred_batch = -1;
  s->group = pd_malloc((size_t)(st->nparams + 1) * sizeof(int));
  for (int k = 0; k < st->nparams; k++) {
    s->group[k] = -1;
    for (int g = 0; g < p->ngroups; g++) {
      const PlanTiedGroup *G = &p->groups[g];
      for (int q = 0; q < G->nstages && G->nstages > 1; q++)
        if (G->stages[q] == i && strcmp(p->group_names[g], st->params[k].name) == 0) s->group[k] = g;
    }
  }
  return true;
}

/* The parameter index of tied group g on stage s, or -1. */
static int group_param(const SeqStage *s, int g) {
  for (int k = 0; k < s->st->nparams; k++)
    if (s->group[k] == g) return k;
  return -1;
}

/* A tied parameter has a gradient on every stage holding it, as in the executor. */
static bool with_grad(const SeqStage *s, int k) { return s->st->params[k].has_grad || s->group[k] >= 0; }

static char *weights(SeqStage *s, int64_t v) {
  int q = (int)(v % s->nring);
  PD_CHECK(s->ring_ver[q] == v, "%s: weight version %lld was overwritten (the ring holds %lld)", s->st->source,
           (long long)v, (long long)s->ring_ver[q]);
  return s->ring[q];
}

static char *block_of(SeqStage *s, int cls, char *w) {
  switch ((BufClass)cls) {
  case BUF_PARAMS: return w;
  case BUF_GRADS: return s->grads;
  case BUF_STASH: return s->stash;
  case BUF_WORK: return s->work;
  case BUF_INPUTS: return s->inputs;
  case BUF_BOUNDARY: return s->bnd;
  case BUF_NONE:
  case BUF_CLASS_COUNT: break;
  }
  PD_CHECK(0, "block class %d", cls);
  return NULL;
}

/* The n-th boundary tensor of role `role` of stage s, or NULL. */
static const PipeBoundary *nth_bnd(const SeqStage *s, PipeRole role, int n) {
  for (int k = 0; k < s->ps->nbnd; k++)
    if (s->ps->bnd[k].role == role && n-- == 0) return &s->ps->bnd[k];
  return NULL;
}

/* What stage `from` sends in role `out` arrives at stage `to` in role `in`: same
 * count, same sizes, the destination in the stash for activations. */
static bool check_pairs(const SeqStage *from, const SeqStage *to, PipeRole out, PipeRole in, int i, int j, char *err,
                        size_t errlen) {
  for (int n = 0;; n++) {
    const PipeBoundary *a = nth_bnd(from, out, n), *b = nth_bnd(to, in, n);
    if (!a && !b) return true;
    if (!a || !b || a->bytes != b->bytes || (in == PIPE_ACT_IN && b->cls != BUF_STASH)) {
      snprintf(err, errlen, "stages %d -> %d: boundary tensor %d of the %s does not match what the other stage "
               "expects (recompile the plan)", i, j, n, out == PIPE_ACT_OUT ? "activations" : "gradients");
      return false;
    }
  }
}

static void copy_pairs(SeqStage *from, char *wfrom, SeqStage *to, char *wto, PipeRole out, PipeRole in) {
  for (int n = 0;; n++) {
    const PipeBoundary *a = nth_bnd(from, out, n), *b = nth_bnd(to, in, n);
    if (!a) return;
    memcpy(block_of(to, b->cls, wto) + b->offset, block_of(from, a->cls, wfrom) + a->offset, (size_t)a->bytes);
  }
}

/* ---- the update ------------------------------------------------------------------------ */

/* Tied gradients: the sum over the stages holding the parameter, in ascending stage
 * order, written back to every copy (what TIED_SYNC gives each member). */
static void tied_sum(const PipePlan *p, SeqStage *S) {
  for (int g = 0; g < p->ngroups; g++) {
    const PlanTiedGroup *G = &p->groups[g];
    if (G->nstages < 2) continue;
    float *src[PLAN_MAX_TIED_SEGS];
    int64_t numel = 0;
    for (int q = 0; q < G->nstages; q++) {
      SeqStage *s = &S[G->stages[q]];
      int k = group_param(s, g);
      PD_CHECK(k >= 0, "stage %d holds no tied parameter '%s'", G->stages[q], p->group_names[g]);
      src[q] = (float *)(void *)(s->grads + s->st->params[k].offset);
      numel = s->st->params[k].numel;
    }
    for (int64_t e = 0; e < numel; e++) {
      float a = src[0][e];
      for (int q = 1; q < G->nstages; q++) a += src[q][e];
      for (int q = 0; q < G->nstages; q++) src[q][e] = a;
    }
  }
}

/* 1/(w·m), times the clip factor of the global norm over every stage. */
static double batch_scale(const PipePlan *p, SeqStage *S, const TrainConfig *tc) {
  double inv = 1.0 / (double)(p->w * p->m);
  if (!(tc->clip > 0)) return inv;
  double tot = 0;
  for (int i = 0; i < p->d; i++) {
    double ss = 0;
    for (int k = 0; k < S[i].st->nparams; k++) {
      int g = S[i].group[k];
      if (!with_grad(&S[i], k) || (g >= 0 && p->groups[g].stages[0] != i)) continue; /* tied: counted once */
      ss += pk_sumsq_f32((const float *)(const void *)(S[i].grads + S[i].st->params[k].offset), S[i].st->params[k].numel);
    }
    tot += ss;
  }
  double norm = sqrt(tot) * inv;
  return norm > tc->clip ? inv * tc->clip / norm : inv;
}

/* The first batch that runs on stale weights under 2bw: max(K, 1). */
static int64_t first_stale(const TrainConfig *tc) { return tc->flush_steps > 1 ? tc->flush_steps : 1; }

/* The weights stage s runs batch t on (microbatch k of a replica: the rule's version;
 * 2bw: its flushed start and weight prediction). */
static char *batch_weights(SeqStage *s, const PipePlan *p, PipeRule r, const TrainConfig *tc, int i, int64_t k) {
  if (r != PIPE_RULE_DELAYED) return weights(s, pipe_rule_version(r, p->d, i, p->m, k));
  int64_t t = (k - 1) / p->m, fresh = first_stale(tc);
  if (t < fresh) return weights(s, t);
  if (!(tc->predict > 0) || t == fresh) return weights(s, t - 1);
  if (s->pred_batch != t) { /* W(t-1) + k·(W(t-1) - W(t-2)), element by element in float */
    const float *a = (const float *)(const void *)weights(s, t - 1), *b = (const float *)(const void *)weights(s, t - 2);
    float *o = (float *)(void *)s->pred, kk = (float)tc->predict;
    for (int64_t e = 0; e < s->st->blocks[BUF_PARAMS] / 4; e++) o[e] = a[e] + kk * (a[e] - b[e]);
    s->pred_batch = t;
  }
  return s->pred;
}

/* Every stage: W(t+1) = step(W(t), g(t)) into the ring, gradients cleared. With
 * 2bw's delay compensation (train.delay_comp) the optimizer reads the weights the
 * gradient was taken at from the buffer it writes, as the executors' 2bw update
 * does: each parameter's batch_weights (W(t-1), or its prediction) is copied there
 * first; a step whose gradient was taken at W(t) (t < max(K, 1)) compensates nothing. */
static void update(const PipePlan *p, SeqStage *S, const TrainConfig *tc, PipeRule rule, int64_t t) {
  tied_sum(p, S);
  double scale = batch_scale(p, S, tc);
  bool comp = tc->delay_comp > 0 && t >= first_stale(tc);
  PD_CHECK(!(tc->delay_comp > 0) || rule == PIPE_RULE_DELAYED, "delay compensation under the %s rule",
           pipe_rule_name(rule));
  for (int i = 0; i < p->d; i++) {
    SeqStage *s = &S[i];
    const char *src = weights(s, t), *prev = comp ? batch_weights(s, p, rule, tc, i, t * p->m + 1) : src;
    int q = (int)((t + 1) % s->nring);
    memcpy(s->ring[q], src, (size_t)s->st->blocks[BUF_PARAMS]);
    s->ring_ver[q] = t + 1;
    for (int k = 0; k < s->st->nparams; k++) {
      const RtParam *pp = &s->st->params[k];
      if (!with_grad(s, k)) continue;
      float *w = (float *)(void *)(s->ring[q] + pp->offset);
      if (comp) memcpy(w, prev + pp->offset, (size_t)pp->bytes);
      pipe_opt_step(tc, pp, w, (const float *)(const void *)(src + pp->offset),
                    (const float *)(const void *)(s->grads + pp->offset), (float *)(void *)(s->adam_m + pp->offset),
                    (float *)(void *)(s->adam_v + pp->offset), t, scale, !comp);
    }
    memset(s->grads, 0, (size_t)s->st->blocks[BUF_GRADS]);
  }
}

/* ---- the run ---------------------------------------------------------------------------- */

typedef struct SeqRun {
  const PipePlan *p;
  const TrainConfig *tc;
  PipeRule rule;
  uint64_t seed;
  SeqStage *S;
  DataLoader *dl;
  char **w;        /* [d] each stage's weights for the current microbatch */
  int32_t *tok_tmp, *tgt_tmp;
  int64_t bad_ids;
} SeqRun;

/* Replica r's microbatch k (1-indexed) is the reference's global microbatch gmb. */
static double one_microbatch(SeqRun *x, int64_t k, int64_t gmb) {
  const PipePlan *p = x->p;
  int d = p->d;
  char **w = x->w;
  double loss = 0;
  for (int i = 0; i < d; i++) {
    SeqStage *s = &x->S[i];
    w[i] = batch_weights(s, p, x->rule, x->tc, i, k);
    if (s->T) pipe_fill_samples(s->st, s->inputs, x->dl, gmb * p->b, p->b, s->T, x->tok_tmp, x->tgt_tmp);
    StageCtx c = pipe_stage_ctx(s->st, x->seed, gmb, w[i], s->grads, s->stash, s->work, s->inputs, s->bnd,
                                s->st->has_loss ? &loss : NULL);
    s->prog.forward(&c);
    x->bad_ids += c.bad_ids;
    if (i + 1 < d) copy_pairs(s, w[i], &x->S[i + 1], NULL, PIPE_ACT_OUT, PIPE_ACT_IN);
  }
  for (int i = d - 1; i >= 0; i--) {
    SeqStage *s = &x->S[i];
    StageCtx c = pipe_stage_ctx(s->st, x->seed, gmb, w[i], s->grads, s->stash, s->work, s->inputs, s->bnd, NULL);
    s->prog.backward(&c);
    if (i > 0) copy_pairs(s, w[i], &x->S[i - 1], w[i - 1], PIPE_GRAD_OUT, PIPE_GRAD_IN);
  }
  return loss;
}

static void fill_weights(const PipePlan *p, SeqStage *S, int64_t steps, PipeOutcome *out) {
  int n = 0;
  for (int i = 0; i < p->d; i++) n += S[i].st->nparams;
  out->names = pd_calloc((size_t)n + 1, sizeof(char *));
  out->numel = pd_calloc((size_t)n + 1, sizeof(int64_t));
  out->weights = pd_calloc((size_t)n + 1, sizeof(float *));
  for (int i = 0; i < p->d; i++)
    for (int k = 0; k < S[i].st->nparams; k++) {
      const RtParam *pp = &S[i].st->params[k];
      out->names[out->nparams] = pd_strdup(pp->name);
      out->numel[out->nparams] = pp->numel;
      out->weights[out->nparams] = pd_malloc((size_t)pp->bytes + 4);
      memcpy(out->weights[out->nparams++], weights(&S[i], steps) + pp->offset, (size_t)pp->bytes);
    }
}

/* --init: every stage's W(0) from the checkpoint by name, read here rather than through
 * the pipeline's loader it checks; a tied parameter is read once, into its first stage,
 * and copied to the others that hold it. */
static bool seq_init_from(const PipePlan *p, SeqStage *S, const char *path, char *err, size_t errlen) {
  int total = 0, n = 0;
  for (int i = 0; i < p->d; i++) total += S[i].st->nparams;
  CkptParam *cp = pd_calloc((size_t)total + 1, sizeof *cp);
  int *first = pd_malloc(((size_t)total + 1) * sizeof(int)); /* each stage parameter's entry */
  for (int i = 0, at = 0; i < p->d; i++)
    for (int k = 0; k < S[i].st->nparams; k++, at++) {
      const RtParam *q = &S[i].st->params[k];
      int e = 0;
      while (e < n && strcmp(cp[e].name, q->name) != 0) e++;
      first[at] = e;
      if (e < n) continue;
      cp[n] = (CkptParam){.name = q->name, .rank = q->rank, .dst = (float *)(void *)(S[i].ring[0] + q->offset),
                          .att_head_size = S[i].st->att_head_size};
      for (int d = 0; d < q->rank && d < 4; d++) cp[n].shape[d] = q->shape[d];
      n++;
    }
  bool ok = ckpt_import_model(path, CKPT_AUTO, cp, n, p->rt->model_consts, err, errlen);
  for (int i = 0, at = 0; ok && i < p->d; i++)
    for (int k = 0; k < S[i].st->nparams; k++, at++) {
      float *own = (float *)(void *)(S[i].ring[0] + S[i].st->params[k].offset);
      if (cp[first[at]].dst != own) memcpy(own, cp[first[at]].dst, (size_t)S[i].st->params[k].bytes);
    }
  free(first);
  free(cp);
  return ok;
}

bool pipe_seq_run(const PipePlan *p, const PipeOptions *o, PipeRule r, PipeOutcome *out, char *err, size_t errlen) {
  memset(out, 0, sizeof *out);
  TrainConfig tc = p->rt->train;
  if (o->seed_set) tc.seed = o->seed;
  SeqRun x = {.p = p, .tc = &tc, .rule = r, .seed = tc.seed};
  x.S = pd_calloc((size_t)p->d, sizeof *x.S);
  x.w = pd_calloc((size_t)p->d, sizeof(char *));
  DataFile *df = NULL;
  bool ok = true;
  int T = 0;
  for (int i = 0; ok && i < p->d; i++) {
    ok = stage_setup(p, r, i, tc.seed, &x.S[i], err, errlen);
    if (ok && x.S[i].T > T) T = x.S[i].T;
  }
  if (ok && o->init_path) ok = seq_init_from(p, x.S, o->init_path, err, errlen);
  for (int i = 0; ok && i + 1 < p->d; i++)
    ok = check_pairs(&x.S[i], &x.S[i + 1], PIPE_ACT_OUT, PIPE_ACT_IN, i, i + 1, err, errlen) &&
         check_pairs(&x.S[i + 1], &x.S[i], PIPE_GRAD_OUT, PIPE_GRAD_IN, i + 1, i, err, errlen);
  if (ok && !x.S[p->d - 1].st->has_loss) {
    snprintf(err, errlen, "%s: the last stage does not compute the loss", x.S[p->d - 1].st->source);
    ok = false;
  }
  int64_t mref = p->w * p->m, steps = o->steps;
  if (ok && T) ok = pipe_data_open(o, pipe_vocab(p->rt), p->b * mref, T, tc.seed, &df, &x.dl, err, errlen);
  x.tok_tmp = pd_malloc((size_t)(T + 1) * sizeof(int32_t));
  x.tgt_tmp = pd_malloc((size_t)(T + 1) * sizeof(int32_t));
  out->steps = steps;
  out->mb_per_step = mref;
  out->mb_loss = pd_calloc((size_t)(steps * mref + 1), sizeof(double));
  out->step_loss = pd_calloc((size_t)steps + 1, sizeof(double));
  for (int64_t t = 0; ok && t < steps; t++) {
    double sum = 0;
    for (int64_t j = 0; j < mref; j++) { /* replica j / m, its microbatch j % m */
      double l = one_microbatch(&x, t * p->m + j % p->m + 1, t * mref + j);
      out->mb_loss[t * mref + j] = l;
      sum += l;
    }
    out->step_loss[t] = sum / (double)mref;
    update(p, x.S, &tc, x.rule, t);
  }
  if (ok && x.bad_ids) {
    snprintf(err, errlen, "%s: %lld token ids or targets outside the model's vocabulary", o->data_path,
             (long long)x.bad_ids);
    ok = false;
  }
  if (ok) fill_weights(p, x.S, steps, out);
  for (int i = 0; i < p->d; i++) stage_free(&x.S[i]);
  free(x.S);
  free(x.w);
  free(x.tok_tmp);
  free(x.tgt_tmp);
  data_loader_destroy(x.dl);
  if (df) data_close(df);
  if (!ok) pipe_outcome_free(out);
  return ok;
}
