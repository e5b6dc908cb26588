/* Philox4x32-10 against Random123's published known-answer vectors
 * (kat_vectors: philox4x32 10 rounds), and the dropout masks built on it: the
 * fraction dropped is p within 5 standard deviations on 1e5 draws, kept values are
 * scaled by exactly 1/(1-p), and element draws do not depend on how the tensor is
 * split into blocks. */
#include "kcheck.h"

static void expect_block(PhiloxCtr c, PhiloxKey k, uint32_t r0, uint32_t r1, uint32_t r2,
                         uint32_t r3) {
  PhiloxCtr r = philox4x32_10(c, k);
  EXPECT_EQ_INT(r.v[0], r0);
  EXPECT_EQ_INT(r.v[1], r1);
  EXPECT_EQ_INT(r.v[2], r2);
  EXPECT_EQ_INT(r.v[3], r3);
}

static void test_known_answers(void) {
  expect_block((PhiloxCtr){{0, 0, 0, 0}}, (PhiloxKey){{0, 0}}, 0x6627e8d5u, 0xe169c58du,
               0xbc57ac4cu, 0x9b00dbd8u);
  expect_block((PhiloxCtr){{0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu}},
               (PhiloxKey){{0xffffffffu, 0xffffffffu}}, 0x408f276du, 0x41c83b0eu,
               0xa20bc7c6u, 0x6d5451fdu);
  expect_block((PhiloxCtr){{0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u}},
               (PhiloxKey){{0xa4093822u, 0x299f31d0u}}, 0xd16cfe09u, 0x94fdccebu,
               0x5001e420u, 0x24126ea1u);
}

/* pd2bw's key/counter layout (philox.h): key = seed, counter = (e/4, mb, op). */
static void test_stream_layout(void) {
  uint64_t seed = 0x0123456789abcdefull;
  PhiloxCtr want = philox4x32_10((PhiloxCtr){{5, 0, 9, 3}}, (PhiloxKey){{0x89abcdefu, 0x01234567u}});
  PhiloxCtr got = pk_rng_block(seed, 3, 9, 5);
  for (int j = 0; j < 4; j++) {
    EXPECT_EQ_INT(got.v[j], want.v[j]);
    EXPECT_EQ_INT(pk_rng_u32(seed, 3, 9, 20 + (uint64_t)j), want.v[j]);
  }
  /* the high half of the element block index reaches counter word 1 */
  PhiloxCtr hi = pk_rng_block(seed, 3, 9, (uint64_t)1 << 32);
  PhiloxCtr hw = philox4x32_10((PhiloxCtr){{0, 1, 9, 3}}, (PhiloxKey){{0x89abcdefu, 0x01234567u}});
  EXPECT_EQ_INT(hi.v[2], hw.v[2]);
}

static void test_threshold(void) {
  EXPECT(pk_rng_threshold(0) == 0);
  EXPECT(pk_rng_threshold(-1) == 0);
  EXPECT(pk_rng_threshold(0.5) == 0x80000000ull);
  EXPECT(pk_rng_threshold(0.25) == 0x40000000ull);
  EXPECT(pk_rng_threshold(1) == 0x100000000ull);
}

static void check_fraction(double p) {
  enum { N = 100000 };
  float *x = malloc(N * sizeof(float)), *y = malloc(N * sizeof(float));
  for (int i = 0; i < N; i++) x[i] = 1.0f + (float)(i % 5);
  PkRng r = {20260530, 11, 4};
  pk_dropout_fwd_f32(y, x, N, p, r);
  int dropped = 0, badscale = 0;
  float keep = (float)(1.0 / (1.0 - p));
  for (int i = 0; i < N; i++) {
    if (y[i] == 0)
      dropped++;
    else if (y[i] != x[i] * keep)
      badscale++;
  }
  double frac = (double)dropped / N, sd = sqrt(p * (1 - p) / N);
  if (!(fabs(frac - p) <= 5 * sd)) fprintf(stderr, "p = %g: dropped %g\n", p, frac);
  EXPECT(fabs(frac - p) <= 5 * sd);
  EXPECT_EQ_INT(badscale, 0);
  /* the backward replays exactly the forward's mask */
  float *dx = malloc(N * sizeof(float));
  pk_dropout_bwd_f32(dx, x, N, p, r);
  for (int i = 0; i < N; i++) EXPECT((dx[i] == 0) == (y[i] == 0));
  /* an odd-length tail (n not a multiple of 4) uses the same draws as the full run */
  pk_dropout_fwd_f32(dx, x, 1001, p, r);
  for (int i = 0; i < 1001; i++) EXPECT(dx[i] == y[i]);
  free(x), free(y), free(dx);
}
static void test_dropout_fraction(void) {
  check_fraction(0.1);
  check_fraction(0.5);
  check_fraction(0.9);
}

static void test_dropout_edges(void) {
  float x[6] = {1, 2, 3, 4, 5, 6}, y[6];
  PkRng r = {1, 2, 3};
  pk_dropout_fwd_f32(y, x, 6, 0, r);
  for (int i = 0; i < 6; i++) EXPECT(y[i] == x[i]);
  pk_dropout_fwd_f32(y, x, 6, 1, r);
  for (int i = 0; i < 6; i++) EXPECT(y[i] == 0);
}

int main(void) {
  RUN(test_known_answers);
  RUN(test_stream_layout);
  RUN(test_threshold);
  RUN(test_dropout_fraction);
  RUN(test_dropout_edges);
  return TEST_REPORT();
}
