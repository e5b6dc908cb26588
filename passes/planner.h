/* passes/planner.h — the planner: partition, replicate, schedule, place buffers,
 * simulate and verify (DESIGN.md §3, §4; PipeDream-2BW §3-4 and Appendix A).
 *
 * The planner does not look at ops. It works on a PlanInput: an ordered list of
 * segments (prologue, each copy of the repeated block, epilogue, or finer cuts), each
 * with per-sample FLOPs/bytes, parameter count and activation sizes, plus the tied-
 * parameter groups. plan_input_from_graph() builds one from the IR; tests build
 * synthetic ones by hand. plan_create() makes the plan (search, partition, placement,
 * streams, memory, verification, simulation); plan_write() emits the plan.json
 * sections and the readable files. The target (precision, CUDA) is part of the input.
 *
 * Promises: deterministic (same input, same plan, same bytes); a user error is a
 * diagnostic and a NULL plan; a stream that fails verification is a bug (PD_CHECK). */
#ifndef PD2BW_PLANNER_H
#define PD2BW_PLANNER_H

#include <stdlib.h>

#include "ir/ir.h"
#include "contract/contract.h" /* schedules, instruction streams (plan_streams_build),
                                  buffer kinds and limits: shared with the runtime */

typedef struct cJSON cJSON;

/* ---- precision -------------------------------------------------------------- */

/* The arithmetic of the CUDA programs' GEMMs (pd2bwc --precision) is a GemmType
 * (contract/contract.h; spelled by gemm_type_name, parsed by gemm_type_parse, which
 * takes fp32, tf32 and bf16 only): which of the cluster's peaks the cost model
 * charges, and whether stages stage bf16 operands (GEMM_BF16: casts from float32
 * master weights into cuda_scratch, layout.h). PlanInput.precision GEMM_PLAN (left
 * zero) means GEMM_TF32, resolved by plan_precision (below) alone. */

/* Peak FLOP/s the cost model charges on c for precision p (fp32, tf32 or bf16): the
 * cluster's plain `tflops` when it gives one rate for all, else its per-precision peak
 * (tf32 not given: the fp32 rate, as on a device without TF32); 0 when c has none for
 * p (bf16 on a V100), which plan_create refuses. */
double plan_peak_flops(const Cluster *c, GemmType p);

/* ---- input ---------------------------------------------------------------- */

/* What one op of a segment needs of the CUDA programs' cuda_scratch block
 * (passes/layout.h), as exact linear functions of the microbatch size b. */
typedef struct PlanCudaTerm {
  bool gemm;      /* a GEMM's operands (bf16 staging); else a forward cross-entropy */
  int64_t a1, a0; /* GEMM: A's float32 elements = a1·b + a0; cross-entropy: rows */
  int64_t b1, b0; /* GEMM: B's float32 elements = b1·b + b0 */
} PlanCudaTerm;

/* One op of a segment for the cost model, its FLOPs and bytes moved as linear
 * functions of the microbatch size b (the op table's counts at b = 1 and 2). */
typedef struct PlanOpTerm {
  bool gemm;      /* a GEMM (cuBLAS / pd_sgemm): charged at the GEMM efficiency */
  bool bwd;       /* a backward op */
  double f1, f0;  /* FLOPs = f1·b + f0 */
  double y1, y0;  /* bytes = y1·b + y0 */
} PlanOpTerm;

/* One cut-able piece of the model. All sizes are per sample (multiply by b). */
typedef struct PlanSegment {
  char *name;            /* "prologue", "h.3", "epilogue" */
  double fwd_flops, fwd_bytes; /* forward FLOPs and bytes moved */
  double bwd_flops, bwd_bytes; /* backward (about 2x forward FLOPs for GEMMs) */
  int64_t params;        /* fp32 trainable scalars, tied parameters excluded */
  double out_bytes;      /* activation crossing a stage boundary after this segment */
  /* Memory as the segment's own stage program lays it out (passes/layout.h, from
   * layout_stage at b = 1 and 2), bytes = per-sample x b + fixed: STASH (what its
   * backward keeps, received activations included: the blocks of a stage's segments
   * add up), WORK (transients and kernel scratch) and INPUTS (data tensors). A graph
   * without a backward yet, and synthetic inputs, give op-table estimates. */
  double stash_bytes, stash_fixed;
  double workspace_bytes, workspace_fixed;
  double inputs_bytes, inputs_fixed;
  /* Measured times per sample (from --profile); 0 = use the analytic roofline. At
   * another microbatch size than the measured one (profile_b) they are scaled by the
   * cost model's ratio between the two sizes when the segment's ops are known. */
  double fwd_time_s, bwd_time_s;
  int64_t profile_b;
  PlanCudaTerm *cuda;    /* the segment's GEMMs and cross-entropies (pd_malloc'd) */
  int ncuda;
  /* Its ops, when known (plan_input_from_graph): each is charged on its own
   * (plan_op_time), so a GEMM's efficiency and every kernel's launch overhead
   * depend on b. Without them the segment's FLOPs and bytes above are charged as
   * one roofline, linear in b. */
  PlanOpTerm *ops;
  int nops;
} PlanSegment;

/* A parameter held by several segments (GPT's token embedding in the prologue and
 * the LM head in the epilogue). Every stage holding one of `segs` holds the whole
 * parameter; when that is more than one stage, their gradients are summed
 * (TIED_SYNC) before each update so the copies switch versions in lockstep. */
typedef struct PlanTied {
  char *name;
  int64_t count; /* fp32 scalars */
  int nsegs;
  int *segs; /* ascending, any number (a weight shared by every repeat copy) */
} PlanTied;

typedef struct PlanInput {
  char *name;
  PlanSegment *segs;
  int nsegs, cap_segs;
  PlanTied *tied;
  int ntied, cap_tied;
  double input_bytes; /* per sample: what the data loader feeds stage 0 */
  int64_t batch;      /* global batch B (samples per update over all replicas) */
  int64_t microbatch; /* fixed b from the model's training section; 0 = choose */
  /* 2bw's refinements (TrainConfig): the flushed start's batches and whether weight
   * prediction holds a master copy (a third weight version) */
  int64_t flush_steps, steps; /* steps: train.steps, the run the flushed start is a part of (0: unknown) */
  bool predict, predict_optional; /* optional: pd2bwc's default, dropped where it does not fit */
  bool sgd; /* the optimizer is SGD: no fused multi-tensor step, so a bf16 plan's weight
               prediction keeps separate bf16 copies (plan_bf16_in_versions) */
  /* The target (zero: tf32, CPU programs only). */
  GemmType precision; /* the GEMMs' arithmetic, fp32, tf32 or bf16: the peak compute is
                         charged at; GEMM_PLAN (zero) is the default tf32, read through
                         plan_precision (a Plan's copy holds it resolved) */
  bool cuda;          /* the plan runs CUDA programs: each stage's device also
                         holds its cuda_scratch block beside the arena */
  /* Measured GEMM cost per precision, indexed by GemmType (a profile's "gemm" section:
   * gemm_sweep's file, fp32/tf32/bf16 only); rate 0 = the cluster's peak x
   * gemm_efficiency and gemm_latency_us. */
  double gemm_rate[GEMM_TYPE_COUNT], gemm_latency_s[GEMM_TYPE_COUNT];
} PlanInput;

void plan_input_init(PlanInput *in, const char *name);
void plan_input_free(PlanInput *in);
/* in's precision, GEMM_PLAN resolved to GEMM_TF32 (the default): fp32, tf32 or bf16. */
GemmType plan_precision(const PlanInput *in);
/* Appends a zeroed segment named `name` and returns it (valid until the next add). */
PlanSegment *plan_input_add_segment(PlanInput *in, const char *name);
/* Appends a cuda_scratch term to segment s. */
void plan_segment_add_cuda(PlanSegment *s, PlanCudaTerm t);
/* Appends an op cost term to segment s. */
void plan_segment_add_op(PlanSegment *s, PlanOpTerm t);
/* Adds a tied group over the given segments; returns its index. */
int plan_input_add_tied(PlanInput *in, const char *name, int64_t count, const int *segs,
                        int nsegs);
/* Segments = g->regions; costs from the op table (b = 1). Returns false (after a
 * diagnostic-free failure: an empty graph or no regions) when nothing can be planned. */
bool plan_input_from_graph(const Graph *g, PlanInput *out);
/* The same for the programs of a --precision bf16 plan when bf16 (passes/layout.h,
 * "bf16 storage"): the segments' stash and workspace from the bf16 layout, and the
 * activations crossing a boundary (out_bytes: what every transfer cost charges) at
 * 2 bytes an element; plan_input_from_graph is bf16 false. */
bool plan_input_from_graph_bf16(const Graph *g, bool bf16, PlanInput *out);

/* Replaces analytic compute times by measured ones (docs/plan-format.md, "profile").
 * Reports bad files on d and returns false. */
bool plan_profile_load(PlanInput *in, const char *path, Diag *d);

typedef enum PlanRecompute {
  PR_AUTO, /* the search tries both */
  PR_OFF,  /* stash every activation the backward needs */
  PR_ON,   /* stash only the stage input; the backward re-runs the forward (4/3 compute) */
} PlanRecompute;

/* "on", "off", "auto" -> kind; false if unknown (--recompute). */
bool plan_recompute_parse(const char *s, PlanRecompute *out);

/* Every search dimension can be pinned; 0 / -1 / PR_AUTO mean "choose". */
typedef struct PlanPins {
  int stages;             /* --stages */
  int replicas;           /* --replicas */
  int64_t microbatch_size;/* --microbatch-size */
  int64_t microbatches;   /* --microbatches */
  int schedule;           /* --schedule: a PlanSchedule, or -1 */
  PlanRecompute recompute;/* --recompute on|off|auto */
} PlanPins;

void plan_pins_init(PlanPins *p); /* everything "choose" */

/* ---- verification and simulation (one engine, plan_exec.c) ------------------ */

/* Durations the simulator charges; all zero for a pure verification. Arrays are
 * [stages] (tied: [ngroups]). act_xfer[i]: stage i -> i+1; grad_xfer[i]: i -> i-1. */
/* Bytes the optimizer step moves per parameter (runtime/pipeline/pipeline.c, run_step): the
 * gradient norm reads the gradient (4), AdamW reads weights, gradient, m, v and writes
 * weights, m, v (28), and the gradient is zeroed for the next batch (4). Charged at
 * Cluster.optimizer_bandwidth. */
#define PLAN_STEP_BYTES 36.0
/* 2bw's weight prediction adds one pass: the version written and the master read,
 * both written (16). */
#define PLAN_PREDICT_BYTES 16.0

typedef struct PlanCosts {
  const double *fwd, *bwd, *act_xfer, *grad_xfer, *allreduce, *step, *tied;
  const double *tied_step; /* per tied group: its deferred OPT_STEP (NULL: step[stage]) */
  /* OPT_STEP of a batch waits for every stage's (the runtime's gradient-norm exchange,
   * plan_exec.c norm_wait); false: the schedule alone, as in the paper */
  bool norm_barrier;
} PlanCosts;

typedef struct PlanEvent {
  int stage;
  int track;  /* 0 compute, 1 communication */
  int instr;  /* index of the (first) instruction */
  PlanOp op;
  int64_t mb;
  int batch;
  double start, end;
  bool wait;  /* waiting (for a send/receive's peer, a tied gradient sum), not working */
} PlanEvent;

typedef struct PlanSimResult {
  double total_s;        /* makespan of all batches */
  double step_time_s;    /* steady-state time per batch */
  double bubble_fraction;/* idle compute share over the steady-state window */
  double window_start_s, window_end_s;
  double *busy_s;        /* [stages] compute busy time in the window */
  double *idle_s;        /* [stages] */
  int *max_stash;        /* [stages] stash slots live at once */
  int *max_versions;     /* [stages] version slots holding a version at once */
  PlanEvent *events;     /* when recorded */
  int nevents, cap_events;
} PlanSimResult;

/* Executes the streams under blocking send/receive semantics and checks: every send
 * meets its matching receive in order; a receive precedes the compute that reads it,
 * a send follows the compute that writes it; no deadlock; a microbatch's forward and
 * backward use the same version (for 2bw v(k) = max(floor((k-1)/m) - 1, 0)), flush
 * schedules and pipedream use the newest version; no more version or stash slots than
 * limits (NULL = the streams' own counts). On a violation returns false with
 * "stage S instruction J (OP mb K): what" in err. costs may be NULL (all zero); res
 * may be NULL; events are recorded when record_events. */
bool plan_exec(const PlanStreams *s, const int *max_versions, const int *max_stash,
               const PlanCosts *costs, bool record_events, PlanSimResult *res, char *err,
               size_t errlen);
bool plan_verify(const PlanStreams *s, const int *max_versions, const int *max_stash,
                 char *err, size_t errlen);
void plan_sim_result_free(PlanSimResult *r);

/* ---- the plan --------------------------------------------------------------- */

typedef struct PlanConfig {
  int stages, replicas;
  int64_t microbatch_size, microbatches;
  PlanSchedule schedule;
  bool recompute;
  bool predict; /* 2bw with weight prediction: a master copy, 3 weight versions */
} PlanConfig;

typedef struct PlanBuffer {
  PlanBufKind kind;
  int index;       /* slot for weights/stash, else 0 */
  uint64_t offset; /* in the stage arena, 256-byte aligned */
  uint64_t size;
} PlanBuffer;

typedef struct PlanRank {
  int replica, rank, node, device;
} PlanRank;

typedef struct PlanStage {
  int first_seg, last_seg; /* segments [first, last) */
  int64_t params;          /* own segments' plus tied parameters held */
  double fwd_s, bwd_s;     /* compute per microbatch (bwd includes recompute) */
  double in_bytes, out_bytes;  /* activation per microbatch crossing its boundaries */
  double stash_slot_bytes;     /* per stash slot */
  int nversions, nstash;
  PlanBuffer *bufs;
  int nbufs;
  uint64_t total_bytes; /* the arena */
  uint64_t estimated_bytes; /* the search's analytic figure for what the device holds
                               (the arena and what lies beside it: the figure
                               plan_stage_device_bytes gives for the exact plan) */
  uint64_t cuda_scratch;/* the CUDA programs' GPU-only block, beside the arena (0
                           when the plan has no CUDA programs) */
  uint64_t cublas_workspace; /* cuBLAS's workspace for the stage's compute stream
                           (plan_cublas_workspace; 0 without CUDA programs) */
  uint64_t weights_bf16; /* bf16 CUDA plans: the bfloat16 copy of each weight version
                           (2 bytes a parameter, 256-aligned, one per version) that the
                           optimizer writes and the GEMMs read, beside the arena; else 0 */
  PlanRank *ranks;      /* [replicas] */
} PlanStage;

typedef enum PlanPlacement {
  PP_STAGE_MAJOR,   /* a stage's replicas on neighbouring devices: all-reduce in-node */
  PP_REPLICA_MAJOR, /* a pipeline's stages on neighbouring devices: p2p in-node */
} PlanPlacement;

/* Why a candidate lost. step_time_s is the simulation's steady-state time per batch
 * (what plan.json predicts for a chosen plan) for the candidates of each schedule
 * with the smallest analytic estimates (PLAN_SIM_PER_SCHEDULE), and that
 * estimate for the others (simulated false): candidates are ranked by the
 * simulated figure. */
typedef struct PlanCandidate {
  PlanConfig cfg;
  PlanPlacement placement; /* the faster of the two for this configuration */
  bool fits;
  bool chosen;
  bool simulated;
  double analytic_s;       /* the analytic pipeline formula's time per batch */
  double step_time_s, samples_per_s, peak_bytes;
  char why[256];
} PlanCandidate;

/* How many candidates of each schedule are simulated: those with the smallest
 * analytic estimates, at most PLAN_SIM_WITHIN times the schedule's best. Per
 * schedule, so that a pinned schedule simulates the same ones as the free choice
 * does, and the free choice is never slower than a pinned one. */
#define PLAN_SIM_PER_SCHEDULE 6
#define PLAN_SIM_WITHIN 2.0

typedef struct Plan {
  PlanInput in; /* deep copy */
  Cluster cluster;
  PlanConfig cfg;
  PlanPlacement placement;
  PlanStage *stages;
  PlanTiedGroup *groups;
  int ngroups;
  /* The first tied group held by more stages than the runtime syncs
   * (PLAN_MAX_TIED_SEGS; its list is cut there) and how many; -1 and 0: none.
   * plan_check_limits reports it. */
  int tied_over, tied_over_stages;
  PlanCandidate *cands;
  int ncands;
  PlanStreams streams; /* PLAN_FILE_BATCHES batches, what plan.json carries */
  PlanSimResult sim;   /* simulation of PLAN_SIM_BATCHES batches (2bw: after its flushed start) */
  double flushed_step_s; /* 2bw's flushed start: the simulated time of a flushed batch; 0 none */
  double *act_xfer, *grad_xfer, *allreduce_s, *step_s, *tied_s, *tied_step_s, *fwd_s, *bwd_s;
} Plan;

#define PLAN_FILE_BATCHES 3
#define PLAN_SIM_BATCHES 6

/* Searches (stages d, replicas w, microbatch size b, microbatches m, schedule,
 * recomputation), partitions the segments into d contiguous stages by dynamic
 * programming on the cost model, places stage x replica on (node, device), generates
 * each stage's instruction stream, lays out every buffer in one arena per stage,
 * verifies the streams and simulates them. Compute is charged at the cluster's peak
 * for in->precision; with in->cuda each stage's cuda_scratch block counts in what must
 * fit the device. A user error (pins that cannot hold, nothing fits in memory, 2bw
 * with m < d) is a diagnostic on d and NULL; a stream that fails verification is a bug
 * (PD_CHECK). */
Plan *plan_create(const PlanInput *in, const Cluster *c, const PlanPins *pins, Diag *d);
/* The time per step over a whole run of train.steps: the steady state's, with 2bw's
 * flushed start's batches charged at their own (slower) pace. */
double plan_run_step_time(const Plan *p);

/* Checks a plan against the runtime's limits (contract/plan_limits.h): tied
 * parameters, the stages holding each, weight versions and stash slots per stage.
 * Reports each one over (at the weight's declaration in g where there is one) and
 * returns false then. The boundary limit is checked where the boundary is listed
 * (codegen_boundary_stages). */
bool plan_check_limits(const Plan *p, const Graph *g, Diag *d);

/* A stage program's block sizes (passes/layout.h, layout_stage() totals) for the
 * chosen microbatch size, as the compiler driver computes them. */
typedef struct PlanStageBlocks {
  uint64_t params, grads, stash, work, inputs, boundary;
  uint64_t cuda_scratch; /* layout_cuda_scratch_bytes (0: no CUDA programs) */
  uint64_t params_bf16;  /* a bf16 weight copy (the launch list's params_bf16: params/2;
                            0 unless bf16 CUDA programs) */
  uint64_t act_in; /* activations received from stage i-1, each rounded up to 256
                      bytes: a stash slot's size when recomputing */
} PlanStageBlocks;

/* Replaces every stage's memory plan (laid out from the analytic PlanInput estimates
 * during the search) by the exact arena the pipeline runtime allocates, from the
 * programs' block sizes blocks[0 .. stages-1]: weights × versions, grads,
 * tied_grads × 2 (deferred tied parameters), adam_m, adam_v, stash × slots,
 * activations (recompute), inputs, boundary, workspace, tied_recv × 2, in that order,
 * each 256-byte aligned; empty optional buffers are left out. Call it after
 * plan_create and before plan_write. Returns how many stages' exact arenas exceed
 * the cluster's device memory (the search judged fit by its estimates; the caller
 * warns: estimated_bytes keeps the search's figure). */
int plan_apply_layouts(Plan *p, const PlanStageBlocks *blocks);
/* What stage st occupies on its device: the arena plus its cuda_scratch rounded up to
 * 256 bytes (what the CUDA runtimes allocate for the two), the bf16 weight copies and
 * cuBLAS's workspace.
 * What must fit the device. */
uint64_t plan_stage_device_bytes(const PlanStage *st);
/* Streams of this plan for any number of batches (the runtime's view). */
bool plan_streams_generate(const Plan *p, int nbatches, PlanStreams *out);
/* Writes schedule.txt, memory.txt, timeline.json, timeline.svg into dir (each via a
 * temporary name and rename) and adds the plan.json sections ("config", "stages",
 * "predicted", "candidates", "tied", "precision", "peak_flops") to root; with root NULL writes dir/plan.json
 * itself (with "version"). Keys sorted. Reports I/O failures on d. */
bool plan_write(const Plan *p, const char *dir, cJSON *root, Diag *d);
void plan_print_summary(const Plan *p, FILE *out);
void plan_destroy(Plan *p);

/* Sorts every object's keys recursively (plan.json is diffed by golden tests). */
void plan_json_sort(cJSON *node);

/* ---- internals shared by plan_*.c ------------------------------------------- */

/* Cost model (plan_cost.c). One op at microbatch size b on c (docs/language.md,
 * "Compute"): launch_us + max(FLOPs / rate, bytes / memory_gbs), where a
 * GEMM's rate is peak x gemm_efficiency and its fixed cost gemm_latency_us, or the
 * measured ones of in->gemm_rate / gemm_latency_s for the plan's precision. */
double plan_op_time(const PlanInput *in, const Cluster *c, const PlanOpTerm *t, int64_t b);
/* c as configuration cfg's ranks see it: on a CPU node whose file gives
 * all_cores_gemm_speedup, a rank's GEMMs run faster by the share of the node's cores
 * it gets (pd2bwrun: cores / ranks threads). The cost functions take the result. */
Cluster plan_cluster_for_config(const Cluster *c, const PlanConfig *cfg);
/* Per-microbatch compute time of segments [a, e). */
double plan_cost_fwd(const PlanInput *in, const Cluster *c, int a, int e, int64_t b);
double plan_cost_bwd(const PlanInput *in, const Cluster *c, int a, int e, int64_t b);
/* Ring all-reduce of `bytes` over w participants at bandwidth bw. */
double plan_cost_allreduce(double bytes, int w, double bw);
/* Bandwidth between two ranks (intra- or inter-node). */
double plan_cost_link(const Cluster *c, int rank_a, int rank_b);
/* rank of (stage, replica) under a placement. */
int plan_place_rank(PlanPlacement pl, int d, int w, int stage, int replica);
/* Bandwidth of the slowest link of stage s's replica ring / of the s -> s+1 hop. */
double plan_place_ar_bw(const Cluster *c, PlanPlacement pl, int d, int w, int s);
double plan_place_p2p_bw(const Cluster *c, PlanPlacement pl, int d, int w, int s);
/* Stage input bytes per sample (data for stage 0). */
double plan_stage_in_bytes(const PlanInput *in, int first_seg);
/* Tied scalars held by segments [a, e) (each tied parameter counted once); the
 * second counts only those also held by segments outside [a, e). */
int64_t plan_tied_params(const PlanInput *in, int a, int e);
/* True when tied parameter T is used in one of segments [a, e). */
bool plan_tied_in(const PlanTied *T, int a, int e);
int64_t plan_tied_spanning(const PlanInput *in, int a, int e);
/* Bytes of one TIED_RECV buffer of a stage holding [a, e) in a d-stage plan: for each
 * tied parameter held here and elsewhere, one 256-aligned gradient per other member
 * stage. The other members are counted as the parameter's segments outside [a, e),
 * at most d - 1: exact when those segments are on distinct stages (GPT's embedding
 * and LM head), an upper bound otherwise. */
double plan_tied_recv_bytes(const PlanInput *in, int a, int e, int d);
/* cuBLAS's workspace on a stage's device: one per compute stream, the cluster's
 * cublas_workspace_mib or 32 MiB; 0 for a plan without CUDA programs. */
uint64_t plan_cublas_workspace(const PlanInput *in, const Cluster *c);

/* Memory accounting (plan_memory.c): versions and stash slots per schedule. */
int plan_versions_bound(PlanSchedule s, int d, int i, int64_t m, bool predict);
/* Whether a stage holding segments [a, e) keeps its bf16 weight copies inside its weight
 * versions (docs/update-rules.md, "Memory"): a bf16 CUDA plan under 2bw's weight prediction
 * with AdamW, where the version slots are what the passes read and the master holds the
 * float32 weights, so a GEMM weight's slot holds only its bf16 copy (in the first half of
 * its float32 place) and no copy is kept beside the arena (a tied embedding wholly in the
 * stage: its lookup reads the bf16 copy too). The exact plan asks the stage's layout
 * (layout_cuda_fold_params), which refuses a weight that a GEMM and a float32 operand
 * (not a lookup) both read: then the copies stay beside. */
bool plan_bf16_in_versions(const PlanInput *in, const PlanConfig *cfg, int a, int e);
/* The same for the plan as a whole, before any stage's tied groups: what pd2bwc asks the
 * CUDA code generator for (codegen.h CodegenCudaOptions.bf16_in_versions). */
bool plan_bf16_in_versions_any(const PlanInput *in, const PlanConfig *cfg);
int plan_stash_bound(PlanSchedule s, int d, int i, int64_t m);
/* What stage memory depends on, summed over its segments. */
typedef struct PlanStageSums {
  int64_t params;            /* own plus tied */
  int64_t tied_spanning;     /* tied held here whose group spans other stages too */
  /* bytes at the configuration's b, as the stage program's blocks: STASH (the sum of
   * the segments'), WORK (the largest segment's, plus the gradient of the widest cut
   * inside the stage when it has several: that gradient is a transient then, where a
   * one-segment program has it in BOUNDARY) and INPUTS (the sum) */
  double stash, ws, inputs;
  double in_bytes, out_bytes;/* per sample, at the stage's boundaries */
  uint64_t cuda_scratch;     /* bytes at the configuration's b (plan_cuda_scratch) */
  uint64_t cublas_workspace; /* plan_cublas_workspace */
  bool bf16_weights;         /* bf16 CUDA programs: a bf16 copy per weight version */
  bool bf16_in_versions;     /* with bf16_weights: the copies live inside the version slots
                                (plan_bf16_in_versions), so none beside the arena */
  double tied_recv;          /* one TIED_SYNC receive buffer: the other member stages'
                                gradients of the spanning tied parameters
                                (plan_tied_recv_bytes) */
} PlanStageSums;
void plan_stage_sums(const PlanInput *in, int a, int e, int64_t b, PlanStageSums *sum);
/* A segment's STASH, WORK and INPUTS bytes at microbatch size b. */
double plan_seg_stash(const PlanSegment *s, int64_t b);
double plan_seg_work(const PlanSegment *s, int64_t b);
double plan_seg_inputs(const PlanSegment *s, int64_t b);
/* Device bytes of a stage (its arena plus cuda_scratch, plan_stage_device_bytes);
 * lays the arena out when st != NULL. */
uint64_t plan_stage_bytes(const PlanConfig *cfg, int i, const PlanStageSums *sum,
                          int nversions, int nstash, PlanStage *st);
/* cuda_scratch of a stage holding segments [a, e) at microbatch b: the same figure
 * layout_cuda_scratch_bytes gives for its program (0 unless in->cuda). The bf16
 * staging is the largest GEMM among those segments' ops. Per segment: */
uint64_t plan_cuda_scratch(const PlanInput *in, int a, int e, int64_t b);
void plan_segment_cuda_needs(const PlanSegment *s, int64_t b, int64_t *ce_rows, int64_t *staging);
/* Device bytes of stage i = segments [a, e) under cfg; lays the arena out when st != NULL. */
uint64_t plan_stage_memory(const PlanInput *in, const Cluster *c, const PlanConfig *cfg, int i, int a,
                           int e, int nversions, int nstash, PlanStage *st);

/* Building (plan_build.c): the Plan's parts for p->cfg under placement pl: stages,
 * tied groups, streams, memory, the simulator's costs and the simulation. rank_only:
 * what ranking needs, the simulation, without the streams plan.json carries, their
 * verification and events (slots sized by the schedules' bounds, which the full
 * build checks the streams against). plan_free_parts frees what it made (not the
 * input, not the candidates). */
void plan_build(Plan *p, PlanPlacement pl, bool rank_only);
void plan_free_parts(Plan *p);

/* Partition (plan_partition.c): d contiguous stages minimising the slowest stage's
 * time per batch, each fitting in memory. Writes d+1 cut points (cuts[0] = 0,
 * cuts[d] = nsegs). Returns the bottleneck time, or a negative value when no
 * partition fits (then *min_over_bytes is how far the best stage is over). */
double plan_partition(const PlanInput *in, const Cluster *c, const PlanConfig *cfg,
                      PlanPlacement pl, int *cuts, double *min_over_bytes);

/* Writers (plan_timeline.c): Chrome trace object and SVG of the simulation. */
cJSON *plan_timeline_json(const Plan *p);
void plan_timeline_svg(const Plan *p, FILE *f);
/* "F3", "B3", "step 1", "wait for tied sum 1", "SEND_ACT 3", ... into buf. */
const char *plan_event_label(const PlanEvent *e, char *buf, size_t n);

#endif /* PD2BW_PLANNER_H */
