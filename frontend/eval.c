/* frontend/eval.c — sizes and attributes: integer and float arithmetic on params.
 *
 * Integers stay exact int64 (every + - * / % is overflow-checked; / and % of two
 * integers truncate as in C), anything involving a float is a double, and a
 * result that is not finite is an error rather than a silent inf. The walk is
 * recursive, but the parser caps expression depth and eval_depth caps the chain
 * of param references, so no input can exhaust the stack.
 */
#include <math.h>
#include <string.h>

#include "frontend/lower.h"

/* Most nested evaluations, counting through param references (a = b + 1 where
 * b = c * 2 ...). Each level is a small frame; this bounds the stack. */
enum { MAX_EVAL_DEPTH = 1024 };

static Value int_value(int64_t i) {
  return (Value){true, i, (double)i};
}
static Value float_value(double f) {
  return (Value){false, 0, f};
}

bool eval_param(LowerCtx *c, int i, Loc use, Value *out) {
  ParamDef *p = &c->params[i];
  switch (p->state) {
  case PS_DONE:
    *out = p->value;
    return true;
  case PS_FAILED:
    return false;
  case PS_ACTIVE:
    diag_error(c->d, use, "param '%s' is defined in terms of itself (expected a definition "
               "that does not use '%s')", p->name, p->name);
    p->state = PS_FAILED;
    return false;
  case PS_TODO:
    break;
  }
  p->state = PS_ACTIVE;
  Value v;
  bool ok = eval_scalar(c, p->decl->a, &v);
  if (p->state == PS_FAILED) return false; /* the cycle came back here */
  if (!ok) {
    p->state = PS_FAILED;
    return false;
  }
  p->state = PS_DONE;
  p->value = v;
  *out = v;
  return true;
}

static bool eval_name(LowerCtx *c, const Ast *e, Value *out) {
  int pi = namemap_get(&c->param_index, e->name);
  if (pi >= 0) return eval_param(c, pi, e->loc, out);
  Binding *b = lower_lookup(c, e->name);
  if (b) {
    const char *what = b->kind == BIND_INPUT ? "an input tensor"
                       : b->kind == BIND_WEIGHT ? "a weight tensor" : "a tensor";
    if (c->in_condition) /* an if picks its branch when the model compiles */
      diag_error(c->d, e->loc, "'%s' is %s, which has no value when the model is compiled "
                 "(expected a condition over params and numbers)", e->name, what);
    else
      diag_error(c->d, e->loc, "'%s' is %s (expected a number or a param)", e->name, what);
    return false;
  }
  if (strcmp(e->name, "B") == 0) {
    diag_error(c->d, e->loc, "the microbatch dimension 'B' has no value here (expected a "
               "number or a param)");
    return false;
  }
  diag_error(c->d, e->loc, "undefined name '%s' (expected a number or a param)", e->name);
  return false;
}

static bool eval_call(LowerCtx *c, const Ast *e, Value *out) {
  if (strcmp(e->name, "sqrt") != 0) {
    if (op_lookup(e->name) >= 0)
      diag_error(c->d, e->loc, "'%s' is an op and gives a tensor (expected a number)", e->name);
    else
      diag_error(c->d, e->loc, "unknown function '%s' (expected sqrt or arithmetic)", e->name);
    return false;
  }
  const Ast *arg = e->list;
  if (!arg || arg->next || arg->name) {
    diag_error(c->d, e->loc, "sqrt takes one argument, as in sqrt(2 * layers)");
    return false;
  }
  Value v;
  if (!eval_scalar(c, arg->a, &v)) return false;
  if (v.f < 0) {
    diag_error(c->d, arg->a->loc, "sqrt of the negative number %g (expected a value >= 0)", v.f);
    return false;
  }
  *out = float_value(sqrt(v.f));
  return true;
}

static bool eval_binary(LowerCtx *c, const Ast *e, Value *out) {
  Value l, r;
  bool okl = eval_scalar(c, e->a, &l);
  bool okr = eval_scalar(c, e->b, &r);
  if (!okl || !okr) return false;
  if (l.is_int && r.is_int) {
    int64_t v = 0;
    bool overflow = false;
    switch (e->op) {
    case '+': overflow = __builtin_add_overflow(l.i, r.i, &v); break;
    case '-': overflow = __builtin_sub_overflow(l.i, r.i, &v); break;
    case '*': overflow = __builtin_mul_overflow(l.i, r.i, &v); break;
    case '/':
    case '%':
      if (r.i == 0) {
        diag_error(c->d, e->loc, "division by zero (%lld %c 0)", (long long)l.i, e->op);
        return false;
      }
      overflow = l.i == INT64_MIN && r.i == -1;
      if (!overflow) v = e->op == '/' ? l.i / r.i : l.i % r.i;
      break;
    default: PD_CHECK(0, "(binary op %c)", e->op);
    }
    if (overflow) {
      diag_error(c->d, e->loc, "integer overflow in %lld %c %lld (expected a result within "
                 "64-bit signed integers)", (long long)l.i, e->op, (long long)r.i);
      return false;
    }
    *out = int_value(v);
    return true;
  }
  double v = 0;
  switch (e->op) {
  case '+': v = l.f + r.f; break;
  case '-': v = l.f - r.f; break;
  case '*': v = l.f * r.f; break;
  case '/':
    if (r.f == 0) {
      diag_error(c->d, e->loc, "division by zero (%g / 0)", l.f);
      return false;
    }
    v = l.f / r.f;
    break;
  case '%':
    diag_error(c->d, e->loc, "'%%' needs two integers (found %s %% %s)",
               l.is_int ? "an integer" : "a number", r.is_int ? "an integer" : "a number");
    return false;
  default: PD_CHECK(0, "(binary op %c)", e->op);
  }
  if (!isfinite(v)) {
    diag_error(c->d, e->loc, "number overflow in %g %c %g (expected a finite result)", l.f,
               e->op, r.f);
    return false;
  }
  *out = float_value(v);
  return true;
}

bool eval_scalar(LowerCtx *c, const Ast *e, Value *out) {
  if (c->eval_depth >= MAX_EVAL_DEPTH) {
    diag_error(c->d, e->loc, "params defined through too many levels (expected at most %d)",
               MAX_EVAL_DEPTH);
    return false;
  }
  c->eval_depth++;
  bool ok = false;
  switch (e->kind) {
  case AST_INT: *out = int_value(e->ival), ok = true; break;
  case AST_FLOAT: *out = float_value(e->fval), ok = true; break;
  case AST_NAME: ok = eval_name(c, e, out); break;
  case AST_CALL: ok = eval_call(c, e, out); break;
  case AST_BINARY: ok = eval_binary(c, e, out); break;
  case AST_NEG: {
    Value v;
    ok = eval_scalar(c, e->a, &v);
    if (!ok) break;
    if (v.is_int && v.i == INT64_MIN) {
      diag_error(c->d, e->loc, "integer overflow in -(%lld)", (long long)v.i);
      ok = false;
      break;
    }
    *out = v.is_int ? int_value(-v.i) : float_value(-v.f);
    break;
  }
  case AST_STRING:
    diag_error(c->d, e->loc, "expected a number, found a string");
    break;
  case AST_ARG: case AST_TYPE: case AST_PARAM: case AST_INPUT: case AST_WEIGHT:
  case AST_ASSIGN: case AST_REPEAT: case AST_IF: case AST_MINIMIZE: case AST_TRAIN: case AST_SETTING:
  case AST_MODEL: case AST_CLUSTER:
    PD_CHECK(0, "(eval_scalar on node kind %d)", (int)e->kind);
  }
  c->eval_depth--;
  return ok;
}

bool eval_size(LowerCtx *c, const Ast *e, int64_t limit, const char *what, int64_t *out) {
  Value v;
  if (!eval_scalar(c, e, &v)) return false;
  if (!v.is_int) {
    char num[40]; /* "2.0", not "2": the value is a float even when integral */
    snprintf(num, sizeof num, "%g", v.f);
    if (!strpbrk(num, ".en")) strcat(num, ".0");
    diag_error(c->d, e->loc, "%s is %s (expected an integer)", what, num);
    return false;
  }
  if (v.i < 1) {
    diag_error(c->d, e->loc, "%s is %lld (expected at least 1)", what, (long long)v.i);
    return false;
  }
  if (v.i > limit) {
    diag_error(c->d, e->loc, "%s is %lld (expected at most %lld)", what, (long long)v.i,
               (long long)limit);
    return false;
  }
  *out = v.i;
  return true;
}
