/* codegen/cgen_json.c — writing a stage program and describing it for the runtime.
 *
 * The stage's JSON is everything the runtime needs to run stageN.c without the IR:
 * where each parameter lives and how to initialise it (by NAME, so any partition
 * draws the same weights), where each data input goes and which stream feeds it,
 * the block sizes, and the FLOPs the logs turn into GFLOP/s. */
#include "codegen/cgen_internal.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* No fsync: every file goes into pd2bwc's private temporary plan directory, which is
 * renamed into place as a whole (tools/plan_dir.c), like plan.json beside it. An fsync
 * per file cost 2.5 ms each on a busy disk: a second for a 98-stage plan. */
bool cgen_write_file(const char *path, const void *p, size_t n, Diag *d) {
  size_t len = strlen(path) + 32;
  char *tmp = pd_malloc(len);
  snprintf(tmp, len, "%s.tmp.%ld", path, (long)getpid());
  FILE *f = fopen(tmp, "wb");
  bool ok = f != NULL;
  if (ok) {
    ok = fwrite(p, 1, n, f) == n;
    ok = fclose(f) == 0 && ok;
  }
  if (ok) ok = rename(tmp, path) == 0;
  if (!ok) {
    diag_error(d, (Loc){path, 0, 0}, "cannot write: %s", strerror(errno));
    remove(tmp);
  }
  free(tmp);
  return ok;
}

static cJSON *shape_json(const Shape *s, int64_t b) {
  cJSON *a = cJSON_CreateArray();
  for (int i = 0; i < s->rank; i++)
    cJSON_AddItemToArray(a, cJSON_CreateNumber((double)(i == 0 && s->batched ? b : s->dim[i])));
  return a;
}

/* Which data stream feeds an input: the token file gives each window's first T
 * tokens ("tokens") and the same window shifted by one ("targets"). */
static const char *input_stream(const Tensor *t) {
  if (t->dtype == DT_I32 && strcmp(t->name, "tokens") == 0) return "tokens";
  if (t->dtype == DT_I32 && strcmp(t->name, "targets") == 0) return "targets";
  return "other";
}

/* Writes DIR/stageN.c; its name and hash into name[64] and hash[17]. */
static bool write_program(const char *dir, int stage, const char *src, char *name, char *hash, Diag *d) {
  size_t n = strlen(src);
  snprintf(name, 64, "stage%d.c", stage);
  codegen_hash_hex(src, n, hash);
  size_t plen = strlen(dir) + strlen(name) + 2;
  char *path = pd_malloc(plen);
  snprintf(path, plen, "%s/%s", dir, name);
  bool ok = cgen_write_file(path, src, n, d);
  free(path);
  return ok;
}

static void program_json(const Graph *g, const StageLayout *L, const CodegenOptions *o, const char *name,
                         const char *hash, cJSON *j);

bool codegen_c_stage(const Graph *g, const StageLayout *L, int stage, const CodegenOptions *o,
                     const char *dir, cJSON *j, Diag *d) {
  char *src = codegen_c_source(g, L, stage, o);
  char name[64], hash[17];
  bool ok = write_program(dir, stage, src, name, hash, d);
  free(src);
  if (ok) program_json(g, L, o, name, hash, j);
  return ok;
}

/* The stage program's description (codegen/codegen.h), naming the file it runs. */
static void program_json(const Graph *g, const StageLayout *L, const CodegenOptions *o, const char *name,
                         const char *hash, cJSON *j) {
  int rs = o->f64 ? 2 : 1;
  cJSON_AddStringToObject(j, "source", name);
  cJSON_AddStringToObject(j, "hash", hash);
  cJSON_AddNumberToObject(j, "rng_base", codegen_rng_base(L));
  cJSON_AddNumberToObject(j, "abi", PD2BW_STAGE_ABI);
  cJSON_AddNumberToObject(j, "real_bytes", o->f64 ? 8 : 4);
  cJSON_AddNumberToObject(j, "microbatch_size", (double)L->b);
  cJSON_AddStringToObject(j, "first_region", g->regions[L->first_region].name);
  cJSON_AddStringToObject(j, "last_region", g->regions[L->last_region].name);
  cJSON *blocks = cJSON_AddObjectToObject(j, "blocks");
  for (int c = BUF_PARAMS; c < BUF_CLASS_COUNT; c++)
    cJSON_AddNumberToObject(blocks, buf_class_name((BufClass)c), (double)(L->total[c] * rs));
  cJSON *params = cJSON_AddArrayToObject(j, "params");
  for (int k = 0; k < L->nparams; k++) {
    const Param *p = &g->params[L->params[k]];
    const Tensor *t = &g->tensors[p->tensor];
    const TensorPlace *pl = &L->place[p->tensor];
    cJSON *e = cJSON_CreateObject();
    cJSON_AddStringToObject(e, "name", t->name);
    cJSON_AddItemToObject(e, "shape", shape_json(&t->shape, L->b));
    cJSON_AddNumberToObject(e, "numel", (double)shape_numel(&t->shape, L->b));
    cJSON_AddNumberToObject(e, "offset", (double)(pl->offset * rs));
    cJSON_AddNumberToObject(e, "bytes", (double)(pl->bytes * rs));
    cJSON_AddStringToObject(e, "init", init_kind_name(p->init));
    cJSON_AddNumberToObject(e, "std", p->init == INIT_NORMAL ? p->std : 0);
    cJSON_AddBoolToObject(e, "decay", p->decay);
    cJSON_AddBoolToObject(e, "has_grad", t->grad >= 0 && L->place[t->grad].cls == BUF_GRADS);
    cJSON_AddItemToArray(params, e);
  }
  cJSON *inputs = cJSON_AddArrayToObject(j, "inputs");
  for (int t = 0; t < g->ntensors; t++) {
    const TensorPlace *pl = &L->place[t];
    if (pl->cls != BUF_INPUTS) continue;
    const Tensor *x = &g->tensors[t];
    cJSON *e = cJSON_CreateObject();
    cJSON_AddStringToObject(e, "name", x->name);
    cJSON_AddStringToObject(e, "dtype", dtype_name(x->dtype));
    cJSON_AddItemToObject(e, "shape", shape_json(&x->shape, L->b));
    cJSON_AddNumberToObject(e, "offset", (double)(pl->offset * rs));
    cJSON_AddNumberToObject(e, "bytes", (double)(pl->bytes * (x->dtype == DT_I32 ? 1 : rs)));
    cJSON_AddStringToObject(e, "stream", input_stream(x));
    cJSON_AddItemToArray(inputs, e);
  }
  /* The loss reaches the runtime through StageCtx.loss, not through a block. */
  cJSON_AddBoolToObject(j, "loss", L->loss >= 0);
  if (L->loss >= 0) cJSON_AddStringToObject(j, "loss_tensor", g->tensors[L->loss].name);
  double ff = 0, fb = 0;
  for (int k = 0; k < L->nfwd; k++) {
    const Op *op = &g->ops[L->fwd_ops[k]];
    ff += op_info[op->kind].cost(g, op, L->b).flops;
  }
  for (int k = 0; k < L->nbwd; k++) {
    const Op *op = &g->ops[L->bwd_ops[k]];
    fb += op_info[op->kind].cost(g, op, L->b).flops;
  }
  cJSON *fl = cJSON_AddObjectToObject(j, "flops");
  cJSON_AddNumberToObject(fl, "forward", ff);
  cJSON_AddNumberToObject(fl, "backward", fb);
}

cJSON *codegen_train_json(const TrainConfig *t) {
  cJSON *j = cJSON_CreateObject();
  cJSON_AddNumberToObject(j, "batch", (double)t->batch);
  cJSON_AddNumberToObject(j, "microbatch", (double)t->microbatch);
  cJSON_AddStringToObject(j, "optimizer", optimizer_name(t->optimizer));
  cJSON_AddNumberToObject(j, "lr", t->lr);
  cJSON_AddNumberToObject(j, "beta1", t->beta1);
  cJSON_AddNumberToObject(j, "beta2", t->beta2);
  cJSON_AddNumberToObject(j, "eps", t->eps);
  cJSON_AddNumberToObject(j, "weight_decay", t->weight_decay);
  cJSON_AddStringToObject(j, "lr_schedule", lr_schedule_name(t->schedule));
  cJSON_AddNumberToObject(j, "warmup", (double)t->warmup);
  cJSON_AddNumberToObject(j, "steps", (double)t->steps);
  cJSON_AddNumberToObject(j, "min_lr", t->min_lr);
  cJSON_AddNumberToObject(j, "clip", t->clip);
  cJSON_AddNumberToObject(j, "delay_comp", t->delay_comp);
  cJSON_AddNumberToObject(j, "flush_steps", (double)(t->flush_steps > 0 ? t->flush_steps : 0));
  cJSON_AddNumberToObject(j, "predict", t->predict > 0 ? t->predict : 0);
  char seed[32];
  snprintf(seed, sizeof seed, "%llu", (unsigned long long)t->seed);
  cJSON_AddStringToObject(j, "seed", seed);
  /* what pd2bwc's -D train.KEY=VALUE changed (the values above are the ones in
   * force); absent without any, so plans without overrides read as before */
  cJSON *ov = t->overrides && *t->overrides ? cJSON_AddArrayToObject(j, "overrides") : NULL;
  for (const char *p = t->overrides; p && *p;) {
    size_t n = strcspn(p, " ");
    char item[256];
    snprintf(item, sizeof item, "%.*s", (int)n, p);
    cJSON_AddItemToArray(ov, cJSON_CreateString(item));
    p += n + (p[n] == ' ');
  }
  return j;
}

bool codegen_single_stage_plan(const Graph *g, int64_t b, int64_t m, const CodegenOptions *o,
                               const char *dir, Diag *d) {
  if (mkdir(dir, 0777) != 0 && errno != EEXIST) {
    diag_error(d, (Loc){dir, 0, 0}, "cannot create the plan directory: %s", strerror(errno));
    return false;
  }
  StageLayout *L = layout_stage_bf16(g, 0, g->nregions - 1, b, o->bf16);
  cJSON *root = cJSON_CreateObject();
  cJSON_AddNumberToObject(root, "version", 1);
  cJSON_AddStringToObject(root, "compiler", "pd2bw codegen " PD2BW_VERSION);
  cJSON *model = cJSON_AddObjectToObject(root, "model");
  cJSON_AddStringToObject(model, "name", g->name);
  cJSON_AddNumberToObject(model, "parameters", (double)graph_param_count(g));
  cJSON *train = codegen_train_json(&g->train);
  /* gpipe keeps the vanilla rule: 2bw's settings are the pipeline plan's
   * (runtime/reference/pipeline_ref.c gives them to the one-stage reference) */
  cJSON_SetNumberValue(cJSON_GetObjectItemCaseSensitive(train, "delay_comp"), 0);
  cJSON_SetNumberValue(cJSON_GetObjectItemCaseSensitive(train, "flush_steps"), 0);
  cJSON_SetNumberValue(cJSON_GetObjectItemCaseSensitive(train, "predict"), 0);
  cJSON_AddItemToObject(root, "train", train);
  cJSON *cfg = cJSON_AddObjectToObject(root, "config");
  cJSON_AddNumberToObject(cfg, "stages", 1);
  cJSON_AddNumberToObject(cfg, "replicas", 1);
  cJSON_AddNumberToObject(cfg, "microbatch_size", (double)b);
  cJSON_AddNumberToObject(cfg, "microbatches", (double)m);
  cJSON_AddStringToObject(cfg, "schedule", "gpipe");
  cJSON *stages = cJSON_AddArrayToObject(root, "stages");
  cJSON *st = cJSON_CreateObject();
  cJSON_AddItemToArray(stages, st);
  cJSON_AddNumberToObject(st, "index", 0);
  cJSON *prog = cJSON_AddObjectToObject(st, "program");
  bool ok = codegen_c_stage(g, L, 0, o, dir, prog, d) && codegen_manifest_stages(dir, stages, NULL, d);
  if (ok) {
    char *text = cJSON_Print(root);
    size_t plen = strlen(dir) + 16;
    char *path = pd_malloc(plen);
    snprintf(path, plen, "%s/plan.json", dir);
    ok = cgen_write_file(path, text, strlen(text), d);
    free(path);
    free(text);
  }
  cJSON_Delete(root);
  layout_destroy(L);
  return ok;
}

int cgen_sole_consumer(const Graph *g, const StageLayout *L, int t) {
  (void)g;
  int o = L->sole_reader[t];
  return o >= 0 && layout_has_op(L, o) ? o : -1;
}

cJSON *cgen_stage_element(cJSON *stages, int i) {
  cJSON *st = cJSON_GetArrayItem(stages, i);
  if (!st) {
    st = cJSON_CreateObject();
    cJSON_AddNumberToObject(st, "index", i);
    cJSON_AddItemToArray(stages, st);
  }
  return st;
}

char *cgen_code_only(const char *src) {
  size_t n = strlen(src), k = 0;
  char *out = pd_malloc(n + 1);
  for (size_t i = 0; i < n; i++) {
    if (src[i] == '/' && src[i + 1] == '*') {
      const char *end = strstr(src + i + 2, "*/");
      if (!end) break;
      i = (size_t)(end - src) + 1;
      continue;
    }
    out[k++] = src[i];
  }
  out[k] = 0;
  return out;
}

char *cgen_with_sharers(const char *src, const int *owner, int n, int self) {
  Str s = {0};
  const char *nl = strchr(src, '\n');
  str_printf(&s, "%.*s\n * Also the program of stages", (int)(nl - src), src);
  int count = 0;
  for (int i = self + 1; i < n; i++) {
    if (owner[i] != self) continue;
    int j = i;
    while (j + 1 < n && owner[j + 1] == self) j++;
    str_printf(&s, "%s %d", count++ ? "," : "", i);
    if (j > i) str_printf(&s, "-%d", j);
    i = j;
  }
  str_printf(&s, ": the same code (the comments name stage %d's ops and tensors;\n"
                 " * each stage's rng_base and parameter offsets are in plan.json).%s", self, nl);
  return s.p;
}

void cgen_share_owners(char *const *text, int n, int *owner) {
  char (*key)[17] = pd_calloc((size_t)n + 1, sizeof *key);
  for (int i = 0; i < n; i++) {
    codegen_hash_hex(text[i], strlen(text[i]), key[i]);
    owner[i] = i;
    for (int j = 0; j < i && owner[i] == i; j++)
      if (owner[j] == j && strcmp(key[j], key[i]) == 0 && strcmp(text[j], text[i]) == 0) owner[i] = j;
  }
  free(key);
}

/* Every stage's program; stages whose code is the same (the middle blocks of a deep
 * pipeline) share the first one's file: a 98-stage GPT writes 3 programs, not 98. */
bool codegen_c_stages(const Graph *g, const int *first_region, const int *last_region, int nstages,
                      int64_t b, const CodegenOptions *o, const char *dir, cJSON *stages, Diag *d) {
  StageLayout **L = pd_calloc((size_t)nstages, sizeof *L);
  char **src = pd_calloc((size_t)nstages, sizeof *src), **code = pd_calloc((size_t)nstages, sizeof *code);
  int *owner = pd_calloc((size_t)nstages, sizeof *owner);
  for (int i = 0; i < nstages; i++) {
    L[i] = layout_stage_bf16(g, first_region[i], last_region[i], b, o->bf16);
    src[i] = codegen_c_source(g, L[i], i, o);
    code[i] = cgen_code_only(src[i]);
  }
  cgen_share_owners(code, nstages, owner);
  char (*name)[64] = pd_calloc((size_t)nstages, sizeof *name);
  char (*hash)[17] = pd_calloc((size_t)nstages, sizeof *hash);
  bool ok = true;
  for (int i = 0; i < nstages && ok; i++) {
    cJSON *st = cgen_stage_element(stages, i);
    cJSON_DeleteItemFromObjectCaseSensitive(st, "program");
    cJSON *prog = cJSON_AddObjectToObject(st, "program");
    if (owner[i] == i) {
      bool shared = false;
      for (int j = i + 1; j < nstages && !shared; j++) shared = owner[j] == i;
      char *text = shared ? cgen_with_sharers(src[i], owner, nstages, i) : NULL;
      ok = write_program(dir, i, text ? text : src[i], name[i], hash[i], d);
      free(text);
    }
    if (ok) program_json(g, L[i], o, name[owner[i]], hash[owner[i]], prog);
  }
  for (int i = 0; i < nstages; i++) layout_destroy(L[i]), free(src[i]), free(code[i]);
  free(L), free(src), free(code), free(owner), free(name), free(hash);
  return ok;
}
