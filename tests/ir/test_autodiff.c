/* Autodiff: structure of the backward graph (numerical checks of whole models
 * against finite differences live with the runtime, which can execute it). */
#include "build_models.h"
#include "passes/passes.h"
#include "test.h"

#include <stdlib.h>

static int count_kind(const Graph *g, OpKind k, int from) {
  int n = 0;
  for (int o = from; o < g->nops; o++) n += g->ops[o].kind == k;
  return n;
}

static void test_mlp_backward(void) {
  Arena *a = arena_create();
  Diag d;
  diag_init(&d, stderr);
  Graph *g = build_mlp(a, &d, 4, 8, 3);
  int nfwd = g->nops;
  EXPECT(pass_autodiff(g, &d));
  EXPECT(ir_verify(g, stderr));
  EXPECT_EQ_INT(g->nfwd_ops, nfwd);
  EXPECT_EQ_INT(count_kind(g, OP_CROSS_ENTROPY_BWD, nfwd), 1);
  EXPECT_EQ_INT(count_kind(g, OP_LINEAR_DW, nfwd), 2);
  EXPECT_EQ_INT(count_kind(g, OP_BIAS_GRAD, nfwd), 1);
  /* no gradient flows to the input x: only one dx matmul (for the hidden layer) */
  EXPECT_EQ_INT(count_kind(g, OP_MATMUL, nfwd), 1);
  for (int p = 0; p < g->nparams; p++) {
    int w = g->params[p].tensor, gw = g->tensors[w].grad;
    EXPECT(gw >= 0);
    if (gw < 0) continue;
    EXPECT(g->tensors[gw].kind == TK_GRAD);
    EXPECT(shape_equal(&g->tensors[gw].shape, &g->tensors[w].shape));
  }
  EXPECT_EQ_INT(g->tensors[0].grad, -1);
  graph_destroy(g);
  arena_destroy(a);
}

static void test_tied_embedding_sums_both_uses(void) {
  Arena *a = arena_create();
  Diag d;
  diag_init(&d, stderr);
  Graph *g = build_tiny_gpt(a, &d, 32, 8, 16, 2, 2);
  int nfwd = g->nops;
  EXPECT(pass_autodiff(g, &d));
  EXPECT(ir_verify(g, stderr));
  int wte = g->params[0].tensor, gw = g->tensors[wte].grad;
  EXPECT(gw >= 0);
  /* d(wte) = embedding_bwd(...) + matmul_dw_t(...): an add of both uses */
  const Op *sum = &g->ops[g->tensors[gw].producer];
  EXPECT(sum->kind == OP_ADD);
  int k0 = g->ops[g->tensors[sum->in[0]].producer].kind, k1 = g->ops[g->tensors[sum->in[1]].producer].kind;
  EXPECT((k0 == OP_MATMUL_DW_T && k1 == OP_EMBEDDING_BWD) || (k1 == OP_MATMUL_DW_T && k0 == OP_EMBEDDING_BWD));
  EXPECT_EQ_INT(count_kind(g, OP_ATTENTION_BWD, nfwd), 2);
  EXPECT_EQ_INT(count_kind(g, OP_LAYERNORM_BWD, nfwd), 5);
  /* the residual stream fans out twice per block: its gradients are summed */
  EXPECT(count_kind(g, OP_ADD, nfwd) >= 4);
  for (int p = 0; p < g->nparams; p++) EXPECT(g->tensors[g->params[p].tensor].grad >= 0);
  graph_destroy(g);
  arena_destroy(a);
}

static void test_needs_cross_entropy_loss(void) {
  Arena *a = arena_create();
  char *buf = NULL;
  size_t len = 0;
  FILE *out = open_memstream(&buf, &len);
  Diag d;
  diag_init(&d, out);
  Graph *g = build_mlp(a, &d, 4, 8, 3);
  g->loss = -1;
  EXPECT(!pass_autodiff(g, &d));
  fclose(out);
  EXPECT(strstr(buf, "no 'minimize' statement") != NULL);
  free(buf);
  graph_destroy(g);
  arena_destroy(a);
}

/* A backward's cost is counted on the forward's shapes: attention_bwd reads dout
 * (a third as wide as the packed qkv), so its cost once came out 0.76x the forward's
 * where it is 2x (flash-attention's dQ, dK, dV, dP), and the planner under-predicted
 * every attention backward. */
static void test_attention_bwd_costs_twice_forward(void) {
  Arena *a = arena_create();
  Diag d;
  diag_init(&d, stderr);
  Graph *g = build_tiny_gpt(a, &d, 32, 8, 16, 2, 2);
  int nfwd = g->nops;
  EXPECT(pass_autodiff(g, &d));
  int checked = 0;
  for (int i = nfwd; i < g->nops; i++) {
    const Op *bwd = &g->ops[i];
    if (bwd->kind != OP_ATTENTION_BWD) continue;
    const Op *fwd = &g->ops[g->tensors[bwd->in[2]].producer]; /* in: dout, qkv, out, lse */
    EXPECT(fwd->kind == OP_ATTENTION);
    OpCost cf = op_info[OP_ATTENTION].cost(g, fwd, 3), cb = op_info[OP_ATTENTION_BWD].cost(g, bwd, 3);
    EXPECT(cf.flops > 0);
    EXPECT_NEAR(cb.flops, 2 * cf.flops, 1e-12, 0);
    EXPECT_NEAR(cb.bytes, 2 * cf.bytes, 1e-12, 0);
    checked++;
  }
  EXPECT_EQ_INT(checked, 2);
  graph_destroy(g);
  arena_destroy(a);
}

int main(void) {
  RUN(test_mlp_backward);
  RUN(test_tied_embedding_sums_both_uses);
  RUN(test_attention_bwd_costs_twice_forward);
  RUN(test_needs_cross_entropy_loss);
  return TEST_REPORT();
}
