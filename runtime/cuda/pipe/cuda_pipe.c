/* runtime/cuda/pipe/cuda_pipe.c — the CUDA pipeline modes' setup (cuda_pipe.h): the stage
 * programs, the one device allocation carved per stage replica as the plan lays it
 * out, the initial weights, the token images, --resume and the stretch selection
 * (the driver loop and the results: cuda_pipe_drive.c).
 *
 * The planned part of each SR mirrors runtime/pipeline/pipeline.c's layout_arena buffer for
 * buffer (the same (kind, index) lookups and size checks), so a plan whose memory
 * plan is wrong fails here as it fails on the CPU. */
#include "runtime/cuda/pipe/cuda_pipe_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static uint64_t up256(uint64_t n) { return (n + 255) / 256 * 256; }

static const PipeBuf *planned(const PipeStage *ps, PlanBufKind kind, int index) {
  for (int k = 0; k < ps->nbufs; k++)
    if (ps->bufs[k].kind == kind && ps->bufs[k].index == index) return &ps->bufs[k];
  return NULL;
}

/* *at = the planned buffer (kind, index) of the SR, which must hold `need` bytes; a
 * buffer the plan leaves out is fine when nothing is needed. */
static bool place(CpSr *s, CxPtr *at, PlanBufKind kind, int index, uint64_t need, char *err, size_t errlen) {
  const PipeBuf *b = planned(s->ps, kind, index);
  if (!b && need == 0) {
    *at = s->base;
    return true;
  }
  if (!b || b->size < need) {
    snprintf(err, errlen, "stage %d: the plan's memory has %s buffer %s %d (%llu bytes) where the stage program "
             "needs %llu bytes: the plan and its programs disagree (recompile the plan)", s->stage, b ? "a" : "no",
             plan_buf_kind_name(kind), index, b ? (unsigned long long)b->size : 0ULL, (unsigned long long)need);
    return false;
  }
  *at = s->base + b->offset;
  return true;
}

static bool layout_sr(CpRun *x, CpSr *s, uint64_t tied_deferred_bytes, char *err, size_t errlen) {
  const RtStage *st = s->st;
  uint64_t pb = (uint64_t)st->blocks[BUF_PARAMS];
  bool ok = true;
  for (int v = 0; ok && v < s->nversions; v++) ok = place(s, &s->w[v], PB_WEIGHTS, v, pb, err, errlen);
  ok = ok && place(s, &s->grads, PB_GRADS, 0, (uint64_t)st->blocks[BUF_GRADS], err, errlen);
  for (int q = 0; ok && q < 2; q++) ok = place(s, &s->tg[q], PB_TIED_GRADS, q, tied_deferred_bytes, err, errlen);
  ok = ok && place(s, &s->adam_m, PB_OPT_M, 0, pb, err, errlen);
  ok = ok && place(s, &s->adam_v, PB_OPT_V, 0, pb, err, errlen);
  uint64_t slot = x->p->recompute ? s->act_in_bytes : (uint64_t)st->blocks[BUF_STASH];
  for (int q = 0; ok && q < s->nstash; q++) ok = place(s, &s->stash[q], PB_STASH, q, slot, err, errlen);
  s->full = 0;
  if (ok && x->p->recompute) ok = place(s, &s->full, PB_ACTIVATIONS, 0, (uint64_t)st->blocks[BUF_STASH], err, errlen);
  ok = ok && place(s, &s->inputs, PB_INPUTS, 0, (uint64_t)st->blocks[BUF_INPUTS], err, errlen);
  ok = ok && place(s, &s->bnd, PB_BOUNDARY, 0, (uint64_t)st->blocks[BUF_BOUNDARY], err, errlen);
  ok = ok && place(s, &s->work, PB_WORKSPACE, 0, (uint64_t)st->blocks[BUF_WORK], err, errlen);
  return ok;
}

static int param_by_name(const RtStage *s, const char *name) {
  for (int k = 0; k < s->nparams; k++)
    if (strcmp(s->params[k].name, name) == 0) return k;
  return -1;
}

/* Tied groups the SR holds; returns the bytes its deferred ones need in tied_grads. */
static bool setup_tied(CpRun *x, CpSr *s, uint64_t *deferred_bytes, char *err, size_t errlen) {
  const PipePlan *p = x->p;
  uint64_t db = 0;
  for (int g = 0; g < p->ngroups; g++) {
    CpTied *T = &s->tied[g];
    T->param = -1;
    T->member = -1;
    for (int q = 0; q < p->groups[g].nstages; q++)
      if (p->groups[g].stages[q] == s->stage) T->member = q;
    if (T->member < 0 || p->groups[g].nstages < 2) continue;
    T->param = param_by_name(s->st, p->group_names[g]);
    if (T->param < 0) {
      snprintf(err, errlen, "stage %d should hold tied parameter '%s' but its program has no such parameter",
               s->stage, p->group_names[g]);
      return false;
    }
    T->deferred = plan_tied_deferred(&x->spec, g);
    T->bytes = (uint64_t)s->st->params[T->param].bytes;
    if (T->deferred) {
      T->tg_off = db;
      db += up256(T->bytes);
    }
  }
  *deferred_bytes = db;
  return true;
}

static bool counts_in_norm(const CpRun *x, const CpSr *s, int k) {
  for (int g = 0; g < x->p->ngroups; g++)
    if (s->tied[g].param == k) return s->tied[g].member == 0; /* the group's first stage counts it */
  return s->st->params[k].has_grad;
}

/* The most messages one send/receive group of the SR's stream has (one per boundary
 * tensor of each instruction's role): cuda_pipe_run.c builds a group's messages there. */
static int group_messages_most(const CpSr *s) {
  int most = 0, n = 0;
  for (int i = 0; i < s->S->n; i++) {
    const PlanInstr *in = &s->S->ins[i];
    if (in->op != PI_RECV_ACT && in->op != PI_SEND_ACT && in->op != PI_RECV_GRAD && in->op != PI_SEND_GRAD) continue;
    for (int k = 0; k < s->ps->nbnd; k++) n += s->ps->bnd[k].role == cp_p2p_role(in->op);
    if (n > most) most = n;
    if (!in->with_next) n = 0;
  }
  return most;
}

/* The SR's own settings before the arena exists: slots, boundary packing, tied groups. */
static bool prepare_sr(CpRun *x, CpSr *s, uint64_t *tied_bytes, char *err, size_t errlen) {
  const PipePlan *p = x->p;
  s->st = &p->rt->stages[s->stage];
  s->ps = &p->st[s->stage];
  s->prog = x->prog[s->stage];
  s->stream = 1 + s->idx;
  s->S = &x->streams.st[s->stage];
  s->nversions = s->ps->nversions;
  s->nstash = s->ps->nstash;
  if (x->streams.nversions[s->stage] > s->nversions || x->streams.nstash[s->stage] > s->nstash) {
    snprintf(err, errlen, "stage %d: %lld batches need %d weight versions and %d stash slots; the plan has %d and %d",
             s->stage, (long long)x->steps, x->streams.nversions[s->stage], x->streams.nstash[s->stage], s->nversions,
             s->nstash);
    return false;
  }
  if (s->nversions > PIPE_MAX_SLOTS || s->nstash > PIPE_MAX_SLOTS || s->ps->nbnd > PIPE_MAX_BND) {
    snprintf(err, errlen, "stage %d needs %d weight versions, %d stash slots and %d boundary tensors; this runtime "
             "keeps at most %d, %d and %d", s->stage, s->nversions, s->nstash, s->ps->nbnd, PIPE_MAX_SLOTS,
             PIPE_MAX_SLOTS, PIPE_MAX_BND);
    return false;
  }
  for (int k = 0; k < s->ps->nbnd; k++)
    if (s->ps->bnd[k].role == PIPE_ACT_IN) {
      if (s->ps->bnd[k].cls != BUF_STASH) {
        snprintf(err, errlen, "stage %d: its input activation is not in the stash block", s->stage);
        return false;
      }
      s->act_in_packed[k] = (int64_t)s->act_in_bytes;
      s->act_in_bytes += up256((uint64_t)s->ps->bnd[k].bytes);
    }
  if (!setup_tied(x, s, tied_bytes, err, errlen)) return false;
  for (int k = 0; k < s->st->nparams; k++)
    if (counts_in_norm(x, s, k)) s->nparts += (int)cp_grid(s->st->params[k].numel);
  int64_t nmb = p->m * x->steps + 2;
  for (int i = 0; i < s->S->n; i++) /* --steps 0 still builds one batch's stream */
    if (s->S->ins[i].op == PI_FWD && s->S->ins[i].mb >= nmb) nmb = s->S->ins[i].mb + 1;
  s->grp_cap = group_messages_most(s);
  s->grp = pd_calloc((size_t)s->grp_cap + 1, sizeof *s->grp);
  s->mb_sslot = pd_calloc((size_t)nmb, sizeof(int));
  for (int i = 0; i < s->S->n; i++)
    if (s->S->ins[i].op == PI_FWD) s->mb_sslot[s->S->ins[i].mb] = s->S->ins[i].sslot;
  for (int q = 0; q < CP_DATA_SLOTS; q++) s->data_batch[q] = -1;
  s->image_bytes = up256((uint64_t)s->st->blocks[BUF_INPUTS]);
  return true;
}

/* The executor's extras of one SR, in order: scratch, norm partials, norm, losses,
 * token images. */
#define CP_EXTRAS 7
static uint64_t extras(const CpRun *x, const CpSr *s, uint64_t part[CP_EXTRAS]) {
  part[0] = up256((uint64_t)cx_program_block(s->prog, CX_SCRATCH));
  part[1] = up256((uint64_t)s->nparts * 8 + 8);
  part[2] = 256;
  part[3] = s->st->has_loss ? up256((uint64_t)(x->steps * x->p->m) * 4) : 0;
  part[4] = x->T && s->st->ninputs ? CP_DATA_SLOTS * (uint64_t)x->p->m * s->image_bytes : 0;
  part[5] = cp_adamw_bytes(x, s);
  part[6] = (uint64_t)s->nversions * up256((uint64_t)cx_program_block(s->prog, CX_PARAMS16)); /* the plan's weights_bf16 */
  uint64_t e = 0;
  for (int q = 0; q < CP_EXTRAS; q++) e += part[q];
  return e;
}

static bool check_program(const CpRun *x, int s, char *err, size_t errlen) {
  const RtStage *st = &x->p->rt->stages[s];
  if (st->real_bytes != 4) {
    snprintf(err, errlen, "%s: the stage must be float32", st->source);
    return false;
  }
  for (int c = BUF_PARAMS; c < BUF_CLASS_COUNT; c++)
    if (cx_program_block(x->prog[s], c) != st->blocks[c]) {
      snprintf(err, errlen, "%s: stage %d's launch list's %s block (%lld bytes) is not the C program's (%lld): a "
               "mixed plan", x->p->rt->dir, s, buf_class_name((BufClass)c), (long long)cx_program_block(x->prog[s], c),
               (long long)st->blocks[c]);
      return false;
    }
  if (st->has_loss && cx_program_loss_offset(x->prog[s]) < 0) {
    snprintf(err, errlen, "%s: stage %d's launch list has no loss", x->p->rt->dir, s);
    return false;
  }
  return true;
}

static bool open_data(CpRun *x, char *err, size_t errlen) {
  const PipePlan *p = x->p;
  int64_t vocab = 0;
  for (int s = 0; s < p->d; s++) {
    const RtStage *st = &p->rt->stages[s];
    for (int k = 0; k < st->nparams; k++)
      if (strcmp(st->params[k].name, "wte") == 0) vocab = st->params[k].shape[0];
    for (int k = 0; k < st->ninputs; k++) {
      const RtInput *in = &st->inputs[k];
      if (in->stream == STREAM_OTHER) {
        snprintf(err, errlen, "%s: input '%s' is not fed by the token file (only 'tokens' and 'targets' are)",
                 st->source, in->name);
        return false;
      }
      if (in->dtype != DT_I32 || in->rank != 2 || in->shape[0] != p->b) {
        snprintf(err, errlen, "%s: data input '%s' must be i32 [b, T]", st->source, in->name);
        return false;
      }
      x->T = (int)in->shape[1];
    }
  }
  if (!x->T) {
    snprintf(err, errlen, "the model has no 'tokens'/'targets' inputs: the trainer trains language models on token "
             "files");
    return false;
  }
  char ierr[IO_ERR_LEN];
  x->df = data_open(x->o->data_path, DATA_AUTO, vocab, ierr, sizeof ierr);
  if (!x->df || !(x->dl = data_loader_create(x->df, (int)(p->b * x->mref), x->T, x->o->shuffle, x->tc.seed, ierr,
                                                 sizeof ierr))) {
    snprintf(err, errlen, "%s", ierr);
    return false;
  }
  x->tok_tmp = pd_malloc((size_t)(x->T + 1) * sizeof(int32_t));
  x->tgt_tmp = pd_malloc((size_t)(x->T + 1) * sizeof(int32_t));
  return true;
}

/* --init as the CPU pipeline does it (runtime/pipeline/pipeline_run.c): ckpt_import is given
 * every parameter of the model (it checks the layer count against the file's): SR
 * s's own land in w (its params block), the others in a scratch buffer, dropped. */
static bool init_from(const CpRun *x, const CpSr *s, float *w, const char *path, char *err, size_t errlen) {
  const PipePlan *p = x->p;
  int n = 0, cap = 16;
  CkptParam *cp = pd_calloc((size_t)cap, sizeof *cp);
  int64_t most = 1;
  for (int st = 0; st < p->d; st++)
    for (int k = 0; k < p->rt->stages[st].nparams; k++) {
      const RtParam *q = &p->rt->stages[st].params[k];
      bool seen = false;
      for (int j = 0; j < n && !seen; j++) seen = strcmp(cp[j].name, q->name) == 0;
      if (seen) continue;
      if (n == cap) cp = pd_realloc(cp, (size_t)(cap *= 2) * sizeof *cp);
      cp[n] = (CkptParam){.name = q->name, .rank = q->rank};
      for (int d = 0; d < q->rank && d < 4; d++) cp[n].shape[d] = q->shape[d];
      if (q->numel > most) most = q->numel;
      n++;
    }
  float *scratch = pd_malloc((size_t)most * sizeof(float));
  for (int j = 0; j < n; j++) {
    int k = param_by_name(s->st, cp[j].name);
    cp[j].dst = k >= 0 ? w + s->st->params[k].offset / 4 : scratch;
  }
  bool ok = ckpt_import(path, CKPT_AUTO, cp, n, err, errlen);
  free(scratch);
  free(cp);
  return ok;
}

bool cp_setup(CpRun *x, char *err, size_t errlen) {
  const PipePlan *p = x->p;
  const CxDeviceOps *ops = x->ops;
  if (!ops->streams || !ops->event_create || !ops->event_record || !ops->stream_wait || !ops->dtod) {
    snprintf(err, errlen, "the device has no streams/events/device copies: it cannot run a pipeline plan");
    return false;
  }
  if (p->ngroups > PIPE_MAX_GROUPS) {
    snprintf(err, errlen, "the plan has %d tied groups; this runtime handles %d", p->ngroups, PIPE_MAX_GROUPS);
    return false;
  }
  x->tc = p->rt->train;
  /* one seed rule for every mode (runtime.h rt_run_seed), before the weights and the
   * data order are drawn from it */
  if (!rt_run_seed(x->o->resume_path, x->o->seed_set, x->o->seed, x->tc.seed, &x->tc.seed, err, errlen)) return false;
  x->steps = x->o->steps;
  x->mref = p->m * p->w;
  /* --steps 0 (save the initial weights): one batch's streams that never run, as in
   * runtime/pipeline/pipeline.c's build_streams */
  x->spec = (PlanStreamSpec){.stages = p->d, .microbatches = p->m, .schedule = p->schedule,
                             .nbatches = x->steps > 0 ? (int)x->steps : 1,
                             .replicas = p->w, .groups = p->groups, .ngroups = p->ngroups};
  if (!plan_streams_build(&x->spec, &x->streams, err, errlen)) return false;
  if (!open_data(x, err, errlen)) return false;
  x->prog = pd_calloc((size_t)p->d, sizeof *x->prog);
  for (int s = 0; s < p->d; s++) {
    x->prog[s] = cx_program_load(ops, p->rt->dir, s, x->o->gemm, err, errlen);
    if (!x->prog[s] || !check_program(x, s, err, errlen)) return false;
  }
  x->nsr = p->d * p->w;
  if (x->nsr > CP_MAX_SR) {
    snprintf(err, errlen, "%d stage replicas: single-GPU pipeline mode runs at most %d on one device", x->nsr,
             CP_MAX_SR);
    return false;
  }
  if (!ops->streams(ops->dev, 1 + x->nsr, err, errlen)) return false;
  x->sr = pd_calloc((size_t)x->nsr, sizeof *x->sr);
  uint64_t *tied_bytes = pd_calloc((size_t)x->nsr, sizeof(uint64_t));
  uint64_t total = 0;
  bool ok = true;
  for (int i = 0; ok && i < x->nsr; i++) {
    CpSr *s = &x->sr[i];
    s->idx = i;
    s->stage = i / p->w;
    s->replica = i % p->w;
    ok = prepare_sr(x, s, &tied_bytes[i], err, errlen);
    uint64_t part[CP_EXTRAS], e = ok ? extras(x, s, part) : 0;
    total += up256(s->ps->planned_bytes) + e;
    x->w16_bytes += ok ? part[6] : 0;
    if (e > x->extra_bytes) x->extra_bytes = e;
  }
  if (ok) ok = ops->alloc(ops->dev, total, &x->arena, err, errlen);
  if (ok) {
    x->arena_bytes = total;
    ops->memset0(ops->dev, CP_COMM_STREAM, x->arena, total);
  }
  CxPtr at = x->arena;
  for (int i = 0; ok && i < x->nsr; i++) {
    CpSr *s = &x->sr[i];
    s->base = at;
    at += up256(s->ps->planned_bytes);
    ok = layout_sr(x, s, tied_bytes[i], err, errlen);
    uint64_t part[CP_EXTRAS];
    extras(x, s, part);
    CxPtr *dst[CP_EXTRAS] = {&s->scratch, &s->parts, &s->norm, &s->loss, &s->data, &s->adamw, &s->w16[0]};
    for (int q = 0; q < CP_EXTRAS; q++) {
      *dst[q] = at;
      at += part[q];
    }
    for (int v = 1; part[6] && v < s->nversions; v++) s->w16[v] = s->w16[0] + (CxPtr)v * (part[6] / s->nversions);
    if (!part[6]) s->w16[0] = 0;
    s->scalars = s->norm + 64; /* the norm's part: 256 bytes for its 8 */
  }
  free(tied_bytes);
  if (!ok) return false;
  /* the CPU executor's initial weights (rt_init_param by name and seed), or --init's,
   * every version */
  for (int i = 0; ok && i < x->nsr; i++) {
    CpSr *s = &x->sr[i];
    size_t pb = (size_t)s->st->blocks[BUF_PARAMS];
    float *w = pd_calloc(pb / 4 + 1, sizeof(float));
    for (int k = 0; k < s->st->nparams; k++)
      rt_init_param(w + s->st->params[k].offset / 4, &s->st->params[k], x->tc.seed);
    if (x->o->init_path) ok = init_from(x, s, w, x->o->init_path, err, errlen);
    for (int v = 0; ok && v < s->nversions; v++) {
      ops->htod(ops->dev, s->w[v], w, pb);
      cp_cast_weights(x, s, v, 0, (int64_t)pb / 4, s->stream); /* one cast at load */
    }
    free(w);
    cp_adamw_upload(x, s);
    s->ev = ops->event_create(ops->dev);
  }
  if (!ok) return false;
  x->comm_ev = ops->event_create(ops->dev);
  size_t img = 0;
  for (int i = 0; i < x->nsr; i++)
    if (x->sr[i].image_bytes > img) img = (size_t)x->sr[i].image_bytes;
  x->host_image = pd_calloc((size_t)p->m * img + 1, 1);
  x->host_loss = pd_calloc((size_t)(x->steps * p->m) + 1, sizeof(float));
  x->grad_norm = pd_malloc((size_t)(x->steps + 1) * sizeof(double));
  x->step_ms = pd_malloc((size_t)(x->steps + 1) * sizeof(double));
  for (int64_t b = 0; b <= x->steps; b++) x->grad_norm[b] = x->step_ms[b] = NAN;
  if (!x->o->quiet) {
    char lerr[IO_ERR_LEN];
    x->console = rt_log_open(NULL, stdout, false, lerr, sizeof lerr); /* no file: cannot fail */
    rt_log_set_peak(x->console, x->p->rt->peak_flops); /* one GPU runs every stage */
  }
  x->t_prev_step = pipe_now();
  return true;
}

void cp_teardown(CpRun *x) {
  const CxDeviceOps *ops = x->ops;
  if (x->sr) {
    for (int i = 0; i < x->nsr; i++) {
      if (x->sr[i].ev) ops->event_destroy(ops->dev, x->sr[i].ev);
      cp_graphs_free(x, &x->sr[i]);
      free(x->sr[i].mb_sslot);
      free(x->sr[i].grp);
    }
  }
  if (x->comm_ev) ops->event_destroy(ops->dev, x->comm_ev);
  cp_trace_close(x);
  for (int s = 0; x->prog && s < x->p->d; s++) cx_program_free(x->prog[s]);
  for (int s = 0; x->part && s < x->p->d; s++) free(x->part[s].ins);
  free(x->part);
  cp_eval_close(x);
  free(x->prog);
  free(x->sr);
  plan_streams_free(&x->streams);
  data_loader_destroy(x->dl);
  if (x->df) data_close(x->df);
  free(x->tok_tmp);
  free(x->tgt_tmp);
  free(x->host_image);
  free(x->host_loss);
  free(x->grad_norm);
  free(x->step_ms);
  rt_log_close(x->console);
  free(x->msg);
}

/* ---- data ---------------------------------------------------------------------------- */

/* Replica r's j-th microbatch of batch t is the reference's microbatch r·m + j. */
static void upload_batch(CpRun *x, CpSr *s, int64_t t, int slot) {
  const PipePlan *p = x->p;
  memset(x->host_image, 0, (size_t)(p->m * s->image_bytes));
  for (int64_t j = 0; j < p->m; j++) {
    char *img = x->host_image + j * s->image_bytes;
    int32_t *tok = NULL, *tgt = NULL;
    for (int q = 0; q < s->st->ninputs; q++) {
      const RtInput *in = &s->st->inputs[q];
      if (in->stream == STREAM_TOKENS) tok = (int32_t *)(void *)(img + in->offset);
      if (in->stream == STREAM_TARGETS) tgt = (int32_t *)(void *)(img + in->offset);
    }
    int64_t first = t * p->b * x->mref + ((int64_t)s->replica * p->m + j) * p->b;
    for (int64_t r = 0; r < p->b; r++)
      data_get_sample(x->dl, first + r, tok ? tok + r * x->T : x->tok_tmp, tgt ? tgt + r * x->T : x->tgt_tmp);
  }
  /* htod waits for the whole device: the slot's previous batch is no longer read */
  x->ops->htod(x->ops->dev, s->data + (CxPtr)slot * (CxPtr)p->m * s->image_bytes, x->host_image,
               (size_t)(p->m * s->image_bytes));
  s->data_batch[slot] = t;
  s->data_uses[slot] = (int)(2 * p->m);
}

bool cp_fill_inputs(CpRun *x, CpSr *s, int64_t k) {
  if (!s->st->ninputs || !s->st->blocks[BUF_INPUTS]) return true;
  int64_t m = x->p->m, t = (k - 1) / m, j = (k - 1) % m;
  int slot = (int)(t % CP_DATA_SLOTS);
  if (s->data_batch[slot] != t) {
    if (s->data_uses[slot] > 0) {
      snprintf(x->err, sizeof x->err, "stage %d replica %d: batch %lld's tokens are needed while batch %lld's are "
               "still in use (more than %d batches in flight)", s->stage, s->replica, (long long)t,
               (long long)s->data_batch[slot], CP_DATA_SLOTS);
      return false;
    }
    upload_batch(x, s, t, slot);
  }
  s->data_uses[slot]--;
  CxPtr src = s->data + ((CxPtr)slot * (CxPtr)m + (CxPtr)j) * s->image_bytes;
  x->ops->dtod(x->ops->dev, s->stream, s->inputs, src, (size_t)s->st->blocks[BUF_INPUTS]);
  return true;
}

/* --resume as runtime/pipeline/pipeline_run.c's pipe_rank_resume: the checkpoint's step is the
 * first batch to run; its weights go into the slot the streams treat as newest at that
 * batch (2bw: step % 2, the older version "prev.*" into the other), every other slot
 * a copy of them; AdamW m and v (its seed: cp_setup, rt_run_seed's rule). The
 * tensors are read by the one-stage trainer's reader (rt_ckpt_resume) per stage. */
bool cp_resume(CpRun *x, const char *path, char *err, size_t errlen) {
  const PipePlan *p = x->p;
  const CxDeviceOps *ops = x->ops;
  int64_t step;
  if (!pipe_ckpt_step(path, &step, err, errlen)) return false;
  if (p->schedule == PS_PIPEDREAM && step > 0) {
    snprintf(err, errlen, "%s: resuming a pipedream run is not supported (its stashed versions are not saved)", path);
    return false;
  }
  bool two = p->schedule == PS_2BW, has_prev = false;
  SafeTensors *f = st_open(path, err, errlen);
  if (!f) return false;
  char nm[512];
  snprintf(nm, sizeof nm, "prev.%s", p->rt->stages[0].nparams ? p->rt->stages[0].params[0].name : "");
  has_prev = st_find(f, nm) != NULL;
  st_close(f);
  if (two && !has_prev && step > 0) {
    snprintf(err, errlen, "%s: no tensor '%s': the checkpoint holds one weight version (a gpipe/1f1b run); 2bw at "
             "step %lld needs W(t) and W(t-1)", path, nm, (long long)step);
    return false;
  }
  int newest = two ? (int)(step % 2) : 0, prev = two ? (int)((step + 1) % 2) : 0;
  uint64_t seed = x->tc.seed;
  bool ok = true;
  for (int st = 0; ok && st < p->d; st++) {
    const RtStage *rs = &p->rt->stages[st];
    size_t pb = (size_t)rs->blocks[BUF_PARAMS];
    char *mem = pd_calloc(4 * pb + 1, 1);
    RtCkptBlocks b = {.plan = p->rt, .st = rs, .params = mem, .opt_m = mem + pb, .opt_v = mem + 2 * pb,
                      .prev = two && has_prev ? mem + 3 * pb : NULL};
    int64_t got;
    ok = rt_ckpt_resume(&b, path, &got, &seed, err, errlen);
    if (ok && two && !has_prev) memcpy(mem + 3 * pb, mem, pb); /* step 0: both versions are W(0) */
    for (int r = 0; ok && r < p->w; r++) {
      CpSr *s = cp_sr(x, st, r);
      for (int v = 0; v < s->nversions; v++) {
        ops->htod(ops->dev, s->w[v], two && v == prev ? mem + 3 * pb : mem, pb);
        cp_cast_weights(x, s, v, 0, (int64_t)pb / 4, s->stream); /* one cast at load */
      }
      ops->htod(ops->dev, s->adam_m, mem + pb, pb);
      ops->htod(ops->dev, s->adam_v, mem + 2 * pb, pb);
      s->newest = newest;
    }
    free(mem);
  }
  if (!ok) return false;
  x->first = step; /* the seed is cp_setup's: rt_run_seed read the checkpoint's already */
  return true;
}

void cp_select(CpRun *x, int64_t lo, int64_t hi) {
  const PipePlan *p = x->p;
  if (!x->part) x->part = pd_calloc((size_t)p->d, sizeof *x->part);
  for (int st = 0; st < p->d; st++) {
    const PlanStream *src = &x->streams.st[st];
    PlanStream *dst = &x->part[st];
    if (dst->cap < src->n + 1) {
      dst->cap = src->n + 1;
      dst->ins = pd_realloc(dst->ins, (size_t)dst->cap * sizeof *dst->ins);
    }
    dst->n = 0;
    for (int i = 0; i < src->n; i++) {
      int j = i, kept = 0; /* the group i..j: with_next links its members */
      while (src->ins[j].with_next && j + 1 < src->n) j++;
      for (int q = i; q <= j; q++)
        if (src->ins[q].batch >= lo && src->ins[q].batch < hi) {
          dst->ins[dst->n] = src->ins[q];
          dst->ins[dst->n++].with_next = true;
          kept++;
        }
      if (kept) dst->ins[dst->n - 1].with_next = false;
      i = j;
    }
  }
  for (int i = 0; i < x->nsr; i++) {
    x->sr[i].S = &x->part[x->sr[i].stage];
    x->sr[i].pc = 0;
  }
}
