/* runtime/pipeline/pipeline_rank.h — a rank's life around the interpreter, shared by
 * runtime/pipeline/'s files and the layers above: its creation, weights and checkpoints, what
 * rank 0 gathers at the end, the driver loop, the streamed log, traces and measurements.
 * The rank's state itself is runtime/exec/exec_rank.h's. See runtime/pipeline/pipeline.h. */
#ifndef PD2BW_RUNTIME_PIPELINE_RANK_H
#define PD2BW_RUNTIME_PIPELINE_RANK_H

#include "runtime/exec/exec_rank.h"
#include "runtime/pipeline/pipeline.h"

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

/* The median of v[0..n) (sorted in place; 0 when n is 0): the step times and segment
 * times runs report, so that a pass the OS preempted does not count. */
double pipe_median(double *v, int64_t n);
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
void pipe_gathered_free(PipeGathered *G);
/* Collective: the last stages' per-microbatch values (`mine`: nb batches of m, a
 * last-stage rank's own) to rank 0, in out[nb·w·m] in the reference's order (batch,
 * then replica, then microbatch); other last-stage ranks send theirs (tag, what), the
 * rest do nothing. False after a transport failure (R->err). */
bool pipe_gather_losses(PipeRank *R, const double *mine, int64_t nb, int tag, const char *what, double *out);

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


/* --init: the rank's parameters from a checkpoint of the whole model into every weight
 * version (pipeline_run.c); false with a message. */
bool pipe_rank_init_from(PipeRank *R, const char *path, char *err, size_t errlen);
/* Reads the "step" of a checkpoint (0 when path is NULL); false with a message. */
bool pipe_ckpt_step(const char *path, int64_t *step, char *err, size_t errlen);
/* Writes the gathered state as one checkpoint, atomically: params under their names,
 * AdamW state as "opt.m.<name>" and "opt.v.<name>", for 2bw the older weight version
 * as "prev.<name>" (and under weight prediction "next.<name>"); metadata step, seed,
 * model, data_position (samples consumed), schedule, weight_versions, partition and
 * consts. The one format of every mode (the one-stage trainer's trainer_save too). */
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
/* --profile-out: seg[s] is stage s's times, all replicas' (runtime/exec/seg_times.h); the
 * note names the backend. false with a message (a program's segment count is not
 * the plan's). */
bool pipe_profile_write(const PipePlan *p, const SegTimes *seg, const char *backend, const char *path, char *err,
                        size_t errlen);

#endif
