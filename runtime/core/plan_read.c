/* runtime/core/plan_read.c — plan.json back into structs the trainer can use.
 *
 * plan.json is a file a user can damage or hand us from another version, so every
 * key is checked for presence and type before use, and every message names the file
 * and the key path ("plan/plan.json: stages[0].program.params[3].offset: expected a
 * number"). A stage's program may sit under "program" in its stage object (what
 * pd2bwc and codegen_single_stage_plan write) or be the stage object itself. */
#include "runtime/core/runtime.h"

#include "runtime/core/json_read.h"
#include "runtime/core/plan_manifest.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Limits of the configuration (docs/plan-format.md, "What the runtime checks"):
 * far above any real plan, low enough that no product of them overflows or asks for
 * an allocation nobody meant. */
#define RT_MAX_STAGES 16384
#define RT_MAX_RANKS 65536
#define RT_MAX_MICROBATCHES (1 << 20)
#define RT_MAX_BATCH PLAN_MAX_BATCH /* contract/plan_limits.h: pd2bwc's range too */
#define RT_MAX_BYTES ((int64_t)1 << 48) /* 256 TiB: any block, arena or tensor */
#define RT_MAX_DIM ((int64_t)1 << 40)

static int shape(JsonRd *r, const cJSON *o, const char *path, int64_t *dims) {
  const cJSON *a = jr_get(r, o, path, "shape");
  if (!a) return 0;
  if (!cJSON_IsArray(a) || cJSON_GetArraySize(a) > IR_MAX_RANK) {
    jr_fail_value(r, path, "shape", a, "expected an array of at most 4 sizes");
    return 0;
  }
  int n = 0;
  const cJSON *d;
  cJSON_ArrayForEach(d, a) {
    if (!cJSON_IsNumber(d) || d->valuedouble < 1 || d->valuedouble > (double)RT_MAX_DIM ||
        d->valuedouble != (double)(int64_t)d->valuedouble) {
      char p[530];
      snprintf(p, sizeof p, "%s.shape[%d]", path, n);
      jr_fail_value(r, p, "", d, "must be an integer 1..1099511627776");
      return 0;
    }
    dims[n++] = (int64_t)d->valuedouble;
  }
  return n;
}

static void read_train(JsonRd *r, const cJSON *t, TrainConfig *c) {
  const char *p = "train";
  /* 0 for both: the model gave none (what codegen_train_json writes then) */
  c->batch = jr_int(r, t, p, "batch", 0, RT_MAX_BATCH, 0, false);
  c->microbatch = jr_int(r, t, p, "microbatch", 0, RT_MAX_BATCH, 0, false);
  const char *opt = jr_str(r, t, p, "optimizer", "adamw");
  if (!optimizer_parse(opt, &c->optimizer))
    jr_fail_value(r, p, "optimizer", cJSON_GetObjectItemCaseSensitive(t, "optimizer"), "expected \"adamw\" or \"sgd\"");
  /* the frontend's ranges (frontend/train.c), so every plan it writes is accepted;
   * lr 0 too, which a graph built without the frontend carries (graph_create) */
  c->lr = jr_real(r, t, p, "lr", 0, false, INFINITY, false, 1e-3, false);
  c->beta1 = jr_real(r, t, p, "beta1", 0, false, 1, false, 0.9, false);
  c->beta2 = jr_real(r, t, p, "beta2", 0, false, 1, false, 0.999, false);
  c->eps = jr_real(r, t, p, "eps", 0, true, INFINITY, false, 1e-8, false);
  c->weight_decay = jr_real(r, t, p, "weight_decay", 0, false, INFINITY, false, 0, false);
  const char *s = jr_str(r, t, p, "lr_schedule", "constant");
  if (!lr_schedule_parse(s, &c->schedule))
    jr_fail_value(r, p, "lr_schedule", cJSON_GetObjectItemCaseSensitive(t, "lr_schedule"),
                  "expected \"constant\", \"cosine\" or \"linear\"");
  c->warmup = jr_count(r, t, p, "warmup", 0, false);
  c->steps = jr_count(r, t, p, "steps", 0, false); /* 0: the run's --steps */
  c->min_lr = jr_real(r, t, p, "min_lr", 0, false, INFINITY, false, 0, false);
  c->clip = jr_real(r, t, p, "clip", 0, false, INFINITY, false, 0, false);
  c->delay_comp = jr_real(r, t, p, "delay_comp", 0, false, INFINITY, false, 0, false);
  if (!r->failed && c->delay_comp > 0 && c->optimizer != OPT_ADAMW)
    jr_fail_value(r, p, "delay_comp", cJSON_GetObjectItemCaseSensitive(t, "delay_comp"),
                  "must be 0: it is a setting of adamw, and the optimizer is sgd");
  c->flush_steps = jr_count(r, t, p, "flush_steps", 0, false);
  c->predict = jr_real(r, t, p, "predict", 0, false, 10, true, 0, false);
  const cJSON *seed = cJSON_GetObjectItemCaseSensitive(t, "seed");
  if (cJSON_IsString(seed)) {
    const char *v = seed->valuestring;
    bool digits = *v != '\0';
    for (const char *q = v; *q && digits; q++) digits = *q >= '0' && *q <= '9';
    errno = 0;
    c->seed = digits ? strtoull(v, NULL, 10) : 0;
    if (!digits || errno == ERANGE) jr_fail_value(r, p, "seed", seed, "must be a decimal integer 0..18446744073709551615");
  } else if (seed) {
    c->seed = (uint64_t)jr_count(r, t, p, "seed", 0, false);
  }
}

static void read_params(JsonRd *r, const cJSON *params, const char *path, RtStage *s) {
  s->nparams = cJSON_GetArraySize(params);
  s->params = pd_calloc((size_t)s->nparams + 1, sizeof *s->params);
  int k = 0;
  const cJSON *e;
  cJSON_ArrayForEach(e, params) {
    RtParam *p = &s->params[k];
    char pp[200];
    snprintf(pp, sizeof pp, "%s.params[%d]", path, k++);
    p->name = pd_strdup(jr_str(r, e, pp, "name", NULL));
    if (!r->failed && !p->name[0]) jr_fail(r, pp, "name: must not be empty");
    p->rank = shape(r, e, pp, p->shape);
    p->numel = jr_int(r, e, pp, "numel", 1, RT_MAX_BYTES, 0, true);
    p->offset = jr_int(r, e, pp, "offset", 0, RT_MAX_BYTES, 0, true);
    p->bytes = jr_int(r, e, pp, "bytes", 1, RT_MAX_BYTES, 0, true);
    const char *init = jr_str(r, e, pp, "init", NULL);
    if (!r->failed && !init_kind_parse(init, &p->init))
      jr_fail_value(r, pp, "init", cJSON_GetObjectItemCaseSensitive(e, "init"), "expected zeros, ones or normal");
    p->std = jr_real(r, e, pp, "std", 0, false, INFINITY, false, 0, false);
    p->decay = jr_bool(r, e, pp, "decay");
    p->has_grad = jr_bool(r, e, pp, "has_grad");
    int64_t ne = 1;
    for (int d = 0; d < p->rank; d++) ne = ne > RT_MAX_BYTES / p->shape[d] ? RT_MAX_BYTES + 1 : ne * p->shape[d];
    if (!r->failed && (ne != p->numel || p->bytes != p->numel * s->real_bytes ||
                       p->offset + p->bytes > s->blocks[BUF_PARAMS]))
      jr_fail(r, pp, "shape, numel, bytes and offset disagree or leave the params block");
  }
  /* byte ranges [offset, offset + bytes), each bytes >= 1 once read: the first two that overlap */
  for (int i = 0; i < s->nparams && !r->failed; i++)
    for (int j = 0; j < i && !r->failed; j++) {
      const RtParam *a = &s->params[i], *o = &s->params[j];
      if (a->offset >= o->offset + o->bytes || o->offset >= a->offset + a->bytes) continue;
      char pp[200], b[600];
      snprintf(pp, sizeof pp, "%s.params[%d]", path, i);
      snprintf(b, sizeof b, "\"%s\" at bytes %lld..%lld overlaps params[%d] \"%s\" at %lld..%lld", a->name,
               (long long)a->offset, (long long)(a->offset + a->bytes), j, o->name, (long long)o->offset,
               (long long)(o->offset + o->bytes));
      jr_fail(r, pp, b);
    }
}

static void read_inputs(JsonRd *r, const cJSON *inputs, const char *path, RtStage *s) {
  s->ninputs = cJSON_GetArraySize(inputs);
  s->inputs = pd_calloc((size_t)s->ninputs + 1, sizeof *s->inputs);
  int k = 0;
  const cJSON *e;
  cJSON_ArrayForEach(e, inputs) {
    RtInput *in = &s->inputs[k];
    char pp[200];
    snprintf(pp, sizeof pp, "%s.inputs[%d]", path, k++);
    in->name = pd_strdup(jr_str(r, e, pp, "name", NULL));
    const char *dt = jr_str(r, e, pp, "dtype", NULL);
    if (!r->failed && strcmp(dt, "i32") && strcmp(dt, "f32"))
      jr_fail_value(r, pp, "dtype", cJSON_GetObjectItemCaseSensitive(e, "dtype"), "expected \"i32\" or \"f32\"");
    in->dtype = strcmp(dt, "i32") == 0 ? DT_I32 : DT_F32;
    in->rank = shape(r, e, pp, in->shape);
    in->offset = jr_int(r, e, pp, "offset", 0, RT_MAX_BYTES, 0, true);
    in->bytes = jr_int(r, e, pp, "bytes", 0, RT_MAX_BYTES, 0, true);
    const char *st = jr_str(r, e, pp, "stream", "other");
    in->stream = strcmp(st, "tokens") == 0 ? STREAM_TOKENS : strcmp(st, "targets") == 0 ? STREAM_TARGETS : STREAM_OTHER;
    if (!r->failed && in->stream == STREAM_OTHER && strcmp(st, "other"))
      jr_fail_value(r, pp, "stream", cJSON_GetObjectItemCaseSensitive(e, "stream"),
                    "expected \"tokens\", \"targets\" or \"other\"");
    if (!r->failed && in->offset + in->bytes > s->blocks[BUF_INPUTS]) jr_fail(r, pp, "leaves the inputs block");
  }
}

static void read_stage(JsonRd *r, const cJSON *so, int i, const char *dir, int64_t b, RtStage *s) {
  char path[128];
  const cJSON *prog = cJSON_GetObjectItemCaseSensitive(so, "program");
  snprintf(path, sizeof path, "stages[%d]%s", i, prog ? ".program" : "");
  if (!prog) prog = so;
  const char *src = jr_str(r, prog, path, "source", NULL);
  s->source = io_join(dir, src);
  if (!r->failed && (!src[0] || strchr(src, '/') || strcmp(src, ".") == 0 || strcmp(src, "..") == 0))
    jr_fail_value(r, path, "source", cJSON_GetObjectItemCaseSensitive(prog, "source"),
                  "must be a file name inside the plan directory");
  const char *hash = jr_str(r, prog, path, "hash", NULL);
  if (!r->failed && (strlen(hash) != 16 || strspn(hash, "0123456789abcdef") != 16))
    jr_fail_value(r, path, "hash", cJSON_GetObjectItemCaseSensitive(prog, "hash"), "expected 16 hex digits");
  snprintf(s->hash, sizeof s->hash, "%s", hash);
  int64_t abi = jr_count(r, prog, path, "abi", 0, true);
  if (!r->failed && abi != PD2BW_STAGE_ABI) {
    char m[256];
    snprintf(m, sizeof m, "stage ABI version %lld, this runtime speaks %d: recompile the plan", (long long)abi,
             PD2BW_STAGE_ABI);
    jr_fail(r, path, m);
  }
  s->real_bytes = (int)jr_int(r, prog, path, "real_bytes", 0, 8, 4, false);
  if (!r->failed && s->real_bytes != 4 && s->real_bytes != 8)
    jr_fail_value(r, path, "real_bytes", cJSON_GetObjectItemCaseSensitive(prog, "real_bytes"), "must be 4 or 8");
  s->rng_base = (uint32_t)jr_int(r, prog, path, "rng_base", 0, 4294967295LL, 0, true);
  s->b = jr_int(r, prog, path, "microbatch_size", 1, RT_MAX_MICROBATCHES, 0, true);
  if (!r->failed && s->b != b) {
    char m[128];
    snprintf(m, sizeof m, "must equal config.microbatch_size (%lld)", (long long)b);
    jr_fail_value(r, path, "microbatch_size", cJSON_GetObjectItemCaseSensitive(prog, "microbatch_size"), m);
  }
  const cJSON *blocks = jr_get(r, prog, path, "blocks");
  char bp[160];
  snprintf(bp, sizeof bp, "%s.blocks", path);
  for (int c = BUF_PARAMS; c < BUF_CLASS_COUNT && blocks; c++)
    s->blocks[c] = jr_int(r, blocks, bp, buf_class_name((BufClass)c), 0, RT_MAX_BYTES, 0, true);
  const cJSON *params = jr_get(r, prog, path, "params");
  const cJSON *inputs = jr_get(r, prog, path, "inputs");
  if (r->failed) return;
  if (!cJSON_IsArray(params) || !cJSON_IsArray(inputs)) {
    jr_fail(r, path, "params and inputs must be arrays");
    return;
  }
  read_params(r, params, path, s);
  read_inputs(r, inputs, path, s);
  s->has_loss = jr_bool(r, prog, path, "loss");
  const cJSON *cuda = cJSON_GetObjectItemCaseSensitive(prog, "cuda");
  if (cuda) {
    char cp[160];
    snprintf(cp, sizeof cp, "%s.cuda", path);
    s->att_head_size = (int)jr_int(r, cuda, cp, "att_head_size", 0, 65536, 0, false);
  }
  const cJSON *fl = cJSON_GetObjectItemCaseSensitive(prog, "flops");
  if (fl) {
    char fp[160];
    snprintf(fp, sizeof fp, "%s.flops", path);
    s->flops_fwd = jr_real(r, fl, fp, "forward", 0, false, INFINITY, false, 0, false);
    s->flops_bwd = jr_real(r, fl, fp, "backward", 0, false, INFINITY, false, 0, false);
  }
}

static void read_config(JsonRd *r, const cJSON *cfg, RtPlan *p) {
  p->b = jr_int(r, cfg, "config", "microbatch_size", 1, RT_MAX_MICROBATCHES, 0, true);
  p->m = jr_int(r, cfg, "config", "microbatches", 1, RT_MAX_MICROBATCHES, 0, false);
  int64_t w = jr_int(r, cfg, "config", "replicas", 1, RT_MAX_RANKS, 1, false);
  int64_t d = jr_int(r, cfg, "config", "stages", 1, RT_MAX_STAGES, 1, false);
  if (!r->failed && d * w > RT_MAX_RANKS) {
    char m[128];
    snprintf(m, sizeof m, "stages x replicas = %lld ranks: must be at most %d", (long long)(d * w), RT_MAX_RANKS);
    jr_fail(r, "config", m);
  }
  jr_bool(r, cfg, "config", "recompute");
  snprintf(p->schedule, sizeof p->schedule, "%s", jr_str(r, cfg, "config", "schedule", "gpipe"));
  if (!r->failed && strcmp(p->schedule, "gpipe") && strcmp(p->schedule, "1f1b") && strcmp(p->schedule, "2bw") &&
      strcmp(p->schedule, "pipedream"))
    jr_fail_value(r, "config", "schedule", cJSON_GetObjectItemCaseSensitive(cfg, "schedule"),
                  "expected gpipe, 1f1b, 2bw or pipedream");
  p->delayed = strcmp(p->schedule, "2bw") == 0;
  /* the compensation reads W(t-1) where 2bw's update writes W(t+1); no other rule has it there */
  if (!r->failed && p->train.delay_comp > 0 && !p->delayed)
    jr_fail(r, "train.delay_comp", "must be 0 unless config.schedule is 2bw (the only update rule it compensates)");
  if (!r->failed && (p->train.flush_steps > 0 || p->train.predict > 0) && !p->delayed)
    jr_fail(r, p->train.flush_steps > 0 ? "train.flush_steps" : "train.predict",
            "must be 0 unless config.schedule is 2bw (a setting of its update rule)");
  /* no "microbatches": what the batch leaves (older plans) */
  if (!r->failed && !cJSON_GetObjectItemCaseSensitive(cfg, "microbatches")) {
    p->m = p->train.batch / (p->b * w);
    if (p->m < 1 || p->m > RT_MAX_MICROBATCHES)
      jr_fail(r, "config.microbatches", "missing, and train.batch / (microbatch_size x replicas) is not 1..1048576");
  }
  /* train.batch is the model's; a plan may run another (codegen_single_stage_plan
   * takes any b and m), so it is not checked against b·m·w */
}

RtPlan *rt_plan_load(const char *dir, char *err, size_t errlen) { return rt_plan_load_json(dir, NULL, err, errlen); }

RtPlan *rt_plan_load_json(const char *dir, struct cJSON **json, char *err, size_t errlen) {
  if (json) *json = NULL;
  char *file = io_join(dir, "plan.json");
  char ierr[IO_ERR_LEN];
  size_t len;
  char *text = io_read_all(file, &len, ierr, sizeof ierr);
  if (!text) {
    snprintf(err, errlen, "%s (is %s a plan directory made by pd2bwc?)", ierr, dir);
    free(file);
    return NULL;
  }
  JsonRd r = {.file = file, .err = err, .errlen = errlen};
  cJSON *root = jr_parse(&r, text, len);
  if (root && !cJSON_IsObject(root)) jr_fail(&r, "(the top level)", "expected an object");
  jr_check_strings(&r, root);
  if (r.failed) {
    cJSON_Delete(root);
    free(text);
    free(file);
    return NULL;
  }
  RtPlan *p = pd_calloc(1, sizeof *p);
  p->dir = pd_strdup(dir);
  int64_t version = jr_count(&r, root, "", "version", 0, true);
  if (!r.failed && version != 1) jr_fail(&r, "version", "unsupported plan format version (this runtime reads 1)");
  const cJSON *model = cJSON_GetObjectItemCaseSensitive(root, "model");
  p->model = pd_strdup(model ? jr_str(&r, model, "model", "name", "?") : "?");
  const cJSON *consts = cJSON_GetObjectItemCaseSensitive(model, "consts");
  if (cJSON_IsObject(consts)) {
    char *c = cJSON_PrintUnformatted(consts);
    p->model_consts = pd_strdup(c);
    cJSON_free(c);
  } else {
    p->model_consts = pd_strdup("{}");
  }
  /* the MFU's denominator (runtime/core/console.c); optional: older plans lack it */
  p->peak_flops = jr_real(&r, root, "", "peak_flops", 0, false, INFINITY, false, 0, false);
  const cJSON *train = jr_get(&r, root, "", "train");
  if (train) read_train(&r, train, &p->train);
  const cJSON *cfg = jr_get(&r, root, "", "config");
  if (cfg) read_config(&r, cfg, p);
  const cJSON *stages = jr_get(&r, root, "", "stages");
  if (!r.failed && (!cJSON_IsArray(stages) || cJSON_GetArraySize(stages) < 1 ||
                    cJSON_GetArraySize(stages) > RT_MAX_STAGES))
    jr_fail(&r, "stages", "expected an array of 1..16384 stages");
  if (!r.failed) {
    p->nstages = cJSON_GetArraySize(stages);
    p->stages = pd_calloc((size_t)p->nstages, sizeof *p->stages);
    int i = 0;
    const cJSON *s;
    cJSON_ArrayForEach(s, stages) {
      read_stage(&r, s, i, dir, p->b, &p->stages[i]);
      i++;
    }
  }
  /* Every stage file must be there and be the one the plan describes. */
  RtManifestCache mc = {0};
  for (int i = 0; i < p->nstages && !r.failed; i++) {
    RtStage *s = &p->stages[i];
    char *src = io_read_all(s->source, &len, ierr, sizeof ierr);
    if (!src) {
      snprintf(err, errlen, "%s (the plan's stage %d program is missing: recompile the plan)", ierr, i);
      r.failed = true;
      break;
    }
    char h[17];
    codegen_hash_hex(src, len, h);
    if (strcmp(h, s->hash) != 0) {
      snprintf(err, errlen, "%s: content hash %s differs from %s recorded in %s (edited or corrupt)",
               s->source, h, s->hash, file);
      r.failed = true;
    }
    rt_manifest_check(&r, &mc, src, len, h, strrchr(s->source, '/') + 1, i, cJSON_GetArrayItem(stages, i),
                      cJSON_GetObjectItemCaseSensitive(root, "tied")); /* the program's word over plan.json's */
    free(src);
  }
  rt_manifest_cache_free(&mc);
  free(text);
  free(file);
  if (r.failed) {
    rt_plan_free(p);
    p = NULL;
  }
  if (p && json) *json = root;
  else cJSON_Delete(root);
  return p;
}

void rt_plan_free(RtPlan *p) {
  if (!p) return;
  for (int i = 0; i < p->nstages; i++) {
    RtStage *s = &p->stages[i];
    for (int k = 0; k < s->nparams; k++) free(s->params[k].name);
    for (int k = 0; k < s->ninputs; k++) free(s->inputs[k].name);
    free(s->params);
    free(s->inputs);
    free(s->source);
  }
  free(p->stages);
  free(p->dir);
  free(p->model);
  free(p->model_consts);
  free(p);
}
