/* tools/pd2bw-export: a pd2bw checkpoint of a GPT-2-shaped model out to a
 * Hugging Face GPT-2 directory and an llm.c model file, read back with the
 * importer --init uses (ckpt_import), every tensor bit for bit; the config and
 * llm.c header fields; and the user errors (message, exit status 1, nothing
 * written, nothing of the user's replaced).
 *   usage: test_ckpt_export PATH/TO/pd2bw-export */
#include <cjson/cJSON.h>
#include <fcntl.h>
#include <spawn.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "runtime/io/io.h"
#include "test.h"
#include "test_util.h"

extern char **environ;

/* tmp_path with room for all the paths one call of the tool names. */
static const char *tp(const char *name) {
  static char bufs[64][1024];
  static int k;
  char *b = bufs[k++ % 64];
  snprintf(b, sizeof bufs[0], "%s", tmp_path(name));
  return b;
}
static const char *tool;

enum { L = 2, C = 8, V = 11, T = 5, NP = 4 + 12 * L };

/* The model: pd2bw's names and shapes, and deterministic values that include
 * -0.0, a denormal and -FLT_MAX, so that "bit for bit" means it. */
static char names[NP][32];
static CkptParam model[NP];
static float *values[NP];

static void make_model(void) {
  static const char *const layer[12] = {"ln1_w", "ln1_b", "attn_w",   "attn_b",   "attnproj_w", "attnproj_b",
                                        "ln2_w", "ln2_b", "fc_w",     "fc_b",     "fcproj_w",   "fcproj_b"};
  static const int64_t shape[12][2] = {{C, 0}, {C, 0}, {C, 3 * C}, {3 * C, 0}, {C, C},     {C, 0},
                                       {C, 0}, {C, 0}, {C, 4 * C}, {4 * C, 0}, {4 * C, C}, {C, 0}};
  int n = 0;
  snprintf(names[n], 32, "wte");
  model[n++] = (CkptParam){names[0], 2, {V, C}, NULL, 0};
  snprintf(names[n], 32, "wpe");
  model[n++] = (CkptParam){names[1], 2, {T, C}, NULL, 0};
  for (int l = 0; l < L; l++)
    for (int k = 0; k < 12; k++) {
      snprintf(names[n], 32, "h.%d.%s", l, layer[k]);
      model[n] = (CkptParam){names[n], shape[k][1] ? 2 : 1, {shape[k][0], shape[k][1]}, NULL, 0};
      n++;
    }
  snprintf(names[n], 32, "lnf_w");
  model[n] = (CkptParam){names[n], 1, {C}, NULL, 0};
  n++;
  snprintf(names[n], 32, "lnf_b");
  model[n] = (CkptParam){names[n], 1, {C}, NULL, 0};
  n++;
  uint32_t x = 12345;
  for (int i = 0; i < NP; i++) {
    int64_t ne = model[i].shape[0] * (model[i].rank == 2 ? model[i].shape[1] : 1);
    values[i] = malloc((size_t)ne * sizeof(float));
    for (int64_t j = 0; j < ne; j++) {
      x = x * 1664525u + 1013904223u;
      values[i][j] = ((float)(x >> 8) / 16777216.0f - 0.5f) * (float)(i + 1);
    }
  }
  /* (a NaN or Inf is refused on reading, naming the tensor: tests/pipeline/ckpt_meta.sh) */
  uint32_t max_bits = 0xff7fffffu, denorm_bits = 0x00000123u;
  values[2][0] = -0.0f;
  memcpy(&values[3][1], &max_bits, 4);
  memcpy(&values[4][2], &denorm_bits, 4);
}

/* Writes a pd2bw checkpoint as pd2bwrun --save does (parameters, optimizer
 * state, metadata); `skip` names a parameter to leave out, `extra` adds one
 * tensor of that name, `bad_shape` gives h.1.fc_w the shape [C, 2C]. */
static void write_ckpt(const char *path, const char *skip, const char *extra, bool bad_shape,
                       const char *format) {
  StEntry e[2 * NP + 1];
  char optnames[NP][40];
  int ne = 0;
  for (int i = 0; i < NP; i++) {
    if (skip && strcmp(model[i].name, skip) == 0) continue;
    StEntry *p = &e[ne++];
    memset(p, 0, sizeof *p);
    p->name = model[i].name;
    p->dtype = ST_F32;
    p->rank = model[i].rank;
    p->shape[0] = model[i].shape[0];
    p->shape[1] = model[i].shape[1];
    p->data = values[i];
    if (bad_shape && strcmp(p->name, "h.1.fc_w") == 0) p->shape[1] = 2 * C;
    /* what a training checkpoint holds besides the weights, left out by the export:
     * optimizer state and 2bw's other weight versions (prev.*, next.* with prediction) */
    static const char *const other[] = {"opt.m.", "opt.v.", "prev.", "next."};
    snprintf(optnames[i], sizeof optnames[i], "%s%s", other[i % 4], model[i].name);
    e[ne] = *p;
    e[ne++].name = optnames[i];
  }
  if (extra) e[ne++] = (StEntry){extra, ST_F32, 1, {C}, values[0]};
  const char *meta[] = {"format", format, "model", "gpt", "step", "7"};
  char err[IO_ERR_LEN];
  if (!st_write(path, e, ne, meta, 3, err, sizeof err)) {
    fprintf(stderr, "%s\n", err);
    exit(2);
  }
}

/* Runs pd2bw-export with args (NULL-terminated); returns its exit status and
 * its stderr in msg. */
static char msg[4096];
static int run_export(const char *const *args) {
  const char *argv[32] = {tool};
  int n = 1;
  for (; args[n - 1]; n++) argv[n] = args[n - 1];
  argv[n] = NULL;
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 2, tp("stderr.txt"), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
  pid_t pid;
  int rc = posix_spawn(&pid, tool, &fa, NULL, (char *const *)argv, environ);
  posix_spawn_file_actions_destroy(&fa);
  if (rc != 0) {
    fprintf(stderr, "cannot run %s\n", tool);
    exit(2);
  }
  int status;
  waitpid(pid, &status, 0);
  FILE *f = fopen(tp("stderr.txt"), "r");
  size_t got = f ? fread(msg, 1, sizeof msg - 1, f) : 0;
  msg[got] = '\0';
  if (f) fclose(f);
  unlink(tp("stderr.txt"));
  int rc_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  if (rc_ != 1 && msg[0]) fprintf(stderr, "pd2bw-export said: %s", msg);
  return rc_;
}

/* Imports path as fmt into fresh buffers shaped like the model (wte with
 * `wte_rows` rows) and compares with the model's values bit for bit (wte's
 * first `same_rows` rows; the rest must be zero). */
static void expect_roundtrip(const char *path, CkptFormat fmt, int64_t wte_rows, int64_t same_rows) {
  CkptParam p[NP];
  for (int i = 0; i < NP; i++) {
    p[i] = model[i];
    if (i == 0) p[i].shape[0] = wte_rows;
    int64_t ne = p[i].shape[0] * (p[i].rank == 2 ? p[i].shape[1] : 1);
    p[i].dst = malloc((size_t)ne * sizeof(float));
    memset(p[i].dst, 0xAB, (size_t)ne * sizeof(float));
  }
  char err[IO_ERR_LEN];
  bool ok = ckpt_import(path, fmt, p, NP, err, sizeof err);
  if (!ok) fprintf(stderr, "%s\n", err);
  EXPECT(ok);
  int differ = 0;
  for (int i = 0; ok && i < NP; i++) {
    int64_t cols = p[i].rank == 2 ? p[i].shape[1] : 1;
    int64_t rows = i == 0 ? same_rows : p[i].shape[0];
    if (memcmp(p[i].dst, values[i], (size_t)(rows * cols) * sizeof(float)) != 0) {
      fprintf(stderr, "%s: %s differs after the round trip\n", path, p[i].name);
      differ++;
    }
    for (int64_t j = rows * cols; i == 0 && j < wte_rows * cols; j++) differ += p[i].dst[j] != 0.0f;
  }
  EXPECT_EQ_INT(differ, 0);
  for (int i = 0; i < NP; i++) free(p[i].dst);
}

static double json_num(const cJSON *j, const char *key) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, key);
  return cJSON_IsNumber(v) ? v->valuedouble : -1;
}

static void test_hf_and_llmc(void) {
  write_ckpt(tp("ckpt.safetensors"), NULL, NULL, false, "pd2bw");
  EXPECT_EQ_INT(run_export((const char *[]){tp("ckpt.safetensors"), "--heads", "2", "--hf",
                                            tp("hf"), "--llmc", tp("gpt2.bin"), NULL}),
                0);

  expect_roundtrip(tp("hf/model.safetensors"), CKPT_HF, V, V);
  expect_roundtrip(tp("hf/model.safetensors"), CKPT_AUTO, V, V);
  expect_roundtrip(tp("hf"), CKPT_AUTO, V, V); /* the directory: --init DIR, by config.json's model_type */
  expect_roundtrip(tp("gpt2.bin"), CKPT_LLMC, V, V);
  expect_roundtrip(tp("gpt2.bin"), CKPT_AUTO, V, V);

  /* Hugging Face: transformers' names and the "pt" format tag it requires. */
  char err[IO_ERR_LEN];
  SafeTensors *st = st_open(tp("hf/model.safetensors"), err, sizeof err);
  EXPECT(st != NULL);
  if (st) {
    EXPECT_STREQ(st_meta(st, "format"), "pt");
    const StTensor *t = st_find(st, "transformer.h.1.attn.c_attn.weight");
    EXPECT(t && t->rank == 2 && t->shape[0] == C && t->shape[1] == 3 * C);
    EXPECT(st_find(st, "transformer.ln_f.bias") != NULL);
    EXPECT_EQ_INT(st_count(st), NP); /* no optimizer state, no lm_head (tied) */
    st_close(st);
  }
  size_t len;
  char *text = io_read_all(tp("hf/config.json"), &len, err, sizeof err);
  cJSON *cfg = text ? cJSON_Parse(text) : NULL;
  EXPECT(cfg != NULL);
  EXPECT_EQ_INT(json_num(cfg, "n_embd"), C);
  EXPECT_EQ_INT(json_num(cfg, "n_layer"), L);
  EXPECT_EQ_INT(json_num(cfg, "n_head"), 2);
  EXPECT_EQ_INT(json_num(cfg, "n_positions"), T);
  EXPECT_EQ_INT(json_num(cfg, "vocab_size"), V);
  EXPECT(json_num(cfg, "layer_norm_epsilon") == 1e-5);
  EXPECT_STREQ(cJSON_GetStringValue(cJSON_GetObjectItem(cfg, "model_type")), "gpt2");
  EXPECT_STREQ(cJSON_GetStringValue(cJSON_GetObjectItem(cfg, "activation_function")), "gelu_new");
  EXPECT(cJSON_IsTrue(cJSON_GetObjectItem(cfg, "tie_word_embeddings")));
  EXPECT_STREQ(cJSON_GetStringValue(cJSON_GetArrayItem(cJSON_GetObjectItem(cfg, "architectures"), 0)),
               "GPT2LMHeadModel");
  cJSON_Delete(cfg);
  free(text);

  /* llm.c: the header train_gpt2.c reads, then exactly the 16 tensors. */
  text = io_read_all(tp("gpt2.bin"), &len, err, sizeof err);
  EXPECT(text != NULL);
  if (text) {
    int32_t h[8];
    memcpy(h, text, sizeof h);
    int32_t want[8] = {CKPT_LLMC_MAGIC, 3, T, V, L, 2, C, V};
    EXPECT(memcmp(h, want, sizeof h) == 0);
    int64_t numel = 0;
    for (int i = 0; i < NP; i++) numel += model[i].shape[0] * (model[i].rank == 2 ? model[i].shape[1] : 1);
    EXPECT_EQ_INT(len, 1024 + 4 * numel);
    free(text);
  }
}

/* --vocab-size: the checkpoint's wte is padded (llm.c pads 50257 to 50304). */
static void test_padded_vocab(void) {
  EXPECT_EQ_INT(run_export((const char *[]){tp("ckpt.safetensors"), "--heads", "4", "--vocab-size",
                                            "9", "--hf", tp("hf9"), "--llmc", tp("g9.bin"), NULL}),
                0);
  expect_roundtrip(tp("hf9/model.safetensors"), CKPT_HF, V, 9); /* rows 9, 10: zero */
  expect_roundtrip(tp("g9.bin"), CKPT_LLMC, V, V);               /* llm.c keeps the padding */
  char err[IO_ERR_LEN];
  size_t len;
  char *text = io_read_all(tp("g9.bin"), &len, err, sizeof err);
  if (text) {
    int32_t h[8];
    memcpy(h, text, sizeof h);
    EXPECT_EQ_INT(h[3], 9);  /* V */
    EXPECT_EQ_INT(h[5], 4);  /* NH */
    EXPECT_EQ_INT(h[7], V);  /* Vp */
    free(text);
  }
}

/* Each error: exit 1, the message, and no output (no file, no directory, no temp). */
static void expect_refused(const char *const *args, const char *want) {
  int before = tmp_count();
  EXPECT_EQ_INT(run_export(args), 1);
  EXPECT_MSG(msg, want);
  EXPECT_EQ_INT(tmp_count(), before);
  struct stat sb;
  EXPECT(stat(tp("out"), &sb) != 0);
  EXPECT(stat(tp("out.bin"), &sb) != 0);
}

static void test_errors(void) {
  char ck[1024], good[1024]; /* kept: tp's buffers rotate */
  snprintf(ck, sizeof ck, "%s", tp("bad.safetensors"));
  snprintf(good, sizeof good, "%s", tp("ckpt.safetensors"));
  write_ckpt(ck, "h.1.fc_b", NULL, false, "pd2bw");
  expect_refused((const char *[]){ck, "--heads", "2", "--hf", tp("out"), "--llmc", tp("out.bin"), NULL},
                 "no tensor \"h.1.fc_b\"");
  write_ckpt(ck, NULL, "cls_w", false, "pd2bw");
  expect_refused((const char *[]){ck, "--heads", "2", "--hf", tp("out"), NULL},
                 "tensor \"cls_w\" has no GPT-2 counterpart");
  write_ckpt(ck, NULL, NULL, true, "pd2bw");
  expect_refused((const char *[]){ck, "--heads", "2", "--llmc", tp("out.bin"), NULL},
                 "\"h.1.fc_w\" is [8,16], GPT-2 wants [8,32]");
  write_ckpt(ck, NULL, NULL, false, "pt");
  expect_refused((const char *[]){ck, "--heads", "2", "--llmc", tp("out.bin"), NULL},
                 "not a pd2bw checkpoint");
  unlink(ck);
  expect_refused((const char *[]){good, "--heads", "3", "--hf", tp("out"), NULL},
                 "n_embd 8 is not a multiple of --heads 3");
  expect_refused((const char *[]){good, "--hf", tp("out"), NULL}, "--heads N is required");
  expect_refused((const char *[]){good, "--heads", "2", NULL}, "nothing to write: give --hf DIR and/or --llmc FILE");
  expect_refused((const char *[]){good, "--heads", "2", "--vocab-size", "12", "--llmc", tp("out.bin"), NULL},
                 "--vocab-size 12: the checkpoint's wte has 11 rows");
  expect_refused((const char *[]){tp("none.safetensors"), "--heads", "2", "--hf", tp("out"), NULL},
                 "none.safetensors: cannot open");
  /* Existing outputs are the user's: refused without --force, and untouched. */
  write_bytes(tp("user.bin"), "mine", 4);
  expect_refused((const char *[]){good, "--heads", "2", "--hf", tp("out"), "--llmc", tp("user.bin"), NULL},
                 "user.bin exists");
  mkdir(tp("userdir"), 0755);
  write_bytes(tp("userdir/config.json"), "{}", 2);
  expect_refused((const char *[]){good, "--heads", "2", "--hf", tp("userdir"), NULL},
                 "userdir/config.json exists");
  expect_refused((const char *[]){good, "--heads", "2", "--hf", tp("no/such/dir"), NULL},
                 "no/such/dir: cannot create");
  /* A failure after the directory was made removes it (and what went into it). */
  expect_refused((const char *[]){good, "--heads", "2", "--hf", tp("out"), "--llmc", tp("no/such/x.bin"), NULL},
                 "x.bin: cannot create");
  char err[IO_ERR_LEN];
  size_t len;
  char *text = io_read_all(tp("user.bin"), &len, err, sizeof err);
  EXPECT(text && len == 4 && memcmp(text, "mine", 4) == 0);
  free(text);
  /* --force replaces them (and only the two files of the directory). */
  write_bytes(tp("userdir/README"), "keep", 4);
  EXPECT_EQ_INT(run_export((const char *[]){good, "--heads", "2", "--force", "--hf", tp("userdir"), "--llmc",
                                            tp("user.bin"), NULL}),
                0);
  expect_roundtrip(tp("user.bin"), CKPT_LLMC, V, V);
  expect_roundtrip(tp("userdir/model.safetensors"), CKPT_HF, V, V);
  struct stat sb;
  EXPECT(stat(tp("userdir/README"), &sb) == 0);
}

static void remove_dir(const char *name) {
  const char *files[] = {"model.safetensors", "config.json", "README"};
  char p[1200];
  for (int i = 0; i < 3; i++) {
    snprintf(p, sizeof p, "%s/%s", tp(name), files[i]);
    unlink(p);
  }
  rmdir(tp(name));
}

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: test_ckpt_export PATH/TO/pd2bw-export\n");
    return 2;
  }
  tool = argv[1];
  tmp_init("export");
  make_model();
  RUN(test_hf_and_llmc);
  RUN(test_padded_vocab);
  RUN(test_errors);
  remove_dir("hf");
  remove_dir("hf9");
  remove_dir("userdir");
  for (int i = 0; i < NP; i++) free(values[i]);
  tmp_cleanup(test_failed_);
  return TEST_REPORT();
}
