/* contract/plan_streams.h — the instruction streams of a plan, and their generator.
 *
 * Each stage replica of a pipelined plan runs one stream of instructions (forward,
 * backward, sends and receives, all-reduce, tied sums, optimizer steps; the format is
 * docs/plan-format.md's "streams"). plan_streams_build (plan_streams.c) is a pure
 * function of the stage count, microbatches per batch, schedule, replicas and tied
 * groups: the planner builds and verifies the streams it writes into plan.json with
 * it, and the runtime builds the streams of exactly the batches a run trains with the
 * same function, so a run of any length executes what the planner verified.
 */
#ifndef PD2BW_CONTRACT_PLAN_STREAMS_H
#define PD2BW_CONTRACT_PLAN_STREAMS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "contract/plan_limits.h"

/* ---- schedules ------------------------------------------------------------ */

typedef enum PlanSchedule {
  PS_GPIPE,     /* all m forwards, all m backwards, flush, step; 1 version, m stashes */
  PS_1F1B,      /* PipeDream-Flush: warm-up d-i-1 F, steady 1F1B, cool-down, flush */
  PS_2BW,       /* PipeDream-2BW: 1F1B without flush, 2 versions, v(k) delayed by one */
  PS_PIPEDREAM, /* weight stashing: 1F1B without flush, up to d-i versions at stage i */
  PS_COUNT
} PlanSchedule;

const char *plan_schedule_name(PlanSchedule s);
/* True when the schedule changes the update rule (2bw, pipedream: gradients of stale
 * weights); gpipe and 1f1b keep vanilla SGD's. */
bool plan_schedule_stale(PlanSchedule s);
/* "gpipe", "1f1b", "2bw", "pipedream" -> kind; false if unknown. */
bool plan_schedule_parse(const char *s, PlanSchedule *out);

/* ---- instruction streams ---------------------------------------------------- */

typedef enum PlanOp {
  PI_RECV_ACT,  /* receive mb's activation from stage `peer` (= i-1) into recv_act */
  PI_FWD,       /* forward of mb with version `version` (in slot vslot); keeps what the
                   backward needs in stash slot sslot */
  PI_SEND_ACT,  /* send mb's output activation (send_act buffer) to stage `peer` (= i+1) */
  PI_RECV_GRAD, /* receive the gradient of mb's output from stage `peer` (= i+1) */
  PI_BWD,       /* backward of mb with the same version/slot as its forward; frees
                   stash slot sslot; accumulates into the gradient buffer (re-runs the
                   forward first when the plan recomputes) */
  PI_SEND_GRAD, /* send the gradient of mb's input to stage `peer` (= i-1) */
  PI_ALLREDUCE, /* sum the gradient buffer over the stage's w replicas (batch `batch`) */
  PI_TIED_SYNC, /* post this stage's part of the sum of tied parameter `group`'s
                   gradient (batch `batch`) over the stages holding it; non-blocking:
                   the OPT_STEP that updates the parameter waits for the sum */
  PI_OPT_STEP,  /* optimizer step for batch `batch`: reads the newest weights (slot
                   src_vslot), writes version `version` into slot vslot (the oldest
                   one's, or in place), zeroes the gradient buffer; under 2bw's weight
                   prediction src_vslot is the master's, updated in place, and vslot
                   gets the predicted weights. group -1: every
                   parameter of the stage except tied ones stepped separately (see
                   plan_tied_deferred); group g: only tied parameter g, after its
                   TIED_SYNC, from tied_grads[batch % 2] */
  PI_COUNT
} PlanOp;

const char *plan_op_name(PlanOp op);

/* One instruction. Fields not meaningful for an op are -1 (mb is 0 for per-batch
 * ops). Consecutive send/receive instructions with `with_next` set are posted
 * together (one NCCL group / MPI waitall) and complete when all of them matched:
 * under blocking (rendezvous) semantics the 1F1B exchange "send act, receive grad"
 * deadlocks otherwise. */
typedef struct PlanInstr {
  PlanOp op;
  int64_t mb;    /* microbatch k, 1-indexed, global across batches; 0 if none */
  int batch;     /* 0-based batch (weight update) index of mb, or of the step */
  int version;   /* weight version number used (FWD/BWD) or produced (OPT_STEP) */
  int vslot;     /* version slot read (FWD/BWD) or written (OPT_STEP) */
  int src_vslot; /* OPT_STEP: slot of the newest version it updates */
  int sslot;     /* stash slot (FWD/BWD) */
  int peer;      /* peer stage of a send/receive */
  int group;     /* tied group (TIED_SYNC, OPT_STEP of a tied parameter), else -1 */
  bool with_next;/* posted together with the next instruction */
} PlanInstr;

typedef struct PlanStream {
  PlanInstr *ins;
  int n, cap;
} PlanStream;

/* What the stream generator needs (a Plan fills it; tests fill it by hand). */
typedef struct PlanTiedGroup {
  int tied;    /* index into PlanInput.tied */
  int nstages; /* stages holding it, ascending */
  int stages[PLAN_MAX_TIED_SEGS];
} PlanTiedGroup;

typedef struct PlanStreamSpec {
  int stages;
  int64_t microbatches; /* m per batch */
  PlanSchedule schedule;
  int nbatches;
  int replicas; /* > 1 emits ALLREDUCE */
  const PlanTiedGroup *groups;
  int ngroups;
  /* 2bw's refinements (docs/update-rules.md); 0 and false: plain 2bw. */
  int flush_batches; /* K: batch t < K reads W(t) (vanilla); batches t < K-1 drain before
                        their step, as 1f1b does; batch t >= max(K, 1) reads W(t-1) */
  bool predict;      /* weight prediction: slot PLAN_MASTER_VSLOT holds the newest W, each
                        step updates it in place and writes the predicted weights of the
                        batch that next reads slot vslot there (3 version slots) */
} PlanStreamSpec;

/* The version slot of 2bw's master weights under weight prediction. */
enum { PLAN_MASTER_VSLOT = 2 };

/* The weight version 2bw's batch t reads (flush_batches K): t for t < max(K, 1), else
 * t - 1. */
int plan_2bw_version(const PlanStreamSpec *spec, int t);
/* Whether batch t runs on W(t) itself (every batch of a vanilla schedule; 2bw's flushed
 * start): its gradient needs no compensation, and the weights it reads no prediction. */
bool plan_batch_fresh(const PlanStreamSpec *spec, int64_t t);
/* Whether batch t drains before its step (gpipe, 1f1b; 2bw's flushed start). */
bool plan_batch_flushed(const PlanStreamSpec *spec, int t);

typedef struct PlanStreams {
  PlanStreamSpec spec; /* groups pointer borrowed from the caller */
  PlanStream *st;      /* [stages] */
  int *nversions;      /* [stages] version slots the streams use */
  int *nstash;         /* [stages] stash slots the streams use */
} PlanStreams;

/* Whether tied group g is stepped apart from the stage's other parameters. Under
 * 2bw a group spanning stages is: W(t+1) is first read by batch t+2, so each member
 * posts batch t's TIED_SYNC after its own step of batch t and steps the tied
 * parameter (OPT_STEP with group g) just before batch t+2's first forward, rather
 * than stalling the last stage while batch t drains back to stage 0. Its gradient is
 * double-buffered (tied_grads[t % 2]) because batch t+1's backwards run meanwhile. */
bool plan_tied_deferred(const PlanStreamSpec *spec, int g);

/* Builds the streams of every stage for spec->nbatches batches. Returns false with a
 * reason in err (2bw with m < d) when the schedule cannot run. */
bool plan_streams_build(const PlanStreamSpec *spec, PlanStreams *out, char *err,
                        size_t errlen);
void plan_streams_free(PlanStreams *s);
/* Appends one instruction (tests use it to build broken streams). */
void plan_stream_push(PlanStream *s, PlanInstr in);
/* "FWD mb=3 v=0 vslot=0 stash=1" into buf. */
const char *plan_instr_str(const PlanInstr *in, char *buf, size_t n);

#endif /* PD2BW_CONTRACT_PLAN_STREAMS_H */
