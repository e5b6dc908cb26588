/* frontend/ast.h — the syntax tree of model and cluster files (private to frontend/,
 * included by frontend.h so tests can inspect it).
 *
 * One node type for everything: the grammar only builds nodes and the later
 * passes (lower.c, cluster.c, dump.c) give them meaning, which keeps every
 * "expected ..." message about meaning in one place instead of in bison actions.
 * Lists (statements, call arguments, dimensions) are chained through `next`.
 * All nodes live in the caller's arena and are never freed one by one.
 */
#ifndef PD2BW_FRONTEND_AST_H
#define PD2BW_FRONTEND_AST_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "ir/ir.h"

typedef enum AstKind {
  /* ---- expressions ---- */
  AST_INT,    /* integer literal: ival */
  AST_FLOAT,  /* floating literal: fval */
  AST_STRING, /* string literal: name holds the unescaped text */
  AST_NAME,   /* a reference: name */
  AST_BINARY, /* a op b; op is one of + - * / % */
  AST_NEG,    /* -a */
  AST_CALL,   /* name(list): list is a chain of AST_ARG */
  AST_ARG,    /* one call argument: a is the value; name is NULL (positional) or the
                 attribute name of `name = a` */
  /* ---- declarations and statements ---- */
  AST_TYPE,     /* name is the dtype word (f32, i32); list is the chain of dimension
                   expressions (may be empty: a scalar) */
  AST_PARAM,    /* param name = a; */
  AST_INPUT,    /* input name : a(TYPE); */
  AST_WEIGHT,   /* weight name : a(TYPE) = b(init expression) [nodecay]; flag = nodecay */
  AST_ASSIGN,   /* name = a; */
  AST_REPEAT,   /* repeat name[a] { list } */
  AST_IF,       /* if a { list } else { b... }: a is the condition, b the first statement of
                   the else branch (NULL: none; `else if` is an else holding one AST_IF) */
  AST_MINIMIZE, /* minimize name; */
  AST_TRAIN,    /* train { list of AST_SETTING } */
  AST_SETTING,  /* name = a; inside train{} and cluster{} */
  /* ---- files ---- */
  AST_MODEL,   /* model name { list } */
  AST_CLUSTER, /* cluster name { list of AST_SETTING } */
} AstKind;

typedef struct Ast Ast;
struct Ast {
  AstKind kind;
  Loc loc;          /* where the construct starts (the operator for AST_BINARY) */
  Loc name_loc;     /* where `name` was written, for "undefined"/"duplicate" errors */
  Ast *next;        /* next element of the list this node is in */
  const char *name; /* see AstKind */
  int64_t ival;     /* AST_INT */
  double fval;      /* AST_FLOAT */
  char op;          /* AST_BINARY */
  bool flag;        /* AST_WEIGHT: nodecay */
  int depth;        /* expression nesting depth of this subtree (1 for a leaf) */
  Ast *a, *b;       /* operands, see AstKind */
  Ast *list;        /* first element of a list, see AstKind */
};

/* Which top-level keyword the caller wants; shapes the "expected ..." message for
 * an empty file or one that starts with something else. */
typedef enum ParseWant {
  WANT_ANY,     /* --emit=ast: either */
  WANT_MODEL,   /* frontend_load_model */
  WANT_CLUSTER, /* frontend_load_cluster */
} ParseWant;

/* Parses a whole file into its AST (AST_MODEL or AST_CLUSTER). `text` must stay
 * alive as long as the AST (it does when it comes from the arena). Rejects NUL
 * bytes and invalid UTF-8 before lexing. Returns NULL after reporting errors. */
Ast *frontend_parse(Arena *a, Diag *d, const Source *src, ParseWant want);
/* Reads the file, or copies the buffer, into an arena Source registered with d. */
const Source *frontend_source_file(Arena *a, Diag *d, const char *path);
const Source *frontend_source_buffer(Arena *a, Diag *d, const char *path, const char *text,
                                     size_t len);
/* Prints one line per token: "line:col kind text" (the lexer test reads it).
 * Returns false after a lexical error. */
bool frontend_dump_tokens(Arena *a, Diag *d, const Source *src, FILE *out);
/* Prints the AST, one construct per line, indented by nesting. */
void ast_dump(const Ast *root, FILE *out);
/* Prints an expression fully parenthesised, as the AST dump shows it. */
void ast_print_expr(const Ast *e, FILE *out);

/* Lowering, from lower.c and cluster.c. */
Graph *frontend_lower_model(Arena *a, Diag *d, const Ast *model, const char *const *overrides,
                            int noverrides);
bool frontend_lower_cluster(Arena *a, Diag *d, const Ast *cluster, Cluster *out);

#endif /* PD2BW_FRONTEND_AST_H */
