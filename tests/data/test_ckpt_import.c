/* Checkpoint import (runtime/io/ckpt_import.c) on tiny GPT-2 checkpoints that this
 * test writes itself: llm.c model files (float32 v3, bfloat16 v5; with an
 * llm.c-format writer below, following llm.c's train_gpt2.c layout) and Hugging
 * Face / pd2bw safetensors; then every way they can be wrong. */
#include <sys/stat.h>

#include "runtime/io/io.h"
#include "test.h"
#include "test_util.h"

/* The tiny model: V = 10 padded to Vp = 16, maxT = 8, L = 2, NH = 2, C = 4. */
enum { V = 10, VP = 16, MAXT = 8, L = 2, NH = 2, C = 4 };

/* Every value is an integer below 256 in magnitude, so float32 and bfloat16
 * hold it exactly; within a tensor the values are distinct (7 is invertible
 * mod 251 and no tensor has 251 elements), so a wrong index shows. */
static float val(int tensor, int64_t j) { return (float)((tensor * 31 + j * 7) % 251 - 125); }

/* llm.c's 16 tensors: element counts, in file order. */
static int64_t llmc_count(int s) {
  static const int64_t counts[16] = {
      VP * C, MAXT * C, L * C,         L * C,     L * 3 * C * C, L * 3 * C, L * C * C, L * C,
      L * C,  L * C,    L * 4 * C * C, L * 4 * C, L * C * 4 * C, L * C,     C,         C};
  return counts[s];
}

/* Writes an llm.c model file; bf16 selects version 5. `cut` bytes are dropped
 * from the end. */
static void write_llmc(const char *path, int32_t magic, int32_t version, int32_t layers,
                       size_t cut) {
  int32_t hdr[256] = {magic, version, MAXT, V, layers, NH, C, VP};
  FILE *f = fopen(path, "wb");
  fwrite(hdr, sizeof hdr, 1, f);
  size_t written = sizeof hdr, total = sizeof hdr;
  int64_t scale = layers; /* per-layer tensors grow with the header's L */
  for (int s = 0; s < 16; s++) {
    int64_t n = llmc_count(s);
    if (s >= 2 && s <= 13) n = n / L * scale;
    total += (size_t)n * (version == 5 ? 2 : 4);
  }
  for (int s = 0; s < 16; s++) {
    int64_t n = llmc_count(s);
    if (s >= 2 && s <= 13) n = n / L * scale;
    for (int64_t j = 0; j < n; j++) {
      float x = val(s, j);
      size_t sz = version == 5 ? 2 : 4;
      if (written + sz > total - cut) break;
      if (version == 5) {
        uint32_t bits;
        memcpy(&bits, &x, 4);
        uint16_t b = (uint16_t)(bits >> 16);
        fwrite(&b, 2, 1, f);
      } else {
        fwrite(&x, 4, 1, f);
      }
      written += sz;
    }
  }
  fclose(f);
}

/* pd2bw's parameter list for the tiny model (wte rows and wpe rows adjustable). */
typedef struct Model {
  CkptParam p[2 + 12 * L + 2];
  int n;
  float *mem;
} Model;

static const char *layer_names[12] = {"ln1_w",      "ln1_b",      "attn_w",   "attn_b",
                                      "attnproj_w", "attnproj_b", "ln2_w",    "ln2_b",
                                      "fc_w",       "fc_b",       "fcproj_w", "fcproj_b"};
/* [rows, cols] in multiples of C; rows 0 = rank 1. Same order as llm.c. */
static const int layer_shape[12][2] = {{0, 1}, {0, 1}, {1, 3}, {0, 3}, {1, 1}, {0, 1},
                                       {0, 1}, {0, 1}, {1, 4}, {0, 4}, {4, 1}, {0, 1}};
static char names[64][32];

static void add(Model *m, const char *name, int rank, int64_t r, int64_t c) {
  CkptParam *p = &m->p[m->n++];
  p->name = name;
  p->rank = rank;
  p->shape[0] = rank == 2 ? r : c;
  p->shape[1] = rank == 2 ? c : 0;
}

static void model_init(Model *m, int64_t wte_rows, int64_t wpe_rows, int layers) {
  memset(m, 0, sizeof *m);
  add(m, "wte", 2, wte_rows, C);
  add(m, "wpe", 2, wpe_rows, C);
  for (int l = 0; l < layers; l++)
    for (int k = 0; k < 12; k++) {
      char *nm = names[l * 12 + k];
      snprintf(nm, 32, "h.%d.%s", l, layer_names[k]);
      int r = layer_shape[k][0], c = layer_shape[k][1];
      add(m, nm, r ? 2 : 1, r * C, c * C);
    }
  add(m, "lnf_w", 1, 0, C);
  add(m, "lnf_b", 1, 0, C);
  size_t total = 0;
  for (int i = 0; i < m->n; i++)
    total += (size_t)(m->p[i].shape[0] * (m->p[i].rank == 2 ? m->p[i].shape[1] : 1));
  m->mem = malloc(total * sizeof(float));
  for (size_t i = 0; i < total; i++) m->mem[i] = -999.0f; /* poison */
  float *at = m->mem;
  for (int i = 0; i < m->n; i++) {
    m->p[i].dst = at;
    at += m->p[i].shape[0] * (m->p[i].rank == 2 ? m->p[i].shape[1] : 1);
  }
}

static CkptParam *find(Model *m, const char *name) {
  for (int i = 0; i < m->n; i++)
    if (strcmp(m->p[i].name, name) == 0) return &m->p[i];
  return NULL;
}

/* Checks the model against llm.c's layout: non-linear tensors copy, linear
 * weights transpose ([out, in] -> [in, out]). */
static int check_llmc_values(Model *m, int64_t wte_rows) {
  int bad = 0;
  CkptParam *wte = find(m, "wte");
  for (int64_t r = 0; r < wte_rows; r++)
    for (int c = 0; c < C; c++) bad += wte->dst[r * C + c] != (r < VP ? val(0, r * C + c) : 0.0f);
  CkptParam *wpe = find(m, "wpe");
  for (int64_t j = 0; j < wpe->shape[0] * C; j++) bad += wpe->dst[j] != val(1, j);
  for (int l = 0; l < L; l++)
    for (int k = 0; k < 12; k++) {
      char nm[32];
      snprintf(nm, sizeof nm, "h.%d.%s", l, layer_names[k]);
      CkptParam *p = find(m, nm);
      int s = 2 + k; /* llm.c tensor index */
      int64_t per_layer = llmc_count(s) / L;
      if (layer_shape[k][0] == 0) {
        for (int64_t j = 0; j < per_layer; j++) bad += p->dst[j] != val(s, l * per_layer + j);
      } else {
        int64_t in = p->shape[0], out = p->shape[1];
        for (int64_t i = 0; i < in; i++)
          for (int64_t o = 0; o < out; o++)
            bad += p->dst[i * out + o] != val(s, l * per_layer + o * in + i);
      }
    }
  for (int j = 0; j < C; j++) bad += find(m, "lnf_w")->dst[j] != val(14, j);
  for (int j = 0; j < C; j++) bad += find(m, "lnf_b")->dst[j] != val(15, j);
  if (bad) fprintf(stderr, "  %d values differ\n", bad);
  return bad == 0;
}

static void test_llmc(void) {
  const char *p = tmp_path("gpt2_tiny.bin");
  char err[IO_ERR_LEN];
  for (int version = 3; version <= 5; version += 2) {
    write_llmc(p, CKPT_LLMC_MAGIC, version, L, 0);
    Model m;
    /* wte rows = V (the model ignores llm.c's padding), wpe 6 < maxT rows. */
    model_init(&m, V, 6, L);
    bool ok = ckpt_import(p, CKPT_AUTO, m.p, m.n, err, sizeof err);
    if (!ok) fprintf(stderr, "%s\n", err);
    EXPECT(ok && check_llmc_values(&m, V));
    free(m.mem);
    /* A model vocabulary beyond Vp gets zero rows. */
    model_init(&m, 20, MAXT, L);
    ok = ckpt_import(p, CKPT_LLMC, m.p, m.n, err, sizeof err);
    EXPECT(ok && check_llmc_values(&m, 20));
    free(m.mem);
  }
}

#define EXPECT_IMPORT_FAILS(path, fmt, model, ...)                                \
  do {                                                                            \
    char err_[IO_ERR_LEN] = "";                                                   \
    EXPECT(!ckpt_import((path), (fmt), (model).p, (model).n, err_, sizeof err_)); \
    EXPECT_MSG(err_, __VA_ARGS__);                                                \
  } while (0)

static void test_llmc_errors(void) {
  const char *p = tmp_path("bad.bin");
  Model m;
  model_init(&m, V, MAXT, L);
  write_llmc(p, 20240325, 3, L, 0);
  EXPECT_IMPORT_FAILS(p, CKPT_LLMC, m, "bad.bin: offset 0: bad magic 20240325");
  write_llmc(p, CKPT_LLMC_MAGIC, 4, L, 0);
  EXPECT_IMPORT_FAILS(p, CKPT_AUTO, m, "bad.bin: offset 4: unsupported llm.c model version 4");
  write_llmc(p, CKPT_LLMC_MAGIC, 3, L, 4);
  EXPECT_IMPORT_FAILS(p, CKPT_AUTO, m, "bad.bin: truncated", "L=2 C=4 in float32 need");
  /* A FIFO is refused at once, never waited on for a writer (issue 24), by format
   * detection and by the llm.c reader alike */
  EXPECT(mkfifo(tmp_path("fifo"), 0600) == 0);
  EXPECT_IMPORT_FAILS(tmp_path("fifo"), CKPT_AUTO, m, "fifo: cannot open checkpoint: a FIFO, not a regular file");
  EXPECT_IMPORT_FAILS(tmp_path("fifo"), CKPT_LLMC, m, "fifo: cannot open checkpoint: a FIFO, not a regular file");
  int32_t magic = CKPT_LLMC_MAGIC;
  write_bytes(p, &magic, 4); /* the magic alone */
  EXPECT_IMPORT_FAILS(p, CKPT_AUTO, m, "bad.bin: truncated: 4 bytes");
  /* Layers: the checkpoint has 2, this model 1. */
  write_llmc(p, CKPT_LLMC_MAGIC, 3, L, 0);
  Model one;
  model_init(&one, V, MAXT, 1);
  EXPECT_IMPORT_FAILS(p, CKPT_AUTO, one, "the checkpoint has 2 transformer layers, the model 1");
  free(one.mem);
  /* A shape mismatch names both shapes. */
  find(&m, "h.1.attn_w")->shape[1] = 2 * C;
  EXPECT_IMPORT_FAILS(p, CKPT_AUTO, m,
                      "parameter \"h.1.attn_w\": the model wants [4,8], the checkpoint has [4,12]");
  find(&m, "h.1.attn_w")->shape[1] = 3 * C;
  find(&m, "wpe")->shape[0] = MAXT + 1;
  EXPECT_IMPORT_FAILS(p, CKPT_AUTO, m, "\"wpe\": the model wants [9,4], the checkpoint has [8,4]",
                      "must not exceed");
  find(&m, "wpe")->shape[0] = MAXT;
  find(&m, "wte")->shape[0] = V - 1;
  EXPECT_IMPORT_FAILS(p, CKPT_AUTO, m, "\"wte\": the model wants [9,4]", "vocabulary must cover");
  find(&m, "wte")->shape[0] = V;
  /* The head count: no tensor shows it, the header's NH must match the model's. */
  for (int i = 0; i < m.n; i++) m.p[i].att_head_size = 1; /* C = 4: 4 heads of 1 */
  EXPECT_IMPORT_FAILS(p, CKPT_AUTO, m, "bad.bin: offset 20: the llm.c header has NH=2 attention heads (head size 2)",
                      "the model 4 (head size 1, parameter \"h.0.attn_w\")");
  for (int i = 0; i < m.n; i++) m.p[i].att_head_size = C / NH; /* the checkpoint's own: loads */
  char ok_err[IO_ERR_LEN];
  EXPECT(ckpt_import(p, CKPT_AUTO, m.p, m.n, ok_err, sizeof ok_err));
  int32_t three = 3; /* C = 4 is no multiple of 3 heads */
  FILE *f = fopen(p, "r+b");
  EXPECT(f && fseek(f, 20, SEEK_SET) == 0 && fwrite(&three, 4, 1, f) == 1 && fclose(f) == 0);
  EXPECT_IMPORT_FAILS(p, CKPT_AUTO, m, "bad.bin: offset 8: implausible header", "NH=3 C=4");
  write_llmc(p, CKPT_LLMC_MAGIC, 3, L, 0);
  m.p[3].name = "h.0.attn_q";
  EXPECT_IMPORT_FAILS(p, CKPT_AUTO, m, "parameter \"h.0.attn_q\" has no GPT-2 counterpart");
  free(m.mem);
}

/* Hugging Face GPT2LMHeadModel tensors for the same model, from llm.c's values
 * (transposed to Conv1D's [in, out], wte cut to V rows), as float32 or bf16. */
static bool write_hf(const char *path, const char *prefix, StDType dt, const char *skip) {
  Model m;
  model_init(&m, V, MAXT, L);
  write_llmc(tmp_path("src.bin"), CKPT_LLMC_MAGIC, 3, L, 0);
  char err[IO_ERR_LEN];
  if (!ckpt_import(tmp_path("src.bin"), CKPT_LLMC, m.p, m.n, err, sizeof err)) return false;
  static const char *hf[12] = {"ln_1.weight",      "ln_1.bias",          "attn.c_attn.weight",
                               "attn.c_attn.bias", "attn.c_proj.weight", "attn.c_proj.bias",
                               "ln_2.weight",      "ln_2.bias",          "mlp.c_fc.weight",
                               "mlp.c_fc.bias",    "mlp.c_proj.weight",  "mlp.c_proj.bias"};
  StEntry e[64];
  char nm[64][64];
  uint16_t *half = malloc(4096 * sizeof *half);
  size_t hoff = 0;
  int n = 0;
  for (int i = 0; i < m.n; i++) {
    const CkptParam *p = &m.p[i];
    int l;
    char suffix[32];
    if (sscanf(p->name, "h.%d.%31s", &l, suffix) == 2) {
      int k = 0;
      while (strcmp(layer_names[k], suffix) != 0) k++;
      snprintf(nm[n], 64, "%sh.%d.%s", prefix, l, hf[k]);
    } else {
      snprintf(nm[n], 64, "%s%s", prefix,
               strcmp(p->name, "wte") == 0     ? "wte.weight"
               : strcmp(p->name, "wpe") == 0   ? "wpe.weight"
               : strcmp(p->name, "lnf_w") == 0 ? "ln_f.weight"
                                               : "ln_f.bias");
    }
    if (skip && strcmp(nm[n], skip) == 0) continue;
    e[n] = (StEntry){.name = nm[n],
                     .dtype = dt,
                     .rank = p->rank,
                     .shape = {p->shape[0], p->shape[1]},
                     .data = p->dst};
    if (dt == ST_BF16) {
      int64_t ne = p->shape[0] * (p->rank == 2 ? p->shape[1] : 1);
      for (int64_t j = 0; j < ne; j++) {
        uint32_t bits;
        memcpy(&bits, &p->dst[j], 4);
        half[hoff + (size_t)j] = (uint16_t)(bits >> 16);
      }
      e[n].data = half + hoff;
      hoff += (size_t)ne;
    }
    n++;
  }
  /* Buffers and the tied head that the importer must ignore. */
  float junk[V * C] = {0};
  snprintf(nm[n], 64, "%sh.0.attn.bias", prefix);
  e[n] = (StEntry){.name = nm[n], .dtype = ST_F32, .rank = 2, .shape = {2, 2}, .data = junk};
  n++;
  e[n++] = (StEntry){
      .name = "lm_head.weight", .dtype = ST_F32, .rank = 2, .shape = {V, C}, .data = junk};
  const char *meta[] = {"format", "pt"};
  bool ok = st_write(path, e, n, meta, 1, err, sizeof err);
  if (!ok) fprintf(stderr, "%s\n", err);
  free(half);
  free(m.mem);
  return ok;
}

static void test_hf(void) {
  const char *p = tmp_path("model.safetensors");
  char err[IO_ERR_LEN];
  const char *prefixes[2] = {"transformer.", ""};
  for (int v = 0; v < 2; v++) {
    EXPECT(write_hf(p, prefixes[v], v ? ST_BF16 : ST_F32, NULL));
    Model m;
    model_init(&m, V, 6, L);
    bool ok = ckpt_import(p, CKPT_AUTO, m.p, m.n, err, sizeof err);
    if (!ok) fprintf(stderr, "%s\n", err);
    EXPECT(ok && check_llmc_values(&m, V));
    free(m.mem);
    /* Padded vocabulary: rows V.. are zero. */
    model_init(&m, VP, MAXT, L);
    ok = ckpt_import(p, CKPT_HF, m.p, m.n, err, sizeof err);
    EXPECT(ok && find(&m, "wte")->dst[V * C] == 0.0f && find(&m, "wte")->dst[VP * C - 1] == 0.0f);
    free(m.mem);
  }
}

static void test_hf_errors(void) {
  const char *p = tmp_path("model.safetensors");
  Model m;
  model_init(&m, V, MAXT, L);
  EXPECT(write_hf(p, "transformer.", ST_F32, "transformer.h.1.mlp.c_fc.bias"));
  EXPECT_IMPORT_FAILS(p, CKPT_AUTO, m,
                      "model.safetensors: parameter \"h.1.fc_b\": the checkpoint has no tensor "
                      "\"transformer.h.1.mlp.c_fc.bias\"");
  EXPECT(write_hf(p, "", ST_F32, NULL));
  find(&m, "h.0.fcproj_w")->shape[0] = 3 * C;
  EXPECT_IMPORT_FAILS(p, CKPT_AUTO, m,
                      "\"h.0.fcproj_w\": the model wants [12,4], the checkpoint has [16,4] "
                      "(\"h.0.mlp.c_proj.weight\")");
  find(&m, "h.0.fcproj_w")->shape[0] = 4 * C;
  Model one;
  model_init(&one, V, MAXT, 1);
  EXPECT_IMPORT_FAILS(p, CKPT_AUTO, one, "the checkpoint has 2 transformer layers, the model 1");
  free(one.mem);
  /* A corrupt header reaches the user as st_open's message. */
  write_bytes(p, "\xff\xff\x00\x00\x00\x00\x00\x00{}", 10);
  EXPECT_IMPORT_FAILS(p, CKPT_AUTO, m,
                      "model.safetensors: offset 0: header length 65535 runs past");
  free(m.mem);
}

/* pd2bw's own checkpoints: the same names, exact shapes. */
static void test_pd2bw_format(void) {
  Model src, dst;
  model_init(&src, V, MAXT, L);
  char err[IO_ERR_LEN];
  write_llmc(tmp_path("src.bin"), CKPT_LLMC_MAGIC, 3, L, 0);
  EXPECT(ckpt_import(tmp_path("src.bin"), CKPT_AUTO, src.p, src.n, err, sizeof err));
  StEntry e[64];
  for (int i = 0; i < src.n; i++)
    e[i] = (StEntry){.name = src.p[i].name,
                     .dtype = ST_F32,
                     .rank = src.p[i].rank,
                     .shape = {src.p[i].shape[0], src.p[i].shape[1]},
                     .data = src.p[i].dst};
  const char *p = tmp_path("ckpt.safetensors");
  EXPECT(st_write(p, e, src.n, NULL, 0, err, sizeof err));
  model_init(&dst, V, MAXT, L);
  EXPECT(ckpt_import(p, CKPT_AUTO, dst.p, dst.n, err, sizeof err));
  EXPECT(check_llmc_values(&dst, V));
  /* Exact shapes only: no leniency for our own checkpoints. */
  find(&dst, "wpe")->shape[0] = 6;
  EXPECT_IMPORT_FAILS(p, CKPT_AUTO, dst,
                      "parameter \"wpe\": the model wants [6,4], the checkpoint has [8,4]");
  free(src.mem);
  free(dst.mem);
}

int main(void) {
  tmp_init("ckpt");
  RUN(test_llmc);
  RUN(test_llmc_errors);
  RUN(test_hf);
  RUN(test_hf_errors);
  RUN(test_pd2bw_format);
  tmp_cleanup(test_failed_);
  return TEST_REPORT();
}
