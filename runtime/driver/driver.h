/* runtime/driver/driver.h — pd2bwrun's one pipeline driver (driver.c), for every backend
 * and transport: the plan, the seed rule, the run (the CPU's ranks, or a backend's train
 * hook: runtime/cuda/pipe/), then rank 0's report and --reference. Above
 * runtime/reference/, whose check it runs, and below the CUDA backends that call it. */
#ifndef PD2BW_RUNTIME_DRIVER_H
#define PD2BW_RUNTIME_DRIVER_H

#include "runtime/pipeline/pipeline.h"

/* The seed rule of every mode (runtime.h rt_run_seed, docs/data.md "Seeds") on o:
 * *out is o with seed_set and the run's seed (--seed, else the checkpoint's when
 * resuming, else plan_seed) for the weights, dropout and the --shuffle order alike.
 * false with a message naming the checkpoint. */
bool pipe_options_seed(const PipeOptions *o, uint64_t plan_seed, PipeOptions *out, char *err, size_t errlen);

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

/* The one pipeline driver (driver.c): loads plan_dir, applies the seed rule,
 * trains (be NULL: the CPU ranks, as threads, or this MPI rank of t), and on rank 0
 * writes --log-json, prints the summary and checks --reference. Every output path is
 * checked first, before the plan is loaded (rank 0's: it writes them all). Messages start with prog; the exit status. With t, a
 * failure before training aborts the other ranks (transport_abort); t stays the
 * caller's. */
int pipeline_main_on(const char *prog, const char *plan_dir, const PipeOptions *o, const PipeBackend *be,
                     Transport *t);

/* pd2bwrun's CPU path: argv after the plan directory's parsing is done;
 * o->reference: afterwards the check against the sequential reference. */
int pipeline_main(const char *plan_dir, const PipeOptions *o, const char *transport, int *argc, char ***argv);

#endif
