/* tools/pd2bw-cuda-train.c — train a plan on one GPU (runtime/cuda/exec/cuda_exec.h; a plan with
 * several stages or replicas in single-GPU pipeline mode, runtime/cuda/pipe/cuda_pipe.h).
 *
 *   pd2bw-cuda-train PLAN_DIR --data FILE --steps N [--device K] [--gemm fp32|tf32]
 *                    [--seed N] [--log-json FILE] [--shuffle] [--bench-gemm]
 *                    [--cuda-graphs on|off] [--save FILE] [--resume FILE] [--init FILE]
 *                    [--val-data FILE [--eval-every K] [--eval-batches N]]
 *                    [--reference [--reference-tol X]] [--kernel-profile FILE] [-q]
 *
 * A thin driver over cuda_exec_main for scripts/gpu-check.sh, until pd2bwrun grows
 * `--backend cuda` (it will call the same function). Without a GPU driver it prints
 * "cuda backend: no CUDA driver found (...); use --backend cpu" and exits 1. */
#include <errno.h>
#include <getopt.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/cuda/exec/cuda_exec.h"

static const char usage[] =
    "usage: pd2bw-cuda-train PLAN_DIR --data FILE --steps N [options]\n"
    "\n"
    "Trains a plan (made by pd2bwc with --backend cuda or both) on one GPU; a plan with\n"
    "several stages or replicas runs all of them on that GPU (single-GPU pipeline mode).\n"
    "\n"
    "options:\n"
    "  --data FILE       training tokens (uint16 .bin)\n"
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
    "  -q, --quiet       only errors and the summary\n"
    "  -h, --help        this text\n";

static int fail(const char *msg, const char *arg) {
  fprintf(stderr, "pd2bw-cuda-train: error: %s%s%s\n", msg, arg ? arg : "", arg ? "'" : "");
  return 1;
}

static bool parse_u64(const char *s, uint64_t lo, uint64_t hi, uint64_t *out) {
  char *end;
  errno = 0;
  unsigned long long v = strtoull(s, &end, 10);
  if (errno || end == s || *end || s[0] == '-' || v < lo || v > hi) return false;
  *out = v;
  return true;
}

int main(int argc, char **argv) {
  enum { O_DATA = 256, O_STEPS, O_DEVICE, O_GEMM, O_SEED, O_LOG, O_BENCH, O_SHUFFLE, O_REF, O_REF_TOL, O_GRAPHS,
         O_SAVE, O_RESUME, O_INIT, O_VAL, O_EVAL, O_EVALB, O_KPROF };
  static const struct option opts[] = {{"data", required_argument, 0, O_DATA},   {"steps", required_argument, 0, O_STEPS},
                                        {"device", required_argument, 0, O_DEVICE}, {"gemm", required_argument, 0, O_GEMM},
                                        {"seed", required_argument, 0, O_SEED},   {"log-json", required_argument, 0, O_LOG},
                                        {"bench-gemm", no_argument, 0, O_BENCH},  {"shuffle", no_argument, 0, O_SHUFFLE},
                                        {"reference", no_argument, 0, O_REF},
                                        {"reference-tol", required_argument, 0, O_REF_TOL},
                                        {"cuda-graphs", required_argument, 0, O_GRAPHS},
                                        {"save", required_argument, 0, O_SAVE},
                                        {"resume", required_argument, 0, O_RESUME},
                                        {"init", required_argument, 0, O_INIT},
                                        {"val-data", required_argument, 0, O_VAL},
                                        {"eval-every", required_argument, 0, O_EVAL},
                                        {"eval-batches", required_argument, 0, O_EVALB},
                                        {"kernel-profile", required_argument, 0, O_KPROF},
                                        {"quiet", no_argument, 0, 'q'},
                                        {"help", no_argument, 0, 'h'},           {0, 0, 0, 0}};
  CudaExecOptions o = {0};
  uint64_t v;
  int c;
  opterr = 0;
  while ((c = getopt_long(argc, argv, "qh", opts, NULL)) != -1) {
    switch (c) {
    case O_DATA: o.data_path = optarg; break;
    case O_LOG: o.log_json = optarg; break;
    case O_STEPS:
      if (!parse_u64(optarg, 1, 1u << 30, &v)) return fail("--steps needs a positive integer, got '", optarg);
      o.steps = (int64_t)v;
      break;
    case O_DEVICE:
      if (!parse_u64(optarg, 0, 1023, &v)) return fail("--device needs a GPU ordinal, got '", optarg);
      o.device = (int)v;
      break;
    case O_SEED:
      if (!parse_u64(optarg, 0, UINT64_MAX, &v)) return fail("--seed needs a non-negative integer, got '", optarg);
      o.seed = v, o.seed_set = true;
      break;
    case O_GEMM:
      if (strcmp(optarg, "fp32") == 0) o.gemm = CX_GEMM_FP32;
      else if (strcmp(optarg, "tf32") == 0) o.gemm = CX_GEMM_TF32;
      else return fail("--gemm takes fp32 or tf32, got '", optarg);
      break;
    case O_BENCH: o.bench_gemm = true; break;
    case O_GRAPHS:
      if (strcmp(optarg, "on") != 0 && strcmp(optarg, "off") != 0)
        return fail("--cuda-graphs takes on or off, got '", optarg);
      o.graphs_off = strcmp(optarg, "off") == 0;
      break;
    case O_SHUFFLE: o.shuffle = true; break;
    case O_SAVE: o.save_path = optarg; break;
    case O_KPROF: o.kernel_profile = optarg; break;
    case O_RESUME: o.resume_path = optarg; break;
    case O_INIT: o.init_path = optarg; break;
    case O_VAL: o.val_path = optarg; break;
    case O_EVAL:
      if (!parse_u64(optarg, 0, 1u << 30, &v)) return fail("--eval-every needs a non-negative integer, got '", optarg);
      o.eval_every = (int64_t)v;
      break;
    case O_EVALB:
      if (!parse_u64(optarg, 1, 1u << 30, &v)) return fail("--eval-batches needs a positive integer, got '", optarg);
      o.eval_batches = (int64_t)v;
      break;
    case O_REF: o.reference = true; break;
    case O_REF_TOL: {
      char *end;
      errno = 0;
      o.ref_tol = strtod(optarg, &end);
      if (errno || end == optarg || *end || !(o.ref_tol > 0))
        return fail("--reference-tol needs a positive number, got '", optarg);
      break;
    }
    case 'q': o.quiet = true; break;
    case 'h': fputs(usage, stdout); return 0;
    default: return fail("unknown or incomplete option '", argv[optind - 1]);
    }
  }
  if (optind != argc - 1) return fail("one plan directory is needed (see --help)", NULL);
  if (!o.data_path) return fail("--data FILE is required", NULL);
  if (!o.steps) return fail("--steps N is required", NULL);
  if ((o.eval_every || o.eval_batches) && !o.val_path)
    return fail("--eval-every and --eval-batches need --val-data", NULL);
  return cuda_exec_main("pd2bw-cuda-train", argv[optind], &o);
}
