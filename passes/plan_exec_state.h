/* passes/plan_exec_state.h — the stream engine's state, shared by its two halves
 * (internal to passes/).
 *
 * plan_exec.c is one engine (see its top comment); it lives in two files by concern:
 * plan_exec.c runs the compute instructions and drives the stages to the end or to a
 * deadlock, plan_exec_comm.c pairs sends with receives and runs the collectives
 * (TIED_SYNC, the gradient norm's barrier at OPT_STEP). Both read and advance the
 * per-stage state below and report through exec_fail and exec_event. */
#ifndef PD2BW_PASSES_PLAN_EXEC_STATE_H
#define PD2BW_PASSES_PLAN_EXEC_STATE_H

#include "passes/planner.h"

#include <inttypes.h>

#define MAX_GROUP 8

typedef struct SState {
  int pc;
  double clock;
  bool posted;
  double post_time;
  int gend;
  bool matched[MAX_GROUP];
  double done[MAX_GROUP];
  double began[MAX_GROUP]; /* when the transfer started: both sides had posted */
  /* per microbatch [N+1] */
  unsigned char *fwd, *bwd, *act_in, *grad_in;
  int *fver, *fvslot, *fsslot;
  int64_t *bwd_count; /* per batch */
  int *slot_ver, *slot_use, *stash_used;
  int maxv, maxs;
  int latest, latest_slot, steps;
  int nposted;    /* batches whose OPT_STEP reached the gradient norm's exchange */
  int allreduced; /* batches whose gradients were all-reduced over the replicas */
  int live_stash, max_stash, max_versions;
  double *step_end; /* per batch */
  /* per tied group [ngroups] */
  bool *held;
  int *tsync, *tsteps, *tlatest_slot;
  int *tslot_ver; /* [ngroups][maxv]: version of the deferred tied parameter per slot */
} SState;

typedef struct Exec {
  const PlanStreams *s;
  const PlanCosts *c;
  SState *st;
  int d;
  int64_t m, N;
  PlanSimResult *res;
  char *err;
  size_t errlen;
  bool failed;
  /* TIED_SYNC collectives, [ngroups][nbatches]: members posted, latest post */
  int *tposts;
  double *tpost_max;
  /* the gradient norm's exchange at OPT_STEP, [nbatches]: stages arrived, latest */
  int *nposts;
  double *npost_max;
} Exec;

/* Records the first violation in x->err, prefixed with the stage, instruction index
 * and microbatch (pc < 0: the stage alone; stage < 0: neither); returns false. */
bool exec_fail(Exec *x, int stage, int pc, const char *fmt, ...) __attribute__((format(printf, 4, 5)));

/* Appends a timeline event (x->res->events) for instruction pc of stage. */
void exec_event(Exec *x, int stage, int track, int pc, double start, double end, bool wait);

static inline double cost_of(const double *a, int i) { return a ? a[i] : 0; }

static inline bool is_comm(PlanOp op) {
  return op == PI_RECV_ACT || op == PI_SEND_ACT || op == PI_RECV_GRAD || op == PI_SEND_GRAD;
}

static inline bool mb_ok(Exec *x, int s, int pc, int64_t k) {
  if (k < 1 || k > x->N)
    return exec_fail(x, s, pc, "microbatch %" PRId64 " outside 1..%" PRId64, k, x->N);
  return true;
}

/* plan_exec_comm.c: the group of sends and receives at stage s's pc: posts it,
 * matches what it can; 1 progress, 0 none, -1 error. */
int exec_comm(Exec *x, int s);
/* TIED_SYNC at stage s's pc: posts its part of the sum and goes on. */
bool exec_tied_post(Exec *x, int s);
/* Before an OPT_STEP: the gradient norm's barrier (1 all arrived, 2 this call arrived,
 * 0 waiting, -1 error) and the tied sums it reads (1 ready, 0 waiting, -1 error). */
int exec_norm_wait(Exec *x, int s, const PlanInstr *in);
int exec_tied_wait(Exec *x, int s, const PlanInstr *in);

#endif
