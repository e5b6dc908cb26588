/* tests/codegen/gpt_dropout.h — the tiny GPT of tests/ir/build_models.h with the
 * paper's dropouts (after the embeddings, on both residual branches, on the attention
 * probabilities), so the generated program's RNG paths are exercised. */
#ifndef PD2BW_TEST_GPT_DROPOUT_H
#define PD2BW_TEST_GPT_DROPOUT_H

#include "build_models.h"

static Graph *build_gpt_dropout(Arena *a, Diag *d, int V, int T, int C, int H, int L, double p) {
  Graph *g = graph_create(a, "gptdrop");
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
  x = op1(g, d, OP_DROPOUT, x, -1, -1, dp, rp, "x");
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
    h = op1(g, d, OP_DROPOUT, h, -1, -1, dp, r, "a");
    x = op1(g, d, OP_ADD, x, h, -1, NULL, r, "x");
    h = op1(g, d, OP_LAYERNORM, x, ln2w, ln2b, eps, r, "h");
    h = op1(g, d, OP_LINEAR, h, fw, fb, NULL, r, "m");
    h = op1(g, d, OP_GELU, h, -1, -1, NULL, r, "m");
    h = op1(g, d, OP_LINEAR, h, qw, qb, NULL, r, "m");
    h = op1(g, d, OP_DROPOUT, h, -1, -1, dp, r, "m");
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

#endif
