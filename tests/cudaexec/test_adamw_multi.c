/* tests/cudaexec/test_adamw_multi.c — the CUDA optimizer step gives the CPU's bits: the
 * multi-tensor AdamW (kernels/cuda_adamw_multi.cuh, runtime/cuda/exec/cuda_adamw_multi.h)
 * and the per-tensor kernels against each other and against kernels/cpu_kernels_optim.h
 * (part "kernel"), and the CUDA device's opt_step against the CPU device's (parts
 * "device" and "bf16"), with 2bw's delay compensation, its flushed start (a fresh
 * gradient: no compensation) and its weight prediction (runtime/exec/exec.h
 * ExecOptStep: fresh, master, predict; docs/update-rules.md).
 *
 * Part "kernel". On the host CUDA emulator (emu_device.h: the kernel library compiled
 * as host C++), a stage's worth of parameters in one params block, as a stage replica
 * lays them out but with sizes and offsets chosen to reach every path of the kernel:
 * whole float4 runs, tensors under four elements, counts that are not a multiple of 4
 * (tails of 1, 2 and 3), bases misaligned by 1, 2 and 3 floats (no 128-bit path),
 * several chunks with a partial last one, exactly one chunk, decay on and off,
 * parameters without a gradient (copied into the version written), and a deferred tied
 * parameter (left out of the table: nothing may touch it). Three copies of the state
 * (two weight versions, 2bw's master slot, m, v) start equal; on one every tensor of
 * the table steps with pkc_adamw_step_dev_f32 and then pkc_predict_step_dev_f32 (no
 * gradient: a device copy), as the CUDA device's per-tensor path does; on another ONE
 * launch of pkc_adamw_multi_dev_f32 steps them all, prediction fused, also writing the
 * bf16 copy of the version written; on the third (host memory) the CPU's
 * pk_adamw_step_f32 and pk_predict_step_f32, as the CPU device does. Ten steps: 2bw's
 * alternation of versions with delay compensation, a fresh one without, a vanilla step
 * in place, then steps from the master slot with prediction (k = 0, 1 and 0.7,
 * compensated or not); new gradients, lr, clip scale, bias-correction step,
 * compensation and k each time (read from device memory). After each step the three
 * states must be equal byte for byte, the bf16 copy must be round-to-nearest-even of
 * the (predicted) version written, and the multi-tensor step exactly one kernel launch.
 *
 * Part "fold": the same launch with every tensor of the table folded (a bf16 plan's
 * weight prediction whose versions hold the bf16 copies: CxAdamwTensor.fold) against the
 * launch with the copies beside the versions, over the kernel part's steps from the master
 * slot (compensated or not, k = 0, 1, 0.7). The unfolded state's version read as W(t-1)
 * is first set to its copy widened (what the folded one holds); then m, v and the master
 * must be equal byte for byte, each folded tensor's first half the unfolded copy of the
 * version written, its second half never written, and the deferred tied parameter
 * untouched.
 *
 * Parts "device" (fp32 plan: AdamW, with and without prediction, and SGD with it) and
 * "bf16" (a --precision bf16 plan: the same, and the bf16 copies). A one-stage 2bw plan's
 * stage on the CUDA device (cx_exec_device, the emulator, CUDA graphs on) and on the CPU
 * device (exec_cpu_device), each with an arena of three weight slots, gradients, m and
 * v from the same values; eight steps as the interpreter issues them with a flushed
 * start of K = 4 (fresh for t < 4, k = 0 while the next reader is fresh) and, with
 * prediction, every step from the master slot; one parameter of five without a
 * gradient, and the last one stepped in a call of its own (a deferred tied step: the
 * per-tensor path beside the multi-tensor one). The update runs as a captured graph
 * from step 2 on, captured while the compensation and k were still off: values frozen
 * at capture would differ. After each step every block must be equal byte for byte;
 * in the bf16 plan, each weight slot's bf16 copy that the device holds as current must
 * be the cast of that slot's weights (the version written: current and predicted).
 *
 *   test_adamw_multi PD2BWC [all|kernel|fold|device|bf16]   (in the source tree: the
 *   emulator compiles kernels there)
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "emu_train.h"
#include "kernels/cpu_kernels.h"
#include "pkc_kernels_src.h"
#include "runtime/cuda/exec/cuda_adamw_multi.h"
#include "runtime/exec/exec.h"
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

/* The kernel part's steps: the version written and read (2: the master slot), whether
 * master is that slot (weight prediction), the compensation in force, k. */
static const struct {
  int wv, rv, master;
  double dc, k;
} ksteps[] = {
    {1, 0, 0, 0.5, 0}, {0, 1, 0, 0.5, 0}, {1, 0, 0, 0, 0},   /* 2bw; a fresh step */
    {0, 1, 0, 0.5, 0}, {1, 1, 0, 0.5, 0},                    /* a vanilla step in place */
    {0, 2, 1, 0, 0},   {1, 2, 1, 0, 1},   {0, 2, 1, 0.5, 1}, /* from master, predicted */
    {1, 2, 1, 0.5, 0.7}, {0, 2, 1, 0, 0.7},
};
#define NKSTEPS ((int)(sizeof ksteps / sizeof ksteps[0]))

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

/* The per-step values on the device (pkc_step_scalars). */
typedef struct Scalars {
  double lr, gs;
  int64_t t;
  double dc, k;
} Scalars;

/* The first element where a and b differ (-1: none), printed as `what`. */
static int64_t first_diff(const char *what, int step, const float *a, const float *b, int64_t n, const char *na,
                          const char *nb) {
  for (int64_t i = 0; i < n; i++)
    if (memcmp(&a[i], &b[i], 4) != 0) {
      fprintf(stderr, "  step %d: %s differs at element %lld: %s %a, %s %a\n", step, what, (long long)i, na,
              (double)a[i], nb, (double)b[i]);
      return i;
    }
  return -1;
}

/* ---- part kernel ----------------------------------------------------------------------------- */

typedef struct State {
  GpuPtr w[3], m, v; /* versions 0 and 1, the master slot */
} State;

/* State 0's step on the device, tensor by tensor (the CUDA device's per-tensor path). */
static void per_tensor(const CudaDeviceOps *ops, void *k_one, void *k_pred, const State *s, const CxAdamwTensor *tab,
                       int nt, int q, GpuPtr grad, GpuPtr scal, const double hp[4]) {
  int wv = ksteps[q].wv, rv = ksteps[q].rv;
  double b1 = hp[0], b2 = hp[1], eps = hp[2], wd = hp[3];
  for (int k = 0; k < nt; k++) {
    GpuPtr o = (GpuPtr)tab[k].off * 4, wo = s->w[wv] + o, wi = s->w[rv] + o;
    int64_t n = tab[k].n;
    if (!tab[k].has_grad) {
      if (wo != wi) ops->dtod(ops->dev, 0, wo, wi, (size_t)n * 4);
    } else {
      GpuPtr g = grad + o, m = s->m + o, v = s->v + o;
      int decay = tab[k].decay;
      void *args[] = {&wo, &wi, &g, &m, &v, &n, &b1, &b2, &eps, &wd, &decay, &scal};
      ops->launch(ops->dev, 0, k_one, (unsigned)((n + 255) / 256 > 4096 ? 4096 : (n + 255) / 256), 256, args);
    }
    if (ksteps[q].master) {
      GpuPtr ma = s->w[2] + o;
      void *args[] = {&wo, &ma, &n, &scal};
      ops->launch(ops->dev, 0, k_pred, (unsigned)((n + 1023) / 1024), 256, args);
    }
  }
}

/* The CPU's step of the same tensors on host state h (w[3], m, v: P floats each). */
static void cpu_step(float *const h[5], const CxAdamwTensor *tab, int nt, int q, const float *grad, const Scalars *sc,
                     const double hp[4]) {
  int wv = ksteps[q].wv, rv = ksteps[q].rv;
  for (int k = 0; k < nt; k++) {
    int64_t o = tab[k].off, n = tab[k].n;
    float *wo = h[wv] + o, *wi = h[rv] + o;
    if (!tab[k].has_grad) {
      if (wo != wi) memcpy(wo, wi, (size_t)n * 4);
    } else {
      pk_adamw_step_f32(wo, wi, grad + o, h[3] + o, h[4] + o, n, sc->lr, hp[0], hp[1], hp[2], hp[3], tab[k].decay, sc->t,
                        sc->gs, sc->dc);
    }
    if (ksteps[q].master) pk_predict_step_f32(wo, h[2] + o, n, sc->k);
  }
}

static void test_kernel(void) {
  char err[512] = "";
  CudaDeviceOps ops = emu_device_ops(tmp, EMU_IN_ORDER);
  void *lib = ops.load(ops.dev, pd_cuda_kernels_src, "kernels.cu", err, sizeof err);
  if (!lib) fprintf(stderr, "  %s\n", err);
  EXPECT(lib != NULL);
  if (!lib) return;
  void *k_one = ops.kernel(ops.dev, lib, "pkc_adamw_step_dev_f32"),
       *k_multi = ops.kernel(ops.dev, lib, "pkc_adamw_multi_dev_f32"),
       *k_pred = ops.kernel(ops.dev, lib, "pkc_predict_step_dev_f32");
  EXPECT(k_one && k_multi && k_pred);
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
  /* arena: two states (3 weight slots, m, v), the gradient, the bf16 copy, the scalars, the table */
  GpuPtr base;
  size_t total = 2 * 5 * fb + fb + fb / 2 + 256 + tb;
  EXPECT(ops.alloc(ops.dev, total, &base, err, sizeof err));
  State st[2];
  GpuPtr at = base;
  for (int s = 0; s < 2; s++) {
    st[s] = (State){{at, at + fb, at + 2 * fb}, at + 3 * fb, at + 4 * fb};
    at += 5 * fb;
  }
  GpuPtr grad = at, w16 = at + fb, scal = at + fb + fb / 2, table = scal + 256;
  CxAdamwTable T = cx_adamw_table_upload(&ops, table, tab, nt);
  int64_t chunks = 0;
  for (int k = 0; k < nt; k++) chunks += (tab[k].n + CX_ADAMW_CHUNK - 1) / CX_ADAMW_CHUNK;
  EXPECT_EQ_INT(T.nchunks, chunks);
  /* equal starting states: every weight slot W(0), m and v from a previous step (v >= 0) */
  float *hs[5], *h = malloc(fb), *h2 = malloc(fb), *hg = malloc(fb);
  uint16_t *h16 = malloc(fb / 2);
  uint64_t seed = 12345;
  for (int b = 0; b < 5; b++) hs[b] = malloc(fb);
  for (int64_t i = 0; i < P; i++) hs[0][i] = hs[1][i] = hs[2][i] = draw(&seed);
  for (int64_t i = 0; i < P; i++) hs[3][i] = 0.01f * draw(&seed);
  for (int64_t i = 0; i < P; i++) hs[4][i] = 1e-4f * fabsf(draw(&seed));
  for (int s = 0; s < 2; s++) {
    GpuPtr blk[5] = {st[s].w[0], st[s].w[1], st[s].w[2], st[s].m, st[s].v};
    for (int b = 0; b < 5; b++) ops.htod(ops.dev, blk[b], hs[b], fb);
  }
  const double hp[4] = {0.9, 0.95, 1e-8, 0.1}; /* beta1, beta2, eps, weight decay */
  for (int q = 0; q < NKSTEPS; q++) {
    int wv = ksteps[q].wv, rv = ksteps[q].rv;
    for (int64_t i = 0; i < P; i++) hg[i] = draw(&seed);
    ops.htod(ops.dev, grad, hg, fb);
    Scalars sc = {.lr = 3e-3 * (q + 1), .gs = 0.37 + 0.1 * q, .t = q + 1, .dc = ksteps[q].dc, .k = ksteps[q].k};
    ops.htod(ops.dev, scal, &sc, sizeof sc);
    per_tensor(&ops, k_one, k_pred, &st[0], tab, nt, q, grad, scal, hp);
    int before = emu_device_counts().launches;
    CxAdamwLaunch a = {.w_out = st[1].w[wv], .w_in = st[1].w[rv], .grad = grad, .m = st[1].m, .v = st[1].v,
                       .master = ksteps[q].master ? st[1].w[2] : 0, .w16 = w16, .scalars = scal, .beta1 = hp[0],
                       .beta2 = hp[1], .eps = hp[2], .weight_decay = hp[3]};
    cx_adamw_multi_launch(&ops, k_multi, 0, &T, &a);
    EXPECT_EQ_INT(emu_device_counts().launches - before, 1);
    cpu_step(hs, tab, nt, q, hg, &sc, hp);
    ops.sync(ops.dev);
    const char *name[5] = {"version 0", "version 1", "master", "m", "v"};
    for (int b = 0; b < 5; b++) {
      GpuPtr b0[5] = {st[0].w[0], st[0].w[1], st[0].w[2], st[0].m, st[0].v};
      GpuPtr b1[5] = {st[1].w[0], st[1].w[1], st[1].w[2], st[1].m, st[1].v};
      ops.dtoh(ops.dev, h, b0[b], fb);
      ops.dtoh(ops.dev, h2, b1[b], fb);
      EXPECT(first_diff(name[b], q, h, h2, P, "per tensor", "multi-tensor") < 0);
      EXPECT(first_diff(name[b], q, hs[b], h2, P, "cpu", "multi-tensor") < 0);
    }
    /* the bf16 copy of the (predicted) version written, on every tensor of the table */
    ops.dtoh(ops.dev, h16, w16, fb / 2);
    int64_t bad16 = 0;
    for (int k = 0; k < nt; k++)
      for (int64_t i = tab[k].off; i < tab[k].off + tab[k].n; i++) bad16 += h16[i] != bf16_of(hs[wv][i]);
    EXPECT_EQ_INT(bad16, 0);
  }
  /* the deferred tied parameter was never written (its first weights are W(0)) */
  uint64_t sd = 12345;
  for (int64_t i = 0; i < P; i++) h2[i] = draw(&sd);
  for (int b = 0; b < 3; b++) {
    ops.dtoh(ops.dev, h, st[1].w[b], fb);
    EXPECT(memcmp(h + off[3], h2 + off[3], (size_t)spec[3].n * 4) == 0);
  }
  ops.dtoh(ops.dev, h16, w16, fb / 2);
  int64_t touched = 0;
  for (int64_t i = off[3]; i < off[3] + spec[3].n; i++) touched += h16[i] != 0;
  EXPECT_EQ_INT(touched, 0);
  printf("  %d tensors of %lld elements in %lld chunks: per tensor == multi-tensor == cpu, bit for bit, over %d "
         "steps (compensated, fresh, predicted)\n",
         nt, (long long)P, (long long)T.nchunks, NKSTEPS);
  for (int b = 0; b < 5; b++) free(hs[b]);
  free(h), free(h2), free(hg), free(h16);
}

/* ---- part fold ------------------------------------------------------------------------------ */

static void test_fold(void) {
  char err[512] = "";
  CudaDeviceOps ops = emu_device_ops(tmp, EMU_IN_ORDER);
  void *lib = ops.load(ops.dev, pd_cuda_kernels_src, "kernels.cu", err, sizeof err);
  void *k_multi = lib ? ops.kernel(ops.dev, lib, "pkc_adamw_multi_dev_f32") : NULL;
  EXPECT(k_multi != NULL);
  if (!k_multi) return;
  CxAdamwTensor tab[NSPEC], tf[NSPEC];
  int64_t off[NSPEC], P = 0;
  int nt = 0;
  for (int k = 0; k < NSPEC; k++) {
    off[k] = (P + 63) / 64 * 64 + spec[k].mis;
    P = off[k] + spec[k].n;
    if (!spec[k].in_table) continue;
    tab[nt] = (CxAdamwTensor){.off = off[k], .n = spec[k].n, .decay = spec[k].decay, .has_grad = spec[k].grad};
    tf[nt] = tab[nt], tf[nt].fold = 1;
    nt++;
  }
  P = (P + 63) / 64 * 64;
  size_t fb = (size_t)P * 4;
  uint64_t tb = cx_adamw_table_bytes(tab, nt);
  /* two states of 3 weight slots, m, v; the unfolded state's two bf16 copies; the
   * gradient, the scalars, the two tables */
  GpuPtr base;
  EXPECT(ops.alloc(ops.dev, 2 * 5 * fb + fb + fb + 256 + 2 * tb, &base, err, sizeof err));
  State st[2];
  for (int s = 0; s < 2; s++) st[s] = (State){{base + 5 * s * fb, base + (5 * s + 1) * fb, base + (5 * s + 2) * fb},
                                              base + (5 * s + 3) * fb, base + (5 * s + 4) * fb};
  GpuPtr c16[2] = {base + 10 * fb, base + 10 * fb + fb / 2}, grad = base + 11 * fb, scal = grad + fb,
        table = scal + 256;
  CxAdamwTable T = cx_adamw_table_upload(&ops, table, tab, nt), TF = cx_adamw_table_upload(&ops, table + tb, tf, nt);
  float *h = malloc(fb), *hw = malloc(fb), *hg = malloc(fb), *hb = malloc(fb);
  uint16_t *h16 = malloc(fb / 2), *f16 = malloc(fb);
  uint64_t seed = 4242;
  /* the master W, m, v; each version a copy x, held widened (unfolded) and as bits (folded) */
  for (int64_t i = 0; i < P; i++) h[i] = draw(&seed);
  ops.htod(ops.dev, st[0].w[2], h, fb), ops.htod(ops.dev, st[1].w[2], h, fb);
  for (int64_t i = 0; i < P; i++) h[i] = 0.01f * draw(&seed);
  ops.htod(ops.dev, st[0].m, h, fb), ops.htod(ops.dev, st[1].m, h, fb);
  for (int64_t i = 0; i < P; i++) h[i] = 1e-4f * fabsf(draw(&seed));
  ops.htod(ops.dev, st[0].v, h, fb), ops.htod(ops.dev, st[1].v, h, fb);
  for (int v = 0; v < 2; v++) {
    for (int64_t i = 0; i < P; i++) h16[i] = bf16_of(draw(&seed));
    ops.htod(ops.dev, c16[v], h16, fb / 2);
    for (int64_t i = 0; i < P; i++) { /* folded: each tensor's bits in its first half, 0x7e7e after */
      uint32_t u = (uint32_t)h16[i] << 16;
      memcpy(&hw[i], &u, 4);
      f16[2 * i] = f16[2 * i + 1] = 0x7e7e;
    }
    for (int k = 0; k < nt; k++) memcpy(f16 + 2 * tab[k].off, h16 + tab[k].off, (size_t)tab[k].n * 2);
    ops.htod(ops.dev, st[0].w[v], hw, fb), ops.htod(ops.dev, st[1].w[v], f16, fb);
  }
  ops.dtoh(ops.dev, hb, st[1].w[0], fb); /* the deferred tied parameter's bytes, never written */
  const double hp[4] = {0.9, 0.95, 1e-8, 0.1};
  int nsteps = 0;
  for (int q = 0; q < NKSTEPS; q++) {
    if (!ksteps[q].master) continue;
    int wv = ksteps[q].wv;
    nsteps++;
    /* the unfolded version written: its copy widened, as the folded one reads W(t-1) */
    ops.dtoh(ops.dev, h16, c16[wv], fb / 2);
    ops.dtoh(ops.dev, hw, st[0].w[wv], fb);
    for (int k = 0; k < nt; k++)
      for (int64_t i = tab[k].off; i < tab[k].off + tab[k].n; i++) {
        uint32_t u = (uint32_t)h16[i] << 16;
        memcpy(&hw[i], &u, 4);
      }
    ops.htod(ops.dev, st[0].w[wv], hw, fb);
    for (int64_t i = 0; i < P; i++) hg[i] = draw(&seed);
    ops.htod(ops.dev, grad, hg, fb);
    Scalars sc = {.lr = 2e-3 * (q + 1), .gs = 0.41 + 0.1 * q, .t = q + 1, .dc = ksteps[q].dc, .k = ksteps[q].k};
    ops.htod(ops.dev, scal, &sc, sizeof sc);
    for (int s = 0; s < 2; s++) {
      CxAdamwLaunch a = {.w_out = st[s].w[wv], .w_in = st[s].w[2], .grad = grad, .m = st[s].m, .v = st[s].v,
                         .master = st[s].w[2], .w16 = s ? 0 : c16[wv], .scalars = scal, .beta1 = hp[0],
                         .beta2 = hp[1], .eps = hp[2], .weight_decay = hp[3]};
      cx_adamw_multi_launch(&ops, k_multi, 0, s ? &TF : &T, &a);
    }
    ops.sync(ops.dev);
    const char *name[3] = {"master", "m", "v"};
    GpuPtr b0[3] = {st[0].w[2], st[0].m, st[0].v}, b1[3] = {st[1].w[2], st[1].m, st[1].v};
    for (int b = 0; b < 3; b++) {
      ops.dtoh(ops.dev, h, b0[b], fb);
      ops.dtoh(ops.dev, hw, b1[b], fb);
      EXPECT(first_diff(name[b], q, h, hw, P, "copies beside", "folded") < 0);
    }
    ops.dtoh(ops.dev, h16, c16[wv], fb / 2);
    ops.dtoh(ops.dev, f16, st[1].w[wv], fb);
    int64_t bad = 0, over = 0;
    for (int k = 0; k < nt; k++)
      for (int64_t i = 0; i < tab[k].n; i++) {
        bad += f16[2 * tab[k].off + i] != h16[tab[k].off + i];
        over += f16[2 * tab[k].off + tab[k].n + i] != 0x7e7e;
      }
    if (bad || over) fprintf(stderr, "  step %d: %lld folded copies differ, %lld second halves written\n", q,
                             (long long)bad, (long long)over);
    EXPECT(bad == 0 && over == 0);
  }
  ops.dtoh(ops.dev, h, st[1].w[0], fb);
  EXPECT(memcmp((char *)h + 4 * off[3], (char *)hb + 4 * off[3], (size_t)spec[3].n * 4) == 0);
  printf("  %d tensors folded: master, m, v and the bf16 copies bit for bit the copies-beside launch's over %d "
         "steps from the master (compensated from the copy, k = 0, 1, 0.7); second halves untouched\n", nt, nsteps);
  free(h), free(hw), free(hg), free(hb), free(h16), free(f16);
}

/* ---- parts device and bf16 ------------------------------------------------------------------- */

#define DSTEPS 8
#define DFLUSH 4 /* K: batches t < K read W(t) */
#define DK 0.75  /* the prediction's k */

/* One device's arena: weight slots 0, 1 and the master slot, gradients, m, v. */
typedef struct Dev {
  ExecDevice *d;
  char *blk[6];
} Dev;

static bool dev_arena(Dev *x, uint64_t pb) {
  char *a = x->d->ops->arena_alloc(x->d, 6 * pb, "test arena");
  if (!a) return false;
  for (int b = 0; b < 6; b++) x->blk[b] = a + b * pb;
  return true;
}

/* Step t's call `part`, as exec_interp.c's step_param issues them: every parameter but
 * the last in one opt_step (part 0; one of five without a gradient), the last alone
 * (part 1: a deferred tied step); from the master slot with prediction, else from the
 * other version. */
static void dev_step(const Dev *x, const RtStage *st, const TrainConfig *tc, int t, bool predict, int part) {
  ExecOptStep s[64];
  int wv = t % 2, rv = predict ? 2 : 1 - wv, n = 0;
  for (int k = part ? st->nparams - 1 : 0; k < (part ? st->nparams : st->nparams - 1); k++) {
    const RtParam *pp = &st->params[k];
    s[n++] = (ExecOptStep){.tc = tc, .param = pp, .wout = (float *)(void *)(x->blk[wv] + pp->offset),
                           .win = (const float *)(const void *)(x->blk[rv] + pp->offset),
                           .g = k % 5 == 1 ? NULL : (const float *)(const void *)(x->blk[3] + pp->offset),
                           .m = (float *)(void *)(x->blk[4] + pp->offset),
                           .v = (float *)(void *)(x->blk[5] + pp->offset), .t = t, .scale = 0.37 + 0.05 * t,
                           .fresh = t < DFLUSH,
                           .master = predict ? (float *)(void *)(x->blk[2] + pp->offset) : NULL,
                           .predict = predict && t + 1 >= DFLUSH ? DK : 0};
  }
  x->d->ops->opt_step(x->d, s, n);
}

/* Each weight slot's bf16 copy on the CUDA device (none in an fp32 plan): the version
 * written must be current, and every current copy the cast of its weights h[slot] on
 * the first np parameters (before the deferred step, the last one's part of the
 * version written is still to come: it is cast again with that step). */
static void check_copies(ExecDevice *gd, const RtStage *st, int np, char *const blk[3], float *const h[3], int t) {
  int64_t n = st->blocks[BUF_PARAMS] / 4;
  uint16_t *c16 = malloc((size_t)n * 2 + 2);
  for (int v = 0; v < 3; v++) {
    bool stale = true;
    GpuPtr at = cx_exec_device_bf16_copy(gd, blk[v], &stale);
    if (!at) break;
    if (v == t % 2) EXPECT(!stale);
    if (stale) continue;
    gd->ops->download(gd, c16, (const void *)(uintptr_t)at, (uint64_t)n * 2);
    int64_t bad = 0, first = -1;
    for (int k = 0; k < np; k++)
      for (int64_t i = st->params[k].offset / 4; i < st->params[k].offset / 4 + st->params[k].numel; i++)
        if (c16[i] != bf16_of(h[v][i])) bad++, first = first < 0 ? i : first;
    if (bad)
      fprintf(stderr, "  step %d: slot %d's bf16 copy: %lld elements not the cast of its weights (first %lld: %04x, "
              "want %04x of %a)\n", t, v, (long long)bad, (long long)first, c16[first], bf16_of(h[v][first]),
              (double)h[v][first]);
    EXPECT_EQ_INT(bad, 0);
  }
  free(c16);
}

/* DSTEPS steps of plan `name`'s stage on the CUDA and the CPU device (see the file's
 * comment): AdamW with compensation, or SGD; with prediction or not. */
static void device_case(const char *name, bool sgd, bool predict) {
  char dir[256], err[RT_ERR_LEN] = "";
  emu_path(dir, sizeof dir, name);
  RtPlan *p = rt_plan_load(dir, err, sizeof err);
  CudaDeviceOps ops = emu_device_ops(tmp, EMU_IN_ORDER);
  Dev g = {p ? cx_exec_device(&ops, p, 0, GEMM_PLAN, p->b * p->m, err, sizeof err) : NULL, {0}};
  Dev c = {g.d ? exec_cpu_device(&p->stages[0], err, sizeof err) : NULL, {0}};
  if (g.d) cx_exec_device_set_versions(g.d, 3);
  const RtStage *st = p ? &p->stages[0] : NULL;
  uint64_t pb = st ? (uint64_t)(st->blocks[BUF_PARAMS] + 255) / 256 * 256 : 0;
  bool ok = c.d && st->nparams >= 3 && st->nparams <= 64 && dev_arena(&g, pb) && dev_arena(&c, pb);
  if (!ok) fprintf(stderr, "  %s\n", err);
  EXPECT(ok);
  TrainConfig tc = p ? p->train : (TrainConfig){0};
  tc.optimizer = sgd ? OPT_SGD : OPT_ADAMW;
  tc.delay_comp = sgd ? 0 : 0.5;
  tc.schedule = LR_COSINE, tc.warmup = DSTEPS, tc.steps = 2 * DSTEPS, tc.min_lr = tc.lr / 10;
  int64_t n = ok ? (int64_t)pb / 4 : 0;
  float *h = malloc((size_t)(6 * n + 1) * 4), *hg = malloc((size_t)(6 * n + 1) * 4);
  uint64_t seed = 777;
  for (int64_t i = 0; i < n; i++) h[i] = h[n + i] = h[2 * n + i] = draw(&seed); /* every slot W(0) */
  for (int64_t i = 3 * n; i < 6 * n; i++) h[i] = i < 5 * n ? 0.01f * draw(&seed) : 1e-4f * fabsf(draw(&seed));
  if (ok) {
    g.d->ops->upload(g.d, g.blk[0], h, (uint64_t)(6 * n * 4));
    c.d->ops->upload(c.d, c.blk[0], h, (uint64_t)(6 * n * 4));
    bool stale;
    for (int v = 0; v < 3; v++) cx_exec_device_bf16_copy(g.d, g.blk[v], &stale); /* each slot has a copy */
  }
  const char *bname[6] = {"version 0", "version 1", "master", "gradients", "m", "v"};
  for (int t = 0; ok && t < DSTEPS; t++) {
    for (int64_t i = 0; i < n; i++) h[3 * n + i] = draw(&seed);
    g.d->ops->upload(g.d, g.blk[3], h + 3 * n, (uint64_t)n * 4);
    c.d->ops->upload(c.d, c.blk[3], h + 3 * n, (uint64_t)n * 4);
    for (int part = 0; part < 2; part++) { /* the stage's call, then the deferred one */
      EmuCounts before = emu_device_counts();
      dev_step(&g, st, &tc, t, predict, part);
      dev_step(&c, st, &tc, t, predict, part);
      EmuCounts now = emu_device_counts();
      if (t == 0 && part == 0) { /* eager: the multi-tensor AdamW with its prediction fused */
        printf("  %s, step 0: %d multi-tensor AdamW, %d per-tensor AdamW, %d prediction launches (%d parameters)\n",
               name, now.adamw_multi - before.adamw_multi, now.adamw_one - before.adamw_one,
               now.predicts - before.predicts, st->nparams - 1);
        EXPECT_EQ_INT(now.adamw_multi - before.adamw_multi, sgd ? 0 : 1);
        EXPECT_EQ_INT(now.predicts - before.predicts, predict && sgd ? st->nparams - 1 : 0);
      }
      g.d->ops->download(g.d, hg, g.blk[0], (uint64_t)(6 * n * 4));
      for (int b = 0; b < 6; b++)
        EXPECT(first_diff(bname[b], t, (float *)(void *)c.blk[b], hg + b * n, n, "cpu", "cuda") < 0);
      float *hw[3] = {hg, hg + n, hg + 2 * n};
      check_copies(g.d, st, part ? st->nparams : st->nparams - 1, g.blk, hw, t);
    }
  }
  if (ok) {
    CxGraphStats us = cx_exec_device_update_stats(g.d);
    printf("  %s (%s%s): %d steps bit for bit the CPU device's; the update: %lld eager, %lld captured, %lld graph "
           "launches\n", name, sgd ? "SGD" : "AdamW, delay_comp 0.5", predict ? ", predicted" : "", DSTEPS,
           (long long)us.eager, (long long)us.captured, (long long)us.launches);
    EXPECT(us.captured > 0 && us.launches > 0); /* graphs captured before the values changed ran after */
  }
  free(h), free(hg);
  if (c.blk[0]) c.d->ops->arena_free(c.d, c.blk[0]);
  if (g.blk[0]) g.d->ops->arena_free(g.d, g.blk[0]);
  exec_device_destroy(c.d);
  exec_device_destroy(g.d);
  rt_plan_free(p);
}

static void test_device(void) {
  EXPECT(emu_train_files());
  EXPECT(emu_make_plan("pdev", "--schedule 2bw --precision fp32"));
  device_case("pdev", false, false); /* (a) fresh steps: no compensation, the rest compensated */
  device_case("pdev", false, true);  /* (b) weight prediction, k = 0 then DK, from the master slot */
  device_case("pdev", true, true);   /* (d) SGD (per tensor) with prediction */
}

static void test_bf16(void) {
  EXPECT(emu_train_files());
  /* the copies beside the versions: a plan without prediction (with it the versions
   * would hold them, part fold and test_cudapipe_bf16's); the steps predict all the same */
  EXPECT(emu_make_plan("pdev16", "--schedule 2bw --precision bf16 -D train.predict=0"));
  device_case("pdev16", false, true); /* (c) the copies written by the multi-tensor AdamW */
  device_case("pdev16", true, true);  /* and cast after the per-tensor steps */
}

int main(int argc, char **argv) {
  const char *part = emu_test_begin(argc, argv, true, "usage: test_adamw_multi PD2BWC [all|kernel|fold|device|bf16]", tmp);
  if (!part) return 2;
  if (emu_test_part(part, "kernel")) RUN(test_kernel);
  if (emu_test_part(part, "fold")) RUN(test_fold);
  if (emu_test_part(part, "device")) RUN(test_device);
  if (emu_test_part(part, "bf16")) RUN(test_bf16);
  emu_test_end();
  return TEST_REPORT();
}
