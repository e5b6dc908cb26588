/* tools/export_llama.c — pd2bw-export's Llama half: a pd2bw checkpoint of
 * models/llama.model (its head untied, or tied with -D tied=1) written as a Hugging Face
 * LlamaForCausalLM directory, model.safetensors (or, past --max-shard-size, shards
 * split as save_pretrained splits them, and their index) and config.json, that
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
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

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

bool export_parse_size(const char *s, int64_t *out) {
  static const struct {
    const char *unit;
    int64_t mult;
  } units[] = {{"GiB", 1LL << 30}, {"MiB", 1LL << 20}, {"KiB", 1LL << 10}, {"GB", 1000000000}, {"MB", 1000000},
               {"KB", 1000},       {"", 1}};
  char *end;
  errno = 0;
  long long v = strtoll(s, &end, 10);
  if (end == s || errno || v <= 0 || *s == '-' || *s == '+') return false;
  for (size_t u = 0; u < sizeof units / sizeof units[0]; u++) {
    if (strcasecmp(end, units[u].unit) != 0) continue;
    if (v > INT64_MAX / units[u].mult) return false;
    *out = v * units[u].mult;
    size_t n = strlen(end);
    if (n == 2 && end[1] == 'b') *out /= 8; /* transformers: "5Gb" is gigabits */
    return *out > 0;
  }
  return false;
}

/* Where kind k of layer l comes in LlamaForCausalLM's state dict, which save_pretrained
 * shards in order: the embedding, each layer's self_attn (q, k, v, o), mlp (gate, up,
 * down), input_layernorm and post_attention_layernorm, the final norm, lm_head. */
static int64_t hf_order(int k, int l, int64_t L) {
  static const int in_layer[CKPT_LLAMA_KINDS] = {-1, 7, 0, 1, 2, 3, 8, 4, 5, 6, -1, -1}; /* by kind */
  if (k == 0) return 0;
  if (k >= CKPT_LLAMA_KINDS - 2) return 1 + 9 * L + (k - (CKPT_LLAMA_KINDS - 2));
  return 1 + 9 * (int64_t)l + in_layer[k];
}

/* The tensors of the Hugging Face files, in state-dict order (hf_order). */
typedef struct HfTensors {
  int n;
  StEntry *e;
  char (*names)[96];
  float **tr; /* transposed copies, freed with the rest */
} HfTensors;

static void hf_tensors(const Llama *m, HfTensors *h) {
  int cap = CKPT_LLAMA_KINDS * (int)m->L;
  h->e = pd_calloc((size_t)cap, sizeof *h->e);
  h->names = pd_calloc((size_t)cap, sizeof *h->names);
  h->tr = pd_calloc((size_t)cap, sizeof *h->tr);
  int64_t *key = pd_calloc((size_t)cap, sizeof *key);
  for (int k = 0; k < CKPT_LLAMA_KINDS; k++) {
    CkptLlamaKind d = ckpt_llama_kind(k);
    if (k == CKPT_LLAMA_KINDS - 1 && m->tied) continue;
    for (int l = 0; l < (d.per_layer ? m->L : 1); l++) {
      int n = h->n++;
      StEntry *e = &h->e[n];
      const float *w = m->w[k * m->L + l];
      key[n] = hf_order(k, l, m->L);
      ckpt_llama_hf_name(k, l, h->names[n], sizeof h->names[n]);
      e->name = h->names[n];
      e->dtype = ST_F32;
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
        e->rank = 1;
        e->shape[0] = cols;
      } else if (d.linear) { /* [in, out] -> nn.Linear's [out, in] */
        float *t = h->tr[n] = pd_malloc((size_t)(rows * cols) * sizeof *t);
        for (int64_t r = 0; r < rows; r++)
          for (int64_t c = 0; c < cols; c++) t[c * rows + r] = w[r * cols + c];
        w = t;
        e->rank = 2;
        e->shape[0] = cols;
        e->shape[1] = rows;
      } else {
        e->rank = 2;
        e->shape[0] = rows;
        e->shape[1] = cols;
      }
      e->data = w;
    }
  }
  for (int i = 1; i < h->n; i++) /* insertion sort by key: a few hundred entries at most */
    for (int j = i; j > 0 && key[j - 1] > key[j]; j--) {
      int64_t tk = key[j];
      key[j] = key[j - 1], key[j - 1] = tk;
      StEntry te = h->e[j];
      h->e[j] = h->e[j - 1], h->e[j - 1] = te;
    }
  free(key);
}

static void hf_tensors_free(HfTensors *h) {
  for (int i = 0; i < h->n; i++) free(h->tr[i]);
  free(h->tr);
  free(h->names);
  free(h->e);
}

static size_t entry_bytes(const StEntry *e) {
  return (size_t)(e->rank == 2 ? e->shape[0] * e->shape[1] : e->shape[0]) * sizeof(float);
}

/* save_pretrained's split (huggingface_hub's split_torch_state_dict_into_shards), in
 * state-dict order: a tensor that would take the open shard past max starts the next
 * one; a tensor larger than max alone gets a shard of its own, placed at once, before
 * the open one. shard[i] = tensor i's shard; returns the number of shards. */
static int split_shards(const HfTensors *h, int64_t max, int *shard) {
  int nshards = 0, open = -1;
  int64_t open_size = 0;
  for (int i = 0; i < h->n; i++) {
    int64_t size = (int64_t)entry_bytes(&h->e[i]);
    if (size > max) {
      shard[i] = nshards++;
      continue;
    }
    if (open < 0 || open_size + size > max) open = nshards++, open_size = 0;
    shard[i] = open;
    open_size += size;
  }
  return nshards;
}

/* The files of a --hf Llama directory, written uncommitted: n of them (shards or
 * model.safetensors, then the index when sharded, then config.json). */
enum { MAX_SHARDS = 999 };
typedef struct HfFiles {
  int n;
  AtomicFile af[MAX_SHARDS + 2];
  char *path[MAX_SHARDS + 2];
} HfFiles;

static bool add_file(HfFiles *f, const char *dir, const char *name, char *err, size_t errlen) {
  int i = f->n++;
  f->path[i] = io_join(dir, name);
  return atomic_open(&f->af[i], f->path[i], err, errlen);
}

/* model.safetensors.index.json: total_size (tensor bytes), total_parameters and each
 * tensor's file, by name, as huggingface_hub writes it. */
static char *index_json(const HfTensors *h, const int *shard, char (*files)[64]) {
  cJSON *root = cJSON_CreateObject(), *meta = cJSON_AddObjectToObject(root, "metadata");
  int64_t bytes = 0;
  for (int i = 0; i < h->n; i++) bytes += (int64_t)entry_bytes(&h->e[i]);
  cJSON_AddNumberToObject(meta, "total_parameters", (double)(bytes / 4));
  cJSON_AddNumberToObject(meta, "total_size", (double)bytes);
  cJSON *map = cJSON_AddObjectToObject(root, "weight_map");
  bool *done = pd_calloc((size_t)h->n, sizeof *done);
  for (int k = 0; k < h->n; k++) { /* by name: the smallest not yet added */
    int best = -1;
    for (int i = 0; i < h->n; i++)
      if (!done[i] && (best < 0 || strcmp(h->e[i].name, h->e[best].name) < 0)) best = i;
    done[best] = true;
    cJSON_AddStringToObject(map, h->e[best].name, files[shard[best]]);
  }
  free(done);
  char *text = cJSON_Print(root);
  cJSON_Delete(root);
  return text;
}

/* Writes the directory's files uncommitted into f: model.safetensors, or (max_shard > 0
 * and the tensors take more) model-0000N-of-0000M.safetensors and their index; then
 * config.json. */
static bool llama_begin(const Llama *m, const char *dir, int64_t max_shard, HfFiles *f, char *err, size_t errlen) {
  HfTensors h = {0};
  hf_tensors(m, &h);
  int *shard = pd_calloc((size_t)h.n + 1, sizeof *shard);
  int nshards = max_shard > 0 ? split_shards(&h, max_shard, shard) : 1;
  const char *meta[] = {"format", "pt"}; /* transformers refuses files without it */
  bool ok = true;
  if (nshards > MAX_SHARDS) {
    snprintf(err, errlen, "--max-shard-size %lld: %d shards, more than the %d pd2bw-export writes", (long long)max_shard,
             nshards, MAX_SHARDS);
    ok = false;
  } else if (nshards == 1) { /* save_pretrained's one file, whatever the limit */
    f->path[0] = io_join(dir, "model.safetensors");
    ok = st_write_uncommitted(&f->af[0], f->path[0], h.e, h.n, meta, 1, err, errlen);
    f->n = 1;
  } else {
    char(*files)[64] = pd_calloc((size_t)nshards, sizeof *files);
    StEntry *part = pd_calloc((size_t)h.n, sizeof *part);
    for (int s = 0; s < nshards && ok; s++) {
      snprintf(files[s], sizeof files[s], "model-%05d-of-%05d.safetensors", s + 1, nshards);
      int np = 0;
      for (int i = 0; i < h.n; i++)
        if (shard[i] == s) part[np++] = h.e[i];
      f->path[f->n] = io_join(dir, files[s]);
      ok = st_write_uncommitted(&f->af[f->n], f->path[f->n], part, np, meta, 1, err, errlen);
      f->n++;
    }
    if (ok && (ok = add_file(f, dir, "model.safetensors.index.json", err, errlen))) {
      char *idx = index_json(&h, shard, files);
      atomic_write(&f->af[f->n - 1], idx, strlen(idx));
      atomic_write(&f->af[f->n - 1], "\n", 1);
      cJSON_free(idx);
    }
    free(part);
    free(files);
  }
  if (ok && (ok = add_file(f, dir, "config.json", err, errlen))) {
    char *cfg = llama_config(m);
    atomic_write(&f->af[f->n - 1], cfg, strlen(cfg));
    atomic_write(&f->af[f->n - 1], "\n", 1);
    cJSON_free(cfg);
  }
  free(shard);
  hf_tensors_free(&h);
  return ok;
}

/* Whether name is a shard of a save_pretrained weights set, model-NNNNN-of-MMMMM.safetensors. */
static bool is_shard_name(const char *name) {
  int a = 0, b = 0, used = 0;
  return sscanf(name, "model-%5d-of-%5d.safetensors%n", &a, &b, &used) == 2 && used == (int)strlen(name) &&
         strlen(name) == strlen("model-00001-of-00001.safetensors");
}

char *export_hf_shard_in(const char *dir) {
  char *found = NULL;
  DIR *d = opendir(dir);
  for (struct dirent *e; d && (e = readdir(d)) && !found;)
    if (is_shard_name(e->d_name)) found = pd_strdup(e->d_name);
  if (d) closedir(d);
  return found;
}

/* After a --force export: what a previous save of other weights left beside the files
 * written now (a model.safetensors beside new shards would be loaded instead of them;
 * shards and an index beside a new model.safetensors would confuse a reader), as
 * save_pretrained cleans its folder. Never the checkpoint being exported. */
static void remove_stale(const ExportOptions *o, const HfFiles *f) {
  struct stat in;
  bool have_in = stat(o->ckpt, &in) == 0;
  DIR *d = opendir(o->hf);
  for (struct dirent *e; d && (e = readdir(d));) {
    if (strcmp(e->d_name, "model.safetensors") != 0 && strcmp(e->d_name, "model.safetensors.index.json") != 0 &&
        !is_shard_name(e->d_name))
      continue;
    char *p = io_join(o->hf, e->d_name);
    bool written = false;
    for (int i = 0; i < f->n && !written; i++) written = strcmp(f->path[i], p) == 0;
    struct stat sb;
    bool is_in = have_in && stat(p, &sb) == 0 && sb.st_dev == in.st_dev && sb.st_ino == in.st_ino;
    if (!written && !is_in) unlink(p);
    free(p);
  }
  if (d) closedir(d);
}

/* Commits every file, or none (those renamed already are removed again when the
 * directory is ours). Returns 0, or 1 after printing err. */
static int commit_files(const ExportOptions *o, bool made_dir, bool ok, HfFiles *f, char *err) {
  int done = 0;
  for (; ok && done < f->n; done++) ok = atomic_commit(&f->af[done], err, IO_ERR_LEN);
  if (ok) {
    if (o->force) remove_stale(o, f);
    return 0;
  }
  for (int i = 0; i < f->n; i++) atomic_abort(&f->af[i]);
  if (made_dir) {
    for (int i = 0; i < done; i++) unlink(f->path[i]);
    rmdir(o->hf);
  }
  return export_fail("%s", err);
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
  HfFiles *f = pd_calloc(1, sizeof *f);
  if (!rc) {
    char err[IO_ERR_LEN];
    bool ok = llama_begin(&m, o->hf, o->max_shard, f, err, sizeof err);
    rc = commit_files(o, made_dir, ok, f, err);
  }
  if (!rc) {
    const char *step = st_meta(st, "step");
    printf("pd2bw-export: Llama with %lld layers, hidden %lld, %lld heads (%lld key/value), intermediate %lld, "
           "vocab %lld, %s head, rope_theta %g, rms_eps %g, step %s of %s\n",
           (long long)m.L, (long long)m.C, (long long)m.heads, (long long)m.kv_heads, (long long)m.F,
           (long long)m.V, m.tied ? "tied" : "untied", m.theta, m.eps, step ? step : "?", o->ckpt);
    if (f->n == 2)
      printf("  Hugging Face LlamaForCausalLM: %s/model.safetensors, %s/config.json\n", o->hf, o->hf);
    else
      printf("  Hugging Face LlamaForCausalLM: %s/model-00001-of-%05d.safetensors ... (%d shards of at most %lld "
             "bytes), model.safetensors.index.json, config.json\n",
             o->hf, f->n - 2, f->n - 2, (long long)o->max_shard);
  }
  for (int i = 0; i < f->n; i++) free(f->path[i]);
  free(f);
  for (int64_t i = 0; m.w && i < CKPT_LLAMA_KINDS * m.L; i++) free(m.w[i]);
  free(m.w);
  return rc;
}
