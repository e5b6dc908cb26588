/* tools/update_rule.h — pd2bwc's update rule: 2bw's settings (flushed start, weight
 * prediction, delay compensation) defaulted before planning and fixed after it, plan.json's
 * "update_rule" and the line pd2bwc prints (docs/update-rules.md). */
#ifndef PD2BW_TOOLS_UPDATE_RULE_H
#define PD2BW_TOOLS_UPDATE_RULE_H

#include <stdio.h>

#include <cjson/cJSON.h>

#include "passes/planner.h"

/* Which of 2bw's settings the model or the command line gave (not pd2bwc's default). */
typedef struct UpdateRuleGiven {
  bool flush_steps, predict;
} UpdateRuleGiven;

/* What a plan of another rule dropped of them (0: nothing). */
typedef struct UpdateRuleDropped {
  double delay_comp, flush_steps, predict;
  bool predict_no_room; /* the default prediction's master copy did not fit */
} UpdateRuleDropped;

/* Fills the unset flush_steps and predict with the defaults (before planning: a 2bw
 * candidate's memory depends on predict). */
UpdateRuleGiven update_rule_defaults(TrainConfig *t);
/* plan.json's "update_rule" for the chosen configuration; sets t's 2bw settings to
 * what the plan runs with (0 under another rule, predict 0 where cfg has none). */
cJSON *update_rule_json(TrainConfig *t, const PlanConfig *cfg, UpdateRuleGiven given, UpdateRuleDropped *dropped);
void update_rule_print(FILE *out, PlanSchedule s, const TrainConfig *t, const UpdateRuleDropped *dropped);

#endif
