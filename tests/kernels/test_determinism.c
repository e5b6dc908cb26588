/* Same inputs, same thread count => same bits, with 2 BLAS threads.
 *
 * The pipeline executor's equivalence tests and "the same losses on every
 * transport" compare runs bit for bit, so a forward+backward must not depend on
 * timing when BLIS runs its GEMMs on two threads (a report said attention_bwd's
 * GEMMs gave different gradient bits from run to run with pd_blas_init(2)). Two
 * levels:
 *  - the attention kernels through pd_sgemm, repeated with their buffers at other
 *    alignments, and run concurrently from two threads (the local transport runs
 *    ranks as threads), for the tiny GPT's shape and a block-split one, with and
 *    without dropout;
 *  - a whole tiny GPT through the real path (autodiff, codegen, cc, trainer): two
 *    trainers from the same seed take two steps on the same data; their losses,
 *    gradients and weights must be identical bits.
 * Bits are compared with memcmp: a tolerance would hide exactly this bug. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "build_models.h"
#include "codegen/codegen.h"
#include "passes/passes.h"
#include "runtime/blas/blas.h"
#include "kernels/cpu_kernels.h"
#include "runtime/pipeline/pipeline.h"
#include "test.h"

typedef struct AttShape {
  int B, T, C, NH;
  double p;
} AttShape;

/* Deterministic values in [-1, 1]. */
static void fill(float *x, size_t n, uint32_t seed) {
  for (size_t i = 0; i < n; i++) {
    seed = seed * 1664525u + 1013904223u;
    x[i] = (float)((int)((seed >> 8) % 2001) - 1000) * 1e-3f;
  }
}

/* A float buffer of n elements starting `shift` floats past a 64-byte boundary. */
static float *shifted(float **base, size_t n, int shift) {
  *base = aligned_alloc(64, (n + 16) * sizeof(float) + 64 - ((n + 16) * sizeof(float)) % 64);
  return *base + shift;
}

/* out and dqkv of one attention forward+backward; buffers at `shift`. */
static void att_run(const AttShape *s, int shift, float *out_copy, float *dqkv_copy) {
  size_t nq = (size_t)s->B * s->T * 3 * s->C, no = (size_t)s->B * s->T * s->C;
  size_t nw = (size_t)pk_attention_work_elems(s->B, s->T, s->NH);
  size_t nl = (size_t)s->B * s->NH * s->T;
  float *b1, *b2, *b3, *b4, *b5, *b6;
  float *qkv = shifted(&b1, nq, shift % 16), *dy = shifted(&b2, no, (shift * 3) % 16);
  float *out = shifted(&b3, no, (shift * 5) % 16), *dq = shifted(&b4, nq, (shift * 7) % 16);
  float *work = shifted(&b5, nw, (shift * 11) % 16), *lse = shifted(&b6, nl, (shift * 13) % 16);
  fill(qkv, nq, 1);
  fill(dy, no, 2);
  PkRng rng = {7, 3, 1};
  pk_attention_fwd_f32(out, lse, qkv, work, s->B, s->T, s->C, s->NH, 1, s->p, rng);
  pk_attention_bwd_f32(dq, dy, qkv, out, lse, work, s->B, s->T, s->C, s->NH, 1, s->p, rng);
  memcpy(out_copy, out, no * sizeof(float));
  memcpy(dqkv_copy, dq, nq * sizeof(float));
  free(b1), free(b2), free(b3), free(b4), free(b5), free(b6);
}

static const AttShape att_shapes[] = {
    {4, 64, 64, 4, 0.0}, /* the tiny GPT: blocks of 16 query rows */
    {4, 16, 32, 2, 0.0}, /* tests/runtime's GPT: blocks of 8 */
    {2, 48, 96, 3, 0.1}, /* dropout on the probabilities */
};

typedef struct AttJob {
  const AttShape *s;
  const float *ref_out, *ref_dq;
  int reps, bad;
} AttJob;

static void *att_job(void *arg) {
  AttJob *j = arg;
  const AttShape *s = j->s;
  size_t nq = (size_t)s->B * s->T * 3 * s->C, no = (size_t)s->B * s->T * s->C;
  float *o = malloc(no * sizeof(float)), *d = malloc(nq * sizeof(float));
  for (int r = 0; r < j->reps; r++) {
    att_run(s, r + 1, o, d);
    j->bad += memcmp(o, j->ref_out, no * sizeof(float)) != 0 ||
              memcmp(d, j->ref_dq, nq * sizeof(float)) != 0;
  }
  free(o);
  free(d);
  return NULL;
}

static void test_attention_repeats_bitwise(void) {
  for (size_t k = 0; k < sizeof att_shapes / sizeof att_shapes[0]; k++) {
    const AttShape *s = &att_shapes[k];
    size_t nq = (size_t)s->B * s->T * 3 * s->C, no = (size_t)s->B * s->T * s->C;
    float *ro = malloc(no * sizeof(float)), *rd = malloc(nq * sizeof(float));
    att_run(s, 0, ro, rd);
    AttJob seq = {s, ro, rd, 8, 0};
    att_job(&seq); /* one after another, other alignments */
    EXPECT_EQ_INT(seq.bad, 0);
    AttJob par[2] = {{s, ro, rd, 4, 0}, {s, ro, rd, 4, 0}};
    pthread_t th[2];
    for (int i = 0; i < 2; i++) EXPECT(pthread_create(&th[i], NULL, att_job, &par[i]) == 0);
    for (int i = 0; i < 2; i++) EXPECT(pthread_join(th[i], NULL) == 0);
    EXPECT_EQ_INT(par[0].bad + par[1].bad, 0);
    free(ro);
    free(rd);
  }
}

/* ---- a whole tiny GPT through codegen and the trainer ---------------------------- */

static char tmpdir[64];

typedef struct RunOut {
  double loss[2];
  float *grads, *params;
  int64_t bytes;
} RunOut;

static bool gpt_run(const RtPlan *p, const char *data, RunOut *o) {
  char err[RT_ERR_LEN], ierr[IO_ERR_LEN];
  Trainer *t = trainer_create(p, NULL, err, sizeof err);
  DataFile *f = t ? data_open(data, DATA_AUTO, 64, ierr, sizeof ierr) : NULL;
  DataLoader *l = f ? data_loader_create(f, 8, 32, false, 0, ierr, sizeof ierr) : NULL;
  if (!l) {
    fprintf(stderr, "%s%s\n", t ? "" : err, t ? ierr : "");
    return false;
  }
  StepStats st;
  for (int i = 0; i < 2; i++) {
    trainer_step(t, l, &st);
    o->loss[i] = st.loss;
  }
  o->bytes = trainer_stage(t)->blocks[BUF_PARAMS];
  o->grads = malloc((size_t)o->bytes);
  o->params = malloc((size_t)o->bytes);
  memcpy(o->grads, trainer_grads(t), (size_t)o->bytes);
  memcpy(o->params, trainer_params(t), (size_t)o->bytes);
  data_loader_destroy(l);
  data_close(f);
  trainer_destroy(t);
  return true;
}

static void test_tiny_gpt_repeats_bitwise(void) {
  char plan[128], data[128];
  snprintf(plan, sizeof plan, "%s/plan", tmpdir);
  snprintf(data, sizeof data, "%s/train.bin", tmpdir);
  Arena *a = arena_create();
  Diag d;
  diag_init(&d, stderr);
  /* vocab 64, T 32, width 64, 4 heads, 2 layers; 2 microbatches of 4 */
  Graph *g = build_tiny_gpt(a, &d, 64, 32, 64, 4, 2);
  g->train = (TrainConfig){.batch = 8, .microbatch = 4, .optimizer = OPT_ADAMW, .lr = 1e-3,
                           .beta1 = 0.9, .beta2 = 0.99, .eps = 1e-8, .weight_decay = 0.1,
                           .schedule = LR_CONSTANT, .clip = 1.0, .seed = 3};
  bool ok = pass_autodiff(g, &d) &&
            codegen_single_stage_plan(g, 4, 2, &(CodegenOptions){.fuse = true}, plan, &d);
  graph_destroy(g);
  arena_destroy(a);
  EXPECT(ok);
  FILE *f = fopen(data, "wb");
  EXPECT(f != NULL);
  if (!ok || !f) return;
  uint32_t r = 99;
  for (int i = 0; i < 8 * 33 * 3; i++) {
    r = r * 1664525u + 1013904223u;
    uint16_t tok = (uint16_t)((r >> 8) % 64);
    fwrite(&tok, sizeof tok, 1, f);
  }
  fclose(f);
  char err[RT_ERR_LEN];
  RtPlan *p = rt_plan_load(plan, err, sizeof err);
  if (!p) fprintf(stderr, "%s\n", err);
  EXPECT(p != NULL);
  if (!p) return;
  RunOut ref = {0};
  EXPECT(gpt_run(p, data, &ref));
  for (int rep = 0; rep < 3 && ref.grads; rep++) {
    RunOut o = {0};
    EXPECT(gpt_run(p, data, &o));
    if (!o.grads) break;
    EXPECT(o.loss[0] == ref.loss[0] && o.loss[1] == ref.loss[1]);
    EXPECT(memcmp(o.grads, ref.grads, (size_t)ref.bytes) == 0);
    EXPECT(memcmp(o.params, ref.params, (size_t)ref.bytes) == 0);
    free(o.grads);
    free(o.params);
  }
  free(ref.grads);
  free(ref.params);
  rt_plan_free(p);
}

int main(void) {
  (void)build_mlp;
  snprintf(tmpdir, sizeof tmpdir, "/tmp/pd2bw-det-XXXXXX");
  if (!mkdtemp(tmpdir)) return 1;
  char cache[300];
  snprintf(cache, sizeof cache, "/tmp/pd2bw-test-cache-%ld", (long)getuid());
  setenv("PD2BW_CACHE", cache, 0);
  setenv("OMP_NUM_THREADS", "2", 1);
  pd_blas_init(2); /* the point of the test: two BLAS threads */
  pk_set_sgemm(pd_sgemm);
  RUN(test_attention_repeats_bitwise);
  RUN(test_tiny_gpt_repeats_bitwise);
  char cmd[200];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmpdir);
  return TEST_REPORT();
}
