/* tools/pd2bwrun.c — the training driver: a plan directory and a token file in,
 * trained weights and a log out.
 *
 *   pd2bwrun PLAN_DIR --data FILE [--val-data FILE] --steps N [options]
 *
 * This file parses and dispatches. Every CPU plan runs on the pipeline executor
 * (runtime/pipeline/pipeline.h pipeline_main): one rank per stage replica, as threads
 * (--transport local, the default) or MPI processes (mpirun ... --transport mpi); a
 * one-stage plan is one rank, which computes what the one-stage trainer
 * (runtime/exec/exec_one.c) does, and is reported in its words. Every failure
 * the user can cause (a missing plan, a bad flag, a data file that does not fit the
 * model, a checkpoint of another model) ends with one line naming the file and exit
 * status 1. --val-data/--eval-every and --init mean the same on both executors: the
 * pipelined validation loss is the one-stage trainer's on PLAN_DIR/reference for the
 * same weights (runtime/pipeline/pipeline_eval.h). */
#include "runtime/cuda/exec/cuda_exec.h"
#include "runtime/core/runtime.h"

#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char usage[] =
    "usage: pd2bwrun PLAN_DIR --data FILE --steps N [options]\n"
    "\n"
    "Trains the plan that pd2bwc wrote into PLAN_DIR on a file of uint16 token ids\n"
    "(llm.c/nanoGPT .bin; make one with pd2bw-data).\n"
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

typedef struct Args {
  PipeOptions o; /* every backend's and mode's options (runtime/pipeline/pipeline.h) */
  const char *plan, *transport;
  const char *backend; /* NULL or "cpu": the CPU programs; "cuda": runtime/cuda/exec/cuda_exec.h */
  bool steps_set;
  int graphs; /* --cuda-graphs: 0 not given, 1 on, -1 off */
} Args;

static int fail(const char *msg) {
  fprintf(stderr, "pd2bwrun: error: %s\n", msg);
  return 1;
}

static bool parse_int(const char *s, int64_t lo, int64_t hi, int64_t *out) {
  char *end;
  errno = 0;
  long long v = strtoll(s, &end, 10);
  if (errno || end == s || *end || v < lo || v > hi) return false;
  *out = v;
  return true;
}

/* Returns -1 to go on, else the exit status. */
static int parse_args(int argc, char **argv, Args *a) {
  memset(a, 0, sizeof *a);
  a->o.eval_batches = 8;
  a->o.ref_tol = 1e-5;
  enum { O_DATA = 256, O_VAL, O_STEPS, O_EVAL, O_EVALB, O_SAVE, O_RESUME, O_INIT, O_SEED, O_THREADS, O_LOG, O_SHUFFLE,
         O_TRANSPORT, O_TIMEOUT, O_TRACE, O_PROFILE_OUT, O_REFERENCE, O_REF_TOL, O_BACKEND, O_DEVICE, O_GRAPHS };
  static const struct option opts[] = {
      {"data", required_argument, 0, O_DATA},       {"val-data", required_argument, 0, O_VAL},
      {"steps", required_argument, 0, O_STEPS},     {"eval-every", required_argument, 0, O_EVAL},
      {"eval-batches", required_argument, 0, O_EVALB}, {"save", required_argument, 0, O_SAVE},
      {"resume", required_argument, 0, O_RESUME},   {"init", required_argument, 0, O_INIT},
      {"seed", required_argument, 0, O_SEED},       {"threads", required_argument, 0, O_THREADS},
      {"log-json", required_argument, 0, O_LOG},    {"quiet", no_argument, 0, 'q'},
      {"transport", required_argument, 0, O_TRANSPORT}, {"timeout", required_argument, 0, O_TIMEOUT},
      {"trace", required_argument, 0, O_TRACE},     {"profile-out", required_argument, 0, O_PROFILE_OUT},
      {"reference", no_argument, 0, O_REFERENCE},   {"reference-tol", required_argument, 0, O_REF_TOL},
      {"shuffle", no_argument, 0, O_SHUFFLE},
      {"backend", required_argument, 0, O_BACKEND}, {"device", required_argument, 0, O_DEVICE},
      {"cuda-graphs", required_argument, 0, O_GRAPHS},
      {"help", no_argument, 0, 'h'},                {0, 0, 0, 0}};
  int c;
  char msg[256];
  opterr = 0;
  while ((c = getopt_long(argc, argv, "qh", opts, NULL)) != -1) {
    int64_t v;
    switch (c) {
    case O_DATA: a->o.data_path = optarg; break;
    case O_VAL: a->o.val_path = optarg; break;
    case O_SAVE: a->o.save_path = optarg; break;
    case O_RESUME: a->o.resume_path = optarg; break;
    case O_INIT: a->o.init_path = optarg; break;
    case O_LOG: a->o.log_json = optarg; break;
    case O_STEPS:
      /* 0: nothing trained; with --save, the initial (or --init) weights are written */
      if (!parse_int(optarg, 0, INT64_MAX / 2, &a->o.steps)) goto bad_number;
      a->steps_set = true;
      break;
    case O_EVAL:
      if (!parse_int(optarg, 0, INT64_MAX / 2, &a->o.eval_every)) goto bad_number;
      break;
    case O_EVALB:
      if (!parse_int(optarg, 1, 1 << 30, &a->o.eval_batches)) goto bad_number;
      break;
    case O_THREADS:
      if (!parse_int(optarg, 1, 4096, &v)) goto bad_number;
      a->o.threads = (int)v;
      break;
    case O_SEED: {
      char *end;
      errno = 0;
      a->o.seed = strtoull(optarg, &end, 10);
      if (errno || end == optarg || *end || optarg[0] == '-') goto bad_number;
      a->o.seed_set = true;
      break;
    }
    case O_TRANSPORT: a->transport = optarg; break;
    case O_TRACE: a->o.trace_path = optarg; break;
    case O_PROFILE_OUT: a->o.profile_out = optarg; break;
    case O_REFERENCE: a->o.reference = true; break;
    case O_TIMEOUT:
    case O_REF_TOL: {
      char *end;
      errno = 0;
      double x = strtod(optarg, &end);
      if (errno || end == optarg || *end || !(x > 0) || x > 1e6) {
        snprintf(msg, sizeof msg, "%s needs a positive number, got '%s'", c == O_TIMEOUT ? "--timeout" : "--reference-tol",
                 optarg);
        return fail(msg);
      }
      if (c == O_TIMEOUT) a->o.timeout_s = x;
      else a->o.ref_tol = x;
      break;
    }
    case 'q': a->o.quiet = true; break;
    case O_SHUFFLE: a->o.shuffle = true; break;
    case O_BACKEND:
      if (strcmp(optarg, "cpu") != 0 && strcmp(optarg, "cuda") != 0) {
        snprintf(msg, sizeof msg, "--backend takes cpu or cuda, got '%s'", optarg);
        return fail(msg);
      }
      a->backend = optarg;
      break;
    case O_DEVICE:
      if (!parse_int(optarg, 0, 1023, &v)) goto bad_number;
      a->o.device = (int)v;
      break;
    case O_GRAPHS:
      if (strcmp(optarg, "on") != 0 && strcmp(optarg, "off") != 0) {
        snprintf(msg, sizeof msg, "--cuda-graphs takes on or off, got '%s'", optarg);
        return fail(msg);
      }
      a->graphs = strcmp(optarg, "on") == 0 ? 1 : -1;
      a->o.graphs_off = a->graphs < 0;
      break;
    case 'h': fputs(usage, stdout); return 0;
    default:
      snprintf(msg, sizeof msg, "unknown or incomplete option '%s' (see pd2bwrun --help)", argv[optind - 1]);
      return fail(msg);
    }
    continue;
  bad_number:
    snprintf(msg, sizeof msg, "%s needs a non-negative integer in range, got '%s'", argv[optind - 2 >= 0 ? optind - 2 : 0], optarg);
    return fail(msg);
  }
  if (optind != argc - 1) return fail(optind >= argc ? "no plan directory given (see pd2bwrun --help)" : "one plan directory only (see pd2bwrun --help)");
  a->plan = argv[optind];
  if (!a->o.data_path) return fail("--data FILE is required");
  if (!a->steps_set) return fail("--steps N is required");
  return -1;
}

/* the reference (runtime/reference/pipeline_ref.c) trains from the plan's own initial weights */
static const char reference_init_msg[] =
    "--reference starts from the plan's initial weights, not --init's: compare with the one-stage trainer on "
    "PLAN_DIR/reference with the same --init instead (docs/pipelines.md, \"Validation and --init\")";

int main(int argc, char **argv) {
  Args a;
  int rc = parse_args(argc, argv, &a);
  if (rc >= 0) return rc;
  pd_blas_set_quiet(a.o.quiet);
  if (a.backend && strcmp(a.backend, "cuda") == 0) {
    /* --transport nccl: multi-GPU mode under mpirun, one process per stage replica */
    a.o.nccl = a.transport && strcmp(a.transport, "nccl") == 0;
    /* checkpoints and validation: runtime/cuda/exec/cuda_exec.h says which modes take them */
    /* --timeout: single-GPU mode's local transport (cuda_pipe_threads.c, through the
     * options) and --transport nccl's MPI one (cuda_pipe_nccl_launch) */
    if (a.transport && !a.o.nccl) return fail("--backend cuda supports no transport but --transport nccl");
    /* --trace: single-GPU pipeline mode's (runtime/cuda/pipe/cuda_pipe_threads.c); nccl refuses it itself */
    if (a.o.trace_path && !a.o.nccl && pipe_plan_ranks(a.plan) <= 1)
      return fail("--trace with --backend cuda needs a pipeline plan (several stages or replicas)");
    if (a.o.reference && a.o.init_path) return fail(reference_init_msg);
    return cuda_exec_main("pd2bwrun", a.plan, &a.o);
  }
  if (a.graphs) return fail("--cuda-graphs applies to --backend cuda (CUDA graphs of the GPU's passes)");
  if (a.o.reference && a.o.init_path) return fail(reference_init_msg); /* --reference: a pipeline flag */
  return pipeline_main(a.plan, &a.o, a.transport, &argc, &argv);
}
