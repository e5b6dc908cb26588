/* frontend/frontend.h — the model language: text in, IR graph out.
 *
 * The front end owns the flex lexer and bison grammar of model and cluster files
 * (one lexer, a reentrant pure parser with locations), the AST they build in the
 * caller's arena, and the lowering of that AST into an IR Graph (ir/ir.h): name
 * resolution, size arithmetic with overflow checks, op lookup through the op
 * table, the unrolled repeat block and its regions, the training section, and the
 * cluster description. Every mistake in a file is reported on the caller's Diag as
 * `file:line:col: error: ...` with the source line and a caret; the functions then
 * return NULL/false and the caller writes nothing. No input makes the front end
 * crash, loop or recurse without bound (expression nesting is capped at
 * FRONTEND_MAX_DEPTH, expression trees at FRONTEND_MAX_TREE_DEPTH, sizes at FRONTEND_MAX_NUMEL elements per tensor).
 * docs/language.md is the user's reference for everything accepted here.
 */
#ifndef PD2BW_FRONTEND_H
#define PD2BW_FRONTEND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "ir/ir.h"

/* Deepest bracket and unary-minus nesting accepted before "nested too deeply" (the
 * lexer's bracket count and the parser's stack). */
#define FRONTEND_MAX_DEPTH 256
/* Deepest expression tree, which the passes after the parser walk recursively: a
 * chain of binary operators (`1+1+...+1`, left associative) is as deep as it is long,
 * so this is larger than FRONTEND_MAX_DEPTH (issue 24: a sum of 300 terms was refused
 * as "nested too deeply"); bounded, so no walk recurses without limit, and below
 * the evaluator's own bound of 1024 levels (frontend/eval.c MAX_EVAL_DEPTH). */
#define FRONTEND_MAX_TREE_DEPTH 1000
/* Largest tensor accepted, in elements per sample (2^40). */
#define FRONTEND_MAX_NUMEL ((int64_t)1 << 40)
/* Largest dimension, and largest batch: the kernels take sizes as 32-bit ints. */
#define FRONTEND_MAX_DIM 2147483647
/* Largest tensor over a whole batch (2^48 elements: 1 PiB of float32), so that the
 * planner's and the layouts' byte counts at any microbatch size stay far from
 * int64 overflow. */
#define FRONTEND_MAX_BATCH_NUMEL ((int64_t)1 << 48)
/* Largest file accepted, in bytes. */
#define FRONTEND_MAX_FILE (64 << 20)
/* Most copies a repeat block may unroll into. */
#define FRONTEND_MAX_REPEAT 10000
/* Most forward ops a model may lower into (after unrolling). */
#define FRONTEND_MAX_OPS 1000000

/* Parses and lowers a model file; overrides are "name=value" strings from -D.
   Returns NULL after reporting errors on d. */
Graph *frontend_load_model(Arena *a, Diag *d, const char *path, const char *const *overrides,
                           int noverrides);
/* Parses a cluster file into *out. Returns false after reporting errors. */
bool frontend_load_cluster(Arena *a, Diag *d, const char *path, Cluster *out);
/* --emit=ast: prints the AST of a file (model or cluster), stable format.
   Returns false (and prints nothing) after reporting errors. */
bool frontend_dump_ast(Arena *a, Diag *d, const char *path, FILE *out);

/* The same three from a buffer in memory (tests, the fuzzer). `path` names the
   text in diagnostics; text need not be NUL-terminated and is copied. */
Graph *frontend_load_model_buffer(Arena *a, Diag *d, const char *path, const char *text,
                                  size_t len, const char *const *overrides, int noverrides);
bool frontend_load_cluster_buffer(Arena *a, Diag *d, const char *path, const char *text,
                                  size_t len, Cluster *out);
bool frontend_dump_ast_buffer(Arena *a, Diag *d, const char *path, const char *text, size_t len,
                              FILE *out);

#include "frontend/ast.h"

#endif /* PD2BW_FRONTEND_H */
