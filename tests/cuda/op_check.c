/* tests/cuda/op_check.c — the op-by-op CUDA-vs-CPU checks (op_check.h says how).
 *
 * Shapes are small, odd and not multiples of 4, 32 or the block size, so every tail,
 * every grid-stride step and every row kernel's strided loop is exercised. Each
 * check states its bound next to it; the bounds are per float32 op class:
 *   - copies, masks, counts, bf16 bits ................. exact
 *   - elementwise arithmetic (FMA contraction) ......... 2e-6
 *   - transcendental elementwise (tanhf, expf) ......... 1e-5
 *   - row reductions (layernorm, softmax, CE) .......... 1e-5
 *   - attention (online vs two-pass softmax) ........... 1e-4
 *   - FP32 GEMM 1e-5, TF32 GEMM 5e-3, BF16 GEMM (same bf16 inputs on both) 1e-5
 *   - optimizer steps 1e-6, sums of squares (double) 1e-9
 */
#include "op_check_internal.h"

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda_kernel_list.h"
#include "kernels/cpu_kernels.h"


/* ---- helpers --------------------------------------------------------------------- */

uint64_t oc_next_u64(Ctx *c) { /* splitmix64 */
  uint64_t z = (c->rng += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

float oc_frand(Ctx *c) { /* uniform in [-1, 1) */
  return (float)((double)(oc_next_u64(c) >> 11) * (1.0 / 9007199254740992.0) * 2.0 - 1.0);
}

float *oc_rvec(Ctx *c, size_t n, float scale) {
  float *v = malloc((n ? n : 1) * sizeof *v);
  for (size_t i = 0; i < n; i++) v[i] = oc_frand(c) * scale;
  return v;
}

float *oc_zvec(size_t n) { return calloc(n ? n : 1, sizeof(float)); }

DevPtr oc_up(Ctx *c, const void *h, size_t bytes) {
  DevPtr p = c->d->alloc(c->d->ctx, bytes ? bytes : 4);
  if (bytes) c->d->upload(c->d->ctx, p, h, bytes);
  return p;
}

void oc_down(Ctx *c, void *h, DevPtr p, size_t bytes) {
  c->d->download(c->d->ctx, h, p, bytes);
}

static const struct {
  const char *name;
  PkcLaunchKind kind;
} kernel_kinds[] = {
#define KIND(k, kind) {#k, kind},
    PKC_KERNEL_LIST(KIND)
#undef KIND
};

/* The grid the code generator would use (pkc_grid), capped by the device's max_grid. */
unsigned oc_grid_for(Ctx *c, const char *kernel, int64_t items) {
  for (size_t i = 0; i < sizeof kernel_kinds / sizeof kernel_kinds[0]; i++)
    if (!strcmp(kernel_kinds[i].name, kernel))
      return pkc_grid(kernel_kinds[i].kind, items, c->d->block, c->d->max_grid);
  fprintf(stderr, "op_check: %s is not in cuda_kernel_list.h\n", kernel);
  abort();
}

bool oc_want(Ctx *c, const char *family) {
  if (c->only && !strstr(family, c->only)) return false;
  if (c->verbose) { /* a kernel that faults kills the process: say where we were */
    printf("-- %s\n", family);
    fflush(stdout);
  }
  c->d->reset(c->d->ctx);
  return true;
}

double oc_rel_err(const float *g, const float *r, size_t n) {
  double mx = 0, worst = 0;
  for (size_t i = 0; i < n; i++) {
    double a = fabs((double)r[i]);
    if (a > mx) mx = a;
  }
  if (mx < 1e-30) mx = 1e-30;
  for (size_t i = 0; i < n; i++) {
    double e = fabs((double)g[i] - (double)r[i]);
    if (!(e <= worst)) worst = e; /* a NaN makes worst NaN: fails below */
    if (isnan(e)) return NAN;
  }
  return worst / mx;
}

void oc_report(Ctx *c, const char *name, double err, double bound) {
  bool ok = err <= bound; /* false for NaN */
  c->nrun++;
  if (!ok) c->nfail++;
  if (!ok || c->verbose)
    printf("%s %-32s err %.3g %s %.3g\n", ok ? "ok  " : "FAIL", name, err, ok ? "<=" : ">", bound);
}

void oc_check_vec(Ctx *c, const char *name, DevPtr g, const float *ref, size_t n,
                      double bound) {
  float *h = oc_zvec(n);
  oc_down(c, h, g, n * sizeof(float));
  oc_report(c, name, oc_rel_err(h, ref, n), bound);
  free(h);
}

void oc_report_exact(Ctx *c, const char *name, bool ok, const char *detail) {
  c->nrun++;
  if (!ok) c->nfail++;
  if (!ok || c->verbose) printf("%s %-32s %s\n", ok ? "ok  " : "FAIL", name, detail);
}

static void oc_check_count(Ctx *c, const char *name, DevPtr dcount, int64_t want_n) {
  unsigned long long got = 0;
  oc_down(c, &got, dcount, sizeof got);
  char buf[96];
  snprintf(buf, sizeof buf, "bad-index count %llu (cpu %lld)", got, (long long)want_n);
  oc_report_exact(c, name, (long long)got == (long long)want_n, buf);
}

/* ---- elementwise helpers ----------------------------------------------------------- */

static void check_basic(Ctx *c) {
  if (!oc_want(c, "basic")) return;
  long long n = 1003;
  float *x = oc_rvec(c, n, 2), *y = oc_rvec(c, n, 2), *r = oc_zvec(n);
  DevPtr dx = oc_up(c, x, n * 4), dy = oc_up(c, y, n * 4), dz = oc_up(c, r, n * 4);
  float v = 0.25f, s = -1.75f, a = 0.5f;

  LAUNCH(c, "pkc_fill_f32", n, &dz, &v, &n);
  for (long long i = 0; i < n; i++) r[i] = v;
  oc_check_vec(c, "fill", dz, r, n, 0);

  LAUNCH(c, "pkc_copy_f32", n, &dz, &dx, &n);
  pk_copy_f32(r, x, n);
  oc_check_vec(c, "copy", dz, r, n, 0);

  /* the microbatch key's write (runtime/cuda/exec/cuda_exec_list.c): one u32, its neighbours kept */
  uint32_t key[3] = {7, 7, 7}, want_key[3] = {7, 0xdeadbeefu, 7}, got_key[3];
  DevPtr dkey = oc_up(c, key, sizeof key), dkey1 = dkey + 4;
  uint32_t kv = 0xdeadbeefu;
  LAUNCH(c, "pkc_set_u32", 1, &dkey1, &kv);
  oc_down(c, got_key, dkey, sizeof got_key);
  oc_report_exact(c, "set_u32", memcmp(got_key, want_key, sizeof key) == 0, "writes exactly its one u32");

  LAUNCH(c, "pkc_scale_inplace_f32", n, &dz, &s, &n);
  pk_scale_inplace_f32(r, s, n);
  oc_check_vec(c, "scale_inplace", dz, r, n, 0);

  LAUNCH(c, "pkc_axpy_f32", n, &dz, &a, &dy, &n);
  pk_axpy_f32(r, a, y, n);
  oc_check_vec(c, "axpy", dz, r, n, 2e-6);

  /* Σx² in double: phase 1 over a fixed grid, phase 2 in order. */
  unsigned grid = oc_grid_for(c, "pkc_sumsq_partial_f32", n);
  DevPtr part = c->d->alloc(c->d->ctx, grid * sizeof(double)), out = c->d->alloc(c->d->ctx, 8);
  int nparts = (int)grid;
  c->d->launch(c->d->ctx, "pkc_sumsq_partial_f32", grid, c->d->block, (void *[]){&part, &dx, &n});
  LAUNCH(c, "pkc_sumsq_final_f32", 1, &out, &part, &nparts);
  double got = 0, ref = pk_sumsq_f32(x, n);
  oc_down(c, &got, out, 8);
  oc_report(c, "sumsq", fabs(got - ref) / ref, 1e-9);
  free(x), free(y), free(r);
}

/* Round to nearest even, as __float2bfloat16_rn; NaN stays NaN. */
static uint16_t ref_bf16(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return (uint16_t)(u >> 16);
}

static float bf16_to_f32(uint16_t h) {
  uint32_t u = (uint32_t)h << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}

static void check_cast(Ctx *c) {
  if (!oc_want(c, "cast")) return;
  long long n = 517;
  float *x = oc_rvec(c, n, 100);
  x[0] = 0, x[1] = -0.0f, x[2] = INFINITY, x[3] = -INFINITY, x[4] = NAN;
  x[5] = bf16_to_f32(0x3f80) + bf16_to_f32(0x3f81) * 0; /* 1.0: exact */
  uint32_t tie = 0x3f808000u; /* exactly between two bf16 values: rounds to even */
  memcpy(&x[6], &tie, 4);
  uint32_t tie2 = 0x3f818000u;
  memcpy(&x[7], &tie2, 4);
  uint16_t *ref = malloc(n * 2), *got = malloc(n * 2);
  for (long long i = 0; i < n; i++) ref[i] = ref_bf16(x[i]);
  DevPtr dx = oc_up(c, x, n * 4), dh = c->d->alloc(c->d->ctx, n * 2),
         df = c->d->alloc(c->d->ctx, n * 4);
  LAUNCH(c, "pkc_cast_f32_to_bf16", n, &dh, &dx, &n);
  oc_down(c, got, dh, n * 2);
  oc_report_exact(c, "cast_f32_to_bf16", memcmp(got, ref, n * 2) == 0, "bits equal RNE reference");
  LAUNCH(c, "pkc_cast_bf16_to_f32", n, &df, &dh, &n);
  float *back = oc_zvec(n);
  oc_down(c, back, df, n * 4);
  bool ok = true;
  for (long long i = 0; i < n; i++) {
    float want_f = bf16_to_f32(ref[i]);
    ok = ok && (memcmp(&back[i], &want_f, 4) == 0);
  }
  oc_report_exact(c, "cast_bf16_to_f32", ok, "bits exact");
  free(x), free(ref), free(got), free(back);
}

/* ---- embedding, positions, gather ------------------------------------------------- */

static void check_embedding(Ctx *c) {
  if (!oc_want(c, "embedding")) return;
  int V = 50, C = 33;
  long long n = 41;
  float *table = oc_rvec(c, (size_t)V * C, 1), *dy = oc_rvec(c, n * C, 1);
  int32_t *ids = malloc(n * 4);
  for (long long i = 0; i < n; i++) ids[i] = (int32_t)(oc_next_u64(c) % 12); /* many repeats */
  ids[3] = V, ids[17] = -2;                                               /* two bad ids */
  float *out = oc_zvec(n * C), *dt = oc_rvec(c, (size_t)V * C, 1);
  DevPtr dtab = oc_up(c, table, (size_t)V * C * 4), dids = oc_up(c, ids, n * 4);
  DevPtr dout = c->d->alloc(c->d->ctx, n * C * 4), ddy = oc_up(c, dy, n * C * 4);
  DevPtr ddt = oc_up(c, dt, (size_t)V * C * 4);
  unsigned long long zero = 0;
  DevPtr bad = oc_up(c, &zero, 8), bad2 = oc_up(c, &zero, 8);

  LAUNCH(c, "pkc_embedding_fwd_f32", n * C, &dout, &dtab, &dids, &n, &C, &V, &bad);
  int64_t nbad = pk_embedding_fwd_f32(out, table, ids, n, C, V);
  oc_check_vec(c, "embedding_fwd", dout, out, n * C, 0);
  oc_check_count(c, "embedding_fwd.bad", bad, nbad);
  /* from a bf16 table (a version holding its bf16 copy): the rows widened exactly, so
   * the float32 lookup of the widened table gives the same bits */
  uint16_t *t16 = malloc((size_t)V * C * 2);
  pk_bf16_store(t16, table, (int64_t)V * C);
  pk_bf16_load(table, t16, (int64_t)V * C);
  DevPtr dt16 = oc_up(c, t16, (size_t)V * C * 2), bad16 = oc_up(c, &zero, 8);
  LAUNCH(c, "pkc_embedding_fwd_bf16_f32", n * C, &dout, &dt16, &dids, &n, &C, &V, &bad16);
  nbad = pk_embedding_fwd_f32(out, table, ids, n, C, V);
  oc_check_vec(c, "embedding_fwd_bf16", dout, out, n * C, 0);
  oc_check_count(c, "embedding_fwd_bf16.bad", bad16, nbad);
  free(t16);

  /* accumulate = 1 into a random table */
  LAUNCH(c, "pkc_embedding_bwd_f32", n * C, &ddt, &ddy, &dids, &n, &C, &V, &bad2);
  nbad = pk_embedding_bwd_f32(dt, dy, ids, n, C, V, 1);
  oc_check_vec(c, "embedding_bwd", ddt, dt, (size_t)V * C, 1e-6);
  oc_check_count(c, "embedding_bwd.bad", bad2, nbad);
  free(table), free(dy), free(ids), free(out), free(dt);
}

static void check_positions(Ctx *c) {
  if (!oc_want(c, "positions")) return;
  int B = 3, T = 7, C = 33, rows = 10;
  float *table = oc_rvec(c, (size_t)rows * C, 1), *dy = oc_rvec(c, (size_t)B * T * C, 1);
  float *out = oc_zvec((size_t)B * T * C);
  DevPtr dtab = oc_up(c, table, (size_t)rows * C * 4), ddy = oc_up(c, dy, (size_t)B * T * C * 4);
  DevPtr dout = c->d->alloc(c->d->ctx, (size_t)B * T * C * 4);
  LAUNCH(c, "pkc_positions_fwd_f32", (int64_t)B * T * C, &dout, &dtab, &B, &T, &C);
  pk_positions_fwd_f32(out, table, B, T, C);
  oc_check_vec(c, "positions_fwd", dout, out, (size_t)B * T * C, 0);
  for (int acc = 0; acc <= 1; acc++) {
    float *dt = oc_rvec(c, (size_t)rows * C, 1);
    DevPtr ddt = oc_up(c, dt, (size_t)rows * C * 4);
    LAUNCH(c, "pkc_positions_bwd_f32", (int64_t)rows * C, &ddt, &ddy, &B, &T, &C, &rows, &acc);
    pk_positions_bwd_f32(dt, dy, B, T, C, rows, acc);
    oc_check_vec(c, acc ? "positions_bwd.accumulate" : "positions_bwd", ddt, dt, (size_t)rows * C,
              2e-6);
    free(dt);
  }
  free(table), free(dy), free(out);
}

static void check_gather(Ctx *c) {
  if (!oc_want(c, "gather")) return;
  int B = 2, T = 9, P = 5, C = 33;
  float *x = oc_rvec(c, (size_t)B * T * C, 1), *dy = oc_rvec(c, (size_t)B * P * C, 1);
  int32_t pos[10] = {1, 4, 4, 8, 0, 2, 9, 3, 3, -1}; /* repeats; 9 and -1 are bad */
  float *y = oc_zvec((size_t)B * P * C), *dx = oc_zvec((size_t)B * T * C);
  DevPtr dxx = oc_up(c, x, (size_t)B * T * C * 4), dpos = oc_up(c, pos, sizeof pos);
  DevPtr ddy = oc_up(c, dy, (size_t)B * P * C * 4);
  DevPtr dyy = c->d->alloc(c->d->ctx, (size_t)B * P * C * 4);
  DevPtr ddx = oc_up(c, x, (size_t)B * T * C * 4); /* garbage: the kernel must zero it */
  unsigned long long zero = 0;
  DevPtr bad = oc_up(c, &zero, 8), bad2 = oc_up(c, &zero, 8);
  LAUNCH(c, "pkc_gather_fwd_f32", (int64_t)B * P * C, &dyy, &dxx, &dpos, &B, &T, &P, &C, &bad);
  int64_t nb = pk_gather_fwd_f32(y, x, pos, B, T, P, C);
  oc_check_vec(c, "gather_fwd", dyy, y, (size_t)B * P * C, 0);
  oc_check_count(c, "gather_fwd.bad", bad, nb);
  LAUNCH(c, "pkc_gather_bwd_f32", (int64_t)B * C, &ddx, &ddy, &dpos, &B, &T, &P, &C, &bad2);
  nb = pk_gather_bwd_f32(dx, dy, pos, B, T, P, C);
  oc_check_vec(c, "gather_bwd", ddx, dx, (size_t)B * T * C, 0);
  oc_check_count(c, "gather_bwd.bad", bad2, nb);
  free(x), free(dy), free(y), free(dx);
}

/* ---- add, mul, scale, bias --------------------------------------------------------- */

static void check_arith(Ctx *c) {
  if (!oc_want(c, "arith")) return;
  long long M = 37;
  int N = 70;
  long long n = M * N;
  float *a = oc_rvec(c, n, 1), *b = oc_rvec(c, n, 1), *g = oc_rvec(c, n, 1), *bias = oc_rvec(c, N, 1);
  float *r = oc_zvec(n), *r2 = oc_zvec(n);
  DevPtr da = oc_up(c, a, n * 4), db = oc_up(c, b, n * 4), dg = oc_up(c, g, n * 4),
         dbias = oc_up(c, bias, N * 4);
  DevPtr dy = c->d->alloc(c->d->ctx, n * 4), dy2 = c->d->alloc(c->d->ctx, n * 4), null = 0;
  float s = 0.37f;

  LAUNCH(c, "pkc_add_fwd_f32", n, &dy, &da, &db, &n);
  pk_add_fwd_f32(r, a, b, n);
  oc_check_vec(c, "add_fwd", dy, r, n, 0);
  LAUNCH(c, "pkc_add_bias_fwd_f32", n, &dy, &da, &dbias, &M, &N);
  pk_add_bias_fwd_f32(r, a, bias, M, N);
  oc_check_vec(c, "add_bias_fwd", dy, r, n, 0);
  LAUNCH(c, "pkc_mul_fwd_f32", n, &dy, &da, &db, &n);
  pk_mul_fwd_f32(r, a, b, n);
  oc_check_vec(c, "mul_fwd", dy, r, n, 0);
  LAUNCH(c, "pkc_mul_bwd_f32", n, &dy, &dy2, &dg, &da, &db, &n);
  pk_mul_bwd_f32(r, r2, g, a, b, n);
  oc_check_vec(c, "mul_bwd.da", dy, r, n, 0);
  oc_check_vec(c, "mul_bwd.db", dy2, r2, n, 0);
  LAUNCH(c, "pkc_mul_bwd_f32", n, &null, &dy2, &dg, &db, &da, &n); /* da not wanted */
  pk_mul_bwd_f32(NULL, r2, g, b, a, n);
  oc_check_vec(c, "mul_bwd.null_da", dy2, r2, n, 0);
  LAUNCH(c, "pkc_scale_fwd_f32", n, &dy, &da, &s, &n);
  pk_scale_fwd_f32(r, a, s, n);
  oc_check_vec(c, "scale_fwd", dy, r, n, 0);

  for (int acc = 0; acc <= 1; acc++) {
    float *db_ = oc_rvec(c, N, 1);
    DevPtr ddb = oc_up(c, db_, N * 4);
    long long Mb = 130; /* more rows than thread groups: the strided row loop */
    float *gg = oc_rvec(c, Mb * N, 1);
    DevPtr dgg = oc_up(c, gg, Mb * N * 4);
    LAUNCH(c, "pkc_bias_grad_f32", N, &ddb, &dgg, &Mb, &N, &acc);
    pk_bias_grad_f32(db_, gg, Mb, N, acc);
    oc_check_vec(c, acc ? "bias_grad.accumulate" : "bias_grad", ddb, db_, N, 2e-6);
    free(db_), free(gg);
  }
  free(a), free(b), free(g), free(bias), free(r), free(r2);
}

/* ---- layernorm, gelu, relu, softmax ------------------------------------------------ */

static void check_layernorm(Ctx *c) {
  if (!oc_want(c, "layernorm")) return;
  long long M = 37;
  int C = 300;
  float eps = 1e-5f;
  size_t n = (size_t)M * C;
  float *x = oc_rvec(c, n, 3), *gm = oc_rvec(c, C, 1), *bt = oc_rvec(c, C, 1), *dy = oc_rvec(c, n, 1);
  for (size_t i = 0; i < n; i++) x[i] += 0.5f; /* a non-zero mean */
  float *y = oc_zvec(n), *st = oc_zvec(2 * M), *dx = oc_zvec(n);
  DevPtr dxx = oc_up(c, x, n * 4), dgm = oc_up(c, gm, C * 4), dbt = oc_up(c, bt, C * 4),
         ddy = oc_up(c, dy, n * 4);
  DevPtr dyy = c->d->alloc(c->d->ctx, n * 4), dst = c->d->alloc(c->d->ctx, 2 * M * 4);
  DevPtr ddx = c->d->alloc(c->d->ctx, n * 4);
  LAUNCH(c, "pkc_layernorm_fwd_f32", M, &dyy, &dst, &dxx, &dgm, &dbt, &M, &C, &eps);
  pk_layernorm_fwd_f32(y, st, x, gm, bt, M, C, eps);
  oc_check_vec(c, "layernorm_fwd", dyy, y, n, 1e-5);
  oc_check_vec(c, "layernorm_fwd.stats", dst, st, 2 * M, 1e-5);
  for (int have = 0; have <= 1; have++)
    for (int acc = 0; acc <= 1; acc++) {
      float *dg = oc_rvec(c, C, 1), *db = oc_rvec(c, C, 1);
      DevPtr ddg = oc_up(c, dg, C * 4), ddb = oc_up(c, db, C * 4);
      float *st2 = oc_zvec(2 * M);
      if (have) memcpy(st2, st, 2 * M * 4);
      DevPtr dst2 = oc_up(c, st2, 2 * M * 4);
      LAUNCH(c, "pkc_layernorm_bwd_dx_f32", M, &ddx, &dst2, &have, &ddy, &dxx, &dgm, &M, &C, &eps);
      LAUNCH(c, "pkc_layernorm_bwd_params_f32", C, &ddg, &ddb, &dst2, &ddy, &dxx, &M, &C, &acc);
      pk_layernorm_bwd_f32(dx, dg, db, st2, have, dy, x, gm, M, C, eps, acc);
      char name[64];
      snprintf(name, sizeof name, "layernorm_bwd.dx%s%s", have ? ".stats" : "", acc ? ".acc" : "");
      oc_check_vec(c, name, ddx, dx, n, 1e-5);
      snprintf(name, sizeof name, "layernorm_bwd.dgamma%s%s", have ? ".stats" : "",
               acc ? ".acc" : "");
      oc_check_vec(c, name, ddg, dg, C, 1e-5);
      snprintf(name, sizeof name, "layernorm_bwd.dbeta%s%s", have ? ".stats" : "",
               acc ? ".acc" : "");
      oc_check_vec(c, name, ddb, db, C, 1e-5);
      free(dg), free(db), free(st2);
    }
  free(x), free(gm), free(bt), free(dy), free(y), free(st), free(dx);
}

static void check_rmsnorm(Ctx *c) {
  if (!oc_want(c, "rmsnorm")) return;
  long long M = 37;
  int C = 300;
  float eps = 1e-6f;
  size_t n = (size_t)M * C;
  float *x = oc_rvec(c, n, 3), *gm = oc_rvec(c, C, 1), *dy = oc_rvec(c, n, 1);
  for (size_t i = 0; i < n; i++) x[i] += 0.5f; /* a non-zero mean: rmsnorm does not subtract it */
  float *y = oc_zvec(n), *dx = oc_zvec(n);
  DevPtr dxx = oc_up(c, x, n * 4), dgm = oc_up(c, gm, C * 4), ddy = oc_up(c, dy, n * 4);
  DevPtr dyy = c->d->alloc(c->d->ctx, n * 4), ddx = c->d->alloc(c->d->ctx, n * 4);
  LAUNCH(c, "pkc_rmsnorm_fwd_f32", M, &dyy, &dxx, &dgm, &M, &C, &eps);
  pk_rmsnorm_fwd_f32(y, x, gm, M, C, eps);
  oc_check_vec(c, "rmsnorm_fwd", dyy, y, n, 1e-5);
  LAUNCH(c, "pkc_rmsnorm_bwd_f32", M, &ddx, &ddy, &dxx, &dgm, &M, &C, &eps);
  pk_rmsnorm_bwd_f32(dx, dy, x, gm, M, C, eps);
  oc_check_vec(c, "rmsnorm_bwd", ddx, dx, n, 1e-5);
  for (int acc = 0; acc <= 1; acc++) {
    float *dg = oc_rvec(c, C, 1);
    DevPtr ddg = oc_up(c, dg, C * 4);
    long long cols = C;
    LAUNCH(c, "pkc_rmsnorm_dgamma_f32", cols, &ddg, &ddy, &dxx, &M, &C, &eps, &acc);
    pk_rmsnorm_dgamma_f32(dg, dy, x, M, C, eps, acc);
    oc_check_vec(c, acc ? "rmsnorm_dgamma.acc" : "rmsnorm_dgamma", ddg, dg, C, 1e-5);
    free(dg);
  }
  free(x), free(gm), free(dy), free(y), free(dx);
}

/* rope and its inverse: 3 heads of D = 10 over T = 37 positions (angles to 36 rad),
 * and one head of D = 260 (130 pairs: more than the C kernel's chunk of 64 angles,
 * more than a small block's threads). Llama 3's theta for the second. */
static void check_rope(Ctx *c) {
  if (!oc_want(c, "rope")) return;
  static const struct {
    long long B;
    int T, H, D;
    float theta;
  } cs[] = {{3, 37, 3, 10, 10000.0f}, {2, 5, 1, 260, 500000.0f}};
  for (size_t k = 0; k < sizeof cs / sizeof cs[0]; k++) {
    long long rows = cs[k].B * cs[k].T;
    int T = cs[k].T, C = cs[k].H * cs[k].D;
    float heads = (float)cs[k].H, theta = cs[k].theta;
    size_t n = (size_t)rows * C;
    float *x = oc_rvec(c, n, 2), *y = oc_zvec(n);
    DevPtr dx = oc_up(c, x, n * 4), dy = c->d->alloc(c->d->ctx, n * 4);
    LAUNCH(c, "pkc_rope_fwd_f32", rows, &dy, &dx, &rows, &T, &C, &heads, &theta);
    pk_rope_fwd_f32(y, x, rows, T, C, heads, theta);
    oc_check_vec(c, k ? "rope_fwd.wide" : "rope_fwd", dy, y, n, 1e-5);
    LAUNCH(c, "pkc_rope_bwd_f32", rows, &dy, &dx, &rows, &T, &C, &heads, &theta);
    pk_rope_bwd_f32(y, x, rows, T, C, heads, theta);
    oc_check_vec(c, k ? "rope_bwd.wide" : "rope_bwd", dy, y, n, 1e-5);
    free(x), free(y);
  }
}

static void check_activations(Ctx *c) {
  if (!oc_want(c, "activations")) return;
  long long n = 1003;
  float *x = oc_rvec(c, n, 4), *g = oc_rvec(c, n, 1), *r = oc_zvec(n);
  x[0] = 0; /* relu's subgradient point */
  DevPtr dx = oc_up(c, x, n * 4), dg = oc_up(c, g, n * 4), dy = c->d->alloc(c->d->ctx, n * 4);
  LAUNCH(c, "pkc_gelu_fwd_f32", n, &dy, &dx, &n);
  pk_gelu_fwd_f32(r, x, n);
  oc_check_vec(c, "gelu_fwd", dy, r, n, 1e-5);
  LAUNCH(c, "pkc_gelu_bwd_f32", n, &dy, &dg, &dx, &n);
  pk_gelu_bwd_f32(r, g, x, n);
  oc_check_vec(c, "gelu_bwd", dy, r, n, 1e-5);
  LAUNCH(c, "pkc_relu_fwd_f32", n, &dy, &dx, &n);
  pk_relu_fwd_f32(r, x, n);
  oc_check_vec(c, "relu_fwd", dy, r, n, 0);
  LAUNCH(c, "pkc_relu_bwd_f32", n, &dy, &dg, &dx, &n);
  pk_relu_bwd_f32(r, g, x, n);
  oc_check_vec(c, "relu_bwd", dy, r, n, 0);
  float far[2] = {-100, 100}; /* SiLU far out: 0 and x, never inf·0 */
  DevPtr dfar = oc_up(c, far, 2 * 4);
  long long two = 2;
  LAUNCH(c, "pkc_silu_fwd_f32", two, &dy, &dfar, &two);
  pk_silu_fwd_f32(r, far, two);
  oc_check_vec(c, "silu_fwd.far", dy, r, two, 1e-6);
  LAUNCH(c, "pkc_silu_fwd_f32", n, &dy, &dx, &n);
  pk_silu_fwd_f32(r, x, n);
  oc_check_vec(c, "silu_fwd", dy, r, n, 1e-5);
  LAUNCH(c, "pkc_silu_bwd_f32", n, &dy, &dg, &dx, &n);
  pk_silu_bwd_f32(r, g, x, n);
  oc_check_vec(c, "silu_bwd", dy, r, n, 1e-5);
  free(x), free(g), free(r);
}

static void check_softmax(Ctx *c) {
  if (!oc_want(c, "softmax")) return;
  long long M = 37;
  int N = 300;
  size_t n = (size_t)M * N;
  float *x = oc_rvec(c, n, 8), *g = oc_rvec(c, n, 1), *y = oc_zvec(n), *dx = oc_zvec(n);
  x[5] = 80; /* a large logit: must not overflow */
  DevPtr dxx = oc_up(c, x, n * 4), dg = oc_up(c, g, n * 4), dyy = c->d->alloc(c->d->ctx, n * 4);
  DevPtr ddx = c->d->alloc(c->d->ctx, n * 4);
  LAUNCH(c, "pkc_softmax_fwd_f32", M, &dyy, &dxx, &M, &N);
  pk_softmax_fwd_f32(y, x, M, N);
  oc_check_vec(c, "softmax_fwd", dyy, y, n, 1e-5);
  DevPtr dyref = oc_up(c, y, n * 4); /* the backward from the same y on both sides */
  LAUNCH(c, "pkc_softmax_bwd_f32", M, &ddx, &dg, &dyref, &M, &N);
  pk_softmax_bwd_f32(dx, g, y, M, N);
  oc_check_vec(c, "softmax_bwd", ddx, dx, n, 1e-5);
  free(x), free(g), free(y), free(dx);
}

/* ---- dropout ----------------------------------------------------------------------- */

static void check_dropout(Ctx *c) {
  if (!oc_want(c, "dropout")) return;
  long long n = 1003;
  float *x = oc_rvec(c, n, 1), *r = oc_zvec(n), *h = oc_zvec(n);
  for (long long i = 0; i < n; i++)
    if (x[i] == 0) x[i] = 1; /* a zero input would hide a mask difference */
  DevPtr dx = oc_up(c, x, n * 4), dy = c->d->alloc(c->d->ctx, n * 4);
  const double ps[3] = {0.0, 0.3, 1.0};
  unsigned long long seed = 0x1234567890abcdefull;
  unsigned op = 7, mb = 3;
  DevPtr dmb = oc_up(c, &mb, 4); /* the kernels read the microbatch key in device memory */
  for (int k = 0; k < 3; k++) {
    double p = ps[k];
    PkRng rng = {seed, op, mb};
    for (int bwd = 0; bwd <= 1; bwd++) {
      LAUNCH(c, bwd ? "pkc_dropout_bwd_f32" : "pkc_dropout_fwd_f32", (n + 3) / 4, &dy, &dx, &n, &p,
             &seed, &op, &dmb);
      if (bwd)
        pk_dropout_bwd_f32(r, x, n, p, rng);
      else
        pk_dropout_fwd_f32(r, x, n, p, rng);
      oc_down(c, h, dy, n * 4);
      long long kept = 0;
      for (long long i = 0; i < n; i++) kept += r[i] != 0;
      char name[64], detail[96];
      snprintf(name, sizeof name, "dropout_%s.p%.1f", bwd ? "bwd" : "fwd", p);
      snprintf(detail, sizeof detail, "bit-identical to the CPU (%lld of %lld kept)", kept, n);
      oc_report_exact(c, name, memcmp(h, r, n * 4) == 0, detail);
    }
  }
  free(x), free(r), free(h);
}

/* ---- cross-entropy ------------------------------------------------------------------ */

/* The bf16 plan's classifier (pkc_classifier_bf16) on the same padded logits h: its
 * row losses equal pkc_classifier_f32's (rows_f32, that kernel's, still in `rows`),
 * and each gradient element is exactly the RNE bf16 of pkc_classifier_f32's float32
 * gradient g32 (the same arithmetic, rounded once); the padding (sentinel bits) is
 * never written, the float32 logits are left as they were; with training 0 (first)
 * no gradient is written. And the stash slot holds what the C program stores there
 * (codegen/cgen_c_bf16.c: pk_bf16_store of the CPU's cross_entropy_bwd, cpu_dl, on
 * the same float32 logits): within 1 bf16 ulp of it (the two exponentials may differ
 * in the last float32 bit, which can move a rounding). */
static void check_classifier_bf16(Ctx *c, const float *h, const float *g32, const float *cpu_dl, DevPtr dtg,
                                  long long M, int V, int ld, int ign, float dloss_in, DevPtr dnv, DevPtr rows_f32) {
  size_t n = (size_t)M * ld;
  uint16_t *d16 = malloc(n * 2), *got = malloc(n * 2);
  double *r32 = malloc((size_t)M * 8), *r16 = malloc((size_t)M * 8);
  float *back = oc_zvec(n);
  for (size_t i = 0; i < n; i++) d16[i] = 0x7777;
  DevPtr dx = oc_up(c, h, n * 4), dd = oc_up(c, d16, n * 2), rows = c->d->alloc(c->d->ctx, (size_t)M * 8);
  int training = 0; /* first evaluation: the row losses alone, d16 as it was */
  LAUNCH(c, "pkc_classifier_bf16", M, &rows, &dd, &dx, &dtg, &M, &V, &ld, &ign, &dloss_in, &dnv, &training);
  oc_down(c, got, dd, n * 2);
  oc_report_exact(c, "classifier_bf16.eval_untouched", memcmp(got, d16, n * 2) == 0, "no gradient written");
  training = 1;
  LAUNCH(c, "pkc_classifier_bf16", M, &rows, &dd, &dx, &dtg, &M, &V, &ld, &ign, &dloss_in, &dnv, &training);
  oc_down(c, got, dd, n * 2);
  oc_down(c, r16, rows, (size_t)M * 8);
  oc_down(c, r32, rows_f32, (size_t)M * 8);
  oc_down(c, back, dx, n * 4);
  bool bits = true, pad = true;
  for (long long r = 0; r < M; r++)
    for (int k = 0; k < ld; k++) {
      size_t i = (size_t)r * ld + k;
      if (k >= V) pad = pad && got[i] == 0x7777;
      else bits = bits && got[i] == ref_bf16(g32[i]);
    }
  oc_report_exact(c, "classifier_bf16.dlogits", bits, "RNE bf16 of pkc_classifier_f32's gradient");
  uint16_t *cpu16 = malloc((size_t)M * V * 2);
  pk_bf16_store(cpu16, cpu_dl, (int64_t)M * V);
  long long apart = 0, ulps = 0;
  for (long long r = 0; r < M; r++)
    for (int k = 0; k < V; k++) { /* bf16 bits as a signed magnitude: adjacent values 1 apart */
      int a = cpu16[r * V + k], b = got[r * ld + k];
      long long d = llabs((long long)((a & 0x8000) ? -(a & 0x7fff) : a) - ((b & 0x8000) ? -(b & 0x7fff) : b));
      apart += d != 0;
      if (d > ulps) ulps = d;
    }
  char detail[160];
  snprintf(detail, sizeof detail, "within 1 ulp of the C program's bits (%lld of %lld differ, by <= %lld)", apart,
           M * V, ulps);
  oc_report_exact(c, "classifier_bf16.cpu_bits", ulps <= 1, detail);
  free(cpu16);
  oc_report_exact(c, "classifier_bf16.loss", memcmp(r16, r32, (size_t)M * 8) == 0, "row losses as the f32 kernel's");
  oc_report_exact(c, "classifier_bf16.padding", pad, "padding never written");
  oc_report_exact(c, "classifier_bf16.logits_kept", memcmp(back, h, n * 4) == 0, "float32 logits untouched");
  free(d16), free(got), free(r32), free(r16), free(back);
}

/* The fused classifier (pkc_classifier_f32) against the CPU's forward loss and
 * backward gradient (ref_dl at dloss), in place over logits whose rows are padded to
 * ld = V + 27 columns (as the layout pads an odd vocabulary), with a sentinel in the
 * padding that must stay as it was (a read of it would also change the loss). Then
 * with training 0: the loss, and the logits untouched. dnv: the counted rows. */
static void check_classifier(Ctx *c, const float *lg, const float *ref_dl, const int32_t *tg, long long M, int V,
                             int ign, float dloss_in, float ref_loss, DevPtr dnv) {
  int ld = V + 27;
  size_t n = (size_t)M * ld;
  float *h = oc_zvec(n), *got = oc_zvec(n);
  for (long long r = 0; r < M; r++)
    for (int k = 0; k < ld; k++) h[r * ld + k] = k < V ? lg[r * V + k] : 3e4f;
  DevPtr dtg = oc_up(c, tg, (size_t)M * 4), rows = c->d->alloc(c->d->ctx, (size_t)M * 8);
  DevPtr dloss = c->d->alloc(c->d->ctx, 4), nv2 = c->d->alloc(c->d->ctx, 4);
  unsigned long long zero = 0;
  DevPtr bad = oc_up(c, &zero, 8);
  for (int training = 1; training >= 0; training--) {
    DevPtr dx = oc_up(c, h, n * 4);
    LAUNCH(c, "pkc_classifier_f32", M, &rows, &dx, &dx, &dtg, &M, &V, &ld, &ign, &dloss_in, &dnv, &training);
    LAUNCH(c, "pkc_cross_entropy_reduce_f32", 1, &dloss, &nv2, &bad, &rows, &dtg, &M, &V, &ign);
    float gl = 0;
    oc_down(c, &gl, dloss, 4);
    oc_report(c, training ? "classifier.loss" : "classifier.loss.eval", fabs((double)gl - ref_loss) / fabs((double)ref_loss),
              1e-5);
    oc_down(c, got, dx, n * 4);
    double err = 0, scale = 0;
    bool pad_kept = true, untouched = true;
    for (long long r = 0; r < M; r++)
      for (int k = 0; k < ld; k++) {
        float g = got[r * ld + k];
        if (k >= V) pad_kept = pad_kept && g == 3e4f;
        else if (training) {
          err = fmax(err, fabs((double)g - ref_dl[r * V + k]));
          scale = fmax(scale, fabs((double)ref_dl[r * V + k]));
        } else untouched = untouched && g == h[r * ld + k];
      }
    if (training) oc_report(c, "classifier.dlogits", scale > 0 ? err / scale : 1, 1e-5);
    else oc_report_exact(c, "classifier.eval_untouched", untouched, "logits as they were");
    oc_report_exact(c, training ? "classifier.padding" : "classifier.padding.eval", pad_kept, "padding never written");
    if (training) check_classifier_bf16(c, h, got, ref_dl, dtg, M, V, ld, ign, dloss_in, dnv, rows);
  }
  free(h), free(got);
}

static void check_cross_entropy(Ctx *c) {
  if (!oc_want(c, "cross_entropy")) return;
  long long M = 23;
  int V = 301, ign = -1;
  float *lg = oc_rvec(c, (size_t)M * V, 6), *dl = oc_zvec((size_t)M * V);
  int32_t *tg = malloc(M * 4);
  for (long long r = 0; r < M; r++) tg[r] = (int32_t)(oc_next_u64(c) % V);
  tg[2] = ign, tg[9] = ign, tg[11] = V + 4; /* two ignored rows, one bad target */
  DevPtr dlg = oc_up(c, lg, (size_t)M * V * 4), dtg = oc_up(c, tg, M * 4);
  DevPtr rows = c->d->alloc(c->d->ctx, M * 8), dloss = c->d->alloc(c->d->ctx, 4);
  DevPtr dnv = c->d->alloc(c->d->ctx, 4), dnv2 = c->d->alloc(c->d->ctx, 4);
  unsigned long long zero = 0;
  DevPtr bad = oc_up(c, &zero, 8);
  LAUNCH(c, "pkc_cross_entropy_rows_f32", M, &rows, &dlg, &dtg, &M, &V, &V, &ign);
  LAUNCH(c, "pkc_cross_entropy_reduce_f32", 1, &dloss, &dnv, &bad, &rows, &dtg, &M, &V, &ign);
  float loss = 0, gl = 0;
  int64_t nb = pk_cross_entropy_fwd_f32(&loss, lg, tg, M, V, ign);
  oc_down(c, &gl, dloss, 4);
  oc_report(c, "cross_entropy_fwd", fabs((double)gl - loss) / fabs((double)loss), 1e-5);
  oc_check_count(c, "cross_entropy_fwd.bad", bad, nb);
  LAUNCH(c, "pkc_cross_entropy_count_f32", 1, &dnv2, &dtg, &M, &V, &ign);
  int nv = 0, nv2 = 0;
  oc_down(c, &nv, dnv, 4);
  oc_down(c, &nv2, dnv2, 4);
  oc_report_exact(c, "cross_entropy.nvalid", nv == 20 && nv2 == 20, "20 counted rows");
  float dloss_in = 0.75f;
  DevPtr ddl = c->d->alloc(c->d->ctx, (size_t)M * V * 4);
  LAUNCH(c, "pkc_cross_entropy_bwd_f32", M, &ddl, &dlg, &dtg, &M, &V, &V, &ign, &dloss_in, &dnv);
  pk_cross_entropy_bwd_f32(dl, lg, tg, M, V, ign, dloss_in);
  oc_check_vec(c, "cross_entropy_bwd", ddl, dl, (size_t)M * V, 1e-5);
  /* in place: dlogits aliases logits */
  LAUNCH(c, "pkc_cross_entropy_bwd_f32", M, &dlg, &dlg, &dtg, &M, &V, &V, &ign, &dloss_in, &dnv);
  oc_check_vec(c, "cross_entropy_bwd.inplace", dlg, dl, (size_t)M * V, 1e-5);
  check_classifier(c, lg, dl, tg, M, V, ign, dloss_in, loss, dnv);
  free(lg), free(dl), free(tg);
}

/* ---- attention --------------------------------------------------------------------- */

static void check_attention(Ctx *c) {
  if (!oc_want(c, "attention")) return;
  int B = 2, T = 19, NH = 3, hs = 8, C = NH * hs;
  size_t nq = (size_t)B * T * 3 * C, no = (size_t)B * T * C;
  float *qkv = oc_rvec(c, nq, 1.5f), *dy = oc_rvec(c, no, 1);
  float *out = oc_zvec(no), *dqkv = oc_zvec(nq), *lse = oc_zvec((size_t)B * NH * T);
  float *work = oc_zvec((size_t)pk_attention_work_elems(B, T, NH));
  DevPtr dq = oc_up(c, qkv, nq * 4), ddy = oc_up(c, dy, no * 4);
  DevPtr dout = c->d->alloc(c->d->ctx, no * 4), ddq = oc_up(c, qkv, nq * 4); /* garbage in dqkv */
  DevPtr dlse = c->d->alloc(c->d->ctx, (size_t)B * NH * T * 4);
  DevPtr dwork = c->d->alloc(c->d->ctx, (size_t)B * NH * T * 4); /* D */
  unsigned long long seed = 42;
  unsigned op = 11, mb = 5;
  DevPtr dmb = oc_up(c, &mb, 4); /* the kernels read the microbatch key in device memory */
  int64_t rows = (int64_t)B * NH * T;
  for (int causal = 0; causal <= 1; causal++)
    for (int k = 0; k < 2; k++) {
      double p = k ? 0.2 : 0.0;
      PkRng rng = {seed, op, mb};
      char name[64];
      LAUNCH(c, "pkc_attention_fwd_f32", rows, &dout, &dlse, &dq, &B, &T, &C, &NH, &causal, &p, &seed,
             &op, &dmb);
      pk_attention_fwd_f32(out, lse, qkv, work, B, T, C, NH, causal, p, rng);
      snprintf(name, sizeof name, "attention_fwd%s.p%.1f", causal ? ".causal" : "", p);
      oc_check_vec(c, name, dout, out, no, 1e-4);
      snprintf(name, sizeof name, "attention_fwd_lse%s.p%.1f", causal ? ".causal" : "", p);
      oc_check_vec(c, name, dlse, lse, (size_t)rows, 1e-4);
      /* the backward from the GPU forward's out and lse, as a CUDA program runs it */
      LAUNCH(c, "pkc_attention_bwd_delta_f32", rows, &dwork, &ddy, &dout, &B, &T, &C, &NH);
      LAUNCH(c, "pkc_attention_bwd_dq_f32", rows, &ddq, &dlse, &dwork, &ddy, &dq, &B, &T, &C, &NH,
             &causal, &p, &seed, &op, &dmb);
      LAUNCH(c, "pkc_attention_bwd_dkv_f32", rows, &ddq, &dlse, &dwork, &ddy, &dq, &B, &T, &C, &NH,
             &causal, &p, &seed, &op, &dmb);
      pk_attention_bwd_f32(dqkv, dy, qkv, out, lse, work, B, T, C, NH, causal, p, rng);
      snprintf(name, sizeof name, "attention_bwd%s.p%.1f", causal ? ".causal" : "", p);
      oc_check_vec(c, name, ddq, dqkv, nq, 1e-4);
    }
  free(qkv), free(dy), free(out), free(dqkv), free(lse), free(work);
}

/* ---- GEMMs (linear, matmul) --------------------------------------------------------- */

static void check_gemm(Ctx *c) {
  if (!oc_want(c, "gemm")) return;
  long long M = 37;
  int K = 300, N = 70;
  float *x = oc_rvec(c, M * K, 1), *W = oc_rvec(c, (size_t)K * N, 1), *bias = oc_rvec(c, N, 1);
  float *dy = oc_rvec(c, M * N, 1), *y = oc_zvec(M * N), *dx = oc_zvec(M * K),
        *dW = oc_rvec(c, (size_t)K * N, 1);
  DevPtr dxx = oc_up(c, x, M * K * 4), dW_ = oc_up(c, W, (size_t)K * N * 4), db = oc_up(c, bias, N * 4);
  DevPtr ddy = oc_up(c, dy, M * N * 4), dyy = c->d->alloc(c->d->ctx, M * N * 4);
  DevPtr ddx = c->d->alloc(c->d->ctx, M * K * 4), ddW = oc_up(c, dW, (size_t)K * N * 4);
  int Mi = (int)M;

  /* linear: y = x·W (GEMM) + bias (add_bias in place) */
  c->d->gemm(c->d->ctx, GEMM_FP32, 0, 0, Mi, N, K, 1, dxx, K, dW_, N, 0, dyy, N);
  LAUNCH(c, "pkc_add_bias_fwd_f32", M * N, &dyy, &dyy, &db, &M, &N);
  pk_linear_fwd_f32(y, x, W, bias, M, K, N);
  oc_check_vec(c, "gemm.linear_fwd", dyy, y, M * N, 1e-5);
  /* dx = dy·Wᵀ */
  c->d->gemm(c->d->ctx, GEMM_FP32, 0, 1, Mi, K, N, 1, ddy, N, dW_, N, 0, ddx, K);
  pk_linear_dx_f32(dx, dy, W, M, K, N);
  oc_check_vec(c, "gemm.linear_dx", ddx, dx, M * K, 1e-5);
  /* dW += xᵀ·dy (accumulate) */
  c->d->gemm(c->d->ctx, GEMM_FP32, 1, 0, K, N, Mi, 1, dxx, K, ddy, N, 1, ddW, N);
  pk_linear_dw_f32(dW, x, dy, M, K, N, 1);
  oc_check_vec(c, "gemm.linear_dw.accumulate", ddW, dW, (size_t)K * N, 1e-5);
  /* tied LM head: y[M,N] = x[M,K]·E[N,K]ᵀ */
  float *E = oc_rvec(c, (size_t)N * K, 1);
  DevPtr dE = oc_up(c, E, (size_t)N * K * 4);
  c->d->gemm(c->d->ctx, GEMM_FP32, 0, 1, Mi, N, K, 1, dxx, K, dE, K, 0, dyy, N);
  pk_matmul_fwd_f32(y, x, E, M, K, N, 0, 1);
  oc_check_vec(c, "gemm.matmul_tb", dyy, y, M * N, 1e-5);
  /* TF32 */
  c->d->gemm(c->d->ctx, GEMM_TF32, 0, 1, Mi, N, K, 1, dxx, K, dE, K, 0, dyy, N);
  oc_check_vec(c, "gemm.matmul_tb.tf32", dyy, y, M * N, 5e-3);
  /* BF16 operands (cast on the device), float32 C: the CPU multiplies the same
   * bf16-rounded values. */
  long long nx = M * K, nE = (long long)N * K;
  DevPtr hx = c->d->alloc(c->d->ctx, nx * 2), hE = c->d->alloc(c->d->ctx, nE * 2);
  LAUNCH(c, "pkc_cast_f32_to_bf16", nx, &hx, &dxx, &nx);
  LAUNCH(c, "pkc_cast_f32_to_bf16", nE, &hE, &dE, &nE);
  float *xr = oc_zvec(nx), *Er = oc_zvec(nE);
  for (long long i = 0; i < nx; i++) xr[i] = bf16_to_f32(ref_bf16(x[i]));
  for (long long i = 0; i < nE; i++) Er[i] = bf16_to_f32(ref_bf16(E[i]));
  pk_matmul_fwd_f32(y, xr, Er, M, K, N, 0, 1);
  c->d->gemm(c->d->ctx, GEMM_BF16, 0, 1, Mi, N, K, 1, hx, K, hE, K, 0, dyy, N);
  oc_check_vec(c, "gemm.matmul_tb.bf16", dyy, y, M * N, 1e-5);
  free(x), free(W), free(bias), free(dy), free(y), free(dx), free(dW), free(E), free(xr), free(Er);
}

/* ---- optimizers ----------------------------------------------------------------------- */

static void check_optim(Ctx *c) {
  if (!oc_want(c, "optim")) return;
  long long n = 1003;
  float *w = oc_rvec(c, n, 1), *g = oc_rvec(c, n, 1), *m = oc_rvec(c, n, 0.1f), *v = oc_rvec(c, n, 0.1f);
  for (long long i = 0; i < n; i++) v[i] = fabsf(v[i]);
  float *wo = oc_zvec(n), *m0 = oc_zvec(n), *v0 = oc_zvec(n);
  memcpy(m0, m, (size_t)n * 4);
  memcpy(v0, v, (size_t)n * 4);
  DevPtr dw = oc_up(c, w, n * 4), dg = oc_up(c, g, n * 4), dm = oc_up(c, m, n * 4), dv = oc_up(c, v, n * 4);
  DevPtr dwo = c->d->alloc(c->d->ctx, n * 4);
  double lr = 6e-4, b1 = 0.9, b2 = 0.95, eps = 1e-8, wd = 0.1, gs = 0.5;
  int decay = 1;
  long long t = 3;
  double dc0 = 0;
  LAUNCH(c, "pkc_adamw_step_f32", n, &dwo, &dw, &dg, &dm, &dv, &n, &lr, &b1, &b2, &eps, &wd, &decay,
         &t, &gs, &dc0);
  pk_adamw_step_f32(wo, w, g, m, v, n, lr, b1, b2, eps, wd, decay, t, gs, 0);
  oc_check_vec(c, "adamw_step.w", dwo, wo, n, 1e-6);
  oc_check_vec(c, "adamw_step.m", dm, m, n, 1e-6);
  oc_check_vec(c, "adamw_step.v", dv, v, n, 1e-6);
  double mom = 0.9;
  LAUNCH(c, "pkc_sgd_step_f32", n, &dwo, &dw, &dg, &dm, &n, &lr, &mom, &wd, &decay, &gs);
  pk_sgd_step_f32(wo, w, g, m, n, lr, mom, wd, decay, gs);
  oc_check_vec(c, "sgd_step.w", dwo, wo, n, 1e-6);
  oc_check_vec(c, "sgd_step.buf", dm, m, n, 1e-6);
  /* The _dev variants (lr, grad_scale, t, the delay compensation in force and the
   * prediction's k read from a pkc_step_scalars in device memory: the one-stage
   * trainer's update graph) on the same inputs. */
  struct {
    double lr, gs;
    long long t;
    double dc, k;
  } sv = {lr, gs, t, 0, 0};
  DevPtr ds = oc_up(c, &sv, sizeof sv);
  memcpy(m, m0, (size_t)n * 4), memcpy(v, v0, (size_t)n * 4);
  c->d->upload(c->d->ctx, dm, m, (size_t)n * 4);
  c->d->upload(c->d->ctx, dv, v, (size_t)n * 4);
  LAUNCH(c, "pkc_adamw_step_dev_f32", n, &dwo, &dw, &dg, &dm, &dv, &n, &b1, &b2, &eps, &wd, &decay, &ds);
  pk_adamw_step_f32(wo, w, g, m, v, n, lr, b1, b2, eps, wd, decay, t, gs, 0);
  oc_check_vec(c, "adamw_step_dev.w", dwo, wo, n, 1e-6);
  oc_check_vec(c, "adamw_step_dev.m", dm, m, n, 1e-6);
  oc_check_vec(c, "adamw_step_dev.v", dv, v, n, 1e-6);
  memcpy(m, m0, (size_t)n * 4);
  c->d->upload(c->d->ctx, dm, m, (size_t)n * 4);
  LAUNCH(c, "pkc_sgd_step_dev_f32", n, &dwo, &dw, &dg, &dm, &n, &mom, &wd, &decay, &ds);
  pk_sgd_step_f32(wo, w, g, m, n, lr, mom, wd, decay, gs);
  oc_check_vec(c, "sgd_step_dev.w", dwo, wo, n, 1e-6);
  oc_check_vec(c, "sgd_step_dev.buf", dm, m, n, 1e-6);
  /* 2bw's delay compensation: w_out holds W(t-1) on entry and is read before it is
   * overwritten (λ large enough that the correction is most of the first moment). */
  double dc = 100;
  sv.dc = dc;
  DevPtr dsc = oc_up(c, &sv, sizeof sv); /* the _dev kernel's compensation */
  float *wprev = oc_rvec(c, n, 0.01f);
  for (long long i = 0; i < n; i++) wprev[i] += w[i];
  for (int dev = 0; dev < 2; dev++) {
    memcpy(m, m0, (size_t)n * 4), memcpy(v, v0, (size_t)n * 4), memcpy(wo, wprev, (size_t)n * 4);
    c->d->upload(c->d->ctx, dm, m, (size_t)n * 4);
    c->d->upload(c->d->ctx, dv, v, (size_t)n * 4);
    c->d->upload(c->d->ctx, dwo, wprev, (size_t)n * 4);
    if (dev)
      LAUNCH(c, "pkc_adamw_step_dev_f32", n, &dwo, &dw, &dg, &dm, &dv, &n, &b1, &b2, &eps, &wd, &decay, &dsc);
    else
      LAUNCH(c, "pkc_adamw_step_f32", n, &dwo, &dw, &dg, &dm, &dv, &n, &lr, &b1, &b2, &eps, &wd, &decay, &t,
             &gs, &dc);
    pk_adamw_step_f32(wo, w, g, m, v, n, lr, b1, b2, eps, wd, decay, t, gs, dc);
    oc_check_vec(c, dev ? "adamw_step_dev.delay_comp.w" : "adamw_step.delay_comp.w", dwo, wo, n, 1e-6);
    oc_check_vec(c, dev ? "adamw_step_dev.delay_comp.m" : "adamw_step.delay_comp.m", dm, m, n, 1e-6);
  }
  /* 2bw's weight prediction after a step (k read from the scalars): master takes the
   * new weights, the version slot the predicted ones; k = 0 (a flushed start's) and a
   * k that is not a power of two */
  for (int q = 0; q < 2; q++) {
    sv.k = q ? 0.7 : 0;
    DevPtr dsk = oc_up(c, &sv, sizeof sv);
    memcpy(wo, w, (size_t)n * 4);
    c->d->upload(c->d->ctx, dwo, wo, (size_t)n * 4);
    c->d->upload(c->d->ctx, dv, wprev, (size_t)n * 4);
    memcpy(v, wprev, (size_t)n * 4);
    LAUNCH(c, "pkc_predict_step_dev_f32", n, &dwo, &dv, &n, &dsk);
    pk_predict_step_f32(wo, v, n, sv.k);
    oc_check_vec(c, q ? "predict_step_dev.w" : "predict_step_dev.k0.w", dwo, wo, n, 1e-6);
    oc_check_vec(c, q ? "predict_step_dev.master" : "predict_step_dev.k0.master", dv, v, n, 1e-6);
  }
  free(w), free(g), free(m), free(v), free(wo), free(m0), free(v0), free(wprev);
}

int op_check_all(const OpDev *d, const char *only, int verbose, int *nchecked) {
  Ctx c = {d, only, verbose, 0, 0, 0x5eed5eed12345678ull};
  check_basic(&c);
  check_cast(&c);
  check_embedding(&c);
  check_positions(&c);
  check_gather(&c);
  check_arith(&c);
  check_layernorm(&c);
  check_rmsnorm(&c);
  check_rope(&c);
  check_activations(&c);
  op_check_vec(&c);
  op_check_sum(&c);
  check_softmax(&c);
  check_dropout(&c);
  check_cross_entropy(&c);
  check_attention(&c);
  op_check_gqa(&c);
  op_check_flash(&c);
  check_gemm(&c);
  check_optim(&c);
  if (nchecked) *nchecked = c.nrun;
  return c.nfail;
}
