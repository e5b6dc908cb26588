/* tests/kernels/kcheck.h — shared helpers of the kernel tests: both instantiations
 * of the kernels, deterministic random fills, and the central-difference gradient
 * checker.
 *
 * The gradient checks run the float64 kernels: every op's loss is L = Σ G⊙Y for a
 * fixed random upstream gradient G, so the backward kernel fed with G must return
 * ∂L/∂X, which we compare element by element with (L(x+h) - L(x-h)) / 2h. In double
 * with h = 1e-5 and O(1) values the difference quotient is good to about 1e-10, so
 * the stated bound, |analytic - numeric| <= 1e-6·max(|analytic|, |numeric|) + 1e-8,
 * leaves a wide margin for rounding yet fails on any real mistake (those are O(1)).
 */
#ifndef PD2BW_TESTS_KCHECK_H
#define PD2BW_TESTS_KCHECK_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "kernels/cpu_kernels.h"
#define PK_F64
#include "kernels/cpu_kernels.h"
#include "test.h"

#define KC_H 1e-5
#define KC_RTOL 1e-6
#define KC_ATOL 1e-8

/* xorshift64*: reproducible inputs, independent of libc's rand(). */
static uint64_t kc_state_ = 0x9E3779B97F4A7C15ull;
static __attribute__((unused)) void kc_seed(uint64_t s) { kc_state_ = s ? s : 1; }
static __attribute__((unused)) double kc_uniform(void) { /* in [0, 1) */
  kc_state_ ^= kc_state_ >> 12;
  kc_state_ ^= kc_state_ << 25;
  kc_state_ ^= kc_state_ >> 27;
  return (double)((kc_state_ * 2685821657736338717ull) >> 11) * (1.0 / 9007199254740992.0);
}

/* Fills x with values in ±[lo, hi] with random signs: away from 0 when lo > 0 (relu's
 * kink), never all zeros. */
static __attribute__((unused)) void kc_fill(double *x, int64_t n, double lo, double hi) {
  for (int64_t i = 0; i < n; i++) {
    double v = lo + (hi - lo) * kc_uniform();
    x[i] = kc_uniform() < 0.5 ? -v : v;
  }
}

static __attribute__((unused)) double *kc_alloc(int64_t n) {
  double *p = calloc((size_t)(n > 0 ? n : 1), sizeof(double));
  if (!p) abort();
  return p;
}

static __attribute__((unused)) float *kc_to_f32(const double *x, int64_t n) {
  float *p = calloc((size_t)(n > 0 ? n : 1), sizeof(float));
  if (!p) abort();
  for (int64_t i = 0; i < n; i++) p[i] = (float)x[i];
  return p;
}

static __attribute__((unused)) double kc_dot(const double *a, const double *b, int64_t n) {
  double s = 0;
  for (int64_t i = 0; i < n; i++) s += a[i] * b[i];
  return s;
}

/* The loss of the op under test as a function of its current inputs. */
typedef double (*kc_loss_fn)(void *ctx);

/* Compares analytic[i] with the central difference of loss() in x[i], for all i.
 * Prints the worst element on failure; returns the number of bad elements. */
static __attribute__((unused)) int kc_check_grad_(const char *file, int line, const char *what,
                                                  double *x, int64_t n,
                                                  const double *analytic, kc_loss_fn loss,
                                                  void *ctx) {
  int bad = 0;
  double worst = 0;
  int64_t worst_i = -1;
  double worst_a = 0, worst_n = 0;
  for (int64_t i = 0; i < n; i++) {
    double keep = x[i];
    x[i] = keep + KC_H;
    double lp = loss(ctx);
    x[i] = keep - KC_H;
    double lm = loss(ctx);
    x[i] = keep;
    double num = (lp - lm) / (2 * KC_H);
    double a = analytic[i];
    double m = fabs(a) > fabs(num) ? fabs(a) : fabs(num);
    double err = fabs(a - num);
    if (!(err <= KC_RTOL * m + KC_ATOL)) bad++;
    double rel = err / (KC_RTOL * m + KC_ATOL);
    if (!(rel <= worst)) {
      worst = rel;
      worst_i = i;
      worst_a = a;
      worst_n = num;
    }
  }
  if (bad)
    fprintf(stderr,
            "%s:%d: gradient %s: %d of %lld elements off; worst [%lld] analytic %.10g vs "
            "numeric %.10g\n",
            file, line, what, bad, (long long)n, (long long)worst_i, worst_a, worst_n);
  return bad;
}
#define KC_CHECK_GRAD(what, x, n, analytic, loss, ctx) \
  EXPECT(kc_check_grad_(__FILE__, __LINE__, what, x, n, analytic, loss, ctx) == 0)

/* max_i |a[i] - b[i]| / (max_i |b[i]| + tiny): the float32-vs-float64 yardstick. */
static __attribute__((unused)) double kc_rel_diff_f32(const float *a, const double *b,
                                                      int64_t n) {
  double num = 0, den = 1e-30;
  for (int64_t i = 0; i < n; i++) {
    double d = fabs((double)a[i] - b[i]);
    if (!(d <= num)) num = d;
    if (fabs(b[i]) > den) den = fabs(b[i]);
  }
  return num / den;
}

#endif
