/* runtime/pipeline/pipeline.h — pipelined training: the plan as the ranks run it.
 *
 * This folder owns a rank's setup (pipeline.c: device, link, streams, arena, tied
 * groups, data), plan.json's executor parts (pipeline_plan.c), running a plan as threads
 * or MPI processes with checkpoints, --init and validation (pipeline_run.c,
 * pipeline_drive.c, pipeline_eval.c), the log and trace (pipeline_log.c,
 * pipeline_trace.c) and pd2bwrun's one driver (pipeline_main.c); pipeline_rank.h is
 * what runtime/exec/, runtime/reference/ and runtime/cuda/pipe/ share of it.
 * Invariants: a rank interprets its stage's stream (contract/plan_streams.h) literally,
 * built for exactly the batches it trains; it allocates one arena of exactly the plan's
 * stages[i].memory.total_bytes and nothing else for tensors; a run computes what the
 * sequential reference does on the same data order (docs/pipelines.md, "How a rank runs
 * a plan": data order, sums, boundaries, memory, failures).
 */
#ifndef PD2BW_RUNTIME_PIPELINE_H
#define PD2BW_RUNTIME_PIPELINE_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h> /* FILE: pipeline_check_reference's output */

#include "contract/contract.h"
#include "runtime/transport/transport.h"

typedef struct cJSON cJSON;
typedef struct RtPlan RtPlan;

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

/* Reads dir/plan.json (and checks the stage programs through rt_plan_load). NULL with
 * a message naming the file and key. */
PipePlan *pipe_plan_load(const char *dir, char *err, size_t errlen);
void pipe_plan_free(PipePlan *p);
/* stages × replicas of dir/plan.json; 1 when it cannot be read (the caller's own
 * loading then reports why). */
int pipe_plan_ranks(const char *dir);

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
  /* --backend cuda (runtime/cuda/exec/cuda_exec.h: CudaExecOptions is this struct) */
  int device;              /* GPU ordinal (multi-GPU mode: rank 0's; the others' + local rank) */
  int gemm;                /* CxGemmType: CX_GEMM_PLAN (0) as the launch lists say */
  bool nccl;               /* --transport nccl: multi-GPU mode under mpirun (cuda_pipe.h) */
  bool graphs_off;         /* --cuda-graphs off: every pass launch by launch (zero: graphs on) */
  bool bench_gemm;         /* pd2bw-cuda-train: cuBLAS on the model's MLP GEMM after training */
  const char *kernel_profile; /* pd2bw-cuda-train --kernel-profile: the per-kernel table, or NULL */
  const char *prog; /* the program's name for rank 0's lines (pipeline_main_on's prog); NULL: pd2bwrun */
} PipeOptions;

/* What rank 0 gathers at the end (MPI: only rank 0's outcome is filled). */
typedef struct PipeOutcome {
  int64_t first_step, steps;  /* batches [first_step, steps) ran */
  int64_t mb_per_step;        /* w·m */
  double *mb_loss;            /* [(steps - first_step) · w·m], by reference order */
  double *step_loss;          /* [steps - first_step] mean over the batch */
  int nparams;
  char **names;               /* every parameter of the model, once */
  int64_t *numel;
  float **weights;            /* the newest version */
  double step_time_s;         /* median update-to-update time after the first step */
  double *bubble;             /* [d] measured, per stage */
  double *val_loss;           /* [steps - first_step] validation loss after that step, NAN if none */
  double *grad_norm;          /* [steps - first_step] before clipping; NULL: not measured */
  double *step_ms;            /* [steps - first_step] wall time of each step; NULL: not measured */
  double val_final;           /* the last validation loss, NAN when none was computed */
  uint64_t *arena_bytes;      /* [d] */
  uint64_t *planned_bytes;    /* [d] */
} PipeOutcome;

void pipe_outcome_free(PipeOutcome *o);

/* The seed rule of every mode (runtime.h rt_run_seed, docs/data.md "Seeds") on o:
 * *out is o with seed_set and the run's seed (--seed, else the checkpoint's when
 * resuming, else plan_seed) for the weights, dropout and the --shuffle order alike.
 * false with a message naming the checkpoint. */
bool pipe_options_seed(const PipeOptions *o, uint64_t plan_seed, PipeOptions *out, char *err, size_t errlen);

/* Trains on local threads: one thread per rank. 0 on success, else 1 with the root
 * cause in err. */
int pipeline_run_local(const PipePlan *p, const PipeOptions *o, PipeOutcome *out, char *err,
                       size_t errlen);
/* This process is one MPI rank (transport already created). Same contract; only
 * rank 0 fills out. */
int pipeline_run_rank(const PipePlan *p, const PipeOptions *o, Transport *t, PipeOutcome *out,
                      char *err, size_t errlen);

/* The sequential reference on the same model, data and microbatch order: for
 * gpipe/1f1b/2bw loads plan_dir/reference (a one-stage plan with m = w·m) and runs
 * the schedule's update rule (vanilla, or delayed for 2bw); for pipedream runs the
 * plan's own stages one after another on one thread with the per-stage delay rule
 * (runtime/reference/pipeline_seq.c; a resumed pipedream run is refused). Same steps; compares
 * per-microbatch losses and all weights with `got`. Prints a table to out;
 * false (with the worst difference in err) when a relative difference exceeds tol. */
bool pipeline_check_reference(const PipePlan *p, const PipeOptions *o, const PipeOutcome *got,
                              double tol, FILE *out, char *err, size_t errlen);

/* Tokens and FLOPs (forward and backward, every stage and replica) of one batch; the
 * peak FLOP/s of the plan's devices together, or of the one device every rank shares
 * (one_device: PipeOptions's, single-GPU pipeline mode) (0: unknown) — the console's
 * and the --log-json's rates. */
double pipe_tokens_per_step(const PipePlan *p);
double pipe_flops_per_step(const PipePlan *p);
double pipe_peak_flops(const PipePlan *p, bool one_device);
/* After a run with --trace (trace_path, already written): rewrites plan_dir's
 * report.html with the measured timeline and the losses (runtime/report/plan_report.h). A
 * plan directory that takes no new file (shared, read-only) costs a warning on
 * stderr only: the run's own outputs are already written. prog: the program's name
 * for its lines (pd2bwrun, pd2bw-cuda-train). */
void pipe_report_update(const char *prog, const char *plan_dir, const PipePlan *p, const PipeOutcome *r,
                        const char *trace_path, bool quiet);

/* A backend of pipeline_main_on (the CPU's when NULL): runtime/cuda/pipe/cuda_pipe_main.c's
 * single- and multi-GPU modes. train runs the plan as pipeline_run_local (t NULL) or
 * pipeline_run_rank (this rank of t) do, on its devices and links (its banner first);
 * summary prints rank 0's summary lines, in the backend's words, before the common
 * ones (validation loss, saved, trace, --reference). */
typedef struct PipeBackend {
  void *ctx;
  int (*train)(void *ctx, const PipePlan *p, const PipeOptions *o, Transport *t, PipeOutcome *out, char *err,
               size_t errlen);
  void (*summary)(void *ctx, const PipePlan *p, const PipeOutcome *r, const PipeOptions *o);
} PipeBackend;

/* The one pipeline driver (pipeline_main.c): loads plan_dir, applies the seed rule,
 * trains (be NULL: the CPU ranks, as threads, or this MPI rank of t), and on rank 0
 * writes --log-json, prints the summary and checks --reference. Every output path is
 * checked first, before the plan is loaded (rank 0's: it writes them all). Messages start with prog; the exit status. With t, a
 * failure before training aborts the other ranks (transport_abort); t stays the
 * caller's. */
/* The calling thread's OpenMP threads for its parallel loops (pipeline_main.c says why
 * each rank sets its own). */
void pipe_rank_threads(int n);

int pipeline_main_on(const char *prog, const char *plan_dir, const PipeOptions *o, const PipeBackend *be,
                     Transport *t);

/* pd2bwrun's CPU path: argv after the plan directory's parsing is done;
 * o->reference: afterwards the check against the sequential reference. */
int pipeline_main(const char *plan_dir, const PipeOptions *o, const char *transport, int *argc, char ***argv);

#endif
