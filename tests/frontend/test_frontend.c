/* tests/frontend/test_frontend.c — lexer, parser and lowering of the model
 * language, the bundled models' parameter counts, -D overrides and cluster files. */
#include <stdlib.h>
#include <string.h>

#include <unistd.h>

#include "frontend/frontend.h"
#include "test.h"

/* Everything one test case needs: an arena, a Diag writing into `diag`. */
typedef struct Fixture {
  Arena *a;
  Diag d;
  char *diag;
  size_t diag_len;
  FILE *diag_out;
} Fixture;

static void fx_init(Fixture *f) {
  memset(f, 0, sizeof *f);
  f->a = arena_create();
  f->diag_out = open_memstream(&f->diag, &f->diag_len);
  diag_init(&f->d, f->diag_out);
}

/* Returns the diagnostics printed so far (valid until fx_done). */
static const char *fx_diag(Fixture *f) {
  fflush(f->diag_out);
  return f->diag ? f->diag : "";
}

static void fx_done(Fixture *f) {
  fclose(f->diag_out);
  free(f->diag);
  arena_destroy(f->a);
}

static Graph *load(Fixture *f, const char *text, const char *const *ov, int nov) {
  return frontend_load_model_buffer(f->a, &f->d, "t.model", text, strlen(text), ov, nov);
}

/* The first line of the diagnostics, for exact comparisons. */
static const char *first_line(Fixture *f) {
  const char *s = fx_diag(f);
  const char *nl = strchr(s, '\n');
  return arena_printf(f->a, "%.*s", nl ? (int)(nl - s) : (int)strlen(s), s);
}

/* ---- lexer ------------------------------------------------------------------------- */

static const char *tokens(Fixture *f, const char *text, bool *ok) {
  char *buf = NULL;
  size_t len = 0;
  FILE *out = open_memstream(&buf, &len);
  const Source *src = frontend_source_buffer(f->a, &f->d, "t.model", text, strlen(text));
  *ok = frontend_dump_tokens(f->a, &f->d, src, out);
  fclose(out);
  const char *s = arena_strdup(f->a, buf);
  free(buf);
  return s;
}

static void test_lexer_tokens(void) {
  Fixture f;
  fx_init(&f);
  bool ok;
  const char *got = tokens(&f,
                           "model m { # comment\n"
                           "  param x=12; /* block\n comment */ weight w : f32[3*x];\n"
                           "  y = f(1e-5, .5, 2., \"a\\\"b\") % 7 - z;\n"
                           "repeat input minimize train nodecay cluster }",
                           &ok);
  EXPECT(ok);
  EXPECT_STREQ(got,
               "1:1 MODEL\n1:7 IDENT m\n1:9 '{'\n"
               "2:3 PARAM\n2:9 IDENT x\n2:10 '='\n2:11 INT 12\n2:13 ';'\n"
               "3:13 WEIGHT\n3:20 IDENT w\n3:22 ':'\n3:24 IDENT f32\n3:27 '['\n3:28 INT 3\n"
               "3:29 '*'\n3:30 IDENT x\n3:31 ']'\n3:32 ';'\n"
               "4:3 IDENT y\n4:5 '='\n4:7 IDENT f\n4:8 '('\n4:9 FLOAT 1.0000000000000001e-05\n"
               "4:13 ','\n4:15 FLOAT 0.5\n4:17 ','\n4:19 FLOAT 2\n4:21 ','\n4:23 STRING a\"b\n"
               "4:29 ')'\n4:31 '%'\n4:33 INT 7\n4:35 '-'\n4:37 IDENT z\n4:38 ';'\n"
               "5:1 REPEAT\n5:8 INPUT\n5:14 MINIMIZE\n5:23 TRAIN\n5:29 NODECAY\n5:37 CLUSTER\n"
               "5:45 '}'\n");
  EXPECT_STREQ(fx_diag(&f), "");
  fx_done(&f);
}

static void test_lexer_errors(void) {
  static const struct {
    const char *text, *first_line;
  } cases[] = {
      {"model m { x = \"abc\n", "t.model:1:15: error: unterminated string (expected '\"' before "
                                "the end of the line)"},
      {"model /* never closed", "t.model:1:7: error: unterminated comment (expected '*/' "
                                "before the end of the file)"},
      {"  9223372036854775808", "t.model:1:3: error: integer 9223372036854775808 is too large "
                                "(expected at most 9223372036854775807)"},
      {"x = 1e999;", "t.model:1:5: error: number 1e999 is out of range (expected a finite "
                     "double)"},
      {"a @ b", "t.model:1:3: error: unexpected character '@'"},
      {"\x01", "t.model:1:1: error: unexpected control character 0x01"},
      {"x\xc3\xa9", "t.model:1:2: error: unexpected character '\xc3\xa9' (expected ASCII "
                    "outside comments and strings)"},
      {"ok\n \xff\xfe", "t.model:2:2: error: byte 0xff is not valid UTF-8 (expected a text "
                        "file)"},
      {"1e+", "t.model:1:1: error: malformed number '1e+' (expected digits after the "
              "exponent)"},
      {"\"a\\q\"", "t.model:1:3: error: unknown escape '\\q' in string (expected \\\", \\\\, "
                   "\\n or \\t)"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    Fixture f;
    fx_init(&f);
    bool ok;
    tokens(&f, cases[i].text, &ok);
    EXPECT(!ok);
    EXPECT_STREQ(first_line(&f), cases[i].first_line);
    fx_done(&f);
  }
}

static void test_lexer_nul(void) {
  Fixture f;
  fx_init(&f);
  static const char text[] = "model m {\n  x\0y }";
  EXPECT(!frontend_load_model_buffer(f.a, &f.d, "t.model", text, sizeof text - 1, NULL, 0));
  EXPECT_STREQ(first_line(&f), "t.model:2:4: error: NUL byte in the file (expected a text "
                               "file)");
  fx_done(&f);
}

/* ---- parser ------------------------------------------------------------------------ */

static const char *ast_of(Fixture *f, const char *text) {
  char *buf = NULL;
  size_t len = 0;
  FILE *out = open_memstream(&buf, &len);
  bool ok = frontend_dump_ast_buffer(f->a, &f->d, "t.model", text, strlen(text), out);
  fclose(out);
  const char *s = ok ? arena_strdup(f->a, buf) : NULL;
  free(buf);
  return s;
}

static void test_parser_ast(void) {
  Fixture f;
  fx_init(&f);
  const char *got = ast_of(&f,
                           "model m {\n"
                           "  param p = 1 + 2 * 3 - -4 % 5 / (6 - 7);\n"
                           "  input t : i32[B, p];\n"
                           "  weight w : f32[p, 2] = normal(0.02 / sqrt(2 * p)) nodecay;\n"
                           "  repeat h[3] { y = gelu(linear(t, w), x = 1.5e3); }\n"
                           "  minimize y;\n"
                           "  train { batch = 8; }\n"
                           "}\n");
  EXPECT_STREQ(got,
               "model m  @1:1\n"
               "  param p = ((1 + (2 * 3)) - (((-4) % 5) / (6 - 7)))  @2:3\n"
               "  input t : i32[B, p]  @3:3\n"
               "  weight w : f32[p, 2] = normal((0.02 / sqrt((2 * p)))) nodecay  @4:3\n"
               "  repeat h[3]  @5:3\n"
               "    y = gelu(linear(t, w), x = 1500.0)  @5:17\n"
               "  minimize y  @6:3\n"
               "  train  @7:3\n"
               "    batch = 8  @7:11\n");
  EXPECT_STREQ(fx_diag(&f), "");
  fx_done(&f);
}

static void test_parser_cluster_ast(void) {
  Fixture f;
  fx_init(&f);
  const char *got = ast_of(&f, "cluster c { device = \"a\\\\b\"; tflops = 1e3 / 8; }");
  EXPECT_STREQ(got, "cluster c  @1:1\n  device = \"a\\\\b\"  @1:13\n"
                    "  tflops = (1000.0 / 8)  @1:30\n");
  fx_done(&f);
}

static void test_syntax_errors(void) {
  static const struct {
    const char *text, *first_line;
  } cases[] = {
      {"", "t.model:1:1: error: expected a model ('model NAME { ... }'), found end of file"},
      {"hello", "t.model:1:1: error: expected a model ('model NAME { ... }'), found name "
                "'hello'"},
      {"model m { x = ; }", "t.model:1:15: error: expected an expression, found ';'"},
      {"model m { x = f(1 2); }", "t.model:1:19: error: expected ')', found integer '2'"},
      {"model m { param = 3; }", "t.model:1:17: error: expected name, found '='"},
      {"model m { x = 1 }", "t.model:1:17: error: expected ';', found '}'"},
      {"model m { 3; }", "t.model:1:11: error: expected a declaration or statement or '}', "
                         "found integer '3'"},
      {"model m {", "t.model:1:10: error: expected a declaration or statement or '}', found "
                    "end of file"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    Fixture f;
    fx_init(&f);
    EXPECT(!load(&f, cases[i].text, NULL, 0));
    EXPECT_STREQ(first_line(&f), cases[i].first_line);
    EXPECT_EQ_INT(f.d.nerrors, 1);
    fx_done(&f);
  }
}

/* Nesting far beyond any real model stops with a message, not a crash. */
static void test_deep_nesting(void) {
  enum { N = 100000 };
  static const struct {
    const char *open, *close, *message;
  } cases[] = {
      {"(", ")", "brackets nested too deeply (more than 256 levels)"},
      {"-", "", "input nested too deeply (expected at most 256 levels)"},
      {"1+", "", "expression nested too deeply (expected at most 1000 levels)"},
      {"f(", ")", "brackets nested too deeply (more than 256 levels)"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    size_t lo = strlen(cases[i].open), lc = strlen(cases[i].close);
    char *text = malloc(N * (lo + lc) + 64);
    size_t n = (size_t)sprintf(text, "model m { x = ");
    for (int k = 0; k < N; k++) memcpy(text + n, cases[i].open, lo), n += lo;
    n += (size_t)sprintf(text + n, "1");
    for (int k = 0; k < N; k++) memcpy(text + n, cases[i].close, lc), n += lc;
    n += (size_t)sprintf(text + n, "; }");
    Fixture f;
    fx_init(&f);
    EXPECT(!frontend_load_model_buffer(f.a, &f.d, "t.model", text, n, NULL, 0));
    EXPECT(strstr(fx_diag(&f), cases[i].message) != NULL);
    if (!strstr(fx_diag(&f), cases[i].message)) fprintf(stderr, "got: %s\n", fx_diag(&f));
    fx_done(&f);
    free(text);
  }
}

/* A long chain of one operator is not deep nesting (issue 24): `1+1+...+1` of 300 and
 * of 1000 terms parses and has the right value; 1001 is the honest limit's message. */
static void test_long_chain(void) {
  for (int terms = 300; terms <= 1001; terms += terms == 300 ? 700 : 1) {
    char *text = malloc((size_t)terms * 2 + 512);
    size_t n = (size_t)sprintf(text, "model m {\n  param p = 1");
    for (int k = 1; k < terms; k++) n += (size_t)sprintf(text + n, "+1");
    sprintf(text + n, ";\n  input tokens : i32[B, 8];\n  input targets : i32[B, 8];\n"
                      "  weight emb : f32[p, 16] = normal(0.25);\n  h = embedding(emb, tokens);\n"
                      "  weight hw : f32[16, p] = normal(0.25);\n"
                      "  loss = cross_entropy(linear(h, hw), targets);\n  minimize loss;\n  train { batch = 4; }\n}\n");
    Fixture f;
    fx_init(&f);
    Graph *g = load(&f, text, NULL, 0);
    if (terms <= FRONTEND_MAX_TREE_DEPTH) {
      EXPECT(g != NULL);
      if (!g) fprintf(stderr, "%d terms: %s\n", terms, fx_diag(&f));
      if (g) EXPECT_EQ_INT(graph_param_count(g), 32 * terms);
      if (g) graph_destroy(g);
    } else {
      EXPECT(g == NULL && strstr(fx_diag(&f), "expression nested too deeply (expected at most 1000 levels)"));
    }
    fx_done(&f);
    free(text);
  }
}

/* ---- lowering ---------------------------------------------------------------------- */

static int64_t gpt_formula(int64_t L, int64_t h, int64_t V, int64_t T) {
  return 12 * L * h * h + 13 * L * h + (V + T) * h + 2 * h;
}

static Graph *load_file(Fixture *f, const char *path, const char *const *ov, int nov) {
  return frontend_load_model(f->a, &f->d, path, ov, nov);
}

static void test_gpt_default(void) {
  Fixture f;
  fx_init(&f);
  Graph *g = load_file(&f, "models/gpt.model", NULL, 0);
  EXPECT(g != NULL);
  if (!g) {
    fprintf(stderr, "%s", fx_diag(&f));
    fx_done(&f);
    return;
  }
  EXPECT_EQ_INT(graph_param_count(g), 354823168);
  EXPECT_EQ_INT(graph_param_count(g), gpt_formula(24, 1024, 50257, 1024));
  EXPECT_STREQ(g->name, "gpt");
  EXPECT_EQ_INT(g->nblocks, 24);
  EXPECT_STREQ(g->block_name, "h");
  EXPECT_EQ_INT(g->nregions, 26);
  EXPECT(g->regions[0].kind == RG_PROLOGUE);
  EXPECT(g->regions[3].kind == RG_BLOCK && g->regions[3].index == 2);
  EXPECT_STREQ(g->regions[3].name, "h.2");
  EXPECT(g->regions[25].kind == RG_EPILOGUE);
  EXPECT_STREQ(g->regions[25].name, "epilogue");
  EXPECT(g->loss >= 0 && g->tensors[g->loss].shape.rank == 0);
  /* Per block: 12 weights; 2 + 12*24 + 2 weights in all. */
  EXPECT_EQ_INT(g->nparams, 2 + 12 * 24 + 2);
  int ntied = 0, attn3 = -1;
  for (int p = 0; p < g->nparams; p++) {
    const Tensor *t = &g->tensors[g->params[p].tensor];
    if (g->params[p].nuses_regions > 1) {
      ntied++;
      EXPECT_STREQ(t->name, "wte");
    }
    if (strcmp(t->name, "h.3.attnproj_w") == 0) attn3 = p;
  }
  EXPECT_EQ_INT(ntied, 1);
  EXPECT(attn3 >= 0);
  if (attn3 >= 0) {
    EXPECT(g->params[attn3].init == INIT_NORMAL);
    EXPECT_NEAR(g->params[attn3].std, 0.02 / sqrt(48.0), 1e-12, 0);
    EXPECT_EQ_INT(g->regions[g->params[attn3].region].index, 3);
    EXPECT(g->params[attn3].decay);
  }
  /* Ops per region: 4 in the prologue, 12 per block, 3 in the epilogue. */
  int per_region[26] = {0};
  for (int o = 0; o < g->nops; o++) per_region[g->ops[o].region]++;
  EXPECT_EQ_INT(per_region[0], 4);
  EXPECT_EQ_INT(per_region[1], 12);
  EXPECT_EQ_INT(per_region[24], 12);
  EXPECT_EQ_INT(per_region[25], 3);
  /* The carried x: block 1's first layernorm reads block 0's last add. */
  const Op *ln = &g->ops[4 + 12];
  EXPECT_STREQ(op_info[ln->kind].name, "layernorm");
  EXPECT_EQ_INT(g->tensors[ln->in[0]].producer, 4 + 11);
  EXPECT_EQ_INT(g->ops[4 + 11].region, 1);
  EXPECT_STREQ(g->tensors[g->ops[4 + 11].out[0]].name, "h.0.x.1");
  /* Attributes come from the text, defaults from the table. */
  const Op *attn = &g->ops[4 + 2];
  EXPECT_STREQ(op_info[attn->kind].name, "attention");
  EXPECT_NEAR(attn->attr[op_attr_index(attn->kind, "heads")], 16, 0, 0);
  EXPECT_NEAR(attn->attr[op_attr_index(attn->kind, "causal")], 1, 0, 0);
  EXPECT_NEAR(attn->attr[op_attr_index(attn->kind, "p")], 0.1, 0, 0);
  /* The train section. */
  const TrainConfig *t = &g->train;
  EXPECT_EQ_INT(t->batch, 512);
  EXPECT_EQ_INT(t->microbatch, 8);
  EXPECT(t->optimizer == OPT_ADAMW);
  EXPECT_NEAR(t->lr, 1.5e-4, 0, 0);
  EXPECT_NEAR(t->beta2, 0.999, 0, 0);
  EXPECT_NEAR(t->weight_decay, 0.01, 0, 0);
  EXPECT(t->schedule == LR_COSINE);
  EXPECT_EQ_INT(t->warmup, 2000);
  EXPECT_EQ_INT(t->steps, 100000);
  EXPECT_NEAR(t->min_lr, 1.5e-5, 0, 0);
  EXPECT_NEAR(t->clip, 1.0, 0, 0);
  EXPECT_EQ_INT(t->seed, 1337);
  EXPECT_EQ_INT(g->nconsts, 6);
  EXPECT_STREQ(g->consts[5].name, "pdrop");
  EXPECT(!g->consts[5].is_int && g->consts[0].is_int);
  graph_destroy(g);
  fx_done(&f);
}

static void test_gpt_sizes(void) {
  static const struct {
    int64_t L, h, heads, V, T;
  } cases[] = {
      {24, 2048, 16, 50257, 1024}, /* GPT 1.3B */
      {32, 2304, 32, 50257, 1024}, /* GPT 2.2B */
      {32, 3072, 32, 50257, 1024}, /* GPT 3.8B */
      {2, 64, 4, 256, 64},
      {3, 96, 6, 1000, 32},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    Fixture f;
    fx_init(&f);
    const char *ov[4] = {
        arena_printf(f.a, "layers=%lld", (long long)cases[i].L),
        arena_printf(f.a, "dim=%lld", (long long)cases[i].h),
        arena_printf(f.a, "heads=%lld", (long long)cases[i].heads),
        arena_printf(f.a, "vocab=%lld", (long long)cases[i].V),
    };
    const char *ov2[5] = {ov[0], ov[1], ov[2], ov[3],
                          arena_printf(f.a, "seq=%lld", (long long)cases[i].T)};
    Graph *g = load_file(&f, "models/gpt.model", ov2, 5);
    EXPECT(g != NULL);
    if (g) {
      EXPECT_EQ_INT(graph_param_count(g),
                    gpt_formula(cases[i].L, cases[i].h, cases[i].V, cases[i].T));
      EXPECT_EQ_INT(g->nblocks, cases[i].L);
      graph_destroy(g);
    }
    fx_done(&f);
  }
  /* The three paper sizes, written out. */
  EXPECT_EQ_INT(gpt_formula(24, 2048, 50257, 1024), 1313626112);
  EXPECT_EQ_INT(gpt_formula(32, 2304, 50257, 1024), 2157546240);
  EXPECT_EQ_INT(gpt_formula(32, 3072, 50257, 1024), 3782697984);
}

static void test_bundled_models(void) {
  static const struct {
    const char *path;
    int64_t params;
    int nblocks;
  } cases[] = {
      {"models/tinygpt.model", 12 * 4 * 64 * 64 + 13 * 4 * 64 + (256 + 64) * 64 + 2 * 64, 4},
      {"models/mlp.model", 2 * (16 * 16 + 16) + 16 * 10 + 10, 2},
      /* BERT-large MLM: the blocks, embeddings, final norm, head transform + norm, bias */
      {"models/bert.model",
       12 * 24 * 1024 * 1024 + 13 * 24 * 1024 + (30522 + 512) * 1024 + 2 * 1024 +
           (1024 * 1024 + 1024) + 2 * 1024 + 30522,
       24},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    Fixture f;
    fx_init(&f);
    Graph *g = load_file(&f, cases[i].path, NULL, 0);
    EXPECT(g != NULL);
    if (!g) fprintf(stderr, "%s: %s", cases[i].path, fx_diag(&f));
    if (g) {
      EXPECT_EQ_INT(graph_param_count(g), cases[i].params);
      EXPECT_EQ_INT(g->nblocks, cases[i].nblocks);
      EXPECT(g->loss >= 0);
      EXPECT(ir_verify(g, stderr));
      graph_destroy(g);
    }
    fx_done(&f);
  }
  Fixture f;
  fx_init(&f);
  Graph *g = load_file(&f, "models/tinygpt.model", NULL, 0);
  if (g) {
    EXPECT_EQ_INT(g->train.batch, 16);
    EXPECT_EQ_INT(g->train.microbatch, 4);
    EXPECT_NEAR(g->train.lr, 1e-3, 0, 0);
    EXPECT_EQ_INT(g->train.warmup, 20);
    EXPECT_EQ_INT(g->train.steps, 300);
    EXPECT_NEAR(g->train.min_lr, 1e-4, 0, 0);
    EXPECT_EQ_INT(g->train.seed, 1337);
    graph_destroy(g);
  }
  g = load_file(&f, "models/mlp.model", NULL, 0);
  if (g) {
    EXPECT(g->train.optimizer == OPT_SGD);
    EXPECT_NEAR(g->train.beta1, 0.9, 0, 0); /* momentum */
    EXPECT(g->tensors[0].dtype == DT_F32 && g->tensors[0].shape.batched);
    graph_destroy(g);
  }
  fx_done(&f);
}

static void test_overrides(void) {
  static const struct {
    const char *ov, *first_line;
  } cases[] = {
      {"depth=3", "command line: error: -D depth=3: 'depth' is not a param of model 'gpt'"},
      {"layers=two", "command line: error: -D layers=two: expected a number after '='"},
      {"layers=", "command line: error: -D layers=: expected a number after '='"},
      {"layers", "command line: error: -D layers: expected NAME=VALUE"},
      {"layers=0", "models/gpt.model:19:12: error: the repeat count is 0 (expected at least 1)"},
      {"dim=1.5", "models/gpt.model:13:27: error: a dimension is 1.5 (expected an integer)"},
      {"layers=2.0", "models/gpt.model:19:12: error: the repeat count is 2.0 (expected an "
                     "integer)"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    Fixture f;
    fx_init(&f);
    const char *ov[1] = {cases[i].ov};
    EXPECT(!load_file(&f, "models/gpt.model", ov, 1));
    EXPECT_STREQ(first_line(&f), cases[i].first_line);
    fx_done(&f);
  }
  /* A float override of a float param, and params derived from overridden ones. */
  Fixture f;
  fx_init(&f);
  const char *ov[2] = {"p=0.25", "n=6"};
  Graph *g;
  g = load(&f,
           "model m { param half = n / 2; param n = 4; param p = 0.5;\n"
           "  input x : f32[B, half]; input t : i32[B]; weight w : f32[half, n] = zeros;\n"
           "  y = dropout(linear(x, w), p = p);\n"
           "  z = cross_entropy(y, t); minimize z; }",
           ov, 2);
  EXPECT(g != NULL);
  if (g) {
    EXPECT_EQ_INT(graph_param_count(g), 3 * 6);
    EXPECT_NEAR(g->ops[1].attr[0], 0.25, 0, 0);
    EXPECT_STREQ(g->consts[0].name, "half");
    EXPECT_NEAR(g->consts[0].value, 3, 0, 0);
    graph_destroy(g);
  }
  fx_done(&f);
}

static void test_semantics(void) {
  Fixture f;
  fx_init(&f);
  /* Body-local names do not leak between copies or out of the repeat; a name
     assigned before the repeat is carried; ties across regions are counted. */
  Graph *g = load(&f,
                  "model m {\n"
                  "  input x : f32[B, 4]; input t : i32[B];\n"
                  "  weight shared : f32[4, 4] = normal(1);\n"
                  "  h = x;\n"
                  "  repeat r[3] { weight b : f32[4] = zeros; tmp = linear(h, shared, b);\n"
                  "                h = relu(tmp); }\n"
                  "  loss = cross_entropy(linear(h, shared), t);\n"
                  "  minimize loss;\n"
                  "}\n",
                  NULL, 0);
  EXPECT(g != NULL);
  if (!g) fprintf(stderr, "%s", fx_diag(&f));
  if (g) {
    EXPECT_EQ_INT(g->nblocks, 3);
    EXPECT_EQ_INT(g->nparams, 4);
    EXPECT_STREQ(g->tensors[g->params[3].tensor].name, "r.2.b");
    EXPECT_EQ_INT(g->params[0].nuses_regions, 4); /* three copies and the epilogue */
    EXPECT(!g->params[1].decay);                  /* rank 1 */
    EXPECT(g->params[0].decay);
    /* relu of copy 1 feeds linear of copy 2. */
    EXPECT_EQ_INT(g->tensors[g->ops[4].in[0]].producer, 3);
    EXPECT_STREQ(g->tensors[g->ops[3].out[0]].name, "r.1.h");
    /* Train defaults when there is no train section. */
    EXPECT(g->train.optimizer == OPT_ADAMW);
    EXPECT_NEAR(g->train.lr, 1e-3, 0, 0);
    EXPECT_NEAR(g->train.beta1, 0.9, 0, 0);
    EXPECT_NEAR(g->train.beta2, 0.999, 0, 0);
    EXPECT_NEAR(g->train.eps, 1e-8, 0, 0);
    EXPECT_NEAR(g->train.weight_decay, 0, 0, 0);
    EXPECT(g->train.schedule == LR_CONSTANT);
    EXPECT_EQ_INT(g->train.batch, 0);
    EXPECT_EQ_INT(g->train.seed, 0);
    EXPECT_NEAR(g->train.clip, 0, 0, 0);
    graph_destroy(g);
  }
  fx_done(&f);
  fx_init(&f);
  EXPECT(!load(&f,
               "model m { input x : f32[B, 4]; input t : i32[B];\n"
               "  repeat r[2] { tmp = relu(x); }\n"
               "  loss = cross_entropy(tmp, t); minimize loss; }",
               NULL, 0));
  EXPECT_STREQ(first_line(&f), "t.model:3:24: error: undefined name 'tmp' (expected a tensor)");
  fx_done(&f);
  /* nodecay, sgd defaults, constant(lr) */
  fx_init(&f);
  g = load(&f,
           "model m { input x : f32[B, 4]; input t : i32[B];\n"
           "  weight w : f32[4, 4] = ones nodecay;\n"
           "  loss = cross_entropy(linear(x, w), t); minimize loss;\n"
           "  train { lr_schedule = constant(0.5); optimizer = sgd; seed = 3; }\n"
           "}",
           NULL, 0);
  EXPECT(g != NULL);
  if (g) {
    EXPECT(!g->params[0].decay);
    EXPECT(g->params[0].init == INIT_ONES);
    EXPECT(g->train.optimizer == OPT_SGD);
    EXPECT_NEAR(g->train.lr, 0.5, 0, 0);
    EXPECT_NEAR(g->train.beta1, 0, 0, 0);
    EXPECT_EQ_INT(g->train.seed, 3);
    EXPECT_EQ_INT(g->nblocks, 0);
    EXPECT_EQ_INT(g->nregions, 1);
    graph_destroy(g);
  }
  fx_done(&f);
}

static void test_cluster(void) {
  Fixture f;
  fx_init(&f);
  Cluster c;
  EXPECT(frontend_load_cluster(f.a, &f.d, "models/clusters/v100x64.cluster", &c));
  EXPECT_STREQ(c.name, "v100x64");
  EXPECT_EQ_INT(c.nodes, 8);
  EXPECT_EQ_INT(c.devices_per_node, 8);
  EXPECT_STREQ(c.device, "V100-16GB");
  EXPECT_NEAR(c.memory_bytes, 16.0 * 1024 * 1024 * 1024, 0, 0);
  EXPECT_NEAR(c.flops, 0, 0, 0); /* per-precision peaks: FP32 only (no TF32, no BF16) */
  EXPECT_NEAR(c.flops_fp32, 15.7e12, 1e-12, 0);
  EXPECT_NEAR(c.flops_tf32, 0, 0, 0);
  EXPECT_NEAR(c.flops_bf16, 0, 0, 0);
  EXPECT_NEAR(c.mem_bandwidth, 900e9, 0, 0);
  EXPECT_NEAR(c.intra_bandwidth, 150e9, 0, 0);
  EXPECT_NEAR(c.inter_bandwidth, 3.125e9, 0, 0);
  static const char *const files[] = {"v100x8", "h200", "h200x8", "cpu2"};
  for (size_t i = 0; i < 4; i++) {
    const char *path = arena_printf(f.a, "models/clusters/%s.cluster", files[i]);
    EXPECT(frontend_load_cluster(f.a, &f.d, path, &c));
    EXPECT_STREQ(c.name, files[i]);
  }
  EXPECT(frontend_load_cluster(f.a, &f.d, "models/clusters/h200.cluster", &c));
  EXPECT_NEAR(c.flops_tf32, 494.5e12, 1e-12, 0);
  EXPECT_NEAR(c.flops_bf16, 989e12, 1e-12, 0);
  EXPECT(frontend_load_cluster(f.a, &f.d, "models/clusters/cpu2.cluster", &c));
  EXPECT_EQ_INT(c.devices_per_node, 2);
  EXPECT_NEAR(c.flops, 100e9, 1e-12, 0);
  const char *text = "cluster d { nodes = 2; devices_per_node = 4; memory_gib = 0.5;\n"
                     "tflops = 10; memory_gbs = 100; intra_node_gbs = 10; inter_node_gbs = 1; }";
  EXPECT(frontend_load_cluster_buffer(f.a, &f.d, "d.cluster", text, strlen(text), &c));
  EXPECT_STREQ(c.device, "gpu");
  EXPECT_NEAR(c.memory_bytes, 512.0 * 1024 * 1024, 0, 0);
  EXPECT_EQ_INT(f.d.nerrors, 0);
  /* A model file is not a cluster and the other way round. */
  EXPECT(!frontend_load_cluster(f.a, &f.d, "models/mlp.model", &c));
  EXPECT_STREQ(first_line(&f), "models/mlp.model:3:1: error: expected a cluster ('cluster NAME "
                               "{ ... }'), found a model");
  fx_done(&f);
}

/* docs/language.md documents every forward op of the table, with its attributes. */
static void test_docs_cover_ops(void) {
  FILE *f = fopen("docs/language.md", "rb");
  EXPECT(f != NULL);
  if (!f) return;
  char *doc = NULL;
  size_t len = 0;
  FILE *out = open_memstream(&doc, &len);
  int ch;
  while ((ch = fgetc(f)) != EOF) fputc(ch, out);
  fclose(f);
  fclose(out);
  for (int k = 0; k < OP_COUNT; k++) {
    const OpInfo *info = &op_info[k];
    if (!(info->flags & OPF_FWD)) continue;
    char row[64];
    snprintf(row, sizeof row, "| `%s(", info->name);
    const char *at = strstr(doc, row);
    EXPECT(at != NULL);
    if (!at) {
      fprintf(stderr, "docs/language.md has no table row for op '%s'\n", info->name);
      continue;
    }
    const char *eol = strchr(at, '\n');
    for (int i = 0; i < info->nattrs; i++) {
      char attr[64];
      snprintf(attr, sizeof attr, "`%s = ", info->attr_names[i]);
      const char *hit = strstr(at, attr);
      EXPECT(hit && hit < eol);
      if (!hit || hit >= eol)
        fprintf(stderr, "docs/language.md: op '%s' row lacks attribute '%s'\n", info->name,
                info->attr_names[i]);
    }
  }
  free(doc);
}

int main(void) {
  if (chdir(PD2BW_SOURCE_DIR) != 0) perror(PD2BW_SOURCE_DIR);
  RUN(test_lexer_tokens);
  RUN(test_lexer_errors);
  RUN(test_lexer_nul);
  RUN(test_parser_ast);
  RUN(test_parser_cluster_ast);
  RUN(test_syntax_errors);
  RUN(test_deep_nesting);
  RUN(test_long_chain);
  RUN(test_gpt_default);
  RUN(test_gpt_sizes);
  RUN(test_bundled_models);
  RUN(test_overrides);
  RUN(test_semantics);
  RUN(test_cluster);
  RUN(test_docs_cover_ops);
  return TEST_REPORT();
}
