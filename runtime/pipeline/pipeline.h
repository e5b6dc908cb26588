/* runtime/pipeline/pipeline.h — pipelined training: the plan as the ranks run it.
 *
 * This folder owns a rank's setup (pipeline.c: device, link, streams, arena, tied
 * groups, data), plan.json's executor parts (pipeline_plan.c), running a plan as threads
 * or MPI processes with checkpoints, --init and validation (pipeline_run.c,
 * pipeline_drive.c, pipeline_eval.c), the log and trace (pipeline_log.c,
 * pipeline_trace.c) and the one-stage trainer (pipeline_one.c); pipeline_rank.h is
 * what runtime/reference/, runtime/driver/ and runtime/cuda/ share of it.
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
#include "runtime/exec/exec_rank.h"
#include "runtime/transport/transport.h"

typedef struct cJSON cJSON;
typedef struct RtPlan RtPlan;


/* ---- the one-stage trainer (runtime/pipeline/pipeline_one.c) ------------------------------ */
typedef struct Trainer Trainer;

typedef struct TrainerOptions {
  uint64_t seed;     /* overrides the plan's seed (and a checkpoint's) when seed_set */
  bool seed_set;
  const char *data_path; /* named in the out-of-range token id message; NULL: none */
  struct ExecDevice *device; /* the device to train on (runtime/exec/exec.h), not owned;
                                NULL: the CPU's */
} TrainerOptions;

/* Loads stage 0 of a one-stage plan as a plan with d = 1 and w = 1 for the
 * interpreter (runtime/exec/exec.h), allocates its arena in the compiler's layout and
 * initialises the parameters (AdamW state zeroed). The update rule follows
 * RtPlan.delayed: vanilla (gpipe/1f1b), or one step delayed for 2bw (two weight
 * versions). NULL with a message on error. */
Trainer *trainer_create(const RtPlan *p, const TrainerOptions *o, char *err, size_t errlen);
void trainer_destroy(Trainer *t);
const RtStage *trainer_stage(const Trainer *t);
/* The params block (float32, the newest version), for tests and checkpoints; the
 * last step's gradient (a copy: the step clears the gradient block). Both the CPU
 * device's only (TrainerOptions.device NULL; with a device: trainer_read_params, and
 * trainer_grads is NULL). */
float *trainer_params(Trainer *t);
/* The newest weights copied into dst (params-block bytes) through the trainer's
 * device (TrainerOptions.device: trainer_params is the CPU device's memory). */
void trainer_read_params(Trainer *t, float *dst);
float *trainer_grads(Trainer *t);
int64_t trainer_step_index(const Trainer *t); /* updates done so far */
double trainer_flops_per_step(const Trainer *t);

/* One update from batch `step` of the data (its m microbatches, b samples each): the
 * loader must have been created with batch = b·m and the plan's T. out->error says
 * whether a per-step check stopped it. */
void trainer_step(Trainer *t, DataLoader *data, StepStats *out);
/* Mean loss over batches first .. first + nbatches - 1 of `data`, dropout off, on
 * the newest weights. */
double trainer_eval(Trainer *t, DataLoader *data, int64_t first, int64_t nbatches);
/* Checkpoints in the format of every mode (pipeline_rank.h pipe_save). */
bool trainer_save(Trainer *t, const char *path, char *err, size_t errlen);
bool trainer_resume(Trainer *t, const char *path, char *err, size_t errlen);
/* Parameters only, from a GPT-2 checkpoint of Hugging Face, llm.c or pd2bw. */
bool trainer_init_from(Trainer *t, const char *path, char *err, size_t errlen);

/* ---- the plan (pipeline_plan.c; its types: runtime/exec/exec_rank.h) ---------- */

/* Reads dir/plan.json (and checks the stage programs through rt_plan_load). NULL with
 * a message naming the file and key. */
PipePlan *pipe_plan_load(const char *dir, char *err, size_t errlen);
void pipe_plan_free(PipePlan *p);
/* stages × replicas of dir/plan.json; 1 when it cannot be read (the caller's own
 * loading then reports why). */
int pipe_plan_ranks(const char *dir);

/* ---- running ------------------------------------------------------------------- */


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


/* Trains on local threads: one thread per rank. 0 on success, else 1 with the root
 * cause in err. */
int pipeline_run_local(const PipePlan *p, const PipeOptions *o, PipeOutcome *out, char *err,
                       size_t errlen);
/* This process is one MPI rank (transport already created). Same contract; only
 * rank 0 fills out. */
int pipeline_run_rank(const PipePlan *p, const PipeOptions *o, Transport *t, PipeOutcome *out,
                      char *err, size_t errlen);







/* The calling thread's OpenMP threads for its parallel loops (pipeline_run.c says why
 * each rank sets its own). */
void pipe_rank_threads(int n);

#endif
