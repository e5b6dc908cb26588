/* runtime/cuda/pipe/cuda_pipe_internal.h — the state of the CUDA pipeline executor: ONE
 * interpreter of the plan's instruction streams (cuda_pipe_run.c) over a device and a
 * link, shared by both modes. See runtime/cuda/pipe/cuda_pipe.h for the contract.
 *
 * The seams (what the CPU executor's device and link interfaces map onto):
 *  - the interpreter (cuda_pipe_run.c): per-instruction dispatch of every live SR's
 *    stream, the step's order (tied sums, the global norm, the update, the console),
 *    2bw's deferred tied steps, stall detection. It touches the device only through
 *    the device ops below and what crosses SRs only through x->link;
 *  - the device ops (cuda_pipe_dev.c): a stage's forward and backward pass
 *    (cp_run_fwd/bwd), copies (ops->dtod), the ordered sum of several buffers into
 *    each (cp_dev_sum_into), the sum of squares of an SR's gradients (cp_norm) and
 *    its optimizer update (cp_update), both CUDA graphs (cuda_pipe_graph.c), and a
 *    deferred tied parameter's step (cp_step_param);
 *  - the link (CpLink): same-GPU copies (cuda_pipe_link.c: every SR in this process).
 * Setup and data are cuda_pipe.c's; the driver loop and results cuda_pipe_drive.c's;
 * --trace cuda_pipe_trace.c's; validation cuda_pipe_eval.c's. (Multi-GPU mode is not
 * this interpreter: cuda_pipe_multi.c.) */
#ifndef PD2BW_RUNTIME_CUDA_PIPE_INTERNAL_H
#define PD2BW_RUNTIME_CUDA_PIPE_INTERNAL_H

#include "runtime/cuda/exec/cuda_adamw_multi.h"
#include "runtime/cuda/pipe/cuda_pipe.h"
#include "runtime/pipeline/pipeline_rank.h"

#define CP_BLOCK 256
#define CP_MAX_GRID 4096 /* grid-stride kernels: enough blocks to fill a GPU */
#define CP_DATA_SLOTS 4  /* batches of token images an SR keeps on the device */
#define CP_COMM_STREAM 0 /* ops stream of cross-SR work; SR k computes on 1 + k */
#define CP_MAX_SR 63     /* stage replicas (d·w) on one device: 64 streams in all */

#define CP_UPD_GRAPHS 8 /* update graphs per SR, one per (version, source) pair; past it eager */

/* A tied group as one SR sees it. */
typedef struct CpTied {
  int param;      /* index in RtStage.params; -1: not held here (or a one-stage group) */
  int member;     /* position among the group's stages */
  bool deferred;  /* 2bw: stepped apart, gradient moved to tied_grads[batch % 2] */
  uint64_t bytes;
  uint64_t tg_off; /* in tied_grads[par] */
  int state[2];   /* per batch parity: 0 idle, 1 posted (its part is final), 2 summed */
} CpTied;

/* One stage replica. */
typedef struct CpSr {
  int idx, stage, replica;
  const RtStage *st;
  const PipeStage *ps;
  CxProgram *prog; /* the stage's (shared by its replicas) */
  int stream;
  void *ev; /* marks this SR's stream for the communication stream */
  const PlanStream *S;
  int pc;
  /* the planned part of the arena */
  CxPtr base;
  CxPtr w[PIPE_MAX_SLOTS], grads, tg[2], adam_m, adam_v, stash[PIPE_MAX_SLOTS], full, inputs, bnd, work;
  int nversions, nstash, newest;
  uint64_t act_in_bytes;
  int64_t act_in_packed[PIPE_MAX_BND];
  /* the executor's extras */
  CxPtr scratch, loss, data, parts, norm;
  CxPtr scalars; /* the update's per-step values (pkc_step_scalars), in the norm's part */
  CxPtr adamw;            /* the multi-tensor AdamW's table (cp_adamw_bytes) */
  CxPtr w16[PIPE_MAX_SLOTS]; /* bf16 lists: each weight version's bf16 copy (the
                              params_bf16 block), written with the version; else 0 */
  CxAdamwTable adamw_tab; /* its parts, after cp_adamw_upload */
  int nparts;
  /* the step's CUDA graphs: the norm by batch parity (deferred tied gradients
   * alternate between two blocks), the update by (version, source) */
  CxStepGraph g_norm[2], g_upd[CP_UPD_GRAPHS]; /* cx_step_graph_run's; g_upd keyed by (version, source) */
  int n_upd;
  int64_t data_batch[CP_DATA_SLOTS]; /* batch held by each data slot, -1 none */
  int data_uses[CP_DATA_SLOTS];      /* FWD/BWD refills of that batch still to come */
  uint64_t image_bytes;              /* one microbatch's inputs image (256-aligned) */
  int *mb_sslot;                     /* stash slot of each microbatch's FWD */
  CpTied tied[PIPE_MAX_GROUPS];
  double scale[2]; /* gradient scale of batch t (parity), for deferred tied steps */
  /* a send/receive group in flight: its messages (grp[0..grp_cap), sized at setup
   * for the stream's largest group: nothing is allocated per group) */
  bool grp_posted;
  int grp_end, grp_pending;
  struct CpMsg *grp;
  int grp_cap;
} CpSr;

/* A message of a send/receive group (single-GPU mode: posted, unmatched ones wait in
 * CpRun.msg). */
typedef struct CpMsg {
  int from, to; /* SR indices */
  int tag;      /* 0 activation, 1 gradient */
  bool send;
  int sr;       /* the posting SR */
  CxPtr ptr;
  int64_t bytes;
  const PlanInstr *in; /* the posting instruction (its copy is timed for --trace) */
} CpMsg;

/* What one attempt at an SR's next instruction did. */
typedef enum CpStep {
  CP_BLOCKED, /* nothing: it waits for another SR */
  CP_POSTED,  /* posted messages but waits for their partners */
  CP_DONE,    /* advanced */
  CP_FAILED   /* x->err says why */
} CpStep;

typedef struct CpRun CpRun;

/* The link: everything that crosses stage replicas. Entries return false with x->err
 * on a failure unless said otherwise. */
typedef struct CpLink {
  /* One send/receive group of s: s->grp[0..n) (posting order: runtime/pipeline/pipeline.c's
   * tensors and order). Counts each message it leaves unfinished in s->grp_pending
   * and decrements it when the message completes. */
  bool (*p2p)(CpRun *x, CpSr *s, int n);
  /* ALLREDUCE `in` of s: the sum of its stage's gradient block over the replicas into
   * every replica's, in replica order. Advances the pc of every SR it completes
   * (s's at least); CP_BLOCKED while a replica is not there yet. */
  CpStep (*allreduce)(CpRun *x, CpSr *s, const PlanInstr *in);
  /* s's part of tied group g of batch t is final (tied state 0 -> 1): the sum may start. */
  void (*tied_post)(CpRun *x, CpSr *s, int g, int64_t t);
  /* The sum of tied group g of batch t is in place on s for its next work (state 2);
   * false (no error) while a member has not posted its part. */
  bool (*tied_sum)(CpRun *x, CpSr *s, int g, int64_t t);
  /* OPT_STEP `in` of s: the SRs whose step runs now (into grp, s's pipeline in stage
   * order), 0 while one is not there yet. */
  int (*step_group)(CpRun *x, CpSr *s, const PlanInstr *in, CpSr **grp);
  /* Σg² of every stage of the pipeline, given grp's parts in their ->norm (device). */
  double (*norm_total)(CpRun *x, CpSr **grp, int n);
  /* After s's step: whether the host may wait for the device now (the step's time and
   * line are taken then). */
  bool (*may_wait)(CpRun *x, const CpSr *s);
  /* The step line of batch t (not quiet; after the wait): the global loss. */
  bool (*progress)(CpRun *x, CpSr *s, int64_t t);
} CpLink;

extern const CpLink cp_link_local; /* cuda_pipe_link.c: same-GPU copies */

typedef struct CpTrace CpTrace; /* cuda_pipe_trace.c: --trace's device events */

struct CpRun {
  const PipePlan *p;
  const CpLink *link;
  int self; /* the printing rank's number: 0 (one process) */
  const CxDeviceOps *ops;
  const CudaExecOptions *o;
  TrainConfig tc;
  int64_t steps, mref;
  int64_t first; /* batches [first, steps) run: > 0 after --resume (single-GPU mode) */
  PlanStreamSpec spec;
  PlanStreams streams; /* of batches [0, steps), as the CPU executor's */
  PlanStream *part;    /* [d] single-GPU mode: one stretch's instructions (cp_select) */
  CxProgram **prog; /* [d] */
  CpSr *sr;         /* [d·w], index stage·w + replica */
  int nsr;
  void *comm_ev;
  CxPtr arena;
  uint64_t arena_bytes, extra_bytes; /* extra: per SR, the largest */
  uint64_t w16_bytes;                /* the SRs' bf16 weight copies, all together */
  /* data */
  DataFile *df;
  DataLoader *dl;
  int T;
  char *host_image;
  int32_t *tok_tmp, *tgt_tmp;
  /* validation (cuda_pipe_eval.c) */
  DataFile *vdf;
  DataLoader *vdl;
  int64_t val_batches;
  /* messages */
  CpMsg *msg;
  int nmsg, cap_msg;
  /* results and progress */
  float *host_loss;
  double *grad_norm;   /* [steps + 1] by batch: the global norm (NAN: not taken) */
  double *step_ms;     /* [steps + 1] by batch: time since the previous step (NAN: not timed) */
  double t_prev_step;  /* when the previous timed step (or the run's start) ended, validations left out */
  int64_t batch_prev;  /* its batch (first - 1: the start) */
  RtLog *console;      /* the step lines (not quiet), runtime/core/console.c */
  CpTrace *trace; /* single-GPU mode with o->trace_path, else NULL */
  CxGraphStats step_graphs; /* how the norms and updates ran (CxPipeStats) */
  bool failed;
  char err[RT_ERR_LEN];
};

static inline CpSr *cp_sr(CpRun *x, int stage, int replica) { return &x->sr[stage * x->p->w + replica]; }

static inline unsigned cp_grid(int64_t n) {
  int64_t g = (n + CP_BLOCK - 1) / CP_BLOCK;
  if (g < 1) g = 1;
  return (unsigned)(g > CP_MAX_GRID ? CP_MAX_GRID : g);
}

/* cuda_pipe.c */
bool cp_setup(CpRun *x, char *err, size_t errlen);
void cp_teardown(CpRun *x);
/* Copies microbatch k's inputs image into the SR's inputs block on its stream,
 * uploading the batch's images first when its data slot holds another batch. false
 * (x->err set) when the slot is still needed: CP_DATA_SLOTS is too small. */
bool cp_fill_inputs(CpRun *x, CpSr *s, int64_t k);
/* cuda_pipe_drive.c: the results */
void cp_fill_outcome(CpRun *x, PipeOutcome *out);
/* Adds parameter q to out (names, numel, a weights buffer of q->bytes the caller fills)
 * and returns that buffer, or NULL when out already holds q (a tied copy); *cap starts
 * at 0. */
float *cp_outcome_param(PipeOutcome *out, int *cap, const RtParam *q);
/* After mb_loss and the parameters: step losses, the measured step time, memory per
 * stage (the SR part: the plan's figure), no validation. */
void cp_outcome_finish(const CpRun *x, PipeOutcome *out);
/* The divergence check of every mode (rt_loss_ok) on a finished run's step losses:
 * false with the message naming the first step whose loss is not finite. The CUDA
 * pipeline modes check after the run (the CPU interpreter stops at the step), before
 * --save, so a diverged run leaves no checkpoint. */
bool cp_outcome_loss_ok(const PipeOutcome *out, char *err, size_t errlen);

/* Points every SR at the instructions of batches [lo, hi) of its stage's stream, in
 * stream order (a send/receive group keeps its members in the range), from the
 * start: cp_run then runs exactly those (runtime/pipeline/pipeline.c's pipe_rank_run_batches:
 * consecutive ranges compute what one range over their union does). */
void cp_select(CpRun *x, int64_t lo, int64_t hi);

/* cuda_pipe_drive.c: the driver loop, after setup and --resume: trains
 * batches [x->first, x->steps) in stretches (cp_select, cp_run) that end where a
 * validation is due, runs eval between them (cp_eval_run) and prints its line. val[b] gets batch
 * first + b's validation loss (NAN: none), *val_final the last one. false with x->err. */
bool cp_train(CpRun *x, bool (*eval)(CpRun *x, double *mean), double *val, double *val_final);

/* cuda_pipe_eval.c: validation (runtime/pipeline/pipeline_eval.h's contract: the one-stage
 * trainer's loss on PLAN/reference for the newest weights). Opens o->val_path; false
 * with a message naming the file. */
bool cp_eval_open(CpRun *x, char *err, size_t errlen);
void cp_eval_close(CpRun *x);
/* Between two stretches (nothing in flight): every validation microbatch forward-only
 * through the stages of its replica, on the communication stream; the mean in *mean. */
bool cp_eval_run(CpRun *x, double *mean);

/* One validation forward of SR s on the communication stream (nothing else in flight):
 * microbatch j of its replica's share of validation batch k, its inputs uploaded
 * first; returns the loss on a last stage (0 elsewhere). cp_eval_bnd: where boundary
 * tensor k of s lies for it. */
double cp_eval_forward(CpRun *x, CpSr *s, int64_t k, int64_t j);
bool cp_eval_bnd(CpRun *x, const CpSr *s, int k, CxPtr *at);

/* --resume (cuda_pipe.c): checkpoint `path` (any executor's) into the live SRs' slots
 * for its step; x->first = that step. false with a message naming the file. */
bool cp_resume(CpRun *x, const char *path, char *err, size_t errlen);

/* cuda_pipe_trace.c: --trace in single-GPU mode. Every instruction of every SR gets
 * one pair of device events (created up front, a bounded ring per SR, reused): FWD,
 * BWD, OPT_STEP, TIED_SYNC on the SR's stream; send/receive instructions as their
 * copies on the communication stream, ALLREDUCE as its sums there. Pairs are read at
 * the host waits the run makes anyway (run_step's sync once per batch, the end of a
 * stretch). cp_trace_open: the events and the origin (after a sync, before training). */
void cp_trace_open(CpRun *x);
void cp_trace_close(CpRun *x);
/* Records the start / end of instruction `in` of SR s on `stream` (trace on only).
 * begin once per instruction; end again moves its end (a send/receive's last copy). */
void cp_trace_begin(CpRun *x, CpSr *s, const PlanInstr *in, int stream);
void cp_trace_end(CpRun *x, CpSr *s, const PlanInstr *in, int stream);
/* A copy of send/receive instruction `in` of s on the communication stream: before
 * it (end false; the first copy begins the pair) and after it (end true). */
void cp_trace_p2p(CpRun *x, CpSr *s, const PlanInstr *in, bool end);
/* s's group of instructions [first, last] completed: an empty pair on its stream for
 * each one that copied nothing. */
void cp_trace_p2p_done(CpRun *x, CpSr *s, int first, int last);
/* After a host wait (everything issued has run): reads every finished pair. */
void cp_trace_harvest(CpRun *x);
/* At the end (after a sync): the measured bubble per stage into out->bubble
 * (pipe_measure, the CPU executor's definition) and the trace at o->trace_path,
 * written whole or not at all. false with a message naming the file. */
bool cp_trace_finish(CpRun *x, PipeOutcome *out, char *err, size_t errlen);

/* cuda_pipe_run.c: runs every live SR's stream to the end through x->link; false
 * with x->err (a stall names every SR's blocked instruction). */
bool cp_run(CpRun *x);

static inline const PlanInstr *cp_cur(const CpSr *s) { return s->pc < s->S->n ? &s->S->ins[s->pc] : NULL; }
/* Whether s's next instruction is (op, batch, group). */
static inline bool cp_at_instr(const CpSr *s, PlanOp op, int batch, int group) {
  const PlanInstr *in = cp_cur(s);
  return in && in->op == op && in->batch == batch && in->group == group;
}

/* cuda_pipe_dev.c: the device ops. Everything on s's stream unless said otherwise. */
bool cp_run_fwd(CpRun *x, CpSr *s, const PlanInstr *in);
bool cp_run_bwd(CpRun *x, CpSr *s, const PlanInstr *in);
/* An ordered sum on `stream`: buf[0] += buf[1] + ... (in that order, float32, n
 * elements), then copies of buf[0] into the others, so all hold the same bits. */
void cp_dev_sum_into(CpRun *x, const CxProgram *prog, int stream, const CxPtr *buf, int nbuf, int64_t n);
PipeRole cp_p2p_role(PlanOp op);
/* Where boundary tensor k of a send/receive instruction lies on the SR; false (x->err). */
bool cp_bnd_ptr(CpRun *x, CpSr *s, const PlanInstr *in, int k, CxPtr *ptr);
/* Where tied group g's gradient of batch t lies on SR s. */
CxPtr cp_tied_buf(const CpSr *s, int g, int64_t t);
int cp_tied_group_of(const CpSr *s, int k, int ngroups);
/* The optimizer step of parameter k (gradient g, version src -> vslot, scale): a
 * deferred tied group's step (run_tied_step), by value. */
void cp_step_param(CpRun *x, CpSr *s, int k, CxPtr g, int vslot, int src, int64_t t, double scale);
/* A tied parameter has a gradient on every stage holding it. */
bool cp_has_grad(const CpRun *x, const CpSr *s, int k);

/* cuda_pipe_graph.c: the step's norm and update as CUDA graphs (the one-stage
 * trainer's scheme), on s's stream; launch by launch without graph ops, the same
 * kernels, the same bits.
 * Σ g² of the SR's gradients of batch t into s->norm (a double). */
void cp_norm(CpRun *x, CpSr *s, int64_t t);
/* Batch t's optimizer values (lr, the bias-correction step, the gradient scale) into
 * s->scalars: a host copy, so it waits for the device (which the norm's read-back did
 * already); every SR's before any update is issued, so no update waits for another. */
void cp_step_scalars(CpRun *x, CpSr *s, int64_t t, double scale);
/* The optimizer step of batch t of every parameter of s but deferred tied ones,
 * version src -> vslot; the _dev kernels read the values cp_step_scalars wrote. AdamW
 * is one launch of the multi-tensor kernel over s's table (cuda_adamw_multi.h). */
void cp_update(CpRun *x, CpSr *s, int vslot, int src, int64_t t);
/* Elements [off, off + n) of weight version v cast into its bf16 copy on `stream` (a
 * bf16 list; nothing otherwise): the initial and resumed weights, SGD's and a deferred
 * tied parameter's steps. AdamW's multi-tensor step writes the copy itself. */
void cp_cast_weights(CpRun *x, CpSr *s, int v, int64_t off, int64_t n, int stream);
/* Device bytes of s's multi-tensor AdamW table (every parameter but deferred tied
 * ones; 0 with SGD), and its upload to s->adamw (setup: a host copy). */
uint64_t cp_adamw_bytes(const CpRun *x, const CpSr *s);
void cp_adamw_upload(CpRun *x, CpSr *s);
/* Destroys s's graphs. */
void cp_graphs_free(CpRun *x, CpSr *s);
/* Adds SR last's m microbatch losses of batch t (a last stage), in order, to *sum. */
void cp_add_losses(CpRun *x, const CpSr *last, int64_t t, double *sum);
/* The step line of batch t (runtime/core/console.c): the loss sum over nrep replicas' m
 * microbatches (the global loss), lr, the grad norm and the step's ms. */
void cp_progress_line(CpRun *x, double loss_sum, int nrep, int64_t t);

#endif /* PD2BW_RUNTIME_CUDA_PIPE_INTERNAL_H */
