/* Generated stage programs: whole-model gradients against central differences
 * (float64 program), float32 against float64, fused against unfused, gradient
 * accumulation, dropout on/off, and the layout's invariants. */
#include "frontend/frontend.h"
#include "gpt_dropout.h"
#include "stage_harness.h"
#include "test.h"

static Graph *diffed(Graph *g, Diag *d) {
  EXPECT(g != NULL);
  EXPECT(pass_autodiff(g, d));
  EXPECT(ir_verify(g, stderr));
  return g;
}

static void zero_grads(Harness *h) { memset(h->block[BUF_GRADS], 0, (size_t)(h->L->total[BUF_GRADS] * h->rs)); }

/* Central differences on up to `per` elements of every parameter, through the
 * float64 program. Bound: |fd - analytic| <= rtol·max(|fd|, |an|) + atol. */
static void gradcheck(Harness *h, int per, double rtol, double atol) {
  const Graph *g = h->g;
  zero_grads(h);
  harness_fwd_bwd(h, 7);
  int checked = 0, bad = 0;
  double worst = 0;
  for (int p = 0; p < g->nparams; p++) {
    int w = g->params[p].tensor, gw = g->tensors[w].grad;
    EXPECT(gw >= 0);
    if (gw < 0) continue;
    int64_t n = shape_numel(&g->tensors[w].shape, 1);
    for (int k = 0; k < per && k < n; k++) {
      int64_t i = (int64_t)((hrand() + 1) / 2 * (double)n) % n;
      double x0 = hget(h, w, i), eps = 1e-5;
      hset(h, w, i, x0 + eps);
      double lp = harness_forward(h, true, 7);
      hset(h, w, i, x0 - eps);
      double lm = harness_forward(h, true, 7);
      hset(h, w, i, x0);
      double fd = (lp - lm) / (2 * eps), an = hget(h, gw, i);
      double err = fabs(fd - an), tol = rtol * fmax(fabs(fd), fabs(an)) + atol;
      if (err / (fmax(fabs(fd), fabs(an)) + 1e-12) > worst && fabs(fd) > atol) worst = err / fmax(fabs(fd), fabs(an));
      checked++;
      if (err > tol) {
        bad++;
        if (bad < 5)
          fprintf(stderr, "  %s[%lld]: finite difference %.10g, generated backward %.10g\n",
                  g->tensors[w].name, (long long)i, fd, an);
      }
    }
  }
  printf("  gradcheck %s: %d elements, worst relative error %.2e\n", g->name, checked, worst);
  EXPECT(checked > 0);
  EXPECT_EQ_INT(bad, 0);
}

static void test_mlp_gradcheck_f64(void) {
  Arena *a = arena_create();
  Diag d;
  diag_init(&d, stderr);
  Graph *g = diffed(build_mlp(a, &d, 6, 10, 5), &d);
  Harness h;
  EXPECT(harness_build(&h, g, 3, true, true));
  if (h.prog.forward) {
    harness_randomize(&h, 0.5, 5);
    gradcheck(&h, 12, 1e-6, 1e-9);
  }
  harness_free(&h);
  graph_destroy(g);
  arena_destroy(a);
}

/* 2 layers, tied embeddings, dropout 0.1 everywhere (the masks are fixed by the
 * microbatch index, so the loss is a smooth function of the weights). */
static void test_gpt_gradcheck_f64(void) {
  Arena *a = arena_create();
  Diag d;
  diag_init(&d, stderr);
  Graph *g = diffed(build_gpt_dropout(a, &d, 17, 6, 8, 2, 2, 0.1), &d);
  Harness h;
  EXPECT(harness_build(&h, g, 2, true, true));
  if (h.prog.forward) {
    harness_randomize(&h, 0.3, 17);
    gradcheck(&h, 8, 1e-5, 1e-8);
  }
  harness_free(&h);
  graph_destroy(g);
  arena_destroy(a);
}

/* Weights declared once outside `repeat` and used by every copy (docs/language.md
 * §3.7: a tie) in every op that has a weight gradient: a layernorm gain tied with
 * its bias per copy, a bias tied with its gain per copy, both tied, a linear weight
 * and bias tied, a matmul weight, the embeddings used by every copy and tied to the
 * head. Each use's backward produces a contribution that must be summed into the
 * one gradient, never written over it (issue 12 item 4: a tied gain aborted code
 * generation). Checked against central differences through the float64 program. The
 * last layernorm uses one weight as both gain and bias: its two gradients go to the
 * same sum. */
static const char tied_model[] =
    "model tied {\n"
    "  param V = 11; param T = 4; param C = 8; param L = 3;\n"
    "  input tokens : i32[B, T];\n"
    "  input targets : i32[B, T];\n"
    "  weight wte : f32[V, C] = normal(0.3);\n"
    "  weight wpe : f32[T, C] = normal(0.3);\n"
    "  weight gain : f32[C] = ones;\n"
    "  weight bias : f32[C] = zeros;\n"
    "  weight fc_w : f32[C, C] = normal(0.3);\n"
    "  weight fc_b : f32[C] = zeros;\n"
    "  weight mm_w : f32[C, C] = normal(0.1);\n"
    "  x = add(embedding(wte, tokens), positions(wpe, tokens));\n"
    "  repeat h[L] {\n"
    "    weight b1 : f32[C] = zeros;\n"
    "    weight g2 : f32[C] = ones;\n"
    "    weight qkv_w : f32[C, 3*C] = normal(0.3);\n"
    "    y = layernorm(x, gain, b1);\n"
    "    x = add(x, attention(linear(y, qkv_w), heads = 2));\n"
    "    y = layernorm(x, g2, bias);\n"
    "    y = layernorm(y, gain, bias);\n"
    "    x = add(x, gelu(linear(y, fc_w, fc_b)));\n"
    "    x = add(x, add(embedding(wte, tokens), positions(wpe, tokens)));\n"
    "    x = add(x, matmul(x, mm_w));\n"
    "  }\n"
    "  x = layernorm(x, gain, bias);\n"
    "  x = layernorm(x, fc_b, fc_b);\n"
    "  loss = cross_entropy(matmul(x, wte, transpose_b = 1), targets);\n"
    "  minimize loss;\n"
    "}\n";

static void test_tied_params_gradcheck_f64(void) {
  Arena *a = arena_create();
  Diag d;
  diag_init(&d, stderr);
  Graph *g = diffed(frontend_load_model_buffer(a, &d, "tied.model", tied_model, sizeof tied_model - 1, NULL, 0), &d);
  Harness h;
  EXPECT(harness_build(&h, g, 2, true, true));
  if (h.prog.forward) {
    harness_randomize(&h, 0.3, 11);
    gradcheck(&h, 8, 1e-5, 1e-8);
  }
  harness_free(&h);
  graph_destroy(g);
  arena_destroy(a);
}

/* The same weights through the float32 and float64 programs. */
static void test_f32_matches_f64(void) {
  Arena *a = arena_create();
  Diag d;
  diag_init(&d, stderr);
  Graph *g = diffed(build_gpt_dropout(a, &d, 33, 8, 16, 2, 2, 0.1), &d);
  Harness h32, h64;
  EXPECT(harness_build(&h64, g, 2, true, true));
  EXPECT(harness_build(&h32, g, 2, false, true));
  if (h32.prog.forward && h64.prog.forward) {
    harness_randomize(&h64, 0.3, 33);
    for (int t = 0; t < g->ntensors; t++) {
      BufClass c = h64.L->place[t].cls;
      if (c != BUF_PARAMS && c != BUF_INPUTS) continue;
      int64_t n = shape_numel(&g->tensors[t].shape, 2);
      if (g->tensors[t].dtype == DT_I32)
        memcpy(harness_tensor(&h32, t), harness_tensor(&h64, t), (size_t)n * 4);
      else
        for (int64_t i = 0; i < n; i++) hset(&h32, t, i, hget(&h64, t, i));
    }
    zero_grads(&h32);
    zero_grads(&h64);
    double l32 = harness_fwd_bwd(&h32, 3), l64 = harness_fwd_bwd(&h64, 3);
    EXPECT_NEAR(l32, l64, 1e-5, 0);
    for (int p = 0; p < g->nparams; p++) {
      int gw = g->tensors[g->params[p].tensor].grad;
      int64_t n = shape_numel(&g->tensors[gw].shape, 2);
      double mx = 0, diff = 0;
      for (int64_t i = 0; i < n; i++) {
        mx = fmax(mx, fabs(hget(&h64, gw, i)));
        diff = fmax(diff, fabs(hget(&h64, gw, i) - hget(&h32, gw, i)));
      }
      if (!(diff <= 1e-3 * mx + 1e-7)) fprintf(stderr, "  %s: max |f32 - f64| %.3g of max %.3g\n", g->tensors[gw].name, diff, mx);
      EXPECT(diff <= 1e-3 * mx + 1e-7);
    }
  }
  harness_free(&h32);
  harness_free(&h64);
  graph_destroy(g);
  arena_destroy(a);
}

/* Fusion changes the loops, not the arithmetic: identical results in float64. */
static void test_fused_matches_unfused(void) {
  Arena *a = arena_create();
  Diag d;
  diag_init(&d, stderr);
  Graph *g = diffed(build_gpt_dropout(a, &d, 17, 6, 8, 2, 1, 0.2), &d);
  Harness hf, hu;
  EXPECT(harness_build(&hf, g, 2, true, true));
  EXPECT(harness_build(&hu, g, 2, true, false));
  if (hf.prog.forward && hu.prog.forward) {
    hrng_state = 42;
    harness_randomize(&hf, 0.3, 17);
    hrng_state = 42;
    harness_randomize(&hu, 0.3, 17);
    zero_grads(&hf);
    zero_grads(&hu);
    double lf = harness_fwd_bwd(&hf, 5), lu = harness_fwd_bwd(&hu, 5);
    EXPECT_NEAR(lf, lu, 1e-12, 0);
    for (int p = 0; p < g->nparams; p++) {
      int gw = g->tensors[g->params[p].tensor].grad;
      int64_t n = shape_numel(&g->tensors[gw].shape, 2);
      for (int64_t i = 0; i < n; i++) EXPECT_NEAR(hget(&hf, gw, i), hget(&hu, gw, i), 1e-10, 1e-14);
    }
    /* and the fused source really has a fused loop */
    char *src = codegen_c_source(g, hf.L, 0, &(CodegenOptions){.f64 = true, .fuse = true});
    EXPECT(strstr(src, "/* fused:") != NULL);
    free(src);
  }
  harness_free(&hf);
  harness_free(&hu);
  graph_destroy(g);
  arena_destroy(a);
}

/* backward adds into the gradient block: two passes give twice the gradient. */
static void test_backward_accumulates(void) {
  Arena *a = arena_create();
  Diag d;
  diag_init(&d, stderr);
  Graph *g = diffed(build_tiny_gpt(a, &d, 17, 6, 8, 2, 1), &d);
  Harness h;
  EXPECT(harness_build(&h, g, 2, true, true));
  if (h.prog.forward) {
    harness_randomize(&h, 0.3, 17);
    zero_grads(&h);
    harness_fwd_bwd(&h, 0);
    int64_t n = h.L->total[BUF_GRADS] * 2 / 8;
    double *once = malloc((size_t)n * 8);
    memcpy(once, h.block[BUF_GRADS], (size_t)n * 8);
    harness_fwd_bwd(&h, 1);
    const double *twice = (const double *)(void *)h.block[BUF_GRADS];
    int bad = 0;
    for (int64_t i = 0; i < n; i++) bad += fabs(twice[i] - 2 * once[i]) > 1e-12 * (1 + fabs(once[i]));
    EXPECT_EQ_INT(bad, 0);
    free(once);
  }
  harness_free(&h);
  graph_destroy(g);
  arena_destroy(a);
}

/* Dropout draws a different mask per microbatch in training and none in evaluation. */
static void test_training_flag(void) {
  Arena *a = arena_create();
  Diag d;
  diag_init(&d, stderr);
  Graph *g = diffed(build_gpt_dropout(a, &d, 17, 6, 8, 2, 1, 0.3), &d);
  Harness h;
  EXPECT(harness_build(&h, g, 2, false, true));
  if (h.prog.forward) {
    harness_randomize(&h, 0.3, 17);
    double e0 = harness_forward(&h, false, 0), e1 = harness_forward(&h, false, 9);
    double t0 = harness_forward(&h, true, 0), t0b = harness_forward(&h, true, 0), t1 = harness_forward(&h, true, 9);
    EXPECT(e0 == e1);
    EXPECT(t0 == t0b);
    EXPECT(t0 != t1);
    EXPECT(t0 != e0);
  }
  harness_free(&h);
  graph_destroy(g);
  arena_destroy(a);
}

/* Layout invariants: grads share params' offsets; the tied embedding's two
 * gradient contributions are accumulated straight into its gradient; WORK values
 * live at the same time never overlap (checked by replaying op order). */
static void test_layout_invariants(void) {
  Arena *a = arena_create();
  Diag d;
  diag_init(&d, stderr);
  Graph *g = diffed(build_tiny_gpt(a, &d, 50, 8, 16, 2, 2), &d);
  StageLayout *L = layout_stage(g, 0, g->nregions - 1, 4);
  for (int p = 0; p < g->nparams; p++) {
    int w = g->params[p].tensor, gw = g->tensors[w].grad;
    EXPECT(L->place[w].cls == BUF_PARAMS);
    EXPECT(L->place[gw].cls == BUF_GRADS);
    EXPECT_EQ_INT(L->place[gw].offset, L->place[w].offset);
    EXPECT(L->place[w].offset % LAYOUT_ALIGN == 0);
  }
  int wte = g->params[0].tensor;
  const Op *sum = &g->ops[g->tensors[g->tensors[wte].grad].producer];
  EXPECT(sum->kind == OP_ADD);
  for (int i = 0; i < 2; i++) {
    EXPECT(L->place[sum->in[i]].cls == BUF_GRADS);
    EXPECT(L->place[sum->in[i]].accumulate);
  }
  EXPECT(L->place[0].cls == BUF_INPUTS);
  /* overlap check: live ranges by op order */
  int n = L->nfwd + L->nbwd;
  int *ord = malloc((size_t)n * sizeof(int));
  memcpy(ord, L->fwd_ops, (size_t)L->nfwd * sizeof(int));
  memcpy(ord + L->nfwd, L->bwd_ops, (size_t)L->nbwd * sizeof(int));
  int *def = malloc((size_t)g->ntensors * sizeof(int)), *end = malloc((size_t)g->ntensors * sizeof(int));
  for (int t = 0; t < g->ntensors; t++) def[t] = end[t] = -1;
  for (int k = 0; k < n; k++) {
    const Op *op = &g->ops[ord[k]];
    for (int i = 0; i < op->nout; i++) def[op->out[i]] = end[op->out[i]] = k;
    for (int i = 0; i < op->nin; i++) end[op->in[i]] = k;
  }
  int clashes = 0;
  int64_t sum_work = 0;
  for (int t = 0; t < g->ntensors; t++) {
    const TensorPlace *p = &L->place[t];
    if (p->cls != BUF_WORK || def[t] < 0) continue;
    if (p->alias < 0) sum_work += p->bytes;
    EXPECT(p->offset + p->bytes <= L->total[BUF_WORK]);
    for (int u = t + 1; u < g->ntensors; u++) {
      const TensorPlace *q = &L->place[u];
      if (q->cls != BUF_WORK || def[u] < 0 || p->alias == u || q->alias == t) continue;
      bool live = def[t] <= end[u] && def[u] <= end[t];
      bool over = p->offset < q->offset + q->bytes && q->offset < p->offset + p->bytes;
      if (live && over) {
        clashes++;
        fprintf(stderr, "  t%d %s and t%d %s overlap while both live\n", t, g->tensors[t].name, u, g->tensors[u].name);
      }
    }
  }
  EXPECT_EQ_INT(clashes, 0);
  EXPECT(L->total[BUF_WORK] < sum_work); /* reuse happened */
  EXPECT(L->total[BUF_STASH] > 0);
  free(ord);
  free(def);
  free(end);
  layout_destroy(L);
  graph_destroy(g);
  arena_destroy(a);
}

/* Copies every tensor placed in both programs from `from` to `to` when `from`
 * produced it (an activation or gradient crossing the cut). */
static void transfer(Harness *from, Harness *to, bool backward) {
  const Graph *g = from->g;
  for (int t = 0; t < g->ntensors; t++) {
    const TensorPlace *a = &from->L->place[t], *b = &to->L->place[t];
    if (a->cls == BUF_NONE || b->cls == BUF_NONE || a->cls == BUF_PARAMS || a->cls == BUF_INPUTS) continue;
    int p = g->tensors[t].producer;
    if (p < 0 || !layout_has_op(from->L, p) || (p >= g->nfwd_ops) != backward) continue;
    memcpy(harness_tensor(to, t), harness_tensor(from, t), (size_t)(a->bytes * from->rs));
  }
}

/* A two-stage split (prologue + h.0 | h.1 + epilogue) run by hand — stage 0
 * forward, send, stage 1 forward and backward, send back, stage 0 backward — gives
 * the one-stage program's loss and gradients: the layout's boundary and stash
 * classes are right, and the tied embedding's gradient is complete once stage 1's
 * contribution reaches stage 0. */
static void test_two_stage_split_matches(void) {
  Arena *a = arena_create();
  Diag d;
  diag_init(&d, stderr);
  Graph *g = diffed(build_gpt_dropout(a, &d, 17, 6, 8, 2, 2, 0.1), &d);
  Harness one, s0, s1;
  EXPECT(harness_build(&one, g, 2, true, true));
  EXPECT(harness_build_range(&s0, g, 0, 1, 2, true, true));
  EXPECT(harness_build_range(&s1, g, 2, 3, 2, true, true));
  if (one.prog.forward && s0.prog.forward && s1.prog.forward) {
    EXPECT(s0.L->total[BUF_BOUNDARY] > 0 && s1.L->total[BUF_BOUNDARY] > 0);
    EXPECT(s1.L->loss >= 0 && s0.L->loss < 0);
    harness_randomize(&one, 0.3, 17);
    Harness *st[2] = {&s0, &s1};
    for (int t = 0; t < g->ntensors; t++) {
      BufClass c = one.L->place[t].cls;
      if (c != BUF_PARAMS && c != BUF_INPUTS) continue;
      for (int k = 0; k < 2; k++)
        if (st[k]->L->place[t].cls == c)
          memcpy(harness_tensor(st[k], t), harness_tensor(&one, t), (size_t)(one.L->place[t].bytes * 2));
    }
    zero_grads(&one);
    zero_grads(&s0);
    zero_grads(&s1);
    double want = harness_fwd_bwd(&one, 4);
    double l0 = harness_forward(&s0, true, 4);
    transfer(&s0, &s1, false);
    double got = harness_forward(&s1, true, 4);
    StageCtx c1 = harness_ctx(&s1, true, 4, NULL);
    s1.prog.backward(&c1);
    transfer(&s1, &s0, true);
    StageCtx c0 = harness_ctx(&s0, true, 4, NULL);
    s0.prog.backward(&c0);
    EXPECT(isnan(l0));
    EXPECT_NEAR(got, want, 1e-12, 0);
    int checked = 0;
    for (int p = 0; p < g->nparams; p++) {
      int w = g->params[p].tensor, gw = g->tensors[w].grad;
      int64_t n = shape_numel(&g->tensors[gw].shape, 2);
      Harness *hs = s0.L->place[gw].cls == BUF_GRADS ? &s0 : &s1;
      EXPECT(hs->L->place[gw].cls == BUF_GRADS);
      for (int64_t i = 0; i < n; i++, checked++) EXPECT_NEAR(hget(hs, gw, i), hget(&one, gw, i), 1e-10, 1e-14);
    }
    EXPECT(checked > 100);
  }
  harness_free(&one);
  harness_free(&s0);
  harness_free(&s1);
  graph_destroy(g);
  arena_destroy(a);
}

int main(void) {
  RUN(test_layout_invariants);
  RUN(test_mlp_gradcheck_f64);
  RUN(test_gpt_gradcheck_f64);
  RUN(test_tied_params_gradcheck_f64);
  RUN(test_f32_matches_f64);
  RUN(test_fused_matches_unfused);
  RUN(test_backward_accumulates);
  RUN(test_training_flag);
  RUN(test_two_stage_split_matches);
  return TEST_REPORT();
}
