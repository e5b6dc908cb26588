/* tools/pd2bwrun.c — the training driver: a plan directory and a token file in,
 * trained weights and a log out.
 *
 *   pd2bwrun PLAN_DIR --data FILE [--val-data FILE] --steps N [options]
 *
 * This file dispatches (the command line is run_args.c's, shared with pd2bw-cuda-train).
 * Every CPU plan runs on the pipeline executor (runtime/pipeline/pipeline.h
 * pipeline_main): one rank per stage replica, as threads (--transport local, the
 * default) or MPI processes (--transport mpi); a one-stage plan is one rank, reported
 * in the one-stage trainer's words (runtime/pipeline/pipeline_one.c). Every failure the
 * user can cause ends with one line naming the file and exit status 1. --val-data,
 * --eval-every and --init mean the same on both executors: the pipelined validation
 * loss is the one-stage trainer's on PLAN_DIR/reference for the same weights. */
#include "runtime/cuda/pipe/cuda_pipe.h"
#include "runtime/core/runtime.h"

#include <string.h>

#include "tools/run_args.h"

static const char usage[] =
    "usage: pd2bwrun PLAN_DIR --data FILE --steps N [options]\n"
    "\n"
    "Trains the plan that pd2bwc wrote into PLAN_DIR on a file of token ids\n"
    "(llm.c .bin of uint16 or, Llama 3's, uint32, or nanoGPT's raw uint16; make one\n"
    "with pd2bw-data).\n"
    "\n"
    "options:\n"
    "  --data FILE         training tokens\n"
    "  --steps N           optimizer steps to run (a resumed run continues to N); 0 with\n"
    "                      --save writes the initial (or --init) weights\n"
    "  --val-data FILE     held-out tokens for the validation loss\n"
    "  --eval-every K      validation loss every K steps and at the end (default 0: end only)\n"
    "  --eval-batches N    batches per validation (default 8, fewer if the file is short)\n"
    "  --save FILE         write a checkpoint (safetensors) at the end\n"
    "  --resume FILE       continue from a checkpoint written by --save\n"
    "  --init FILE         initial weights from a GPT-2 checkpoint (Hugging Face, llm.c, pd2bw)\n"
    "  --seed N            the seed of weights, dropout and --shuffle (default on the CPU:\n"
    "                      a --resume checkpoint's, else the plan's; docs/data.md)\n"
    "  --shuffle           visit the training windows in a seeded random order per epoch\n"
    "  --threads N         CPU threads (default: all cores)\n"
    "  --log-json FILE     one JSON object per step, the same keys in every mode (docs/data.md)\n"
    "  --backend B         cpu (default) or cuda (needs an NVIDIA GPU; a pipeline plan runs\n"
    "                      all its stages on that one GPU); it takes every option above, but\n"
    "                      with --transport nccl not yet --trace/--profile-out\n"
    "  --device N          the GPU to use with --backend cuda (default 0)\n"
    "  --cuda-graphs on|off with --backend cuda: replay each forward/backward pass as a CUDA\n"
    "                      graph captured once (default on); off: launch by launch\n"
    "\n"
    "pipelines (plans with several stages or replicas; see docs/pipelines.md):\n"
    "  --transport T       local (threads of this process, the default) or mpi (under mpirun);\n"
    "                      with --backend cuda: nccl (under mpirun, one process per GPU)\n"
    "  --timeout S         seconds any rank waits for another before all stop (default 60)\n"
    "  --trace FILE        Chrome trace of what every rank did (--backend cuda: every stage\n"
    "                      replica's instructions on the one GPU, timed with device events,\n"
    "                      and the measured bubble; not with --transport nccl); also\n"
    "                      rewrites PLAN_DIR/report.html with the run (timeline, losses)\n"
    "  --profile-out FILE  each segment's measured compute time, for pd2bwc --profile (any\n"
    "                      plan; --backend cuda: timed launch by launch with device events,\n"
    "                      not as CUDA graphs; not with --transport nccl)\n"
    "  --reference         afterwards, train PLAN_DIR/reference sequentially and compare\n"
    "  --reference-tol X   relative bound for --reference (losses; weights 10x) (default 1e-5)\n"
    "  -q, --quiet         only errors and the final summary (no step lines, no BLAS note)\n"
    "  -h, --help          this text\n";

static int fail(const char *msg) { return rt_fail("pd2bwrun", msg); }

int main(int argc, char **argv) {
  RunArgs a;
  int rc = run_args_parse("pd2bwrun", RUN_ARGS_PD2BWRUN, usage, argc, argv, &a);
  if (rc >= 0) return rc;
  pd_blas_set_quiet(a.o.quiet);
  if (a.backend && strcmp(a.backend, "cuda") == 0) {
    /* --transport nccl: multi-GPU mode under mpirun, one process per stage replica */
    a.o.nccl = a.transport && strcmp(a.transport, "nccl") == 0;
    /* checkpoints and validation: runtime/cuda/exec/cuda_exec.h says which modes take them */
    /* --timeout: single-GPU mode's local transport (cuda_pipe_threads.c, through the
     * options) and --transport nccl's MPI one (cx_pipe_nccl_launch) */
    if (a.transport && !a.o.nccl) return fail("--backend cuda supports no transport but --transport nccl");
    return run_exit_status(cx_main("pd2bwrun", a.plan, &a.o));
  }
  if (a.graphs) return fail("--cuda-graphs applies to --backend cuda (CUDA graphs of the GPU's passes)");
  return run_exit_status(pipeline_main(a.plan, &a.o, a.transport, &argc, &argv));
}
