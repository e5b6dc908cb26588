/* runtime/exec/exec.h — the interpreter of a plan's instruction streams, and the two
 * seams it runs over: a DEVICE (where a stage's memory lives and its arithmetic runs)
 * and a LINK (how a rank reaches the other ranks).
 *
 * What this folder owns:
 *   exec_interp.c     the interpreter: one rank's instruction stream (FWD, BWD, the
 *                     sends and receives, ALLREDUCE, TIED_SYNC, OPT_STEP) executed in
 *                     stream order, with the tied-weight sums, the gradient scale and
 *                     clipping by the global norm, the optimizer step and its has-grad
 *                     rule, the console's step line, the per-step checks of every
 *                     mode (a non-finite loss, token ids outside the vocabulary: one
 *                     message, the run stopped), the events of the trace and the
 *                     injected faults (PD2BW_FAULT_INJECT).
 *   exec_cpu.c        the CPU device (the stage program's host functions, the
 *                     kernels/cpu_kernels.h kernels, memcpy/memset).
 *   (runtime/cuda/exec/cuda_exec_device.c: the CUDA device, cx_exec_device: the stage's
 *                     launch lists and the GPU trainer's kernels over a CxDeviceOps
 *                     table; the one-stage trainer takes it as TrainerOptions.device,
 *                     multi-GPU mode's ranks through PipeOptions.rank_device.)
 *   exec_link_transport.c  the link over runtime/transport/transport.h (local threads or MPI).
 *   (runtime/cuda/exec/cuda_link_local.c: the same-GPU link of single-GPU pipeline mode,
 *                     over the local transport; pipeline.h's PipeOptions rank_device and
 *                     rank_link give each rank its own device and link.)
 *   (runtime/cuda/exec/cuda_link_nccl.c: the NCCL link of multi-GPU mode, cx_nccl_link.)
 *   exec_one.c        the one-stage trainer (runtime/core/runtime.h trainer_*): a plan with
 *                     d = 1 and w = 1 on the CPU device and a one-rank link, stepped
 *                     batch by batch (tests, tools, bench; every pd2bwrun plan, one-stage
 *                     included, runs on runtime/pipeline/pipeline_main.c's driver).
 * The rank's state (PipeRank: its arena, slots, streams, data) is set up by
 * runtime/pipeline/pipeline.c and is the interpreter's input; the contract of what a run
 * computes (data order, sums, scale) is runtime/pipeline/pipeline.h's.
 *
 * The interpreter touches memory only through the device and other ranks only
 * through the link, so another device or link changes nothing here. Every pointer
 * the interpreter hands the device points into the rank's arena (device memory:
 * exec_arena_alloc), except the host scalars named below.
 *
 * A DEVICE implements ExecDeviceOps. Order and rounding are part of the contract:
 * the replay set (docs/replay.md) holds every device to the CPU's bits where the
 * arithmetic is the same.
 *   arena_alloc/free  one zeroed block of the plan's memory.total_bytes, 256-byte
 *                     aligned; the rank finds every buffer at its planned offset.
 *   forward/backward  a stage's pass over the blocks of ExecPass (the stage program
 *                     loaded by the device; backward ADDS into the gradient block);
 *                     the loss, when asked, and the count of out-of-range token ids
 *                     come back in host memory. A GPU may deliver both late, so that
 *                     a step's passes run without a host wait: the loss by the next
 *                     sumsq or flush, the count through late_bad_ids.
 *   flush             waits for the device: the losses asked for so far have landed.
 *   late_bad_ids      out-of-range token ids the passes since the last call counted
 *                     but did not report in ExecPass.bad_ids (the CPU reports every
 *                     pass's there and returns 0; a GPU counts on the device and
 *                     reads the count at its next host wait). The interpreter asks at
 *                     every OPT_STEP, after the norm.
 *   load_samples      the token/target inputs of samples [first, first + b) from the
 *                     host DataLoader into the inputs block (a GPU: via a host stage;
 *                     it may upload the whole batch at its first sample, once).
 *   copy, zero        device-to-device copy and clear of `bytes`.
 *   upload, download  host memory into the arena, and the arena into host memory once
 *                     the device's work on it is done (weights at the start, a
 *                     checkpoint read or written, the results gathered): the only
 *                     way the runtime's host code reads or writes the arena.
 *   sum_ordered       dst[i] = ((src[0][i] + src[1][i]) + ...) + src[n-1][i], in that
 *                     order per element, in float (the tied-weight sum: every member
 *                     of a group gets the same bits). dst may be one of src.
 *   sumsq             Σ over n tensors of Σ x[i]², in double, returned to the host:
 *                     every gradient a step's norm counts, in one call. The CPU sums
 *                     each tensor as pk_sumsq_f32 does (fixed blocking) and adds the
 *                     tensors in order; a GPU may reduce all of them at once (its own
 *                     fixed order: the replay set holds it to its own bits).
 *   opt_step          the optimizer step of n parameters (ExecOptStep each: in place
 *                     or from one weight version into another), all of a stage's
 *                     parameters in one call, in parameter order, those without a
 *                     gradient with g NULL (copied into the version written) — all
 *                     but 2bw's deferred tied ones, stepped apart (a GPU: one graph,
 *                     or one multi-tensor launch; the CPU: in turn).
 * A CUDA device implements them with the stage's kernels on one stream (a pass may
 * be a captured graph), cudaMemcpyAsync/cudaMemsetAsync, a deterministic reduction
 * for sumsq (its one synchronisation point) and the fused optimizer kernel.
 *
 * A LINK implements ExecLinkOps between the ranks of one run (rank numbers are the
 * plan's: stage replica (i, r) is plan.rank_of_replica). Buffers are device
 * memory, except the norm exchange's doubles (tag PIPE_TAG_NORM) and those of the
 * blocking send/recv, which are host memory. Every call
 * returns a TransportStatus; on a failure error() names this rank and what it waited
 * for, and abort(why) makes every other rank stop promptly — the timeouts that name a
 * dead rank and the stall detector (progress) are the transport's (exec_host_*, below,
 * on every link). tag separates streams
 * of messages between one pair of ranks; messages with one (peer, tag) arrive in order.
 *   isend/irecv/waitall  non-blocking point to point, completed together by waitall
 *                     (the interpreter posts a `with_next` run of instructions at once).
 *   send/recv         blocking point to point (losses for the console line).
 *   group_create/allreduce_sum_f32/group_destroy  the replicas of one stage; the sum
 *                     must be the same bits on every member (transport_coll.c: in
 *                     ascending group rank order).
 *   progress          what the rank is about to do (the stall detector's record).
 * The NCCL link (cuda_link_nccl.c) issues the requests a waitall is given as one
 * group of ncclSend/ncclRecv on the device's one stream (the work after it is ordered
 * after it by the stream itself), the all-reduce as ncclAllReduce, and leaves host
 * memory and failures to the transport; the same-GPU link (every stage replica a
 * thread of one process on one device: cuda_link_local.c) implements a send as a
 * device copy into the receiver's buffer on the receiver's stream, after an event of
 * the sender's, posted when both sides have posted, the sender's stream then waiting
 * for the copy. Tag PIPE_TAG_NORM carries host doubles; send/recv carry host memory.
 * A link may move a posted message only at its waitall: the interpreter leaves a
 * posted buffer alone until then.
 */
#ifndef PD2BW_RUNTIME_EXEC_EXEC_H
#define PD2BW_RUNTIME_EXEC_EXEC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "runtime/core/runtime.h"
#include "runtime/pipeline/seg_times.h"
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
  char *(*arena_alloc)(ExecDevice *d, uint64_t bytes, const char *what);
  void (*arena_free)(ExecDevice *d, char *arena);
  void (*forward)(ExecDevice *d, ExecPass *p);
  void (*backward)(ExecDevice *d, ExecPass *p);
  void (*load_samples)(ExecDevice *d, char *inputs, DataLoader *dl, int64_t first, int64_t b);
  void (*copy)(ExecDevice *d, void *dst, const void *src, uint64_t bytes);
  void (*zero)(ExecDevice *d, void *dst, uint64_t bytes);
  void (*upload)(ExecDevice *d, void *dst, const void *host, uint64_t bytes);
  void (*download)(ExecDevice *d, void *host, const void *src, uint64_t bytes);
  void (*sum_ordered)(ExecDevice *d, float *dst, const float *const *src, int n, int64_t numel);
  double (*sumsq)(ExecDevice *d, const float *const *x, const int64_t *numel, int n);
  void (*opt_step)(ExecDevice *d, const ExecOptStep *s, int n);
  void (*flush)(ExecDevice *d);
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

typedef struct ExecLinkOps {
  const char *name;
  TransportStatus (*isend)(ExecLink *l, int peer, int tag, const void *buf, size_t bytes, const char *what,
                           ExecReq **req);
  TransportStatus (*irecv)(ExecLink *l, int peer, int tag, void *buf, size_t bytes, const char *what,
                           ExecReq **req);
  TransportStatus (*waitall)(ExecLink *l, ExecReq **reqs, int n);
  TransportStatus (*send)(ExecLink *l, int peer, int tag, const void *buf, size_t bytes, const char *what);
  TransportStatus (*recv)(ExecLink *l, int peer, int tag, void *buf, size_t bytes, const char *what);
  TransportStatus (*group_create)(ExecLink *l, const int *ranks, int n, ExecGroup **g);
  void (*group_destroy)(ExecGroup *g);
  TransportStatus (*allreduce_sum_f32)(ExecGroup *g, float *buf, size_t n, const char *what);
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
