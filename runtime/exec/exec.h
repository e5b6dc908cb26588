/* runtime/exec/exec.h — the interpreter of a plan's instruction streams and its two
 * seams: a DEVICE (where a stage's memory lives and its arithmetic runs) and a LINK
 * (how a rank reaches the others).
 *
 * This folder owns the interpreter (exec_interp.c: one rank's stream in order, with
 * the tied sums, clipping, the optimizer step, the per-step checks, trace events and
 * injected faults), the CPU device (exec_cpu.c), the transport link
 * (exec_link_transport.c) and one rank's state (exec_rank.h; set up by
 * runtime/pipeline/). The CUDA device and links are runtime/cuda/exec/'s. Invariant:
 * the interpreter touches memory only through the device and other ranks only through
 * the link, so a new device or link changes nothing here; order and rounding are part
 * of each operation's contract, and the replay set (docs/replay.md) holds every device
 * to the CPU's bits where the arithmetic is the same (docs/gpu.md: the CUDA side).
 */
#ifndef PD2BW_RUNTIME_EXEC_EXEC_H
#define PD2BW_RUNTIME_EXEC_EXEC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "runtime/core/runtime.h"
#include "runtime/exec/seg_times.h"
#include "runtime/transport/transport.h"

typedef struct PipeRank PipeRank;

/* ---- the device ---------------------------------------------------------------- */

typedef struct ExecDevice ExecDevice;

/* One pass of the stage program over its blocks (BufClass-indexed bases in the
 * arena). mb is the reference's global microbatch index; with seed it keys dropout. */
typedef struct ExecPass {
  char *block[BUF_CLASS_COUNT];
  int64_t mb;
  uint64_t seed;    /* the run's seed (a resumed run's is the checkpoint's) */
  bool training;
  double *loss;     /* host; NULL: not asked */
  int64_t bad_ids;  /* out: token ids outside the vocabulary */
} ExecPass;

/* One parameter's optimizer step of batch t: wout = step(win, g · scale), with the
 * moments m and v (v unused by SGD) updated in place. wout may be win. g NULL: the
 * parameter has no gradient and keeps its value (copied into wout when it is another
 * version; the moments untouched). 2bw (docs/update-rules.md): fresh, the gradient
 * was taken at win (a flushed step: no delay compensation, whatever tc says; else
 * the compensation reads wout on entry as the weights it was taken at); master
 * (weight prediction, NULL: none), after the step: master = wout's new W(t+1) and
 * wout = W(t+1) + predict·(W(t+1) - master's old W(t)), element by element
 * (kernels/cpu_kernels_optim.h pk_predict_step; win is master then). */
typedef struct ExecOptStep {
  const TrainConfig *tc;
  const RtParam *param;
  float *wout;
  const float *win, *g;
  float *m, *v;
  int64_t t;
  double scale;
  bool fresh;
  float *master;
  double predict; /* k of this step: 0 in a flushed start (the reader is vanilla) */
} ExecOptStep;

typedef struct ExecDeviceOps {
  const char *name;
  /* one zeroed block of the plan's memory.total_bytes, 256-byte aligned; the rank finds
   * every buffer at its planned offset. Every pointer the interpreter hands the device
   * points into it, except the host scalars named below. */
  char *(*arena_alloc)(ExecDevice *d, uint64_t bytes, const char *what);
  void (*arena_free)(ExecDevice *d, char *arena);
  /* a stage's pass over ExecPass's blocks (the stage program the device loaded);
   * backward ADDS into the gradient block. The loss, when asked, and the count of
   * out-of-range token ids come back in host memory; a GPU may deliver both late (the
   * loss by the next sumsq or flush, the count through late_bad_ids) so that a step's
   * passes run without a host wait. */
  void (*forward)(ExecDevice *d, ExecPass *p);
  void (*backward)(ExecDevice *d, ExecPass *p);
  /* the token/target inputs of samples [first, first + b) from the host DataLoader
   * into the inputs block (a GPU may upload the whole batch at its first sample) */
  void (*load_samples)(ExecDevice *d, char *inputs, DataLoader *dl, int64_t first, int64_t b);
  /* device-to-device copy and clear of `bytes` */
  void (*copy)(ExecDevice *d, void *dst, const void *src, uint64_t bytes);
  void (*zero)(ExecDevice *d, void *dst, uint64_t bytes);
  /* host memory into the arena, and the arena into host memory once the device's work
   * on it is done: the only way host code reads or writes the arena (weights at the
   * start, checkpoints, gathered results) */
  void (*upload)(ExecDevice *d, void *dst, const void *host, uint64_t bytes);
  void (*download)(ExecDevice *d, void *host, const void *src, uint64_t bytes);
  /* dst[i] = ((src[0][i] + src[1][i]) + ...) + src[n-1][i], in that order, in float:
   * the tied-weight sum, the same bits on every member. dst may be one of src. */
  void (*sum_ordered)(ExecDevice *d, float *dst, const float *const *src, int n, int64_t numel);
  /* Σ over n tensors of Σ x[i]², in double, to the host: every gradient a step's norm
   * counts, in one call. The CPU sums each tensor as pk_sumsq_f32 does and adds the
   * tensors in order; a GPU may use its own fixed order (the replay set holds it to its
   * own bits); it is a GPU's one synchronisation point. */
  double (*sumsq)(ExecDevice *d, const float *const *x, const int64_t *numel, int n);
  /* the steps of n parameters (ExecOptStep each), all of a stage's in one call, in
   * parameter order, those without a gradient with g NULL — all but 2bw's deferred
   * tied ones, stepped apart (a GPU: one graph or multi-tensor launch) */
  void (*opt_step)(ExecDevice *d, const ExecOptStep *s, int n);
  /* waits for the device: the losses asked for so far have landed */
  void (*flush)(ExecDevice *d);
  /* out-of-range token ids the passes since the last call counted but did not report
   * in ExecPass.bad_ids (the CPU reports each pass's and returns 0); asked at every
   * OPT_STEP, after the norm */
  int64_t (*late_bad_ids)(ExecDevice *d);
  void (*destroy)(ExecDevice *d);
  /* --trace on a device that runs its work after the host issued it (a GPU; NULL: the
   * host's clock times the trace): mark(i, false) before the work of the instruction
   * whose trace events carry mark i, mark(i, true) after it, in stream order;
   * mark_time reads a mark, in seconds since an origin common to every rank, once the
   * device was flushed. */
  void (*mark)(ExecDevice *d, int i, bool end);
  double (*mark_time)(ExecDevice *d, int i, bool end);
  /* Where the rank's weight versions lie in the arena (w[0..n)) and which of them is
   * 2bw's master slot under weight prediction (-1: none), told once after the arena is
   * laid out and before any upload (NULL: the device keeps every version as the float32
   * block the interpreter sees, the CPU's). A device may store a version differently as
   * long as upload and download convert (the CUDA device whose launch lists keep the bf16
   * weight copies in the versions: a weight a GEMM reads is its bf16 copy there,
   * cuda_exec_device.c), and the float32 values read back are then what its passes use. */
  void (*versions)(ExecDevice *d, char *const *w, int n, int master);
} ExecDeviceOps;

struct ExecDevice {
  const ExecDeviceOps *ops;
};

/* (The CUDA device and the same-GPU link of single-GPU pipeline mode are
 * runtime/cuda/exec/cuda_exec.h's cx_exec_device and cx_local_link.) */
/* The CPU device of stage st: loads its program (stage_program_load); NULL with the
 * loader's message. */
ExecDevice *exec_cpu_device(const RtStage *st, char *err, size_t errlen);
/* The stage program a CPU device runs (its file and whether it came from the cache). */
const StageProgram *exec_cpu_program(const ExecDevice *d);
/* pd2bwrun --profile-out: from now on the device runs each training pass of a
 * microbatch from acc->from_mb on segment by segment (the program's per-segment
 * entry points: the same functions in the same order, so the same bits), each
 * segment's time into a row of acc (seg_times_row; nsegs: the program's), until the
 * rows are full. NULL: off, the pass is one call as before. */
void exec_cpu_profile(ExecDevice *d, SegTimes *acc);
void exec_device_destroy(ExecDevice *d);

/* ---- the link ------------------------------------------------------------------ */

typedef struct ExecLink ExecLink;
typedef struct ExecReq ExecReq;
typedef struct ExecGroup ExecGroup;

/* Between the ranks of one run (rank numbers are the plan's: plan.rank_of_replica).
 * Buffers are device memory, except the norm exchange's doubles (tag PIPE_TAG_NORM)
 * and those of the blocking send/recv, which are host memory. Every call returns a
 * TransportStatus; on a failure error() names this rank and what it waited for, and
 * abort(why) makes every other rank stop promptly (the timeouts and the stall
 * detector are the transport's: exec_host_*). Messages with one (peer, tag) arrive in
 * order; a link may move a posted message only at its waitall, and the interpreter
 * leaves a posted buffer alone until then. */
typedef struct ExecLinkOps {
  const char *name;
  /* non-blocking point to point, as transport_post (transport.h): a send
   * (is_send: buf is only read) or a receive, completed together by waitall (the
   * interpreter posts a `with_next` run of instructions at once) */
  TransportStatus (*post)(ExecLink *l, bool is_send, int peer, int tag, void *buf, size_t bytes, const char *what,
                          ExecReq **req);
  TransportStatus (*waitall)(ExecLink *l, ExecReq **reqs, int n);
  /* blocking point to point of host memory (losses for the console line) */
  TransportStatus (*send)(ExecLink *l, int peer, int tag, const void *buf, size_t bytes, const char *what);
  TransportStatus (*recv)(ExecLink *l, int peer, int tag, void *buf, size_t bytes, const char *what);
  /* the replicas of one stage; the sum is the same bits on every member
   * (transport_coll.c: ascending group rank order) */
  TransportStatus (*group_create)(ExecLink *l, const int *ranks, int n, ExecGroup **g);
  void (*group_destroy)(ExecGroup *g);
  TransportStatus (*allreduce_sum_f32)(ExecGroup *g, float *buf, size_t n, const char *what);
  /* what the rank is about to do (the stall detector's record) */
  void (*progress)(ExecLink *l, const char *doing, long long index);
  const char *(*error)(const ExecLink *l);
  void (*abort)(ExecLink *l, const char *why);
  double (*timeout)(const ExecLink *l);
  void (*destroy)(ExecLink *l);
} ExecLinkOps;

struct ExecLink {
  const ExecLinkOps *ops;
  bool process_per_rank; /* each rank is its own process (MPI): an injected exit ends only it */
  ExecLink *host;        /* a device link's exec_transport_link (its exec_host_*); NULL on that link */
};

/* The link over an existing transport (not owned: destroying the link leaves t). */
ExecLink *exec_transport_link(Transport *t);
void exec_link_destroy(ExecLink *l);
/* The one host side of every link (the ExecLinkOps entries of exec_transport_link, and
 * of each device link through its `host`: cuda_link_local.c, cuda_link_nccl.c): host
 * memory, the stall detector, the timeouts that name a dead rank, errors and abort are
 * the transport's, whatever moves the device memory. */
TransportStatus exec_host_send(ExecLink *l, int peer, int tag, const void *buf, size_t bytes, const char *what);
TransportStatus exec_host_recv(ExecLink *l, int peer, int tag, void *buf, size_t bytes, const char *what);
void exec_host_progress(ExecLink *l, const char *doing, long long index);
const char *exec_host_error(const ExecLink *l);
void exec_host_abort(ExecLink *l, const char *why);
double exec_host_timeout(const ExecLink *l);

/* ---- the interpreter -------------------------------------------------------------- */

/* Executes the instructions of batches [lo, hi) of R's stream, in stream order, on
 * R's device and link. Consecutive calls over adjacent ranges compute exactly what
 * one call over their union does (runtime/pipeline/pipeline_rank.h).
 * false on a failure, with the root cause in R->err (every other rank aborted). */
bool exec_run_batches(PipeRank *R, int64_t lo, int64_t hi);
/* With --trace on a device with marks: the recorded events' times become the device's
 * (waits for it first); otherwise nothing. Before the events are gathered. */
void exec_trace_times(PipeRank *R);

#endif
