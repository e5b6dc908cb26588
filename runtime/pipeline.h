/* runtime/pipeline.h — pipelined training: the instruction-stream executor.
 *
 * Private to runtime/ (runtime/runtime.h includes it). One rank runs one stage
 * replica (stage i, replica r) and interprets that stage's instruction stream
 * (passes/planner.h, docs/plan-format.md) literally: FWD/BWD of microbatch k with
 * weight version v in slot vslot, sends and receives of activations and gradients
 * (a run of `with_next` instructions is posted at once and waited together), the
 * replica ALLREDUCE, TIED_SYNC, OPT_STEP writing the next version into the slot the
 * plan names. The streams come from plan_streams_build() for exactly the batches the
 * run trains (a pure function of d, m, schedule, w > 1 and the tied groups), so a run
 * of any length executes what the planner verified.
 *
 * Data order (the contract with the sequential reference, runtime/trainer.c): the
 * global batch t holds B = b·w·m samples; replica r's j-th microbatch of batch t
 * (j = 0..m-1) is the reference's microbatch j' = r·m + j of step t: samples
 * t·B + j'·b .. + b, dropout keyed by the global microbatch index t·(w·m) + j'.
 * Gradients are summed over the m microbatches in place, over the w replicas by the
 * all-reduce, over the stages holding a tied parameter by TIED_SYNC (in ascending
 * stage order), then scaled by 1/(w·m) and clipped by the global norm over every
 * stage exactly as the reference does (a norm exchange among a pipeline's d stages at
 * each OPT_STEP when clip > 0: the one point where 2bw waits for the whole pipeline).
 *
 * Stage boundaries: pd2bwc lists, per stage, the tensors another stage produces or
 * consumes ("program.pipeline.boundary", pipeline_describe.c): an incoming activation
 * is received straight into its place in the stash slot of the FWD that reads it; the
 * outgoing activation and the gradients are sent from / received into the program's
 * boundary block. A tied parameter (GPT's wte: the embedding on the first stage, the
 * LM head on the last) is differentiated as in the one-stage graph, where an `add` in
 * the prologue sums both uses. Across stages that add must not wait for the other
 * stage, so the executor keeps the add's remote operand (role tied_in) at zero, adds
 * the LM head's contribution (role tied_out, written by the last stage's backward to
 * its boundary block) into its own gradient of wte after every BWD, and TIED_SYNC sums
 * the stages' local gradients before the step. (A codegen that accumulated the LM
 * head's part straight into the gradient block would save that V×C add per
 * microbatch; the layout decides that placement today.)
 *
 * Memory: each rank allocates one arena when it starts, laid out in the order of the
 * plan's memory plan (weights × versions, grads, tied_grads × 2, adam_m, adam_v,
 * stash × slots, then the program's data inputs and boundary block where the plan
 * has recv_act/send_act/recv_grad/send_grad, workspace), each buffer sized to what the
 * stage program needs, plus what the plan has no buffer for (the full activation
 * block when recomputing, TIED_SYNC's receive buffers). Nothing else is allocated
 * while training. The run reports this size beside the plan's figure per stage; they
 * differ while the planner sizes stash and workspace analytically rather than by
 * layout_stage() (bench/pipeline/RESULTS.md).
 *
 * Failures: every transport call is checked; the first failure aborts every rank
 * (transport_abort) and the run returns 1 with the root cause ("rank 3: timed out
 * after 5 s waiting for gradient of microbatch 7 from rank 4"). PD2BW_FAULT_INJECT=
 * RANK:STEP[:exit|hang|kill] makes rank RANK fail at the start of batch STEP (tests).
 */
#ifndef PD2BW_RUNTIME_PIPELINE_H
#define PD2BW_RUNTIME_PIPELINE_H

#include <stdbool.h>
#include <stdint.h>

#include "passes/planner.h"
#include "runtime/transport.h"

typedef struct cJSON cJSON;
typedef struct RtPlan RtPlan;

/* ---- compile side (pipeline_describe.c) ------------------------------------------ */

/* Adds "pipeline": {"boundary": [...]} to each stage's "program" in `stages` (the
 * plan.json array codegen_c_stages filled). false with a message when a tensor
 * crosses more than one stage boundary. */
bool pipeline_describe_stages(const Graph *g, const int *first_region, const int *last_region,
                              int nstages, int64_t b, cJSON *stages, char *err, size_t errlen);

/* ---- the plan, as the executor sees it (pipeline_plan.c) --------------------------- */

typedef enum PipeRole {
  PIPE_ACT_IN,   /* activation from stage i-1, received into the stash slot */
  PIPE_ACT_OUT,  /* activation for stage i+1 */
  PIPE_GRAD_IN,  /* gradient of the output, from stage i+1 */
  PIPE_GRAD_OUT, /* gradient of the input, for stage i-1 */
  PIPE_TIED_IN,  /* another stage's tied-gradient contribution: kept zero here */
  PIPE_TIED_OUT, /* this stage's tied-gradient contribution: added into grads */
} PipeRole;

typedef struct PipeBoundary {
  PipeRole role;
  int cls;          /* BufClass of the program block holding it */
  int64_t offset;   /* in that block */
  int64_t bytes;
  int peer;         /* the other stage */
  int param;        /* tied roles: index into the stage's RtStage.params, else -1 */
} PipeBoundary;

typedef struct PipeStage {
  int nversions, nstash;     /* slots the plan gives the stage */
  uint64_t planned_bytes;    /* memory.total_bytes */
  int *rank_of_replica;      /* [w] */
  char **seg_names;          /* the planner's segments the stage runs */
  int nsegs;
  PipeBoundary *bnd;
  int nbnd;
} PipeStage;

typedef struct PipePlan {
  RtPlan *rt;                /* stage programs (runtime/runtime.h) */
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
  bool shuffle;            /* seeded random window order per epoch (pd2bwrun --shuffle) */
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
  double step_time_s;         /* measured steady-state time per batch */
  double *bubble;             /* [d] measured, per stage */
  uint64_t *arena_bytes;      /* [d] */
  uint64_t *planned_bytes;    /* [d] */
} PipeOutcome;

void pipe_outcome_free(PipeOutcome *o);

/* Trains on local threads: one thread per rank. 0 on success, else 1 with the root
 * cause in err. */
int pipeline_run_local(const PipePlan *p, const PipeOptions *o, PipeOutcome *out, char *err,
                       size_t errlen);
/* This process is one MPI rank (transport already created). Same contract; only
 * rank 0 fills out. */
int pipeline_run_rank(const PipePlan *p, const PipeOptions *o, Transport *t, PipeOutcome *out,
                      char *err, size_t errlen);

/* The sequential reference on the same model, data and microbatch order: loads
 * plan_dir/reference (a one-stage plan with m = w·m), runs the update rule of the
 * pipeline's schedule (vanilla for gpipe/1f1b, delayed for 2bw) for the same steps and
 * compares per-microbatch losses and all weights with `got`. Prints a table to out;
 * false (with the worst difference in err) when a relative difference exceeds tol. */
bool pipeline_check_reference(const PipePlan *p, const PipeOptions *o, const PipeOutcome *got,
                              double tol, FILE *out, char *err, size_t errlen);

/* pd2bwrun's pipeline path: argv after the plan directory's parsing is done. */
int pipeline_main(const char *plan_dir, const PipeOptions *o, const char *transport,
                  bool reference, double ref_tol, int *argc, char ***argv);

#endif
