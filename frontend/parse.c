/* frontend/parse.c — from bytes to AST: byte-level checks, the helpers the flex
 * rules and bison actions call, syntax-error messages, and the parse driver.
 *
 * Order of checks on a file: NUL bytes and invalid UTF-8 are rejected first (a
 * binary file gets one clear message instead of a stream of "unexpected
 * character"), then the lexer and parser run once, stopping at the first error
 * (the grammar has no error recovery: a second message after a syntax error is
 * usually noise). Expression depth is tracked as nodes are built, so no later
 * recursive walk ever sees a tree deeper than FRONTEND_MAX_TREE_DEPTH.
 */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "frontend/frontend.h"
#include "frontend/parse_ctx.h"
#include "parser.h"
#include "lexer.h"

/* ---- sources ------------------------------------------------------------- */

const Source *frontend_source_file(Arena *a, Diag *d, const char *path) {
  Source *s = arena_alloc(a, sizeof *s);
  if (!source_read(a, d, path, s)) return NULL;
  diag_add_source(d, s);
  return s;
}

const Source *frontend_source_buffer(Arena *a, Diag *d, const char *path, const char *text,
                                     size_t len) {
  Source *s = arena_alloc(a, sizeof *s);
  char *copy = arena_alloc(a, len + 1);
  if (len) memcpy(copy, text, len);
  s->path = arena_strdup(a, path);
  s->text = copy;
  s->len = len;
  diag_add_source(d, s);
  return s;
}

/* Length of the valid UTF-8 sequence at p (1..4), or 0 if it is not one. */
static int utf8_len(const unsigned char *p, const unsigned char *end) {
  if (p[0] < 0x80) return 1;
  int n;
  unsigned min;
  unsigned cp;
  if ((p[0] & 0xe0) == 0xc0) n = 2, min = 0x80, cp = p[0] & 0x1fu;
  else if ((p[0] & 0xf0) == 0xe0) n = 3, min = 0x800, cp = p[0] & 0x0fu;
  else if ((p[0] & 0xf8) == 0xf0) n = 4, min = 0x10000, cp = p[0] & 0x07u;
  else return 0;
  if (end - p < n) return 0;
  for (int i = 1; i < n; i++) {
    if ((p[i] & 0xc0) != 0x80) return 0;
    cp = (cp << 6) | (p[i] & 0x3fu);
  }
  if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return 0;
  return n;
}

/* Rejects NUL bytes and invalid UTF-8, naming the first offending position. */
static bool check_bytes(Diag *d, const Source *s) {
  const unsigned char *p = (const unsigned char *)s->text, *end = p + s->len;
  int line = 1, col = 1;
  if (s->len > FRONTEND_MAX_FILE) {
    diag_error(d, (Loc){s->path, 0, 0}, "file is larger than %d MiB (expected a model text)",
               FRONTEND_MAX_FILE >> 20);
    return false;
  }
  while (p < end) {
    Loc loc = {s->path, line, col};
    if (*p == 0) {
      diag_error(d, loc, "NUL byte in the file (expected a text file)");
      return false;
    }
    int n = utf8_len(p, end);
    if (n == 0) {
      diag_error(d, loc, "byte 0x%02x is not valid UTF-8 (expected a text file)", *p);
      return false;
    }
    if (*p == '\n') line++, col = 1;
    else col += n;
    p += n;
  }
  return true;
}

/* ---- lexer helpers --------------------------------------------------------- */

Loc pctx_loc(const ParseCtx *c, int line, int col) {
  return (Loc){c->src->path, line, col};
}

void lex_advance(ParseCtx *c, int *first_line, int *first_col, int *last_line, int *last_col,
                 const char *text, int len) {
  *first_line = c->line;
  *first_col = c->col;
  for (int i = 0; i < len; i++) {
    if (text[i] == '\n') c->line++, c->col = 1;
    else if (c->col < 1000000000) c->col++;
  }
  *last_line = c->line;
  *last_col = c->col;
}

int lex_token(ParseCtx *c, int tok, const char *text, int len) {
  c->ntokens++;
  c->prev_end_line = c->last_end_line;
  c->prev_end_col = c->last_end_col;
  c->last_end_line = c->line;
  c->last_end_col = c->col;
  enum { SHOWN = 40 }; /* a token quoted in a message is cut to this many bytes */
  int n = len < SHOWN ? len : SHOWN;
  char *t = arena_alloc(c->arena, (size_t)n + 4);
  memcpy(t, text, (size_t)n);
  if (len > SHOWN) memcpy(t + n, "...", 3);
  c->tok = t;
  return tok;
}

void lex_error(ParseCtx *c, int line, int col, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  diag_verror(c->d, pctx_loc(c, line, col), fmt, ap);
  va_end(ap);
  c->lex_error = true;
}

bool lex_int(ParseCtx *c, int line, int col, const char *text, int64_t *out) {
  errno = 0;
  char *end;
  long long v = strtoll(text, &end, 10);
  if (errno == ERANGE || *end) {
    lex_error(c, line, col, "integer %.40s%s is too large (expected at most %lld)", text,
              strlen(text) > 40 ? "..." : "", (long long)INT64_MAX);
    return false;
  }
  *out = v;
  return true;
}

bool lex_float(ParseCtx *c, int line, int col, const char *text, double *out) {
  errno = 0;
  char *end;
  double v = strtod(text, &end);
  if (*end || !isfinite(v) || (errno == ERANGE && fabs(v) > 1.0)) {
    lex_error(c, line, col, "number %.40s%s is out of range (expected a finite double)", text,
              strlen(text) > 40 ? "..." : "");
    return false;
  }
  *out = v; /* an underflow to 0 or a denormal is harmless */
  return true;
}

const char *lex_string(ParseCtx *c, int line, int col, const char *text, int len) {
  char *s = arena_alloc(c->arena, (size_t)len);
  int n = 0;
  for (int i = 1; i < len - 1; i++) {
    if (text[i] != '\\') {
      s[n++] = text[i];
      continue;
    }
    char e = text[++i];
    if (e == '"' || e == '\\') s[n++] = e;
    else if (e == 'n') s[n++] = '\n';
    else if (e == 't') s[n++] = '\t';
    else {
      lex_error(c, line, col + i - 1, "unknown escape '\\%c' in string (expected \\\", \\\\, \\n or \\t)",
                e >= 0x20 && e < 0x7f ? e : '?');
      return NULL;
    }
  }
  s[n] = 0;
  return s;
}

void lex_bad_char(ParseCtx *c, int line, int col, const char *text, int len) {
  unsigned char ch = (unsigned char)text[0];
  if (len > 1 || ch >= 0x80)
    lex_error(c, line, col, "unexpected character '%.*s' (expected ASCII outside comments and strings)",
              len, text);
  else if (ch >= 0x20 && ch < 0x7f)
    lex_error(c, line, col, "unexpected character '%c'", ch);
  else
    lex_error(c, line, col, "unexpected control character 0x%02x", ch);
}

/* ---- node constructors ------------------------------------------------------ */

Ast *ast_new(ParseCtx *c, AstKind kind, int line, int col) {
  Ast *n = arena_alloc(c->arena, sizeof *n);
  n->kind = kind;
  n->loc = pctx_loc(c, line, col);
  n->depth = 1;
  return n;
}

/* Records the first node that makes an expression too deep; the driver reports it
 * after the parse, and nothing walks the tree. */
static void note_depth(ParseCtx *c, Ast *n) {
  if (n->depth > FRONTEND_MAX_TREE_DEPTH && !c->too_deep) {
    c->too_deep = true;
    c->too_deep_loc = n->loc;
  }
}

Ast *ast_binary(ParseCtx *c, char op, Ast *l, Ast *r, int line, int col) {
  Ast *n = ast_new(c, AST_BINARY, line, col);
  n->op = op;
  n->a = l;
  n->b = r;
  n->depth = 1 + (l->depth > r->depth ? l->depth : r->depth);
  note_depth(c, n);
  return n;
}

Ast *ast_unary(ParseCtx *c, Ast *e, int line, int col) {
  Ast *n = ast_new(c, AST_NEG, line, col);
  n->a = e;
  n->depth = 1 + e->depth;
  note_depth(c, n);
  return n;
}

Ast *ast_call(ParseCtx *c, const char *name, Ast *args, int line, int col) {
  Ast *n = ast_new(c, AST_CALL, line, col);
  n->name = name;
  n->name_loc = n->loc;
  n->list = args;
  int depth = 0;
  for (Ast *a = args; a; a = a->next)
    if (a->depth > depth) depth = a->depth;
  n->depth = 1 + depth;
  note_depth(c, n);
  return n;
}

Ast *ast_arg(ParseCtx *c, const char *name, Ast *value, int line, int col) {
  Ast *n = ast_new(c, AST_ARG, line, col);
  n->name = name;
  n->name_loc = n->loc;
  n->a = value;
  n->depth = value->depth; /* an argument adds no nesting of its own */
  return n;
}

void ast_append(Ast **first, Ast **last, Ast *item) {
  if (!item) return;
  if (*last) (*last)->next = item;
  else *first = item;
  *last = item;
}

/* ---- syntax errors ------------------------------------------------------------ */

/* Bison's name for a symbol, without the quotes of a string alias. */
static const char *clean(const char *name, char *buf, size_t n) {
  size_t len = strlen(name);
  if (len >= 2 && name[0] == '"' && name[len - 1] == '"') {
    snprintf(buf, n, "%.*s", (int)(len - 2), name + 1);
    return buf;
  }
  return name;
}

static bool has(const char *const *exp, int n, const char *what) {
  for (int i = 0; i < n; i++)
    if (strcmp(exp[i], what) == 0) return true;
  return false;
}

void parse_report_syntax(ParseCtx *c, int line, int col, const char *found_kind,
                         const char *const *expected, int nexpected) {
  char fbuf[64], found[160];
  found_kind = clean(found_kind, fbuf, sizeof fbuf);
  if (strcmp(found_kind, "end of file") == 0)
    snprintf(found, sizeof found, "end of file");
  else if (found_kind[0] == '\'')
    snprintf(found, sizeof found, "%s", found_kind);
  else
    snprintf(found, sizeof found, "%s '%s'", found_kind, c->tok ? c->tok : "");

  if (c->ntokens <= 1 && c->want != WANT_ANY) {
    const char *what = c->want == WANT_MODEL ? "a model ('model NAME { ... }')"
                                             : "a cluster ('cluster NAME { ... }')";
    diag_error(c->d, pctx_loc(c, line, col), "expected %s, found %s", what, found);
    return;
  }

  /* Sets of alternatives that have a name of their own. */
  char cleaned[32][64];
  const char *exp[32];
  int n = 0;
  for (int i = 0; i < nexpected && i < 32; i++) exp[n] = clean(expected[i], cleaned[n], 64), n++;
  char msg[512];
  size_t len = 0;
  const char *parts[40];
  int nparts = 0;
  bool expr = has(exp, n, "integer") && has(exp, n, "name") && has(exp, n, "'('");
  bool stmt = has(exp, n, "'param'") && has(exp, n, "'weight'");
  if (stmt) parts[nparts++] = "a declaration or statement";
  if (expr) parts[nparts++] = "an expression";
  for (int i = 0; i < n; i++) {
    const char *e = exp[i];
    bool in_expr = strcmp(e, "integer") == 0 || strcmp(e, "number") == 0 ||
                   strcmp(e, "string") == 0 || strcmp(e, "name") == 0 ||
                   strcmp(e, "'('") == 0 || strcmp(e, "'-'") == 0;
    bool in_stmt = strcmp(e, "'param'") == 0 || strcmp(e, "'input'") == 0 ||
                   strcmp(e, "'weight'") == 0 || strcmp(e, "'repeat'") == 0 ||
                   strcmp(e, "'minimize'") == 0 || strcmp(e, "'train'") == 0 ||
                   strcmp(e, "'if'") == 0 || strcmp(e, "name") == 0;
    bool operator = strlen(e) == 3 && strchr("+-*/%", e[1]) && !(expr && e[1] == '-');
    if ((expr && in_expr) || (stmt && in_stmt)) continue;
    if (operator && nexpected > 4) continue; /* "an operator" is implied by the rest */
    parts[nparts++] = e;
  }
  if (nparts == 0) {
    diag_error(c->d, pctx_loc(c, line, col), "unexpected %s", found);
    return;
  }
  for (int i = 0; i < nparts && len < sizeof msg; i++) {
    const char *sep = i == 0 ? "" : i == nparts - 1 ? " or " : ", ";
    len += (size_t)snprintf(msg + len, sizeof msg - len, "%s%s", sep, parts[i]);
  }
  /* A missing ';' or ')' at the end of a line belongs after the previous token,
     not at the start of the next line where the parser noticed it. */
  if (nparts == 1 && strlen(parts[0]) == 3 && strchr(";)]}", parts[0][1]) &&
      c->prev_end_line > 0 && c->prev_end_line < line) {
    line = c->prev_end_line;
    col = c->prev_end_col;
  }
  diag_error(c->d, pctx_loc(c, line, col), "expected %s, found %s", msg, found);
}

void parse_report_message(ParseCtx *c, int line, int col, const char *msg) {
  if (strcmp(msg, "memory exhausted") == 0)
    diag_error(c->d, pctx_loc(c, line, col),
               "input nested too deeply (expected at most %d levels)", FRONTEND_MAX_DEPTH);
  else
    diag_error(c->d, pctx_loc(c, line, col), "%s", msg);
}

/* ---- driver ---------------------------------------------------------------------- */

/* Sets up ctx and a scanner over the whole source text. */
static yyscan_t start_lexer(Arena *a, Diag *d, const Source *src, ParseWant want, ParseCtx *ctx) {
  memset(ctx, 0, sizeof *ctx);
  ctx->arena = a;
  ctx->d = d;
  ctx->src = src;
  ctx->want = want;
  ctx->line = ctx->col = 1;
  yyscan_t scanner;
  PD_CHECK(yylex_init_extra(ctx, &scanner) == 0, "(yylex_init_extra)");
  yy_scan_bytes(src->text, (int)src->len, scanner); /* freed by yylex_destroy */
  return scanner;
}

Ast *frontend_parse(Arena *a, Diag *d, const Source *src, ParseWant want) {
  if (!check_bytes(d, src)) return NULL;
  ParseCtx ctx;
  yyscan_t scanner = start_lexer(a, d, src, want, &ctx);
  int errors_before = d->nerrors;
  int rc = yyparse(&ctx, scanner);
  yylex_destroy(scanner);
  if (rc != 0 || ctx.lex_error || d->nerrors > errors_before) {
    if (d->nerrors == errors_before) /* cannot happen; never fail silently */
      diag_error(d, pctx_loc(&ctx, ctx.line, ctx.col), "cannot parse this file");
    return NULL;
  }
  if (ctx.too_deep) {
    diag_error(d, ctx.too_deep_loc, "expression nested too deeply (expected at most %d levels)",
               FRONTEND_MAX_TREE_DEPTH);
    return NULL;
  }
  return ctx.root;
}

/* The lexer test's view of a token kind. */
static const char *token_name(int tok, char *buf, size_t n) {
  switch (tok) {
  case MODEL: return "MODEL";
  case CLUSTER: return "CLUSTER";
  case PARAM: return "PARAM";
  case INPUT: return "INPUT";
  case WEIGHT: return "WEIGHT";
  case REPEAT: return "REPEAT";
  case MINIMIZE: return "MINIMIZE";
  case TRAIN: return "TRAIN";
  case NODECAY: return "NODECAY";
  case INT: return "INT";
  case FLOAT: return "FLOAT";
  case IDENT: return "IDENT";
  case STRING: return "STRING";
  default: snprintf(buf, n, "'%c'", tok); return buf;
  }
}

bool frontend_dump_tokens(Arena *a, Diag *d, const Source *src, FILE *out) {
  if (!check_bytes(d, src)) return false;
  ParseCtx ctx;
  yyscan_t scanner = start_lexer(a, d, src, WANT_ANY, &ctx);
  YYSTYPE val;
  YYLTYPE loc;
  for (;;) {
    memset(&val, 0, sizeof val);
    int tok = yylex(&val, &loc, scanner);
    if (tok == END || tok == LEXERR) break;
    char buf[8];
    fprintf(out, "%d:%d %s", loc.first_line, loc.first_column, token_name(tok, buf, sizeof buf));
    if (tok == INT) fprintf(out, " %lld", (long long)val.ival);
    else if (tok == FLOAT) fprintf(out, " %.17g", val.fval);
    else if (tok == IDENT || tok == STRING) fprintf(out, " %s", val.str);
    fputc('\n', out);
  }
  yylex_destroy(scanner);
  return !ctx.lex_error;
}
