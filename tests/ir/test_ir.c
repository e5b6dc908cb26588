/* IR core: op table integrity, shape rules and their user-facing messages,
 * parameter counts, the verifier and the dump. */
#include "build_models.h"
#include "test.h"

#include <stdlib.h>

static void test_table_complete(void) {
  for (int k = 0; k < OP_COUNT; k++) {
    const OpInfo *i = &op_info[k];
    EXPECT(i->name != NULL);
    EXPECT(i->shape != NULL && i->cost != NULL);
    /* forward ops are differentiable, backward ops are not */
    EXPECT(((i->flags & OPF_FWD) != 0) == (i->grad != NULL));
    EXPECT(op_lookup(i->name) == k);
  }
  EXPECT(op_lookup("no_such_op") == -1);
  EXPECT(op_attr_index(OP_ATTENTION, "heads") == 0);
  EXPECT(op_attr_index(OP_ATTENTION, "bogus") == -1);
}

static void test_gpt_param_count(void) {
  Arena *a = arena_create();
  Diag d;
  diag_init(&d, stderr);
  int V = 50, T = 8, C = 16, L = 3;
  Graph *g = build_tiny_gpt(a, &d, V, T, C, 4, L);
  EXPECT_EQ_INT(d.nerrors, 0);
  int64_t h = C;
  EXPECT_EQ_INT(graph_param_count(g), 12 * L * h * h + 13 * L * h + (V + T) * h + 2 * h);
  EXPECT(ir_verify(g, stderr));
  EXPECT_EQ_INT(graph_finalize(g), 1); /* wte is tied */
  EXPECT_EQ_INT(g->params[0].nuses_regions, 2);
  graph_destroy(g);
  arena_destroy(a);
}

static void test_shape_errors(void) {
  Arena *a = arena_create();
  char *buf = NULL;
  size_t len = 0;
  FILE *out = open_memstream(&buf, &len);
  Diag d;
  diag_init(&d, out);
  Graph *g = graph_create(a, "bad");
  int r = graph_add_region(g, RG_PROLOGUE, 0, "prologue");
  Loc l = {"m.model", 3, 7};
  int x = graph_add_input(g, "x", DT_F32, tshape(2, true, 1, 8, 0), l);
  int w = graph_add_param(g, "w", tshape(2, false, 9, 4, 0), INIT_ZEROS, 0, r, l);
  int in[] = {x, w};
  EXPECT(graph_add_op(g, &d, OP_LINEAR, in, 2, NULL, r, "y", l) == -1);
  EXPECT(graph_add_op(g, &d, OP_LINEAR, in, 1, NULL, r, "y", l) == -1);
  fclose(out);
  EXPECT_EQ_INT(d.nerrors, 2);
  EXPECT(strstr(buf, "m.model:3:7: error: 'linear' of [B,8] 'x' needs a weight with 8 rows, got [9,4] 'w'") != NULL);
  EXPECT(strstr(buf, "'linear' takes 2 to 3 inputs, got 1") != NULL);
  free(buf);
  graph_destroy(g);
  arena_destroy(a);
}

static void test_dump_stable(void) {
  char *b1 = NULL, *b2 = NULL;
  size_t l1 = 0, l2 = 0;
  for (int rep = 0; rep < 2; rep++) {
    Arena *a = arena_create();
    Diag d;
    diag_init(&d, stderr);
    Graph *g = build_mlp(a, &d, 4, 8, 3);
    FILE *f = open_memstream(rep ? &b2 : &b1, rep ? &l2 : &l1);
    ir_dump(g, f);
    fclose(f);
    graph_destroy(g);
    arena_destroy(a);
  }
  EXPECT(l1 == l2 && memcmp(b1, b2, l1) == 0);
  EXPECT(strstr(b1, "= linear(%0, %2, %3) @h.0") != NULL);
  free(b1);
  free(b2);
}

static void test_costs(void) {
  Arena *a = arena_create();
  Diag d;
  diag_init(&d, stderr);
  Graph *g = build_mlp(a, &d, 4, 8, 3);
  /* first linear: 2*b*4*8 + bias b*8 */
  OpCost c = op_info[OP_LINEAR].cost(g, &g->ops[0], 5);
  EXPECT_NEAR(c.flops, 2.0 * 5 * 4 * 8 + 5 * 8, 0, 0);
  graph_destroy(g);
  arena_destroy(a);
}

int main(void) {
  RUN(test_table_complete);
  RUN(test_gpt_param_count);
  RUN(test_shape_errors);
  RUN(test_dump_stable);
  RUN(test_costs);
  return TEST_REPORT();
}
