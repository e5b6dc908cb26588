/* tools/export_llama.c — pd2bw-export's Llama half: a pd2bw checkpoint of
 * models/llama.model (its head untied, or tied with -D tied=1) written as a Hugging Face
 * LlamaForCausalLM directory, model.safetensors and config.json, that
 * transformers' from_pretrained loads and pd2bwrun --init reads back bit for bit
 * (runtime/io/ckpt_llama.c is the inverse; both use its name table).
 *
 * pd2bw's Linear weights are [in, out], nn.Linear's [out, in]: wq, wk, wv, wo,
 * w_gate, w_up and w_down are transposed, the embedding, norms and head (already
 * [vocab, dim], used with transpose_b) copied. The shape attributes the tensors do
 * not show (heads, kv_heads, rope_theta, rms_eps, seq) come from the checkpoint's
 * "consts" metadata (pd2bwrun records the plan's model.consts), or, for a
 * checkpoint written before it did, from --heads, --kv-heads, --rope-theta and
 * --rms-eps; a flag that disagrees with the checkpoint is an error.
 */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tools/export.h"

typedef struct Llama {
  int64_t V, C, F, L, q_cols, kv_cols; /* vocab, width, intermediate, layers, heads·hd, kv_heads·hd */
  bool tied;
  int64_t heads, kv_heads, seq;
  double theta, eps;
  float **w; /* [kind · L + layer], layer 0 for the per-model kinds; NULL: absent head */
} Llama;

/* The value of the first of keys in the checkpoint's consts, or of the flag (given
 * > 0); both, when they differ, or neither (when required), is an error. */
static bool attr(const cJSON *consts, const char *const *keys, const char *flag, double given, bool required,
                 const char *path, double *out) {
  const cJSON *v = NULL;
  for (const char *const *k = keys; *k && !cJSON_IsNumber(v); k++) v = cJSON_GetObjectItemCaseSensitive(consts, *k);
  bool have = cJSON_IsNumber(v);
  if (have && given > 0 && given != v->valuedouble) {
    export_fail("%s %g: the checkpoint records %s = %g", flag, given, keys[0], v->valuedouble);
    return false;
  }
  if (!have && given <= 0 && required) {
    export_fail("%s: the checkpoint does not record %s (written before pd2bwrun recorded the model's consts): "
                "give %s",
                path, keys[0], flag);
    return false;
  }
  *out = have ? v->valuedouble : given;
  return true;
}

static bool read_attrs(const ExportOptions *o, SafeTensors *st, Llama *m) {
  const char *meta = st_meta(st, "consts");
  cJSON *consts = meta ? cJSON_Parse(meta) : NULL;
  static const char *const k_heads[] = {"heads", NULL}, *const k_kv[] = {"kv_heads", NULL},
                           *const k_theta[] = {"rope_theta", "theta", NULL}, *const k_eps[] = {"rms_eps", "eps", NULL},
                           *const k_seq[] = {"seq", NULL};
  double heads = 0, kv = 0, seq = 0;
  bool ok = attr(consts, k_heads, "--heads", (double)o->heads, true, o->ckpt, &heads) &&
            attr(consts, k_kv, "--kv-heads", (double)o->kv_heads, false, o->ckpt, &kv) &&
            attr(consts, k_theta, "--rope-theta", o->rope_theta, true, o->ckpt, &m->theta) &&
            attr(consts, k_eps, "--rms-eps", o->rms_eps, true, o->ckpt, &m->eps) &&
            attr(consts, k_seq, "--seq", 0, false, o->ckpt, &seq);
  cJSON_Delete(consts);
  if (!ok) return false;
  m->heads = (int64_t)heads;
  m->kv_heads = kv > 0 ? (int64_t)kv : m->heads;
  m->seq = seq > 0 ? (int64_t)seq : 2048;
  if (m->heads <= 0 || m->q_cols % m->heads != 0) {
    export_fail("%s: heads %lld do not divide wq's %lld columns", o->ckpt, (long long)m->heads, (long long)m->q_cols);
    return false;
  }
  int64_t hd = m->q_cols / m->heads;
  if (m->kv_heads <= 0 || m->kv_heads * hd != m->kv_cols || m->heads % m->kv_heads != 0) {
    export_fail("%s: kv_heads %lld of head size %lld do not make wk's %lld columns (or do not divide heads %lld)",
                o->ckpt, (long long)m->kv_heads, (long long)hd, (long long)m->kv_cols, (long long)m->heads);
    return false;
  }
  if (!(m->theta > 0) || !(m->eps > 0)) {
    export_fail("%s: rope_theta %g and rms_eps %g must be positive", o->ckpt, m->theta, m->eps);
    return false;
  }
  return true;
}

/* Reads every Llama tensor; false after printing the error. */
static bool read_llama(const ExportOptions *o, SafeTensors *st, Llama *m) {
  char name[96], a[64], b[64];
  const StTensor *embed = st_find(st, "embed");
  if (!embed || embed->rank != 2) {
    export_fail("%s: not Llama-shaped: \"embed\" must be a matrix", o->ckpt);
    return false;
  }
  m->V = embed->shape[0];
  m->C = embed->shape[1];
  for (m->L = 0;; m->L++) {
    snprintf(name, sizeof name, "h.%lld.attn_norm", (long long)m->L);
    if (!st_find(st, name)) break;
  }
  const StTensor *wq = st_find(st, "h.0.wq"), *wk = st_find(st, "h.0.wk"), *gate = st_find(st, "h.0.w_gate");
  if (m->L == 0 || !wq || !wk || !gate || wq->rank != 2 || wk->rank != 2 || gate->rank != 2) {
    export_fail("%s: not Llama-shaped: no layer 0 (h.0.attn_norm, h.0.wq, h.0.wk, h.0.w_gate)", o->ckpt);
    return false;
  }
  m->q_cols = wq->shape[1];
  m->kv_cols = wk->shape[1];
  m->F = gate->shape[1];
  m->tied = !st_find(st, "head");
  m->w = pd_calloc((size_t)(CKPT_LLAMA_KINDS * m->L), sizeof *m->w);
  for (int k = 0; k < CKPT_LLAMA_KINDS; k++) {
    CkptLlamaKind d = ckpt_llama_kind(k);
    if (k == CKPT_LLAMA_KINDS - 1 && m->tied) continue;
    for (int l = 0; l < (d.per_layer ? m->L : 1); l++) {
      if (d.per_layer)
        snprintf(name, sizeof name, "h.%d.%s", l, d.pd);
      else
        snprintf(name, sizeof name, "%s", d.pd);
      const StTensor *t = st_find(st, name);
      /* the shape pd2bw's Llama gives it */
      int64_t want[2] = {0, 0};
      int rank = 2;
      if (strcmp(d.pd, "embed") == 0 || strcmp(d.pd, "head") == 0)
        want[0] = m->V, want[1] = m->C;
      else if (strcmp(d.pd, "wq") == 0)
        want[0] = m->C, want[1] = m->q_cols;
      else if (strcmp(d.pd, "wk") == 0 || strcmp(d.pd, "wv") == 0)
        want[0] = m->C, want[1] = m->kv_cols;
      else if (strcmp(d.pd, "wo") == 0)
        want[0] = m->q_cols, want[1] = m->C;
      else if (strcmp(d.pd, "w_gate") == 0 || strcmp(d.pd, "w_up") == 0)
        want[0] = m->C, want[1] = m->F;
      else if (strcmp(d.pd, "w_down") == 0)
        want[0] = m->F, want[1] = m->C;
      else
        rank = 1, want[0] = m->C;
      if (!t || t->rank != rank || t->shape[0] != want[0] || (rank == 2 && t->shape[1] != want[1])) {
        if (!t)
          export_fail("%s: not Llama-shaped: no tensor \"%s\" (%lld layers, as h.<i>.attn_norm says)", o->ckpt, name,
                      (long long)m->L);
        else
          export_fail("%s: not Llama-shaped: \"%s\" is %s, the other tensors make it %s", o->ckpt, name,
                      st_shape_str(t->rank, t->shape, a, sizeof a), st_shape_str(rank, want, b, sizeof b));
        return false;
      }
      float *w = pd_malloc((size_t)t->numel * sizeof *w + 1);
      m->w[k * m->L + l] = w;
      char err[IO_ERR_LEN];
      if (!st_read_f32(st, t, w, err, sizeof err)) {
        export_fail("%s", err);
        return false;
      }
    }
  }
  for (int i = 0; i < st_count(st); i++) { /* nothing else but optimizer state */
    const char *n = st_tensor(st, i)->name;
    int k, l;
    bool known = export_is_optimizer_state(n) || (ckpt_llama_name(n, &k, &l) && l < m->L);
    if (!known) {
      export_fail("%s: not Llama-shaped: tensor \"%s\" has no Hugging Face Llama counterpart", o->ckpt, n);
      return false;
    }
  }
  return read_attrs(o, st, m);
}

static char *llama_config(const Llama *m) {
  cJSON *c = cJSON_CreateObject();
  cJSON *arch = cJSON_AddArrayToObject(c, "architectures");
  cJSON_AddItemToArray(arch, cJSON_CreateString("LlamaForCausalLM"));
  cJSON_AddStringToObject(c, "model_type", "llama");
  cJSON_AddNumberToObject(c, "vocab_size", (double)m->V);
  cJSON_AddNumberToObject(c, "hidden_size", (double)m->C);
  cJSON_AddNumberToObject(c, "intermediate_size", (double)m->F);
  cJSON_AddNumberToObject(c, "num_hidden_layers", (double)m->L);
  cJSON_AddNumberToObject(c, "num_attention_heads", (double)m->heads);
  cJSON_AddNumberToObject(c, "num_key_value_heads", (double)m->kv_heads);
  cJSON_AddNumberToObject(c, "head_dim", (double)(m->q_cols / m->heads));
  cJSON_AddNumberToObject(c, "max_position_embeddings", (double)m->seq);
  cJSON_AddStringToObject(c, "hidden_act", "silu");
  cJSON_AddNumberToObject(c, "rms_norm_eps", m->eps);
  cJSON_AddNumberToObject(c, "rope_theta", m->theta);
  cJSON_AddNullToObject(c, "rope_scaling");
  cJSON_AddBoolToObject(c, "attention_bias", false);
  cJSON_AddBoolToObject(c, "mlp_bias", false);
  cJSON_AddNumberToObject(c, "attention_dropout", 0.0);
  cJSON_AddBoolToObject(c, "tie_word_embeddings", m->tied);
  cJSON_AddNumberToObject(c, "initializer_range", 0.02);
  cJSON_AddNullToObject(c, "bos_token_id"); /* the vocabulary's business, not the weights' */
  cJSON_AddNullToObject(c, "eos_token_id");
  cJSON_AddStringToObject(c, "torch_dtype", "float32");
  char *text = cJSON_Print(c);
  cJSON_Delete(c);
  return text;
}

/* Starts model.safetensors and config.json in dir (uncommitted). */
static bool llama_begin(const Llama *m, const char *dir, AtomicFile *st_af, AtomicFile *cfg_af, char *err,
                        size_t errlen) {
  int cap = CKPT_LLAMA_KINDS * (int)m->L, n = 0;
  StEntry *e = pd_calloc((size_t)cap, sizeof *e);
  char (*names)[96] = pd_calloc((size_t)cap, sizeof *names);
  float **tr = pd_calloc((size_t)cap, sizeof *tr);
  for (int k = 0; k < CKPT_LLAMA_KINDS; k++) {
    CkptLlamaKind d = ckpt_llama_kind(k);
    if (k == CKPT_LLAMA_KINDS - 1 && m->tied) continue;
    for (int l = 0; l < (d.per_layer ? m->L : 1); l++, n++) {
      const float *w = m->w[k * m->L + l];
      ckpt_llama_hf_name(k, l, names[n], sizeof names[n]);
      e[n].name = names[n];
      e[n].dtype = ST_F32;
      int64_t rows, cols;
      if (strcmp(d.pd, "embed") == 0 || strcmp(d.pd, "head") == 0)
        rows = m->V, cols = m->C;
      else if (strcmp(d.pd, "wq") == 0)
        rows = m->C, cols = m->q_cols;
      else if (strcmp(d.pd, "wk") == 0 || strcmp(d.pd, "wv") == 0)
        rows = m->C, cols = m->kv_cols;
      else if (strcmp(d.pd, "wo") == 0)
        rows = m->q_cols, cols = m->C;
      else if (strcmp(d.pd, "w_gate") == 0 || strcmp(d.pd, "w_up") == 0)
        rows = m->C, cols = m->F;
      else if (strcmp(d.pd, "w_down") == 0)
        rows = m->F, cols = m->C;
      else
        rows = 0, cols = m->C;
      if (rows == 0) {
        e[n].rank = 1;
        e[n].shape[0] = cols;
      } else if (d.linear) { /* [in, out] -> nn.Linear's [out, in] */
        float *t = tr[n] = pd_malloc((size_t)(rows * cols) * sizeof *t);
        for (int64_t r = 0; r < rows; r++)
          for (int64_t c = 0; c < cols; c++) t[c * rows + r] = w[r * cols + c];
        w = t;
        e[n].rank = 2;
        e[n].shape[0] = cols;
        e[n].shape[1] = rows;
      } else {
        e[n].rank = 2;
        e[n].shape[0] = rows;
        e[n].shape[1] = cols;
      }
      e[n].data = w;
    }
  }
  const char *meta[] = {"format", "pt"}; /* transformers refuses files without it */
  char *st_path = export_join(dir, "model.safetensors"), *cfg_path = export_join(dir, "config.json");
  bool ok = st_write_uncommitted(st_af, st_path, e, n, meta, 1, err, errlen);
  if (ok && atomic_open(cfg_af, cfg_path, err, errlen)) {
    char *cfg = llama_config(m);
    atomic_write(cfg_af, cfg, strlen(cfg));
    atomic_write(cfg_af, "\n", 1);
    cJSON_free(cfg);
  } else {
    ok = false;
  }
  for (int i = 0; i < cap; i++) free(tr[i]);
  free(tr);
  free(st_path);
  free(cfg_path);
  free(names);
  free(e);
  return ok;
}

int export_llama(const ExportOptions *o, SafeTensors *st) {
  if (o->llmc) return export_fail("--llmc: llm.c's format holds GPT-2 only; %s is a Llama checkpoint", o->ckpt);
  if (!o->hf) return export_fail("nothing to write: give --hf DIR");
  if (o->vocab)
    return export_fail("--vocab-size %ld: a Llama export writes embed's rows as they are (GPT-2's llm.c padding only)",
                       o->vocab);
  Llama m = {0};
  int rc = read_llama(o, st, &m) ? 0 : 1;
  bool made_dir = false;
  if (!rc) rc = export_hf_dir_begin(o, &made_dir);
  if (!rc) {
    char err[IO_ERR_LEN];
    AtomicFile st_af = {0}, cfg_af = {0};
    bool ok = llama_begin(&m, o->hf, &st_af, &cfg_af, err, sizeof err);
    rc = export_hf_dir_commit(o, made_dir, ok, &st_af, &cfg_af, err);
  }
  if (!rc) {
    const char *step = st_meta(st, "step");
    printf("pd2bw-export: Llama with %lld layers, hidden %lld, %lld heads (%lld key/value), intermediate %lld, "
           "vocab %lld, %s head, rope_theta %g, rms_eps %g, step %s of %s\n",
           (long long)m.L, (long long)m.C, (long long)m.heads, (long long)m.kv_heads, (long long)m.F,
           (long long)m.V, m.tied ? "tied" : "untied", m.theta, m.eps, step ? step : "?", o->ckpt);
    printf("  Hugging Face LlamaForCausalLM: %s/model.safetensors, %s/config.json\n", o->hf, o->hf);
  }
  for (int64_t i = 0; m.w && i < CKPT_LLAMA_KINDS * m.L; i++) free(m.w[i]);
  free(m.w);
  return rc;
}
