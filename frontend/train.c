/* frontend/train.c — the train { } section into TrainConfig, and the argument
 * binder shared with initialisers and the cluster file.
 *
 * The section is table-driven: each key names the setter that validates it, so
 * an unknown key, a repeated key and a value out of range all get one message
 * naming what was expected. Defaults (documented in docs/language.md) are set by
 * frontend_lower_model before the section is read.
 */
#include <math.h>
#include <string.h>

#include "frontend/lower.h"

bool bind_call_args(LowerCtx *c, const Ast *call, const char *const *names, int n,
                    const Ast **slots) {
  int next = 0;
  bool ok = true;
  for (int i = 0; i < n; i++) slots[i] = NULL;
  for (const Ast *arg = call->list; arg; arg = arg->next) {
    int k = -1;
    if (!arg->name) {
      if (next >= n) {
        diag_error(c->d, arg->loc, "'%s' takes at most %d argument%s", call->name, n,
                   n == 1 ? "" : "s");
        return false;
      }
      k = next++;
    } else {
      for (int i = 0; i < n; i++)
        if (strcmp(names[i], arg->name) == 0) k = i;
      if (k < 0) {
        const char *list = "";
        for (int i = 0; i < n; i++)
          list = arena_printf(c->a, "%s%s%s", list, i == 0 ? "" : i == n - 1 ? " or " : ", ",
                              names[i]);
        diag_error(c->d, arg->loc, "'%s' has no argument '%s' (expected %s)", call->name,
                   arg->name, list);
        ok = false;
        continue;
      }
    }
    if (slots[k]) {
      diag_error(c->d, arg->loc, "argument '%s' of '%s' given twice", names[k], call->name);
      ok = false;
      continue;
    }
    slots[k] = arg->a;
  }
  return ok;
}

/* A number in [lo, hi] (hi < 0: no upper bound); open_lo excludes lo. */
static bool number_in(LowerCtx *c, const Ast *e, const char *what, double lo, bool open_lo,
                      double hi, bool open_hi, double *out) {
  Value v;
  if (!eval_scalar(c, e, &v)) return false;
  bool below = open_lo ? !(v.f > lo) : !(v.f >= lo);
  bool above = !isfinite(v.f) || (hi >= 0 && (open_hi ? !(v.f < hi) : !(v.f <= hi)));
  if (below || above) {
    char range[96];
    if (hi < 0) snprintf(range, sizeof range, "finite and %s %g", open_lo ? ">" : ">=", lo);
    else snprintf(range, sizeof range, "in %c%g, %g%c", open_lo ? '(' : '[', lo, hi,
                  open_hi ? ')' : ']');
    diag_error(c->d, e->loc, "%s is %g (expected a number %s)", what, v.f, range);
    return false;
  }
  *out = v.f;
  return true;
}

/* An integer in [lo, hi]; the message gives the whole range (issue 24, item 9). */
static bool int_in(LowerCtx *c, const Ast *e, const char *what, int64_t lo, int64_t hi, int64_t *out) {
  Value v;
  if (!eval_scalar(c, e, &v)) return false;
  if (!v.is_int || v.i < lo || v.i > hi) {
    if (v.is_int) diag_error(c->d, e->loc, "%s is %lld (expected an integer in [%lld, %lld])", what,
                             (long long)v.i, (long long)lo, (long long)hi);
    else diag_error(c->d, e->loc, "%s is %g (expected an integer in [%lld, %lld])", what, v.f,
                    (long long)lo, (long long)hi);
    return false;
  }
  *out = v.i;
  return true;
}

/* The runtime's ranges (docs/plan-format.md, "What the runtime checks"), so that every
 * plan pd2bwc writes is one pd2bwrun reads: a step count is a JSON number (2^53). */
#define MAX_STEPS ((int64_t)1 << 53)

/* A batch or microbatch size: at most the runtime's PLAN_MAX_BATCH. */
static bool batch_size(LowerCtx *c, const Ast *e, const char *what, int64_t *out) {
  return int_in(c, e, what, 1, PLAN_MAX_BATCH, out);
}

static const Ast *expect_call(LowerCtx *c, const Ast *e, const char *what, const char *choices) {
  if (e->kind == AST_CALL) return e;
  if (e->kind == AST_NAME) { /* `optimizer = sgd;` means sgd() with defaults */
    Ast *call = arena_alloc(c->a, sizeof *call);
    *call = *e;
    call->kind = AST_CALL;
    call->list = NULL;
    return call;
  }
  diag_error(c->d, e->loc, "%s must be one of %s", what, choices);
  return NULL;
}

static bool set_optimizer(LowerCtx *c, const Ast *e, TrainConfig *t) {
  const Ast *call = expect_call(c, e, "optimizer", "adamw(...) or sgd(...)");
  if (!call) return false;
  bool ok = true;
  if (strcmp(call->name, "adamw") == 0) {
    static const char *const names[] = {"lr", "beta1", "beta2", "eps", "weight_decay"};
    const Ast *s[5];
    if (!bind_call_args(c, call, names, 5, s)) return false;
    t->optimizer = OPT_ADAMW;
    if (s[0]) ok &= number_in(c, s[0], "lr", 0, true, -1, false, &t->lr);
    if (s[1]) ok &= number_in(c, s[1], "beta1", 0, false, 1, true, &t->beta1);
    if (s[2]) ok &= number_in(c, s[2], "beta2", 0, false, 1, true, &t->beta2);
    if (s[3]) ok &= number_in(c, s[3], "eps", 0, true, -1, false, &t->eps);
    if (s[4]) ok &= number_in(c, s[4], "weight_decay", 0, false, -1, false, &t->weight_decay);
  } else if (strcmp(call->name, "sgd") == 0) {
    static const char *const names[] = {"lr", "momentum", "weight_decay"};
    const Ast *s[3];
    if (!bind_call_args(c, call, names, 3, s)) return false;
    t->optimizer = OPT_SGD;
    t->lr = 0.01;
    t->beta1 = 0; /* momentum */
    if (s[0]) ok &= number_in(c, s[0], "lr", 0, true, -1, false, &t->lr);
    if (s[1]) ok &= number_in(c, s[1], "momentum", 0, false, 1, true, &t->beta1);
    if (s[2]) ok &= number_in(c, s[2], "weight_decay", 0, false, -1, false, &t->weight_decay);
  } else {
    diag_error(c->d, call->loc, "unknown optimizer '%s' (expected adamw or sgd)", call->name);
    return false;
  }
  return ok;
}

static bool set_schedule(LowerCtx *c, const Ast *e, TrainConfig *t, const Ast **lr_from) {
  const Ast *call = expect_call(c, e, "lr_schedule", "constant(...), cosine(...) or linear(...)");
  if (!call) return false;
  bool ok = true;
  if (strcmp(call->name, "constant") == 0) {
    static const char *const names[] = {"lr"};
    const Ast *s[1];
    if (!bind_call_args(c, call, names, 1, s)) return false;
    t->schedule = LR_CONSTANT;
    *lr_from = s[0]; /* applied after the optimizer, whatever the order */
    return true;
  }
  if (strcmp(call->name, "cosine") == 0) t->schedule = LR_COSINE;
  else if (strcmp(call->name, "linear") == 0) t->schedule = LR_LINEAR;
  else {
    diag_error(c->d, call->loc, "unknown lr_schedule '%s' (expected constant, cosine or "
               "linear)", call->name);
    return false;
  }
  static const char *const names[] = {"warmup", "steps", "min_lr"};
  const Ast *s[3];
  if (!bind_call_args(c, call, names, 3, s)) return false;
  if (s[0]) ok &= int_in(c, s[0], "warmup", 0, MAX_STEPS, &t->warmup);
  if (s[1]) ok &= int_in(c, s[1], "steps", 1, MAX_STEPS, &t->steps);
  if (s[2]) ok &= number_in(c, s[2], "min_lr", 0, false, -1, false, &t->min_lr);
  if (ok && t->steps && t->warmup > t->steps) {
    diag_error(c->d, s[0]->loc, "warmup is %lld steps, more than the %lld steps of the "
               "schedule (expected warmup <= steps)", (long long)t->warmup, (long long)t->steps);
    ok = false;
  }
  return ok;
}

static const char *const train_keys[] = {"batch", "microbatch", "optimizer", "lr_schedule",
                                         "clip", "seed", "delay_comp", "flush_steps", "predict"};
enum { NKEYS = sizeof train_keys / sizeof train_keys[0] };

void lower_train(LowerCtx *c, const Ast *train) {
  TrainConfig *t = &c->g->train;
  t->loc = train->loc;
  const Ast *given[NKEYS] = {NULL};
  for (const Ast *s = train->list; s; s = s->next) {
    int k = -1;
    for (int i = 0; i < NKEYS; i++)
      if (strcmp(train_keys[i], s->name) == 0) k = i;
    if (k < 0) {
      diag_error(c->d, s->name_loc, "unknown train setting '%s' (expected batch, microbatch, "
                 "optimizer, lr_schedule, clip, seed, delay_comp, flush_steps or predict)", s->name);
      continue;
    }
    if (given[k]) {
      diag_error(c->d, s->name_loc, "'%s' is set twice", s->name);
      diag_note(c->d, given[k]->name_loc, "the first setting is here");
      continue;
    }
    given[k] = s;
  }
  bool ok = true;
  const Ast *const_lr = NULL;
  if (given[0]) ok &= batch_size(c, given[0]->a, "batch", &t->batch);
  if (given[1]) ok &= batch_size(c, given[1]->a, "microbatch", &t->microbatch);
  if (given[2]) ok &= set_optimizer(c, given[2]->a, t);
  if (given[3]) ok &= set_schedule(c, given[3]->a, t, &const_lr);
  if (const_lr) ok &= number_in(c, const_lr, "lr", 0, true, -1, false, &t->lr);
  if (given[4]) ok &= number_in(c, given[4]->a, "clip", 0, false, -1, false, &t->clip);
  if (given[5]) {
    int64_t seed;
    if (int_in(c, given[5]->a, "seed", 0, INT64_MAX, &seed)) t->seed = (uint64_t)seed;
    else ok = false;
  }
  if (given[6] && number_in(c, given[6]->a, "delay_comp", 0, false, -1, false, &t->delay_comp) &&
      t->delay_comp > 0 && t->optimizer != OPT_ADAMW) /* it corrects Adam's first moment */
    diag_error(c->d, given[6]->a->loc, "delay_comp is a setting of adamw, the optimizer is %s",
               optimizer_name(t->optimizer));
  if (given[7]) {
    int64_t k;
    if (int_in(c, given[7]->a, "flush_steps", 0, MAX_STEPS, &k)) t->flush_steps = k;
  }
  if (given[8]) number_in(c, given[8]->a, "predict", 0, false, 10, false, &t->predict);
  if (ok && t->batch && t->microbatch && t->batch % t->microbatch != 0)
    diag_error(c->d, given[1]->a->loc, "microbatch %lld does not divide batch %lld (expected "
               "batch = microbatch x replicas x microbatches)", (long long)t->microbatch,
               (long long)t->batch);
}
