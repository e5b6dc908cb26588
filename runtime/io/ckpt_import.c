/* runtime/io/ckpt_import.c — filling pd2bw's GPT parameters from other programs'
 * checkpoints (Hugging Face's GPT-2 model.safetensors, llm.c's model file) and from
 * pd2bw's own safetensors checkpoints; a Hugging Face directory goes to its reader
 * (Llama: ckpt_llama.c, with its own slot table).
 *
 * Every pd2bw GPT parameter name maps to one GPT-2 tensor (a GptSlot) of one layer. A
 * source is described in pd2bw's orientation: element (r, c) of the [rows, cols] matrix
 * the model wants is src[r·rs + c·cs] (CkptSrc). So one copy loop, ckpt_copy, which
 * checks shapes and finiteness, serves Hugging Face (Conv1D weights are already
 * [in, out]: rs = cols, cs = 1) and llm.c (linear weights are stored [out, in], so the
 * copy transposes: rs = 1, cs = in). Users: docs/data.md ("Checkpoints"). */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "runtime/io/ckpt_internal.h"

/* One GPT-2 tensor kind; the order is llm.c's file order. Shapes are pd2bw's
 * ([in, out] for linear weights); "per layer" kinds exist once per block. */
typedef enum GptSlot {
  G_WTE,        /* token embedding [V, C] */
  G_WPE,        /* position embedding [T, C] */
  G_LN1_W,      /* per layer: first layer norm's scale [C] */
  G_LN1_B,      /* per layer: its shift [C] */
  G_ATTN_W,     /* per layer: fused q,k,v projection [C, 3C] */
  G_ATTN_B,     /* per layer: its bias [3C] */
  G_ATTNPROJ_W, /* per layer: attention output projection [C, C] */
  G_ATTNPROJ_B, /* per layer: its bias [C] */
  G_LN2_W,      /* per layer: second layer norm's scale [C] */
  G_LN2_B,      /* per layer: its shift [C] */
  G_FC_W,       /* per layer: MLP up projection [C, 4C] */
  G_FC_B,       /* per layer: its bias [4C] */
  G_FCPROJ_W,   /* per layer: MLP down projection [4C, C] */
  G_FCPROJ_B,   /* per layer: its bias [C] */
  G_LNF_W,      /* final layer norm's scale [C] */
  G_LNF_B,      /* final layer norm's shift [C] */
  G_COUNT
} GptSlot;

/* Per slot: pd2bw name (suffix after "h.<i>." for layer slots), Hugging Face
 * name (same), and the shape in pd2bw orientation as multiples of C (rows,
 * cols; 0 rows = rank 1). The table's order is llm.c's tensor order. */
static const struct {
  const char *pd, *hf;
  int rows_c, cols_c; /* -1: V or T rows, not a multiple of C */
  bool linear;        /* llm.c stores it [out, in]: transpose */
} slots[G_COUNT] = {
    [G_WTE] = {"wte", "wte.weight", -1, 1, false},
    [G_WPE] = {"wpe", "wpe.weight", -1, 1, false},
    [G_LN1_W] = {"ln1_w", "ln_1.weight", 0, 1, false},
    [G_LN1_B] = {"ln1_b", "ln_1.bias", 0, 1, false},
    [G_ATTN_W] = {"attn_w", "attn.c_attn.weight", 1, 3, true},
    [G_ATTN_B] = {"attn_b", "attn.c_attn.bias", 0, 3, false},
    [G_ATTNPROJ_W] = {"attnproj_w", "attn.c_proj.weight", 1, 1, true},
    [G_ATTNPROJ_B] = {"attnproj_b", "attn.c_proj.bias", 0, 1, false},
    [G_LN2_W] = {"ln2_w", "ln_2.weight", 0, 1, false},
    [G_LN2_B] = {"ln2_b", "ln_2.bias", 0, 1, false},
    [G_FC_W] = {"fc_w", "mlp.c_fc.weight", 1, 4, true},
    [G_FC_B] = {"fc_b", "mlp.c_fc.bias", 0, 4, false},
    [G_FCPROJ_W] = {"fcproj_w", "mlp.c_proj.weight", 4, 1, true},
    [G_FCPROJ_B] = {"fcproj_b", "mlp.c_proj.bias", 0, 1, false},
    [G_LNF_W] = {"lnf_w", "ln_f.weight", 0, 1, false},
    [G_LNF_B] = {"lnf_b", "ln_f.bias", 0, 1, false},
};

static bool slot_per_layer(GptSlot s) { return s >= G_LN1_W && s <= G_FCPROJ_B; }

CkptGpt2Kind ckpt_gpt2_kind(int k) {
  PD_CHECK(k >= 0 && k < G_COUNT && G_COUNT == CKPT_GPT2_KINDS);
  return (CkptGpt2Kind){slots[k].pd,     slots[k].hf,
                        slots[k].rows_c, slots[k].cols_c,
                        slot_per_layer((GptSlot)k), slots[k].linear};
}

const char *ckpt_layer_suffix(const char *name, int *layer) {
  *layer = -1;
  if (strncmp(name, "h.", 2) != 0) return name;
  char *end;
  long l = strtol(name + 2, &end, 10); /* an overflow reads LONG_MAX or LONG_MIN: refused below */
  if (end == name + 2 || *end != '.' || l < 0 || l > 1000000) return NULL;
  *layer = (int)l;
  return end + 1;
}

/* "h.3.attn_w" -> (G_ATTN_W, 3); "wte" -> (G_WTE, -1). False if not a GPT name. */
static bool parse_name(const char *name, GptSlot *slot, int *layer) {
  const char *suffix = ckpt_layer_suffix(name, layer);
  for (int s = 0; suffix && s < G_COUNT; s++)
    if (strcmp(slots[s].pd, suffix) == 0 && slot_per_layer((GptSlot)s) == (*layer >= 0)) {
      *slot = (GptSlot)s;
      return true;
    }
  return false;
}

/* ---- the one copy (runtime/io/ckpt_internal.h) ------------------------------ */
static const char *param_shape_str(const CkptParam *p, char *buf, size_t n) {
  return st_shape_str(p->rank, p->shape, buf, n);
}

static const char *src_shape_str(const CkptSrc *s, char *buf, size_t n) {
  int64_t sh[2] = {s->rows, s->cols};
  return s->rank == 1 ? st_shape_str(1, &sh[1], buf, n) : st_shape_str(2, sh, buf, n);
}

bool ckpt_src_read(const SafeTensors *st, const StTensor *t, const char *name, const CkptParam *p, int rank,
                   bool transposed, float **buf, CkptSrc *s, char *err, size_t errlen) {
  if (t->rank != rank || rank > 2) {
    char a[64], b[64];
    snprintf(err, errlen, "%s: parameter \"%s\": the model wants %s, the checkpoint has %s (\"%s\")", st_path(st),
             p->name, param_shape_str(p, a, sizeof a), st_shape_str(t->rank, t->shape, b, sizeof b), name);
    return false;
  }
  *buf = pd_realloc(*buf, (size_t)(t->numel + 1) * sizeof **buf);
  if (!st_read_f32(st, t, *buf, err, errlen)) return false;
  bool tr = transposed && rank == 2; /* stored [out, in]: pd2bw's (r, c) is stored (c, r) */
  int64_t rows = rank == 1 ? 1 : t->shape[tr ? 1 : 0], cols = t->shape[rank == 1 || tr ? 0 : 1];
  *s = (CkptSrc){.rank = rank, .rows = rows, .cols = cols, .rs = tr ? 1 : cols, .cs = tr ? rows : 1,
                 .data = *buf, .min_rows = 1};
  snprintf(s->desc, sizeof s->desc, "\"%s\"%s", name, tr ? ", transposed" : "");
  return true;
}

bool ckpt_copy(const CkptParam *p, CkptRows rule, const CkptSrc *s, const char *path, char *err,
               size_t errlen) {
  int64_t rows = p->rank == 2 ? p->shape[0] : 1, cols = p->rank == 2 ? p->shape[1] : p->shape[0];
  bool ok = p->rank == s->rank && cols == s->cols;
  if (ok && rule == CKPT_ROWS_VOCAB)
    ok = rows >= s->min_rows; /* padded vocabulary */
  else if (ok && rule == CKPT_ROWS_PREFIX)
    ok = rows <= s->rows; /* shorter context */
  else if (ok)
    ok = rows == s->rows;
  if (!ok) {
    char a[64], b[64];
    snprintf(err, errlen, "%s: parameter \"%s\": the model wants %s, the checkpoint has %s (%s)%s",
             path, p->name, param_shape_str(p, a, sizeof a), src_shape_str(s, b, sizeof b), s->desc,
             rule == CKPT_ROWS_VOCAB    ? "; the model's vocabulary must cover the checkpoint's"
             : rule == CKPT_ROWS_PREFIX ? "; the model's context must not exceed the checkpoint's"
                                        : "");
    return false;
  }
  int64_t have = rows < s->rows ? rows : s->rows;
  for (int64_t r = 0; r < have; r++)
    for (int64_t c = 0; c < cols; c++) {
      float x = s->data[r * s->rs + c * s->cs];
      if (!isfinite(x)) { /* (safetensors: st_read_f32 refused it already) */
        snprintf(err, errlen, "%s: parameter \"%s\" (%s): element %lld is %s (a checkpoint of a run that diverged?)",
                 path, p->name, s->desc, (long long)(r * cols + c), isnan(x) ? "NaN" : "infinite");
        return false;
      }
      p->dst[r * cols + c] = x;
    }
  memset(p->dst + have * cols, 0, (size_t)((rows - have) * cols) * sizeof(float));
  return true;
}

static CkptRows gpt_rows(GptSlot s) {
  return s == G_WTE ? CKPT_ROWS_VOCAB : s == G_WPE ? CKPT_ROWS_PREFIX : CKPT_ROWS_EXACT;
}

/* Checks every name is GPT's and the layer counts agree (the model's: 1 + the largest h.<i>). */
static bool check_gpt_names(const char *path, const CkptParam *params, int n, int ckpt_layers,
                            char *err, size_t errlen) {
  int L = 0;
  for (int i = 0; i < n; i++) {
    GptSlot s;
    int l;
    if (!parse_name(params[i].name, &s, &l)) {
      snprintf(err, errlen,
               "%s: parameter \"%s\" has no GPT-2 counterpart (pd2bw's GPT names are wte, wpe, "
               "h.<i>.{ln1_w,ln1_b,attn_w,attn_b,attnproj_w,attnproj_b,ln2_w,ln2_b,fc_w,fc_b,"
               "fcproj_w,fcproj_b}, lnf_w, lnf_b)",
               path, params[i].name);
      return false;
    }
    if (l + 1 > L) L = l + 1;
  }
  if (L != ckpt_layers) {
    snprintf(err, errlen, "%s: the checkpoint has %d transformer layers, the model %d", path,
             ckpt_layers, L);
    return false;
  }
  return true;
}

/* ---- llm.c ------------------------------------------------------------------- */
#define LLMC_MAX_DIM (1 << 20) /* maxT, Vp and C */
#define LLMC_MAX_LAYERS (1 << 12)

/* The header's NH against the model's head count (shapes cannot show it: 8 heads of 2
 * and 4 heads of 4 have the same tensors, but attention computes something else). */
static bool check_llmc_heads(const char *path, const CkptParam *params, int n, int64_t NH, int64_t C, char *err,
                             size_t errlen) {
  for (int i = 0; i < n; i++) {
    GptSlot s;
    int l;
    const CkptParam *p = &params[i];
    if (p->att_head_size <= 0 || !parse_name(p->name, &s, &l) || s != G_ATTN_W) continue;
    int64_t model_c = p->shape[0], hs = p->att_head_size;
    if (model_c % hs == 0 && model_c / hs == NH && model_c == C) continue;
    if (model_c != C) continue; /* a width mismatch: the shape check below names it */
    snprintf(err, errlen,
             "%s: offset 20: the llm.c header has NH=%lld attention heads (head size %lld), the model %lld "
             "(head size %lld, parameter \"%s\")",
             path, (long long)NH, (long long)(C / NH), (long long)(model_c / hs), (long long)hs, p->name);
    return false;
  }
  return true;
}

/* llm.c's model file (train_gpt2.c, gpt2_build_from_checkpoint and
 * fill_in_parameter_sizes): int32 header[256] = {20240326, version, maxT, V, L, NH, C,
 * Vp, ...}; version 3 holds float32, version 5 bfloat16; then 16 tensors, each holding
 * all L layers back to back: wte [Vp,C], wpe [maxT,C], ln1w [L,C], ln1b [L,C],
 * qkvw [L,3C,C], qkvb [L,3C], attprojw [L,C,C], attprojb [L,C], ln2w [L,C], ln2b [L,C],
 * fcw [L,4C,C], fcb [L,4C], fcprojw [L,C,4C], fcprojb [L,C], lnfw [C], lnfb [C] (rows
 * V..Vp of wte: padding). */
static bool import_llmc(const char *path, const CkptParam *params, int n, char *err,
                        size_t errlen) {
  size_t size;
  void *map = io_map_file(path, "checkpoint", 1024, &size, err, errlen);
  if (!map && size < 1024)
    snprintf(err, errlen, "%s: truncated: %zu bytes, shorter than llm.c's 1024-byte header", path, size);
  if (!map) return false;
  const int32_t *h = map;
  bool ok = false;
  float *tmp = NULL;
  if (h[0] != CKPT_LLMC_MAGIC) {
    snprintf(err, errlen, "%s: offset 0: bad magic %d (an llm.c model file starts with %d)", path,
             h[0], CKPT_LLMC_MAGIC);
    goto done;
  }
  if (h[1] != 3 && h[1] != 5) {
    snprintf(err, errlen,
             "%s: offset 4: unsupported llm.c model version %d (3 = float32 and 5 = bfloat16 "
             "are read)",
             path, h[1]);
    goto done;
  }
  int64_t maxT = h[2], V = h[3], L = h[4], NH = h[5], C = h[6], Vp = h[7];
  /* Bounds far above any GPT, so that the sizes below cannot overflow int64. */
  if (maxT <= 0 || V <= 0 || L <= 0 || NH <= 0 || C <= 0 || Vp < V || maxT > LLMC_MAX_DIM || Vp > LLMC_MAX_DIM ||
      C > LLMC_MAX_DIM || L > LLMC_MAX_LAYERS || C % NH != 0) {
    snprintf(err, errlen,
             "%s: offset 8: implausible header maxT=%lld V=%lld L=%lld NH=%lld C=%lld Vp=%lld", path,
             (long long)maxT, (long long)V, (long long)L, (long long)NH, (long long)C, (long long)Vp);
    goto done;
  }
  if (!check_llmc_heads(path, params, n, NH, C, err, errlen)) goto done;
  size_t elt = h[1] == 3 ? 4 : 2;
  /* Element counts of the 16 tensors, in file order (= GptSlot order). */
  int64_t rows[G_COUNT], count[G_COUNT], start[G_COUNT], total = 0;
  for (int s = 0; s < G_COUNT; s++) {
    rows[s] = slots[s].rows_c < 0 ? (s == G_WTE ? Vp : maxT) : slots[s].rows_c ? slots[s].rows_c * C : 1;
    count[s] = rows[s] * slots[s].cols_c * C * (slot_per_layer((GptSlot)s) ? L : 1);
    start[s] = total;
    total += count[s];
  }
  uint64_t want = 1024 + (uint64_t)total * elt;
  if (size != want) {
    snprintf(err, errlen,
             "%s: %s: %zu bytes, but maxT=%lld V=%lld (padded %lld) L=%lld C=%lld in %s need "
             "%llu",
             path, size < want ? "truncated" : "trailing bytes", size, (long long)maxT,
             (long long)V, (long long)Vp, (long long)L, (long long)C,
             elt == 4 ? "float32" : "bfloat16", (unsigned long long)want);
    goto done;
  }
  if (!check_gpt_names(path, params, n, (int)L, err, errlen)) goto done;
  for (int i = 0; i < n; i++) {
    const CkptParam *p = &params[i];
    GptSlot s;
    int l;
    parse_name(p->name, &s, &l);
    CkptSrc src = {.rank = slots[s].rows_c == 0 ? 1 : 2, .rows = rows[s], .cols = slots[s].cols_c * C, .min_rows = 1};
    if (s == G_WTE) src.min_rows = V;
    int64_t ne = src.rows * src.cols;
    int64_t first = start[s] + (l > 0 ? l : 0) * ne;
    tmp = pd_realloc(tmp, (size_t)ne * sizeof *tmp);
    const unsigned char *base = (const unsigned char *)map + 1024 + (size_t)first * elt;
    if (elt == 4) {
      memcpy(tmp, base, (size_t)ne * 4);
    } else {
      for (int64_t k = 0; k < ne; k++) {
        uint16_t b;
        memcpy(&b, base + 2 * k, 2);
        uint32_t bits = (uint32_t)b << 16;
        memcpy(&tmp[k], &bits, 4);
      }
    }
    src.data = tmp;
    src.rs = slots[s].linear ? 1 : src.cols; /* linear: stored [out = cols, in = rows] */
    src.cs = slots[s].linear ? src.rows : 1;
    snprintf(src.desc, sizeof src.desc, "llm.c tensor #%d%s", (int)s,
             slot_per_layer(s) ? ", one layer" : "");
    if (!ckpt_copy(p, gpt_rows(s), &src, path, err, errlen)) goto done;
  }
  ok = true;
done:
  free(tmp);
  munmap(map, size);
  return ok;
}

/* ---- Hugging Face and pd2bw safetensors ----------------------------------------- */
static const StTensor *find_tensor(const SafeTensors *st, const char *name, const CkptParam *p,
                                   char *err, size_t errlen) {
  const StTensor *t = st_find(st, name);
  if (!t) {
    snprintf(err, errlen, "%s: parameter \"%s\": the checkpoint has no tensor \"%s\"", st_path(st),
             p->name, name);
    return NULL;
  }
  return t;
}

static bool import_hf(const SafeTensors *st, const CkptParam *params, int n, char *err,
                      size_t errlen) {
  const char *prefix = st_find(st, "transformer.wte.weight") ? "transformer." : "";
  char name[256];
  int L = 0;
  for (;; L++) {
    snprintf(name, sizeof name, "%sh.%d.ln_1.weight", prefix, L);
    if (!st_find(st, name)) break;
  }
  if (!check_gpt_names(st_path(st), params, n, L, err, errlen)) return false;
  bool ok = true;
  float *tmp = NULL;
  for (int i = 0; i < n && ok; i++) {
    const CkptParam *p = &params[i];
    GptSlot s;
    int l;
    parse_name(p->name, &s, &l);
    if (l >= 0)
      snprintf(name, sizeof name, "%sh.%d.%s", prefix, l, slots[s].hf);
    else
      snprintf(name, sizeof name, "%s%s", prefix, slots[s].hf);
    const StTensor *t = find_tensor(st, name, p, err, errlen);
    CkptSrc src;
    if (!t || !ckpt_src_read(st, t, name, p, slots[s].rows_c == 0 ? 1 : 2, false, &tmp, &src, err, errlen)) {
      ok = false;
      break;
    }
    if (s == G_WTE) src.min_rows = src.rows;
    ok = ckpt_copy(p, gpt_rows(s), &src, st_path(st), err, errlen);
  }
  free(tmp);
  return ok;
}

static int by_name(const void *a, const void *b) { return strcmp(*(const char *const *)a, *(const char *const *)b); }

bool ckpt_check_extras(const SafeTensors *st, const char *const *names, int n, const char *what, char *err,
                       size_t errlen) {
  const char **sorted = pd_malloc(((size_t)n + 1) * sizeof *sorted);
  memcpy(sorted, names, (size_t)n * sizeof *sorted);
  qsort(sorted, (size_t)n, sizeof *sorted, by_name);
  static const char *const prefix[] = {"opt.m.", "opt.v.", "prev.", "next.", ""};
  int extra = 0;
  char list[400] = "";
  for (int i = 0; i < st_count(st); i++) {
    const char *t = st_tensor(st, i)->name, *key = t;
    bool known = false;
    for (int k = 0; k < 5 && !known; k++)
      if (strncmp(t, prefix[k], strlen(prefix[k])) == 0) {
        key = t + strlen(prefix[k]);
        known = bsearch(&key, sorted, (size_t)n, sizeof *sorted, by_name) != NULL;
      }
    if (known) continue;
    size_t at = strlen(list);
    if (extra < 4 && at + 8 < sizeof list)
      snprintf(list + at, sizeof list - at, "%s\"%.80s\"", at ? ", " : "", t);
    extra++;
  }
  free(sorted);
  if (!extra) return true;
  snprintf(err, errlen, "%s: %d tensor%s of no parameter of %s (%s%s): a checkpoint of another or bigger "
           "model? Refusing rather than dropping %s", st_path(st), extra, extra > 1 ? "s" : "", what, list,
           extra > 4 ? ", ..." : "", extra > 1 ? "them" : "it");
  return false;
}

static bool import_pd2bw(const SafeTensors *st, const CkptParam *params, int n, char *err,
                         size_t errlen) {
  /* a pd2bw checkpoint's optimizer state and other weight versions are not wanted by
   * --init, but a tensor of no parameter at all is a different model (issue 24, item 5) */
  const char **names = pd_malloc(((size_t)n + 1) * sizeof *names);
  for (int i = 0; i < n; i++) names[i] = params[i].name;
  bool ok = ckpt_check_extras(st, names, n, "the model", err, errlen);
  free(names);
  if (!ok) return false;
  for (int i = 0; i < n; i++) {
    const CkptParam *p = &params[i];
    const StTensor *t = find_tensor(st, p->name, p, err, errlen);
    if (!t) return false;
    bool same = t->rank == p->rank;
    for (int d = 0; same && d < p->rank; d++) same = t->shape[d] == p->shape[d];
    if (!same) {
      char a[64], b[64];
      snprintf(err, errlen, "%s: parameter \"%s\": the model wants %s, the checkpoint has %s",
               st_path(st), p->name, param_shape_str(p, a, sizeof a),
               st_shape_str(t->rank, t->shape, b, sizeof b));
      return false;
    }
    if (!st_read_f32(st, t, p->dst, err, errlen)) return false;
  }
  return true;
}

/* A Hugging Face directory: Llama's reader, or GPT-2's model.safetensors. */
static bool import_dir(const char *dir, const CkptParam *params, int n, const char *consts, char *err,
                       size_t errlen) {
  char *cfg_path = io_join(dir, "config.json");
  cJSON *cfg = io_read_json_object(cfg_path, "", err, errlen);
  const cJSON *mt = cJSON_GetObjectItemCaseSensitive(cfg, "model_type");
  bool ok = false;
  if (cfg && cJSON_IsString(mt) && strcmp(mt->valuestring, "gpt2") == 0) {
    char *model = io_join(dir, "model.safetensors");
    ok = ckpt_import(model, CKPT_HF, params, n, err, errlen);
    free(model);
  } else if (cfg) {
    ok = ckpt_import_llama_dir(dir, cfg_path, cfg, params, n, consts, err, errlen); /* names any other model_type */
  }
  cJSON_Delete(cfg);
  free(cfg_path);
  return ok;
}

bool ckpt_import(const char *path, CkptFormat fmt, const CkptParam *params, int n, char *err,
                 size_t errlen) {
  return ckpt_import_model(path, fmt, params, n, NULL, err, errlen);
}

bool ckpt_import_model(const char *path, CkptFormat fmt, const CkptParam *params, int n, const char *consts,
                       char *err, size_t errlen) {
  struct stat sb;
  if (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode)) return import_dir(path, params, n, consts, err, errlen);
  bool detect = fmt == CKPT_AUTO;
  if (detect) {
    int32_t magic = 0;
    char why[IO_ERR_LEN];
    int fd = io_open_regular(path, NULL, why, sizeof why); /* a FIFO: refused, never waited on */
    if (fd < 0) {
      snprintf(err, errlen, "%s: cannot open checkpoint: %s", path, why);
      return false;
    }
    ssize_t got = read(fd, &magic, 4);
    close(fd);
    if (got == 4 && magic == CKPT_LLMC_MAGIC) fmt = CKPT_LLMC;
  }
  if (fmt == CKPT_LLMC) return import_llmc(path, params, n, err, errlen);
  SafeTensors *st = st_open(path, err, errlen);
  if (!st) return false;
  if (detect) /* Hugging Face names, and not also ours */
    fmt =
        (st_find(st, "wte.weight") || st_find(st, "transformer.wte.weight")) && !st_find(st, "wte")
            ? CKPT_HF
            : CKPT_PD2BW;
  bool ok = fmt == CKPT_HF ? import_hf(st, params, n, err, errlen)
                           : import_pd2bw(st, params, n, err, errlen);
  st_close(st);
  return ok;
}
