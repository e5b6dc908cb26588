/* frontend/train_override.c — train settings from pd2bwc's command line:
 * `-D train.KEY=VALUE` overrides one setting of the model's train section.
 *
 * Applied after the section (or its defaults, for a model without one), so the
 * command line wins whatever the file says; the optimizer first, so `-D train.
 * optimizer=sgd -D train.momentum=0.9` works in either order. The ranges are the
 * section's (frontend/train.c, docs/language.md 3.9), and every message names the
 * setting and what it accepts. The overrides are kept, as given, in
 * TrainConfig.overrides, which plan.json records as train.overrides.
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "frontend/lower.h"

typedef enum Kind { K_INT, K_REAL, K_OPTIMIZER, K_SCHEDULE } Kind;

typedef struct Setting {
  const char *key;
  Kind kind;
  double lo, hi;          /* K_INT/K_REAL: [lo, hi] (hi < 0: no bound) */
  bool open_lo, open_hi;  /* K_REAL: exclusive bounds */
  int only;               /* -1: any optimizer; else the optimizer it belongs to */
} Setting;

/* In the order applied: the optimizer first, as it resets its own defaults. */
static const Setting settings[] = {
    {"optimizer", K_OPTIMIZER, 0, 0, false, false, -1},
    {"batch", K_INT, 1, PLAN_MAX_BATCH, false, false, -1},
    {"microbatch", K_INT, 1, PLAN_MAX_BATCH, false, false, -1},
    {"lr", K_REAL, 0, -1, true, false, -1},
    {"beta1", K_REAL, 0, 1, false, true, OPT_ADAMW},
    {"beta2", K_REAL, 0, 1, false, true, OPT_ADAMW},
    {"eps", K_REAL, 0, -1, true, false, OPT_ADAMW},
    {"momentum", K_REAL, 0, 1, false, true, OPT_SGD},
    {"weight_decay", K_REAL, 0, -1, false, false, -1},
    {"lr_schedule", K_SCHEDULE, 0, 0, false, false, -1},
    {"warmup", K_INT, 0, 9007199254740992.0, false, false, -1},
    {"steps", K_INT, 0, 9007199254740992.0, false, false, -1},
    {"min_lr", K_REAL, 0, -1, false, false, -1},
    {"clip", K_REAL, 0, -1, false, false, -1},
    {"seed", K_INT, 0, -1, false, false, -1},
    {"delay_comp", K_REAL, 0, -1, false, false, OPT_ADAMW},
    {"flush_steps", K_INT, 0, 9007199254740992.0, false, false, -1},
    {"predict", K_REAL, 0, 10, false, false, -1},
};
enum { NSETTINGS = sizeof settings / sizeof settings[0] };
static const char setting_list[] = "batch, microbatch, optimizer, lr, beta1, beta2, eps, momentum, weight_decay, "
                                   "lr_schedule, warmup, steps, min_lr, clip, seed, delay_comp, flush_steps, predict";

bool train_override_is(const char *text) { return strncmp(text, "train.", 6) == 0; }

bool train_setting_known(const char *key) {
  for (int i = 0; i < NSETTINGS; i++)
    if (strcmp(settings[i].key, key) == 0) return true;
  return false;
}

/* The value of -D train.KEY=VALUE for setting s into t; false after the error. */
static bool apply_one(LowerCtx *c, const Setting *s, const char *text, const char *value, TrainConfig *t) {
  Loc cmd = {"command line", 0, 0};
  if (s->kind == K_OPTIMIZER) {
    OptimizerKind k;
    if (!optimizer_parse(value, &k)) {
      diag_error(c->d, cmd, "-D %s: not an optimizer (adamw, sgd)", text);
      return false;
    }
    if (k != t->optimizer) { /* the new optimizer's own defaults; lr and weight decay stay */
      t->optimizer = k;
      t->beta1 = k == OPT_SGD ? 0 : 0.9; /* sgd keeps its momentum in beta1 */
      t->beta2 = 0.999;
      t->eps = 1e-8;
    }
    return true;
  }
  if (s->kind == K_SCHEDULE) {
    LrScheduleKind k;
    if (!lr_schedule_parse(value, &k)) {
      diag_error(c->d, cmd, "-D %s: not an lr_schedule (constant, cosine, linear)", text);
      return false;
    }
    t->schedule = k;
    return true;
  }
  if (s->only >= 0 && (int)t->optimizer != s->only) {
    diag_error(c->d, cmd, "-D %s: '%s' is a setting of %s, the optimizer is %s (set -D train.optimizer=%s)", text,
               s->key, optimizer_name((OptimizerKind)s->only), optimizer_name(t->optimizer),
               optimizer_name((OptimizerKind)s->only));
    return false;
  }
  char *end;
  errno = 0;
  double v;
  bool number;
  if (s->kind == K_INT) {
    long long i = strtoll(value, &end, 10);
    number = *value && !*end && errno == 0 && i >= (long long)s->lo && (s->hi < 0 || i <= (long long)s->hi);
    v = (double)i;
  } else {
    v = strtod(value, &end);
    number = *value && !*end && errno == 0 && isfinite(v) && (s->open_lo ? v > s->lo : v >= s->lo) &&
             (s->hi < 0 || (s->open_hi ? v < s->hi : v <= s->hi));
  }
  if (!number) {
    char range[96];
    if (s->kind == K_INT && s->hi >= 0)
      snprintf(range, sizeof range, "an integer in [%.0f, %.0f]", s->lo, s->hi);
    else if (s->kind == K_INT) snprintf(range, sizeof range, "an integer in [%.0f, %lld]", s->lo, (long long)INT64_MAX);
    else if (s->hi < 0) snprintf(range, sizeof range, "a finite number %s %g", s->open_lo ? ">" : ">=", s->lo);
    else snprintf(range, sizeof range, "a number in %c%g, %g%c", s->open_lo ? '(' : '[', s->lo, s->hi,
                  s->open_hi ? ')' : ']');
    diag_error(c->d, cmd, "-D %s: expected %s", text, range);
    return false;
  }
  const char *k = s->key;
  if (!strcmp(k, "batch")) t->batch = (int64_t)v;
  else if (!strcmp(k, "microbatch")) t->microbatch = (int64_t)v;
  else if (!strcmp(k, "lr")) t->lr = v;
  else if (!strcmp(k, "beta1") || !strcmp(k, "momentum")) t->beta1 = v;
  else if (!strcmp(k, "beta2")) t->beta2 = v;
  else if (!strcmp(k, "eps")) t->eps = v;
  else if (!strcmp(k, "weight_decay")) t->weight_decay = v;
  else if (!strcmp(k, "warmup")) t->warmup = (int64_t)v;
  else if (!strcmp(k, "steps")) t->steps = (int64_t)v;
  else if (!strcmp(k, "min_lr")) t->min_lr = v;
  else if (!strcmp(k, "clip")) t->clip = v;
  else if (!strcmp(k, "seed")) t->seed = (uint64_t)v;
  else if (!strcmp(k, "delay_comp")) t->delay_comp = v;
  else if (!strcmp(k, "flush_steps")) t->flush_steps = (int64_t)v;
  else if (!strcmp(k, "predict")) t->predict = v;
  else PD_CHECK(0, "(train setting '%s' has no field)", k);
  return true;
}

bool lower_train_overrides(LowerCtx *c, const char *const *overrides, int n) {
  Loc cmd = {"command line", 0, 0};
  TrainConfig *t = &c->g->train;
  const char *given[NSETTINGS] = {NULL};
  bool ok = true;
  int count = 0;
  for (int i = 0; i < n; i++) {
    if (!train_override_is(overrides[i])) continue;
    const char *key = overrides[i] + 6, *eq = strchr(key, '=');
    int k = -1;
    for (int j = 0; eq && j < NSETTINGS; j++)
      if (strlen(settings[j].key) == (size_t)(eq - key) && !strncmp(settings[j].key, key, (size_t)(eq - key))) k = j;
    if (k < 0) {
      diag_error(c->d, cmd, "-D %s: '%.*s' is not a train setting (%s)", overrides[i],
                 eq ? (int)(eq - key) : (int)strlen(key), key, setting_list);
      ok = false;
    } else if (given[k]) {
      diag_error(c->d, cmd, "-D %s: train.%s is set twice on the command line (first: -D %s)", overrides[i],
                 settings[k].key, given[k]);
      ok = false;
    } else {
      given[k] = overrides[i];
      count++;
    }
  }
  if (!ok || !count) return ok;
  char *list = arena_printf(c->a, "%s", "");
  for (int k = 0; k < NSETTINGS; k++) {
    if (!given[k]) continue;
    ok &= apply_one(c, &settings[k], given[k], strchr(given[k], '=') + 1, t);
    list = arena_printf(c->a, "%s%s%s", list, *list ? " " : "", given[k] + 6);
  }
  t->overrides = list;
  /* the section's cross-checks (frontend/train.c) on the values now in force */
  if (ok && t->steps && t->warmup > t->steps) {
    diag_error(c->d, cmd, "-D train.*: warmup is %lld steps, more than the %lld steps of the schedule (expected "
               "warmup <= steps)", (long long)t->warmup, (long long)t->steps);
    ok = false;
  }
  if (ok && t->batch && t->microbatch && t->batch % t->microbatch != 0) {
    diag_error(c->d, cmd, "-D train.*: microbatch %lld does not divide batch %lld (expected batch = microbatch x "
               "replicas x microbatches)", (long long)t->microbatch, (long long)t->batch);
    ok = false;
  }
  return ok;
}
