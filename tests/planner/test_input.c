/* plan_input_from_graph on a small hand-built graph: a tied embedding / LM head,
 * two blocks, the residual stream as the boundary activation. */
#include "passes/planner.h"
#include "test.h"

static Graph *tiny(Arena *a, Diag *d) {
  Graph *g = graph_create(a, "tiny");
  Loc l = {"tiny", 1, 1};
  int pro = graph_add_region(g, RG_PROLOGUE, 0, "prologue");
  int h0 = graph_add_region(g, RG_BLOCK, 0, "h.0");
  int h1 = graph_add_region(g, RG_BLOCK, 1, "h.1");
  int epi = graph_add_region(g, RG_EPILOGUE, 0, "epilogue");
  Shape ids = {2, true, {1, 8}};
  int tok = graph_add_input(g, "tokens", DT_I32, ids, l);
  int tgt = graph_add_input(g, "targets", DT_I32, ids, l);
  Shape emb = {2, false, {16, 4}};
  int wte = graph_add_param(g, "wte", emb, INIT_NORMAL, 0.02, pro, l);
  int in[3] = {wte, tok};
  int op = graph_add_op(g, d, OP_EMBEDDING, in, 2, NULL, pro, "x0", l);
  PD_CHECK(op >= 0, "embedding");
  int x = g->ops[op].out[0];
  int regions[2] = {h0, h1};
  for (int r = 0; r < 2; r++) {
    char name[32];
    snprintf(name, sizeof name, "h.%d.w", r);
    Shape ws = {2, false, {4, 4}};
    int w = graph_add_param(g, name, ws, INIT_NORMAL, 0.02, regions[r], l);
    int li[2] = {x, w};
    op = graph_add_op(g, d, OP_LINEAR, li, 2, NULL, regions[r], NULL, l);
    PD_CHECK(op >= 0, "linear");
    int gi[1] = {g->ops[op].out[0]};
    op = graph_add_op(g, d, OP_GELU, gi, 1, NULL, regions[r], NULL, l);
    PD_CHECK(op >= 0, "gelu");
    int ai[2] = {x, g->ops[op].out[0]};
    op = graph_add_op(g, d, OP_ADD, ai, 2, NULL, regions[r], NULL, l);
    PD_CHECK(op >= 0, "add");
    x = g->ops[op].out[0];
  }
  double tb[1] = {1};
  int mi[2] = {x, wte};
  op = graph_add_op(g, d, OP_MATMUL, mi, 2, tb, epi, "logits", l);
  PD_CHECK(op >= 0, "matmul");
  int ci[2] = {g->ops[op].out[0], tgt};
  op = graph_add_op(g, d, OP_CROSS_ENTROPY, ci, 2, NULL, epi, "loss", l);
  PD_CHECK(op >= 0, "cross_entropy");
  g->loss = g->ops[op].out[0];
  g->train.batch = 8;
  graph_finalize(g);
  return g;
}

static void test_from_graph(void) {
  Arena *a = arena_create();
  Diag d;
  diag_init(&d, stderr);
  Graph *g = tiny(a, &d);
  EXPECT_EQ_INT(d.nerrors, 0);
  PlanInput in;
  EXPECT(plan_input_from_graph(g, &in));
  EXPECT_EQ_INT(in.nsegs, 4);
  EXPECT_STREQ(in.segs[1].name, "h.0");
  EXPECT_EQ_INT(in.batch, 8);
  /* wte is used by the prologue and the epilogue: a tied group, not a segment's */
  EXPECT_EQ_INT(in.ntied, 1);
  EXPECT_EQ_INT(in.tied[0].count, 64);
  EXPECT_EQ_INT(in.tied[0].nsegs, 2);
  EXPECT_EQ_INT(in.tied[0].segs[0], 0);
  EXPECT_EQ_INT(in.tied[0].segs[1], 3);
  EXPECT_EQ_INT(in.segs[0].params, 0);
  EXPECT_EQ_INT(in.segs[1].params, 16);
  EXPECT_EQ_INT(in.segs[2].params, 16);
  EXPECT_EQ_INT(in.segs[3].params, 0);
  /* the residual stream x [8, 4] f32 crosses each boundary; nothing leaves the end */
  for (int s = 0; s < 3; s++) EXPECT_NEAR(in.segs[s].out_bytes, 8 * 4 * 4, 0, 0);
  EXPECT_NEAR(in.segs[3].out_bytes, 0, 0, 0);
  EXPECT_NEAR(in.input_bytes, 2 * 8 * 4, 0, 0);
  /* costs from the op table; no backward yet: 2x forward, stash = all activations */
  EXPECT(in.segs[1].fwd_flops >= 2 * 8 * 4 * 4);
  EXPECT_NEAR(in.segs[1].bwd_flops, 2 * in.segs[1].fwd_flops, 1e-12, 0);
  EXPECT_NEAR(in.segs[1].stash_bytes, 3 * 8 * 4 * 4, 0, 0);
  EXPECT(in.segs[3].fwd_flops >= 2 * 8 * 4 * 16);
  /* and it plans */
  Cluster c = {0};
  c.name = "t", c.nodes = 1, c.devices_per_node = 2, c.memory_bytes = 1e9;
  c.flops = 1e12, c.mem_bandwidth = 1e11, c.intra_bandwidth = 1e10, c.inter_bandwidth = 1e9;
  PlanPins pins;
  plan_pins_init(&pins);
  pins.stages = 2;
  Plan *p = plan_create(&in, &c, &pins, &d);
  EXPECT(p != NULL);
  if (p) EXPECT_EQ_INT(p->groups[0].nstages, 2);
  plan_destroy(p);
  plan_input_free(&in);
  graph_destroy(g);
  arena_destroy(a);
}

int main(void) {
  RUN(test_from_graph);
  return TEST_REPORT();
}
