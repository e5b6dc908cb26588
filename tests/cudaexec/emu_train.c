/* tests/cudaexec/emu_train.c — see emu_train.h. */
#include "emu_train.h"

#include "runtime/exec/exec.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "runtime/io/io.h"

static const char *pd2bwc;
static const char *workdir;

double emu_now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* ---- main's start and end -------------------------------------------------------------- */

const char *emu_test_begin(int argc, char **argv, bool parts, const char *usage, char *tmp) {
  if (argc != 2 && !(parts && argc == 3)) {
    fprintf(stderr, "%s\n", usage);
    return NULL;
  }
  pd2bwc = argv[1];
  char cache[128];
  snprintf(cache, sizeof cache, "/tmp/pd2bw-test-cache-%ld", (long)getuid());
  setenv("PD2BW_CACHE", cache, 0);
  setenv("OMP_NUM_THREADS", "1", 1);
  pd_blas_init(1);
  if (!mkdtemp(tmp)) {
    fprintf(stderr, "%s: cannot make a directory\n", tmp);
    return NULL;
  }
  workdir = tmp;
  return argc > 2 ? argv[2] : "all";
}

const char *emu_pd2bwc(void) { return pd2bwc; }

bool emu_test_part(const char *part, const char *name) {
  return strcmp(part, "all") == 0 || strcmp(part, name) == 0;
}

void emu_test_end(void) {
  emu_device_release();
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", workdir);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", workdir);
}

/* ---- the model, plans and data --------------------------------------------------------- */

static const char model[] =
    "model cxgpt {\n"
    "  param vocab = 64; param seq = 8; param layers = 1; param dim = 32; param heads = 2; param pdrop = 0.1;\n"
    "  input tokens : i32[B, seq];\n  input targets : i32[B, seq];\n"
    "  weight wte : f32[vocab, dim] = normal(0.02);\n  weight wpe : f32[seq, dim] = normal(0.01);\n"
    "  x = add(embedding(wte, tokens), positions(wpe, tokens));\n  x = dropout(x, p = pdrop);\n"
    "  repeat h[layers] {\n"
    "    weight ln1_w : f32[dim] = ones;\n    weight ln1_b : f32[dim] = zeros;\n"
    "    weight attn_w : f32[dim, 3*dim] = normal(0.02);\n    weight attn_b : f32[3*dim] = zeros;\n"
    "    weight attnproj_w : f32[dim, dim] = normal(0.02);\n    weight attnproj_b : f32[dim] = zeros;\n"
    "    weight ln2_w : f32[dim] = ones;\n    weight ln2_b : f32[dim] = zeros;\n"
    "    weight fc_w : f32[dim, 4*dim] = normal(0.02);\n    weight fc_b : f32[4*dim] = zeros;\n"
    "    weight fcproj_w : f32[4*dim, dim] = normal(0.02);\n    weight fcproj_b : f32[dim] = zeros;\n"
    "    a = attention(linear(layernorm(x, ln1_w, ln1_b, eps = 1e-5), attn_w, attn_b), heads = heads, causal = 1, p = pdrop);\n"
    "    x = add(x, dropout(linear(a, attnproj_w, attnproj_b), p = pdrop));\n"
    "    m = gelu(linear(layernorm(x, ln2_w, ln2_b, eps = 1e-5), fc_w, fc_b));\n"
    "    x = add(x, dropout(linear(m, fcproj_w, fcproj_b), p = pdrop));\n"
    "  }\n"
    "  weight lnf_w : f32[dim] = ones;\n  weight lnf_b : f32[dim] = zeros;\n"
    "  x = layernorm(x, lnf_w, lnf_b, eps = 1e-5);\n"
    "  logits = matmul(x, wte, transpose_b = 1);\n  loss = cross_entropy(logits, targets);\n  minimize loss;\n"
    "  train {\n    batch = 4;\n    microbatch = 2;\n"
    "    optimizer = adamw(lr = 1e-2, beta1 = 0.9, beta2 = 0.99, eps = 1e-8, weight_decay = 0.1);\n"
    "    lr_schedule = constant;\n    clip = 0.5;\n    seed = 77;\n  }\n}\n";

void emu_path(char *out, size_t n, const char *name) { snprintf(out, n, "%s/%s", workdir, name); }

bool emu_train_files(void) {
  char path[256];
  emu_path(path, sizeof path, "cx.model");
  FILE *f = fopen(path, "w");
  if (!f) return fprintf(stderr, "  %s: cannot write\n", path), false;
  fputs(model, f);
  fclose(f);
  /* tokens: a repeating pattern with noise, so the loss has something to learn */
  emu_path(path, sizeof path, "train.bin");
  f = fopen(path, "wb");
  if (!f) return fprintf(stderr, "  %s: cannot write\n", path), false;
  uint64_t s = 12345;
  for (int i = 0; i < 8192; i++) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    uint16_t tok = (uint16_t)((s >> 33) % 8 == 0 ? (s >> 40) % 64 : (uint64_t)(i * 7 % 64));
    fwrite(&tok, 2, 1, f);
  }
  return fclose(f) == 0;
}

bool emu_make_plan(const char *name, const char *extra) {
  char model_path[256];
  emu_path(model_path, sizeof model_path, "cx.model");
  return emu_make_plan_of(name, model_path, extra);
}

bool emu_make_plan_of(const char *name, const char *model_path, const char *extra) {
  char cmd[1024];
  double t0 = emu_now_s();
  snprintf(cmd, sizeof cmd,
           "'%s' '%s' --stages 1 --replicas 1 --microbatch-size 2 --microbatches %d %s -o '%s/%s' -q", pd2bwc,
           model_path, EMU_MB, extra, workdir, name);
  int rc = system(cmd);
  if (rc != 0) fprintf(stderr, "  failed: %s\n", cmd);
  printf("  pd2bwc %s: %.1f s\n", extra, emu_now_s() - t0);
  return rc == 0;
}

bool emu_pipe_make_plan(const char *name, const char *args) {
  char cmd[1024];
  snprintf(cmd, sizeof cmd,
           "'%s' tests/pipeline/tinygpt.model -q -D layers=2 -D dim=16 -D seq=8 -D heads=2 -D bsz=8 "
           "--cluster tests/pipeline/cpu8.cluster --microbatch-size 2 %s -o '%s/%s'",
           pd2bwc, args, workdir, name);
  int rc = system(cmd);
  if (rc != 0) fprintf(stderr, "  failed: %s\n", cmd);
  return rc == 0;
}

bool emu_pipe_files(void) {
  static const char text[] = "PipeDream-2BW keeps two weight versions per stage and updates them without "
                             "flushing the pipeline. ";
  char path[256];
  emu_path(path, sizeof path, "train.bin");
  FILE *f = fopen(path, "wb");
  if (!f) return fprintf(stderr, "  %s: cannot write\n", path), false;
  for (int r = 0; r < 200; r++)
    for (size_t i = 0; i + 1 < sizeof text; i++) {
      uint16_t tok = (uint8_t)text[i];
      fwrite(&tok, 2, 1, f);
    }
  return fclose(f) == 0;
}

PipePlan *emu_pipe_load(const char *name, int64_t steps) {
  char dir[256], err[RT_ERR_LEN];
  emu_path(dir, sizeof dir, name);
  PipePlan *p = pipe_plan_load(dir, err, sizeof err);
  if (!p) fprintf(stderr, "  %s\n", err);
  else if (p->rt->train.steps == 0) p->rt->train.steps = steps;
  return p;
}

/* ---- training both ways ---------------------------------------------------------------- */

static DataLoader *open_data(const RtPlan *p, DataFile **df) {
  char path[256], err[IO_ERR_LEN];
  emu_path(path, sizeof path, "train.bin");
  *df = data_open(path, DATA_AUTO, 64, err, sizeof err);
  DataLoader *dl = *df ? data_loader_create(*df, (int)(p->b * p->m), 8, false, 0, err, sizeof err) : NULL;
  if (!dl) fprintf(stderr, "  %s\n", err);
  return dl;
}

static RtPlan *load_plan(const char *plan) {
  char dir[256], err[RT_ERR_LEN];
  emu_path(dir, sizeof dir, plan);
  RtPlan *p = rt_plan_load(dir, err, sizeof err);
  if (!p) fprintf(stderr, "  %s\n", err);
  return p;
}

/* EMU_STEPS steps of `plan` on the emulated device (gpu) or the CPU trainer. */
static bool run(const char *plan, bool gpu, EmuRun *r) {
  char err[RT_ERR_LEN] = "";
  double t0 = emu_now_s();
  RtPlan *p = load_plan(plan);
  Trainer *ct = NULL;
  ExecDevice *dev = NULL;
  CudaDeviceOps ops = {0}; /* the device keeps &ops: it lives as long as the run */
  if (p && gpu) { /* the one-stage trainer with the GPU as its device, as pd2bwrun --backend cuda */
    ops = emu_device_ops(workdir, EMU_IN_ORDER);
    dev = cx_exec_device(&ops, p, 0, GEMM_PLAN, p->b * p->m, err, sizeof err);
    if (dev) ct = trainer_create(p, &(TrainerOptions){.device = dev}, err, sizeof err);
  } else if (p) {
    ct = trainer_create(p, NULL, err, sizeof err);
  }
  if (p && !ct) fprintf(stderr, "  %s\n", err);
  DataFile *df = NULL;
  DataLoader *dl = ct ? open_data(p, &df) : NULL;
  bool ok = dl != NULL;
  r->bad_ids = 0;
  for (int s = 0; ok && s < EMU_STEPS; s++) {
    StepStats ss;
    trainer_step(ct, dl, &ss);
    if (ss.error) {
      fprintf(stderr, "  %s: step %d: %s\n", plan, s + 1, ss.error);
      ok = false;
      break;
    }
    r->bad_ids += ss.bad_ids;
    for (int j = 0; j < EMU_MB; j++) r->mb[s * EMU_MB + j] = ss.mb_loss[j];
    r->norm[s] = ss.grad_norm;
  }
  if (ok) {
    r->nw = p->stages[0].blocks[BUF_PARAMS] / 4;
    r->w = malloc((size_t)r->nw * 4);
    trainer_read_params(ct, r->w);
    if (dev) {
      r->steps = trainer_step_index(ct);
      r->counts = emu_device_counts();
      printf("  %s on the emulated GPU: %d launches (%d casts), %d GEMMs (%d bf16) in %d steps, %.1f s\n", plan,
             r->counts.launches, r->counts.casts, r->counts.gemms, r->counts.bf16_gemms, EMU_STEPS, emu_now_s() - t0);
    } else {
      printf("  %s on the CPU trainer: %.1f s\n", plan, emu_now_s() - t0);
    }
  }
  data_loader_destroy(dl);
  data_close(df);
  trainer_destroy(ct);
  exec_device_destroy(dev); /* after the trainer, whose rank holds it */
  rt_plan_free(p);
  return ok;
}

bool emu_run_cpu(const char *plan, EmuRun *r) { return run(plan, false, r); }
bool emu_run_gpu(const char *plan, EmuRun *r) { return run(plan, true, r); }

double emu_losses_diff(const EmuRun *a, const EmuRun *b, int from_step) {
  double worst = 0;
  for (int i = from_step * EMU_MB; i < EMU_STEPS * EMU_MB; i++) {
    double d = fabs(a->mb[i] - b->mb[i]) / fmax(fabs(a->mb[i]), 1e-30);
    if (!(d <= worst)) worst = d;
  }
  return worst;
}

double emu_weights_diff(const EmuRun *a, const EmuRun *b) {
  double scale = 0, worst = 0;
  for (int64_t i = 0; i < a->nw; i++) scale = fmax(scale, fabs(a->w[i]));
  for (int64_t i = 0; i < a->nw; i++) {
    double d = fabs((double)a->w[i] - (double)b->w[i]);
    if (!(d <= worst)) worst = d;
  }
  return worst / (scale + 1e-30);
}

cJSON *emu_read_json(const char *path) {
  char err[256];
  size_t n = 0;
  char *text = io_read_all(path, &n, err, sizeof err);
  if (!text) fprintf(stderr, "  %s\n", err);
  cJSON *j = text ? cJSON_ParseWithLength(text, n) : NULL;
  free(text);
  return j;
}

int emu_list_store_casts(const char *dir, int stage) {
  char path[300];
  snprintf(path, sizeof path, "%s/stage%d.launch.json", dir, stage);
  cJSON *l = emu_read_json(path);
  int n = 0;
  const char *pass[2] = {"forward", "backward"};
  for (int q = 0; l && q < 2; q++) {
    const cJSON *e;
    cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(l, pass[q])) {
      const cJSON *k = cJSON_GetObjectItemCaseSensitive(e, "kernel");
      if (!cJSON_IsString(k) || strcmp(k->valuestring, "pkc_cast_f32_to_bf16") != 0) continue;
      const cJSON *dst = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(e, "args"), 0);
      const cJSON *buf = cJSON_GetObjectItemCaseSensitive(dst, "buf");
      n += cJSON_IsString(buf) && (strcmp(buf->valuestring, "stash") == 0 || strcmp(buf->valuestring, "boundary") == 0);
    }
  }
  cJSON_Delete(l);
  return n;
}

bool emu_list_casts(const char *dir, int stage, int *casts, int *weight_casts, int *w16_operands) {
  char path[300];
  snprintf(path, sizeof path, "%s/stage%d.launch.json", dir, stage);
  cJSON *l = emu_read_json(path);
  *casts = *weight_casts = *w16_operands = 0;
  const char *pass[2] = {"forward", "backward"};
  for (int q = 0; l && q < 2; q++) {
    const cJSON *e;
    cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(l, pass[q])) {
      const cJSON *k = cJSON_GetObjectItemCaseSensitive(e, "kernel"), *g = cJSON_GetObjectItemCaseSensitive(e, "gemm");
      if (cJSON_IsString(k) && strcmp(k->valuestring, "pkc_cast_f32_to_bf16") == 0) {
        (*casts)++;
        const cJSON *src = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(e, "args"), 1);
        const cJSON *buf = cJSON_GetObjectItemCaseSensitive(src, "buf");
        *weight_casts += cJSON_IsString(buf) && strcmp(buf->valuestring, "params") == 0;
      }
      for (int ab = 0; g && ab < 2; ab++) {
        const cJSON *buf = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(g, ab ? "B" : "A"), "buf");
        *w16_operands += cJSON_IsString(buf) && strcmp(buf->valuestring, "params_bf16") == 0;
      }
    }
  }
  bool ok = l != NULL;
  cJSON_Delete(l);
  return ok;
}
