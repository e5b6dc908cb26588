/* runtime/plan_read.c — plan.json back into structs the trainer can use.
 *
 * plan.json is a file a user can damage or hand us from another version, so every
 * key is checked for presence and type before use, and every message names the file
 * and the key path ("plan/plan.json: stages[0].program.params[3].offset: expected a
 * number"). A stage's program may sit under "program" in its stage object (what
 * pd2bwc and codegen_single_stage_plan write) or be the stage object itself. */
#include "runtime/runtime.h"

#include "runtime/json_read.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

static int shape(JsonRd *r, const cJSON *o, const char *path, int64_t *dims) {
  const cJSON *a = jr_get(r, o, path, "shape");
  if (!a) return 0;
  if (!cJSON_IsArray(a) || cJSON_GetArraySize(a) > IR_MAX_RANK) {
    char b[512];
    snprintf(b, sizeof b, "%s.shape", path);
    jr_fail(r, b, "expected an array of at most 4 sizes");
    return 0;
  }
  int n = 0;
  const cJSON *d;
  cJSON_ArrayForEach(d, a) {
    if (!cJSON_IsNumber(d) || d->valuedouble < 1) {
      char b[512];
      snprintf(b, sizeof b, "%s.shape[%d]", path, n);
      jr_fail(r, b, "expected a positive size");
      return 0;
    }
    dims[n++] = (int64_t)d->valuedouble;
  }
  return n;
}

static void read_train(JsonRd *r, const cJSON *t, TrainConfig *c) {
  const char *p = "train";
  c->batch = jr_count(r, t, p, "batch", 0, false);
  c->microbatch = jr_count(r, t, p, "microbatch", 0, false);
  const char *opt = jr_str(r, t, p, "optimizer", "adamw");
  if (!optimizer_parse(opt, &c->optimizer)) jr_fail(r, "train.optimizer", "expected \"adamw\" or \"sgd\"");
  c->lr = jr_num(r, t, p, "lr", 1e-3, false);
  c->beta1 = jr_num(r, t, p, "beta1", 0.9, false);
  c->beta2 = jr_num(r, t, p, "beta2", 0.999, false);
  c->eps = jr_num(r, t, p, "eps", 1e-8, false);
  c->weight_decay = jr_num(r, t, p, "weight_decay", 0, false);
  const char *s = jr_str(r, t, p, "lr_schedule", "constant");
  if (!lr_schedule_parse(s, &c->schedule))
    jr_fail(r, "train.lr_schedule", "expected \"constant\", \"cosine\" or \"linear\"");
  c->warmup = jr_count(r, t, p, "warmup", 0, false);
  c->steps = jr_count(r, t, p, "steps", 0, false);
  c->min_lr = jr_num(r, t, p, "min_lr", 0, false);
  c->clip = jr_num(r, t, p, "clip", 0, false);
  const cJSON *seed = cJSON_GetObjectItemCaseSensitive(t, "seed");
  if (cJSON_IsString(seed)) {
    char *end;
    c->seed = strtoull(seed->valuestring, &end, 10);
    if (*end) jr_fail(r, "train.seed", "expected a decimal integer string");
  } else if (cJSON_IsNumber(seed)) {
    c->seed = (uint64_t)seed->valuedouble;
  }
}

static void read_stage(JsonRd *r, const cJSON *so, int i, const char *dir, RtStage *s) {
  char path[128];
  const cJSON *prog = cJSON_GetObjectItemCaseSensitive(so, "program");
  snprintf(path, sizeof path, "stages[%d]%s", i, prog ? ".program" : "");
  if (!prog) prog = so;
  const char *src = jr_str(r, prog, path, "source", NULL);
  size_t n = strlen(dir) + strlen(src) + 2;
  s->source = pd_malloc(n);
  snprintf(s->source, n, "%s/%s", dir, src);
  if (strchr(src, '/')) jr_fail(r, path, "source must be a file name inside the plan directory");
  snprintf(s->hash, sizeof s->hash, "%s", jr_str(r, prog, path, "hash", NULL));
  int64_t abi = jr_count(r, prog, path, "abi", 0, true);
  if (!r->failed && abi != PD2BW_STAGE_ABI) {
    char b[256];
    snprintf(b, sizeof b, "stage ABI version %lld, this runtime speaks %d: recompile the plan",
             (long long)abi, PD2BW_STAGE_ABI);
    jr_fail(r, path, b);
  }
  s->real_bytes = (int)jr_count(r, prog, path, "real_bytes", 4, false);
  s->rng_base = (uint32_t)jr_count(r, prog, path, "rng_base", 0, true);
  s->b = jr_count(r, prog, path, "microbatch_size", 0, true);
  const cJSON *blocks = jr_get(r, prog, path, "blocks");
  char bp[160];
  snprintf(bp, sizeof bp, "%s.blocks", path);
  for (int c = BUF_PARAMS; c < BUF_CLASS_COUNT && blocks; c++)
    s->blocks[c] = jr_count(r, blocks, bp, buf_class_name((BufClass)c), 0, true);
  const cJSON *params = jr_get(r, prog, path, "params");
  const cJSON *inputs = jr_get(r, prog, path, "inputs");
  if (r->failed) return;
  if (!cJSON_IsArray(params) || !cJSON_IsArray(inputs)) {
    jr_fail(r, path, "params and inputs must be arrays");
    return;
  }
  s->nparams = cJSON_GetArraySize(params);
  s->params = pd_calloc((size_t)s->nparams + 1, sizeof *s->params);
  int k = 0;
  const cJSON *e;
  cJSON_ArrayForEach(e, params) {
    RtParam *p = &s->params[k];
    char pp[200];
    snprintf(pp, sizeof pp, "%s.params[%d]", path, k++);
    p->name = pd_strdup(jr_str(r, e, pp, "name", NULL));
    p->rank = shape(r, e, pp, p->shape);
    p->numel = jr_count(r, e, pp, "numel", 0, true);
    p->offset = jr_count(r, e, pp, "offset", 0, true);
    p->bytes = jr_count(r, e, pp, "bytes", 0, true);
    const char *init = jr_str(r, e, pp, "init", NULL);
    if (!init_kind_parse(init, &p->init)) jr_fail(r, pp, "init must be zeros, ones or normal");
    p->std = jr_num(r, e, pp, "std", 0, false);
    p->decay = jr_flag(e, "decay");
    p->has_grad = jr_flag(e, "has_grad");
    int64_t ne = 1;
    for (int d = 0; d < p->rank; d++) ne *= p->shape[d];
    if (!r->failed && (ne != p->numel || p->bytes != p->numel * s->real_bytes ||
                       p->offset + p->bytes > s->blocks[BUF_PARAMS]))
      jr_fail(r, pp, "shape, numel, bytes and offset disagree or leave the params block");
  }
  s->ninputs = cJSON_GetArraySize(inputs);
  s->inputs = pd_calloc((size_t)s->ninputs + 1, sizeof *s->inputs);
  k = 0;
  cJSON_ArrayForEach(e, inputs) {
    RtInput *in = &s->inputs[k];
    char pp[200];
    snprintf(pp, sizeof pp, "%s.inputs[%d]", path, k++);
    in->name = pd_strdup(jr_str(r, e, pp, "name", NULL));
    in->dtype = strcmp(jr_str(r, e, pp, "dtype", NULL), "i32") == 0 ? DT_I32 : DT_F32;
    in->rank = shape(r, e, pp, in->shape);
    in->offset = jr_count(r, e, pp, "offset", 0, true);
    in->bytes = jr_count(r, e, pp, "bytes", 0, true);
    const char *st = jr_str(r, e, pp, "stream", "other");
    in->stream = strcmp(st, "tokens") == 0 ? STREAM_TOKENS : strcmp(st, "targets") == 0 ? STREAM_TARGETS : STREAM_OTHER;
    if (!r->failed && in->offset + in->bytes > s->blocks[BUF_INPUTS]) jr_fail(r, pp, "leaves the inputs block");
  }
  s->has_loss = jr_flag(prog, "loss");
  const cJSON *fl = cJSON_GetObjectItemCaseSensitive(prog, "flops");
  if (fl) {
    s->flops_fwd = jr_num(r, fl, path, "forward", 0, false);
    s->flops_bwd = jr_num(r, fl, path, "backward", 0, false);
  }
}

RtPlan *rt_plan_load(const char *dir, char *err, size_t errlen) {
  size_t n = strlen(dir) + 16;
  char *file = pd_malloc(n);
  snprintf(file, n, "%s/plan.json", dir);
  char ierr[IO_ERR_LEN];
  size_t len;
  char *text = io_read_all(file, &len, ierr, sizeof ierr);
  if (!text) {
    snprintf(err, errlen, "%s (is %s a plan directory made by pd2bwc?)", ierr, dir);
    free(file);
    return NULL;
  }
  cJSON *root = cJSON_ParseWithLength(text, len);
  if (!root || !cJSON_IsObject(root)) {
    const char *at = cJSON_GetErrorPtr();
    snprintf(err, errlen, "%s: not valid JSON (near byte %ld)", file,
             at && at >= text && at <= text + len ? (long)(at - text) : 0L);
    cJSON_Delete(root);
    free(text);
    free(file);
    return NULL;
  }
  JsonRd r = {.file = file, .err = err, .errlen = errlen};
  RtPlan *p = pd_calloc(1, sizeof *p);
  p->dir = pd_strdup(dir);
  int64_t version = jr_count(&r, root, "", "version", 0, true);
  if (!r.failed && version != 1) jr_fail(&r, "version", "unsupported plan format version (this runtime reads 1)");
  const cJSON *model = cJSON_GetObjectItemCaseSensitive(root, "model");
  p->model = pd_strdup(model ? jr_str(&r, model, "model", "name", "?") : "?");
  const cJSON *train = jr_get(&r, root, "", "train");
  if (train) read_train(&r, train, &p->train);
  const cJSON *cfg = jr_get(&r, root, "", "config");
  if (cfg) {
    p->b = jr_count(&r, cfg, "config", "microbatch_size", 0, true);
    p->m = jr_count(&r, cfg, "config", "microbatches", 0, false);
    int64_t w = jr_count(&r, cfg, "config", "replicas", 1, false);
    snprintf(p->schedule, sizeof p->schedule, "%s", jr_str(&r, cfg, "config", "schedule", "gpipe"));
    if (!r.failed && strcmp(p->schedule, "gpipe") && strcmp(p->schedule, "1f1b") && strcmp(p->schedule, "2bw") &&
        strcmp(p->schedule, "pipedream"))
      jr_fail(&r, "config.schedule", "expected gpipe, 1f1b, 2bw or pipedream");
    p->delayed = strcmp(p->schedule, "2bw") == 0;
    if (!r.failed && p->m == 0 && p->b > 0) p->m = p->train.batch / (p->b * (w ? w : 1));
    if (!r.failed && (p->b < 1 || p->m < 1)) jr_fail(&r, "config", "microbatch_size and microbatches must be >= 1");
  }
  const cJSON *stages = jr_get(&r, root, "", "stages");
  if (!r.failed && (!cJSON_IsArray(stages) || cJSON_GetArraySize(stages) < 1))
    jr_fail(&r, "stages", "expected a non-empty array");
  if (!r.failed) {
    p->nstages = cJSON_GetArraySize(stages);
    p->stages = pd_calloc((size_t)p->nstages, sizeof *p->stages);
    int i = 0;
    const cJSON *s;
    cJSON_ArrayForEach(s, stages) {
      read_stage(&r, s, i, dir, &p->stages[i]);
      i++;
    }
  }
  /* Every stage file must be there and be the one the plan describes. */
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
    free(src);
    if (strcmp(h, s->hash) != 0) {
      snprintf(err, errlen, "%s: content hash %s differs from %s recorded in %s (edited or corrupt)",
               s->source, h, s->hash, file);
      r.failed = true;
    }
  }
  cJSON_Delete(root);
  free(text);
  free(file);
  if (r.failed) {
    rt_plan_free(p);
    return NULL;
  }
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
  free(p);
}
