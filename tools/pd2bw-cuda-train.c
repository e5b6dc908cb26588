/* tools/pd2bw-cuda-train.c — train a plan on one GPU (runtime/cuda/exec/cuda_exec.h; a plan with
 * several stages or replicas in single-GPU pipeline mode, runtime/cuda/pipe/cuda_pipe.h).
 *
 *   pd2bw-cuda-train PLAN_DIR --data FILE --steps N [--device K] [--gemm fp32|tf32]
 *                    [--seed N] [--log-json FILE] [--shuffle] [--bench-gemm]
 *                    [--cuda-graphs on|off] [--save FILE] [--resume FILE] [--init FILE]
 *                    [--val-data FILE [--eval-every K] [--eval-batches N]]
 *                    [--reference [--reference-tol X]] [--kernel-profile FILE]
 *                    [--trace FILE] [--profile-out FILE] [--timeout S] [-q]
 *
 * pd2bwrun --backend cuda (cx_main, the same command line: tools/run_args.c) with
 * the flags scripts/gpu-check.sh adds: --gemm, --bench-gemm, --kernel-profile. Without a
 * GPU driver it prints "cuda backend: no CUDA driver found (...); use --backend cpu" and
 * exits 1. */
#include "runtime/cuda/pipe/cuda_pipe.h"
#include "tools/run_args.h"

static const char usage[] =
    "usage: pd2bw-cuda-train PLAN_DIR --data FILE --steps N [options]\n"
    "\n"
    "Trains a plan (made by pd2bwc with --backend cuda or both) on one GPU; a plan with\n"
    "several stages or replicas runs all of them on that GPU (single-GPU pipeline mode).\n"
    "\n"
    "options:\n"
    "  --data FILE       training tokens (.bin: uint16, or uint32 llm.c)\n"
    "  --steps N         optimizer steps\n"
    "  --device K        GPU ordinal (default 0)\n"
    "  --gemm fp32|tf32  GEMM arithmetic (default: as the plan's launch lists say)\n"
    "  --seed N          override the plan's seed\n"
    "  --log-json FILE   one JSON object per step (pd2bwrun's format)\n"
    "  --shuffle         visit the training windows in a seeded random order per epoch\n"
    "  --bench-gemm      afterwards, measure cuBLAS on the model's MLP GEMM shape (one stage)\n"
    "  --cuda-graphs on|off  replay each forward/backward pass as a CUDA graph captured\n"
    "                    once (default on); off: launch by launch\n"
    "  --save FILE       write a checkpoint at the end (the CPU trainer's format)\n"
    "  --resume FILE     continue from a checkpoint (CPU or GPU, any partition)\n"
    "  --init FILE       initial weights: Hugging Face, llm.c or pd2bw GPT-2 checkpoint\n"
    "  --val-data FILE   held-out tokens for the validation loss\n"
    "  --eval-every K    validation loss every K steps and at the end (default 0: end only)\n"
    "  --eval-batches N  batches per validation (default 8, fewer if the file is short)\n"
    "  --reference       (pipeline plans) afterwards, train PLAN_DIR/reference on the CPU\n"
    "                    sequentially and compare losses and weights\n"
    "  --reference-tol X relative bound for --reference (losses; weights 10x; default 1e-5)\n"
    "  --kernel-profile FILE  time every kernel launch and GEMM with device events (CUDA\n"
    "                    graphs off) and write the ten with the most GPU time, as a\n"
    "                    Markdown table (share of the total), to FILE\n"
    "  --trace FILE      Chrome trace of every stage replica's instructions, timed with\n"
    "                    device events\n"
    "  --profile-out FILE  each segment's measured time, for pd2bwc --profile\n"
    "  --timeout S       seconds a stage replica waits for another before all stop\n"
    "                    (default 60)\n"
    "  -q, --quiet       only errors and the summary\n"
    "  -h, --help        this text\n";

static int fail(const char *msg) { return rt_fail("pd2bw-cuda-train", msg); }

int main(int argc, char **argv) {
  RunArgs a;
  int rc = run_args_parse("pd2bw-cuda-train", RUN_ARGS_CUDA_TRAIN, usage, argc, argv, &a);
  if (rc >= 0) return rc;
  if (a.o.steps == 0) return fail("--steps needs an integer from 1 to 4611686018427387903, got '0'");
  if (a.o.eval_every && !a.o.val_path) return fail("--eval-every needs --val-data");
  return run_exit_status(cx_main("pd2bw-cuda-train", a.plan, &a.o));
}
