/* tools/pd2bwc.c — the compiler driver: model text in, plan directory out.
 *
 *   frontend (parse, lower, check) -> passes (autodiff, ...) -> planner -> codegen
 *
 * Nothing is written unless every step succeeded: the plan is assembled in a
 * sibling temporary directory and renamed into place at the end, so a failed or
 * interrupted compile leaves either the previous plan or none, never a mixture. */
#include "codegen/codegen.h"
#include "frontend/frontend.h"
#include "passes/passes.h"
#include "runtime/io/io.h"
#include "runtime/report/plan_report.h"
#include "tools/calibrate.h"
#include "tools/plan_dir.h"
#include "tools/update_rule.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <malloc.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char usage[] =
    "usage: pd2bwc MODEL [options] -o DIR\n"
    "\n"
    "Compiles a model written in the pd2bw language (docs/language.md) into a plan\n"
    "directory for pd2bwrun: plan.json, schedule.txt, memory.txt, timeline.json,\n"
    "timeline.svg, report.html (the plan as a web page) and the per-stage programs.\n"
    "\n"
    "options:\n"
    "  -o DIR                    output plan directory (replaced atomically; if it exists it\n"
    "                            must be empty or a plan pd2bwc wrote)\n"
    "  -D NAME=VALUE             override a model 'param' (repeatable)\n"
    "  -D train.KEY=VALUE        override a train setting: batch, microbatch, optimizer (adamw,\n"
    "                            sgd), lr, beta1, beta2, eps, momentum (sgd), weight_decay,\n"
    "                            lr_schedule (constant, cosine, linear), warmup, steps, min_lr,\n"
    "                            clip, seed, delay_comp, flush_steps, predict (2bw);\n"
    "                            plan.json records it\n"
    "  --cluster FILE            cluster description (default: this host as --calibrate\n"
    "                            measured it, calibrated on first use; docs/calibration.md)\n"
    "  --calibrate               measure this host and write its cluster file, then stop\n"
    "  --emit=ast|ir             print the AST or the lowered IR to stdout and stop\n"
    "  --print-ir-after=PASS     print the IR after PASS (check, autodiff, all)\n"
    "  --stages N                pin the number of pipeline stages d\n"
    "  --replicas N              pin the replicas per stage w\n"
    "  --microbatch-size N       pin the microbatch size b\n"
    "  --microbatches N          pin the microbatches per update m\n"
    "  --schedule S              pin the schedule: gpipe, 1f1b, 2bw, pipedream\n"
    "  --recompute on|off|auto   activation recomputation (default auto)\n"
    "  --profile FILE            measured per-segment times replacing the cost model\n"
    "  --backend cpu|cuda|both   stage programs to emit: C only, or C and CUDA C (default both)\n"
    "  --precision P             the CUDA programs' GEMMs: tf32 (float32 on TF32 tensor cores,\n"
    "                            the default), fp32, or bf16 (bfloat16 operands cast from the\n"
    "                            float32 master weights, float32 accumulation); the planner\n"
    "                            charges the cluster's peak for it (tflops_tf32/_fp32/_bf16)\n"
    "                            and counts bf16's staging; bf16 stashes and sends activations as bfloat16\n"
    "  --gemm-epilogues on|off   the CUDA programs' bias, GELU and bias gradients as cuBLASLt\n"
    "                            GEMM epilogues (default off: not yet measured on a GPU;\n"
    "                            docs/gpu.md)\n"
    "  --allow-over              write the plan even when a stage's exact arena is over\n"
    "                            device memory (otherwise an error)\n"
    "  -q, --quiet               no summary on stdout\n"
    "  -h, --help                this text\n"
    "  --version                 print the version\n";

typedef struct Options {
  const char *model, *cluster, *out, *emit, *print_after, *profile;
  const char **defines;
  int ndefines;
  PlanPins pins;
  bool quiet;
  bool allow_over;   /* write a plan whose exact arena is over device memory */
  bool backend_cuda; /* also emit stageN.cu and launch lists (--backend both|cuda) */
  GemmType precision;      /* the CUDA programs' GEMMs (--precision); GEMM_PLAN: the planner's default */
  bool gemm_epilogues;     /* --gemm-epilogues on */
} Options;

static int user_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int user_error(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "pd2bwc: error: ");
  vfprintf(stderr, fmt, ap);
  fprintf(stderr, "\n(see pd2bwc --help)\n");
  va_end(ap);
  return 1;
}

/* Parses a positive integer flag value; false on anything else. */
static bool parse_count(const char *s, int64_t max, int64_t *out) {
  char *end;
  errno = 0;
  long long v = strtoll(s, &end, 10);
  if (errno || end == s || *end || v < 1 || v > max) return false;
  *out = v;
  return true;
}

enum {
  OPT_CLUSTER = 256, OPT_EMIT, OPT_PRINT_AFTER, OPT_STAGES, OPT_REPLICAS, OPT_MBS, OPT_MBN,
  OPT_SCHEDULE, OPT_RECOMPUTE, OPT_PROFILE, OPT_VERSION, OPT_BACKEND, OPT_PRECISION, OPT_ALLOW_OVER,
  OPT_EPILOGUES, OPT_CALIBRATE,
};

/* Returns -1 to go on, else the exit status. */
static int parse_args(int argc, char **argv, Options *o) {
  static const struct option longs[] = {
      {"cluster", required_argument, 0, OPT_CLUSTER},
      {"calibrate", no_argument, 0, OPT_CALIBRATE},
      {"emit", required_argument, 0, OPT_EMIT},
      {"print-ir-after", required_argument, 0, OPT_PRINT_AFTER},
      {"stages", required_argument, 0, OPT_STAGES},
      {"replicas", required_argument, 0, OPT_REPLICAS},
      {"microbatch-size", required_argument, 0, OPT_MBS},
      {"microbatches", required_argument, 0, OPT_MBN},
      {"schedule", required_argument, 0, OPT_SCHEDULE},
      {"recompute", required_argument, 0, OPT_RECOMPUTE},
      {"profile", required_argument, 0, OPT_PROFILE},
      {"backend", required_argument, 0, OPT_BACKEND},
      {"precision", required_argument, 0, OPT_PRECISION},
      {"gemm-epilogues", required_argument, 0, OPT_EPILOGUES},
      {"quiet", no_argument, 0, 'q'},
      {"allow-over", no_argument, 0, OPT_ALLOW_OVER},
      {"help", no_argument, 0, 'h'},
      {"version", no_argument, 0, OPT_VERSION},
      {0, 0, 0, 0},
  };
  memset(o, 0, sizeof *o);
  plan_pins_init(&o->pins);
  o->backend_cuda = true;
  o->defines = pd_calloc((size_t)argc, sizeof *o->defines);
  opterr = 0;
  int c;
  int64_t v;
  while ((c = getopt_long(argc, argv, ":o:D:qh", longs, NULL)) != -1) {
    switch (c) {
    case 'o': o->out = optarg; break;
    case 'D':
      if (!strchr(optarg, '=')) return user_error("-D needs NAME=VALUE, got '%s'", optarg);
      o->defines[o->ndefines++] = optarg;
      break;
    case 'q': o->quiet = true; break;
    case OPT_ALLOW_OVER: o->allow_over = true; break;
    case 'h': fputs(usage, stdout); return 0;
    case OPT_VERSION: printf("pd2bwc %s\n", PD2BW_VERSION); return 0;
    case OPT_CLUSTER: o->cluster = optarg; break;
    case OPT_CALIBRATE: return calibrate_main();
    case OPT_EMIT:
      if (strcmp(optarg, "ast") && strcmp(optarg, "ir"))
        return user_error("--emit takes 'ast' or 'ir', got '%s'", optarg);
      o->emit = optarg;
      break;
    case OPT_PRINT_AFTER:
      if (!pass_name_valid(optarg))
        return user_error("--print-ir-after: no pass named '%s' (passes: check, autodiff, all)", optarg);
      o->print_after = optarg;
      break;
    case OPT_STAGES:
      if (!parse_count(optarg, 1 << 20, &v))
        return user_error("--stages needs an integer from 1 to 1048576, got '%s'", optarg);
      o->pins.stages = (int)v;
      break;
    case OPT_REPLICAS:
      if (!parse_count(optarg, 1 << 20, &v))
        return user_error("--replicas needs an integer from 1 to 1048576, got '%s'", optarg);
      o->pins.replicas = (int)v;
      break;
    case OPT_MBS:
      if (!parse_count(optarg, INT_MAX, &v))
        return user_error("--microbatch-size needs an integer from 1 to 2147483647, got '%s'", optarg);
      o->pins.microbatch_size = v;
      break;
    case OPT_MBN:
      if (!parse_count(optarg, INT_MAX, &v))
        return user_error("--microbatches needs an integer from 1 to 2147483647, got '%s'", optarg);
      o->pins.microbatches = v;
      break;
    case OPT_SCHEDULE: {
      PlanSchedule s;
      if (!plan_schedule_parse(optarg, &s))
        return user_error("--schedule takes gpipe, 1f1b, 2bw or pipedream, got '%s'", optarg);
      o->pins.schedule = (int)s;
      break;
    }
    case OPT_RECOMPUTE:
      if (strcmp(optarg, "on") == 0) o->pins.recompute = PR_ON;
      else if (strcmp(optarg, "off") == 0) o->pins.recompute = PR_OFF;
      else if (strcmp(optarg, "auto") == 0) o->pins.recompute = PR_AUTO;
      else return user_error("--recompute takes on, off or auto, got '%s'", optarg);
      break;
    case OPT_PROFILE: o->profile = optarg; break;
    case OPT_BACKEND:
      /* The CPU program is always written: it is also the reference and the
       * fallback, and the CUDA program shares its layout. */
      if (strcmp(optarg, "cpu") == 0) o->backend_cuda = false;
      else if (strcmp(optarg, "both") == 0 || strcmp(optarg, "cuda") == 0) o->backend_cuda = true;
      else return user_error("--backend takes cpu, cuda or both, got '%s'", optarg);
      break;
    case OPT_PRECISION:
      if (!gemm_type_parse(optarg, &o->precision)) /* fp32, tf32 or bf16 only */
        return user_error("--precision takes tf32, fp32 or bf16, got '%s'", optarg);
      break;
    case OPT_EPILOGUES:
      if (strcmp(optarg, "on") && strcmp(optarg, "off")) return user_error("--gemm-epilogues takes on or off, got '%s'", optarg);
      o->gemm_epilogues = strcmp(optarg, "on") == 0;
      break;
    case ':': return user_error("option '%s' needs a value", argv[optind - 1]);
    default: return user_error("unknown option '%s'", argv[optind - 1]);
    }
  }
  if (optind < argc) o->model = argv[optind++];
  if (optind < argc) return user_error("unexpected argument '%s'", argv[optind]);
  if (!o->model) return user_error("%s", "no model file given");
  if (!o->emit && !o->out) return user_error("%s", "no output directory given (-o DIR)");
  /* float32 either way for the C programs; but asking for bf16 and getting none is a mistake */
  if (!o->backend_cuda && o->precision == GEMM_BF16)
    return user_error("%s", "--precision bf16 applies to the CUDA programs, and --backend cpu writes none (the C "
                            "programs are float32)");
  if (!o->backend_cuda && o->gemm_epilogues)
    return user_error("%s", "--gemm-epilogues on applies to the CUDA programs, and --backend cpu writes none");
  return -1;
}

static cJSON *shape_json(const Shape *s) {
  cJSON *a = cJSON_CreateArray();
  for (int i = 0; i < s->rank; i++) {
    if (i == 0 && s->batched)
      cJSON_AddItemToArray(a, cJSON_CreateString("B"));
    else
      cJSON_AddItemToArray(a, cJSON_CreateNumber((double)s->dim[i]));
  }
  return a;
}

/* The "model" section: parameters with shapes, the exact count, FLOPs. */
static cJSON *model_json(const Graph *g, int64_t b) {
  cJSON *m = cJSON_CreateObject();
  cJSON_AddStringToObject(m, "name", g->name);
  cJSON_AddNumberToObject(m, "parameters", (double)graph_param_count(g));
  cJSON_AddNumberToObject(m, "blocks", g->nblocks);
  cJSON *consts = cJSON_AddObjectToObject(m, "consts");
  for (int i = 0; i < g->nconsts; i++) cJSON_AddNumberToObject(consts, g->consts[i].name, g->consts[i].value);
  cJSON *params = cJSON_AddArrayToObject(m, "params");
  for (int p = 0; p < g->nparams; p++) {
    const Tensor *t = &g->tensors[g->params[p].tensor];
    cJSON *e = cJSON_CreateObject();
    cJSON_AddStringToObject(e, "name", t->name);
    cJSON_AddItemToObject(e, "shape", shape_json(&t->shape));
    cJSON_AddBoolToObject(e, "decay", g->params[p].decay);
    cJSON_AddBoolToObject(e, "tied", g->params[p].nuses_regions > 1);
    cJSON_AddItemToArray(params, e);
  }
  cJSON *inputs = cJSON_AddArrayToObject(m, "inputs");
  for (int t = 0; t < g->ntensors; t++) {
    if (g->tensors[t].kind != TK_INPUT) continue;
    cJSON *e = cJSON_CreateObject();
    cJSON_AddStringToObject(e, "name", g->tensors[t].name);
    cJSON_AddStringToObject(e, "dtype", dtype_name(g->tensors[t].dtype));
    cJSON_AddItemToObject(e, "shape", shape_json(&g->tensors[t].shape));
    cJSON_AddItemToArray(inputs, e);
  }
  OpCost f = graph_cost(g, 0, g->nfwd_ops, b), bw = graph_cost(g, g->nfwd_ops, g->nops, b);
  cJSON_AddNumberToObject(m, "microbatch_size", (double)b);
  cJSON_AddNumberToObject(m, "forward_flops_per_microbatch", f.flops);
  cJSON_AddNumberToObject(m, "backward_flops_per_microbatch", bw.flops);
  return m;
}

/* The exact memory plan: each stage program's block sizes (the same layout_stage()
 * call codegen makes) handed to the planner, which lays out the arena the pipeline
 * runtime allocates (passes/planner.h, plan_apply_layouts). */
static int apply_layouts(const Graph *g, Plan *plan) {
  int n = plan->cfg.stages;
  PlanStageBlocks *blocks = pd_calloc((size_t)n, sizeof *blocks);
  for (int i = 0; i < n; i++) {
    StageLayout *L = layout_stage_bf16(g, plan->stages[i].first_seg, plan->stages[i].last_seg - 1,
                                       plan->cfg.microbatch_size, plan->in.cuda && plan->in.precision == GEMM_BF16);
    PlanStageBlocks *B = &blocks[i];
    B->params = (uint64_t)L->total[BUF_PARAMS];
    B->grads = (uint64_t)L->total[BUF_GRADS];
    B->stash = (uint64_t)L->total[BUF_STASH];
    B->work = (uint64_t)L->total[BUF_WORK];
    B->inputs = (uint64_t)L->total[BUF_INPUTS];
    B->boundary = (uint64_t)L->total[BUF_BOUNDARY];
    /* the CUDA programs' GPU-only block, the size codegen records (passes/layout.h) */
    if (plan->in.cuda) B->cuda_scratch = (uint64_t)layout_cuda_scratch_bytes(L, plan->in.precision == GEMM_BF16);
    /* a bf16 copy of the weights per version (codegen/cgen_cuda.c's params_bf16 block),
     * none beside the arena where the versions hold them (weight prediction) */
    if (plan->in.cuda && plan->in.precision == GEMM_BF16 &&
        !(plan_bf16_in_versions_any(&plan->in, &plan->cfg) && layout_cuda_fold_params(L, NULL)))
      B->params_bf16 = B->params / 2;
    /* what stage i-1 sends: the stash slot's content when recomputing */
    for (int t = 0; t < g->ntensors; t++) {
      const Tensor *x = &g->tensors[t];
      if (L->place[t].cls == BUF_STASH && x->kind == TK_ACT && x->producer >= 0 &&
          !layout_has_op(L, x->producer))
        B->act_in += ((uint64_t)L->place[t].bytes + 255) / 256 * 256;
    }
    layout_destroy(L);
  }
  int over = plan_apply_layouts(plan, blocks);
  free(blocks);
  return over;
}

/* Each stage over device memory: an error, or with --allow-over a warning. */
static void report_over_memory(const Plan *plan, bool allow_over, Diag *d) {
  for (int i = 0; i < plan->cfg.stages; i++) {
    const PlanStage *st = &plan->stages[i];
    double dev = (double)plan_stage_device_bytes(st);
    if (dev <= plan->cluster.memory_bytes) continue;
    char msg[512];
    snprintf(msg, sizeof msg, "stage %d's arena, cuda_scratch and cuBLAS workspace are %.3f GiB, over the "
             "device memory of %.3f GiB (the search estimated %.3f GiB); pin a configuration with more stages "
             "or recomputation (--stages, --recompute on)%s", i, dev / 1073741824.0,
             plan->cluster.memory_bytes / 1073741824.0,
             (double)st->estimated_bytes / 1073741824.0,
             allow_over ? "" : ", or pass --allow-over to write it anyway");
    if (allow_over) fprintf(stderr, "pd2bwc: warning: %s\n", msg);
    else diag_error(d, plan->cluster.loc, "%s", msg);
  }
}

/* Field by field: a PlanConfig has padding, which memcmp would compare too. */
static bool same_config(const PlanConfig *a, const PlanConfig *b) {
  return a->stages == b->stages && a->replicas == b->replicas && a->microbatch_size == b->microbatch_size &&
         a->microbatches == b->microbatches && a->schedule == b->schedule && a->recompute == b->recompute;
}

static int by_throughput(const void *a, const void *b) {
  const PlanCandidate *x = *(const PlanCandidate *const *)a, *y = *(const PlanCandidate *const *)b;
  return (x->samples_per_s < y->samples_per_s) - (x->samples_per_s > y->samples_per_s);
}

/* The search ranks candidates by per-segment memory estimates; the exact arena
 * (apply_layouts) can come out larger. When the chosen configuration then does not
 * fit, take the next-fastest candidate whose exact arena does, re-planned with that
 * configuration pinned; it keeps the whole candidate table, the first choice marked
 * as over memory. Returns the plan to use (the old one destroyed if replaced); when
 * none fits, an error and NULL, or with allow_over a warning and the first choice. */
static Plan *fit_exact(const Graph *g, const PlanInput *in, const Cluster *c, Plan *plan, bool allow_over,
                       Diag *d) {
  if (apply_layouts(g, plan) == 0) return plan;
  const PlanCandidate **order = pd_malloc(((size_t)plan->ncands + 1) * sizeof *order);
  int n = 0;
  for (int k = 0; k < plan->ncands; k++)
    if (plan->cands[k].fits && !plan->cands[k].chosen) order[n++] = &plan->cands[k];
  qsort(order, (size_t)n, sizeof *order, by_throughput);
  FILE *devnull = fopen("/dev/null", "w");
  Diag quiet;
  diag_init(&quiet, devnull);
  Plan *found = NULL;
  for (int k = 0; k < n && !found; k++) {
    const PlanConfig *cfg = &order[k]->cfg;
    PlanPins pins;
    plan_pins_init(&pins);
    pins.stages = cfg->stages;
    pins.replicas = cfg->replicas;
    pins.microbatch_size = cfg->microbatch_size;
    pins.microbatches = cfg->microbatches;
    pins.schedule = (int)cfg->schedule;
    pins.recompute = cfg->recompute ? PR_ON : PR_OFF;
    Plan *q = plan_create(in, c, &pins, &quiet);
    if (q && apply_layouts(g, q) == 0) found = q;
    else if (q) plan_destroy(q);
  }
  if (devnull) fclose(devnull);
  free(order);
  if (!found) {
    report_over_memory(plan, allow_over, d);
    if (allow_over) return plan;
    plan_destroy(plan);
    return NULL;
  }
  /* the table the search made, not the one-row table of the pinned re-plan */
  for (int k = 0; k < plan->ncands; k++) {
    PlanCandidate *x = &plan->cands[k];
    bool was = x->chosen;
    x->chosen = same_config(&x->cfg, &found->cfg) && x->fits;
    if (x->chosen) snprintf(x->why, sizeof x->why, "chosen (the faster ones' exact arenas are over device memory)");
    else if (was) snprintf(x->why, sizeof x->why, "exact arena over device memory");
  }
  free(found->cands);
  found->cands = plan->cands, found->ncands = plan->ncands;
  plan->cands = NULL, plan->ncands = 0;
  fprintf(stderr, "pd2bwc: note: the fastest candidate's exact arena is over device memory; using the "
          "next-fastest that fits (%d stages x %d replicas, microbatch %lld x %lld, %s%s)\n",
          found->cfg.stages, found->cfg.replicas, (long long)found->cfg.microbatch_size,
          (long long)found->cfg.microbatches, plan_schedule_name(found->cfg.schedule),
          found->cfg.recompute ? ", recompute" : "");
  plan_destroy(plan);
  return found;
}

/* stageN.c for every stage the planner cut: stage i runs the regions of its
 * segments (the planner's segments are the graph's regions, in order). */
static bool emit_stage_programs(const Graph *g, const Plan *plan, const char *dir, cJSON *root,
                                bool want_cuda, bool epilogues, Diag *d) {
  int n = plan->cfg.stages;
  int *first = pd_malloc((size_t)n * sizeof *first), *last = pd_malloc((size_t)n * sizeof *last);
  for (int i = 0; i < n; i++) {
    first[i] = plan->stages[i].first_seg;
    last[i] = plan->stages[i].last_seg - 1;
  }
  cJSON *stages = cJSON_GetObjectItem(root, "stages");
  if (!stages) stages = cJSON_AddArrayToObject(root, "stages");
  /* bf16 plans store activations as bfloat16 on both backends (passes/layout.h) */
  GemmType precision = plan->in.precision; /* resolved by plan_create: fp32 for --backend cpu */
  CodegenOptions co = {.f64 = false, .fuse = true, .bf16 = want_cuda && precision == GEMM_BF16};
  bool ok = codegen_c_stages(g, first, last, n, plan->cfg.microbatch_size, &co, dir, stages, d);
  if (ok && want_cuda) {
    CodegenCudaOptions cu = {.fuse = true, .gemm = precision, .gemm_epilogues = epilogues,
                             .bf16_in_versions = plan_bf16_in_versions_any(&plan->in, &plan->cfg)};
    ok = codegen_cuda_stages(g, first, last, n, plan->cfg.microbatch_size, &cu, dir, stages, d);
  }
  /* For the pipeline executor: what crosses each stage boundary (codegen/codegen.h),
   * and the same model as one stage over the whole global batch, the sequential
   * reference that `pd2bwrun --reference` checks a run against. */
  char perr[512];
  if (ok && !codegen_boundary_stages(g, first, last, n, plan->cfg.microbatch_size, co.bf16, stages, perr, sizeof perr)) {
    diag_error(d, (Loc){0}, "cannot run this partition as a pipeline: %s", perr); /* not the temporary dir */
    ok = false;
  }
  ok = ok && codegen_manifest_stages(dir, stages, cJSON_GetObjectItem(root, "tied"), d); /* programs say what they are */
  if (ok) {
    size_t len = strlen(dir) + 16;
    char *ref = pd_malloc(len);
    snprintf(ref, len, "%s/reference", dir);
    ok = codegen_single_stage_plan(g, plan->cfg.microbatch_size,
                                   plan->cfg.microbatches * plan->cfg.replicas, &co, ref, d);
    free(ref);
  }
  free(first);
  free(last);
  return ok;
}

static void print_count(FILE *out, int64_t n) {
  char digits[32], buf[48];
  int len = snprintf(digits, sizeof digits, "%lld", (long long)n), j = 0;
  for (int i = 0; i < len; i++) {
    if (i && (len - i) % 3 == 0) buf[j++] = ',';
    buf[j++] = digits[i];
  }
  buf[j] = 0;
  fputs(buf, out);
}

/* report.html, drawn from the plan.json just written (runtime/report/plan_report.h). */
static bool write_report(const char *tmp, Diag *d) {
  char err[1024];
  if (plan_report_write(tmp, NULL, err, sizeof err)) return true;
  diag_error(d, (Loc){tmp, 0, 0}, "cannot write report.html: %s", err);
  return false;
}

/* -o DIR: what is there must be ours to replace (plan_dir.h), and hold no input, as it
 * is replaced whole (runtime/io/io.h output_paths_check). */
static bool out_dir_ok(const Options *o) {
  PathFlag out = {"-o", o->out, true};
  PathFlag ins[] = {{"the model file", o->model, false}, {"--cluster", o->cluster, false},
                    {"--profile", o->profile, false}};
  char err[IO_ERR_LEN];
  if (!output_paths_check(&out, 1, ins, 3, err, sizeof err)) { /* first: it names the input */
    fprintf(stderr, "pd2bwc: error: %s\n", err);
    return false;
  }
  return plan_dir_check_output(o->out);
}

int main(int argc, char **argv) {
  /* No fastbins: the compiler makes millions of small objects (IR, cJSON nodes,
   * strings) and then large buffers; every large malloc or free with fastbins in use
   * walks them all (malloc_consolidate: 6-7 % of a 10000-layer compile's time). */
  mallopt(M_MXFAST, 0);
  Options o;
  int rc = parse_args(argc, argv, &o);
  if (rc >= 0) {
    free(o.defines);
    return rc;
  }
  /* Before any work: what is at -o DIR must be ours to replace, and hold no input. */
  if (o.out && !o.emit && !out_dir_ok(&o)) {
    free(o.defines);
    return 1;
  }

  Arena *arena = arena_create();
  Diag d;
  diag_init(&d, stderr);
  rc = 1;
  Graph *g = NULL;
  Plan *plan = NULL;
  cJSON *root = NULL;
  PlanInput pin;
  bool have_input = false;

  if (o.emit && strcmp(o.emit, "ast") == 0) {
    rc = frontend_dump_ast(arena, &d, o.model, stdout) ? 0 : 1;
    goto done;
  }
  g = frontend_load_model(arena, &d, o.model, o.defines, o.ndefines);
  if (!g) goto done;
  Cluster cluster;
  const char *calibrated = NULL; /* the host's file, when --cluster is omitted */
  if (o.cluster ? !frontend_load_cluster(arena, &d, o.cluster, &cluster)
                : !calibrate_cluster(arena, &d, &cluster, &calibrated))
    goto done;
  if (o.emit) { /* --emit=ir: the lowered, checked graph */
    ir_dump(g, stdout);
    rc = 0;
    goto done;
  }
  PassOptions popt = {.print_after = o.print_after, .print_to = stdout, .verify = true};
  if (!passes_run(g, &d, &popt)) goto done;

  UpdateRuleGiven given_2bw = update_rule_defaults(&g->train);
  have_input = true; /* plan_input_from_graph initialises pin */
  if (!plan_input_from_graph_bf16(g, o.backend_cuda && o.precision == GEMM_BF16, &pin)) {
    diag_error(&d, (Loc){o.model, 0, 0}, "cannot derive planner input from the model");
    goto done;
  }
  if (o.profile && !plan_profile_load(&pin, o.profile, &d)) goto done;
  /* The target: CUDA programs hold cuda_scratch and run their GEMMs at the chosen
   * precision; the C programs (--backend cpu) are float32 throughout. */
  pin.cuda = o.backend_cuda;
  pin.precision = o.backend_cuda ? o.precision : GEMM_FP32;
  pin.predict_optional = !given_2bw.predict; /* the default gives way where its master copy does not fit */
  plan = plan_create(&pin, &cluster, &o.pins, &d);
  if (!plan) goto done;
  plan = fit_exact(g, &pin, &cluster, plan, o.allow_over, &d);
  if (!plan) goto done;
  if (!plan_check_limits(plan, g, &d)) goto done;

  root = cJSON_CreateObject();
  cJSON_AddNumberToObject(root, "version", PD2BW_PLAN_FORMAT_VERSION);
  cJSON_AddStringToObject(root, "compiler", "pd2bwc " PD2BW_VERSION);
  cJSON_AddItemToObject(root, "model", model_json(g, plan->cfg.microbatch_size));
  UpdateRuleDropped dropped;
  cJSON_AddItemToObject(root, "update_rule", update_rule_json(&g->train, &plan->cfg, given_2bw, &dropped));
  cJSON_AddItemToObject(root, "train", codegen_train_json(&g->train));

  char *tmp = plan_dir_begin(o.out, &d);
  if (!tmp) goto done;
  bool ok = plan_write(plan, tmp, root, &d) &&
            emit_stage_programs(g, plan, tmp, root, o.backend_cuda, o.gemm_epilogues, &d);
  ok = ok && plan_dir_write_json(tmp, "plan.json", root, &d);
  ok = ok && write_report(tmp, &d);
  ok = ok && plan_dir_commit(tmp, o.out, &d);
  if (!ok) {
    plan_dir_abort(tmp);
    free(tmp);
    goto done;
  }
  free(tmp);
  if (!o.quiet) {
    printf("model %s: ", g->name);
    print_count(stdout, graph_param_count(g));
    printf(" parameters, %d blocks\n", g->nblocks);
    printf("forward %.3g GFLOP, backward %.3g GFLOP per microbatch of %lld\n",
           graph_cost(g, 0, g->nfwd_ops, plan->cfg.microbatch_size).flops / 1e9,
           graph_cost(g, g->nfwd_ops, g->nops, plan->cfg.microbatch_size).flops / 1e9, (long long)plan->cfg.microbatch_size);
    plan_print_summary(plan, stdout);
    if (calibrated) printf("cluster: this host as calibrated, %s (docs/calibration.md)\n", calibrated);
    update_rule_print(stdout, plan->cfg.schedule, &g->train, &dropped);
    printf("wrote %s/plan.json (and %s/report.html, the plan as a web page)\n", o.out, o.out);
  }
  rc = 0;

done:
  if (root) cJSON_Delete(root);
  if (plan) plan_destroy(plan);
  if (have_input) plan_input_free(&pin);
  if (g) graph_destroy(g);
  arena_destroy(arena);
  free(o.defines);
  return rc;
}
