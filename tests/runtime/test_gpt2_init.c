/* Starting from an existing GPT-2 checkpoint (issue "Numerics", done-when): a
 * random-weight GPT-2 written in Hugging Face's model.safetensors layout and in
 * llm.c's gpt2_*.bin layout loads into the plan of models/gpt.model, and the loss
 * of the first step on random tokens is ln(V) ± 0.1 — weights of std 0.02 give
 * near-uniform predictions, so anything else means a misplaced or mis-transposed
 * tensor. Both files carry the SAME weights, so the two losses must also agree. */
#include "codegen/codegen.h"
#include "frontend/frontend.h"
#include "passes/passes.h"
#include "runtime/pipeline/pipeline.h"
#include "test.h"

#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

enum { V = 50257, T = 32, L = 2, C = 64, NH = 4, B = 2 };

static char dir[256];

static const char *path(const char *name) {
  static char b[4][512];
  static int k;
  char *p = b[k++ & 3];
  snprintf(p, 512, "%s/%s", dir, name);
  return p;
}

/* Deterministic N(0, std²) (Box-Muller over an LCG): the test needs any fixed
 * random weights, not pd2bw's own initialiser. */
static uint64_t lcg = 12345;
static double uniform(void) {
  lcg = lcg * 6364136223846793005ull + 1442695040888963407ull;
  return ((double)(lcg >> 11) + 0.5) / 9007199254740992.0;
}
static void fill_normal(float *w, int64_t n, double std) {
  for (int64_t i = 0; i < n; i++) w[i] = (float)(std * sqrt(-2 * log(uniform())) * cos(6.283185307179586 * uniform()));
}
static void fill_const(float *w, int64_t n, float v) {
  for (int64_t i = 0; i < n; i++) w[i] = v;
}

/* The GPT-2 tensors in HF's layout ([in, out] Conv1D weights). */
typedef struct Gpt2 {
  float *wte, *wpe, *lnf_w, *lnf_b;
  float *ln1_w[L], *ln1_b[L], *attn_w[L], *attn_b[L], *proj_w[L], *proj_b[L];
  float *ln2_w[L], *ln2_b[L], *fc_w[L], *fc_b[L], *fcproj_w[L], *fcproj_b[L];
} Gpt2;

/* every weight array, to free at the end */
static float *allocated[8 + 16 * L];
static int nallocated;

static float *alloc_w(int64_t n) { return allocated[nallocated++] = malloc((size_t)n * sizeof(float)); }

static float *alloc_normal(int64_t n, double std) {
  float *w = alloc_w(n);
  fill_normal(w, n, std);
  return w;
}
static float *alloc_const(int64_t n, float v) {
  float *w = alloc_w(n);
  fill_const(w, n, v);
  return w;
}

static void make_weights(Gpt2 *m) {
  m->wte = alloc_normal((int64_t)V * C, 0.02);
  m->wpe = alloc_normal((int64_t)T * C, 0.01);
  m->lnf_w = alloc_const(C, 1);
  m->lnf_b = alloc_const(C, 0);
  for (int l = 0; l < L; l++) {
    m->ln1_w[l] = alloc_const(C, 1), m->ln1_b[l] = alloc_const(C, 0);
    m->ln2_w[l] = alloc_const(C, 1), m->ln2_b[l] = alloc_const(C, 0);
    m->attn_w[l] = alloc_normal(C * 3 * C, 0.02), m->attn_b[l] = alloc_normal(3 * C, 0.02);
    m->proj_w[l] = alloc_normal(C * C, 0.02), m->proj_b[l] = alloc_normal(C, 0.02);
    m->fc_w[l] = alloc_normal(C * 4 * C, 0.02), m->fc_b[l] = alloc_normal(4 * C, 0.02);
    m->fcproj_w[l] = alloc_normal(4 * C * C, 0.02), m->fcproj_b[l] = alloc_normal(C, 0.02);
  }
}

static StEntry entry(const char *name, const float *data, int64_t d0, int64_t d1) {
  StEntry e = {.name = name, .dtype = ST_F32, .rank = d1 ? 2 : 1, .shape = {d0, d1}, .data = data};
  return e;
}

static bool write_hf(const Gpt2 *m, const char *file) {
  StEntry e[4 + 16 * L];
  char names[16 * L][64];
  int n = 0, k = 0;
  e[n++] = entry("wte.weight", m->wte, V, C);
  e[n++] = entry("wpe.weight", m->wpe, T, C);
  e[n++] = entry("ln_f.weight", m->lnf_w, C, 0);
  e[n++] = entry("ln_f.bias", m->lnf_b, C, 0);
#define HF(fmt, ptr, d0, d1) (snprintf(names[k], 64, fmt, l), e[n++] = entry(names[k++], ptr, d0, d1))
  for (int l = 0; l < L; l++) {
    HF("h.%d.ln_1.weight", m->ln1_w[l], C, 0);
    HF("h.%d.ln_1.bias", m->ln1_b[l], C, 0);
    HF("h.%d.attn.c_attn.weight", m->attn_w[l], C, 3 * C);
    HF("h.%d.attn.c_attn.bias", m->attn_b[l], 3 * C, 0);
    HF("h.%d.attn.c_proj.weight", m->proj_w[l], C, C);
    HF("h.%d.attn.c_proj.bias", m->proj_b[l], C, 0);
    HF("h.%d.ln_2.weight", m->ln2_w[l], C, 0);
    HF("h.%d.ln_2.bias", m->ln2_b[l], C, 0);
    HF("h.%d.mlp.c_fc.weight", m->fc_w[l], C, 4 * C);
    HF("h.%d.mlp.c_fc.bias", m->fc_b[l], 4 * C, 0);
    HF("h.%d.mlp.c_proj.weight", m->fcproj_w[l], 4 * C, C);
    HF("h.%d.mlp.c_proj.bias", m->fcproj_b[l], C, 0);
  }
#undef HF
  char err[IO_ERR_LEN];
  bool ok = st_write(file, e, n, NULL, 0, err, sizeof err);
  if (!ok) fprintf(stderr, "%s\n", err);
  return ok;
}

/* llm.c stores a linear weight [out, in]: write the transpose of HF's [in, out]. */
static void put_t(FILE *f, const float *w, int in, int out) {
  for (int o = 0; o < out; o++)
    for (int i = 0; i < in; i++) fwrite(&w[(int64_t)i * out + o], 4, 1, f);
}

static bool write_llmc(const Gpt2 *m, const char *file) {
  int Vp = (V + 127) / 128 * 128; /* llm.c pads the vocabulary */
  int32_t h[256] = {CKPT_LLMC_MAGIC, 3, T, V, L, NH, C, Vp};
  FILE *f = fopen(file, "wb");
  if (!f) return false;
  fwrite(h, 4, 256, f);
  fwrite(m->wte, 4, (size_t)V * C, f);
  float zero = 0;
  for (int64_t i = 0; i < (int64_t)(Vp - V) * C; i++) fwrite(&zero, 4, 1, f);
  fwrite(m->wpe, 4, (size_t)T * C, f);
  /* llm.c's order: all layers of one tensor kind, then the next kind */
  for (int l = 0; l < L; l++) fwrite(m->ln1_w[l], 4, C, f);
  for (int l = 0; l < L; l++) fwrite(m->ln1_b[l], 4, C, f);
  for (int l = 0; l < L; l++) put_t(f, m->attn_w[l], C, 3 * C);
  for (int l = 0; l < L; l++) fwrite(m->attn_b[l], 4, 3 * C, f);
  for (int l = 0; l < L; l++) put_t(f, m->proj_w[l], C, C);
  for (int l = 0; l < L; l++) fwrite(m->proj_b[l], 4, C, f);
  for (int l = 0; l < L; l++) fwrite(m->ln2_w[l], 4, C, f);
  for (int l = 0; l < L; l++) fwrite(m->ln2_b[l], 4, C, f);
  for (int l = 0; l < L; l++) put_t(f, m->fc_w[l], C, 4 * C);
  for (int l = 0; l < L; l++) fwrite(m->fc_b[l], 4, 4 * C, f);
  for (int l = 0; l < L; l++) put_t(f, m->fcproj_w[l], 4 * C, C);
  for (int l = 0; l < L; l++) fwrite(m->fcproj_b[l], 4, C, f);
  fwrite(m->lnf_w, 4, C, f);
  fwrite(m->lnf_b, 4, C, f);
  return fclose(f) == 0;
}

static bool make_plan(const char *plan) {
  Arena *a = arena_create();
  Diag d;
  diag_init(&d, stderr);
  char dv[32], dt[32], dl[32], dc[32], dh[32];
  snprintf(dv, sizeof dv, "vocab=%d", V), snprintf(dt, sizeof dt, "seq=%d", T);
  snprintf(dl, sizeof dl, "layers=%d", L), snprintf(dc, sizeof dc, "dim=%d", C);
  snprintf(dh, sizeof dh, "heads=%d", NH);
  const char *ov[] = {dv, dt, dl, dc, dh, "pdrop=0"};
  Graph *g = frontend_load_model(a, &d, "models/gpt.model", ov, 6);
  bool ok = g && pass_autodiff(g, &d) &&
            codegen_single_stage_plan(g, B, 1, &(CodegenOptions){.fuse = true}, plan, &d);
  if (g) graph_destroy(g);
  arena_destroy(a);
  return ok;
}

static void write_random_tokens(const char *file, int n) {
  FILE *f = fopen(file, "wb");
  for (int i = 0; i < n; i++) {
    uint16_t t = (uint16_t)(uniform() * V);
    fwrite(&t, 2, 1, f);
  }
  fclose(f);
}

/* Loads `ckpt` into a fresh trainer of the plan; returns the eval loss on the
 * random tokens (NAN on failure) and the trainer's copy of h.1.attn_w. */
static double loss_after_init(const char *ckpt, float *attn_w1) {
  char err[RT_ERR_LEN], ierr[IO_ERR_LEN];
  double loss = NAN;
  RtPlan *p = rt_plan_load(path("plan"), err, sizeof err);
  Trainer *t = p ? trainer_create(p, NULL, err, sizeof err) : NULL;
  DataFile *df = data_open(path("tokens.bin"), DATA_RAW, V, ierr, sizeof ierr);
  DataLoader *dl = df ? data_loader_create(df, B, T, false, 0, ierr, sizeof ierr) : NULL;
  if (!t || !dl) {
    fprintf(stderr, "%s %s\n", t ? "" : err, dl ? "" : ierr);
  } else if (!trainer_init_from(t, ckpt, ierr, sizeof ierr)) {
    fprintf(stderr, "init from %s: %s\n", ckpt, ierr);
  } else {
    loss = trainer_eval(t, dl, 0, 4);
    const RtStage *st = trainer_stage(t);
    for (int i = 0; i < st->nparams; i++)
      if (strcmp(st->params[i].name, "h.1.attn_w") == 0)
        memcpy(attn_w1, (char *)trainer_params(t) + st->params[i].offset, (size_t)C * 3 * C * 4);
  }
  data_loader_destroy(dl);
  if (df) data_close(df);
  trainer_destroy(t);
  rt_plan_free(p);
  return loss;
}

static void test_gpt2_checkpoints_load(void) {
  Gpt2 m;
  make_weights(&m);
  EXPECT(make_plan(path("plan")));
  EXPECT(write_hf(&m, path("model.safetensors")));
  EXPECT(write_llmc(&m, path("gpt2_test.bin")));
  write_random_tokens(path("tokens.bin"), 4 * B * (T + 1) + 1);
  static float w_hf[C * 3 * C], w_llmc[C * 3 * C];
  double l_hf = loss_after_init(path("model.safetensors"), w_hf);
  double l_llmc = loss_after_init(path("gpt2_test.bin"), w_llmc);
  printf("  ln(V) = %.4f, loss from HF %.4f, from llm.c %.4f\n", log((double)V), l_hf, l_llmc);
  EXPECT(fabs(l_hf - log((double)V)) <= 0.1);
  EXPECT(fabs(l_llmc - log((double)V)) <= 0.1);
  EXPECT_NEAR(l_hf, l_llmc, 1e-6, 0);
  /* the same weights, in pd2bw's [in, out] layout, from both files */
  EXPECT(memcmp(w_hf, m.attn_w[1], sizeof w_hf) == 0);
  EXPECT(memcmp(w_llmc, m.attn_w[1], sizeof w_llmc) == 0);
  while (nallocated) free(allocated[--nallocated]);
}

int main(void) {
  /* CTest runs this from the source root (models/gpt.model is read from there). */
  snprintf(dir, sizeof dir, "/tmp/pd2bw-gpt2-init-%ld", (long)getpid());
  if (mkdir(dir, 0777) != 0) return 1;
  RUN(test_gpt2_checkpoints_load);
  char cmd[600];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
  return TEST_REPORT();
}
