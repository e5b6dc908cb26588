/* runtime/pipeline/pipeline_run.c — running a pipeline plan: ranks as threads or MPI
 * processes, checkpoints across partitions, --init, validation, what rank 0 gathers.
 * With --val-data a rank trains in stretches (exec_run_batches driven by pipe_drive)
 * that end where an evaluation is due; every rank then runs pipe_eval_run and rank 0
 * keeps the mean. A checkpoint has one format (pipeline_rank.h
 * pipe_save): names do not depend on the partition, so a checkpoint of any (d, w,
 * schedule) loads into any other plan of the same model and into the one-stage trainer;
 * rank 0 gathers and writes it atomically, every rank reads it back itself. Every rank's
 * setup and rank 0's outputs are agreed on by all ranks (transport_agree): one failing
 * rank ends them all with one message and no abort (docs/pipelines.md: failures). What
 * pd2bwrun prints and writes around a run is runtime/driver/driver.c's. */
#include "runtime/pipeline/pipeline_eval.h"

#include <math.h>
#ifdef _OPENMP
#include <omp.h>
#endif
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kernels/cpu_kernels.h"

/* libgomp reads OMP_NUM_THREADS once, when it loads, and a thread that never called
 * omp_set_num_threads runs its parallel loops (stage programs, the optimizer) on that
 * many threads: every core, whatever --threads says. Each rank (a thread of the local
 * transport, or an MPI process) sets its own, or two ranks on two cores run four
 * threads whose barriers spin against each other. And where the BLAS keeps a pool of
 * its own (OpenBLAS's pthread build), a rank's n threads are the BLAS's and its
 * OpenMP loops get one: the two pools' idle threads spin on the same cores, and a
 * one-stage tinygpt on 2 cores ran 4x slower on 2 threads than on 1
 * (bench/pipeline/RESULTS.md). The planner charges only GEMMs for a rank's extra
 * cores (plan_cluster_for_config), so this is the runtime it predicts. */
void pipe_rank_threads(int n) {
#ifdef _OPENMP
  omp_set_num_threads(n > 1 && !pd_blas_own_pool() ? n : 1);
#else
  (void)n;
#endif
}

/* ---- checkpoints ------------------------------------------------------------------ */

bool pipe_ckpt_step(const char *path, int64_t *step, char *err, size_t errlen) {
  *step = 0;
  if (!path) return true;
  SafeTensors *s = st_open(path, err, errlen);
  if (!s) return false;
  bool ok = rt_ckpt_meta(s, path, step, NULL, err, errlen);
  if (!ok) *step = 0;
  st_close(s);
  return ok;
}

static bool load_tensor(SafeTensors *s, const char *path, const RtParam *p, const char *name, void *dst,
                        char *err, size_t errlen) {
  const StTensor *x = st_find(s, name);
  if (!x) {
    snprintf(err, errlen, "%s: no tensor '%s' (a checkpoint of a different model?)", path, name);
    return false;
  }
  bool same = x->rank == p->rank;
  for (int d = 0; same && d < p->rank; d++) same = x->shape[d] == p->shape[d];
  if (!same) {
    char a[64], b[64];
    snprintf(err, errlen, "%s: tensor '%s' is %s, the plan wants %s", path, name,
             st_shape_str(x->rank, x->shape, a, sizeof a), st_shape_str(p->rank, p->shape, b, sizeof b));
    return false;
  }
  return st_read_f32(s, x, dst, err, errlen);
}

/* Weight prediction: parameter p's weights of batch step+1 into hn: the checkpoint's
 * next.* when it has one (a run with prediction wrote it), else made from W(step) and
 * W(step-1) (prev.* of a run without it) as the optimizer's prediction pass would. */
static bool load_next(PipeRank *R, SafeTensors *s, const char *path, const RtParam *p, int64_t step, const char *hw,
                      const char *hp, char *hn, char *err, size_t errlen) {
  char nm[512];
  snprintf(nm, sizeof nm, "next.%s", p->name);
  if (st_find(s, nm)) return load_tensor(s, path, p, nm, hn + p->offset, err, errlen);
  size_t n = (size_t)p->bytes;
  memcpy(hn + p->offset, hw + p->offset, n);
  if (!plan_batch_fresh(&R->spec, step + 1)) { /* batch step+1 runs on a prediction */
    float *next = (float *)(void *)(hn + p->offset), *old = pd_malloc(n + 4);
    memcpy(old, hp + p->offset, n);
    pk_predict_step_f32(next, old, p->numel, R->tc.predict);
    free(old);
  }
  return true;
}

bool pipe_rank_resume(PipeRank *R, const char *path, char *err, size_t errlen) {
  int64_t step;
  if (!pipe_ckpt_step(path, &step, err, errlen)) return false;
  if (R->pp->schedule == PS_PIPEDREAM && step > 0) {
    snprintf(err, errlen, "%s: resuming a pipedream run is not supported (its stashed versions are not saved)", path);
    return false;
  }
  SafeTensors *s = st_open(path, err, errlen);
  if (!s) return false;
  if (!pipe_ckpt_exact(R->pp, s, err, errlen)) return st_close(s), false;
  bool two = R->pp->schedule == PS_2BW, pred = two && R->spec.predict;
  int newest = pred ? PLAN_MASTER_VSLOT : two ? (int)(step % 2) : 0, prev = two ? pipe_prev_slot(step) : 0;
  /* host blocks of the params block's layout: the newest weights, AdamW m and v, 2bw's
   * older version, the next batch's weights under prediction; onto the device when the
   * whole file was read */
  size_t pb = (size_t)R->st->blocks[BUF_PARAMS];
  char *h = pd_calloc(5 * pb + 1, 1), *hw = h, *hm = h + pb, *hv = h + 2 * pb, *hp = h + 3 * pb, *hn = h + 4 * pb;
  bool ok = true;
  for (int k = 0; ok && k < R->st->nparams; k++) {
    const RtParam *p = &R->st->params[k];
    char nm[512];
    ok = load_tensor(s, path, p, p->name, hw + p->offset, err, errlen);
    snprintf(nm, sizeof nm, "opt.m.%s", p->name);
    ok = ok && load_tensor(s, path, p, nm, hm + p->offset, err, errlen);
    snprintf(nm, sizeof nm, "opt.v.%s", p->name);
    ok = ok && load_tensor(s, path, p, nm, hv + p->offset, err, errlen);
    if (ok && two) {
      snprintf(nm, sizeof nm, "prev.%s", p->name);
      if (st_find(s, nm)) {
        ok = load_tensor(s, path, p, nm, hp + p->offset, err, errlen);
      } else if (step > 0) {
        snprintf(err, errlen, "%s: no tensor '%s': the checkpoint holds one weight version (a gpipe/1f1b "
                 "run); 2bw at step %lld needs W(t) and W(t-1)", path, nm, (long long)step);
        ok = false;
      } else {
        memcpy(hp + p->offset, hw + p->offset, (size_t)p->bytes);
      }
    }
    if (ok && pred) ok = load_next(R, s, path, p, step, hw, hp, hn, err, errlen);
  }
  uint64_t seed = R->tc.seed;
  ok = ok && rt_ckpt_meta(s, path, &step, &seed, err, errlen);
  if (ok && !R->o->seed_set) R->tc.seed = seed;
  st_close(s);
  if (ok) {
    /* every other slot starts as the newest version (only flush-free schedules use them) */
    pipe_rank_set_weights(R, hw, newest, two ? hp : NULL, prev);
    if (pred) R->dev->ops->upload(R->dev, R->w[pipe_next_slot(step)], hn, pb);
    R->dev->ops->upload(R->dev, R->adam_m, hm, pb);
    R->dev->ops->upload(R->dev, R->adam_v, hv, pb);
    R->first = step;
  }
  free(h);
  return ok;
}

/* The model's parameters, each once (the first stage holding it). */
typedef struct ParamRef {
  const RtParam *p;
  int stage;
} ParamRef;

static int model_params(const PipePlan *p, ParamRef **out) {
  int n = 0, cap = 16;
  ParamRef *r = pd_malloc((size_t)cap * sizeof *r);
  for (int s = 0; s < p->d; s++)
    for (int k = 0; k < p->rt->stages[s].nparams; k++) {
      const RtParam *q = &p->rt->stages[s].params[k];
      bool seen = false;
      for (int j = 0; j < n && !seen; j++) seen = strcmp(r[j].p->name, q->name) == 0;
      if (seen) continue;
      if (n == cap) r = pd_realloc(r, (size_t)(cap *= 2) * sizeof *r);
      r[n++] = (ParamRef){q, s};
    }
  *out = r;
  return n;
}

/* --init: the stage's parameters from a checkpoint of the whole model (pd2bw, Hugging
 * Face or llm.c GPT-2: runtime/io/io.h ckpt_import), into every weight version; the
 * optimizer state stays zero and the run starts at step 0. ckpt_import checks the
 * model's layer count against the file's, so it is given every parameter of the
 * model: this stage's land in its weights, the others in one scratch buffer that is
 * overwritten and dropped (startup only). A tied parameter is read by every stage
 * holding it from the same file: the copies are identical. */
bool pipe_rank_init_from(PipeRank *R, const char *path, char *err, size_t errlen) {
  ParamRef *pr;
  int n = model_params(R->pp, &pr);
  int64_t most = 1;
  for (int k = 0; k < n; k++)
    if (pr[k].p->numel > most) most = pr[k].p->numel;
  float *scratch = pd_malloc((size_t)most * sizeof(float));
  char *w = pd_calloc((size_t)R->st->blocks[BUF_PARAMS] + 1, 1); /* host: onto the device when read */
  CkptParam *cp = pd_calloc((size_t)n + 1, sizeof *cp);
  for (int k = 0; k < n; k++) {
    const RtParam *q = pr[k].p;
    cp[k].name = q->name;
    cp[k].rank = q->rank;
    for (int d = 0; d < q->rank && d < 4; d++) cp[k].shape[d] = q->shape[d];
    cp[k].dst = scratch;
    cp[k].att_head_size = R->pp->rt->stages[pr[k].stage].att_head_size;
    for (int j = 0; j < R->st->nparams; j++)
      if (strcmp(R->st->params[j].name, q->name) == 0) cp[k].dst = (float *)(void *)(w + R->st->params[j].offset);
  }
  bool ok = ckpt_import_model(path, CKPT_AUTO, cp, n, R->pp->rt->model_consts, err, errlen);
  if (ok) pipe_rank_set_weights(R, w, 0, NULL, -1);
  free(w);
  free(cp);
  free(scratch);
  free(pr);
  return ok;
}

bool pipe_save(const PipePlan *p, const PipeGathered *G, int64_t step, uint64_t seed, const char *path,
               char *err, size_t errlen) {
  ParamRef *pr;
  int n = model_params(p, &pr);
  bool two = p->schedule == PS_2BW;
  StEntry *e = pd_calloc((size_t)n * 5 + 1, sizeof *e);
  char **names = pd_calloc((size_t)n * 4 + 1, sizeof *names);
  int ne = 0;
  for (int k = 0; k < n; k++) {
    const RtParam *q = pr[k].p;
    int s = pr[k].stage;
    size_t len = strlen(q->name) + 8;
    for (int j = 0; j < 4; j++) names[4 * k + j] = pd_malloc(len);
    snprintf(names[4 * k], len, "opt.m.%s", q->name);
    snprintf(names[4 * k + 1], len, "opt.v.%s", q->name);
    snprintf(names[4 * k + 2], len, "prev.%s", q->name);
    snprintf(names[4 * k + 3], len, "next.%s", q->name);
    const char *src[5] = {G->stage_w[s], G->stage_m[s], G->stage_v[s], G->stage_prev[s],
                          G->stage_next ? G->stage_next[s] : NULL};
    const char *nm[5] = {q->name, names[4 * k], names[4 * k + 1], names[4 * k + 2], names[4 * k + 3]};
    for (int j = 0; j < (!two ? 3 : G->stage_next ? 5 : 4); j++) {
      StEntry *x = &e[ne++];
      x->name = nm[j];
      x->dtype = ST_F32;
      x->rank = q->rank;
      for (int d = 0; d < q->rank; d++) x->shape[d] = q->shape[d];
      x->data = src[j] + q->offset;
    }
  }
  char st[32], sd[32], pos[32], part[64];
  snprintf(st, sizeof st, "%lld", (long long)step);
  snprintf(sd, sizeof sd, "%llu", (unsigned long long)seed);
  snprintf(pos, sizeof pos, "%lld", (long long)(step * p->b * p->m * p->w));
  snprintf(part, sizeof part, "%d stages x %d replicas", p->d, p->w);
  const char *meta[] = {"format", "pd2bw", "model", p->rt->model, "step", st, "seed", sd, "data_position", pos,
                        "schedule", plan_schedule_name(p->schedule), "weight_versions",
                        !two ? "1" : G->stage_next ? "3 (prev.*, next.*: the weights batches step and step+1 run on)"
                                                   : "2 (prev.* = W(step-1))",
                        "partition", part, "consts", p->rt->model_consts};
  bool ok = st_write(path, e, ne, meta, 9, err, errlen);
  for (int k = 0; k < 4 * n; k++) free(names[k]);
  free(names);
  free(e);
  free(pr);
  return ok;
}

/* ---- outcome ------------------------------------------------------------------------ */

static void fill_outcome(const PipePlan *p, const PipeRank *R, const PipeGathered *G, const double *val,
                         double val_final, PipeOutcome *out) {
  memset(out, 0, sizeof *out);
  out->first_step = R->first;
  out->steps = R->steps;
  out->mb_per_step = p->w * p->m;
  int64_t nb = R->steps - R->first, nl = nb * out->mb_per_step;
  out->mb_loss = pd_malloc((size_t)(nl + 1) * sizeof(double));
  memcpy(out->mb_loss, G->mb_loss, (size_t)nl * sizeof(double));
  out->step_loss = pd_calloc((size_t)nb + 1, sizeof(double));
  out->val_loss = pd_calloc((size_t)nb + 1, sizeof(double));
  if (nb > 0) memcpy(out->val_loss, val, (size_t)nb * sizeof(double));
  /* rank 0's: every rank has the same norms; its step times are the pipeline's */
  out->grad_norm = pd_calloc((size_t)nb + 1, sizeof(double));
  out->step_ms = pd_calloc((size_t)nb + 1, sizeof(double));
  if (nb > 0) memcpy(out->grad_norm, R->grad_norm, (size_t)nb * sizeof(double));
  if (nb > 0) memcpy(out->step_ms, R->step_ms, (size_t)nb * sizeof(double));
  out->val_final = val_final;
  for (int64_t b = 0; b < nb; b++) {
    double s = 0;
    for (int64_t j = 0; j < out->mb_per_step; j++) s += G->mb_loss[b * out->mb_per_step + j];
    out->step_loss[b] = s / (double)out->mb_per_step;
  }
  ParamRef *pr;
  int n = model_params(p, &pr);
  out->nparams = n;
  out->names = pd_calloc((size_t)n + 1, sizeof(char *));
  out->numel = pd_calloc((size_t)n + 1, sizeof(int64_t));
  out->weights = pd_calloc((size_t)n + 1, sizeof(float *));
  for (int k = 0; k < n; k++) {
    out->names[k] = pd_strdup(pr[k].p->name);
    out->numel[k] = pr[k].p->numel;
    out->weights[k] = pd_malloc((size_t)pr[k].p->bytes + 4);
    memcpy(out->weights[k], G->stage_w[pr[k].stage] + pr[k].p->offset, (size_t)pr[k].p->bytes);
  }
  free(pr);
  out->bubble = pd_calloc((size_t)p->d, sizeof(double));
  out->arena_bytes = pd_calloc((size_t)p->d, sizeof(uint64_t));
  out->planned_bytes = pd_calloc((size_t)p->d, sizeof(uint64_t));
  for (int s = 0; s < p->d; s++) {
    out->arena_bytes[s] = G->arena[s];
    out->planned_bytes[s] = p->st[s].planned_bytes;
  }
  pipe_measure(p, G->ev, G->nev, R->first, R->steps, &out->step_time_s, out->bubble);
}

void pipe_outcome_free(PipeOutcome *o) {
  if (!o) return;
  for (int k = 0; k < o->nparams; k++) {
    free(o->names[k]);
    free(o->weights[k]);
  }
  free(o->names);
  free(o->numel);
  free(o->weights);
  free(o->mb_loss);
  free(o->step_loss);
  free(o->val_loss);
  free(o->grad_norm);
  free(o->step_ms);
  free(o->bubble);
  free(o->arena_bytes);
  free(o->planned_bytes);
  memset(o, 0, sizeof *o);
}

/* ---- one rank, on any transport ----------------------------------------------------- */

typedef struct RunCtx {
  const PipePlan *p;
  const PipeOptions *o;
  PipeOutcome *out;
  pthread_mutex_t mu;
  bool root; /* err is a per-step check's root cause */
  char err[2 * TRANSPORT_ERR_LEN + 512];
} RunCtx;

/* The run's message: the first, unless a later one is the root cause that made the
 * link abort the others (their "rank R aborted: ..." may be noted first). */
static void note_error_root(RunCtx *c, const char *msg, bool root) {
  pthread_mutex_lock(&c->mu);
  if (!c->err[0] || (root && !c->root)) {
    c->root = root;
    snprintf(c->err, sizeof c->err, "%s", msg);
  }
  pthread_mutex_unlock(&c->mu);
}

static void note_error(RunCtx *c, const char *msg) { note_error_root(c, msg, false); }

/* Collective: whether every rank's step (its setup, rank 0's outputs) succeeded
 * (transport_agree). A failure all ranks agreed on is noted once, rank 0's message,
 * with no abort; the agreement itself failing aborts the others. */
static bool agreed(RunCtx *c, Transport *t, bool ok, char *err, size_t errlen) {
  bool together = false;
  if (transport_agree(t, ok, err, errlen, &together)) return true;
  if (err[0]) note_error(c, err);
  if (!together) transport_abort(t, err);
  return false;
}

/* pipe_drive's work on a rank: the interpreter, the validation pass, and the streamed
 * --log-json (pipeline_log.c; log: rank 0's, NULL elsewhere). */
typedef struct RankDrive {
  PipeRank *R;
  PipeEval *E;
  RtLog *log;
  RunCtx *c;
} RankDrive;

/* A stretch of training; with --log-json rank 0 first posts the receives of its first
 * batch's losses (the rest go as it trains: pipeline_log.c). */
static bool rank_run(void *ctx, int64_t lo, int64_t hi) {
  PipeRank *R = ((RankDrive *)ctx)->R;
  return (!R->logs || pipe_log_begin(R, lo, hi)) && exec_run_batches(R, lo, hi);
}
static bool rank_eval(void *ctx, double *mean) { return pipe_eval_run(((RankDrive *)ctx)->E, mean); }

/* The end of stretch [lo, hi) (its validation loss val): the log's last lines of the
 * stretch (the others went out as it trained). Rank 0's failed write, of any line of
 * the stretch, stops every rank here, agreed on (its message, the path, the step and
 * the cause; no abort), as a failed write of the one-stage log stops that trainer:
 * the lines already written stay whole. */
static bool rank_done(void *ctx, int64_t lo, int64_t hi, double val) {
  RankDrive *d = ctx;
  (void)lo;
  (void)hi;
  if (!pipe_log_stretch(d->R, val)) return false;
  /* (rank 0's log keeps its first failed write's message; the other ranks have none) */
  bool written = !d->log || !rt_log_error(d->log)[0];
  char err[TRANSPORT_ERR_LEN + IO_ERR_LEN] = "";
  if (!written) snprintf(err, sizeof err, "%s", rt_log_error(d->log));
  return agreed(d->c, d->R->t, written, err, sizeof err);
}

/* The rank as it starts training (its output paths checked by the driver,
 * pipeline_main_on): the rank made, --init then --resume read (as the one-stage trainer: a checkpoint
 * replaces both), the validation file opened. false with the message in err. */
static bool rank_setup(RunCtx *c, Transport *t, PipeRank **R, PipeEval **E, char *err, size_t errlen) {
  const PipeOptions *o = c->o;
  int64_t first = 0;
  char e[TRANSPORT_ERR_LEN + 256] = "";
  bool ok = pipe_ckpt_step(o->resume_path, &first, e, sizeof e) && (*R = pipe_rank_create(c->p, o, t, first, e, sizeof e));
  ok = ok && (!o->init_path || pipe_rank_init_from(*R, o->init_path, e, sizeof e));
  ok = ok && (!o->resume_path || pipe_rank_resume(*R, o->resume_path, e, sizeof e));
  ok = ok && (!o->val_path || (*E = pipe_eval_create(*R, e, sizeof e)));
  if (!ok) snprintf(err, errlen, "rank %d: %s", transport_rank(t), e);
  return ok;
}

static int run_rank(Transport *t, void *arg) {
  RunCtx *c = arg;
  char err[TRANSPORT_ERR_LEN + 320] = "";
  int rk = transport_rank(t), rc = 1;
  if (c->o->threads_per_rank > 0) pipe_rank_threads(c->o->threads_per_rank);
  PipeRank *R = NULL;
  PipeEval *E = NULL;
  RankDrive rd = {.c = c};
  PipeGathered G = {0};
  double *val = NULL, val_final = NAN;
  /* every rank's setup is agreed on before anything trains: a checkpoint one rank
   * cannot read stops all of them with that one message */
  bool ok = rank_setup(c, t, &R, &E, err, sizeof err);
  if (!agreed(c, t, ok, err, sizeof err)) goto done;
  rd.R = R, rd.E = E;
  int64_t first = R->first;
  const char *prog = c->o->prog ? c->o->prog : "pd2bwrun";
  if (rk == 0 && c->o->resume_path && !c->o->quiet)
    printf("%s: resumed from %s at step %lld\n", prog, c->o->resume_path, (long long)first);
  if (rk == 0 && first >= c->o->steps && c->o->resume_path)
    fprintf(stderr, "%s: %s is at step %lld already, --steps %lld: nothing to train\n", prog, c->o->resume_path,
            (long long)first, (long long)c->o->steps);
  /* --log-json: rank 0 opens it once the setup is agreed on (a failed setup leaves no
   * file), every rank hears whether it could */
  if (c->o->log_json) {
    if (rk == 0) rd.log = pipe_log_open(R, err, sizeof err);
    if (!agreed(c, t, rk != 0 || rd.log != NULL, err, sizeof err)) goto done;
    R->logs = pipe_log_create(R, rd.log);
    R->log_step = pipe_log_step;
  }
  /* the driver loop of every pipelined mode (pipeline_drive.c), the log streamed as
   * it trains */
  int64_t nb = R->steps > R->first ? R->steps - R->first : 0;
  val = pd_malloc((size_t)(nb + 1) * sizeof(double));
  PipeDrive drive = {.first = R->first, .steps = R->steps, .eval_every = c->o->eval_every, .run = rank_run,
                     .eval = E ? rank_eval : NULL, .ctx = &rd, .print = rk == 0 && !c->o->quiet,
                     .done = c->o->log_json ? rank_done : NULL,
                     /* one rank: a step per stretch with or without the log, as the one-stage trainer */
                     .log_every = c->p->nranks == 1 || c->o->log_json ? pipe_log_every(c->p) : 0};
  ok = pipe_drive(&drive, val, &val_final) && pipe_gather(R, &G);
  if (!ok) {
    note_error_root(c, R->err, R->stopped);
  } else {
    if (rk == 0) {
      /* (token ids outside the vocabulary stopped the run at their step: exec_interp.c) */
      fill_outcome(c->p, R, &G, val, val_final, c->out);
      ok = !rd.log || rt_log_finish(rd.log, err, sizeof err); /* its fsync and close */
      ok = ok && (!c->o->trace_path || (c->o->one_device ? pipe_trace_write_gpu : pipe_trace_write)(
                                    c->p, G.ev, G.nev, c->o->trace_path, err, sizeof err));
      ok = ok && (!c->o->profile_out || pipe_profile_write(c->p, G.seg, "cpu", c->o->profile_out, err, sizeof err));
      ok = ok && (!c->o->save_path || pipe_save(c->p, &G, R->steps, R->tc.seed, c->o->save_path, err, sizeof err));
    }
    /* rank 0's outputs: every rank ends with their outcome, rank 0's message */
    rc = agreed(c, t, ok, err, sizeof err) ? 0 : 1;
  }
done: /* every way out; the log's messages go before the log, everything before the rank */
  if (R) pipe_log_destroy(R, R->logs); /* (after a failed run: aborts if messages are outstanding) */
  rt_log_close(rd.log);
  pipe_eval_destroy(E);
  pipe_gathered_free(&G);
  pipe_rank_destroy(R);
  free(val);
  return rc;
}

int pipeline_run_local(const PipePlan *p, const PipeOptions *o, PipeOutcome *out, char *err, size_t errlen) {
  /* Compile (or find in the cache) every stage program once, here: the replicas of a
   * stage would otherwise compile the same file at the same time from one process,
   * and the compile cache's temporary names are per process, not per thread. (Ranks
   * on another device load their own programs: rank_device.) */
  for (int s = 0; s < p->d && !o->rank_device; s++) {
    StageProgram prog;
    if (!stage_program_load(p->rt->stages[s].source, 4, &prog, err, errlen)) return 1;
    if (!o->quiet) /* the line tests/cli/stage_cache_cli.sh reads, for every plan shape */
      printf("pd2bwrun: stage program %s (%s)\n", prog.so_path, prog.cache_hit ? "cached" : "compiled now");
    stage_program_unload(&prog);
  }
  RunCtx c = {.p = p, .o = o, .out = out};
  pthread_mutex_init(&c.mu, NULL);
  memset(out, 0, sizeof *out);
  TransportWorld *w = transport_local_create_world(p->nranks, o->timeout_s);
  char terr[TRANSPORT_ERR_LEN];
  terr[0] = 0;
  int rc = transport_local_run(w, run_rank, &c, terr, sizeof terr);
  transport_local_destroy_world(w);
  pthread_mutex_destroy(&c.mu);
  if (rc) snprintf(err, errlen, "%s", c.err[0] ? c.err : terr);
  return rc ? 1 : 0;
}

int pipeline_run_rank(const PipePlan *p, const PipeOptions *o, Transport *t, PipeOutcome *out, char *err,
                      size_t errlen) {
  RunCtx c = {.p = p, .o = o, .out = out};
  pthread_mutex_init(&c.mu, NULL);
  memset(out, 0, sizeof *out);
  int rc = run_rank(t, &c);
  pthread_mutex_destroy(&c.mu);
  /* (after a failure all ranks agreed on, the others' err is empty: rank 0 says it) */
  if (rc) snprintf(err, errlen, "%s", c.err[0] ? c.err : transport_error(t));
  return rc ? 1 : 0;
}
