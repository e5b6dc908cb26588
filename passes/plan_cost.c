/* passes/plan_cost.c — the cost model (PipeDream-2BW, Appendix A) and placement.
 *
 * Compute: each segment runs at the roofline, max(FLOPs / peak, bytes / memory
 * bandwidth), times the microbatch size, forward and backward separately. The peak
 * is the cluster's for the plan's GEMM precision (plan_peak_flops): on an H200 bf16
 * runs at twice the tf32 rate and ~15x the fp32 one. Measured per-sample times
 * (--profile) replace the roofline. Recomputation re-runs the forward inside the
 * backward. Point-to-point: boundary bytes over the bandwidth of the link between the
 * two stages' devices. All-reduce: ring, 2(w-1)/w x bytes over the bandwidth of the
 * slowest link of the replica group. Placement (stage-major or replica-major, the
 * faster kept): plan_place_rank. */
#include "passes/planner.h"

/* The one place a PlanInput's zero precision becomes the default: every test and tool
 * that builds an input by hand and leaves it zero plans for tf32, as pd2bwc does
 * without --precision. */
GemmType plan_precision(const PlanInput *in) {
  GemmType p = in->precision == GEMM_PLAN ? GEMM_TF32 : in->precision;
  PD_CHECK(p >= GEMM_FP32 && p <= GEMM_BF16, "(planner precision %d)", (int)p);
  return p;
}

double plan_peak_flops(const Cluster *c, GemmType p) {
  if (c->flops > 0) return c->flops; /* one rate for every precision */
  switch (p) {
  case GEMM_FP32: return c->flops_fp32;
  case GEMM_TF32: return c->flops_tf32 > 0 ? c->flops_tf32 : c->flops_fp32;
  case GEMM_BF16: return c->flops_bf16;
  case GEMM_PLAN:
  case GEMM_BF16_OUT:
  case GEMM_TYPE_COUNT: break;
  }
  PD_CHECK(0, "(planner precision %d)", (int)p);
  return 0;
}

static double roofline(const PlanInput *in, const Cluster *c, double flops, double bytes) {
  double peak = plan_peak_flops(c, plan_precision(in));
  double tf = peak > 0 ? flops / peak : 0;
  double tb = c->mem_bandwidth > 0 ? bytes / c->mem_bandwidth : 0;
  return tf > tb ? tf : tb;
}

double plan_op_time(const PlanInput *in, const Cluster *c, const PlanOpTerm *t, int64_t b) {
  double flops = t->f1 * (double)b + t->f0, bytes = t->y1 * (double)b + t->y0;
  GemmType p = plan_precision(in);
  double peak = plan_peak_flops(c, p), latency = t->gemm ? c->gemm_latency_s : 0;
  if (t->gemm && in->gemm_rate[p] > 0)
    peak = in->gemm_rate[p], latency = in->gemm_latency_s[p];
  else if (t->gemm && c->gemm_efficiency > 0)
    peak *= c->gemm_efficiency;
  if (t->gemm && c->gemm_thread_scale > 0) peak *= c->gemm_thread_scale;
  else if (!t->gemm && c->nongemm_flops > 0)
    peak = c->nongemm_flops;
  double tf = peak > 0 ? flops / peak : 0;
  double tb = c->mem_bandwidth > 0 ? bytes / c->mem_bandwidth : 0;
  return (tf > tb ? tf : tb) + c->launch_s + latency;
}

/* One segment's forward or backward at b: measured (per sample, scaled by b), its
 * ops one by one, or one roofline over its totals. */
static double ops_time(const PlanInput *in, const Cluster *c, const PlanSegment *s, bool bwd, int64_t b);

static double seg_time(const PlanInput *in, const Cluster *c, const PlanSegment *s, bool bwd, int64_t b) {
  double measured = bwd ? s->bwd_time_s : s->fwd_time_s;
  if (measured > 0) {
    int64_t b0 = s->profile_b;
    if (s->nops == 0 || b0 <= 0 || b0 == b) return measured * (double)b;
    /* measured at b0: the model says how the time changes from b0 to b */
    double m0 = ops_time(in, c, s, bwd, b0), m1 = ops_time(in, c, s, bwd, b);
    return m0 > 0 ? measured * (double)b0 * (m1 / m0) : measured * (double)b;
  }
  if (s->nops == 0)
    return (bwd ? roofline(in, c, s->bwd_flops, s->bwd_bytes) : roofline(in, c, s->fwd_flops, s->fwd_bytes)) *
           (double)b;
  return ops_time(in, c, s, bwd, b);
}

/* The segment's ops one by one (plan_op_time). */
static double ops_time(const PlanInput *in, const Cluster *c, const PlanSegment *s, bool bwd, int64_t b) {
  double t = 0;
  bool any = false;
  for (int k = 0; k < s->nops; k++)
    if (s->ops[k].bwd == bwd) t += plan_op_time(in, c, &s->ops[k], b), any = true;
  /* a graph without a backward yet: twice the forward, as its bwd_flops say */
  if (bwd && !any)
    for (int k = 0; k < s->nops; k++) t += 2 * plan_op_time(in, c, &s->ops[k], b);
  return t;
}

double plan_cost_fwd(const PlanInput *in, const Cluster *c, int a, int e, int64_t b) {
  double t = 0;
  for (int i = a; i < e; i++) t += seg_time(in, c, &in->segs[i], false, b);
  return t;
}

double plan_cost_bwd(const PlanInput *in, const Cluster *c, int a, int e, int64_t b) {
  double t = 0;
  for (int i = a; i < e; i++) t += seg_time(in, c, &in->segs[i], true, b);
  return t;
}

Cluster plan_cluster_for_config(const Cluster *c, const PlanConfig *cfg) {
  Cluster out = *c;
  int dpn = c->devices_per_node > 0 ? c->devices_per_node : 1;
  int ranks = cfg->stages * cfg->replicas, per_node = ranks < dpn ? ranks : dpn;
  if (c->all_cores_gemm_speedup > 1 && dpn > 1 && per_node > 0) {
    /* a rank gets dpn / per_node cores (pd2bwrun's threads per rank); the speedup
     * between one core and all of them taken as linear in the cores */
    int t = dpn / per_node;
    out.gemm_thread_scale = 1 + (c->all_cores_gemm_speedup - 1) * (double)(t - 1) / (double)(dpn - 1);
  }
  return out;
}

double plan_cost_allreduce(double bytes, int w, double bw) {
  if (w <= 1 || bytes <= 0) return 0;
  if (bw <= 0) return 0; /* "infinitely fast": a declared 0 disables the term */
  return 2.0 * (w - 1) / w * bytes / bw;
}

static int dpn_of(const Cluster *c) { return c->devices_per_node > 0 ? c->devices_per_node : 1; }

double plan_cost_link(const Cluster *c, int rank_a, int rank_b) {
  int dpn = dpn_of(c);
  return rank_a / dpn == rank_b / dpn ? c->intra_bandwidth : c->inter_bandwidth;
}

/* Ranks are numbered node-major (rank = node * devices_per_node + device).
 * Stage-major puts a stage's w replicas on consecutive ranks (their all-reduce stays
 * inside a node when w <= devices per node); replica-major puts one pipeline's d
 * stages on consecutive ranks (their activations stay inside a node). The search
 * evaluates both and keeps the faster, which is the paper's rule of keeping the
 * heavier traffic inside the node. */
int plan_place_rank(PlanPlacement pl, int d, int w, int stage, int replica) {
  switch (pl) {
  case PP_STAGE_MAJOR: return stage * w + replica;
  case PP_REPLICA_MAJOR: return replica * d + stage;
  }
  PD_CHECK(0, "placement %d", (int)pl);
  return 0;
}

/* Slowest link is what a ring runs at: any hop across nodes makes it inter-node. */
double plan_place_ar_bw(const Cluster *c, PlanPlacement pl, int d, int w, int s) {
  int dpn = dpn_of(c);
  int node0 = plan_place_rank(pl, d, w, s, 0) / dpn;
  for (int r = 1; r < w; r++)
    if (plan_place_rank(pl, d, w, s, r) / dpn != node0) return c->inter_bandwidth;
  return c->intra_bandwidth;
}

double plan_place_p2p_bw(const Cluster *c, PlanPlacement pl, int d, int w, int s) {
  double bw = c->intra_bandwidth;
  for (int r = 0; r < w; r++) {
    double l = plan_cost_link(c, plan_place_rank(pl, d, w, s, r),
                              plan_place_rank(pl, d, w, s + 1, r));
    if (l < bw) bw = l;
  }
  return bw;
}

double plan_stage_in_bytes(const PlanInput *in, int first_seg) {
  return first_seg == 0 ? in->input_bytes : in->segs[first_seg - 1].out_bytes;
}

/* True when one of T's segments (ascending) is in [a, e): a binary search, since a
 * weight shared by every repeat copy has as many segments as the model. */
bool plan_tied_in(const PlanTied *T, int a, int e) {
  int lo = 0, hi = T->nsegs; /* first segment >= a */
  while (lo < hi) {
    int mid = lo + (hi - lo) / 2;
    if (T->segs[mid] < a) lo = mid + 1;
    else hi = mid;
  }
  return lo < T->nsegs && T->segs[lo] < e;
}

int64_t plan_tied_params(const PlanInput *in, int a, int e) {
  int64_t n = 0;
  for (int t = 0; t < in->ntied; t++)
    if (plan_tied_in(&in->tied[t], a, e)) n += in->tied[t].count;
  return n;
}

double plan_tied_recv_bytes(const PlanInput *in, int a, int e, int d) {
  double bytes = 0;
  for (int t = 0; t < in->ntied; t++) {
    const PlanTied *T = &in->tied[t];
    if (!plan_tied_in(T, a, e)) continue;
    int outside = 0;
    for (int k = 0; k < T->nsegs; k++) outside += T->segs[k] < a || T->segs[k] >= e;
    if (outside > d - 1) outside = d - 1;
    bytes += (double)outside * (double)(((uint64_t)T->count * 4 + 255) / 256 * 256);
  }
  return bytes;
}

/* The runtime's size (runtime/cuda/cuda_device.c): 32 MiB on sm_90, 4 MiB before;
 * a cluster file states its device's. One compute stream per stage device. */
uint64_t plan_cublas_workspace(const PlanInput *in, const Cluster *c) {
  if (!in->cuda) return 0;
  return c->cublas_workspace > 0 ? (uint64_t)c->cublas_workspace : (uint64_t)32 << 20;
}

int64_t plan_tied_spanning(const PlanInput *in, int a, int e) {
  int64_t n = 0;
  for (int t = 0; t < in->ntied; t++) {
    const PlanTied *T = &in->tied[t];
    bool outside = T->segs[0] < a || T->segs[T->nsegs - 1] >= e;
    if (outside && plan_tied_in(T, a, e)) n += T->count;
  }
  return n;
}
