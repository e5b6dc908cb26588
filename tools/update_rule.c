/* tools/update_rule.c — pd2bwc's update rule (tools/update_rule.h). */
#include "tools/update_rule.h"

UpdateRuleGiven update_rule_defaults(TrainConfig *t) {
  UpdateRuleGiven g = {.flush_steps = t->flush_steps >= 0, .predict = t->predict >= 0};
  /* docs/update-rules.md "Defaults": K = the first tenth of the learning-rate schedule
   * (10 x warmup when it has no length), k = 1 */
  if (t->flush_steps < 0) t->flush_steps = t->steps > 0 ? (t->steps + 9) / 10 : 10 * t->warmup;
  if (t->predict < 0) t->predict = 1;
  return g;
}

cJSON *update_rule_json(TrainConfig *t, const PlanConfig *cfg, UpdateRuleGiven given, UpdateRuleDropped *dropped) {
  PlanSchedule s = cfg->schedule;
  *dropped = (UpdateRuleDropped){0};
  if (s != PS_2BW) { /* only 2bw holds the versions they read: the asked-for ones with a note */
    if (t->delay_comp > 0) dropped->delay_comp = t->delay_comp;
    if (given.flush_steps && t->flush_steps > 0) dropped->flush_steps = (double)t->flush_steps;
    if (given.predict && t->predict > 0) dropped->predict = t->predict;
    t->delay_comp = 0, t->flush_steps = 0, t->predict = 0;
  } else if (!cfg->predict && t->predict > 0) { /* the search left the default's master copy out */
    dropped->predict_no_room = true;
    t->predict = 0;
  }
  cJSON *j = cJSON_CreateObject();
  cJSON_AddStringToObject(j, "rule", s == PS_2BW ? "2bw" : s == PS_PIPEDREAM ? "pipedream" : "vanilla");
  cJSON_AddBoolToObject(j, "changes_update", plan_schedule_stale(s));
  cJSON_AddNumberToObject(j, "delay_comp", t->delay_comp);
  cJSON_AddNumberToObject(j, "flush_steps", (double)t->flush_steps);
  cJSON_AddNumberToObject(j, "predict", t->predict);
  return j;
}

void update_rule_print(FILE *out, PlanSchedule s, const TrainConfig *t, const UpdateRuleDropped *dropped) {
  if (s == PS_2BW) {
    fprintf(out, "update rule: 2bw, W(t+1) = W(t) - lr*grad f(W~(t)) (one step stale, not vanilla's); ");
    if (t->flush_steps > 1)
      fprintf(out, "flushed start: the first %lld steps vanilla (train.flush_steps); ", (long long)t->flush_steps);
    else
      fprintf(out, "no flushed start (train.flush_steps %lld); ", (long long)t->flush_steps);
    if (t->predict > 0)
      fprintf(out, "weight prediction W~(t) = W(t-1) + %g*(W(t-1) - W(t-2)) (train.predict); ", t->predict);
    else
      fprintf(out, "no weight prediction, W~(t) = W(t-1) (train.predict 0); ");
    fprintf(out, "delay compensation %s\n", t->delay_comp > 0 ? "on" : "off (train.delay_comp)");
  } else if (s == PS_PIPEDREAM) {
    fprintf(out, "update rule: pipedream, stage i's gradients are d-1-i steps stale (not vanilla's)\n");
  } else {
    fprintf(out, "update rule: vanilla (schedule %s changes no update)\n", plan_schedule_name(s));
  }
  if (dropped->delay_comp > 0)
    fprintf(out, "delay compensation: off, train.delay_comp=%g compensates the 2bw rule only\n", dropped->delay_comp);
  if (dropped->flush_steps > 0)
    fprintf(out, "flushed start: off, train.flush_steps=%g is a setting of the 2bw rule only\n", dropped->flush_steps);
  if (dropped->predict > 0)
    fprintf(out, "weight prediction: off, train.predict=%g is a setting of the 2bw rule only\n", dropped->predict);
  if (dropped->predict_no_room)
    fprintf(out, "weight prediction: off, its master copy of the weights does not fit in memory "
            "(-D train.predict=1 asks for it anyway)\n");
}
