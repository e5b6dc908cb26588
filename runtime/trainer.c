/* runtime/trainer.c — the sequential executor of a one-stage plan.
 *
 * One arena, allocated once: params | grads | AdamW m | AdamW v | stash | work |
 * inputs | boundary, each block 64-byte aligned. A step is the reference update rule
 * every pipelined schedule must reproduce (DESIGN.md §3, vanilla form):
 *     g = (1/m) Σ_j ∇ loss(W; microbatch j)      backward ADDS into grads
 *     g ← g · min(1, clip / ‖g‖)                 global-norm clipping
 *     W ← AdamW(W, g, lr(step))                  decoupled decay where decay = 1
 * The 1/m and the clip factor are folded into the optimizer's grad_scale, so the
 * gradient block is read once. Microbatch j of step s has global index s·m + j (it
 * keys the dropout streams) and reads samples s·B + j·b .. + b of the data (B = b·m),
 * so a resumed run sees the same samples and masks as an uninterrupted one.
 *
 * With the plan's schedule "2bw" the update is PipeDream-2BW's, one step delayed:
 *     W(t+1) = W(t) - ν·∇f(W(t-1))      (batches 0 and 1 both use W(0))
 * so the arena holds two weight versions; batch t's microbatches run on the older
 * one, the optimizer reads W(t) and writes W(t+1) over W(t-1), and the two swap
 * roles (DESIGN.md §3: the reference every 2bw pipeline must match). */
#include "runtime/runtime.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels/cpu_kernels.h"

#define ERR(...) (snprintf(err, errlen, __VA_ARGS__), false)

struct Trainer {
  const RtPlan *plan;
  const RtStage *st;
  StageProgram prog;
  TrainConfig tc;
  char *arena;
  char *params, *grads, *opt_m, *opt_v, *stash, *work, *inputs, *boundary;
  char *prev;   /* 2bw: W(t-1); NULL for the vanilla update */
  bool delayed; /* 2bw */
  int32_t *tok_tmp, *tgt_tmp; /* one window when a stream has no input of its own */
  double *mb_loss;            /* [m] this step's microbatch losses (StepStats.mb_loss) */
  int T;                      /* window length of the token streams (0: none) */
  int64_t step;
};

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* ---- parameters ---------------------------------------------------------------- */

static uint64_t fnv1a(const char *s) {
  uint64_t h = 1469598103934665603ull;
  for (; *s; s++) {
    h ^= (unsigned char)*s;
    h *= 1099511628211ull;
  }
  return h;
}

void rt_init_param(float *w, const RtParam *p, uint64_t seed) {
  if (p->init != INIT_NORMAL) {
    float v = p->init == INIT_ONES ? 1.0f : 0.0f;
    for (int64_t i = 0; i < p->numel; i++) w[i] = v;
    return;
  }
  uint64_t h = fnv1a(p->name);
  /* Counter words 2 and 3 hold the name's hash; words 0-1 the pair index. One block
   * of four draws makes two normals (Box-Muller, u1 in (0,1], u2 in [0,1)). */
  int64_t npairs = (p->numel + 1) / 2;
  PK_OMP(omp parallel for schedule(static) if (npairs >= PK_PAR_MIN))
  for (int64_t k = 0; k < npairs; k++) {
    int64_t i = 2 * k;
    PhiloxCtr r = pk_rng_block(seed, (uint32_t)(h >> 32), (uint32_t)h, (uint64_t)k);
    double u1 = ((double)r.v[0] + 1.0) / 4294967296.0, u2 = (double)r.v[1] / 4294967296.0;
    double rad = sqrt(-2.0 * log(u1)), th = 6.283185307179586 * u2;
    w[i] = (float)(p->std * rad * cos(th));
    if (i + 1 < p->numel) w[i + 1] = (float)(p->std * rad * sin(th));
  }
}

/* ---- create / destroy -------------------------------------------------------------- */

Trainer *trainer_create(const RtPlan *p, const TrainerOptions *o, char *err, size_t errlen) {
  if (p->nstages != 1) {
    snprintf(err, errlen, "%s: the plan has %d stages; the sequential executor runs one-stage plans",
             p->dir, p->nstages);
    return NULL;
  }
  const RtStage *st = &p->stages[0];
  if (st->real_bytes != 4) {
    snprintf(err, errlen, "%s: a float%d program cannot be trained (it is for gradient checks)",
             st->source, st->real_bytes * 8);
    return NULL;
  }
  if (!st->has_loss) {
    snprintf(err, errlen, "%s: the stage does not compute the loss", st->source);
    return NULL;
  }
  Trainer *t = pd_calloc(1, sizeof *t);
  t->plan = p;
  t->st = st;
  t->tc = p->train;
  if (o && o->seed_set) t->tc.seed = o->seed;
  if (!stage_program_load(st->source, 4, &t->prog, err, errlen)) {
    free(t);
    return NULL;
  }
  t->delayed = p->delayed;
  int64_t pb = st->blocks[BUF_PARAMS];
  int64_t sizes[9] = {pb, st->blocks[BUF_GRADS], pb, pb, st->blocks[BUF_STASH],
                      st->blocks[BUF_WORK], st->blocks[BUF_INPUTS], st->blocks[BUF_BOUNDARY],
                      t->delayed ? pb : 0};
  int64_t total = 0;
  for (int i = 0; i < 9; i++) total += (sizes[i] + 63) / 64 * 64;
  void *mem = NULL;
  if (posix_memalign(&mem, 64, (size_t)(total ? total : 64)) != 0)
    pd_out_of_memory((size_t)total, "the trainer's arena (params, grads, AdamW state, stash, work)", __FILE__, __LINE__);
  memset(mem, 0, (size_t)total);
  t->arena = mem;
  char **slots[9] = {&t->params, &t->grads, &t->opt_m, &t->opt_v, &t->stash,
                     &t->work,   &t->inputs, &t->boundary, &t->prev};
  char *at = t->arena;
  for (int i = 0; i < 9; i++) {
    *slots[i] = at;
    at += (sizes[i] + 63) / 64 * 64;
  }
  if (!t->delayed) t->prev = NULL;
  for (int k = 0; k < st->ninputs; k++) {
    const RtInput *in = &st->inputs[k];
    if (in->stream == STREAM_OTHER) continue;
    if (in->dtype != DT_I32 || in->rank != 2 || in->shape[0] != st->b) {
      snprintf(err, errlen, "%s: data input '%s' must be i32 [b, T]", st->source, in->name);
      trainer_destroy(t);
      return NULL;
    }
    t->T = (int)in->shape[1];
  }
  t->tok_tmp = pd_malloc((size_t)(t->T + 1) * sizeof(int32_t));
  t->tgt_tmp = pd_malloc((size_t)(t->T + 1) * sizeof(int32_t));
  t->mb_loss = pd_calloc((size_t)p->m + 1, sizeof(double));
  for (int k = 0; k < st->nparams; k++)
    rt_init_param((float *)(void *)(t->params + st->params[k].offset), &st->params[k], t->tc.seed);
  if (t->delayed) memcpy(t->prev, t->params, (size_t)pb);
  return t;
}

void trainer_destroy(Trainer *t) {
  if (!t) return;
  stage_program_unload(&t->prog);
  free(t->arena);
  free(t->tok_tmp);
  free(t->tgt_tmp);
  free(t->mb_loss);
  free(t);
}

const StageProgram *trainer_program(const Trainer *t) { return &t->prog; }
const RtStage *trainer_stage(const Trainer *t) { return t->st; }
float *trainer_params(Trainer *t) { return (float *)(void *)t->params; }
float *trainer_grads(Trainer *t) { return (float *)(void *)t->grads; }
int64_t trainer_step_index(const Trainer *t) { return t->step; }
double trainer_flops_per_step(const Trainer *t) {
  return (t->st->flops_fwd + t->st->flops_bwd) * (double)t->plan->m;
}

/* ---- one microbatch ------------------------------------------------------------------ */

/* Copies samples first .. first + b - 1 into the token and target inputs. */
static void fill_inputs(Trainer *t, DataLoader *data, int64_t first) {
  const RtStage *st = t->st;
  int32_t *tok = NULL, *tgt = NULL;
  for (int k = 0; k < st->ninputs; k++) {
    const RtInput *in = &st->inputs[k];
    if (in->stream == STREAM_TOKENS) tok = (int32_t *)(void *)(t->inputs + in->offset);
    if (in->stream == STREAM_TARGETS) tgt = (int32_t *)(void *)(t->inputs + in->offset);
  }
  if (!tok && !tgt) return;
  for (int64_t r = 0; r < st->b; r++)
    data_get_sample(data, first + r, tok ? tok + r * t->T : t->tok_tmp, tgt ? tgt + r * t->T : t->tgt_tmp);
}

static StageCtx make_ctx(Trainer *t, int64_t microbatch, bool training, double *loss) {
  StageCtx c = {0};
  /* 2bw trains on the older version; evaluation sees the newest. */
  char *w = t->delayed && training ? t->prev : t->params;
  c.abi = PD2BW_STAGE_ABI;
  c.training = training;
  c.microbatch = (uint32_t)microbatch;
  c.rng_base = t->st->rng_base;
  c.seed = t->tc.seed;
  c.params = w;
  c.grads = t->grads;
  c.stash = t->stash;
  c.work = t->work;
  c.inputs = t->inputs;
  c.boundary = t->boundary;
  c.sgemm = (void (*)(void))pd_sgemm;
  c.loss = loss;
  return c;
}

/* ---- the update ----------------------------------------------------------------------- */

double rt_lr_at(const TrainConfig *c, int64_t s) {
  if (c->schedule == LR_CONSTANT) return c->lr;
  if (c->warmup > 0 && s < c->warmup) return c->lr * (double)(s + 1) / (double)c->warmup;
  int64_t span = c->steps - c->warmup;
  double prog = span > 0 ? (double)(s - c->warmup) / (double)span : 1.0;
  if (prog > 1) prog = 1;
  if (c->schedule == LR_COSINE) return c->min_lr + 0.5 * (1 + cos(M_PI * prog)) * (c->lr - c->min_lr);
  return c->lr - (c->lr - c->min_lr) * prog;
}

void trainer_step(Trainer *t, DataLoader *data, StepStats *out) {
  const RtStage *st = t->st;
  const RtPlan *p = t->plan;
  double t0 = now_ms();
  memset(t->grads, 0, (size_t)st->blocks[BUF_GRADS]);
  double loss_sum = 0;
  int64_t bad = 0, B = p->b * p->m;
  for (int64_t j = 0; j < p->m; j++) {
    double loss = 0;
    fill_inputs(t, data, t->step * B + j * p->b);
    StageCtx c = make_ctx(t, t->step * p->m + j, true, &loss);
    t->prog.forward(&c);
    t->prog.backward(&c);
    loss_sum += loss;
    t->mb_loss[j] = loss;
    bad += c.bad_ids;
  }
  /* Global norm of the mean gradient: Σ over parameters of Σ g², in parameter order
   * (pk_sumsq is deterministic), times 1/m. */
  double ss = 0;
  for (int k = 0; k < st->nparams; k++)
    if (st->params[k].has_grad)
      ss += pk_sumsq_f32((const float *)(const void *)(t->grads + st->params[k].offset), st->params[k].numel);
  double inv_m = 1.0 / (double)p->m, norm = sqrt(ss) * inv_m, scale = inv_m;
  if (t->tc.clip > 0 && norm > t->tc.clip) scale *= t->tc.clip / norm;
  double lr = rt_lr_at(&t->tc, t->step);
  for (int k = 0; k < st->nparams; k++) {
    const RtParam *pp = &st->params[k];
    if (!pp->has_grad) continue;
    float *w = (float *)(void *)(t->params + pp->offset);
    /* 2bw: W(t+1) goes over W(t-1), which no microbatch needs any more */
    float *wout = t->delayed ? (float *)(void *)(t->prev + pp->offset) : w;
    const float *g = (const float *)(const void *)(t->grads + pp->offset);
    float *m = (float *)(void *)(t->opt_m + pp->offset), *v = (float *)(void *)(t->opt_v + pp->offset);
    if (t->tc.optimizer == OPT_SGD)
      pk_sgd_step_f32(wout, w, g, m, pp->numel, lr, t->tc.beta1, t->tc.weight_decay, pp->decay, scale);
    else
      pk_adamw_step_f32(wout, w, g, m, v, pp->numel, lr, t->tc.beta1, t->tc.beta2, t->tc.eps,
                        t->tc.weight_decay, pp->decay, t->step + 1, scale, t->tc.delay_comp);
  }
  if (t->delayed) {
    /* Parameters without a gradient keep their value in both versions. */
    for (int k = 0; k < st->nparams; k++)
      if (!st->params[k].has_grad)
        memcpy(t->prev + st->params[k].offset, t->params + st->params[k].offset, (size_t)st->params[k].bytes);
    char *x = t->params;
    t->params = t->prev;
    t->prev = x;
  }
  t->step++;
  out->loss = loss_sum * inv_m;
  out->mb_loss = t->mb_loss;
  out->lr = lr;
  out->grad_norm = norm;
  out->bad_ids = bad;
  out->ms = now_ms() - t0;
}

double trainer_eval(Trainer *t, DataLoader *data, int64_t first, int64_t nbatches) {
  const RtPlan *p = t->plan;
  int64_t B = p->b * p->m;
  double sum = 0;
  int64_t n = 0;
  for (int64_t k = first; k < first + nbatches; k++)
    for (int64_t j = 0; j < p->m; j++) {
      double loss = 0;
      fill_inputs(t, data, k * B + j * p->b);
      StageCtx c = make_ctx(t, 0, false, &loss);
      t->prog.forward(&c);
      sum += loss;
      n++;
    }
  return n ? sum / (double)n : 0;
}

/* ---- checkpoints ------------------------------------------------------------------------ */

static void entry_of(StEntry *e, const RtParam *p, const char *name, const void *data) {
  memset(e, 0, sizeof *e);
  e->name = name;
  e->dtype = ST_F32;
  e->rank = p->rank;
  for (int d = 0; d < p->rank; d++) e->shape[d] = p->shape[d];
  e->data = data;
}

bool rt_ckpt_save(const RtCkptBlocks *b, int64_t step_index, uint64_t seed_value, const char *path, char *err,
                  size_t errlen) {
  const RtStage *st = b->st;
  int n = st->nparams;
  StEntry *e = pd_calloc((size_t)n * 4 + 1, sizeof *e);
  char **names = pd_calloc((size_t)n * 3 + 1, sizeof *names);
  int ne = 0;
  for (int k = 0; k < n; k++) {
    const RtParam *p = &st->params[k];
    size_t len = strlen(p->name) + 8;
    for (int j = 0; j < 3; j++) names[3 * k + j] = pd_malloc(len);
    snprintf(names[3 * k], len, "opt.m.%s", p->name);
    snprintf(names[3 * k + 1], len, "opt.v.%s", p->name);
    snprintf(names[3 * k + 2], len, "prev.%s", p->name);
    entry_of(&e[ne++], p, p->name, b->params + p->offset);
    entry_of(&e[ne++], p, names[3 * k], b->opt_m + p->offset);
    entry_of(&e[ne++], p, names[3 * k + 1], b->opt_v + p->offset);
    /* 2bw: the older version too, which the next batch trains on */
    if (b->prev) entry_of(&e[ne++], p, names[3 * k + 2], b->prev + p->offset);
  }
  char step[32], seed[32], pos[32];
  snprintf(step, sizeof step, "%lld", (long long)step_index);
  snprintf(seed, sizeof seed, "%llu", (unsigned long long)seed_value);
  snprintf(pos, sizeof pos, "%lld", (long long)(step_index * b->plan->b * b->plan->m));
  const char *meta[] = {"format", "pd2bw", "model", b->plan->model, "step", step,
                        "seed", seed, "data_position", pos};
  bool ok = st_write(path, e, ne, meta, 5, err, errlen);
  for (int k = 0; k < 3 * n; k++) free(names[k]);
  free(names);
  free(e);
  return ok;
}

static RtCkptBlocks blocks_of(const Trainer *t) {
  return (RtCkptBlocks){.plan = t->plan, .st = t->st, .params = t->params, .opt_m = t->opt_m, .opt_v = t->opt_v,
                        .prev = t->delayed ? t->prev : NULL};
}

bool trainer_save(Trainer *t, const char *path, char *err, size_t errlen) {
  RtCkptBlocks b = blocks_of(t);
  return rt_ckpt_save(&b, t->step, t->tc.seed, path, err, errlen);
}

/* Reads tensor `name` of shape p into dst; false with a message. */
static bool load_one(SafeTensors *s, const char *path, const RtParam *p, const char *name, void *dst,
                     char *err, size_t errlen) {
  const StTensor *x = st_find(s, name);
  if (!x) return ERR("%s: no tensor '%s' (a checkpoint of a different model?)", path, name);
  bool same = x->rank == p->rank;
  for (int d = 0; same && d < p->rank; d++) same = x->shape[d] == p->shape[d];
  if (!same) {
    char a[64], b[64];
    return ERR("%s: tensor '%s' is %s, the plan wants %s", path, name, st_shape_str(x->rank, x->shape, a, sizeof a),
               st_shape_str(p->rank, p->shape, b, sizeof b));
  }
  return st_read_f32(s, x, dst, err, errlen);
}

/* A metadata value that must be a decimal integer in [0, max]: strtoull saturates and
 * strtoll accepts signs and spaces, so the digits are checked here and an out-of-range
 * value is an error naming the key, never a clamped INT64_MAX. */
static bool meta_uint(const SafeTensors *s, const char *path, const char *key, uint64_t max, uint64_t *out,
                      char *err, size_t errlen) {
  const char *v = st_meta(s, key);
  if (!v) return ERR("%s: no '%s' in the metadata (not a pd2bw training checkpoint)", path, key);
  bool digits = *v != '\0';
  for (const char *c = v; *c && digits; c++) digits = *c >= '0' && *c <= '9';
  errno = 0;
  unsigned long long x = digits ? strtoull(v, NULL, 10) : 0;
  if (!digits || errno == ERANGE || x > max)
    return ERR("%s: metadata %s = \"%.40s\": must be an integer 0..%llu", path, key, v, (unsigned long long)max);
  *out = x;
  return true;
}

bool rt_ckpt_meta(const SafeTensors *s, const char *path, int64_t *step, uint64_t *seed, char *err, size_t errlen) {
  uint64_t x;
  if (!meta_uint(s, path, "step", RT_STEP_MAX, &x, err, errlen)) return false;
  *step = (int64_t)x;
  if (seed && st_meta(s, "seed") && !meta_uint(s, path, "seed", UINT64_MAX, seed, err, errlen)) return false;
  return true;
}

bool rt_ckpt_resume(const RtCkptBlocks *b, const char *path, int64_t *step_index, uint64_t *seed_value, char *err,
                    size_t errlen) {
  SafeTensors *s = st_open(path, err, errlen);
  if (!s) return false;
  const RtStage *st = b->st;
  int64_t sv = 0;
  uint64_t seed = *seed_value;
  bool ok = rt_ckpt_meta(s, path, &sv, &seed, err, errlen);
  for (int k = 0; ok && k < st->nparams; k++) {
    const RtParam *p = &st->params[k];
    char nm[512];
    ok = load_one(s, path, p, p->name, b->params + p->offset, err, errlen);
    snprintf(nm, sizeof nm, "opt.m.%s", p->name);
    ok = ok && load_one(s, path, p, nm, b->opt_m + p->offset, err, errlen);
    snprintf(nm, sizeof nm, "opt.v.%s", p->name);
    ok = ok && load_one(s, path, p, nm, b->opt_v + p->offset, err, errlen);
    if (b->prev) {
      snprintf(nm, sizeof nm, "prev.%s", p->name);
      ok = ok && load_one(s, path, p, nm, b->prev + p->offset, err, errlen);
    }
  }
  if (ok) *seed_value = seed;
  if (ok) *step_index = sv;
  st_close(s);
  return ok;
}

bool trainer_resume(Trainer *t, const char *path, char *err, size_t errlen) {
  RtCkptBlocks b = blocks_of(t);
  return rt_ckpt_resume(&b, path, &t->step, &t->tc.seed, err, errlen);
}

bool rt_ckpt_init(const RtCkptBlocks *b, const char *path, char *err, size_t errlen) {
  const RtStage *st = b->st;
  CkptParam *cp = pd_calloc((size_t)st->nparams + 1, sizeof *cp);
  for (int k = 0; k < st->nparams; k++) {
    const RtParam *p = &st->params[k];
    cp[k].name = p->name;
    cp[k].rank = p->rank;
    for (int d = 0; d < p->rank && d < 4; d++) cp[k].shape[d] = p->shape[d];
    cp[k].dst = (float *)(void *)(b->params + p->offset);
    cp[k].att_head_size = st->att_head_size;
  }
  bool ok = ckpt_import(path, CKPT_AUTO, cp, st->nparams, err, errlen);
  free(cp);
  if (ok && b->prev) memcpy(b->prev, b->params, (size_t)st->blocks[BUF_PARAMS]);
  return ok;
}

bool trainer_init_from(Trainer *t, const char *path, char *err, size_t errlen) {
  RtCkptBlocks b = blocks_of(t);
  return rt_ckpt_init(&b, path, err, errlen);
}
