/* tests/test.h — the tiny harness every unit-test binary uses.
 *
 * A test file defines functions `static void test_xxx(void)` and lists them in
 * main() with RUN(test_xxx). EXPECT* record a failure with file and line and go on;
 * the binary ends with the line "N passed, N failed" (CTest and CI read it) and
 * exits non-zero when anything failed.
 */
#ifndef PD2BW_TEST_H
#define PD2BW_TEST_H

#include <math.h>
#include <stdio.h>
#include <string.h>

static int test_failed_checks_;
static int test_passed_, test_failed_;

#define EXPECT(cond)                                                         \
  do {                                                                       \
    if (!(cond)) {                                                           \
      fprintf(stderr, "%s:%d: expected %s\n", __FILE__, __LINE__, #cond);    \
      test_failed_checks_++;                                                 \
    }                                                                        \
  } while (0)

#define EXPECT_EQ_INT(a, b)                                                  \
  do {                                                                       \
    long long a_ = (long long)(a), b_ = (long long)(b);                      \
    if (a_ != b_) {                                                          \
      fprintf(stderr, "%s:%d: %s == %lld, expected %s == %lld\n", __FILE__,  \
              __LINE__, #a, a_, #b, b_);                                     \
      test_failed_checks_++;                                                 \
    }                                                                        \
  } while (0)

#define EXPECT_STREQ(a, b)                                                   \
  do {                                                                       \
    const char *a_ = (a), *b_ = (b);                                         \
    if (!a_ || !b_ || strcmp(a_, b_) != 0) {                                 \
      fprintf(stderr, "%s:%d: %s is \"%s\", expected \"%s\"\n", __FILE__,    \
              __LINE__, #a, a_ ? a_ : "(null)", b_ ? b_ : "(null)");         \
      test_failed_checks_++;                                                 \
    }                                                                        \
  } while (0)

/* |a - b| <= rtol * max(|a|, |b|) + atol */
#define EXPECT_NEAR(a, b, rtol, atol)                                        \
  do {                                                                       \
    double a_ = (double)(a), b_ = (double)(b);                               \
    double m_ = fabs(a_) > fabs(b_) ? fabs(a_) : fabs(b_);                   \
    if (!(fabs(a_ - b_) <= (rtol) * m_ + (atol))) {                          \
      fprintf(stderr, "%s:%d: %s = %.9g, %s = %.9g differ beyond rtol %g atol %g\n", \
              __FILE__, __LINE__, #a, a_, #b, b_, (double)(rtol), (double)(atol)); \
      test_failed_checks_++;                                                 \
    }                                                                        \
  } while (0)

#define RUN(fn)                                                              \
  do {                                                                       \
    int before_ = test_failed_checks_;                                       \
    fn();                                                                    \
    if (test_failed_checks_ == before_) {                                    \
      test_passed_++;                                                        \
    } else {                                                                 \
      test_failed_++;                                                        \
      fprintf(stderr, "FAIL %s\n", #fn);                                     \
    }                                                                        \
  } while (0)

#define TEST_REPORT()                                                        \
  (printf("%d passed, %d failed\n", test_passed_, test_failed_), test_failed_ ? 1 : 0)

#endif
