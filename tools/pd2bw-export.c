/* tools/pd2bw-export.c — a pd2bw checkpoint of a GPT-2-shaped model, written for
 * the programs GPT-2 users already have: a Hugging Face GPT-2 directory and an
 * llm.c model file. The inverse of pd2bwrun --init (runtime/io/ckpt_import.c); a
 * models/llama.model checkpoint becomes a LlamaForCausalLM directory (export_llama.c).
 * Users: docs/data.md ("Checkpoints").
 *
 *   pd2bw-export CKPT.safetensors [--heads N] [--vocab-size V] [--hf DIR] [--llmc FILE.bin]
 *                [--force] [--kv-heads N] [--rope-theta T] [--rms-eps E]
 *
 * Head counts shape no tensor: the checkpoint's "consts" metadata records them (gpt_heads).
 * Optimizer state and 2BW's other versions are left out (export_is_optimizer_state); any
 * other unknown tensor is an error. Outputs appear whole or not at all (write_outputs),
 * and an existing one is the user's: replaced only with --force (check_outputs). */
#include <cjson/cJSON.h>
#include <math.h>
#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tools/export.h"

typedef ExportOptions Options;

/* The model read from the checkpoint: every GPT-2 tensor as float32. */
typedef struct Gpt2 {
  int64_t V, Vp, T, C, L;
  float **w; /* [kind · (L + 1) + layer], layer 0 for the per-model kinds */
  const char *step;
} Gpt2;

static float **slot(Gpt2 *g, int kind, int layer) { return &g->w[kind * (g->L + 1) + layer]; }

static void usage(FILE *out) {
  fprintf(out,
          "usage: pd2bw-export CKPT.safetensors [--heads N] [--vocab-size V]\n"
          "                    [--hf DIR] [--llmc FILE.bin] [--force]\n"
          "                    [--kv-heads N] [--rope-theta T] [--rms-eps E]\n"
          "                    [--max-shard-size S]\n"
          "\n"
          "Writes a pd2bw checkpoint (pd2bwrun --save) of a GPT-2-shaped model as\n"
          "  --hf DIR          a Hugging Face GPT-2 directory: model.safetensors, config.json\n"
          "  --llmc FILE.bin   an llm.c model file (gpt2_*.bin layout, float32)\n"
          "or of models/llama.model as --hf DIR, a Hugging Face LlamaForCausalLM directory.\n"
          "The checkpoint records the model's shape attributes; for one written before it\n"
          "did, give them:\n"
          "  --heads N         attention heads\n"
          "  --kv-heads N      Llama: key/value heads (default: --heads)\n"
          "  --rope-theta T    Llama: rotary base\n"
          "  --rms-eps E       Llama: RMSNorm epsilon\n"
          "  --vocab-size V    the real vocabulary when wte is padded (default: wte's rows)\n"
          "  --max-shard-size S  Llama: shards of at most S (\"5GB\", \"500MiB\", bytes) and their\n"
          "                    index when the tensors take more, as save_pretrained does\n"
          "  --force           replace existing outputs\n");
}

int export_fail(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "pd2bw-export: error: ");
  vfprintf(stderr, fmt, ap);
  fprintf(stderr, "\n");
  va_end(ap);
  return 1;
}

static bool parse_long(const char *s, long *out) {
  char *end;
  errno = 0;
  long v = strtol(s, &end, 10);
  if (end == s || *end || errno || v <= 0 || v > (1L << 30)) return false;
  *out = v;
  return true;
}

static int parse_args(int argc, char **argv, Options *o) {
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    bool has_val = i + 1 < argc;
    if (strcmp(a, "--hf") == 0 && has_val) {
      o->hf = argv[++i];
    } else if (strcmp(a, "--llmc") == 0 && has_val) {
      o->llmc = argv[++i];
    } else if (strcmp(a, "--heads") == 0 && has_val) {
      if (!parse_long(argv[++i], &o->heads))
        return export_fail("--heads %s: expected an integer from 1 to 1073741824", argv[i]);
    } else if (strcmp(a, "--kv-heads") == 0 && has_val) {
      if (!parse_long(argv[++i], &o->kv_heads))
        return export_fail("--kv-heads %s: expected an integer from 1 to 1073741824", argv[i]);
    } else if ((strcmp(a, "--rope-theta") == 0 || strcmp(a, "--rms-eps") == 0) && has_val) {
      char *end;
      double v = strtod(argv[++i], &end);
      if (*end || end == argv[i] || !(v > 0) || !isfinite(v)) return export_fail("%s %s: expected a positive number", a, argv[i]);
      *(a[2] == 'r' && a[3] == 'o' ? &o->rope_theta : &o->rms_eps) = v;
    } else if (strcmp(a, "--vocab-size") == 0 && has_val) {
      if (!parse_long(argv[++i], &o->vocab))
        return export_fail("--vocab-size %s: expected an integer from 1 to 1073741824", argv[i]);
    } else if (strcmp(a, "--max-shard-size") == 0 && has_val) {
      if (!export_parse_size(argv[++i], &o->max_shard))
        return export_fail("--max-shard-size %s: expected a size: bytes, or a number with KB, MB, GB, KiB, MiB or GiB",
                           argv[i]);
    } else if (strcmp(a, "--force") == 0) {
      o->force = true;
    } else if (a[0] != '-' && !o->ckpt) {
      o->ckpt = a;
    } else {
      export_fail("unknown or incomplete option %s", a);
      usage(stderr);
      return 1;
    }
  }
  if (!o->ckpt) return export_fail("no checkpoint given");
  if (!o->hf && !o->llmc) return export_fail("nothing to write: give --hf DIR and/or --llmc FILE");
  return 0;
}

/* The checkpoint name of kind k in layer l ("wte", "h.3.fc_w"). */
static void pd_name(int k, int l, char *buf, size_t n) {
  CkptGpt2Kind g = ckpt_gpt2_kind(k);
  if (g.per_layer)
    snprintf(buf, n, "h.%d.%s", l, g.pd);
  else
    snprintf(buf, n, "%s", g.pd);
}

/* The GPT-2 shape of kind k, pd2bw orientation; returns the rank. */
static int kind_shape(const Gpt2 *g, int k, int64_t shape[2]) {
  CkptGpt2Kind d = ckpt_gpt2_kind(k);
  if (d.rows_c == 0) {
    shape[0] = d.cols_c * g->C;
    return 1;
  }
  shape[0] = d.rows_c < 0 ? (strcmp(d.pd, "wte") == 0 ? g->Vp : g->T) : d.rows_c * g->C;
  shape[1] = d.cols_c * g->C;
  return 2;
}

bool export_is_optimizer_state(const char *name) {
  return strncmp(name, "opt.m.", 6) == 0 || strncmp(name, "opt.v.", 6) == 0 ||
         strncmp(name, "prev.", 5) == 0 || strncmp(name, "next.", 5) == 0;
}

/* Reads and checks the checkpoint; false after printing the error. */
static bool read_gpt2(const Options *o, SafeTensors *st, Gpt2 *g) {
  const char *path = o->ckpt, *format = st_meta(st, "format");
  char err[IO_ERR_LEN], name[64], a[64], b[64];
  if (!format || strcmp(format, "pd2bw") != 0) {
    export_fail("%s: not a pd2bw checkpoint (metadata format %s%s%s; pd2bwrun --save writes \"pd2bw\")",
         path, format ? "\"" : "", format ? format : "missing", format ? "\"" : "");
    return false;
  }
  const StTensor *wte = st_find(st, "wte"), *wpe = st_find(st, "wpe");
  if (!wte || !wpe || wte->rank != 2 || wpe->rank != 2) {
    export_fail("%s: not GPT-2-shaped: %s", path,
         !wte ? "no tensor \"wte\"" : !wpe ? "no tensor \"wpe\"" : "wte and wpe must be matrices");
    return false;
  }
  g->Vp = wte->shape[0];
  g->C = wte->shape[1];
  g->T = wpe->shape[0];
  for (g->L = 0;; g->L++) {
    snprintf(name, sizeof name, "h.%lld.ln1_w", (long long)g->L);
    if (!st_find(st, name)) break;
  }
  if (g->L == 0) {
    export_fail("%s: not GPT-2-shaped: no transformer layer (no tensor \"h.0.ln1_w\")", path);
    return false;
  }
  g->step = st_meta(st, "step");
  g->w = pd_calloc((size_t)(CKPT_GPT2_KINDS * (g->L + 1)), sizeof *g->w);
  for (int k = 0; k < CKPT_GPT2_KINDS; k++)
    for (int l = 0; l < (ckpt_gpt2_kind(k).per_layer ? g->L : 1); l++) {
      pd_name(k, l, name, sizeof name);
      const StTensor *t = st_find(st, name);
      if (!t) {
        export_fail("%s: not GPT-2-shaped: no tensor \"%s\" (%lld layers, as h.<i>.ln1_w says)", path, name,
             (long long)g->L);
        return false;
      }
      int64_t shape[2];
      int rank = kind_shape(g, k, shape);
      if (t->rank != rank || t->shape[0] != shape[0] || (rank == 2 && t->shape[1] != shape[1])) {
        export_fail("%s: not GPT-2-shaped: \"%s\" is %s, GPT-2 wants %s (n_embd %lld from wte)", path, name,
             st_shape_str(t->rank, t->shape, a, sizeof a), st_shape_str(rank, shape, b, sizeof b),
             (long long)g->C);
        return false;
      }
      float *w = pd_malloc((size_t)t->numel * sizeof *w + 1);
      *slot(g, k, l) = w;
      if (!st_read_f32(st, t, w, err, sizeof err)) {
        export_fail("%s", err);
        return false;
      }
    }
  for (int i = 0; i < st_count(st); i++) {
    const char *n = st_tensor(st, i)->name;
    bool known = export_is_optimizer_state(n);
    for (int k = 0; k < CKPT_GPT2_KINDS && !known; k++)
      for (int l = 0; l < (ckpt_gpt2_kind(k).per_layer ? g->L : 1) && !known; l++) {
        pd_name(k, l, name, sizeof name);
        known = strcmp(name, n) == 0;
      }
    if (!known) {
      export_fail("%s: not GPT-2-shaped: tensor \"%s\" has no GPT-2 counterpart", path, n);
      return false;
    }
  }
  return true;
}

/* ---- Hugging Face ----------------------------------------------------------- */
static char *hf_config(const Gpt2 *g, long heads) {
  cJSON *c = cJSON_CreateObject();
  cJSON *arch = cJSON_AddArrayToObject(c, "architectures");
  cJSON_AddItemToArray(arch, cJSON_CreateString("GPT2LMHeadModel"));
  cJSON_AddStringToObject(c, "model_type", "gpt2");
  cJSON_AddNumberToObject(c, "vocab_size", (double)g->V);
  cJSON_AddNumberToObject(c, "n_positions", (double)g->T);
  cJSON_AddNumberToObject(c, "n_ctx", (double)g->T);
  cJSON_AddNumberToObject(c, "n_embd", (double)g->C);
  cJSON_AddNumberToObject(c, "n_layer", (double)g->L);
  cJSON_AddNumberToObject(c, "n_head", (double)heads);
  cJSON_AddNullToObject(c, "n_inner"); /* 4 · n_embd */
  /* pd2bw's gelu is the tanh form, its layer norms use eps 1e-5 (models/gpt.model). */
  cJSON_AddStringToObject(c, "activation_function", "gelu_new");
  cJSON_AddNumberToObject(c, "layer_norm_epsilon", 1e-5);
  cJSON_AddNumberToObject(c, "resid_pdrop", 0.1);
  cJSON_AddNumberToObject(c, "embd_pdrop", 0.1);
  cJSON_AddNumberToObject(c, "attn_pdrop", 0.1);
  cJSON_AddNumberToObject(c, "initializer_range", 0.02);
  cJSON_AddBoolToObject(c, "scale_attn_weights", true);
  cJSON_AddBoolToObject(c, "tie_word_embeddings", true);
  if (g->V > 50256) { /* GPT-2's <|endoftext|>; transformers' default, wrong for a smaller vocabulary */
    cJSON_AddNumberToObject(c, "bos_token_id", 50256);
    cJSON_AddNumberToObject(c, "eos_token_id", 50256);
  } else {
    cJSON_AddNullToObject(c, "bos_token_id");
    cJSON_AddNullToObject(c, "eos_token_id");
  }
  cJSON_AddStringToObject(c, "torch_dtype", "float32");
  char *text = cJSON_Print(c);
  cJSON_Delete(c);
  return text;
}

/* Starts both files of the directory (uncommitted in st_af, cfg_af). pd2bw's GPT tensors
 * already have GPT-2's Conv1D layout ([in, out]), so this is a rename
 * (h.3.attn_w -> transformer.h.3.attn.c_attn.weight) plus config.json. */
static bool hf_begin(Gpt2 *g, long heads, const char *dir, AtomicFile *st_af, AtomicFile *cfg_af,
                     char *err, size_t errlen) {
  int n = 0;
  StEntry *e = pd_calloc((size_t)(CKPT_GPT2_KINDS * g->L), sizeof *e);
  char (*names)[96] = pd_calloc((size_t)(CKPT_GPT2_KINDS * g->L), sizeof *names);
  for (int k = 0; k < CKPT_GPT2_KINDS; k++) {
    CkptGpt2Kind d = ckpt_gpt2_kind(k);
    for (int l = 0; l < (d.per_layer ? g->L : 1); l++, n++) {
      if (d.per_layer)
        snprintf(names[n], sizeof names[n], "transformer.h.%d.%s", l, d.hf);
      else
        snprintf(names[n], sizeof names[n], "transformer.%s", d.hf);
      e[n].name = names[n];
      e[n].dtype = ST_F32;
      e[n].rank = kind_shape(g, k, e[n].shape);
      if (strcmp(d.pd, "wte") == 0) e[n].shape[0] = g->V; /* the padding rows stay behind */
      e[n].data = *slot(g, k, l);
    }
  }
  const char *meta[] = {"format", "pt"}; /* transformers refuses files without it */
  char *st_path = io_join(dir, "model.safetensors"), *cfg_path = io_join(dir, "config.json");
  bool ok = st_write_uncommitted(st_af, st_path, e, n, meta, 1, err, errlen);
  if (ok && atomic_open(cfg_af, cfg_path, err, errlen)) {
    char *cfg = hf_config(g, heads);
    atomic_write(cfg_af, cfg, strlen(cfg));
    atomic_write(cfg_af, "\n", 1);
    cJSON_free(cfg);
  } else {
    ok = false;
  }
  free(st_path);
  free(cfg_path);
  free(names);
  free(e);
  return ok;
}

/* ---- llm.c -------------------------------------------------------------------- */
/* llm.c stores linear weights [out, in], all layers of a kind back to back, after its
 * 1024-byte header (version 3, float32): runtime/io/ckpt_import.c import_llmc. */
static bool llmc_begin(Gpt2 *g, long heads, const char *path, AtomicFile *af, char *err, size_t errlen) {
  if (!atomic_open(af, path, err, errlen)) return false;
  int32_t h[256] = {CKPT_LLMC_MAGIC, 3, (int32_t)g->T, (int32_t)g->V, (int32_t)g->L, (int32_t)heads,
                    (int32_t)g->C, (int32_t)g->Vp};
  atomic_write(af, h, sizeof h);
  float *tr = NULL;
  for (int k = 0; k < CKPT_GPT2_KINDS; k++) {
    CkptGpt2Kind d = ckpt_gpt2_kind(k);
    int64_t shape[2];
    int rank = kind_shape(g, k, shape);
    int64_t rows = rank == 2 ? shape[0] : 1, cols = rank == 2 ? shape[1] : shape[0];
    for (int l = 0; l < (d.per_layer ? g->L : 1); l++) {
      const float *w = *slot(g, k, l);
      if (d.linear) { /* [in, out] -> llm.c's [out, in] */
        tr = pd_realloc(tr, (size_t)(rows * cols) * sizeof *tr);
        for (int64_t r = 0; r < rows; r++)
          for (int64_t c = 0; c < cols; c++) tr[c * rows + r] = w[r * cols + c];
        w = tr;
      }
      atomic_write(af, w, (size_t)(rows * cols) * sizeof *w);
    }
  }
  free(tr);
  return true;
}

/* ---- outputs -------------------------------------------------------------------- */
static bool exists(const char *path) {
  struct stat sb;
  return lstat(path, &sb) == 0;
}

/* Refuses outputs that would replace something without --force (in a --hf directory
 * only model.safetensors and config.json are replaced). */
static bool check_outputs(const Options *o) {
  if (o->llmc && exists(o->llmc) && !o->force) {
    export_fail("--llmc %s: %s exists (give --force to replace it)", o->llmc, o->llmc);
    return false;
  }
  struct stat sb;
  if (o->hf && stat(o->hf, &sb) == 0) {
    if (!S_ISDIR(sb.st_mode)) {
      export_fail("--hf %s: exists and is not a directory", o->hf);
      return false;
    }
    const char *files[] = {"model.safetensors", "config.json", "model.safetensors.index.json"};
    for (int i = 0; i < 3 && !o->force; i++) {
      char *p = io_join(o->hf, files[i]);
      bool there = exists(p);
      if (there) export_fail("--hf %s: %s exists (give --force to replace it)", o->hf, p);
      free(p);
      if (there) return false;
    }
    char *shard = o->force ? NULL : export_hf_shard_in(o->hf);
    if (shard) export_fail("--hf %s: %s/%s exists (give --force to replace it)", o->hf, o->hf, shard);
    free(shard);
    if (shard) return false;
  }
  return true;
}

/* No output names the checkpoint it reads (runtime/io/io.h output_paths_check), before
 * it is read: --llmc, and --hf's two files where the directory exists (a new one holds
 * nothing). Returns 0, or 1 after an error. */
static int check_paths(const Options *o) {
  char err[IO_ERR_LEN];
  struct stat sb;
  bool dir = o->hf && stat(o->hf, &sb) == 0 && S_ISDIR(sb.st_mode);
  size_t n = dir ? strlen(o->hf) + 8 : 0;
  char *flag = dir ? pd_malloc(n) : NULL;
  if (flag) snprintf(flag, n, "--hf %s:", o->hf);
  char *st = dir ? io_join(o->hf, "model.safetensors") : NULL, *cfg = dir ? io_join(o->hf, "config.json") : NULL;
  PathFlag outs[] = {{"--llmc", o->llmc, false}, {flag, st, false}, {flag, cfg, false}};
  PathFlag in = {"the checkpoint", o->ckpt, false};
  bool ok = output_paths_check(outs, 3, &in, 1, err, sizeof err);
  free(flag);
  free(st);
  free(cfg);
  return ok ? 0 : export_fail("%s", err);
}

/* Removes what a failed export left in a directory it made, and the directory. */
static void remove_made_dir(const char *dir) {
  char *p = io_join(dir, "model.safetensors");
  unlink(p);
  free(p);
  p = io_join(dir, "config.json");
  unlink(p);
  free(p);
  rmdir(dir);
}

/* Temporary files, renamed once all succeeded; a directory we created is removed on
 * failure. */
static int write_outputs(const Options *o, Gpt2 *g) {
  char err[IO_ERR_LEN];
  if (!check_outputs(o)) return 1;
  bool made_dir = false;
  if (o->hf && !exists(o->hf)) {
    if (mkdir(o->hf, 0777) != 0) return export_fail("--hf %s: cannot create the directory: %s", o->hf, strerror(errno));
    made_dir = true;
  }
  AtomicFile st_af = {0}, cfg_af = {0}, llmc_af = {0};
  bool ok = (!o->hf || hf_begin(g, o->heads, o->hf, &st_af, &cfg_af, err, sizeof err)) &&
            (!o->llmc || llmc_begin(g, o->heads, o->llmc, &llmc_af, err, sizeof err));
  /* All written: now the renames. */
  if (ok && st_af.f) ok = atomic_commit(&st_af, err, sizeof err);
  if (ok && cfg_af.f) ok = atomic_commit(&cfg_af, err, sizeof err);
  if (ok && llmc_af.f) ok = atomic_commit(&llmc_af, err, sizeof err);
  if (!ok) {
    atomic_abort(&st_af);
    atomic_abort(&cfg_af);
    atomic_abort(&llmc_af);
    if (made_dir) remove_made_dir(o->hf); /* ours: a rename may have happened before the failing one */
    return export_fail("%s", err);
  }
  printf("pd2bw-export: GPT-2 with %lld layers, n_embd %lld, %ld heads, context %lld, vocab %lld "
         "(wte rows %lld), step %s of %s\n",
         (long long)g->L, (long long)g->C, o->heads, (long long)g->T, (long long)g->V, (long long)g->Vp,
         g->step ? g->step : "?", o->ckpt);
  if (o->hf) printf("  Hugging Face: %s/model.safetensors, %s/config.json\n", o->hf, o->hf);
  if (o->llmc) printf("  llm.c: %s (version 3, float32)\n", o->llmc);
  return 0;
}

int export_hf_dir_begin(const ExportOptions *o, bool *made_dir) {
  *made_dir = false;
  if (!check_outputs(o)) return 1;
  if (!exists(o->hf)) {
    if (mkdir(o->hf, 0777) != 0) return export_fail("--hf %s: cannot create the directory: %s", o->hf, strerror(errno));
    *made_dir = true;
  }
  return 0;
}

int export_hf_dir_commit(const ExportOptions *o, bool made_dir, bool ok, AtomicFile *st_af, AtomicFile *cfg_af,
                         char *err) {
  if (ok) ok = atomic_commit(st_af, err, IO_ERR_LEN);
  if (ok) ok = atomic_commit(cfg_af, err, IO_ERR_LEN);
  if (ok) return 0;
  atomic_abort(st_af);
  atomic_abort(cfg_af);
  if (made_dir) remove_made_dir(o->hf); /* ours: a rename may have happened before the failing one */
  return export_fail("%s", err);
}

/* The head count of a GPT-2 checkpoint: --heads, or its "consts" metadata (pd2bwrun
 * records the plan's model.consts); both must agree. 0 after an error. */
static long gpt_heads(const Options *o, const SafeTensors *st) {
  const char *meta = st_meta(st, "consts");
  cJSON *consts = meta ? cJSON_Parse(meta) : NULL;
  const cJSON *h = cJSON_GetObjectItemCaseSensitive(consts, "heads");
  long rec = cJSON_IsNumber(h) && h->valuedouble >= 1 && h->valuedouble <= (1 << 30) ? (long)h->valuedouble : 0;
  cJSON_Delete(consts);
  if (rec && o->heads && rec != o->heads) {
    export_fail("--heads %ld: the checkpoint records heads = %ld", o->heads, rec);
    return 0;
  }
  if (!rec && !o->heads) {
    export_fail("--heads N is required (the checkpoint does not record it: written before pd2bwrun recorded "
                "the model's consts)");
    return 0;
  }
  return rec ? rec : o->heads;
}

int main(int argc, char **argv) {
  if (argc < 2) {
    usage(stderr);
    return 1;
  }
  if (strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0) {
    usage(stdout);
    return 0;
  }
  Options o = {0};
  if (parse_args(argc, argv, &o) || check_paths(&o)) return 1;
  char err[IO_ERR_LEN];
  SafeTensors *st = st_open(o.ckpt, err, sizeof err);
  if (!st) return export_fail("%s", err);
  const char *format = st_meta(st, "format");
  bool llama = st_find(st, "embed") && format && strcmp(format, "pd2bw") == 0; /* models/llama.model's names */
  if (!llama && o.max_shard) {
    st_close(st);
    return export_fail("--max-shard-size: shards are written for a Llama checkpoint only; %s is GPT-2's", o.ckpt);
  }
  if (llama) {
    int rc = export_llama(&o, st);
    st_close(st);
    return rc;
  }
  Gpt2 g = {0};
  int rc = read_gpt2(&o, st, &g) ? 0 : 1;
  if (!rc && !(o.heads = gpt_heads(&o, st))) rc = 1;
  if (!rc && g.C % o.heads != 0)
    rc = export_fail("--heads %ld: n_embd %lld is not a multiple of --heads %ld", o.heads, (long long)g.C, o.heads);
  g.V = o.vocab ? o.vocab : g.Vp;
  if (!rc && g.V > g.Vp)
    rc = export_fail("--vocab-size %ld: the checkpoint's wte has %lld rows", o.vocab, (long long)g.Vp);
  if (!rc && (g.Vp > INT32_MAX || g.T > INT32_MAX || g.C > INT32_MAX / 4))
    rc = export_fail("%s: too large for llm.c's int32 header", o.ckpt);
  if (!rc) rc = write_outputs(&o, &g);
  for (int64_t i = 0; g.w && i < CKPT_GPT2_KINDS * (g.L + 1); i++) free(g.w[i]);
  free(g.w);
  st_close(st);
  return rc;
}
