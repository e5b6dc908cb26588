/* runtime/exec/exec_rank.h — one rank as the interpreter (runtime/exec/) runs it: the
 * plan's executor view (PipePlan, PipeOptions), the rank's state (PipeRank, set up by
 * runtime/pipeline/pipeline.c) and the few utilities the interpreter, the one-stage
 * trainer and the sequential reference share (runtime/exec/exec_rank.c). Below the
 * pipeline: nothing here knows how a rank is made, gathered or logged. */
#ifndef PD2BW_RUNTIME_EXEC_RANK_H
#define PD2BW_RUNTIME_EXEC_RANK_H

#include "contract/plan_limits.h"
#include "runtime/exec/exec.h"

/* ---- the plan, as the executor sees it (pipeline_plan.c) --------------------------- */

typedef enum PipeRole {
  PIPE_ACT_IN,   /* activation from stage i-1, received into the stash slot */
  PIPE_ACT_OUT,  /* activation for stage i+1 */
  PIPE_GRAD_IN,  /* gradient of the output, from stage i+1 */
  PIPE_GRAD_OUT, /* gradient of the input, for stage i-1 */
} PipeRole;

typedef struct PipeBoundary {
  PipeRole role;
  int cls;          /* BufClass of the program block holding it */
  int64_t offset;   /* in that block */
  int64_t bytes;
  int peer;         /* the other stage */
} PipeBoundary;

/* One buffer of the stage's memory plan (stages[i].memory.buffers). */
typedef struct PipeBuf {
  PlanBufKind kind;
  int index;        /* version or stash slot, batch parity for tied_grads/tied_recv */
  uint64_t offset, size;
} PipeBuf;

typedef struct PipeStage {
  int nversions, nstash;     /* slots the plan gives the stage */
  uint64_t planned_bytes;    /* memory.total_bytes: the rank's whole arena */
  PipeBuf *bufs;             /* memory.buffers */
  int nbufs;
  int *rank_of_replica;      /* [w] */
  char **seg_names;          /* the planner's segments the stage runs */
  int nsegs;
  PipeBoundary *bnd;
  int nbnd;
} PipeStage;

typedef struct PipePlan {
  RtPlan *rt;                /* stage programs (runtime/core/runtime.h) */
  int d, w;
  int64_t b, m;              /* microbatch size, microbatches per pipeline and batch */
  PlanSchedule schedule;
  bool recompute;
  PipeStage *st;             /* [d] */
  PlanTiedGroup *groups;     /* tied parameters held by several stages */
  char **group_names;        /* [ngroups] the parameter's name */
  int ngroups;
  int nranks;
  int *rank_stage, *rank_replica; /* [nranks] */
} PipePlan;

/* ---- running ------------------------------------------------------------------- */

typedef struct PipeOptions {
  const char *data_path;   /* token file (required) */
  bool caller_batches;     /* the one-stage trainer: trainer_step hands each batch's
                              DataLoader in, so the rank opens none; data_path only
                              names the file in messages */
  int64_t steps;           /* train until this many updates are done */
  double timeout_s;        /* every blocking wait; <= 0: TRANSPORT_DEFAULT_TIMEOUT_S */
  const char *trace_path;  /* Chrome trace of what every rank did, or NULL */
  const char *profile_out; /* measured per-segment times (pd2bwc --profile), or NULL */
  const char *save_path;   /* checkpoint at the end, or NULL */
  const char *resume_path; /* checkpoint to start from, or NULL */
  const char *log_json;    /* one JSON object per step, or NULL */
  bool quiet;
  uint64_t seed;
  bool seed_set;
  int threads;             /* CPU threads for the whole process; 0: all cores */
  int threads_per_rank;    /* set by pipeline_main_on: threads / the ranks on this host,
                              each rank's BLAS and OpenMP threads (pipe_rank_threads) */
  bool shuffle;            /* seeded random window order per epoch (pd2bwrun --shuffle) */
  const char *val_path;    /* held-out tokens: validation loss (runtime/pipeline/pipeline_eval.h), or NULL */
  int64_t eval_every;      /* with val_path: evaluate after every K-th step too (0: at the end only) */
  int64_t eval_batches;    /* reference batches (B = b·w·m samples) per evaluation; <= 0: 8 */
  const char *init_path;   /* initial weights (pd2bw, Hugging Face or llm.c GPT-2), or NULL */
  struct ExecDevice *exec_device; /* one rank (the one-stage trainer): its device, not
                                     owned; NULL: the CPU's (runtime/exec/exec.h) */
  /* Per-rank factories (a pipeline of several ranks on a GPU: runtime/cuda/): rank
   * `rank`'s device, made in the rank's own thread before its arena, and its link over
   * t and that device (the link may use the device's streams); each owned by the rank
   * (the link destroyed before the device). NULL with a message in err. Either NULL:
   * the CPU device (or `exec_device`) and exec_transport_link(t). ctx is rank_ctx. */
  struct ExecDevice *(*rank_device)(void *ctx, int rank, int stage, char *err, size_t errlen);
  struct ExecLink *(*rank_link)(void *ctx, Transport *t, struct ExecDevice *dev, char *err, size_t errlen);
  void *rank_ctx;
  bool one_device; /* every rank on one device (single-GPU pipeline mode): the console's
                      peak rate is that device's, and --trace writes one process with a
                      thread per rank (pipe_trace_write_gpu), not a process each */
  /* pd2bwrun's flags that the driver (pipeline_main, pipeline_main_on) acts on */
  bool reference;          /* afterwards, train PLAN_DIR/reference sequentially and compare */
  double ref_tol;          /* --reference's relative bound (<= 0: 1e-5) */
  /* --backend cuda (runtime/cuda/exec/cuda_exec.h: CxOptions is this struct) */
  int device;              /* GPU ordinal (multi-GPU mode: rank 0's; the others' + local rank) */
  GemmType gemm;           /* GEMM_PLAN (0): as the launch lists say; else fp32 or tf32 */
  bool nccl;               /* --transport nccl: multi-GPU mode under mpirun (cuda_pipe.h) */
  bool graphs_off;         /* --cuda-graphs off: every pass launch by launch (zero: graphs on) */
  bool bench_gemm;         /* pd2bw-cuda-train: cuBLAS on the model's MLP GEMM after training */
  const char *kernel_profile; /* pd2bw-cuda-train --kernel-profile: the per-kernel table, or NULL */
  const char *prog; /* the program's name for rank 0's lines (pipeline_main_on's prog); NULL: pd2bwrun */
} PipeOptions;

/* ---- one rank ------------------------------------------------------------------ */

/* The runtime's names for contract/plan_limits.h's limits (pd2bwc checks them too). */
#define PIPE_MAX_SLOTS PLAN_MAX_SLOTS       /* weight versions or stash slots per stage */
#define PIPE_MAX_GROUPS PLAN_MAX_TIED_GROUPS /* tied groups */
#define PIPE_MAX_BND PLAN_MAX_BOUNDARY      /* boundary tensors per stage */

/* Message tags between two ranks (the validation pass uses PIPE_TAG_EVAL and + 1,
 * runtime/pipeline/pipeline_eval.h; a tied group g uses PIPE_TAG_TIED + g; PIPE_TAG_LOG:
 * a stretch's losses to rank 0 for the streamed --log-json, pipeline_log.c). */
enum {
  PIPE_TAG_ACT = 1, PIPE_TAG_GRAD = 2, PIPE_TAG_NORM = 3, PIPE_TAG_GATHER = 4, PIPE_TAG_LOSS = 12,
  PIPE_TAG_LOG = 13, PIPE_TAG_AGREE = 14, PIPE_TAG_TIED = 16
};

/* One executed instruction (a group of sends/receives: one per instruction, with the
 * group's common start and end). Times: CLOCK_MONOTONIC seconds, or a GPU's clock
 * (exec_trace_times: seconds since the run's origin on the device). */
typedef struct PipeEvent {
  int op; /* PlanOp */
  int stage, replica;
  int64_t mb;
  int batch, version, group;
  int mark; /* the device's clock marks of its instruction (ExecDeviceOps mark) */
  double start, end;
} PipeEvent;

/* A tied group as this rank sees it. */
typedef struct PipeTied {
  int member;        /* index among the group's stages; -1: not held here */
  int param;         /* index in RtStage.params; -1: not held or the group is one stage */
  bool deferred;     /* 2bw: stepped apart, gradient in tied_grads[batch % 2] */
  uint64_t bytes;
  uint64_t tg_off;   /* in tied_grads[par] */
  uint64_t rx_off;   /* in tied_rx[par] */
  int state[2];      /* per batch parity: 0 idle, 1 posted, 2 summed */
  ExecReq *req[2][2 * PLAN_MAX_TIED_SEGS];
  int nreq[2];
} PipeTied;

typedef struct PipeLogStream PipeLogStream; /* pipeline_log.c */

typedef struct PipeRank {
  const PipePlan *pp;
  const PipeOptions *o;
  Transport *t;       /* the run's transport: the driver's gather and evaluation */
  ExecLink *link;     /* the interpreter's way to the other ranks (over t) */
  ExecDevice *dev;    /* where the arena lives and the stage program runs */
  int rank, stage, replica;
  const RtStage *st;
  TrainConfig tc;
  int64_t first, steps; /* batches [first, steps) */
  int64_t mref;         /* w·m: the reference's microbatches per step */
  PlanStreamSpec spec;
  PlanStreams streams;
  const PlanStream *stream;
  int nversions, nstash;
  /* the arena and what lives in it */
  char *arena;
  uint64_t arena_bytes;
  char *w[PIPE_MAX_SLOTS], *grads, *tg[2], *adam_m, *adam_v, *stash[PIPE_MAX_SLOTS], *full, *inputs,
      *bnd, *work, *tied_rx[2];
  uint64_t act_in_bytes, tied_deferred_bytes, tied_rx_bytes;
  int64_t act_in_packed[PIPE_MAX_BND];
  int newest; /* slot of the newest weight version */
  PipeTied tied[PIPE_MAX_GROUPS];
  double scale[2]; /* gradient scale of batch t (parity), for deferred tied steps */
  ExecGroup *rep_group;
  ExecReq **reqs;                /* one send/receive group */
  double *norm_part;             /* [d] per-stage sums of squares (clipping) */
  const float **norm_x;          /* [nparams] the gradients a step's norm counts (one sumsq call) */
  int64_t *norm_n;               /* [nparams] their sizes */
  ExecOptStep *opt;              /* [nparams] a step's parameter updates (one opt_step call) */
  ExecReq **norm_req;            /* [2d] */
  int *mb_sslot;                 /* stash slot of each microbatch's forward */
  int *ins_from, *ins_to;        /* [batch] batch b's instructions lie in [from[b], to[b]) */
  char *grads_out;               /* optional host copy of each step's gradient (trainer_grads) */
  /* data */
  DataFile *df;
  DataLoader *dl;
  int T;
  /* results */
  double *loss; /* [(steps - first) · m] last stage */
  int64_t bad_ids;
  PipeEvent *ev;
  int nev, cap_ev;
  int nmarks; /* device clock marks issued (--trace: ExecDeviceOps mark) */
  int64_t steps_done;
  double last_step_time;
  double *grad_norm; /* [steps - first] the global norm of each batch's averaged gradient */
  double *step_ms;   /* [steps - first] this rank's time from one OPT_STEP to the next */
  SegTimes segt;     /* --profile-out: this rank's per-segment times (nsegs 0: off) */
  RtLog *console;    /* the step lines: last stage of replica 0 only, not quiet; else NULL */
  PipeLogStream *logs; /* --log-json: the losses' hand-off to rank 0 (pipeline_log.c); else NULL */
  /* After OPT_STEP(t), when logs is set: pipeline_log.c's pipe_log_step (the pipeline
   * sets both; the interpreter knows no log). false: a transport failure. */
  bool (*log_step)(PipeRank *R, int64_t t);
  /* faults */
  int64_t fault_step;
  int fault_mode; /* 0 exit, 1 hang, 2 kill, 3 stop (SIGSTOP), 4 stuck (spins forever) */
  bool failed;
  bool stopped; /* err is the run's root cause (a per-step check: exec_interp.c), not a link's */
  char err[TRANSPORT_ERR_LEN + 64];
} PipeRank;

/* false when s is a transport failure: the first one keeps its message in R->err and
 * aborts every other rank (transport_abort); every transport call goes through it. */
bool pipe_transport_ok(PipeRank *R, TransportStatus s);
/* Where a program block of class cls lives for an instruction using weight slot vslot
 * (-1: the newest) and stash slot sslot (the full activation block when recomputing). */
char *pipe_block_base(PipeRank *R, int cls, int vslot, int sslot);
/* 2bw's version slots at a drained point after `step` batches: the one batch `step`
 * runs on unless it runs on W(step) (a checkpoint's prev.*: W(step-1), or its
 * prediction), and the one batch step+1 runs on (next.*, weight prediction only: in
 * plain 2bw it holds W(step), the newest). */
static inline int pipe_prev_slot(int64_t step) { return (int)((step + 1) % 2); }
static inline int pipe_next_slot(int64_t step) { return (int)(step % 2); }
/* Samples first .. first + b - 1 into stage st's token and target inputs (the tmp
 * rows take a stream the stage has no input for). */
void pipe_fill_samples(const RtStage *st, char *inputs, DataLoader *dl, int64_t first, int64_t b, int T,
                       int32_t *tok_tmp, int32_t *tgt_tmp);
/* A training context of stage st for the reference's global microbatch mb (keys
 * dropout, with the stage's rng_base). */
StageCtx pipe_stage_ctx(const RtStage *st, uint64_t seed, int64_t mb, char *params, char *grads, char *stash, char *work, char *inputs,
                        char *bnd, double *loss);
/* One optimizer step of parameter pp for batch t: wout = step(win, g · scale); fresh:
 * no delay compensation (the gradient was taken at win). */
void pipe_opt_step(const TrainConfig *tc, const RtParam *pp, float *wout, const float *win, const float *g, float *m,
                   float *v, int64_t t, double scale, bool fresh);

/* Tokens and FLOPs (forward and backward, every stage and replica) of one batch; the
 * peak FLOP/s of the plan's devices together, or of the one device every rank shares
 * (one_device: PipeOptions's, single-GPU pipeline mode) (0: unknown) — the console's
 * and the --log-json's rates. */
double pipe_tokens_per_step(const PipePlan *p);
/* The window length T of the model's token streams (any stage's tokens or targets
 * input; 0: none): the data loader's and the rates' sample length. */
int pipe_window(const RtPlan *rt);
double pipe_flops_per_step(const PipePlan *p);
double pipe_peak_flops(const PipePlan *p, bool one_device);

#endif
