/* contract/plan_limits.h — the limits the runtime puts on a plan, defined once.
 * The runtime sizes its tables with them and refuses a plan over them
 * (runtime/pipeline/pipeline_rank.h, runtime/pipeline/pipeline_plan.c); pd2bwc checks every plan
 * against them before it writes anything (plan_check_limits, passes/planner.h), so
 * that a model the runtime cannot run is a compile error, not a refusal at run time. */
#ifndef PD2BW_CONTRACT_PLAN_LIMITS_H
#define PD2BW_CONTRACT_PLAN_LIMITS_H

#define PLAN_MAX_TIED_SEGS 8    /* stages holding one tied parameter (its TIED_SYNC members) */
#define PLAN_MAX_TIED_GROUPS 8  /* tied parameters in a plan (plan.json "tied" entries) */
#define PLAN_MAX_SLOTS 128      /* weight versions, and stash slots, per stage */
#define PLAN_MAX_BOUNDARY 64    /* tensors a stage exchanges with its neighbours */
/* Microbatches per batch (m): plan.json carries every instruction of 3 batches, and the
 * runtime generates m·d of them per batch; past this a plan is gigabytes of streams. */
#define PLAN_MAX_MICROBATCHES 4096
/* train.batch and train.microbatch (samples): pd2bwc's model and -D train.* ranges and
 * plan.json's (runtime/core/plan_read.c). */
#define PLAN_MAX_BATCH (1 << 30)

#endif
