/* tests/cuda/test_cuda_emu.c — every CUDA kernel against its CPU kernel, emulated.
 *
 * Runs op_check_all (op_check.h) on the emulator (cuda_emu.h): the kernels' logic —
 * indexing, grid-stride loops, barriers, reductions, the Philox masks — checked in
 * CI on a machine with no GPU. Built twice: plainly (every check must pass) and as a
 * variant with PKC_SELFTEST_PERTURB (gelu_fwd is deliberately wrong: exactly that
 * check must fail, proving the checks can fail) and PKC_ATT_HS=8 (attention compiled
 * for one head size: it must pass at that size and poison any other); and a third
 * time with PKC_ATT_HS=16 PKC_ATT_T=70 (EMU_SEQLEN_VARIANT: the tensor-core attention
 * compiled for one sequence length runs at it and poisons any other).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../test.h"
#include "cuda_emu.h"
#include "op_check.h"

/* Each allocation is its own malloc, so a sanitizer build (PD2BW_SANITIZE) turns any
 * out-of-bounds access by a kernel into an error. */
typedef struct Emu {
  void *ptrs[256];
  int n;
} Emu;

static DevPtr emu_alloc(void *ctx, size_t bytes) {
  Emu *e = ctx;
  if (e->n == 256) {
    fprintf(stderr, "emulator: too many allocations\n");
    abort();
  }
  void *p = malloc(bytes ? bytes : 1);
  memset(p, 0xff, bytes); /* NaN garbage: a kernel must write what it promises */
  e->ptrs[e->n++] = p;
  return (DevPtr)(uintptr_t)p;
}

static void emu_reset(void *ctx) {
  Emu *e = ctx;
  for (int i = 0; i < e->n; i++) free(e->ptrs[i]);
  e->n = 0;
}

static void emu_upload(void *ctx, DevPtr dst, const void *src, size_t bytes) {
  (void)ctx;
  memcpy((void *)(uintptr_t)dst, src, bytes);
}

static void emu_download(void *ctx, void *dst, DevPtr src, size_t bytes) {
  (void)ctx;
  memcpy(dst, (const void *)(uintptr_t)src, bytes);
}

static void emu_launch_(void *ctx, const char *kernel, unsigned grid, unsigned block, void **args) {
  (void)ctx;
  if (emu_launch(kernel, grid, block, args) != 0) {
    fprintf(stderr, "emulator: no kernel named %s\n", kernel);
    abort();
  }
}

static float ld(DevPtr p, int64_t i, int bf16) {
  if (!bf16) return ((const float *)(uintptr_t)p)[i];
  uint32_t u = (uint32_t)((const uint16_t *)(uintptr_t)p)[i] << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}

/* A naive row-major GEMM with cuda_gemm's semantics (the emulator stands in for
 * cuBLAS only so the checks' calling convention is exercised). */
static void emu_gemm(void *ctx, GemmType type, int ta, int tb, int M, int N, int K, float alpha,
                     DevPtr A, int lda, DevPtr B, int ldb, float beta, DevPtr C, int ldc) {
  (void)ctx;
  int in16 = type == GEMM_BF16 || type == GEMM_BF16_OUT;
  int out16 = type == GEMM_BF16_OUT;
  for (int i = 0; i < M; i++)
    for (int j = 0; j < N; j++) {
      float acc = 0;
      for (int p = 0; p < K; p++) {
        float a = ta ? ld(A, (int64_t)p * lda + i, in16) : ld(A, (int64_t)i * lda + p, in16);
        float b = tb ? ld(B, (int64_t)j * ldb + p, in16) : ld(B, (int64_t)p * ldb + j, in16);
        acc += a * b;
      }
      int64_t ci = (int64_t)i * ldc + j;
      float old = beta == 0 ? 0 : ld(C, ci, out16);
      float r = alpha * acc + (beta == 0 ? 0 : beta * old);
      if (out16) {
        uint32_t u;
        memcpy(&u, &r, 4);
        u += 0x7fffu + ((u >> 16) & 1u);
        ((uint16_t *)(uintptr_t)C)[ci] = (uint16_t)(u >> 16);
      } else {
        ((float *)(uintptr_t)C)[ci] = r;
      }
    }
}

static Emu emu;

static OpDev emu_dev(unsigned block, unsigned max_grid) {
  OpDev d = {&emu,         "emulator",  emu_alloc, emu_reset, emu_upload,
             emu_download, emu_launch_, emu_gemm,  block,     max_grid};
  return d;
}

#if defined(EMU_SEQLEN_VARIANT)
/* The tensor-core attention compiled for head size 16 and sequence length 70
 * (PKC_ATT_HS, PKC_ATT_T, as the code generator defines them for a model): every flash
 * check at that shape passes; at T = 69 the forward poisons its outputs (a launch for a
 * length the tiles were not compiled for), as at an uncompiled head size. */
static void test_fixed_seq_len(void) {
  OpDev d = emu_dev(64, 3);
  int n = 0;
  int fails = op_check_all(&d, "flash", 0, &n);
  printf("  flash checks: %d of %d fail\n", fails, n);
  /* the other shapes (hs 32 and 64: 2 × 4 cases × 3 checks) poison; hs 16 at T = 70 passes */
  EXPECT_EQ_INT(n, 36);
  EXPECT_EQ_INT(fails, 24);
  int B = 1, T = 69, C = 32, NH = 2, causal = 1; /* hs 16 */
  double p = 0;
  unsigned long long seed = 1;
  unsigned op = 1;
  static uint16_t qkv[69 * 96];
  static float out[69 * 32], lse[2 * 69];
  for (int i = 0; i < 69 * 96; i++) qkv[i] = (uint16_t)(0x3c00 + (i % 64)); /* bf16 ~0.008 .. 0.015 */
  DevPtr dq = (DevPtr)(uintptr_t)qkv, dout = (DevPtr)(uintptr_t)out, dlse = (DevPtr)(uintptr_t)lse, dmb = 0;
  void *args[] = {&dout, &dlse, &dq, &B, &T, &C, &NH, &causal, &p, &seed, &op, &dmb};
  EXPECT_EQ_INT(emu_launch("pkc_flash_attention_fwd_bf16", 2, 128, args), 0);
  int nan = 0;
  for (int i = 0; i < 69 * 32; i++) nan += isnan(out[i]) != 0;
  EXPECT_EQ_INT(nan, 69 * 32);
  T = 70 - 64; /* nor does a shorter one: 6 */
  memset(out, 0, sizeof out);
  EXPECT_EQ_INT(emu_launch("pkc_flash_attention_fwd_bf16", 2, 128, args), 0);
  nan = 0;
  for (int i = 0; i < 6 * 32; i++) nan += isnan(out[i]) != 0;
  EXPECT_EQ_INT(nan, 6 * 32);
}

/* ...and the same launch at T = 70 gives finite outputs, each a convex combination of
 * the v rows (so within their range). */
static void test_compiled_seq_len_runs(void) {
  int B = 1, T = 70, C = 32, NH = 2, causal = 1;
  double p = 0;
  unsigned long long seed = 1;
  unsigned op = 1;
  static uint16_t qkv[70 * 96];
  static float out[70 * 32], lse[2 * 70];
  for (int i = 0; i < 70 * 96; i++) qkv[i] = (uint16_t)(0x3c00 + (i % 64));
  DevPtr dq = (DevPtr)(uintptr_t)qkv, dout = (DevPtr)(uintptr_t)out, dlse = (DevPtr)(uintptr_t)lse, dmb = 0;
  void *args[] = {&dout, &dlse, &dq, &B, &T, &C, &NH, &causal, &p, &seed, &op, &dmb};
  EXPECT_EQ_INT(emu_launch("pkc_flash_attention_fwd_bf16", 2, 128, args), 0);
  int bad = 0;
  for (int i = 0; i < 70 * 32; i++) bad += !(out[i] > 0.007f && out[i] < 0.016f);
  EXPECT_EQ_INT(bad, 0);
}
#elif !defined(PKC_SELFTEST_PERTURB)
/* Every op, with 64-thread blocks and at most 3 blocks: row kernels stride over rows
 * and columns, elementwise kernels over the grid. */
static void test_all_ops_small_grid(void) {
  OpDev d = emu_dev(64, 3);
  int n = 0;
  EXPECT_EQ_INT(op_check_all(&d, NULL, 1, &n), 0);
  EXPECT(n > 60);
}

/* A different launch shape must give the same answers (grid-stride correctness),
 * and so must running the blocks in the opposite order (no block depends on
 * another). */
static void test_all_ops_other_grid_reversed(void) {
  OpDev d = emu_dev(32, 64);
  int n = 0;
  emu_set_reverse_blocks(1);
  EXPECT_EQ_INT(op_check_all(&d, NULL, 0, &n), 0);
  emu_set_reverse_blocks(0);
}

/* Warp shuffles see the other lanes of the same warp (threads 32w..32w+31): lane l gets
 * lane l^5's value and lane 3's; a shuffle that some lanes skip fails the launch. */
static void test_warp_rendezvous(void) {
  float out[96];
  void *args[] = {&(float *){out}};
  EXPECT_EQ_INT(emu_launch("emu_check_shfl", 2, 96, args), 0);
  int bad = 0;
  for (int t = 0; t < 96; t++) bad += out[t] != (float)((t ^ 5) + 1000 * ((t & ~31) + 3));
  EXPECT_EQ_INT(bad, 0);
  EXPECT(emu_last_error() == NULL);
  EXPECT_EQ_INT(emu_launch("emu_check_divergent", 1, 64, args), -2);
  EXPECT(emu_last_error() != NULL && strstr(emu_last_error(), "warp collective"));
}

/* Unknown kernels are refused, not run. */
static void test_unknown_kernel(void) { EXPECT_EQ_INT(emu_launch("pkc_nope", 1, 32, NULL), -1); }
#else
/* With gelu_fwd perturbed by 1%, exactly its check fails. */
static void test_perturbed_kernel_is_caught(void) {
  OpDev d = emu_dev(64, 3);
  int n = 0;
  EXPECT_EQ_INT(op_check_all(&d, "activations", 1, &n), 1);
  EXPECT_EQ_INT(op_check_all(&d, "softmax", 0, &n), 0);
}

/* Attention compiled for head size 8: right at 8, NaN everywhere at 12. */
static void test_fixed_head_size(void) {
  OpDev d = emu_dev(64, 3);
  int n = 0;
  EXPECT_EQ_INT(op_check_all(&d, "attention", 0, &n), 0);
  EXPECT(n == 12); /* 2 causal x 2 p x (out, lse, dqkv) */
  int B = 1, T = 3, C = 24, NH = 2, causal = 1; /* hs 12 */
  double p = 0;
  unsigned long long seed = 1;
  unsigned op = 1;
  float qkv[3 * 72] = {0}, out[72], lse[6];
  DevPtr dq = (DevPtr)(uintptr_t)qkv, dout = (DevPtr)(uintptr_t)out, dmb = 0; /* p is 0: no key read */
  DevPtr dlse = (DevPtr)(uintptr_t)lse;
  memset(out, 0, sizeof out);
  memset(lse, 0, sizeof lse);
  EXPECT_EQ_INT(emu_launch("pkc_attention_fwd_f32", 2, 64,
                           (void *[]){&dout, &dlse, &dq, &B, &T, &C, &NH, &causal, &p, &seed, &op, &dmb}),
                0);
  int nan = 0;
  for (int i = 0; i < 72; i++) nan += isnan(out[i]) != 0;
  EXPECT_EQ_INT(nan, 72);
  nan = 0;
  for (int i = 0; i < 6; i++) nan += isnan(lse[i]) != 0;
  EXPECT_EQ_INT(nan, 6);
}
#endif

int main(void) {
#if defined(EMU_SEQLEN_VARIANT)
  RUN(test_fixed_seq_len);
  RUN(test_compiled_seq_len_runs);
#elif !defined(PKC_SELFTEST_PERTURB)
  RUN(test_all_ops_small_grid);
  RUN(test_all_ops_other_grid_reversed);
  RUN(test_unknown_kernel);
  RUN(test_warp_rendezvous);
#else
  RUN(test_perturbed_kernel_is_caught);
  RUN(test_fixed_head_size);
#endif
  emu_reset(&emu);
  return TEST_REPORT();
}
