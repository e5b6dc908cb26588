/* pk_rope_fwd_f32 against Hugging Face's rotary position embedding for Llama
 * (tests/kernels/rope_hf_fixture.h, written offline by tests/kernels/rope_hf.py with
 * numpy in float32 step for step as transformers' LlamaRotaryEmbedding and
 * apply_rotary_pos_emb compute it): Llama 2's theta, Llama 3's, and a head of 80
 * pairs. Bound, per element of a pair (u, v) = (x_i, x_{i+D/2}): 4·2⁻²⁴·(|u| + |v|),
 * a few float32 roundings of the pair's scale (cos and sin are each within about an
 * ulp of exact in glibc and in numpy, and the products and sum round once each; a
 * C compiler may contract one product into an FMA). The inverse rotation,
 * pk_rope_bwd_f32, must bring the fixture's y back to x within the same bound. */
#include "kcheck.h"
#include "rope_hf_fixture.h"

static float x_of(int64_t k) { return (float)((k * 7919) % 251 - 125) / 64.0f; }

static void check_case(const RopeHfCase *hc) {
  int C = hc->H * hc->D, half = hc->D / 2;
  int64_t rows = (int64_t)hc->B * hc->T, n = rows * C;
  float *x = malloc((size_t)n * sizeof *x), *y = malloc((size_t)n * sizeof *y), *back = malloc((size_t)n * sizeof *y);
  for (int64_t k = 0; k < n; k++) x[k] = x_of(k);
  pk_rope_fwd_f32(y, x, rows, hc->T, C, (float)hc->H, (float)hc->theta);
  pk_rope_bwd_f32(back, hc->y, rows, hc->T, C, (float)hc->H, (float)hc->theta);
  int64_t bad = 0, exact = 0;
  double worst = 0;
  for (int64_t k = 0; k < n; k++) {
    int64_t i = k % hc->D, pair = i < half ? k + half : k - half;
    double scale = fabs(x[k]) + fabs(x[pair]), bound = 4 * 0x1p-24 * scale + 1e-30;
    double e = fabs((double)y[k] - (double)hc->y[k]) / bound, eb = fabs((double)back[k] - (double)x[k]) / bound;
    exact += y[k] == hc->y[k];
    if (e > worst) worst = e;
    if (!(e <= 1) || !(eb <= 1)) {
      if (bad++ < 5)
        fprintf(stderr, "  %s [%lld]: C %.9g, Hugging Face %.9g, back %.9g for x %.9g\n", hc->name, (long long)k,
                y[k], hc->y[k], back[k], x[k]);
    }
  }
  printf("  %-7s B=%d T=%d H=%d D=%d theta=%g: %lld of %lld equal, worst %.2f of the bound\n", hc->name, hc->B, hc->T,
         hc->H, hc->D, hc->theta, (long long)exact, (long long)n, worst);
  EXPECT(bad == 0);
  free(x), free(y), free(back);
}

static void test_rope_hf(void) {
  for (size_t c = 0; c < sizeof rope_hf_cases / sizeof rope_hf_cases[0]; c++) check_case(&rope_hf_cases[c]);
}

int main(void) {
  RUN(test_rope_hf);
  return TEST_REPORT();
}
