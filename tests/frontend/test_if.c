/* tests/frontend/test_if.c — `if COND { ... } else { ... }` (frontend/lower_if.c): the
 * branch the params pick is the only one in the graph, -D flips it, names both branches
 * define are visible after the if, else-if chains and ifs inside a repeat, and
 * models/llama.model's tied/untied head. The error cases are in tests/errors (094-101). */
#include <stdlib.h>
#include <string.h>

#include <unistd.h>

#include "frontend/frontend.h"
#include "test.h"

typedef struct Fixture {
  Arena *a;
  Diag d;
  char *diag;
  size_t len;
  FILE *out;
} Fixture;

static void fx_init(Fixture *f) {
  memset(f, 0, sizeof *f);
  f->a = arena_create();
  f->out = open_memstream(&f->diag, &f->len);
  diag_init(&f->d, f->out);
}

static void fx_done(Fixture *f) {
  fclose(f->out);
  free(f->diag);
  arena_destroy(f->a);
}

static const char *fx_diag(Fixture *f) {
  fflush(f->out);
  return f->diag ? f->diag : "";
}

/* The weights' names in declaration order, space separated ("" if the load failed). */
static const char *weights(Fixture *f, const char *text, const char *ov) {
  const char *ovs[1] = {ov};
  Graph *g = frontend_load_model_buffer(f->a, &f->d, "t.model", text, strlen(text), ovs, ov ? 1 : 0);
  if (!g) {
    fprintf(stderr, "%s", fx_diag(f));
    return "";
  }
  const char *s = "";
  for (int i = 0; i < g->nparams; i++)
    s = arena_printf(f->a, "%s%s%s", s, i ? " " : "", g->tensors[g->params[i].tensor].name);
  graph_destroy(g);
  return s;
}

/* if / else if / else on one param, the branch's weight the only one in the graph. */
static void test_chain(void) {
  static const char *text =
      "model m {\n"
      "  param mode = 2;\n"
      "  input x : f32[B, 4]; input t : i32[B];\n"
      "  if mode - 2 {\n"
      "    weight a : f32[4, 3] = zeros;  y = linear(x, a);\n"
      "  } else if mode {\n"
      "    weight b : f32[4, 3] = zeros;  y = linear(x, b);\n"
      "  } else {\n"
      "    weight c : f32[4, 3] = zeros;  y = linear(x, c);\n"
      "  }\n"
      "  loss = cross_entropy(y, t);\n" /* y: both branches define it */
      "  minimize loss;\n"
      "}\n";
  Fixture f;
  fx_init(&f);
  EXPECT_STREQ(weights(&f, text, NULL), "b");
  EXPECT_STREQ(weights(&f, text, "mode=0"), "a"); /* 0 - 2 is not 0 */
  EXPECT_STREQ(weights(&f, text, "mode=3"), "a");
  fx_done(&f);
  fx_init(&f);
  /* A branch may be empty, and a name assigned before the if is updated in it. */
  EXPECT_STREQ(weights(&f,
                       "model m { param on = 0; input x : f32[B, 4]; input t : i32[B];\n"
                       "  weight w : f32[4, 3] = zeros; y = linear(x, w);\n"
                       "  if on { weight s : f32[3] = ones; y = mul(y, y); }\n"
                       "  loss = cross_entropy(y, t); minimize loss; }",
                       "on=1"),
               "w s");
  EXPECT_STREQ(fx_diag(&f), "");
  fx_done(&f);
}

/* Inside a repeat: per copy, loop-carried through the branch, off by a param. */
static void test_in_repeat(void) {
  static const char *text =
      "model m {\n"
      "  param gated = 1;\n"
      "  input x : f32[B, 4]; input t : i32[B];\n"
      "  h = x;\n"
      "  repeat r[2] {\n"
      "    weight w : f32[4, 4] = normal(0.1);\n"
      "    h = linear(h, w);\n"
      "    if gated { weight g : f32[4, 4] = normal(0.1); h = mul(h, linear(h, g)); }\n"
      "  }\n"
      "  weight head : f32[4, 3] = zeros;\n"
      "  loss = cross_entropy(linear(h, head), t); minimize loss;\n"
      "}\n";
  Fixture f;
  fx_init(&f);
  EXPECT_STREQ(weights(&f, text, NULL), "r.0.w r.0.g r.1.w r.1.g head");
  EXPECT_STREQ(weights(&f, text, "gated=0"), "r.0.w r.1.w head");
  EXPECT_STREQ(fx_diag(&f), "");
  fx_done(&f);
}

/* The AST keeps both branches; else-if is an else holding one if. */
static void test_ast(void) {
  Fixture f;
  fx_init(&f);
  char *buf = NULL;
  size_t len = 0;
  FILE *out = open_memstream(&buf, &len);
  static const char *text = "model m { param p = 1;\n"
                            "  if p { y = x; } else if p - 1 { } else { weight w : f32[2] = ones; } }";
  EXPECT(frontend_dump_ast_buffer(f.a, &f.d, "t.model", text, strlen(text), out));
  fclose(out);
  EXPECT_STREQ(buf, "model m  @1:1\n"
                    "  param p = 1  @1:11\n"
                    "  if p  @2:3\n"
                    "    y = x  @2:10\n"
                    "  else\n"
                    "    if (p - 1)  @2:24\n"
                    "    else\n"
                    "      weight w : f32[2] = ones  @2:44\n");
  free(buf);
  fx_done(&f);
}

/* models/llama.model: the head is its own weight by default (Hugging Face's default),
 * the embedding with -D tied=1, and then no "head" exists at all. */
static void test_llama_tied(void) {
  Fixture f;
  fx_init(&f);
  const char *ov[1] = {"tied=1"};
  Graph *untied = frontend_load_model(f.a, &f.d, "models/llama.model", NULL, 0);
  Graph *tied = frontend_load_model(f.a, &f.d, "models/llama.model", ov, 1);
  EXPECT(untied && tied);
  if (untied && tied) {
    /* 4 layers of width 128, kv 64, ffn 384; vocab 256 */
    int64_t layer = 2 * 128 + 2 * 128 * 128 + 2 * 128 * 64 + 3 * 128 * 384;
    EXPECT_EQ_INT(graph_param_count(tied), 256 * 128 + 4 * layer + 128);
    EXPECT_EQ_INT(graph_param_count(untied), graph_param_count(tied) + 256 * 128);
    const Param *last = &untied->params[untied->nparams - 1];
    EXPECT_STREQ(untied->tensors[last->tensor].name, "head");
    EXPECT_EQ_INT(untied->params[0].nuses_regions, 1); /* embed: the prologue only */
    for (int i = 0; i < tied->nparams; i++) EXPECT(strcmp(tied->tensors[tied->params[i].tensor].name, "head") != 0);
    EXPECT_EQ_INT(tied->params[0].nuses_regions, 2); /* embed: prologue and epilogue */
  }
  if (untied) graph_destroy(untied);
  if (tied) graph_destroy(tied);
  EXPECT_STREQ(fx_diag(&f), "");
  fx_done(&f);
}

int main(void) {
  if (chdir(PD2BW_SOURCE_DIR) != 0) perror(PD2BW_SOURCE_DIR);
  RUN(test_chain);
  RUN(test_in_repeat);
  RUN(test_ast);
  RUN(test_llama_tied);
  return TEST_REPORT();
}
