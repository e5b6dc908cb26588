/* runtime/io/ckpt_llama.c — pd2bw's Llama parameters (models/llama.model) from a
 * Hugging Face LlamaForCausalLM directory: config.json and model.safetensors, or
 * the shards model-0000N-of-0000M.safetensors that model.safetensors.index.json's
 * weight_map names.
 *
 * One table maps each pd2bw name to the Hugging Face tensor, as ckpt_import.c's does
 * for GPT-2; Linear weights ([out, in] there, [in, out] here) are read transposed.
 * Invariant: config.json is checked against the parameters before any tensor is
 * read — every shape it implies, and heads, kv_heads, rope_theta, rms_norm_eps and
 * tie_word_embeddings against the model's consts when the caller passes them — each mismatch naming both
 * values; what pd2bw's Llama cannot compute (rope_scaling, biases, another
 * activation) is refused naming the key.
 */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "runtime/io/ckpt_internal.h"

static const CkptLlamaKind kinds[CKPT_LLAMA_KINDS] = {
    {"embed", "model.embed_tokens.weight", false, false},
    {"attn_norm", "input_layernorm.weight", true, false},
    {"wq", "self_attn.q_proj.weight", true, true},
    {"wk", "self_attn.k_proj.weight", true, true},
    {"wv", "self_attn.v_proj.weight", true, true},
    {"wo", "self_attn.o_proj.weight", true, true},
    {"mlp_norm", "post_attention_layernorm.weight", true, false},
    {"w_gate", "mlp.gate_proj.weight", true, true},
    {"w_up", "mlp.up_proj.weight", true, true},
    {"w_down", "mlp.down_proj.weight", true, true},
    {"norm", "model.norm.weight", false, false},
    {"head", "lm_head.weight", false, false},
};
enum { K_EMBED = 0, K_HEAD = CKPT_LLAMA_KINDS - 1 };

CkptLlamaKind ckpt_llama_kind(int k) {
  PD_CHECK(k >= 0 && k < CKPT_LLAMA_KINDS);
  return kinds[k];
}

void ckpt_llama_hf_name(int k, int layer, char *buf, size_t n) {
  if (kinds[k].per_layer)
    snprintf(buf, n, "model.layers.%d.%s", layer, kinds[k].hf);
  else
    snprintf(buf, n, "%s", kinds[k].hf);
}

bool ckpt_llama_name(const char *name, int *kind, int *layer) {
  const char *suffix = ckpt_layer_suffix(name, layer);
  for (int k = 0; suffix && k < CKPT_LLAMA_KINDS; k++)
    if (strcmp(kinds[k].pd, suffix) == 0 && kinds[k].per_layer == (*layer >= 0)) {
      *kind = k;
      return true;
    }
  return false;
}

/* ---- the directory: config.json and its safetensors files ------------------------ */
typedef struct HfDir {
  const char *dir;
  const char *cfg_path; /* config.json, read and parsed by ckpt_import.c's import_dir */
  const cJSON *cfg;
  SafeTensors **st;
  int nst;
  cJSON *index; /* model.safetensors.index.json, or NULL */
  char *index_path;
} HfDir;

static void hf_close(HfDir *d) {
  for (int i = 0; i < d->nst; i++) st_close(d->st[i]);
  free(d->st);
  cJSON_Delete(d->index);
  free(d->index_path);
}

static bool hf_open(HfDir *d, const char *dir, char *err, size_t errlen) {
  d->index_path = io_join(dir, "model.safetensors.index.json");
  struct stat sb;
  if (stat(d->index_path, &sb) != 0) { /* no index: one model.safetensors */
    char *p = io_join(dir, "model.safetensors");
    d->st = pd_calloc(1, sizeof *d->st);
    d->st[0] = st_open(p, err, errlen);
    free(p);
    if (!d->st[0]) return false;
    d->nst = 1;
    return true;
  }
  if (!(d->index = io_read_json_object(d->index_path, "", err, errlen))) return false;
  const cJSON *map = cJSON_GetObjectItemCaseSensitive(d->index, "weight_map");
  if (!cJSON_IsObject(map) || !cJSON_GetArraySize(map)) {
    snprintf(err, errlen, "%s: weight_map: expected an object {\"tensor\": \"file\", ...}", d->index_path);
    return false;
  }
  d->st = pd_calloc((size_t)cJSON_GetArraySize(map), sizeof *d->st);
  const cJSON *e;
  cJSON_ArrayForEach(e, map) {
    if (!cJSON_IsString(e) || !e->valuestring[0] || strchr(e->valuestring, '/')) {
      snprintf(err, errlen, "%s: weight_map: \"%s\": expected a file name in the directory", d->index_path,
               e->string);
      return false;
    }
    bool seen = false;
    for (int i = 0; i < d->nst && !seen; i++) {
      const char *p = st_path(d->st[i]);
      seen = strcmp(p + strlen(p) - strlen(e->valuestring), e->valuestring) == 0 &&
             p[strlen(p) - strlen(e->valuestring) - 1] == '/';
    }
    if (seen) continue;
    char *p = io_join(dir, e->valuestring);
    d->st[d->nst] = st_open(p, err, errlen);
    free(p);
    if (!d->st[d->nst]) return false;
    d->nst++;
  }
  return true;
}

/* The tensor `name` in whichever file holds it (the index's, when there is one). */
static const StTensor *hf_find(const HfDir *d, const char *name, const SafeTensors **in) {
  for (int i = 0; i < d->nst; i++) {
    const StTensor *t = st_find(d->st[i], name);
    if (t) {
      *in = d->st[i];
      return t;
    }
  }
  return NULL;
}

/* ---- config.json ------------------------------------------------------------------ */
typedef struct Cfg {
  int64_t dim, ffn, layers, heads, kv_heads, head_dim, vocab;
  bool tied;
} Cfg;

/* cfg[key], a positive integer; dflt < 0: required. */
static bool cfg_int(const HfDir *d, const char *key, int64_t dflt, int64_t *out, char *err, size_t errlen) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(d->cfg, key);
  if (!v || cJSON_IsNull(v)) {
    if (dflt < 0) {
      snprintf(err, errlen, "%s: %s: missing", d->cfg_path, key);
      return false;
    }
    *out = dflt;
    return true;
  }
  if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble) || v->valuedouble < 1 ||
      v->valuedouble > 1e12) {
    snprintf(err, errlen, "%s: %s: expected a positive integer", d->cfg_path, key);
    return false;
  }
  *out = (int64_t)v->valuedouble;
  return true;
}

/* What pd2bw's Llama computes; anything else is refused naming the key. */
static bool cfg_supported(const HfDir *d, char *err, size_t errlen) {
  const cJSON *c = d->cfg;
  const cJSON *mt = cJSON_GetObjectItemCaseSensitive(c, "model_type");
  if (!cJSON_IsString(mt) || strcmp(mt->valuestring, "llama") != 0) {
    snprintf(err, errlen, "%s: model_type: %s%s%s is not a Llama model (\"llama\")", d->cfg_path,
             cJSON_IsString(mt) ? "\"" : "", cJSON_IsString(mt) ? mt->valuestring : "missing",
             cJSON_IsString(mt) ? "\"" : "");
    return false;
  }
  /* transformers 4 writes rope_theta and rope_scaling (null: plain rotary); 5 writes
   * rope_parameters {"rope_type": "default", "rope_theta": ...} */
  static const char *const rope_keys[] = {"rope_scaling", "rope_parameters"};
  for (int i = 0; i < 2; i++) {
    const cJSON *rs = cJSON_GetObjectItemCaseSensitive(c, rope_keys[i]);
    if (!rs || cJSON_IsNull(rs)) continue;
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(rs, "rope_type");
    if (!cJSON_IsString(t)) t = cJSON_GetObjectItemCaseSensitive(rs, "type");
    if (i == 1 && cJSON_IsString(t) && strcmp(t->valuestring, "default") == 0) continue;
    snprintf(err, errlen,
             "%s: %s: \"%s\" rope scaling is not supported (pd2bw's rope is plain rotary with rope_theta: "
             "rope_scaling null, or rope_parameters' rope_type \"default\")",
             d->cfg_path, rope_keys[i], cJSON_IsString(t) ? t->valuestring : "an untyped");
    return false;
  }
  const cJSON *act = cJSON_GetObjectItemCaseSensitive(c, "hidden_act");
  if (act && !(cJSON_IsString(act) && strcmp(act->valuestring, "silu") == 0)) {
    snprintf(err, errlen, "%s: hidden_act: \"%s\" is not supported (pd2bw's Llama MLP is SwiGLU, \"silu\")",
             d->cfg_path, cJSON_IsString(act) ? act->valuestring : "?");
    return false;
  }
  static const char *const biases[] = {"attention_bias", "mlp_bias"};
  for (int i = 0; i < 2; i++) {
    const cJSON *b = cJSON_GetObjectItemCaseSensitive(c, biases[i]);
    if (cJSON_IsTrue(b)) {
      snprintf(err, errlen, "%s: %s: true is not supported (pd2bw's Llama has no biases)", d->cfg_path, biases[i]);
      return false;
    }
  }
  return true;
}

static bool read_cfg(const HfDir *d, Cfg *c, char *err, size_t errlen) {
  if (!cfg_supported(d, err, errlen)) return false;
  if (!cfg_int(d, "hidden_size", -1, &c->dim, err, errlen) ||
      !cfg_int(d, "intermediate_size", -1, &c->ffn, err, errlen) ||
      !cfg_int(d, "num_hidden_layers", -1, &c->layers, err, errlen) ||
      !cfg_int(d, "num_attention_heads", -1, &c->heads, err, errlen) ||
      !cfg_int(d, "num_key_value_heads", c->heads, &c->kv_heads, err, errlen) ||
      !cfg_int(d, "vocab_size", -1, &c->vocab, err, errlen))
    return false;
  if (c->dim % c->heads != 0 && !cJSON_GetObjectItemCaseSensitive(d->cfg, "head_dim")) {
    snprintf(err, errlen, "%s: hidden_size %lld is not a multiple of num_attention_heads %lld (and no head_dim)",
             d->cfg_path, (long long)c->dim, (long long)c->heads);
    return false;
  }
  if (!cfg_int(d, "head_dim", c->dim / c->heads, &c->head_dim, err, errlen)) return false;
  if (c->heads % c->kv_heads != 0) {
    snprintf(err, errlen, "%s: num_key_value_heads %lld does not divide num_attention_heads %lld", d->cfg_path,
             (long long)c->kv_heads, (long long)c->heads);
    return false;
  }
  const cJSON *tie = cJSON_GetObjectItemCaseSensitive(d->cfg, "tie_word_embeddings");
  c->tied = cJSON_IsTrue(tie); /* LlamaConfig's default: false */
  return true;
}

/* ---- config.json against the model's parameters ------------------------------------ */
static const CkptParam *param(const CkptParam *params, int n, const char *name) {
  for (int i = 0; i < n; i++)
    if (strcmp(params[i].name, name) == 0) return &params[i];
  return NULL;
}

/* One dimension: the config's value (what) against the parameter's dimension dim. */
static bool same(const HfDir *d, const char *what, int64_t cfg_value, const CkptParam *p, int dim, char *err,
                 size_t errlen) {
  if (!p || p->rank <= dim || p->shape[dim] == cfg_value) return true;
  char sh[64];
  snprintf(err, errlen, "%s: %s is %lld, but the model's parameter \"%s\" is %s (%lld)", d->cfg_path, what,
           (long long)cfg_value, p->name, st_shape_str(p->rank, p->shape, sh, sizeof sh), (long long)p->shape[dim]);
  return false;
}

static bool check_cfg(const HfDir *d, const Cfg *c, const CkptParam *params, int n, char *err, size_t errlen) {
  int L = 0;
  for (int i = 0; i < n; i++) {
    int k, l;
    if (!ckpt_llama_name(params[i].name, &k, &l)) {
      snprintf(err, errlen,
               "%s: parameter \"%s\" has no Llama counterpart (pd2bw's Llama names are embed, "
               "h.<i>.{attn_norm,wq,wk,wv,wo,mlp_norm,w_gate,w_up,w_down}, norm, head)",
               d->dir, params[i].name);
      return false;
    }
    if (l + 1 > L) L = l + 1;
  }
  if (c->layers != L) {
    snprintf(err, errlen, "%s: num_hidden_layers is %lld, but the model has %d layers (h.0 .. h.%d)", d->cfg_path,
             (long long)c->layers, L, L - 1);
    return false;
  }
  char what[160];
  const CkptParam *embed = param(params, n, "embed"), *wq = param(params, n, "h.0.wq"),
                  *wk = param(params, n, "h.0.wk"), *gate = param(params, n, "h.0.w_gate");
  if (!same(d, "vocab_size", c->vocab, embed, 0, err, errlen) ||
      !same(d, "hidden_size", c->dim, embed, 1, err, errlen) ||
      !same(d, "intermediate_size", c->ffn, gate, 1, err, errlen))
    return false;
  snprintf(what, sizeof what, "num_attention_heads x head_dim (%lld x %lld)", (long long)c->heads,
           (long long)c->head_dim);
  if (!same(d, what, c->heads * c->head_dim, wq, 1, err, errlen)) return false;
  snprintf(what, sizeof what, "num_key_value_heads x head_dim (%lld x %lld)", (long long)c->kv_heads,
           (long long)c->head_dim);
  if (!same(d, what, c->kv_heads * c->head_dim, wk, 1, err, errlen)) return false;
  for (int i = 0; i < n; i++) /* the plan's attention head size, where it records one */
    if (params[i].att_head_size > 0 && params[i].att_head_size != c->head_dim) {
      snprintf(err, errlen, "%s: head_dim is %lld (hidden_size %lld / num_attention_heads %lld), but the model's "
               "attention has head size %d",
               d->cfg_path, (long long)c->head_dim, (long long)c->dim, (long long)c->heads, params[i].att_head_size);
      return false;
    }
  if (!c->tied && !param(params, n, "head")) {
    snprintf(err, errlen,
             "%s: tie_word_embeddings is false (lm_head.weight is its own matrix), but the model has no "
             "\"head\" parameter (its LM head is tied to embed)",
             d->cfg_path);
    return false;
  }
  return true;
}

/* config.json's value of what no tensor shows against the model's param of that name
 * (plan.json's model.consts): heads, kv_heads, rope theta, RMSNorm eps. */
static bool check_consts(const HfDir *d, const Cfg *c, const cJSON *consts, char *err, size_t errlen) {
  const cJSON *rp = cJSON_GetObjectItemCaseSensitive(d->cfg, "rope_parameters");
  const cJSON *theta = cJSON_GetObjectItemCaseSensitive(d->cfg, "rope_theta");
  if (!cJSON_IsNumber(theta)) theta = cJSON_GetObjectItemCaseSensitive(rp, "rope_theta");
  const cJSON *eps = cJSON_GetObjectItemCaseSensitive(d->cfg, "rms_norm_eps");
  struct {
    const char *cfg_key, *param;
    double value; /* NAN: config.json does not say (transformers' default is not assumed) */
  } pairs[] = {
      {"num_attention_heads", "heads", (double)c->heads},
      {"num_key_value_heads", "kv_heads", (double)c->kv_heads},
      {"rope_theta", "rope_theta", cJSON_IsNumber(theta) ? theta->valuedouble : NAN},
      {"rms_norm_eps", "rms_eps", cJSON_IsNumber(eps) ? eps->valuedouble : NAN},
  };
  for (int i = 0; i < 4; i++) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(consts, pairs[i].param);
    if (!cJSON_IsNumber(v) || isnan(pairs[i].value) || v->valuedouble == pairs[i].value) continue;
    snprintf(err, errlen, "%s: %s is %.10g, but the model's param %s is %.10g (plan it with -D %s=%.10g)",
             d->cfg_path, pairs[i].cfg_key, pairs[i].value, pairs[i].param, v->valuedouble, pairs[i].param,
             pairs[i].value);
    return false;
  }
  return true;
}

/* config.json's tie_word_embeddings against the model's param tied (models/llama.model;
 * plan.json's model.consts), where the plan has one: its head is its own matrix or the
 * embedding, and importing the other kind would train another model than the one the
 * checkpoint was. Without the param (an older plan) the head checks of check_cfg stand. */
static bool check_tie(const HfDir *d, const Cfg *c, const cJSON *consts, char *err, size_t errlen) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(consts, "tied");
  bool ok = !cJSON_IsNumber(v) || (v->valuedouble != 0) == c->tied;
  bool given = cJSON_GetObjectItemCaseSensitive(d->cfg, "tie_word_embeddings") != NULL;
  if (!ok)
    snprintf(err, errlen,
             "%s: tie_word_embeddings is %s%s, but the model's param tied is %.10g (plan it with -D tied=%d)",
             d->cfg_path, c->tied ? "true" : "false", given ? "" : " (not given: LlamaConfig's default)",
             v->valuedouble, c->tied ? 1 : 0);
  return ok;
}

/* Every tensor of the files is one the parameters read (or a tied lm_head, or an old
 * save's rotary_emb.inv_freq buffer): a tensor of no parameter is a different model. */
static bool check_extras(const HfDir *d, const Cfg *c, int L, char *err, size_t errlen) {
  char name[256];
  for (int i = 0; i < d->nst; i++)
    for (int j = 0; j < st_count(d->st[i]); j++) {
      const char *t = st_tensor(d->st[i], j)->name;
      size_t tl = strlen(t);
      bool known = (tl > 19 && strcmp(t + tl - 19, "rotary_emb.inv_freq") == 0) ||
                   (c->tied && strcmp(t, kinds[K_HEAD].hf) == 0);
      for (int k = 0; k < CKPT_LLAMA_KINDS && !known; k++)
        for (int l = 0; l < (kinds[k].per_layer ? L : 1) && !known; l++) {
          ckpt_llama_hf_name(k, l, name, sizeof name);
          known = strcmp(name, t) == 0;
        }
      if (!known) {
        snprintf(err, errlen, "%s: tensor \"%s\" belongs to no parameter of the model (a checkpoint of another or "
                 "bigger model?); refusing rather than dropping it", st_path(d->st[i]), t);
        return false;
      }
    }
  return true;
}

bool ckpt_import_llama_dir(const char *dir, const char *cfg_path, const cJSON *cfg, const CkptParam *params, int n,
                           const char *consts_json, char *err, size_t errlen) {
  HfDir d = {.dir = dir, .cfg_path = cfg_path, .cfg = cfg};
  Cfg c = {0};
  cJSON *consts = consts_json ? cJSON_Parse(consts_json) : NULL;
  bool ok = hf_open(&d, dir, err, errlen) && read_cfg(&d, &c, err, errlen) && check_tie(&d, &c, consts, err, errlen) &&
            check_cfg(&d, &c, params, n, err, errlen) && check_consts(&d, &c, consts, err, errlen) &&
            check_extras(&d, &c, (int)c.layers, err, errlen);
  cJSON_Delete(consts);
  float *tmp = NULL;
  for (int i = 0; i < n && ok; i++) {
    const CkptParam *p = &params[i];
    int k, l;
    ckpt_llama_name(p->name, &k, &l);
    char name[256];
    /* a tied checkpoint into an untied model: the head starts as the embedding */
    ckpt_llama_hf_name(k == K_HEAD && c.tied ? K_EMBED : k, l, name, sizeof name);
    const SafeTensors *st = NULL;
    const StTensor *t = hf_find(&d, name, &st);
    if (!t) {
      snprintf(err, errlen, "%s: parameter \"%s\": no tensor \"%s\" in %s", dir, p->name, name,
               d.index ? "the files model.safetensors.index.json names" : "model.safetensors");
      ok = false;
      break;
    }
    CkptSrc src;
    if (!ckpt_src_read(st, t, name, p, p->rank, kinds[k].linear, &tmp, &src, err, errlen)) {
      ok = false;
      break;
    }
    ok = ckpt_copy(p, CKPT_ROWS_EXACT, &src, st_path(st), err, errlen);
  }
  free(tmp);
  hf_close(&d);
  return ok;
}
