/* passes/plan_build.c — turns a chosen configuration into a Plan's parts.
 *
 * The search (plan_search.c) picks configurations by estimate; this file builds one
 * in full, in order: the partition into stages and their ranks, the tied groups, the
 * instruction streams, each stage's memory (slots sized from streams long enough to
 * reach the steady state) and times, the simulator's costs, and the simulation. The
 * search builds its best candidates once each to rank them by simulated step time
 * (rank_only), and plan_create the chosen one with everything plan.json carries.
 * Apart from the search because it is the one place that knows what a Plan holds and
 * how each part follows from the configuration; plan_free_parts is its inverse.
 */
#include "passes/planner.h"

#include <string.h>

static double stage_bw_between(const Plan *p, int sa, int sb) {
  int ra = p->stages[sa].ranks[0].rank, rb = p->stages[sb].ranks[0].rank;
  return plan_cost_link(&p->cluster, ra, rb);
}

/* Stages from the partition's cut points, each with its w replicas' ranks. */
static void build_stages(Plan *p, PlanPlacement pl, const int *cuts) {
  int d = p->cfg.stages, w = p->cfg.replicas;
  int dpn = p->cluster.devices_per_node > 0 ? p->cluster.devices_per_node : 1;
  p->stages = pd_calloc((size_t)d, sizeof *p->stages);
  for (int i = 0; i < d; i++) {
    PlanStage *st = &p->stages[i];
    st->first_seg = cuts[i], st->last_seg = cuts[i + 1];
    st->ranks = pd_calloc((size_t)w, sizeof *st->ranks);
    for (int r = 0; r < w; r++) {
      int rank = plan_place_rank(pl, d, w, i, r);
      st->ranks[r] = (PlanRank){r, rank, rank / dpn, rank % dpn};
    }
  }
}

/* Tied groups: the stages holding each tied parameter. */
static void build_groups(Plan *p, const int *cuts) {
  const PlanInput *in = &p->in;
  int d = p->cfg.stages;
  p->groups = pd_calloc((size_t)(in->ntied > 0 ? in->ntied : 1), sizeof *p->groups);
  p->tied_over = -1, p->tied_over_stages = 0;
  for (int t = 0; t < in->ntied; t++) {
    PlanTiedGroup *G = &p->groups[p->ngroups++];
    G->tied = t;
    int held = 0;
    for (int i = 0; i < d; i++)
      if (plan_tied_in(&in->tied[t], cuts[i], cuts[i + 1])) {
        if (G->nstages < PLAN_MAX_TIED_SEGS) G->stages[G->nstages++] = i;
        held++;
      }
    if (held > PLAN_MAX_TIED_SEGS && p->tied_over < 0) p->tied_over = t, p->tied_over_stages = held;
  }
}

/* Each stage's version and stash slots, memory, compute times and boundary bytes. */
static void size_stages(Plan *p, bool rank_only) {
  const PlanInput *in = &p->in;
  const Cluster *c = &p->cluster;
  const PlanConfig *cfg = &p->cfg;
  int d = cfg->stages;
  /* Slots are sized from streams long enough to reach the steady state: with few
   * microbatches per batch (pipedream, m < d) the 3 batches plan.json carries end
   * before a stage holds its most versions, and a longer run (the runtime generates
   * streams for every batch it trains, the simulator for PLAN_SIM_BATCHES) needs more
   * slots than those 3 batches show. */
  int64_t mb_per_batch = cfg->microbatches > 0 ? cfg->microbatches : 1;
  int size_batches = (int)((4 * (int64_t)d + mb_per_batch - 1) / mb_per_batch) + 2;
  if (size_batches < PLAN_SIM_BATCHES) size_batches = PLAN_SIM_BATCHES;
  PlanStreams sizing;
  memset(&sizing, 0, sizeof sizing);
  if (rank_only) {
    sizing.nversions = pd_malloc((size_t)d * sizeof(int));
    sizing.nstash = pd_malloc((size_t)d * sizeof(int));
    for (int i = 0; i < d; i++) {
      sizing.nversions[i] = plan_versions_bound(cfg->schedule, d, i, cfg->microbatches, cfg->predict);
      sizing.nstash[i] = plan_stash_bound(cfg->schedule, d, i, cfg->microbatches);
    }
  } else {
    PD_CHECK(plan_streams_generate(p, size_batches, &sizing), "streams");
  }
  for (int i = 0; i < d; i++) {
    PlanStage *st = &p->stages[i];
    plan_stage_memory(in, c, cfg, i, st->first_seg, st->last_seg, sizing.nversions[i], sizing.nstash[i], st);
    /* the search sized memory with plan_versions_bound/plan_stash_bound */
    PD_CHECK(sizing.nversions[i] <= plan_versions_bound(cfg->schedule, d, i, cfg->microbatches, cfg->predict) &&
                 sizing.nstash[i] <= plan_stash_bound(cfg->schedule, d, i, cfg->microbatches) &&
                 (double)plan_stage_device_bytes(st) <= c->memory_bytes,
             "stage %d needs %d versions, %d stash slots, %.0f bytes", i, sizing.nversions[i],
             sizing.nstash[i], (double)plan_stage_device_bytes(st));
    int64_t b = cfg->microbatch_size;
    Cluster ce = plan_cluster_for_config(c, cfg);
    double f = plan_cost_fwd(in, &ce, st->first_seg, st->last_seg, b);
    st->fwd_s = f;
    st->bwd_s = plan_cost_bwd(in, &ce, st->first_seg, st->last_seg, b) + (cfg->recompute ? f : 0);
    st->in_bytes = plan_stage_in_bytes(in, st->first_seg) * (double)b;
    st->out_bytes = in->segs[st->last_seg - 1].out_bytes * (double)b;
  }
  if (rank_only) free(sizing.nversions), free(sizing.nstash);
  else plan_streams_free(&sizing);
}

/* The simulator's costs: per stage compute, transfers, all-reduce and optimizer
 * step; per tied group its gradient sum and (deferred) step. */
static void sim_costs(Plan *p, PlanPlacement pl) {
  const PlanInput *in = &p->in;
  const Cluster *c = &p->cluster;
  const PlanConfig *cfg = &p->cfg;
  int d = cfg->stages, w = cfg->replicas;
  p->fwd_s = pd_calloc((size_t)d, sizeof(double));
  p->bwd_s = pd_calloc((size_t)d, sizeof(double));
  p->act_xfer = pd_calloc((size_t)d, sizeof(double));
  p->grad_xfer = pd_calloc((size_t)d, sizeof(double));
  p->allreduce_s = pd_calloc((size_t)d, sizeof(double));
  p->step_s = pd_calloc((size_t)d, sizeof(double));
  p->tied_s = pd_calloc((size_t)(p->ngroups > 0 ? p->ngroups : 1), sizeof(double));
  p->tied_step_s = pd_calloc((size_t)(p->ngroups > 0 ? p->ngroups : 1), sizeof(double));
  double opt_bw = c->optimizer_bandwidth > 0 ? c->optimizer_bandwidth : c->mem_bandwidth;
  double step_bytes = PLAN_STEP_BYTES + (cfg->predict ? PLAN_PREDICT_BYTES : 0);
  for (int i = 0; i < d; i++) {
    PlanStage *st = &p->stages[i];
    p->fwd_s[i] = st->fwd_s, p->bwd_s[i] = st->bwd_s;
    if (i < d - 1) {
      double bw = plan_place_p2p_bw(c, pl, d, w, i);
      p->act_xfer[i] = bw > 0 ? st->out_bytes / bw : 0;
    }
    if (i > 0) {
      double bw = plan_place_p2p_bw(c, pl, d, w, i - 1);
      p->grad_xfer[i] = bw > 0 ? st->in_bytes / bw : 0;
    }
    p->allreduce_s[i] = plan_cost_allreduce((double)st->params * 4, w, plan_place_ar_bw(c, pl, d, w, i));
    /* the parameters a deferred tied group's own OPT_STEP updates are not in this one
     * (plan_tied_deferred's rule: 2bw, a group over several stages) */
    double own = (double)st->params;
    for (int g = 0; g < p->ngroups; g++)
      if (p->groups[g].nstages > 1 && cfg->schedule == PS_2BW)
        for (int q = 0; q < p->groups[g].nstages; q++)
          if (p->groups[g].stages[q] == i) own -= (double)in->tied[p->groups[g].tied].count;
    p->step_s[i] = opt_bw > 0 ? own * step_bytes / opt_bw : 0;
  }
  for (int g = 0; g < p->ngroups; g++) {
    const PlanTiedGroup *G = &p->groups[g];
    if (G->nstages < 2) continue;
    double bw = stage_bw_between(p, G->stages[0], G->stages[G->nstages - 1]);
    p->tied_s[g] = plan_cost_allreduce((double)in->tied[G->tied].count * 4, G->nstages, bw);
    p->tied_step_s[g] = opt_bw > 0 ? (double)in->tied[G->tied].count * step_bytes / opt_bw : 0;
  }
}

/* The plan's streams of nbatches batches with a flushed start of `flush` (2bw only). */
static bool streams_flushed(const Plan *p, int nbatches, int64_t flush, PlanStreams *out) {
  bool twobw = p->cfg.schedule == PS_2BW;
  int64_t k = flush < nbatches + 1 ? flush : nbatches + 1;
  PlanStreamSpec sp = {.stages = p->cfg.stages, .microbatches = p->cfg.microbatches, .schedule = p->cfg.schedule,
                       .nbatches = nbatches, .replicas = p->cfg.replicas, .groups = p->groups,
                       .ngroups = p->ngroups, .flush_batches = twobw ? (int)k : 0, .predict = twobw && p->cfg.predict};
  char err[512];
  return plan_streams_build(&sp, out, err, sizeof err);
}

void plan_build(Plan *p, PlanPlacement pl, bool rank_only) {
  int d = p->cfg.stages;
  p->placement = pl;
  int *cuts = pd_malloc((size_t)(d + 1) * sizeof(int));
  double over = 0;
  PD_CHECK(plan_partition(&p->in, &p->cluster, &p->cfg, pl, cuts, &over) >= 0,
           "chosen config no longer fits");
  build_stages(p, pl, cuts);
  build_groups(p, cuts);
  if (!rank_only) PD_CHECK(plan_streams_generate(p, PLAN_FILE_BATCHES, &p->streams), "streams");
  size_stages(p, rank_only);
  char err[512];
  int *nv = pd_malloc((size_t)d * sizeof(int)), *ns = pd_malloc((size_t)d * sizeof(int));
  for (int i = 0; i < d; i++) nv[i] = p->stages[i].nversions, ns[i] = p->stages[i].nstash;
  bool ok = rank_only || plan_verify(&p->streams, nv, ns, err, sizeof err);
  PD_CHECK(ok, "plan streams fail verification: %s", err);
  sim_costs(p, pl);
  PlanStreams sim;
  PD_CHECK(streams_flushed(p, PLAN_SIM_BATCHES, 0, &sim), "streams"); /* the steady state */
  PlanCosts costs = {p->fwd_s, p->bwd_s, p->act_xfer, p->grad_xfer, p->allreduce_s, p->step_s,
                     p->tied_s, p->tied_step_s, true};
  ok = plan_exec(&sim, nv, ns, &costs, !rank_only, &p->sim, err, sizeof err);
  PD_CHECK(ok, "simulation fails verification: %s", err);
  plan_streams_free(&sim);
  p->flushed_step_s = 0;
  if (p->cfg.schedule == PS_2BW && p->in.flush_steps > 1) {
    /* 2bw's flushed start: the transition into the steady state verified (batch 0
     * flushed), and a flushed batch's time from a run of them */
    PD_CHECK(streams_flushed(p, PLAN_SIM_BATCHES, 2, &sim), "streams");
    ok = plan_verify(&sim, nv, ns, err, sizeof err);
    PD_CHECK(ok, "the flushed start's streams fail verification: %s", err);
    plan_streams_free(&sim);
    PD_CHECK(streams_flushed(p, PLAN_SIM_BATCHES, PLAN_SIM_BATCHES + 1, &sim), "streams");
    PlanSimResult fr = {0};
    ok = plan_exec(&sim, nv, ns, &costs, false, &fr, err, sizeof err);
    PD_CHECK(ok, "the flushed start's simulation fails verification: %s", err);
    p->flushed_step_s = fr.step_time_s;
    plan_sim_result_free(&fr);
    plan_streams_free(&sim);
  }
  free(nv), free(ns), free(cuts);
}

double plan_run_step_time(const Plan *p) {
  double t = p->sim.step_time_s;
  int64_t S = p->in.steps, K = p->in.flush_steps < S ? p->in.flush_steps : S;
  if (p->flushed_step_s <= 0 || S <= 0) return t;
  return ((double)(S - K) * t + (double)K * p->flushed_step_s) / (double)S;
}

bool plan_streams_generate(const Plan *p, int nbatches, PlanStreams *out) {
  return streams_flushed(p, nbatches, p->in.flush_steps, out);
}

void plan_free_parts(Plan *p) {
  for (int i = 0; i < p->cfg.stages; i++) free(p->stages[i].bufs), free(p->stages[i].ranks);
  free(p->stages);
  free(p->groups);
  plan_streams_free(&p->streams);
  plan_sim_result_free(&p->sim);
  free(p->act_xfer), free(p->grad_xfer), free(p->allreduce_s), free(p->step_s), free(p->tied_s), free(p->tied_step_s);
  free(p->fwd_s), free(p->bwd_s);
}
