/* ir/names.c — the spellings of the IR's small enums, in one place: the IR dump,
 * plan.json (written by codegen, read back by the runtime) and error messages all
 * use these, so a name cannot drift between writer and reader. */
#include "ir/ir.h"

#include <string.h>

/* Each table is indexed by the enum value. */
static const char *const init_names[] = {[INIT_ZEROS] = "zeros", [INIT_ONES] = "ones", [INIT_NORMAL] = "normal"};
static const char *const optimizer_names[] = {[OPT_ADAMW] = "adamw", [OPT_SGD] = "sgd"};
static const char *const lr_schedule_names[] = {
    [LR_CONSTANT] = "constant", [LR_COSINE] = "cosine", [LR_LINEAR] = "linear"};
static const char *const region_kind_names[] = {
    [RG_PROLOGUE] = "prologue", [RG_BLOCK] = "block", [RG_EPILOGUE] = "epilogue"};

#define COUNT(a) ((int)(sizeof(a) / sizeof((a)[0])))

static const char *name_of(const char *const *names, int n, int k) {
  return k >= 0 && k < n && names[k] ? names[k] : "?";
}

static bool parse(const char *const *names, int n, const char *s, int *out) {
  for (int k = 0; k < n; k++)
    if (names[k] && strcmp(names[k], s) == 0) {
      *out = k;
      return true;
    }
  return false;
}

const char *init_kind_name(InitKind k) { return name_of(init_names, COUNT(init_names), (int)k); }
const char *optimizer_name(OptimizerKind k) { return name_of(optimizer_names, COUNT(optimizer_names), (int)k); }
const char *lr_schedule_name(LrScheduleKind k) {
  return name_of(lr_schedule_names, COUNT(lr_schedule_names), (int)k);
}
const char *region_kind_name(RegionKind k) {
  return name_of(region_kind_names, COUNT(region_kind_names), (int)k);
}

bool init_kind_parse(const char *s, InitKind *out) {
  int k;
  if (!parse(init_names, COUNT(init_names), s, &k)) return false;
  *out = (InitKind)k;
  return true;
}

bool optimizer_parse(const char *s, OptimizerKind *out) {
  int k;
  if (!parse(optimizer_names, COUNT(optimizer_names), s, &k)) return false;
  *out = (OptimizerKind)k;
  return true;
}

bool lr_schedule_parse(const char *s, LrScheduleKind *out) {
  int k;
  if (!parse(lr_schedule_names, COUNT(lr_schedule_names), s, &k)) return false;
  *out = (LrScheduleKind)k;
  return true;
}
