/* Hugging Face Llama checkpoints in and out (runtime/io/ckpt_llama.c, tools/export_llama.c),
 * on the directories transformers' save_pretrained wrote (tests/llama_hf/, by
 * tests/llama_hf/gen_fixtures.py):
 *  - --init's reader fills pd2bw's parameters from gqa_untied (one model.safetensors)
 *    and from mha_odd_tied (three shards and their index), every element checked
 *    against the stored tensor: Linear weights transposed, the rest as stored; a tied
 *    checkpoint fills an untied model's head with the embedding when the plan has no
 *    tied param;
 *  - pd2bw-export writes a pd2bw checkpoint of it back as a LlamaForCausalLM directory
 *    that imports bit for bit, whose tensors are the original file's bit for bit, and
 *    whose config.json carries the heads, kv_heads, rope theta and eps the checkpoint's
 *    "consts" metadata recorded (no flags); without the metadata it asks for --heads;
 *  - bad directories: config.json against the model's parameters and params (heads,
 *    kv_heads, rope theta, eps, tie_word_embeddings: plan.json's model.consts; both
 *    values named),
 *    rope scaling refused naming it, another model_type, a missing shard, a tensor of
 *    no parameter.
 *   usage: test_ckpt_llama PATH/TO/pd2bw-export   (run in the source directory) */
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

#define GQA "tests/llama_hf/gqa_untied"
#define MHA "tests/llama_hf/mha_odd_tied"

static const char *tool;

/* A Llama model's parameters (models/llama.model's names and shapes). */
typedef struct Model {
  int n;
  char names[64][32];
  CkptParam p[64];
} Model;

static void add(Model *m, const char *name, int64_t rows, int64_t cols) {
  CkptParam *p = &m->p[m->n];
  snprintf(m->names[m->n], sizeof m->names[0], "%s", name);
  p->name = m->names[m->n];
  p->rank = rows ? 2 : 1;
  p->shape[0] = rows ? rows : cols;
  p->shape[1] = rows ? cols : 0;
  p->dst = calloc((size_t)((rows ? rows : 1) * cols), sizeof(float));
  m->n++;
}

static void make(Model *m, int L, int64_t V, int64_t C, int64_t H, int64_t KV, int64_t F, bool head) {
  memset(m, 0, sizeof *m);
  int64_t hd = C / H;
  add(m, "embed", V, C);
  for (int l = 0; l < L; l++) {
    char n[32];
#define LAYER(s, r, c) (snprintf(n, sizeof n, "h.%d." s, l), add(m, n, r, c))
    LAYER("attn_norm", 0, C);
    LAYER("wq", C, H * hd);
    LAYER("wk", C, KV * hd);
    LAYER("wv", C, KV * hd);
    LAYER("wo", H * hd, C);
    LAYER("mlp_norm", 0, C);
    LAYER("w_gate", C, F);
    LAYER("w_up", C, F);
    LAYER("w_down", F, C);
#undef LAYER
  }
  add(m, "norm", 0, C);
  if (head) add(m, "head", V, C);
}

static void drop(Model *m) {
  for (int i = 0; i < m->n; i++) free(m->p[i].dst);
}

static float *find(Model *m, const char *name) {
  for (int i = 0; i < m->n; i++)
    if (strcmp(m->names[i], name) == 0) return m->p[i].dst;
  return NULL;
}

static bool import(const char *dir, Model *m, char *err, size_t errlen) {
  return ckpt_import(dir, CKPT_AUTO, m->p, m->n, err, errlen);
}

/* Every parameter against the Hugging Face tensor it came from (in any of the
 * directory's files): bit for bit, transposed for Linear weights. Returns the number
 * of elements compared. */
static int64_t check_against_files(Model *m, const char *dir, const char *const *files, int nfiles, bool tied) {
  SafeTensors *st[4];
  char err[IO_ERR_LEN], path[512];
  for (int f = 0; f < nfiles; f++) {
    snprintf(path, sizeof path, "%s/%s", dir, files[f]);
    st[f] = st_open(path, err, sizeof err);
    EXPECT(st[f] != NULL);
    if (!st[f]) return 0;
  }
  int64_t compared = 0, bad = 0;
  for (int i = 0; i < m->n; i++) {
    int kind, layer;
    EXPECT(ckpt_llama_name(m->names[i], &kind, &layer));
    CkptLlamaKind k = ckpt_llama_kind(kind);
    char hf[256];
    ckpt_llama_hf_name(tied && kind == CKPT_LLAMA_KINDS - 1 ? 0 : kind, layer, hf, sizeof hf);
    const StTensor *t = NULL;
    int in = 0;
    for (int f = 0; f < nfiles && !t; f++)
      if ((t = st_find(st[f], hf))) in = f;
    EXPECT(t != NULL);
    if (!t) continue;
    EXPECT_EQ_INT(t->dtype, ST_F32);
    float *src = malloc((size_t)t->numel * sizeof *src);
    EXPECT(st_read_f32(st[in], t, src, err, sizeof err));
    const CkptParam *p = &m->p[i];
    int64_t rows = p->rank == 2 ? p->shape[0] : 1, cols = p->rank == 2 ? p->shape[1] : p->shape[0];
    for (int64_t r = 0; r < rows; r++)
      for (int64_t c = 0; c < cols; c++) {
        float want = k.linear ? src[c * rows + r] : src[r * cols + c];
        bad += memcmp(&want, &p->dst[r * cols + c], 4) != 0;
        compared++;
      }
    free(src);
  }
  EXPECT_EQ_INT(bad, 0);
  for (int f = 0; f < nfiles; f++) st_close(st[f]);
  return compared;
}

static void test_import_single_file(void) {
  Model m;
  make(&m, 2, 256, 32, 4, 2, 64, true);
  char err[IO_ERR_LEN];
  bool ok = import(GQA, &m, err, sizeof err);
  if (!ok) fprintf(stderr, "%s\n", err);
  EXPECT(ok);
  const char *files[] = {"model.safetensors"};
  int64_t n = check_against_files(&m, GQA, files, 1, false);
  EXPECT_EQ_INT(n, 34976); /* every parameter: 8192 + 2·(32 + 1024 + 512 + 512 + 1024 + 32 + 3·2048) + 32 + 8192 */
  /* a Linear weight is not square-symmetric: the transposition is visible */
  EXPECT(find(&m, "h.0.wq")[1] != find(&m, "h.0.wq")[32]);
  drop(&m);
}

static void test_import_shards(void) {
  Model m;
  make(&m, 3, 256, 32, 4, 4, 48, false);
  char err[IO_ERR_LEN];
  bool ok = import(MHA, &m, err, sizeof err);
  if (!ok) fprintf(stderr, "%s\n", err);
  EXPECT(ok);
  const char *files[] = {"model-00001-of-00003.safetensors", "model-00002-of-00003.safetensors",
                         "model-00003-of-00003.safetensors"};
  EXPECT_EQ_INT(check_against_files(&m, MHA, files, 3, false), 34528);
  drop(&m);
  /* tied checkpoint, untied model: the head starts as the embedding */
  make(&m, 3, 256, 32, 4, 4, 48, true);
  ok = import(MHA, &m, err, sizeof err);
  if (!ok) fprintf(stderr, "%s\n", err);
  EXPECT(ok);
  EXPECT(memcmp(find(&m, "head"), find(&m, "embed"), 256 * 32 * 4) == 0);
  EXPECT_EQ_INT(check_against_files(&m, MHA, files, 3, true), 34528 + 8192);
  drop(&m);
}

/* Runs pd2bw-export with args (NULL-terminated); its exit status, stderr in msg. */
static char msg[4096];
static int run_export(const char *const *args) {
  const char *argv[32] = {tool};
  int n = 1;
  for (; args[n - 1]; n++) argv[n] = args[n - 1];
  argv[n] = NULL;
  char errp[1024];
  snprintf(errp, sizeof errp, "%s", tmp_path("stderr.txt"));
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 2, errp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
  pid_t pid;
  if (posix_spawn(&pid, tool, &fa, NULL, (char *const *)argv, environ) != 0) {
    fprintf(stderr, "cannot run %s\n", tool);
    exit(2);
  }
  posix_spawn_file_actions_destroy(&fa);
  int status;
  waitpid(pid, &status, 0);
  FILE *f = fopen(errp, "r");
  size_t got = f ? fread(msg, 1, sizeof msg - 1, f) : 0;
  msg[got] = '\0';
  if (f) fclose(f);
  unlink(errp);
  int rc = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  if (rc != 1 && msg[0]) fprintf(stderr, "pd2bw-export said: %s", msg);
  return rc;
}

/* A pd2bw checkpoint of m (what pd2bwrun --save writes), with consts metadata or none. */
static void write_pd2bw(Model *m, const char *path, const char *consts) {
  StEntry e[64];
  for (int i = 0; i < m->n; i++) {
    e[i] = (StEntry){.name = m->names[i], .dtype = ST_F32, .rank = m->p[i].rank, .data = m->p[i].dst};
    memcpy(e[i].shape, m->p[i].shape, sizeof m->p[i].shape);
  }
  const char *meta[] = {"format", "pd2bw", "model", "llama", "step", "0", "consts", consts};
  char err[IO_ERR_LEN];
  bool ok = st_write(path, e, m->n, meta, consts ? 4 : 3, err, sizeof err);
  if (!ok) fprintf(stderr, "%s\n", err);
  EXPECT(ok);
}

static double cfg_num(const cJSON *c, const char *key) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(c, key);
  return cJSON_IsNumber(v) ? v->valuedouble : -1;
}

static void test_export_roundtrip(void) {
  Model m, back;
  make(&m, 2, 256, 32, 4, 2, 64, true);
  char err[IO_ERR_LEN];
  EXPECT(import(GQA, &m, err, sizeof err));
  char ckpt[1024], out[1024];
  snprintf(ckpt, sizeof ckpt, "%s", tmp_path("llama.safetensors"));
  snprintf(out, sizeof out, "%s", tmp_path("hf"));
  write_pd2bw(&m, ckpt,
              "{\"vocab\":256,\"seq\":16,\"layers\":2,\"dim\":32,\"heads\":4,\"kv_heads\":2,\"ffn\":64,"
              "\"rope_theta\":10000,\"rms_eps\":1e-05}");
  const char *args[] = {ckpt, "--hf", out, NULL};
  EXPECT_EQ_INT(run_export(args), 0);
  /* read back with --init's reader: bit for bit */
  make(&back, 2, 256, 32, 4, 2, 64, true);
  bool ok = import(out, &back, err, sizeof err);
  if (!ok) fprintf(stderr, "%s\n", err);
  EXPECT(ok);
  int bad = 0;
  for (int i = 0; i < m.n; i++) {
    int64_t numel = m.p[i].rank == 2 ? m.p[i].shape[0] * m.p[i].shape[1] : m.p[i].shape[0];
    bad += memcmp(m.p[i].dst, back.p[i].dst, (size_t)numel * 4) != 0;
  }
  EXPECT_EQ_INT(bad, 0);
  /* and the written tensors are transformers' own, bit for bit */
  const char *files[] = {"model.safetensors"};
  EXPECT_EQ_INT(check_against_files(&back, GQA, files, 1, false), 34976);
  char cfgp[1100];
  snprintf(cfgp, sizeof cfgp, "%s/config.json", out);
  size_t len;
  char *text = io_read_all(cfgp, &len, err, sizeof err);
  cJSON *cfg = text ? cJSON_Parse(text) : NULL;
  EXPECT(cfg != NULL);
  EXPECT(cfg_num(cfg, "num_attention_heads") == 4);
  EXPECT(cfg_num(cfg, "num_key_value_heads") == 2);
  EXPECT(cfg_num(cfg, "head_dim") == 8);
  EXPECT(cfg_num(cfg, "rope_theta") == 10000);
  EXPECT(cfg_num(cfg, "rms_norm_eps") == 1e-5);
  EXPECT(cfg_num(cfg, "intermediate_size") == 64);
  EXPECT(cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(cfg, "tie_word_embeddings")));
  cJSON_Delete(cfg);
  free(text);
  /* a checkpoint written before the consts metadata: the flags give them */
  write_pd2bw(&m, ckpt, NULL);
  const char *old[] = {ckpt, "--hf", tmp_path("hf_old"), NULL};
  EXPECT_EQ_INT(run_export(old), 1);
  EXPECT(strstr(msg, "does not record heads") && strstr(msg, "give --heads"));
  const char *flags[] = {ckpt,  "--hf", tmp_path("hf_old"), "--heads", "4", "--kv-heads", "2", "--rope-theta",
                         "1e4", "--rms-eps", "1e-5", NULL};
  EXPECT_EQ_INT(run_export(flags), 0);
  /* a flag that contradicts the checkpoint */
  write_pd2bw(&m, ckpt, "{\"heads\":4,\"kv_heads\":2,\"rope_theta\":10000,\"rms_eps\":1e-05}");
  const char *contra[] = {ckpt, "--hf", tmp_path("hf_c"), "--heads", "8", NULL};
  EXPECT_EQ_INT(run_export(contra), 1);
  EXPECT(strstr(msg, "--heads 8: the checkpoint records heads = 4") != NULL);
  drop(&m);
  drop(&back);
}

/* dir/name parsed as JSON (NULL when missing or malformed). */
static cJSON *read_json(const char *dir, const char *name) {
  char path[1100], err[IO_ERR_LEN];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  size_t len;
  char *text = io_read_all(path, &len, err, sizeof err);
  cJSON *j = text ? cJSON_Parse(text) : NULL;
  free(text);
  return j;
}

static bool exists_in(const char *dir, const char *name) {
  char path[1100];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  return access(path, F_OK) == 0;
}

/* --max-shard-size: mha_odd_tied's weights exported with the limit transformers saved
 * them under ("60KB") land in the same three shards, tensor for tensor, with the same
 * index totals; they import back bit for bit and are transformers' own tensors. A limit
 * below the largest tensors gives those a shard each; --force replaces a sharded export
 * with one file and back, leaving nothing of the other. */
static void test_export_shards(void) {
  Model m, back;
  make(&m, 3, 256, 32, 4, 4, 48, false);
  char err[IO_ERR_LEN];
  EXPECT(import(MHA, &m, err, sizeof err));
  char ckpt[1024], out[1024];
  snprintf(ckpt, sizeof ckpt, "%s", tmp_path("tied.safetensors"));
  snprintf(out, sizeof out, "%s", tmp_path("hf_shards"));
  write_pd2bw(&m, ckpt,
              "{\"vocab\":256,\"seq\":16,\"layers\":3,\"dim\":32,\"heads\":4,\"kv_heads\":4,\"ffn\":48,"
              "\"rope_theta\":500000,\"rms_eps\":1e-06}");
  const char *args[] = {ckpt, "--hf", out, "--max-shard-size", "60KB", NULL};
  EXPECT_EQ_INT(run_export(args), 0);
  EXPECT(!exists_in(out, "model.safetensors"));
  cJSON *mine = read_json(out, "model.safetensors.index.json"), *hf = read_json(MHA, "model.safetensors.index.json");
  EXPECT(mine && hf);
  if (mine && hf) {
    const cJSON *mm = cJSON_GetObjectItemCaseSensitive(mine, "metadata"), *hm = cJSON_GetObjectItemCaseSensitive(hf, "metadata");
    EXPECT(cfg_num(mm, "total_size") == cfg_num(hm, "total_size") && cfg_num(hm, "total_size") == 138112);
    EXPECT(cfg_num(mm, "total_parameters") == cfg_num(hm, "total_parameters"));
    const cJSON *mw = cJSON_GetObjectItemCaseSensitive(mine, "weight_map"), *hw = cJSON_GetObjectItemCaseSensitive(hf, "weight_map");
    EXPECT_EQ_INT(cJSON_GetArraySize(mw), cJSON_GetArraySize(hw));
    int differ = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, hw) {
      const cJSON *o = cJSON_GetObjectItemCaseSensitive(mw, e->string);
      if (!cJSON_IsString(o) || strcmp(o->valuestring, e->valuestring) != 0) {
        if (differ++ < 3) fprintf(stderr, "  %s: transformers %s, pd2bw-export %s\n", e->string, e->valuestring,
                                  cJSON_IsString(o) ? o->valuestring : "(none)");
      }
    }
    EXPECT_EQ_INT(differ, 0);
  }
  cJSON_Delete(mine);
  cJSON_Delete(hf);
  make(&back, 3, 256, 32, 4, 4, 48, false);
  bool ok = import(out, &back, err, sizeof err);
  if (!ok) fprintf(stderr, "%s\n", err);
  EXPECT(ok);
  int bad = 0;
  for (int i = 0; i < m.n; i++) {
    int64_t numel = m.p[i].rank == 2 ? m.p[i].shape[0] * m.p[i].shape[1] : m.p[i].shape[0];
    bad += memcmp(m.p[i].dst, back.p[i].dst, (size_t)numel * 4) != 0;
  }
  EXPECT_EQ_INT(bad, 0);
  const char *files[] = {"model-00001-of-00003.safetensors", "model-00002-of-00003.safetensors",
                         "model-00003-of-00003.safetensors"};
  EXPECT_EQ_INT(check_against_files(&back, out, files, 3, false), 34528);
  drop(&back);
  /* an export there without --force is refused, a lone shard too */
  const char *again[] = {ckpt, "--hf", out, "--max-shard-size", "60KB", NULL};
  EXPECT_EQ_INT(run_export(again), 1);
  EXPECT(strstr(msg, "config.json exists (give --force") != NULL);
  char lone[1100];
  snprintf(lone, sizeof lone, "%s/lone", out);
  EXPECT(mkdir(lone, 0777) == 0);
  snprintf(lone, sizeof lone, "%s/lone/model-00002-of-00003.safetensors", out);
  write_bytes(lone, "x", 1);
  snprintf(lone, sizeof lone, "%s/lone", out);
  const char *lone_args[] = {ckpt, "--hf", lone, NULL};
  EXPECT_EQ_INT(run_export(lone_args), 1);
  EXPECT(strstr(msg, "lone/model-00002-of-00003.safetensors exists (give --force") != NULL);
  /* --force, no limit: one model.safetensors, the shards and index gone */
  const char *one[] = {ckpt, "--hf", out, "--force", NULL};
  EXPECT_EQ_INT(run_export(one), 0);
  EXPECT(exists_in(out, "model.safetensors") && !exists_in(out, "model.safetensors.index.json") &&
         !exists_in(out, files[0]) && !exists_in(out, files[2]));
  /* 20KB: the 32768-byte embedding alone; every other shard within the limit */
  const char *small[] = {ckpt, "--hf", out, "--force", "--max-shard-size", "20KB", NULL};
  EXPECT_EQ_INT(run_export(small), 0);
  EXPECT(!exists_in(out, "model.safetensors"));
  cJSON *idx = read_json(out, "model.safetensors.index.json");
  const cJSON *wm = cJSON_GetObjectItemCaseSensitive(idx, "weight_map"), *emb = cJSON_GetObjectItemCaseSensitive(wm, "model.embed_tokens.weight");
  EXPECT(cJSON_IsString(emb) && strncmp(emb->valuestring, "model-00001-of-", 15) == 0);
  int nshards = 0, over = 0;
  for (int s = 1; s < 100; s++) {
    char name[64];
    snprintf(name, sizeof name, "model-%05d-of-", s);
    int ntensors = 0;
    int64_t bytes = 0;
    const cJSON *e;
    char path[1100];
    cJSON_ArrayForEach(e, wm) if (strncmp(e->valuestring, name, strlen(name)) == 0) {
      ntensors++;
      snprintf(path, sizeof path, "%s/%s", out, e->valuestring);
    }
    if (!ntensors) break;
    nshards++;
    SafeTensors *st = st_open(path, err, sizeof err);
    EXPECT(st && st_count(st) == ntensors);
    for (int i = 0; st && i < st_count(st); i++) bytes += (int64_t)st_tensor(st, i)->nbytes;
    over += ntensors > 1 && bytes > 20000;
    st_close(st);
  }
  EXPECT(nshards >= 6);
  EXPECT_EQ_INT(over, 0);
  cJSON_Delete(idx);
  make(&back, 3, 256, 32, 4, 4, 48, false);
  EXPECT(import(out, &back, err, sizeof err));
  EXPECT(memcmp(find(&back, "h.2.w_down"), find(&m, "h.2.w_down"), 48 * 32 * 4) == 0);
  drop(&back);
  /* bad sizes; a GPT-2 checkpoint is not sharded */
  const char *bad_size[] = {ckpt, "--hf", tmp_path("hf_x"), "--max-shard-size", "5XB", NULL};
  EXPECT_EQ_INT(run_export(bad_size), 1);
  EXPECT(strstr(msg, "--max-shard-size 5XB: expected a size") != NULL);
  drop(&m);
}

/* A copy of fixture dir (its safetensors files linked) with config.json's key set to
 * the JSON value (NULL: removed), or file `unlinked` left out; the scratch dir's name. */
static const char *bad_dir(const char *name, const char *fixture, const char *key, const char *value,
                           const char *left_out) {
  static char dir[1024];
  snprintf(dir, sizeof dir, "%s", tmp_path(name));
  mkdir(dir, 0777);
  const char *files[] = {"model.safetensors", "model.safetensors.index.json", "model-00001-of-00003.safetensors",
                         "model-00002-of-00003.safetensors", "model-00003-of-00003.safetensors"};
  char src[1200], dst[1200], cwd[512];
  EXPECT(getcwd(cwd, sizeof cwd) != NULL);
  for (int i = 0; i < 5; i++) {
    snprintf(src, sizeof src, "%s/%s/%s", cwd, fixture, files[i]);
    snprintf(dst, sizeof dst, "%s/%s", dir, files[i]);
    if (access(src, F_OK) == 0 && !(left_out && strcmp(left_out, files[i]) == 0)) EXPECT(symlink(src, dst) == 0);
  }
  char err[IO_ERR_LEN];
  size_t len;
  snprintf(src, sizeof src, "%s/config.json", fixture);
  char *text = io_read_all(src, &len, err, sizeof err);
  cJSON *cfg = cJSON_Parse(text);
  if (key) {
    cJSON_DeleteItemFromObjectCaseSensitive(cfg, key);
    if (value) cJSON_AddItemToObject(cfg, key, cJSON_Parse(value));
  }
  char *out = cJSON_Print(cfg);
  snprintf(dst, sizeof dst, "%s/config.json", dir);
  write_bytes(dst, out, strlen(out));
  cJSON_free(out);
  cJSON_Delete(cfg);
  free(text);
  return dir;
}

static void expect_import_error(const char *dir, Model *m, const char *want1, const char *want2) {
  char err[IO_ERR_LEN] = "";
  EXPECT(!import(dir, m, err, sizeof err));
  bool has = strstr(err, want1) && (!want2 || strstr(err, want2));
  if (!has) fprintf(stderr, "got: %s\nwanted: %s ... %s\n", err, want1, want2 ? want2 : "");
  EXPECT(has);
}

static void test_errors(void) {
  Model m;
  make(&m, 2, 256, 32, 4, 2, 64, true);
  expect_import_error(bad_dir("e1", GQA, "hidden_size", "48", NULL), &m, "config.json: hidden_size is 48",
                      "parameter \"embed\" is [256,32] (32)");
  expect_import_error(bad_dir("e2", GQA, "num_key_value_heads", "4", NULL), &m,
                      "num_key_value_heads x head_dim (4 x 8) is 32", "\"h.0.wk\" is [32,16] (16)");
  expect_import_error(bad_dir("e3", GQA, "num_hidden_layers", "3", NULL), &m, "num_hidden_layers is 3",
                      "the model has 2 layers");
  expect_import_error(bad_dir("e4", GQA, "intermediate_size", "65", NULL), &m, "intermediate_size is 65",
                      "\"h.0.w_gate\" is [32,64] (64)");
  expect_import_error(bad_dir("e5", GQA, "rope_scaling",
                              "{\"rope_type\": \"llama3\", \"factor\": 8.0, \"low_freq_factor\": 1.0}", NULL),
                      &m, "config.json: rope_scaling: \"llama3\" rope scaling is not supported", NULL);
  expect_import_error(bad_dir("e6", GQA, "rope_parameters", "{\"rope_type\": \"yarn\", \"rope_theta\": 1e4}", NULL),
                      &m, "config.json: rope_parameters: \"yarn\"", NULL);
  expect_import_error(bad_dir("e7", GQA, "model_type", "\"mistral\"", NULL), &m,
                      "model_type: \"mistral\" is not a Llama model", NULL);
  expect_import_error(bad_dir("e8", GQA, "attention_bias", "true", NULL), &m, "attention_bias: true", NULL);
  drop(&m);
  make(&m, 3, 256, 32, 4, 4, 48, false);
  expect_import_error(bad_dir("e9", MHA, NULL, NULL, "model-00002-of-00003.safetensors"), &m,
                      "model-00002-of-00003.safetensors: cannot open", NULL);
  expect_import_error(bad_dir("e10", MHA, "tie_word_embeddings", "false", NULL), &m,
                      "tie_word_embeddings is false", "no \"head\" parameter");
  drop(&m);
  /* what no shape shows, against the model's params (plan.json's model.consts) */
  make(&m, 2, 256, 32, 4, 2, 64, true);
  char err[IO_ERR_LEN] = "";
  const char *good = "{\"heads\":4,\"kv_heads\":2,\"rope_theta\":10000,\"rms_eps\":1e-05,\"dim\":32}";
  bool ok = ckpt_import_model(GQA, CKPT_AUTO, m.p, m.n, good, err, sizeof err);
  if (!ok) fprintf(stderr, "%s\n", err);
  EXPECT(ok);
  static const char *const bad[][2] = {
      {"{\"heads\":4,\"kv_heads\":2,\"rope_theta\":500000,\"rms_eps\":1e-05}",
       "config.json: rope_theta is 10000, but the model's param rope_theta is 500000 (plan it with -D rope_theta=10000)"},
      {"{\"heads\":4,\"kv_heads\":2,\"rope_theta\":10000,\"rms_eps\":1e-06}",
       "config.json: rms_norm_eps is 1e-05, but the model's param rms_eps is 1e-06"},
      {"{\"heads\":2,\"kv_heads\":2}", "config.json: num_attention_heads is 4, but the model's param heads is 2"},
      /* models/llama.model -D tied=1 against an untied checkpoint, though this model has a head */
      {"{\"heads\":4,\"kv_heads\":2,\"tied\":1}",
       "config.json: tie_word_embeddings is false, but the model's param tied is 1 (plan it with -D tied=0)"},
  };
  for (int i = 0; i < 4; i++) {
    EXPECT(!ckpt_import_model(GQA, CKPT_AUTO, m.p, m.n, bad[i][0], err, sizeof err));
    if (!strstr(err, bad[i][1])) fprintf(stderr, "got: %s\nwanted: %s\n", err, bad[i][1]);
    EXPECT(strstr(err, bad[i][1]) != NULL);
  }
  /* the tied param agrees: imports */
  const char *untied = "{\"heads\":4,\"kv_heads\":2,\"tied\":0}";
  ok = ckpt_import_model(GQA, CKPT_AUTO, m.p, m.n, untied, err, sizeof err);
  if (!ok) fprintf(stderr, "%s\n", err);
  EXPECT(ok);
  /* a tied checkpoint into a model planned untied: refused, though its head could start as
   * the embedding (what a plan without the param still gets, test_import_shards) */
  drop(&m);
  make(&m, 3, 256, 32, 4, 4, 48, true);
  EXPECT(!ckpt_import_model(MHA, CKPT_AUTO, m.p, m.n, "{\"tied\":0}", err, sizeof err));
  const char *want =
      "config.json: tie_word_embeddings is true, but the model's param tied is 0 (plan it with -D tied=1)";
  if (!strstr(err, want)) fprintf(stderr, "got: %s\nwanted: %s\n", err, want);
  EXPECT(strstr(err, want) != NULL);
  drop(&m);
  /* LlamaConfig's default when config.json does not say */
  make(&m, 2, 256, 32, 4, 2, 64, false);
  EXPECT(!ckpt_import_model(bad_dir("e11", GQA, "tie_word_embeddings", NULL, NULL), CKPT_AUTO, m.p, m.n,
                            "{\"tied\":1}", err, sizeof err));
  want = "tie_word_embeddings is false (not given: LlamaConfig's default), but the model's param tied is 1";
  if (!strstr(err, want)) fprintf(stderr, "got: %s\nwanted: %s\n", err, want);
  EXPECT(strstr(err, want) != NULL);
  drop(&m);
  /* fewer layers in the model than in the files: config says so first */
  make(&m, 1, 256, 32, 4, 2, 64, true);
  expect_import_error(GQA, &m, "num_hidden_layers is 2", "the model has 1 layers");
  drop(&m);
}

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: test_ckpt_llama PATH/TO/pd2bw-export\n");
    return 2;
  }
  tool = argv[1];
  tmp_init("llama");
  RUN(test_import_single_file);
  RUN(test_import_shards);
  RUN(test_export_roundtrip);
  RUN(test_export_shards);
  RUN(test_errors);
  if (!test_failed_) { /* tmp_cleanup removes plain files only */
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp_dir_);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmp_dir_);
  }
  return TEST_REPORT();
}
