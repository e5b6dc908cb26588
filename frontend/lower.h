/* frontend/lower.h — state shared by the lowering files (lower.c, lower_expr.c,
 * eval.c, train.c, cluster.c); private to frontend/.
 *
 * Lowering walks the AST once, in order. Names live in one binding list with a
 * hash index: params, inputs, weights and values (op results). A repeat body is
 * lowered once per copy; the bindings it creates are dropped at the end of each
 * copy, and an assignment to a name bound before the repeat updates that binding,
 * which is exactly what makes a variable loop-carried. Every check that fails
 * reports on the Diag and yields -1/false; a name whose definition failed is bound
 * to tensor -1 ("poisoned"), so its uses stay silent instead of cascading.
 */
#ifndef PD2BW_FRONTEND_LOWER_H
#define PD2BW_FRONTEND_LOWER_H

#include "contract/plan_limits.h" /* PLAN_MAX_BATCH: the runtime's train.batch range */
#include "frontend/frontend.h"

/* An open-addressing map from string to int, in the arena (never shrinks). */
typedef struct NameMap {
  const char **keys;
  int *vals;
  int cap, n;
} NameMap;
/* Index of key or -1. */
int namemap_get(const NameMap *m, const char *key);
void namemap_put(Arena *a, NameMap *m, const char *key, int val);

/* A scalar: an int64 or a double (sizes must be ints; attributes may be either). */
typedef struct Value {
  bool is_int;
  int64_t i; /* is_int */
  double f;  /* always: the value as a double */
} Value;

/* Names of tensors (params live in their own map: they are numbers). */
typedef enum BindKind {
  BIND_INPUT,  /* an input tensor */
  BIND_WEIGHT, /* a trainable weight tensor */
  BIND_VALUE,  /* the result of an expression (assignable, loop-carried) */
} BindKind;

typedef struct Binding {
  const char *name;
  BindKind kind;
  int index;      /* the tensor id (-1: poisoned) */
  Loc loc;        /* where it was declared or first assigned */
} Binding;

/* Evaluation state of a param: params may name each other in any order, so they
 * are evaluated on first use with a cycle check. */
typedef enum ParamState {
  PS_TODO,   /* not evaluated yet */
  PS_ACTIVE, /* being evaluated: meeting it again is a recursive definition */
  PS_DONE,   /* value valid */
  PS_FAILED, /* an error was reported; uses stay silent */
} ParamState;

typedef struct ParamDef {
  const char *name;
  const Ast *decl;
  ParamState state;
  bool overridden; /* value came from -D */
  Value value;
} ParamDef;

/* A name that only one branch of an `if` defines (frontend/lower_if.c): after the if
 * it is not bound, and a use says why rather than "undefined name". */
typedef struct BranchOnly {
  const char *name;
  Loc loc;         /* its declaration or first assignment in that branch */
  bool in_else;    /* which branch */
} BranchOnly;

typedef struct LowerCtx {
  Arena *a;
  Diag *d;
  Graph *g;       /* NULL while lowering a cluster */
  ParamDef *params;
  int nparams;
  NameMap param_index;
  Binding *binds;
  int nbinds, cap_binds;
  NameMap bind_index; /* name -> index in binds (stale when >= nbinds) */
  NameMap tensor_names; /* every tensor name given to the graph */
  NameMap name_suffix;  /* base name -> next ".k" suffix to try */
  int region;
  const char *prefix; /* "h.3." while lowering copy 3 of the repeat, else "" */
  int eval_depth;     /* live eval_scalar frames, across param references */
  bool in_condition;  /* evaluating an if's condition: a tensor name gets its own message */
  BranchOnly *branch_only; /* scoped like binds: a repeat copy drops its own */
  int nbranch_only, cap_branch_only;
  NameMap branch_only_index; /* name -> index in branch_only (stale when >= nbranch_only) */
} LowerCtx;

/* Where a statement list sits; some statements belong at model level only. */
enum { SCOPE_REPEAT = 1, SCOPE_IF = 2 };

typedef struct ModelState {
  const Ast *repeat;   /* the model's repeat, once seen */
  const Ast *minimize; /* the minimize statement, once seen */
  const Ast *train;    /* the train section, once seen */
} ModelState;

/* Lowers a statement list in order (lower.c); scope is SCOPE_* flags. */
void lower_statements(LowerCtx *c, ModelState *st, const Ast *items, unsigned scope);
/* Reports s if it may not appear in scope (param inside a repeat, ...); true if it did. */
bool lower_misplaced(LowerCtx *c, const Ast *s, unsigned scope);
/* Binds name to tensor index (-1: poisoned) from here on. */
void lower_bind(LowerCtx *c, const char *name, BindKind kind, int index, Loc loc);
/* Lowers `if COND { ... } else { ... }` (lower_if.c): only the branch COND picks. */
void lower_if(LowerCtx *c, ModelState *st, const Ast *s, unsigned scope);
/* If name was defined in one branch of an if only, reports its use at `use` and
 * returns true; otherwise false (the caller says "undefined name"). */
bool lower_report_branch_only(LowerCtx *c, const char *name, Loc use);

/* Evaluates a size/attribute expression; false after reporting. */
bool eval_scalar(LowerCtx *c, const Ast *e, Value *out);
/* Evaluates a size: an integer in [1, limit]; `what` names it in messages. */
bool eval_size(LowerCtx *c, const Ast *e, int64_t limit, const char *what, int64_t *out);
/* Evaluates param i (on first use), reporting cycles. */
bool eval_param(LowerCtx *c, int i, Loc use, Value *out);

/* The live binding of name, or NULL. */
Binding *lower_lookup(LowerCtx *c, const char *name);
/* The closest known op or name to `name` for a "did you mean" hint, or NULL. */
const char *lower_suggest_op(const char *name);
/* A graph-unique tensor name: base, else base.1, base.2, ... */
const char *lower_unique_name(LowerCtx *c, const char *base);
/* Lowers a tensor expression (lower_expr.c); `name` (or NULL) names its result.
 * Returns the tensor id, or -1 after an error was reported (or a poisoned name was
 * used). */
int lower_tensor(LowerCtx *c, const Ast *e, const char *name);

/* Lowers the train { } section into g->train. */
void lower_train(LowerCtx *c, const Ast *train);
/* Maps a call's arguments onto named slots (positional in order, then by name):
 * reports unknown, repeated and surplus arguments. `what` names the call. */
bool bind_call_args(LowerCtx *c, const Ast *call, const char *const *names, int n,
                    const Ast **slots);

/* -D train.KEY=VALUE (frontend/train_override.c): whether text is one; whether KEY
 * is a train setting; applies every such override in overrides[0, n) to the graph's
 * train section (false after errors "on the command line"). */
bool train_override_is(const char *text);
bool train_setting_known(const char *key);
bool lower_train_overrides(LowerCtx *c, const char *const *overrides, int n);

#endif /* PD2BW_FRONTEND_LOWER_H */
