/* frontend/dump.c — the --emit=ast printer.
 *
 * One construct per line, two spaces of indentation per nesting level, the
 * source position last ("@line:col"); expressions fully parenthesised so the
 * reader sees how precedence was resolved. Floats print in the shortest form that
 * reads back to the same double, so the output is stable across platforms.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "frontend/frontend.h"

static void print_double(double v, FILE *out) {
  char buf[64];
  for (int prec = 1; prec <= 17; prec++) {
    snprintf(buf, sizeof buf, "%.*g", prec, v);
    if (strtod(buf, NULL) == v) break;
  }
  /* Plain decimals read better than 1.5e+03 in the range people write them. */
  double mag = fabs(v);
  if (strpbrk(buf, "eE") && mag >= 1e-4 && mag < 1e15) {
    for (int digits = 0; digits <= 20; digits++) {
      snprintf(buf, sizeof buf, "%.*f", digits, v);
      if (strtod(buf, NULL) == v) break;
    }
  }
  fputs(buf, out);
  if (!strpbrk(buf, ".eEn")) fputs(".0", out); /* keep floats recognisable */
}

static void print_string(const char *s, FILE *out) {
  fputc('"', out);
  for (; *s; s++) {
    if (*s == '"' || *s == '\\') fprintf(out, "\\%c", *s);
    else if (*s == '\n') fputs("\\n", out);
    else if (*s == '\t') fputs("\\t", out);
    else fputc(*s, out);
  }
  fputc('"', out);
}

void ast_print_expr(const Ast *e, FILE *out) {
  switch (e->kind) {
  case AST_INT: fprintf(out, "%lld", (long long)e->ival); return;
  case AST_FLOAT: print_double(e->fval, out); return;
  case AST_STRING: print_string(e->name, out); return;
  case AST_NAME: fputs(e->name, out); return;
  case AST_NEG:
    fputs("(-", out);
    ast_print_expr(e->a, out);
    fputc(')', out);
    return;
  case AST_BINARY:
    fputc('(', out);
    ast_print_expr(e->a, out);
    fprintf(out, " %c ", e->op);
    ast_print_expr(e->b, out);
    fputc(')', out);
    return;
  case AST_CALL:
    fprintf(out, "%s(", e->name);
    for (const Ast *a = e->list; a; a = a->next) {
      if (a != e->list) fputs(", ", out);
      ast_print_expr(a, out);
    }
    fputc(')', out);
    return;
  case AST_ARG:
    if (e->name) fprintf(out, "%s = ", e->name);
    ast_print_expr(e->a, out);
    return;
  case AST_TYPE:
    fprintf(out, "%s[", e->name);
    for (const Ast *dim = e->list; dim; dim = dim->next) {
      if (dim != e->list) fputs(", ", out);
      ast_print_expr(dim, out);
    }
    fputc(']', out);
    return;
  case AST_PARAM: case AST_INPUT: case AST_WEIGHT: case AST_ASSIGN: case AST_REPEAT:
  case AST_IF: case AST_MINIMIZE: case AST_TRAIN: case AST_SETTING: case AST_MODEL: case AST_CLUSTER:
    break;
  }
  PD_CHECK(0, "(ast_print_expr on node kind %d)", (int)e->kind);
}

static void dump_list(const Ast *list, int indent, FILE *out);

static void dump_node(const Ast *s, int indent, FILE *out) {
  fprintf(out, "%*s", 2 * indent, "");
  switch (s->kind) {
  case AST_MODEL: fprintf(out, "model %s", s->name); break;
  case AST_CLUSTER: fprintf(out, "cluster %s", s->name); break;
  case AST_PARAM: fprintf(out, "param %s = ", s->name); ast_print_expr(s->a, out); break;
  case AST_INPUT: fprintf(out, "input %s : ", s->name); ast_print_expr(s->a, out); break;
  case AST_WEIGHT:
    fprintf(out, "weight %s : ", s->name);
    ast_print_expr(s->a, out);
    fputs(" = ", out);
    ast_print_expr(s->b, out);
    if (s->flag) fputs(" nodecay", out);
    break;
  case AST_ASSIGN: fprintf(out, "%s = ", s->name); ast_print_expr(s->a, out); break;
  case AST_SETTING: fprintf(out, "%s = ", s->name); ast_print_expr(s->a, out); break;
  case AST_REPEAT: fprintf(out, "repeat %s[", s->name); ast_print_expr(s->a, out); fputc(']', out); break;
  case AST_IF: fputs("if ", out); ast_print_expr(s->a, out); break;
  case AST_MINIMIZE: fprintf(out, "minimize %s", s->name); break;
  case AST_TRAIN: fputs("train", out); break;
  case AST_INT: case AST_FLOAT: case AST_STRING: case AST_NAME: case AST_BINARY:
  case AST_NEG: case AST_CALL: case AST_ARG: case AST_TYPE:
    ast_print_expr(s, out);
    break;
  }
  fprintf(out, "  @%d:%d\n", s->loc.line, s->loc.col);
  bool has_body = s->kind == AST_MODEL || s->kind == AST_CLUSTER || s->kind == AST_REPEAT ||
                  s->kind == AST_TRAIN;
  if (has_body) dump_list(s->list, indent + 1, out);
  if (s->kind == AST_IF) {
    dump_list(s->list, indent + 1, out);
    if (s->b) {
      fprintf(out, "%*selse\n", 2 * indent, "");
      dump_list(s->b, indent + 1, out);
    }
  }
}

/* Statement lists nest only through repeat, if and train (bounded by the bracket
 * depth the lexer allows), so this recursion is shallow. */
static void dump_list(const Ast *list, int indent, FILE *out) {
  for (const Ast *s = list; s; s = s->next) dump_node(s, indent, out);
}

void ast_dump(const Ast *root, FILE *out) {
  dump_node(root, 0, out);
}
