/* passes/plan_exec.c — executes instruction streams: the verifier and the simulator.
 *
 * One engine, so that what is verified is what is simulated (and what the runtime
 * runs). Each stage walks its stream in order. Compute instructions take their
 * cost. Sends and receives are blocking rendezvous: a group of consecutive
 * send/receive instructions (with_next) is posted at once and completes when every
 * one of them met its partner, which must be the head of the same channel on the
 * peer stage (channels are FIFO: stage i -> i+1 activations, i+1 -> i gradients).
 * A transfer starts when both sides posted and lasts bytes / bandwidth. TIED_SYNC is
 * a collective of the stages holding the tied parameter; ALLREDUCE runs among the w
 * replicas of one stage, which execute the same stream in lockstep, so it only costs
 * time here. When no stage can move and some are not finished, that is a deadlock.
 * Checked on the way (plan_exec in planner.h; each run_* function its instruction's
 * rules), any violation naming stage, instruction index and microbatch. */
#include "passes/plan_exec_state.h"

#include <stdarg.h>
#include <string.h>

bool exec_fail(Exec *x, int stage, int pc, const char *fmt, ...) {
  if (x->failed) return false;
  x->failed = true;
  int o = 0;
  if (stage >= 0 && pc >= 0 && pc < x->s->st[stage].n) {
    const PlanInstr *in = &x->s->st[stage].ins[pc];
    o = snprintf(x->err, x->errlen, "stage %d instruction %d (%s mb %" PRId64 "): ", stage, pc,
                 plan_op_name(in->op), in->mb);
  } else if (stage >= 0) {
    o = snprintf(x->err, x->errlen, "stage %d: ", stage);
  }
  if (o < 0 || (size_t)o >= x->errlen) o = 0;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(x->err + o, x->errlen - (size_t)o, fmt, ap);
  va_end(ap);
  return false;
}

void exec_event(Exec *x, int stage, int track, int pc, double start, double end, bool wait) {
  PlanSimResult *r = x->res;
  if (!r) return;
  if (r->nevents == r->cap_events) {
    r->cap_events = r->cap_events ? 2 * r->cap_events : 1024;
    r->events = pd_realloc(r->events, (size_t)r->cap_events * sizeof *r->events);
  }
  const PlanInstr *in = &x->s->st[stage].ins[pc];
  r->events[r->nevents++] = (PlanEvent){stage, track, pc, in->op, in->mb, in->batch, start, end, wait};
}

/* OPT_STEP of a deferred tied parameter (plan_tied_deferred). */
static bool tied_step(Exec *x, int s, const PlanInstr *in) {
  SState *S = &x->st[s];
  int pc = S->pc, g = in->group, t = in->batch;
  const PlanStreamSpec *sp = &x->s->spec;
  if (g >= sp->ngroups || !S->held[g] || !plan_tied_deferred(sp, g))
    return exec_fail(x, s, pc, "steps tied group %d, which this stage does not step apart", g);
  if (t != S->tsteps[g])
    return exec_fail(x, s, pc, "tied step of batch %d, expected batch %d", t, S->tsteps[g]);
  int src = sp->predict ? PLAN_MASTER_VSLOT : S->tlatest_slot[g]; /* prediction: the master */
  if (in->version != t + 1 || in->src_vslot != src)
    return exec_fail(x, s, pc, "tied step writes version %d from slot %d, expected %d from slot %d",
                     in->version, in->src_vslot, t + 1, src);
  if (in->vslot < 0 || in->vslot >= S->maxv)
    return exec_fail(x, s, pc, "version slot %d outside the plan's %d", in->vslot, S->maxv);
  if (S->slot_use[in->vslot] > 0)
    return exec_fail(x, s, pc, "tied step overwrites slot %d still read by a microbatch in flight",
                     in->vslot);
  S->tslot_ver[g * S->maxv + in->vslot] = in->version;
  S->tlatest_slot[g] = in->vslot;
  S->tsteps[g]++;
  return true;
}

/* FWD: the version the schedule prescribes (2bw: plan_2bw_version, max(floor((k-1)/m)
 * - 1, 0), or W(t) in a flushed start; other schedules: the newest), in the slot it
 * names, with a free stash slot; takes both. */
static bool run_fwd(Exec *x, int s, const PlanInstr *in) {
  SState *S = &x->st[s];
  int pc = S->pc;
  int64_t k = in->mb, m = x->m;
  if (!mb_ok(x, s, pc, k)) return false;
  if (S->fwd[k]) return exec_fail(x, s, pc, "second forward of the microbatch");
  if (s > 0 && !S->act_in[k]) return exec_fail(x, s, pc, "forward before its activation was received");
  if (in->vslot < 0 || in->vslot >= S->maxv)
    return exec_fail(x, s, pc, "version slot %d outside the plan's %d", in->vslot, S->maxv);
  if (S->slot_ver[in->vslot] != in->version)
    return exec_fail(x, s, pc, "version slot %d holds version %d, not %d", in->vslot,
                     S->slot_ver[in->vslot], in->version);
  int want = S->latest;
  if (x->s->spec.schedule == PS_2BW) want = plan_2bw_version(&x->s->spec, (int)((k - 1) / m));
  if (in->version != want)
    return exec_fail(x, s, pc, "uses version %d, the schedule prescribes %d", in->version, want);
  for (int g = 0; g < x->s->spec.ngroups; g++)
    if (S->held[g] && plan_tied_deferred(&x->s->spec, g) &&
        S->tslot_ver[g * S->maxv + in->vslot] != in->version)
      return exec_fail(x, s, pc, "tied group %d in slot %d holds version %d, not %d", g, in->vslot,
                       S->tslot_ver[g * S->maxv + in->vslot], in->version);
  if (in->sslot < 0 || in->sslot >= S->maxs)
    return exec_fail(x, s, pc, "stash slot %d outside the plan's %d", in->sslot, S->maxs);
  if (S->stash_used[in->sslot]) return exec_fail(x, s, pc, "stash slot %d still in use", in->sslot);
  S->fwd[k] = 1;
  S->fver[k] = in->version, S->fvslot[k] = in->vslot, S->fsslot[k] = in->sslot;
  S->slot_use[in->vslot]++;
  S->stash_used[in->sslot] = 1;
  if (++S->live_stash > S->max_stash) S->max_stash = S->live_stash;
  return true;
}

/* BWD: after its forward and its gradient's receive, with the forward's version and
 * stash slot; frees both. */
static bool run_bwd(Exec *x, int s, const PlanInstr *in) {
  SState *S = &x->st[s];
  int pc = S->pc, d = x->d;
  int64_t k = in->mb, m = x->m;
  if (!mb_ok(x, s, pc, k)) return false;
  if (!S->fwd[k]) return exec_fail(x, s, pc, "backward before the forward");
  if (S->bwd[k]) return exec_fail(x, s, pc, "second backward of the microbatch");
  if (s < d - 1 && !S->grad_in[k]) return exec_fail(x, s, pc, "backward before its gradient was received");
  if (in->version != S->fver[k] || in->vslot != S->fvslot[k])
    return exec_fail(x, s, pc, "backward uses version %d (slot %d), its forward used %d (slot %d)",
                     in->version, in->vslot, S->fver[k], S->fvslot[k]);
  if (in->sslot != S->fsslot[k])
    return exec_fail(x, s, pc, "backward reads stash slot %d, its forward wrote %d", in->sslot,
                     S->fsslot[k]);
  if (S->slot_ver[in->vslot] != in->version)
    return exec_fail(x, s, pc, "version %d was overwritten before the backward", in->version);
  for (int g = 0; g < x->s->spec.ngroups; g++)
    if (S->held[g] && plan_tied_deferred(&x->s->spec, g) && S->tsteps[g] < (k - 1) / m - 1)
      return exec_fail(x, s, pc, "accumulates into tied group %d's gradient buffer before batch %d "
                       "was synced and stepped", g, (int)((k - 1) / m - 2));
  S->bwd[k] = 1;
  S->slot_use[in->vslot]--;
  S->stash_used[in->sslot] = 0;
  S->live_stash--;
  S->bwd_count[(k - 1) / m]++;
  return true;
}

/* OPT_STEP of a batch (not a deferred tied step): after its m backwards (and its
 * all-reduce), from the newest version into a slot no microbatch in flight reads. */
static bool run_step(Exec *x, int s, const PlanInstr *in) {
  SState *S = &x->st[s];
  int pc = S->pc, t = in->batch;
  int64_t m = x->m;
  if (t != S->steps) return exec_fail(x, s, pc, "step of batch %d, expected batch %d", t, S->steps);
  if (S->bwd_count[t] != m)
    return exec_fail(x, s, pc, "step of batch %d after %" PRId64 " of its %" PRId64 " backwards", t,
                     S->bwd_count[t], m);
  if (x->s->spec.replicas > 1 && S->allreduced != t + 1)
    return exec_fail(x, s, pc, "step of batch %d before its all-reduce over the replicas", t);
  int src = x->s->spec.predict ? PLAN_MASTER_VSLOT : S->latest_slot; /* prediction: the master */
  if (in->src_vslot != src)
    return exec_fail(x, s, pc, "updates slot %d, the newest version is in slot %d", in->src_vslot, src);
  if (in->version != S->latest + 1)
    return exec_fail(x, s, pc, "produces version %d, expected %d", in->version, S->latest + 1);
  if (in->vslot < 0 || in->vslot >= S->maxv)
    return exec_fail(x, s, pc, "version slot %d outside the plan's %d", in->vslot, S->maxv);
  if (S->slot_use[in->vslot] > 0) {
    int64_t who = 0;
    for (int64_t q = 1; q <= x->N && !who; q++)
      if (S->fwd[q] && !S->bwd[q] && S->fvslot[q] == in->vslot) who = q;
    return exec_fail(x, s, pc, "overwrites version %d still read by microbatch %" PRId64 " in flight",
                     S->slot_ver[in->vslot], who);
  }
  S->slot_ver[in->vslot] = in->version;
  S->latest = in->version, S->latest_slot = in->vslot;
  S->steps++;
  int live = 0;
  for (int q = 0; q < S->maxv; q++) live += S->slot_ver[q] >= 0;
  if (live > S->max_versions) S->max_versions = live;
  return true;
}

/* FWD / BWD / ALLREDUCE / OPT_STEP: returns false on a violation. */
static bool run_compute(Exec *x, int s, const PlanInstr *in) {
  SState *S = &x->st[s];
  int pc = S->pc;
  int64_t m = x->m;
  const PlanCosts *c = x->c;
  double dur = 0;
  switch (in->op) {
  case PI_FWD:
    if (!run_fwd(x, s, in)) return false;
    dur = cost_of(c ? c->fwd : NULL, s);
    break;
  case PI_BWD:
    if (!run_bwd(x, s, in)) return false;
    dur = cost_of(c ? c->bwd : NULL, s);
    break;
  case PI_ALLREDUCE:
    if (in->batch != S->steps || S->bwd_count[in->batch] != m)
      return exec_fail(x, s, pc, "all-reduce of batch %d before its %" PRId64 " backwards", in->batch, m);
    if (in->batch != S->allreduced)
      return exec_fail(x, s, pc, "all-reduce of batch %d, expected batch %d", in->batch, S->allreduced);
    S->allreduced++;
    dur = cost_of(c ? c->allreduce : NULL, s);
    break;
  case PI_OPT_STEP:
    if (in->group >= 0) {
      if (!tied_step(x, s, in)) return false;
      dur = c && c->tied_step ? c->tied_step[in->group] : cost_of(c ? c->step : NULL, s);
    } else {
      if (!run_step(x, s, in)) return false;
      dur = cost_of(c ? c->step : NULL, s);
    }
    break;
  case PI_RECV_ACT:
  case PI_SEND_ACT:
  case PI_RECV_GRAD:
  case PI_SEND_GRAD:
  case PI_TIED_SYNC:
  case PI_COUNT: PD_CHECK(0, "not a compute op"); break;
  }
  exec_event(x, s, in->op == PI_ALLREDUCE ? 1 : 0, pc, S->clock, S->clock + dur, false);
  S->clock += dur;
  if (in->op == PI_OPT_STEP && in->group < 0) S->step_end[in->batch] = S->clock;
  S->pc++;
  return true;
}

/* Moves stage s as far as it can; 1 progress, 0 blocked/finished, -1 error. */
static int advance(Exec *x, int s) {
  SState *S = &x->st[s];
  const PlanStream *st = &x->s->st[s];
  if (S->pc >= st->n) return 0;
  const PlanInstr *in = &st->ins[S->pc];
  if (is_comm(in->op)) return exec_comm(x, s);
  if (in->op == PI_TIED_SYNC) return exec_tied_post(x, s) ? 1 : -1;
  if (in->op == PI_OPT_STEP && in->group < 0 && x->d > 1 && x->c && x->c->norm_barrier) {
    int r = exec_norm_wait(x, s, in);
    if (r != 1) return r == 2 ? 1 : r;
  }
  if (in->op == PI_OPT_STEP) {
    int r = exec_tied_wait(x, s, in);
    if (r <= 0) return r;
  }
  if (in->with_next) return exec_fail(x, s, S->pc, "with_next on a compute instruction"), -1;
  if ((unsigned)in->op >= PI_COUNT) return exec_fail(x, s, S->pc, "unknown op %d", (int)in->op), -1;
  return run_compute(x, s, in) ? 1 : -1;
}

static void deadlock(Exec *x) {
  char buf[512];
  size_t o = 0;
  int first = -1;
  for (int s = 0; s < x->d; s++) {
    SState *S = &x->st[s];
    if (S->pc >= x->s->st[s].n) continue;
    if (first < 0) first = s;
    char ib[96];
    int w = snprintf(buf + o, sizeof buf - o, "%s stage %d waits at %d (%s)", o ? ";" : "", s,
                     S->pc, plan_instr_str(&x->s->st[s].ins[S->pc], ib, sizeof ib));
    if (w > 0 && (size_t)w < sizeof buf - o) o += (size_t)w;
  }
  exec_fail(x, first, x->st[first].pc, "deadlock:%s", buf);
}

static bool finish_checks(Exec *x) {
  for (int s = 0; s < x->d; s++) {
    SState *S = &x->st[s];
    for (int64_t k = 1; k <= x->N; k++) {
      if (!S->fwd[k]) return exec_fail(x, s, -1, "microbatch %" PRId64 " never ran forward", k);
      if (!S->bwd[k]) return exec_fail(x, s, -1, "microbatch %" PRId64 " never ran backward", k);
    }
    if (S->steps != x->s->spec.nbatches)
      return exec_fail(x, s, -1, "%d optimizer steps for %d batches", S->steps, x->s->spec.nbatches);
    if (x->s->spec.replicas > 1 && S->allreduced != x->s->spec.nbatches)
      return exec_fail(x, s, -1, "%d all-reduces for %d batches", S->allreduced, x->s->spec.nbatches);
    for (int g = 0; g < x->s->spec.ngroups; g++) {
      if (!S->held[g] || x->s->spec.groups[g].nstages < 2) continue;
      if (S->tsync[g] != x->s->spec.nbatches)
        return exec_fail(x, s, -1, "%d tied syncs of group %d for %d batches", S->tsync[g], g,
                         x->s->spec.nbatches);
      if (plan_tied_deferred(&x->s->spec, g) && S->tsteps[g] != x->s->spec.nbatches)
        return exec_fail(x, s, -1, "%d tied steps of group %d for %d batches", S->tsteps[g], g,
                         x->s->spec.nbatches);
    }
  }
  return true;
}

static void summarize(Exec *x) {
  PlanSimResult *r = x->res;
  int d = x->d, nb = x->s->spec.nbatches;
  r->total_s = 0;
  for (int s = 0; s < d; s++)
    if (x->st[s].clock > r->total_s) r->total_s = x->st[s].clock;
  /* steady state: between stage 0's steps of batch 1 and batch nb-2 */
  double a = 0, b = r->total_s, per = nb > 0 ? r->total_s / nb : 0;
  if (nb >= 4) {
    a = x->st[0].step_end[1], b = x->st[0].step_end[nb - 2];
    per = (b - a) / (nb - 3);
  }
  r->window_start_s = a, r->window_end_s = b, r->step_time_s = per;
  double busy_all = 0;
  for (int s = 0; s < d; s++) r->busy_s[s] = 0;
  for (int e = 0; e < r->nevents; e++) {
    const PlanEvent *ev = &r->events[e];
    if (ev->track != 0) continue;
    double lo = ev->start > a ? ev->start : a, hi = ev->end < b ? ev->end : b;
    if (hi > lo) r->busy_s[ev->stage] += hi - lo;
  }
  for (int s = 0; s < d; s++) {
    r->idle_s[s] = (b - a) - r->busy_s[s];
    busy_all += r->busy_s[s];
    r->max_stash[s] = x->st[s].max_stash;
    r->max_versions[s] = x->st[s].max_versions;
  }
  r->bubble_fraction = b > a ? 1.0 - busy_all / (d * (b - a)) : 0;
}

bool plan_exec(const PlanStreams *s, const int *max_versions, const int *max_stash,
               const PlanCosts *costs, bool record_events, PlanSimResult *res, char *err,
               size_t errlen) {
  Exec x;
  memset(&x, 0, sizeof x);
  x.s = s, x.c = costs, x.d = s->spec.stages, x.m = s->spec.microbatches;
  x.N = x.m * s->spec.nbatches;
  x.err = err, x.errlen = errlen;
  if (errlen) err[0] = 0;
  PlanSimResult scratch;
  memset(&scratch, 0, sizeof scratch);
  x.res = res ? res : &scratch;
  memset(x.res, 0, sizeof *x.res);
  int d = x.d, nb = s->spec.nbatches;
  size_t N1 = (size_t)x.N + 1;
  x.st = pd_calloc((size_t)d, sizeof *x.st);
  size_t ntp = (size_t)(s->spec.ngroups > 0 ? s->spec.ngroups : 1) * (size_t)(nb > 0 ? nb : 1);
  x.tposts = pd_calloc(ntp, sizeof(int));
  x.tpost_max = pd_calloc(ntp, sizeof(double));
  x.nposts = pd_calloc((size_t)nb + 1, sizeof(int));
  x.npost_max = pd_calloc((size_t)nb + 1, sizeof(double));
  for (int i = 0; i < d; i++) {
    SState *S = &x.st[i];
    S->maxv = max_versions ? max_versions[i] : s->nversions[i];
    S->maxs = max_stash ? max_stash[i] : s->nstash[i];
    S->fwd = pd_calloc(N1, 1), S->bwd = pd_calloc(N1, 1);
    S->act_in = pd_calloc(N1, 1), S->grad_in = pd_calloc(N1, 1);
    S->fver = pd_calloc(N1, sizeof(int)), S->fvslot = pd_calloc(N1, sizeof(int));
    S->fsslot = pd_calloc(N1, sizeof(int));
    S->bwd_count = pd_calloc((size_t)nb + 1, sizeof(int64_t));
    S->step_end = pd_calloc((size_t)nb + 1, sizeof(double));
    int nv = S->maxv > 0 ? S->maxv : 1, ns = S->maxs > 0 ? S->maxs : 1;
    S->slot_ver = pd_malloc((size_t)nv * sizeof(int));
    for (int q = 0; q < nv; q++) S->slot_ver[q] = -1;
    if (S->maxv > 0) S->slot_ver[0] = 0;
    S->slot_use = pd_calloc((size_t)nv, sizeof(int));
    S->stash_used = pd_calloc((size_t)ns, sizeof(int));
    S->max_versions = S->maxv > 0 ? 1 : 0;
    int ng = s->spec.ngroups > 0 ? s->spec.ngroups : 1;
    S->held = pd_calloc((size_t)ng, sizeof(bool));
    S->tsync = pd_calloc((size_t)ng, sizeof(int));
    S->tsteps = pd_calloc((size_t)ng, sizeof(int));
    S->tlatest_slot = pd_calloc((size_t)ng, sizeof(int));
    S->tslot_ver = pd_malloc((size_t)ng * (size_t)nv * sizeof(int));
    for (int g = 0; g < ng; g++) {
      for (int q = 0; q < nv; q++) S->tslot_ver[g * nv + q] = q == 0 ? 0 : -1;
      if (g < s->spec.ngroups)
        for (int j = 0; j < s->spec.groups[g].nstages; j++)
          S->held[g] |= s->spec.groups[g].stages[j] == i;
    }
  }
  bool ok = true;
  for (;;) {
    bool progress = false, all_done = true;
    for (int i = 0; i < d && ok; i++) {
      int r;
      while ((r = advance(&x, i)) > 0) progress = true;
      if (r < 0) ok = false;
      if (x.st[i].pc < s->st[i].n) all_done = false;
    }
    if (!ok || all_done) break;
    if (!progress) {
      deadlock(&x);
      ok = false;
      break;
    }
  }
  if (ok) ok = finish_checks(&x);
  x.res->busy_s = pd_calloc((size_t)d, sizeof(double));
  x.res->idle_s = pd_calloc((size_t)d, sizeof(double));
  x.res->max_stash = pd_calloc((size_t)d, sizeof(int));
  x.res->max_versions = pd_calloc((size_t)d, sizeof(int));
  if (ok) summarize(&x);
  if (!record_events && res) {
    free(res->events);
    res->events = NULL;
    res->nevents = res->cap_events = 0;
  }
  for (int i = 0; i < d; i++) {
    SState *S = &x.st[i];
    free(S->fwd), free(S->bwd), free(S->act_in), free(S->grad_in);
    free(S->fver), free(S->fvslot), free(S->fsslot), free(S->bwd_count), free(S->step_end);
    free(S->slot_ver), free(S->slot_use), free(S->stash_used);
    free(S->held), free(S->tsync), free(S->tsteps), free(S->tlatest_slot), free(S->tslot_ver);
  }
  free(x.st);
  free(x.tposts), free(x.tpost_max), free(x.nposts), free(x.npost_max);
  plan_sim_result_free(&scratch);
  return ok;
}

bool plan_verify(const PlanStreams *s, const int *max_versions, const int *max_stash,
                 char *err, size_t errlen) {
  return plan_exec(s, max_versions, max_stash, NULL, false, NULL, err, errlen);
}

void plan_sim_result_free(PlanSimResult *r) {
  free(r->busy_s), free(r->idle_s), free(r->max_stash), free(r->max_versions);
  free(r->events);
  memset(r, 0, sizeof *r);
}
