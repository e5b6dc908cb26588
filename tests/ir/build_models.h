/* tests/ir/build_models.h — small graphs built through the IR API directly, so IR
 * and pass tests do not depend on the front end. */
#ifndef PD2BW_TEST_BUILD_MODELS_H
#define PD2BW_TEST_BUILD_MODELS_H
#include "ir/ir.h"

static Shape tshape(int rank, bool batched, int64_t d0, int64_t d1, int64_t d2) {
  Shape s = {.rank = rank, .batched = batched, .dim = {d0, d1, d2}};
  return s;
}

static int op1(Graph *g, Diag *d, OpKind k, int a, int b, int c, const double *attr, int region,
               const char *name) {
  int in[3] = {a, b, c};
  int n = c >= 0 ? 3 : b >= 0 ? 2 : 1;
  int id = graph_add_op(g, d, k, in, n, attr, region, name, (Loc){0});
  return id < 0 ? -1 : g->ops[id].out[0];
}

/* x[B,in] -> linear+relu -> linear -> cross_entropy over `classes` */
static Graph *build_mlp(Arena *a, Diag *d, int in, int hidden, int classes) {
  Graph *g = graph_create(a, "mlp");
  int r0 = graph_add_region(g, RG_PROLOGUE, 0, "prologue");
  int r1 = graph_add_region(g, RG_BLOCK, 0, "h.0");
  int r2 = graph_add_region(g, RG_EPILOGUE, 0, "epilogue");
  Loc nl = {0};
  int x = graph_add_input(g, "x", DT_F32, tshape(2, true, 1, in, 0), nl);
  int y = graph_add_input(g, "targets", DT_I32, tshape(1, true, 1, 0, 0), nl);
  int w1 = graph_add_param(g, "h.0.w", tshape(2, false, in, hidden, 0), INIT_NORMAL, 0.1, r1, nl);
  int b1 = graph_add_param(g, "h.0.b", tshape(1, false, hidden, 0, 0), INIT_ZEROS, 0, r1, nl);
  int w2 = graph_add_param(g, "head_w", tshape(2, false, hidden, classes, 0), INIT_NORMAL, 0.1, r2, nl);
  (void)r0;
  int h = op1(g, d, OP_LINEAR, x, w1, b1, NULL, r1, "h");
  h = op1(g, d, OP_RELU, h, -1, -1, NULL, r1, "h");
  int logits = op1(g, d, OP_LINEAR, h, w2, -1, NULL, r2, "logits");
  g->loss = op1(g, d, OP_CROSS_ENTROPY, logits, y, -1, NULL, r2, "loss");
  graph_finalize(g);
  return g;
}

/* A tiny GPT with tied embeddings: `L` blocks of attention + MLP, as gpt.model.
 * With p > 0 it has the paper's dropouts too (after the embeddings, on both
 * residual branches, on the attention probabilities), so the generated program's RNG
 * paths are exercised; with p = 0 there are no dropout ops at all. */
static Graph *build_gpt(Arena *a, Diag *d, const char *name, int V, int T, int C, int H, int L,
                        double p) {
  Graph *g = graph_create(a, name);
  Loc nl = {0};
  int rp = graph_add_region(g, RG_PROLOGUE, 0, "prologue");
  int tok = graph_add_input(g, "tokens", DT_I32, tshape(2, true, 1, T, 0), nl);
  int tgt = graph_add_input(g, "targets", DT_I32, tshape(2, true, 1, T, 0), nl);
  int wte = graph_add_param(g, "wte", tshape(2, false, V, C, 0), INIT_NORMAL, 0.02, rp, nl);
  int wpe = graph_add_param(g, "wpe", tshape(2, false, T, C, 0), INIT_NORMAL, 0.01, rp, nl);
  double dp[] = {p};
  int e = op1(g, d, OP_EMBEDDING, wte, tok, -1, NULL, rp, "x");
  int q = op1(g, d, OP_POSITIONS, wpe, tok, -1, NULL, rp, "x");
  int x = op1(g, d, OP_ADD, e, q, -1, NULL, rp, "x");
  if (p > 0) x = op1(g, d, OP_DROPOUT, x, -1, -1, dp, rp, "x");
  for (int l = 0; l < L; l++) {
    char nm[64];
    snprintf(nm, sizeof nm, "h.%d", l);
    int r = graph_add_region(g, RG_BLOCK, l, nm);
#define W(name, ...) (snprintf(nm, sizeof nm, "h.%d." name, l), graph_add_param(g, nm, __VA_ARGS__, r, nl))
    int ln1w = W("ln1_w", tshape(1, false, C, 0, 0), INIT_ONES, 0);
    int ln1b = W("ln1_b", tshape(1, false, C, 0, 0), INIT_ZEROS, 0);
    int aw = W("attn_w", tshape(2, false, C, 3 * C, 0), INIT_NORMAL, 0.02);
    int ab = W("attn_b", tshape(1, false, 3 * C, 0, 0), INIT_ZEROS, 0);
    int pw = W("attnproj_w", tshape(2, false, C, C, 0), INIT_NORMAL, 0.02);
    int pb = W("attnproj_b", tshape(1, false, C, 0, 0), INIT_ZEROS, 0);
    int ln2w = W("ln2_w", tshape(1, false, C, 0, 0), INIT_ONES, 0);
    int ln2b = W("ln2_b", tshape(1, false, C, 0, 0), INIT_ZEROS, 0);
    int fw = W("fc_w", tshape(2, false, C, 4 * C, 0), INIT_NORMAL, 0.02);
    int fb = W("fc_b", tshape(1, false, 4 * C, 0, 0), INIT_ZEROS, 0);
    int qw = W("fcproj_w", tshape(2, false, 4 * C, C, 0), INIT_NORMAL, 0.02);
    int qb = W("fcproj_b", tshape(1, false, C, 0, 0), INIT_ZEROS, 0);
#undef W
    double eps[] = {1e-5}, att[] = {H, 1, p};
    int h = op1(g, d, OP_LAYERNORM, x, ln1w, ln1b, eps, r, "h");
    h = op1(g, d, OP_LINEAR, h, aw, ab, NULL, r, "qkv");
    h = op1(g, d, OP_ATTENTION, h, -1, -1, att, r, "a");
    h = op1(g, d, OP_LINEAR, h, pw, pb, NULL, r, "a");
    if (p > 0) h = op1(g, d, OP_DROPOUT, h, -1, -1, dp, r, "a");
    x = op1(g, d, OP_ADD, x, h, -1, NULL, r, "x");
    h = op1(g, d, OP_LAYERNORM, x, ln2w, ln2b, eps, r, "h");
    h = op1(g, d, OP_LINEAR, h, fw, fb, NULL, r, "m");
    h = op1(g, d, OP_GELU, h, -1, -1, NULL, r, "m");
    h = op1(g, d, OP_LINEAR, h, qw, qb, NULL, r, "m");
    if (p > 0) h = op1(g, d, OP_DROPOUT, h, -1, -1, dp, r, "m");
    x = op1(g, d, OP_ADD, x, h, -1, NULL, r, "x");
  }
  int re = graph_add_region(g, RG_EPILOGUE, 0, "epilogue");
  int lw = graph_add_param(g, "lnf_w", tshape(1, false, C, 0, 0), INIT_ONES, 0, re, nl);
  int lb = graph_add_param(g, "lnf_b", tshape(1, false, C, 0, 0), INIT_ZEROS, 0, re, nl);
  double eps[] = {1e-5}, tb[] = {1};
  x = op1(g, d, OP_LAYERNORM, x, lw, lb, eps, re, "x");
  int logits = op1(g, d, OP_MATMUL, x, wte, -1, tb, re, "logits");
  g->loss = op1(g, d, OP_CROSS_ENTROPY, logits, tgt, -1, NULL, re, "loss");
  g->nblocks = L;
  g->block_name = "h";
  graph_finalize(g);
  return g;
}

/* The tiny GPT without dropout. */
static Graph *build_tiny_gpt(Arena *a, Diag *d, int V, int T, int C, int H, int L) {
  return build_gpt(a, d, "tinygpt", V, T, C, H, L, 0);
}
#endif
