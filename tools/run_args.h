/* tools/run_args.h — the command line of pd2bwrun and pd2bw-cuda-train: one parser for
 * the one option struct they both fill (runtime/pipeline/pipeline.h PipeOptions, which
 * runtime/cuda/exec/cuda_exec.h calls CxOptions), so a flag both take is read,
 * checked and worded the same way in both. Each tool keeps its own usage text and what
 * it does with the result. */
#ifndef PD2BW_TOOLS_RUN_ARGS_H
#define PD2BW_TOOLS_RUN_ARGS_H

#include "runtime/pipeline/pipeline.h"

typedef struct RunArgs {
  PipeOptions o;
  const char *plan, *transport;
  const char *backend; /* NULL or "cpu": the CPU programs; "cuda": runtime/cuda/exec/cuda_exec.h */
  bool steps_set;
  int graphs; /* --cuda-graphs: 0 not given, 1 on, -1 off */
} RunArgs;

/* Which tool's flags: pd2bwrun's (--backend, --transport, --threads) or
 * pd2bw-cuda-train's (--gemm, --bench-gemm, --kernel-profile); every other flag is
 * both's. The other tool's flags are unknown options. */
typedef enum { RUN_ARGS_PD2BWRUN, RUN_ARGS_CUDA_TRAIN } RunArgsTool;

/* Parses argv into *a (defaults: 8 validation batches, --reference-tol 1e-5): one plan
 * directory, --data and --steps required. Returns -1 to go on; else the exit status,
 * after usage on stdout (-h) or one "prog: error:" line on stderr. */
int run_args_parse(const char *prog, RunArgsTool tool, const char *usage, int argc, char **argv, RunArgs *a);
/* The tool's exit status for a run that returned rc: 128 + the signal when a
 * SIGINT/SIGTERM stopped it (130, 143, as a shell reports a process the signal killed;
 * the run stops at the next step's end: runtime/exec/exec_interp.c), else rc. */
int run_exit_status(int rc);

#endif /* PD2BW_TOOLS_RUN_ARGS_H */
