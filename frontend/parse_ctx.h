/* frontend/parse_ctx.h — what the generated lexer and parser share with parse.c.
 *
 * Private to the parser: the flex rules and bison actions call only these
 * helpers, so the generated files hold no logic of their own and the logic stays
 * under the strict warning set. A lexical error is reported here at once and the
 * lexer then returns the LEXERR token, which the syntax-error reporter knows to
 * keep quiet about (one message per mistake).
 */
#ifndef PD2BW_FRONTEND_PARSE_CTX_H
#define PD2BW_FRONTEND_PARSE_CTX_H

#include <stdbool.h>
#include <stdint.h>

#include "frontend/ast.h"

typedef struct ParseCtx {
  Arena *arena;
  Diag *d;
  const Source *src;
  ParseWant want;
  Ast *root;          /* set by the start rule */
  int line, col;      /* position of the next byte the lexer reads */
  int depth;          /* open brackets of any kind */
  int ntokens;        /* tokens handed to the parser so far */
  int last_end_line, last_end_col; /* just after the last token handed over */
  int prev_end_line, prev_end_col; /* just after the token before it */
  const char *tok;    /* text of the last token (for "found ..."), arena copy */
  bool lex_error;     /* a lexical error was reported */
  bool too_deep;      /* an expression exceeded FRONTEND_MAX_TREE_DEPTH */
  Loc too_deep_loc;
} ParseCtx;

/* Called on every match (YY_USER_ACTION): sets the token's location and moves
 * the position over its text. */
void lex_advance(ParseCtx *c, int *first_line, int *first_col, int *last_line, int *last_col,
                 const char *text, int len);
/* Records a token handed to the parser; returns tok. */
int lex_token(ParseCtx *c, int tok, const char *text, int len);
void lex_error(ParseCtx *c, int line, int col, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* Literal conversions; false after reporting an error at line:col. */
bool lex_int(ParseCtx *c, int line, int col, const char *text, int64_t *out);
bool lex_float(ParseCtx *c, int line, int col, const char *text, double *out);
/* Unescapes a string literal's text (quotes included); NULL after an error. */
const char *lex_string(ParseCtx *c, int line, int col, const char *text, int len);
/* Reports a byte that starts no token. */
void lex_bad_char(ParseCtx *c, int line, int col, const char *text, int len);

/* Node constructors used by the grammar actions. */
Loc pctx_loc(const ParseCtx *c, int line, int col);
Ast *ast_new(ParseCtx *c, AstKind kind, int line, int col);
Ast *ast_binary(ParseCtx *c, char op, Ast *l, Ast *r, int line, int col);
Ast *ast_unary(ParseCtx *c, Ast *e, int line, int col);
Ast *ast_call(ParseCtx *c, const char *name, Ast *args, int line, int col);
Ast *ast_arg(ParseCtx *c, const char *name, Ast *value, int line, int col);
/* Appends `item` to the list whose first and last nodes are *first, *last. */
void ast_append(Ast **first, Ast **last, Ast *item);

/* The syntax-error reporter's help: a name for a token kind code. */
void parse_report_syntax(ParseCtx *c, int line, int col, const char *found_kind,
                         const char *const *expected, int nexpected);
void parse_report_message(ParseCtx *c, int line, int col, const char *msg);

#endif /* PD2BW_FRONTEND_PARSE_CTX_H */
