/* tests/cudaexec/test_adamw_multi.c — the multi-tensor AdamW (kernels/cuda_adamw_multi.cuh,
 * runtime/cuda/exec/cuda_adamw_multi.h) gives the per-tensor kernel's bits in one launch.
 *
 * On the host CUDA emulator (emu_device.h: the kernel library compiled as host C++),
 * a stage's worth of parameters in one params block, as a stage replica lays them out
 * but with sizes and offsets chosen to reach every path of the kernel: whole float4
 * runs, tensors under four elements, counts that are not a multiple of 4 (tails of 1,
 * 2 and 3), bases misaligned by 1, 2 and 3 floats (no 128-bit path), several chunks
 * with a partial last one, exactly one chunk, decay on and off, parameters without a
 * gradient (copied into the version written), and a deferred tied parameter (left out
 * of the table: nothing may touch it). Two copies of the state start equal; on one,
 * every tensor of the table steps with pkc_adamw_step_dev_f32 (no gradient: a device
 * copy), as cp_update did; on the other ONE launch of pkc_adamw_multi_dev_f32 steps
 * them all, also writing the bf16 copy of the version written. Four steps, 2bw's
 * alternation of versions (delay compensation on, so W(t) - W(t-1) is read), then a
 * vanilla step in place; new gradients, lr, clip scale and bias-correction step each
 * time (read from device memory). After each step both versions, m and v must be
 * equal byte for byte, and the bf16 copy must be round-to-nearest-even of the version
 * written; the multi-tensor step must have been exactly one kernel launch.
 *
 *   test_adamw_multi PD2BWC    (in the source tree: the emulator compiles kernels there)
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "emu_train.h"
#include "pkc_kernels_src.h"
#include "runtime/cuda/exec/cuda_adamw_multi.h"
#include "test.h"

static char tmp[64] = "/tmp/pd2bw-test-adamw-multi-XXXXXX";

/* The parameters: element count, misalignment of the base (floats past a 256-byte
 * boundary), decay, gradient, in the table (0: a deferred tied parameter). */
static const struct {
  int64_t n;
  int mis, decay, grad, in_table;
} spec[] = {
    {4096, 0, 1, 1, 1},          /* aligned, whole float4s */
    {3, 0, 0, 1, 1},             /* under one float4 */
    {2 * 16384 + 7, 1, 1, 1, 1}, /* misaligned by one float: three chunks, scalar */
    {777, 0, 1, 1, 0},           /* deferred tied: stepped elsewhere, untouched here */
    {18, 2, 0, 1, 1},            /* misaligned by two */
    {1, 0, 0, 0, 1},             /* no gradient */
    {40001, 0, 1, 1, 1},         /* three chunks, a tail of 1 */
    {5002, 0, 0, 0, 1},          /* no gradient, several float4s */
    {130, 3, 1, 1, 1},           /* misaligned by three */
    {16384, 0, 0, 1, 1},         /* exactly one chunk */
    {16390, 0, 1, 1, 1},         /* two chunks, a tail of 2 */
};
#define NSPEC ((int)(sizeof spec / sizeof spec[0]))

static uint16_t bf16_of(float f) { /* round to nearest even, as pkc_f32_to_bf16 */
  uint32_t u;
  memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return (uint16_t)(u >> 16);
}

/* A uniform draw in [-1, 1) from a fixed LCG (the same on every machine). */
static float draw(uint64_t *s) {
  *s = *s * 6364136223846793005ull + 1442695040888963407ull;
  return (float)((double)(*s >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

typedef struct State {
  CxPtr w[2], m, v;
} State;

static void test_same_bits(void) {
  char err[512] = "";
  CxDeviceOps ops = emu_device_ops(tmp, EMU_IN_ORDER);
  void *lib = ops.load(ops.dev, pd_cuda_kernels_src, "kernels.cu", err, sizeof err);
  if (!lib) fprintf(stderr, "  %s\n", err);
  EXPECT(lib != NULL);
  if (!lib) return;
  void *k_one = ops.kernel(ops.dev, lib, "pkc_adamw_step_dev_f32"),
       *k_multi = ops.kernel(ops.dev, lib, "pkc_adamw_multi_dev_f32");
  EXPECT(k_one && k_multi);
  /* the layout: each base 256-byte aligned, then spec[k].mis floats on */
  CxAdamwTensor tab[NSPEC];
  int64_t off[NSPEC], P = 0;
  int nt = 0;
  for (int k = 0; k < NSPEC; k++) {
    off[k] = (P + 63) / 64 * 64 + spec[k].mis;
    P = off[k] + spec[k].n;
    if (spec[k].in_table)
      tab[nt++] = (CxAdamwTensor){.off = off[k], .n = spec[k].n, .decay = spec[k].decay, .has_grad = spec[k].grad};
  }
  P = (P + 63) / 64 * 64;
  size_t fb = (size_t)P * 4;
  uint64_t tb = cx_adamw_table_bytes(tab, nt);
  /* arena: two states (2 versions, m, v), the gradient, the bf16 copy, the scalars, the table */
  CxPtr base;
  size_t total = 2 * 4 * fb + fb + fb / 2 + 256 + tb;
  EXPECT(ops.alloc(ops.dev, total, &base, err, sizeof err));
  State st[2];
  CxPtr at = base;
  for (int s = 0; s < 2; s++) {
    st[s] = (State){{at, at + fb}, at + 2 * fb, at + 3 * fb};
    at += 4 * fb;
  }
  CxPtr grad = at, w16 = at + fb, scal = at + fb + fb / 2, table = scal + 256;
  CxAdamwTable T = cx_adamw_table_upload(&ops, table, tab, nt);
  int64_t chunks = 0;
  for (int k = 0; k < nt; k++) chunks += (tab[k].n + CX_ADAMW_CHUNK - 1) / CX_ADAMW_CHUNK;
  EXPECT_EQ_INT(T.nchunks, chunks);
  /* equal starting states: both versions W(0), m and v from a previous step (v >= 0) */
  float *h = malloc(fb), *h2 = malloc(fb);
  uint16_t *h16 = malloc(fb / 2);
  uint64_t seed = 12345;
  for (int s = 0; s < 2; s++) {
    uint64_t sd = seed;
    for (int64_t i = 0; i < P; i++) h[i] = draw(&sd);
    ops.htod(ops.dev, st[s].w[0], h, fb);
    ops.htod(ops.dev, st[s].w[1], h, fb);
    for (int64_t i = 0; i < P; i++) h[i] = 0.01f * draw(&sd);
    ops.htod(ops.dev, st[s].m, h, fb);
    for (int64_t i = 0; i < P; i++) h[i] = 1e-4f * fabsf(draw(&sd));
    ops.htod(ops.dev, st[s].v, h, fb);
  }
  double b1 = 0.9, b2 = 0.95, eps = 1e-8, wd = 0.1, dc = 0.5;
  struct {
    double lr, gs;
    int64_t t;
  } sc;
  const int steps[][2] = {{1, 0}, {0, 1}, {1, 0}, {0, 1}, {1, 1}}; /* (written, read) */
  for (int q = 0; q < 5; q++) {
    int wv = steps[q][0], rv = steps[q][1];
    for (int64_t i = 0; i < P; i++) h[i] = draw(&seed);
    ops.htod(ops.dev, grad, h, fb);
    sc.lr = 3e-3 * (q + 1), sc.gs = 0.37 + 0.1 * q, sc.t = q + 1;
    ops.htod(ops.dev, scal, &sc, sizeof sc);
    /* state 0: per tensor, as cp_update did */
    for (int k = 0; k < nt; k++) {
      CxPtr wo = st[0].w[wv] + (CxPtr)tab[k].off * 4, wi = st[0].w[rv] + (CxPtr)tab[k].off * 4;
      if (!tab[k].has_grad) {
        if (wo != wi) ops.dtod(ops.dev, 0, wo, wi, (size_t)tab[k].n * 4);
        continue;
      }
      CxPtr g = grad + (CxPtr)tab[k].off * 4, m = st[0].m + (CxPtr)tab[k].off * 4, v = st[0].v + (CxPtr)tab[k].off * 4;
      int64_t n = tab[k].n;
      int decay = tab[k].decay;
      void *args[] = {&wo, &wi, &g, &m, &v, &n, &b1, &b2, &eps, &wd, &decay, &dc, &scal};
      unsigned grid = (unsigned)((n + 255) / 256 > 4096 ? 4096 : (n + 255) / 256);
      ops.launch(ops.dev, 0, k_one, grid, 256, args);
    }
    /* state 1: one launch */
    int before = emu_device_counts().launches;
    CxAdamwLaunch a = {.w_out = st[1].w[wv], .w_in = st[1].w[rv], .grad = grad, .m = st[1].m, .v = st[1].v,
                       .w16 = w16, .scalars = scal, .beta1 = b1, .beta2 = b2, .eps = eps, .weight_decay = wd,
                       .delay_comp = dc};
    cx_adamw_multi_launch(&ops, k_multi, 0, &T, &a);
    EXPECT_EQ_INT(emu_device_counts().launches - before, 1);
    ops.sync(ops.dev);
    CxPtr blk[2][4] = {{st[0].w[0], st[0].w[1], st[0].m, st[0].v}, {st[1].w[0], st[1].w[1], st[1].m, st[1].v}};
    const char *name[4] = {"version 0", "version 1", "m", "v"};
    for (int b = 0; b < 4; b++) {
      ops.dtoh(ops.dev, h, blk[0][b], fb);
      ops.dtoh(ops.dev, h2, blk[1][b], fb);
      int64_t bad = -1;
      for (int64_t i = 0; i < P && bad < 0; i++)
        if (memcmp(&h[i], &h2[i], 4) != 0) bad = i;
      if (bad >= 0)
        fprintf(stderr, "  step %d: %s differs at element %lld: per tensor %a, multi-tensor %a\n", q, name[b],
                (long long)bad, (double)h[bad], (double)h2[bad]);
      EXPECT(bad < 0);
    }
    /* the bf16 copy of the version written, on every tensor of the table */
    ops.dtoh(ops.dev, h, st[1].w[wv], fb);
    ops.dtoh(ops.dev, h16, w16, fb / 2);
    int64_t bad16 = 0;
    for (int k = 0; k < nt; k++)
      for (int64_t i = tab[k].off; i < tab[k].off + tab[k].n; i++) bad16 += h16[i] != bf16_of(h[i]);
    EXPECT_EQ_INT(bad16, 0);
  }
  /* the deferred tied parameter was never written (its first weights are W(0)) */
  uint64_t sd = 12345;
  for (int64_t i = 0; i < P; i++) h2[i] = draw(&sd);
  ops.dtoh(ops.dev, h, st[1].w[0], fb);
  EXPECT(memcmp(h + off[3], h2 + off[3], (size_t)spec[3].n * 4) == 0);
  ops.dtoh(ops.dev, h16, w16, fb / 2);
  int64_t touched = 0;
  for (int64_t i = off[3]; i < off[3] + spec[3].n; i++) touched += h16[i] != 0;
  EXPECT_EQ_INT(touched, 0);
  printf("  %d tensors of %lld elements in %lld chunks: per tensor == multi-tensor, bit for bit, over 5 steps\n", nt,
         (long long)P, (long long)T.nchunks);
  free(h);
  free(h2);
  free(h16);
}

int main(int argc, char **argv) {
  if (!emu_test_begin(argc, argv, false, "usage: test_adamw_multi PD2BWC", tmp)) return 2;
  RUN(test_same_bits);
  emu_test_end();
  return TEST_REPORT();
}
