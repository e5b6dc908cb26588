/* passes/plan_search.c — the search, and plan_create / plan_destroy.
 *
 * The search enumerates configurations (search: d, w, b, m, schedule, recomputation),
 * partitions each under both placements and scores it by the analytic pipeline formula
 * (analytic_step). The formula misses what only a simulation sees and can be off by 3x
 * on small batches, so the PLAN_SIM_PER_SCHEDULE candidates of each schedule with the
 * smallest analytic estimates are built and simulated, and candidates are ranked by
 * the simulated step time (rank_by_simulation): the figure plan.json predicts is the
 * one the choice was made on. Ties go to the preferred schedule (pref), then the
 * earlier candidate (better). */
#include "passes/planner.h"

#include <inttypes.h>
#include <string.h>

#define GiB (1024.0 * 1024.0 * 1024.0)

void plan_pins_init(PlanPins *p) {
  memset(p, 0, sizeof *p);
  p->schedule = -1;
  p->recompute = PR_AUTO;
}

bool plan_recompute_parse(const char *s, PlanRecompute *out) {
  static const char *const names[] = {[PR_AUTO] = "auto", [PR_OFF] = "off", [PR_ON] = "on"};
  for (int i = 0; i < 3; i++)
    if (strcmp(s, names[i]) == 0) {
      *out = (PlanRecompute)i;
      return true;
    }
  return false;
}

static void input_copy(PlanInput *dst, const PlanInput *src) {
  plan_input_init(dst, src->name);
  for (int i = 0; i < src->nsegs; i++) {
    PlanSegment *s = plan_input_add_segment(dst, src->segs[i].name);
    char *name = s->name;
    *s = src->segs[i];
    s->name = name;
    s->cuda = NULL, s->ncuda = 0;
    s->ops = NULL, s->nops = 0;
    for (int k = 0; k < src->segs[i].ncuda; k++) plan_segment_add_cuda(s, src->segs[i].cuda[k]);
    for (int k = 0; k < src->segs[i].nops; k++) plan_segment_add_op(s, src->segs[i].ops[k]);
  }
  for (int i = 0; i < src->ntied; i++)
    plan_input_add_tied(dst, src->tied[i].name, src->tied[i].count, src->tied[i].segs,
                        src->tied[i].nsegs);
  dst->input_bytes = src->input_bytes;
  dst->batch = src->batch;
  dst->microbatch = src->microbatch;
  dst->flush_steps = src->flush_steps;
  dst->steps = src->steps;
  dst->predict = src->predict;
  dst->predict_optional = src->predict_optional;
  dst->precision = plan_precision(src); /* a Plan says which: plan.json's "precision" */
  dst->cuda = src->cuda;
  memcpy(dst->gemm_rate, src->gemm_rate, sizeof dst->gemm_rate);
  memcpy(dst->gemm_latency_s, src->gemm_latency_s, sizeof dst->gemm_latency_s);
}

/* Ties go to the vanilla update rule (1f1b, then gpipe): 2bw and pipedream train on
 * stale weights (docs/update-rules.md, bench/convergence/RESULTS.md), which a schedule
 * must buy with speed. */
static const PlanSchedule pref[PS_COUNT] = {PS_1F1B, PS_GPIPE, PS_2BW, PS_PIPEDREAM};

static int sched_rank(PlanSchedule s) {
  for (int i = 0; i < PS_COUNT; i++)
    if (pref[i] == s) return i;
  return PS_COUNT;
}

static bool flush_sched(PlanSchedule s) { return s == PS_GPIPE || s == PS_1F1B; }

/* Per-stage times of a partition: t[i] per microbatch (compute + p2p), A[i] per batch. */
static void stage_times(const PlanInput *in, const Cluster *c, const PlanConfig *cfg,
                        PlanPlacement pl, const int *cuts, double *t, double *A) {
  int d = cfg->stages, w = cfg->replicas;
  double b = (double)cfg->microbatch_size;
  Cluster ce = plan_cluster_for_config(c, cfg);
  for (int i = 0; i < d; i++) {
    int a = cuts[i], e = cuts[i + 1];
    double f = plan_cost_fwd(in, &ce, a, e, cfg->microbatch_size);
    t[i] = f + plan_cost_bwd(in, &ce, a, e, cfg->microbatch_size) + (cfg->recompute ? f : 0);
    if (i > 0) {
      double bw = plan_place_p2p_bw(c, pl, d, w, i - 1);
      if (bw > 0) t[i] += 2 * plan_stage_in_bytes(in, a) * b / bw;
    }
    if (i < d - 1) {
      double bw = plan_place_p2p_bw(c, pl, d, w, i);
      if (bw > 0) t[i] += 2 * in->segs[e - 1].out_bytes * b / bw;
    }
    PlanStageSums s;
    plan_stage_sums(in, a, e, cfg->microbatch_size, &s);
    A[i] = plan_cost_allreduce((double)s.params * 4, w, plan_place_ar_bw(c, pl, d, w, i));
  }
}

/* The analytic pipeline formula, with t_i the slowest stage's compute + p2p per
 * microbatch and A_i its all-reduce:
 *   flush (gpipe, 1f1b):   step = (m + d - 1) max t_i + max A_i
 *   2bw, pipedream:        step = max (m t_i + A_i)       (no bubble in steady state)
 * It leaves out what the simulation sees (warm-up and drain that overlap the next
 * batch, the tied-parameter sync, transfers that do not overlap) and differs from it
 * by up to 3x on small batches: rank_by_simulation has the last word. */
static double analytic_step(const PlanConfig *cfg, const double *t, const double *A) {
  int d = cfg->stages;
  double m = (double)cfg->microbatches, tmax = 0, amax = 0, worst = 0;
  for (int i = 0; i < d; i++) {
    if (t[i] > tmax) tmax = t[i];
    if (A[i] > amax) amax = A[i];
    if (m * t[i] + A[i] > worst) worst = m * t[i] + A[i];
  }
  return flush_sched(cfg->schedule) ? (m + d - 1) * tmax + amax : worst;
}

typedef struct Search {
  const PlanInput *in;
  const Cluster *c;
  PlanCandidate *cands;
  int n, cap;
  int best; /* a fitting candidate (any), -1 if none */
  double best_over; /* smallest memory overage seen (bytes) */
  char refused[256];/* why a pinned-looking config cannot run at all */
} Search;

static void evaluate_one(Search *S, PlanConfig cfg) {
  const PlanInput *in = S->in;
  if (S->n == S->cap) {
    S->cap = S->cap ? 2 * S->cap : 64;
    S->cands = pd_realloc(S->cands, (size_t)S->cap * sizeof *S->cands);
  }
  PlanCandidate *k = &S->cands[S->n];
  memset(k, 0, sizeof *k);
  k->cfg = cfg;
  if (cfg.schedule == PS_2BW && cfg.microbatches < cfg.stages) {
    snprintf(k->why, sizeof k->why, "2bw needs m >= d (m = %" PRId64 " < d = %d)",
             cfg.microbatches, cfg.stages);
    snprintf(S->refused, sizeof S->refused,
             "schedule 2bw needs at least as many microbatches per batch as stages (m = %" PRId64
             " < d = %d): batch t uses W(t-1), which stage 0 has only once batch t-2 is "
             "finished, so m >= d microbatches must be in flight",
             cfg.microbatches, cfg.stages);
    S->n++;
    return;
  }
  if (cfg.microbatches > PLAN_MAX_MICROBATCHES) {
    snprintf(k->why, sizeof k->why, "%" PRId64 " microbatches per batch (at most %d)", cfg.microbatches,
             PLAN_MAX_MICROBATCHES);
    snprintf(S->refused, sizeof S->refused,
             "%" PRId64 " microbatches of %" PRId64 " per batch: a plan has at most %d (a larger microbatch size, "
             "or a smaller global batch)", cfg.microbatches, cfg.microbatch_size, PLAN_MAX_MICROBATCHES);
    S->n++;
    return;
  }
  /* The runtime's tables hold PLAN_MAX_SLOTS weight versions and stash slots per
   * stage (contract/plan_limits.h); stage 0 needs the most. */
  int nv = plan_versions_bound(cfg.schedule, cfg.stages, 0, cfg.microbatches, cfg.predict);
  int ns = plan_stash_bound(cfg.schedule, cfg.stages, 0, cfg.microbatches);
  if (nv > PLAN_MAX_SLOTS || ns > PLAN_MAX_SLOTS) {
    snprintf(k->why, sizeof k->why, "%d weight versions and %d stash slots on stage 0 (the runtime keeps %d)", nv,
             ns, PLAN_MAX_SLOTS);
    snprintf(S->refused, sizeof S->refused,
             "%s with %d stages and %" PRId64 " microbatches needs %d weight versions and %d stash slots on stage 0; "
             "the runtime keeps at most %d of each per stage",
             plan_schedule_name(cfg.schedule), cfg.stages, cfg.microbatches, nv, ns, PLAN_MAX_SLOTS);
    S->n++;
    return;
  }
  int d = cfg.stages;
  int *cuts = pd_malloc((size_t)(d + 1) * sizeof(int));
  double *t = pd_malloc((size_t)d * sizeof(double)), *A = pd_malloc((size_t)d * sizeof(double));
  double best = -1, over = 1e300, peak = 0;
  PlanPlacement bpl = PP_STAGE_MAJOR;
  int nplace = cfg.replicas > 1 && d > 1 ? 2 : 1;
  for (int p = 0; p < nplace; p++) {
    PlanPlacement pl = (PlanPlacement)p;
    double o = 0;
    if (plan_partition(in, S->c, &cfg, pl, cuts, &o) < 0) {
      if (o < over) over = o;
      break; /* memory does not depend on the placement: the other fails too */
    }
    stage_times(in, S->c, &cfg, pl, cuts, t, A);
    double step = analytic_step(&cfg, t, A);
    if (best < 0 || step < best) {
      best = step, bpl = pl;
      peak = 0;
      for (int i = 0; i < d; i++) {
        double mem = (double)plan_stage_memory(
            in, S->c, &cfg, i, cuts[i], cuts[i + 1], plan_versions_bound(cfg.schedule, d, i, cfg.microbatches, cfg.predict),
            plan_stash_bound(cfg.schedule, d, i, cfg.microbatches), NULL);
        if (mem > peak) peak = mem;
      }
    }
  }
  if (best < 0) {
    snprintf(k->why, sizeof k->why, "over memory by %.2f GiB", over / GiB);
    if (over < S->best_over) S->best_over = over;
  } else {
    k->fits = true;
    k->placement = bpl;
    k->analytic_s = k->step_time_s = best;
    k->samples_per_s = (double)in->batch / best;
    k->peak_bytes = peak;
    if (S->best < 0) S->best = S->n;
  }
  free(cuts), free(t), free(A);
  S->n++;
}

/* A 2bw candidate holds weight prediction's master copy (memory); where that does not
 * fit and prediction is pd2bwc's default rather than the user's, the same candidate
 * without it. */
static void evaluate(Search *S, PlanConfig cfg) {
  cfg.predict = cfg.schedule == PS_2BW && S->in->predict;
  evaluate_one(S, cfg);
  if (cfg.predict && S->in->predict_optional && !S->cands[S->n - 1].fits) {
    S->n--;
    cfg.predict = false;
    evaluate_one(S, cfg);
  }
}

static int64_t largest_divisor_le(int64_t n, int64_t cap) {
  for (int64_t w = cap < n ? cap : n; w >= 1; w--)
    if (n % w == 0) return w;
  return 1;
}

/* Candidates: d over powers of two up to min(segments, devices) plus d = segments;
 * w the largest divisor of the global batch B with d·w <= devices (replicas are
 * cheaper than idle devices; --replicas overrides); b over powers of two dividing
 * B/w (or the pinned / model-given b); m = B/(b·w); every schedule; recompute off and
 * on. That is at most ~8 x 12 x 4 x 2 partitions of O(n^2) each, which plans a
 * 96-layer GPT on 1024 devices well under a second. Each is partitioned under both
 * placements (plan_cost.c) and scored by analytic_step. */
static void search(Search *S, const PlanPins *pins, int devices) {
  const PlanInput *in = S->in;
  int n = in->nsegs;
  int64_t B = in->batch;
  int ds[40], nd = 0;
  if (pins->stages > 0) {
    ds[nd++] = pins->stages;
  } else {
    int lim = n < devices ? n : devices;
    for (int d = 1; d <= lim; d *= 2) ds[nd++] = d;
    if (ds[nd - 1] != lim && n <= devices) ds[nd++] = n;
  }
  for (int di = 0; di < nd; di++) {
    int d = ds[di];
    int64_t w = pins->replicas > 0 ? pins->replicas : largest_divisor_le(B, devices / d);
    if (w < 1 || B % w != 0) continue;
    int64_t per = B / w; /* b * m */
    int64_t bs[64];
    int nb = 0;
    if (pins->microbatch_size > 0) bs[nb++] = pins->microbatch_size;
    else if (pins->microbatches > 0) bs[nb++] = per % pins->microbatches ? -1 : per / pins->microbatches;
    else if (in->microbatch > 0) bs[nb++] = in->microbatch;
    else
      for (int64_t b = 1; b <= per && nb < 64; b *= 2)
        if (per % b == 0) bs[nb++] = b;
    for (int bi = 0; bi < nb; bi++) {
      int64_t b = bs[bi];
      if (b < 1 || per % b != 0) continue;
      int64_t m = per / b;
      if (pins->microbatches > 0 && m != pins->microbatches) continue;
      for (int si = 0; si < PS_COUNT; si++) {
        PlanSchedule s = pref[si];
        if (pins->schedule >= 0 && (int)s != pins->schedule) continue;
        /* one stage has no pipeline to keep full: the stale-weight rules buy nothing */
        if (pins->schedule < 0 && d == 1 && plan_schedule_stale(s)) continue;
        for (int rc = 0; rc < 2; rc++) {
          if (pins->recompute == PR_OFF && rc) continue;
          if (pins->recompute == PR_ON && !rc) continue;
          PlanConfig cfg = {d, (int)w, b, m, s, rc != 0, false}; /* evaluate sets predict */
          evaluate(S, cfg);
        }
      }
    }
  }
}

static bool check_pins(const PlanInput *in, const Cluster *c, const PlanPins *p, Diag *dg) {
  Loc none = {0};
  int devices = c->nodes * (c->devices_per_node > 0 ? c->devices_per_node : 1);
  if (in->nsegs < 1) return diag_error(dg, none, "nothing to plan: the model has no segments"), false;
  if (in->batch < 1)
    return diag_error(dg, none, "no global batch size: set 'batch' in the model's training section"),
           false;
  if (devices < 1) return diag_error(dg, c->loc, "the cluster has no devices"), false;
  if (!(plan_peak_flops(c, plan_precision(in)) > 0)) {
    const char *prec = gemm_type_name(plan_precision(in));
    diag_error(dg, c->loc, "--precision %s: cluster '%s' (device %s) gives no %s peak (no "
               "'tflops_%s'): the device has no %s arithmetic; use --precision %s", prec,
               c->name ? c->name : "?", c->device ? c->device : "?", prec, prec, prec,
               in->precision == GEMM_BF16 ? "tf32 or fp32" : "bf16");
    return false;
  }
  if (p->stages < 0 || p->stages > in->nsegs) {
    diag_error(dg, none, "--stages %d: the model can be cut into 1 to %d stages (%d segments)",
               p->stages, in->nsegs, in->nsegs);
    return false;
  }
  if (p->stages > devices) {
    diag_error(dg, none, "--stages %d: the cluster has only %d devices", p->stages, devices);
    return false;
  }
  if (p->replicas < 0 || (p->replicas > 0 && (p->stages > 0 ? p->stages : 1) * p->replicas > devices)) {
    diag_error(dg, none, "--replicas %d: %d stage(s) x %d replicas exceed the cluster's %d devices",
               p->replicas, p->stages > 0 ? p->stages : 1, p->replicas, devices);
    return false;
  }
  if (p->replicas > 0 && in->batch % p->replicas != 0) {
    diag_error(dg, none, "--replicas %d does not divide the global batch %" PRId64, p->replicas,
               in->batch);
    return false;
  }
  if (p->microbatch_size < 0 || p->microbatches < 0) {
    diag_error(dg, none, "microbatch size and count must be positive");
    return false;
  }
  return true;
}

/* Candidate x is better than y: a smaller step time, then the preferred schedule,
 * then the earlier candidate (x < y given as indices). */
static bool better(const PlanCandidate *cands, int x, int y) {
  const PlanCandidate *a = &cands[x], *b = &cands[y];
  double eps = 1e-12 * b->step_time_s;
  if (a->step_time_s < b->step_time_s - eps) return true;
  if (a->step_time_s > b->step_time_s + eps) return false;
  if (sched_rank(a->cfg.schedule) != sched_rank(b->cfg.schedule))
    return sched_rank(a->cfg.schedule) < sched_rank(b->cfg.schedule);
  return x < y;
}

static const PlanCandidate *sort_cands;
static int by_analytic(const void *x, const void *y) {
  const PlanCandidate *a = &sort_cands[*(const int *)x], *b = &sort_cands[*(const int *)y];
  if (a->analytic_s != b->analytic_s) return a->analytic_s < b->analytic_s ? -1 : 1;
  return *(const int *)x - *(const int *)y;
}

/* Builds and simulates the PLAN_SIM_PER_SCHEDULE best candidates of each schedule by
 * analytic estimate, replaces their step times by the simulation's and returns the
 * best candidate by that ranking. */
static int rank_by_simulation(const PlanInput *in, const Cluster *c, PlanCandidate *cands, int n) {
  int *order = pd_malloc((size_t)n * sizeof *order), nf = 0;
  for (int k = 0; k < n; k++)
    if (cands[k].fits) order[nf++] = k;
  sort_cands = cands;
  qsort(order, (size_t)nf, sizeof *order, by_analytic);
  int taken[PS_COUNT] = {0}, best = -1;
  double first[PS_COUNT] = {0}; /* each schedule's best analytic estimate */
  Plan *p = pd_calloc(1, sizeof *p);
  p->in = *in; /* borrowed: plan_build only reads it */
  p->cluster = *c;
  for (int j = 0; j < nf; j++) {
    PlanCandidate *k = &cands[order[j]];
    int s = k->cfg.schedule;
    if (!taken[s]) first[s] = k->analytic_s;
    if (taken[s] >= PLAN_SIM_PER_SCHEDULE || k->analytic_s > PLAN_SIM_WITHIN * first[s]) continue;
    taken[s]++;
    p->cfg = k->cfg;
    plan_build(p, k->placement, true);
    k->simulated = true;
    k->step_time_s = plan_run_step_time(p); /* 2bw: with its flushed start */
    k->samples_per_s = k->step_time_s > 0 ? (double)in->batch / k->step_time_s : 0;
    plan_free_parts(p);
    memset(p, 0, sizeof *p);
    p->in = *in, p->cluster = *c;
  }
  free(p);
  for (int j = 0; j < nf; j++)
    if (cands[order[j]].simulated && (best < 0 || better(cands, order[j], best))) best = order[j];
  free(order);
  return best;
}

Plan *plan_create(const PlanInput *in, const Cluster *c, const PlanPins *pins, Diag *dg) {
  PlanPins none;
  if (!pins) plan_pins_init(&none), pins = &none;
  if (!check_pins(in, c, pins, dg)) return NULL;
  int devices = c->nodes * (c->devices_per_node > 0 ? c->devices_per_node : 1);
  Search S;
  memset(&S, 0, sizeof S);
  S.in = in, S.c = c, S.best = -1, S.best_over = 1e300;
  search(&S, pins, devices);
  Loc noloc = {0};
  if (S.best < 0) {
    if (S.n == 0)
      diag_error(dg, noloc,
                 "no configuration matches the pins: the global batch %" PRId64
                 " must equal microbatch size x microbatches x replicas",
                 in->batch);
    else if (S.refused[0] && S.best_over > 1e299)
      diag_error(dg, noloc, "%s", S.refused);
    else if (!(S.best_over > 0)) /* fits, yet no finite step time: not a memory problem */
      diag_error(dg, noloc, "no configuration has a finite predicted step time (are the --profile times or the "
                 "cluster's rates sane?)");
    else
      diag_error(dg, noloc,
                 "the model does not fit on cluster '%s': the best configuration is over memory "
                 "by %.2f GiB per device (%.2f GiB available)",
                 c->name ? c->name : "?", S.best_over / GiB, c->memory_bytes / GiB);
    free(S.cands);
    return NULL;
  }
  S.best = rank_by_simulation(in, c, S.cands, S.n);
  Plan *p = pd_calloc(1, sizeof *p);
  input_copy(&p->in, in);
  p->cluster = *c;
  p->cfg = S.cands[S.best].cfg;
  p->cands = S.cands, p->ncands = S.n;
  const PlanCandidate *b = &S.cands[S.best];
  for (int i = 0; i < S.n; i++) {
    PlanCandidate *k = &S.cands[i];
    k->chosen = i == S.best;
    if (k->fits && !k->chosen && !k->simulated) {
      snprintf(k->why, sizeof k->why,
               "not simulated: analytic estimate %.6g samples/s, not among the %d best of schedule %s (or over %gx its best)",
               k->samples_per_s, PLAN_SIM_PER_SCHEDULE, plan_schedule_name(k->cfg.schedule), PLAN_SIM_WITHIN);
    } else if (k->fits && !k->chosen) {
      if (k->samples_per_s < b->samples_per_s * (1 - 1e-9))
        snprintf(k->why, sizeof k->why, "slower: %.6g samples/s vs %.6g", k->samples_per_s,
                 b->samples_per_s);
      else
        snprintf(k->why, sizeof k->why,
                 "as fast (%.6g samples/s); the chosen one comes first in the order of "
                 "preference (2bw, 1f1b, gpipe, pipedream; then fewer stages, smaller "
                 "microbatches, no recomputation)", k->samples_per_s);
    }
    if (k->chosen) snprintf(k->why, sizeof k->why, "chosen");
  }
  plan_build(p, b->placement, false);
  return p;
}

void plan_destroy(Plan *p) {
  if (!p) return;
  plan_free_parts(p);
  free(p->cands);
  plan_input_free(&p->in);
  free(p);
}

void plan_print_summary(const Plan *p, FILE *out) {
  const PlanConfig *c = &p->cfg;
  double B = (double)p->in.batch;
  fprintf(out, "plan: %d stages x %d replicas, microbatch %" PRId64 " x %" PRId64
          " per pipeline, schedule %s, recompute %s, placement %s, precision %s (%.4g TFLOP/s)\n",
          c->stages, c->replicas, c->microbatch_size, c->microbatches,
          plan_schedule_name(c->schedule), c->recompute ? "on" : "off",
          p->placement == PP_STAGE_MAJOR ? "stage-major" : "replica-major",
          gemm_type_name(plan_precision(&p->in)), plan_peak_flops(&p->cluster, plan_precision(&p->in)) / 1e12);
  fprintf(out, "predicted: %.6g s per batch of %.0f, %.6g samples/s, bubble %.1f%%\n",
          p->sim.step_time_s, B, p->sim.step_time_s > 0 ? B / p->sim.step_time_s : 0,
          100 * p->sim.bubble_fraction);
  if (p->flushed_step_s > 0) /* 2bw's flushed start (docs/update-rules.md) */
    fprintf(out, "flushed start: %lld steps at %.6g s per batch; over %lld steps %.6g s per batch on average\n",
            (long long)(p->in.flush_steps < p->in.steps || p->in.steps <= 0 ? p->in.flush_steps : p->in.steps),
            p->flushed_step_s, (long long)p->in.steps, plan_run_step_time(p));
  for (int i = 0; i < c->stages; i++) {
    const PlanStage *s = &p->stages[i];
    double dev = (double)plan_stage_device_bytes(s);
    char cs[64] = "";
    if (s->cuda_scratch >= 1048576)
      snprintf(cs, sizeof cs, " (cuda_scratch %.1f MiB)", (double)s->cuda_scratch / 1048576.0);
    else if (s->cuda_scratch)
      snprintf(cs, sizeof cs, " (cuda_scratch %.1f KiB)", (double)s->cuda_scratch / 1024.0);
    fprintf(out, "  stage %d: segments %s..%s (%d), %.4g M params, memory %.3f GiB%s%s, "
            "fwd %.4g ms, bwd %.4g ms, busy %.1f%%\n",
            i, p->in.segs[s->first_seg].name, p->in.segs[s->last_seg - 1].name,
            s->last_seg - s->first_seg, (double)s->params / 1e6, dev / GiB, cs,
            dev > p->cluster.memory_bytes ? " (OVER device memory)" : "", 1e3 * s->fwd_s, 1e3 * s->bwd_s,
            p->sim.step_time_s > 0 && p->sim.window_end_s > p->sim.window_start_s
                ? 100 * p->sim.busy_s[i] / (p->sim.window_end_s - p->sim.window_start_s)
                : 0);
  }
  int fits = 0;
  for (int i = 0; i < p->ncands; i++) fits += p->cands[i].fits;
  fprintf(out, "candidates: %d considered, %d fit in memory\n", p->ncands, fits);
}
