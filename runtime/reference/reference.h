/* runtime/reference/reference.h — the sequential references a pipelined run is checked
 * against (pd2bwrun --reference; tests/pipeline): pipeline_seq.c runs the plan's stage
 * programs one after another on one thread (pipedream's per-stage delay rule);
 * pipeline_ref.c checks a run against the one-stage trainer (gpipe, 1f1b, 2bw) or
 * pipeline_seq.c, with its bounds. Kept apart from runtime/pipeline/ so that the oracle
 * shares only the rank setup and the stage programs with the code it judges. */
#ifndef PD2BW_RUNTIME_REFERENCE_H
#define PD2BW_RUNTIME_REFERENCE_H

#include "runtime/pipeline/pipeline_rank.h"

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
 * the executor does it. Starts from the initial weights, or o->init_path's (read by
 * name here; o->resume_path is not read). Fills mb_loss, step_loss and the newest weights of every stage (a tied
 * parameter once per stage holding it). */
bool pipe_seq_run(const PipePlan *p, const PipeOptions *o, PipeRule r, PipeOutcome *out, char *err, size_t errlen);
/* The one-stage reference (PLAN/reference, runtime/pipeline/pipeline_one.c) with the vanilla or
 * delayed rule, for batches [first, o->steps) (from o->init_path, then o->resume_path, when set). */
bool pipe_trainer_run(const PipePlan *p, const PipeOptions *o, PipeRule r, int64_t first, PipeOutcome *out, char *err,
                      size_t errlen);
/* Compares got with a reference outcome: a table of per-step losses to out, then
 * "reference: worst ... MATCH|DIFFER" (bounds in runtime/reference/pipeline_ref.c). */
bool pipe_outcome_compare(const PipeOutcome *got, const PipeOutcome *ref, double tol, FILE *out, char *err,
                          size_t errlen);

/* The sequential reference on the same model, data and microbatch order: for
 * gpipe/1f1b/2bw loads plan_dir/reference (a one-stage plan with m = w·m) and runs
 * the schedule's update rule (vanilla, or delayed for 2bw); for pipedream runs the
 * plan's own stages one after another on one thread with the per-stage delay rule
 * (runtime/reference/pipeline_seq.c; a resumed pipedream run is refused). Same steps; compares
 * per-microbatch losses and all weights with `got`. Prints a table to out;
 * false (with the worst difference in err) when a relative difference exceeds tol. */
bool pipeline_check_reference(const PipePlan *p, const PipeOptions *o, const PipeOutcome *got,
                              double tol, FILE *out, char *err, size_t errlen);

#endif
