/* runtime/pipeline/pipeline_rank.h — internals shared by runtime/pipeline*.c: one rank's state,
 * the events it records, what rank 0 gathers at the end; the sequential references'
 * rules and runs (pipeline_seq.c, pipeline_ref.c). See runtime/pipeline/pipeline.h. */
#ifndef PD2BW_RUNTIME_PIPELINE_RANK_H
#define PD2BW_RUNTIME_PIPELINE_RANK_H

#include "contract/plan_limits.h"
#include "runtime/exec/exec.h"
#include "runtime/core/runtime.h"
#include "runtime/pipeline/seg_times.h"

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
  /* faults */
  int64_t fault_step;
  int fault_mode; /* 0 exit, 1 hang, 2 kill, 3 stop (SIGSTOP), 4 stuck (spins forever) */
  bool failed;
  bool stopped; /* err is the run's root cause (a per-step check: exec_interp.c), not a link's */
  char err[TRANSPORT_ERR_LEN + 64];
} PipeRank;

/* What rank 0 holds after pipe_gather. */
typedef struct PipeGathered {
  int d;
  char **stage_w, **stage_prev, **stage_m, **stage_v; /* [d] params blocks of replica 0 */
  char **stage_next; /* [d] 2bw's weight prediction: the weights of batch step+1; else NULL */
  double *mb_loss; /* reference order */
  PipeEvent *ev;
  int64_t nev;
  uint64_t *arena; /* [d] bytes allocated per stage (largest replica) */
  int64_t bad_ids; /* out-of-range token ids seen by any rank */
  SegTimes *seg;   /* [d] --profile-out: each stage's per-segment times, all its replicas' */
} PipeGathered;

double pipe_now(void);
/* The median of v[0..n) (sorted in place; 0 when n is 0): the step times and segment
 * times runs report, so that a pass the OS preempted does not count. */
double pipe_median(double *v, int64_t n);
/* false when s is a transport failure: the first one keeps its message in R->err and
 * aborts every other rank (transport_abort); every transport call goes through it. */
bool pipe_transport_ok(PipeRank *R, TransportStatus s);
/* Where a program block of class cls lives for an instruction using weight slot vslot
 * (-1: the newest) and stash slot sslot (the full activation block when recomputing). */
char *pipe_block_base(PipeRank *R, int cls, int vslot, int sslot);
PipeRank *pipe_rank_create(const PipePlan *p, const PipeOptions *o, Transport *t, int64_t first_step,
                           char *err, size_t errlen);
void pipe_rank_destroy(PipeRank *R);
/* A one-stage plan without stages[0].memory: stage 0's slots and the arena pd2bwc lays out. */
bool pipe_stage_layout_one(PipePlan *pp, char *err, size_t errlen);
/* What plan_streams_build needs for nbatches (>= 1) batches of p: its schedule, tied
 * groups and 2bw refinements; every rank's streams come from it (and the tests'). */
PlanStreamSpec pipe_stream_spec(const PipePlan *p, int nbatches);
/* Lengthens the run to batches [first, steps) (the one-stage trainer, which steps
 * without a horizon): the streams of the longer run begin with those of the shorter
 * for a one-stage plan. false with a message. */
bool pipe_rank_extend(PipeRank *R, int64_t steps, char *err, size_t errlen);
/* The rank's weights from host memory (the arena is the device's: ExecDeviceOps
 * upload): w into every weight version but prev_slot, which gets prev (2bw's older
 * version; prev NULL: none); newest becomes R->newest. */
void pipe_rank_set_weights(PipeRank *R, const char *w, int newest, const char *prev, int prev_slot);
/* The initial weights: rt_init_param of every parameter by name and R->tc.seed. */
void pipe_rank_init_weights(PipeRank *R);
/* Loads a checkpoint (any partition's, or the sequential trainer's) into the rank's
 * parameters and optimizer state (read whole into host memory first: a failed read
 * leaves the rank as it was); sets R->first. */
bool pipe_rank_resume(PipeRank *R, const char *path, char *err, size_t errlen);
/* The checkpoint s holds only the plan's model's tensors (pipeline_weights.c). */
bool pipe_ckpt_exact(const PipePlan *p, const SafeTensors *s, char *err, size_t errlen);
/* The instructions of batches [lo, hi) (runtime/exec/exec.h: exec_run_batches) run
 * in stretches: consecutive calls over adjacent ranges compute exactly what one call
 * over their union does (an instruction of batch t reads only what instructions of
 * batches <= t wrote and waits only on messages of batch t). Between two calls no
 * microbatch is in flight and no message is pending (pipeline_eval.c runs there). */
bool pipe_gather(PipeRank *R, PipeGathered *G);
/* 2bw's version slots at a drained point after `step` batches: the one batch `step`
 * runs on unless it runs on W(step) (a checkpoint's prev.*: W(step-1), or its
 * prediction), and the one batch step+1 runs on (next.*, weight prediction only: in
 * plain 2bw it holds W(step), the newest). */
static inline int pipe_prev_slot(int64_t step) { return (int)((step + 1) % 2); }
static inline int pipe_next_slot(int64_t step) { return (int)(step % 2); }
void pipe_gathered_free(PipeGathered *G);

/* Pieces of a rank's setup, shared with the sequential multi-stage reference
 * (pipeline_seq.c), which runs the same stage programs without a transport. */
/* (pipeline_data.c) The token ids the model allows, checked in every token file at open (data_open: file,
 * offset, index, id): its `vocab` param (plan.json model.consts; every model with a
 * token input declares one), else the rows of its embedding table, "wte" (GPT, BERT)
 * or "embed" (Llama; a PLAN/reference plan.json has no consts), else 0 (no check).
 * Only "wte" counted before, so a Llama plan had no check at open, only the step's
 * count of bad ids (exec_interp.c check_ids). */
int64_t pipe_vocab(const RtPlan *rt);
/* Opens o->data_path and a loader of B samples of T tokens per batch. */
bool pipe_data_open(const PipeOptions *o, int64_t vocab, int64_t B, int T, uint64_t seed, DataFile **df,
                    DataLoader **dl, char *err, size_t errlen);
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

/* Before the first step of an MPI run (pipeline_agree.c): every rank sends rank 0 a
 * description of its run (the plan's schedule and plan.json, --data, --val-data,
 * --resume and --init as sizes and sample hashes, the resolved seed, --steps and the
 * flags that change what is trained); a difference is rank 0's one message in err
 * ("rank 1 does not agree with rank 0 on --data: rank 0 has ..., rank 1 ..."), every
 * other rank's err "", false (transport_agree; *together false: a transport failure). */
bool pipe_ranks_agree(const char *plan_dir, const PipePlan *p, const PipeOptions *o, Transport *t, char *err,
                      size_t errlen, bool *together);

/* ---- the driver loop (pipeline_drive.c) ------------------------------------------ */

/* What pipe_drive trains and validates; the mode's own work behind run and eval. */
typedef struct PipeDrive {
  int64_t first, steps; /* batches [first, steps) */
  int64_t eval_every;   /* with eval: a validation after every K-th step too (0: the last only) */
  bool (*run)(void *ctx, int64_t lo, int64_t hi); /* trains batches [lo, hi); false: the run failed */
  bool (*eval)(void *ctx, double *mean);          /* NULL: no validation */
  void *ctx;
  bool print; /* the "step S/N | val loss L" line (rank 0, not quiet) */
  /* NULL, or after each stretch [lo, hi) and its validation (val: after batch hi - 1,
   * NAN if none); false: the run failed */
  bool (*done)(void *ctx, int64_t lo, int64_t hi, double val);
  int64_t log_every; /* > 0: stretches of at most this many steps (the log's write agreement: pipe_log_every) */
} PipeDrive;

/* The driver loop of every pipelined mode (CPU ranks and CUDA): batches [first,
 * steps) in stretches that end where a validation is due (after every K-th step and
 * the last; always one stretch, so a run resumed at --steps still validates), the
 * validation between them. val[b] (nb + 1 entries) gets batch first + b's validation
 * loss (NAN: none), *val_final the last one. false as soon as run or eval fails. */
bool pipe_drive(const PipeDrive *d, double *val, double *val_final);

/* ---- the streamed --log-json (pipeline_log.c) --------------------------------------- */

/* The longest stretch while --log-json is on (the agreement on a failed write is
 * at stretch ends): 1 for one rank, gpipe and 1f1b (flushed at every batch anyway),
 * ceil(256·(d-1)/m) steps for 2bw and pipedream. The same on every rank. */
int64_t pipe_log_every(const PipePlan *p);
/* Rank 0's log, R->o->log_json, JSON lines only; NULL with the message. */
RtLog *pipe_log_open(const PipeRank *R, char *err, size_t errlen);
/* Every rank's part of the streamed log (log: rank 0's, NULL elsewhere), as R->logs;
 * destroyed with pipe_log_destroy before the rank (after a failure with messages
 * outstanding it aborts the transport first). */
PipeLogStream *pipe_log_create(const PipeRank *R, RtLog *log);
void pipe_log_destroy(PipeRank *R, PipeLogStream *L);
/* Before the interpreter runs stretch [lo, hi): rank 0 posts batch lo's receives. */
bool pipe_log_begin(PipeRank *R, int64_t lo, int64_t hi);
/* At the end of OPT_STEP(t) (the interpreter): a last stage sends batch t's losses
 * to rank 0; rank 0 writes batch t - 1's line and posts batch t + 1's receives.
 * false: a transport failure (R->err, the others aborted). */
bool pipe_log_step(PipeRank *R, int64_t t);
/* Every rank after the stretch and its validation (val: after the stretch's last
 * batch, NAN if none): the senders' requests completed, rank 0's remaining lines
 * written (a failed one: rt_log_error of rank 0's log non-empty, and no line after
 * it; the caller has every rank agree on it). false: a transport failure. */
bool pipe_log_stretch(PipeRank *R, double val);

/* ---- the sequential references (pipeline_seq.c, pipeline_ref.c) ------------------ */

/* Which weight version microbatch k (1-indexed, per replica) reads at a stage, in
 * forward and backward alike: v = max(floor((k - 1 - delay) / m), 0) with delay
 * (in microbatches) 0, m or d-1-stage. */
typedef enum PipeRule {
  PIPE_RULE_VANILLA,     /* gpipe, 1f1b: batch t reads W(t) */
  PIPE_RULE_DELAYED,     /* 2bw: batch t reads W(t-1) (W(0) for t = 0, 1) */
  PIPE_RULE_STAGE_DELAY, /* pipedream: stage i lags d-1-i microbatches behind */
} PipeRule;

const char *pipe_rule_name(PipeRule r);
int64_t pipe_rule_version(PipeRule r, int d, int stage, int64_t m, int64_t k);
/* The rule the plan's schedule must match. */
PipeRule pipe_rule_of(PlanSchedule s);

/* Runs the plan's own stage programs one after another on one thread with rule r
 * for batches [0, o->steps): every microbatch of a batch in the reference order
 * (runtime/pipeline/pipeline.h "Data order"), forward through stages 0..d-1 and backward
 * through d-1..0, each stage on its version of the rule; then the stages' step as
 * the executor does it. Starts from the initial weights (o->resume_path is not
 * read). Fills mb_loss, step_loss and the newest weights of every stage (a tied
 * parameter once per stage holding it). */
bool pipe_seq_run(const PipePlan *p, const PipeOptions *o, PipeRule r, PipeOutcome *out, char *err, size_t errlen);
/* The one-stage reference (PLAN/reference, runtime/exec/exec_one.c) with the vanilla or
 * delayed rule, for batches [first, o->steps) (from o->resume_path when set). */
bool pipe_trainer_run(const PipePlan *p, const PipeOptions *o, PipeRule r, int64_t first, PipeOutcome *out, char *err,
                      size_t errlen);
/* Compares got with a reference outcome: a table of per-step losses to out, then
 * "reference: worst ... MATCH|DIFFER" (bounds in runtime/reference/pipeline_ref.c). */
bool pipe_outcome_compare(const PipeOutcome *got, const PipeOutcome *ref, double tol, FILE *out, char *err,
                          size_t errlen);

/* Reads the "step" of a checkpoint (0 when path is NULL); false with a message. */
bool pipe_ckpt_step(const char *path, int64_t *step, char *err, size_t errlen);
/* Writes the gathered state as one checkpoint, the sequential trainer's format. */
bool pipe_save(const PipePlan *p, const PipeGathered *G, int64_t step, uint64_t seed, const char *path,
               char *err, size_t errlen);

/* Trace and measurements (pipeline_trace.c). */
bool pipe_trace_write(const PipePlan *p, const PipeEvent *ev, int64_t n, const char *path, char *err,
                      size_t errlen);
/* The same trace for single-GPU pipeline mode (runtime/cuda/pipe/cuda_pipe_threads.c): one
 * process (the GPU), one thread per stage replica (tid stage·w + replica). */
bool pipe_trace_write_gpu(const PipePlan *p, const PipeEvent *ev, int64_t n, const char *path, char *err,
                          size_t errlen);
/* Measured step time (the median of stage 0's update-to-update times after the first
 * step) and per-stage bubble over the same span; a one-step run: the whole run. */
void pipe_measure(const PipePlan *p, const PipeEvent *ev, int64_t n, int64_t first, int64_t steps,
                  double *step_time, double *bubble);
/* --profile-out: seg[s] is stage s's times, all replicas' (runtime/pipeline/seg_times.h); the
 * note names the backend. false with a message (a program's segment count is not
 * the plan's). */
bool pipe_profile_write(const PipePlan *p, const SegTimes *seg, const char *backend, const char *path, char *err,
                        size_t errlen);

#endif
