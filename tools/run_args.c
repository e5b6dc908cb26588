/* tools/run_args.c — pd2bwrun's and pd2bw-cuda-train's command line (run_args.h). */
#include "tools/run_args.h"

#include <errno.h>
#include <getopt.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/cuda/exec/cuda_exec.h"

/* An integer flag's value in [lo, hi]; otherwise one message naming the flag, the
 * range and the value. 0 done, 1 after the message. */
static int int_flag(const char *prog, const char *flag, const char *s, int64_t lo, int64_t hi, int64_t *out) {
  char *end;
  errno = 0;
  long long v = strtoll(s, &end, 10);
  if (!errno && end != s && !*end && v >= lo && v <= hi) {
    *out = v;
    return 0;
  }
  char msg[256];
  snprintf(msg, sizeof msg, "--%s needs an integer from %lld to %lld, got '%s'", flag, (long long)lo, (long long)hi, s);
  return rt_fail(prog, msg);
}

enum { O_DATA = 256, O_VAL, O_STEPS, O_EVAL, O_EVALB, O_SAVE, O_RESUME, O_INIT, O_SEED, O_LOG, O_SHUFFLE, O_TRACE,
       O_PROFILE_OUT, O_REFERENCE, O_REF_TOL, O_DEVICE, O_GRAPHS, O_TIMEOUT,
       O_THREADS, O_TRANSPORT, O_BACKEND, /* pd2bwrun's only */
       O_GEMM, O_BENCH, O_KPROF /* pd2bw-cuda-train's only */ };

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
    {"shuffle", no_argument, 0, O_SHUFFLE},       {"backend", required_argument, 0, O_BACKEND},
    {"device", required_argument, 0, O_DEVICE},   {"cuda-graphs", required_argument, 0, O_GRAPHS},
    {"gemm", required_argument, 0, O_GEMM},       {"bench-gemm", no_argument, 0, O_BENCH},
    {"kernel-profile", required_argument, 0, O_KPROF}, {"help", no_argument, 0, 'h'},
    {0, 0, 0, 0}};

/* One flag's value into *a: 0 done; 1 after its message; 3: unknown. */
static int take(const char *prog, int c, RunArgs *a) {
  char msg[256];
  int64_t v;
  switch (c) {
  case O_DATA: a->o.data_path = optarg; return 0;
  case O_VAL: a->o.val_path = optarg; return 0;
  case O_SAVE: a->o.save_path = optarg; return 0;
  case O_RESUME: a->o.resume_path = optarg; return 0;
  case O_INIT: a->o.init_path = optarg; return 0;
  case O_LOG: a->o.log_json = optarg; return 0;
  case O_TRACE: a->o.trace_path = optarg; return 0;
  case O_PROFILE_OUT: a->o.profile_out = optarg; return 0;
  case O_KPROF: a->o.kernel_profile = optarg; return 0;
  case O_TRANSPORT: a->transport = optarg; return 0;
  case O_REFERENCE: a->o.reference = true; return 0;
  case O_SHUFFLE: a->o.shuffle = true; return 0;
  case O_BENCH: a->o.bench_gemm = true; return 0;
  case 'q': a->o.quiet = true; return 0;
  case O_STEPS: /* 0: nothing trained; with --save, the initial (or --init) weights are written */
    a->steps_set = true;
    return int_flag(prog, "steps", optarg, 0, INT64_MAX / 2, &a->o.steps);
  case O_EVAL: return int_flag(prog, "eval-every", optarg, 0, INT64_MAX / 2, &a->o.eval_every);
  case O_EVALB: return int_flag(prog, "eval-batches", optarg, 1, 1 << 30, &a->o.eval_batches);
  case O_THREADS:
  case O_DEVICE: {
    bool dev = c == O_DEVICE;
    if (int_flag(prog, dev ? "device" : "threads", optarg, dev ? 0 : 1, dev ? 1023 : 4096, &v)) return 1;
    *(dev ? &a->o.device : &a->o.threads) = (int)v;
    return 0;
  }
  case O_SEED: {
    char *end;
    errno = 0;
    a->o.seed = strtoull(optarg, &end, 10);
    a->o.seed_set = true;
    if (!errno && end != optarg && !*end && optarg[0] != '-') return 0;
    snprintf(msg, sizeof msg, "--seed needs an integer from 0 to %llu, got '%s'", (unsigned long long)UINT64_MAX,
             optarg);
    return rt_fail(prog, msg);
  }
  case O_TIMEOUT:
  case O_REF_TOL: {
    char *end;
    errno = 0;
    double x = strtod(optarg, &end);
    if (errno || end == optarg || *end || !(x > 0) || x > 1e6) {
      snprintf(msg, sizeof msg, "%s needs a number above 0 and at most 1e6, got '%s'",
               c == O_TIMEOUT ? "--timeout" : "--reference-tol", optarg);
      return rt_fail(prog, msg);
    }
    *(c == O_TIMEOUT ? &a->o.timeout_s : &a->o.ref_tol) = x;
    return 0;
  }
  case O_BACKEND:
    if (strcmp(optarg, "cpu") != 0 && strcmp(optarg, "cuda") != 0) {
      snprintf(msg, sizeof msg, "--backend takes cpu or cuda, got '%s'", optarg);
      return rt_fail(prog, msg);
    }
    a->backend = optarg;
    return 0;
  case O_GRAPHS:
    if (strcmp(optarg, "on") != 0 && strcmp(optarg, "off") != 0) {
      snprintf(msg, sizeof msg, "--cuda-graphs takes on or off, got '%s'", optarg);
      return rt_fail(prog, msg);
    }
    a->graphs = strcmp(optarg, "on") == 0 ? 1 : -1;
    a->o.graphs_off = a->graphs < 0;
    return 0;
  case O_GEMM:
    if (strcmp(optarg, "fp32") != 0 && strcmp(optarg, "tf32") != 0) {
      snprintf(msg, sizeof msg, "--gemm takes fp32 or tf32, got '%s'", optarg);
      return rt_fail(prog, msg);
    }
    a->o.gemm = strcmp(optarg, "fp32") == 0 ? GEMM_FP32 : GEMM_TF32;
    return 0;
  default: return 3;
  }
}

int run_args_parse(const char *prog, RunArgsTool tool, const char *usage, int argc, char **argv, RunArgs *a) {
  memset(a, 0, sizeof *a);
  a->o.eval_batches = 8;
  a->o.ref_tol = 1e-5;
  char msg[256];
  int c, li;
  opterr = 0;
  while ((c = getopt_long(argc, argv, "qh", opts, &li)) != -1) {
    if (c == 'h') return fputs(usage, stdout), 0;
    bool others = tool == RUN_ARGS_CUDA_TRAIN ? c >= O_THREADS && c <= O_BACKEND : c >= O_GEMM && c <= O_KPROF;
    if (others) { /* the other tool's flag (its value, if any, taken already) */
      snprintf(msg, sizeof msg, "unknown option '--%s' (see %s --help)", opts[li].name, prog);
      return rt_fail(prog, msg);
    }
    int r = take(prog, c, a);
    if (r == 1) return 1;
    if (r == 3) {
      snprintf(msg, sizeof msg, "unknown or incomplete option '%s' (see %s --help)", argv[optind - 1], prog);
      return rt_fail(prog, msg);
    }
  }
  snprintf(msg, sizeof msg, "%s (see %s --help)", optind >= argc ? "no plan directory given" : "one plan directory only",
           prog);
  if (optind != argc - 1) return rt_fail(prog, msg);
  a->plan = argv[optind];
  if (!a->o.data_path) return rt_fail(prog, "--data FILE is required");
  if (!a->steps_set) return rt_fail(prog, "--steps N is required");
  return -1;
}

int run_exit_status(int rc) {
  int sig = transport_interrupted();
  return rc != 0 && sig ? 128 + sig : rc;
}
