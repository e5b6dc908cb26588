/* runtime/cuda/exec/cuda_exec.h — the launch-list executor (pd2bw_cuda_exec): replays the
 * launch lists pd2bwc writes (contract/contract.h) through the device table CudaDeviceOps
 * (runtime/cuda/cuda_backend.h, which fills a real GPU's; cuda_exec_dev_none.c stands in
 * without the toolkit), so the host CUDA emulator (tests/cuda/cuda_emu.h) runs the very
 * lists a GPU would. cuda_exec_list.c loads a list once into flat arrays and replays a
 * pass with no allocation, captured once as a CUDA graph (cx_program_run);
 * cuda_exec_device.c makes a stage the interpreter's device (runtime/exec/exec.h),
 * cuda_exec_step.c its step graphs, cuda_adamw_multi.c its one-launch AdamW;
 * cuda_exec_share.c and cuda_link_local.c share one GPU among single-GPU pipeline mode's
 * ranks, cuda_link_nccl.c links multi-GPU mode's; cuda_exec_kprof.c is a timing wrapper
 * for --kernel-profile. docs/gpu.md has the design. Promise: without a GPU driver,
 * opening the device fails with "cuda backend: no CUDA driver found (...); use --backend
 * cpu", exit status 1, never a crash; a plan without launch lists is a user error naming
 * the missing file. */
#ifndef PD2BW_RUNTIME_CUDA_EXEC_H
#define PD2BW_RUNTIME_CUDA_EXEC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "runtime/cuda/cuda_backend.h" /* CudaDeviceOps: the device the executor drives */
#include "runtime/pipeline/pipeline.h"
#include "runtime/exec/seg_times.h"

/* Clears ops' four graph entries (pd2bwrun --cuda-graphs off). */
void cx_ops_no_graphs(CudaDeviceOps *ops);

/* ---- the interpreter core (cuda_exec_list.c) ------------------------------------- */

/* The blocks a launch list's pointers name: BufClass values (contract/contract.h) for
 * params .. boundary, then the CUDA-only scratch and, in bf16 lists, params_bf16: the
 * bfloat16 copy of the weight version a pass uses (params' layout at half the offsets;
 * the optimizer step writes it), where the GEMMs read their weight operands. */
enum { CX_SCRATCH = BUF_CLASS_COUNT, CX_PARAMS16, CX_NBLOCKS };
/* Block c's name in a launch list. */
static inline const char *cx_block_name(int c) {
  return c == CX_SCRATCH ? "cuda_scratch" : c == CX_PARAMS16 ? "params_bf16" : buf_class_name((BufClass)c);
}

typedef enum CxPass {
  CX_FORWARD, /* "forward": one microbatch's forward (writes the loss on the last stage) */
  CX_BACKWARD /* "backward": the same microbatch's backward; ADDS into grads */
} CxPass;

typedef struct CxProgram CxProgram;

/* What a replay needs besides the list: the block bases of this microbatch (params:
 * the weight version it uses; stash: its slot) and the runtime arguments. */
typedef struct CxReplay {
  GpuPtr base[CX_NBLOCKS]; /* indexed by BufClass / CX_SCRATCH; [BUF_NONE] unused */
  uint64_t seed;
  uint32_t microbatch; /* global index: keys the dropout streams (written to the device
                          before the pass: see cx_program_run) */
  bool training;       /* false: dropout is the identity */
  int stream;
} CxReplay;

/* Reads plan_dir/stage<stage>.launch.json, its stageN.cu and the plan's kernel
 * library (kernels.cu), checks both sources' hashes against the list's (before
 * compiling either), loads both modules through ops (the library first) and resolves
 * every kernel in the module its entry names.
 * gemm != GEMM_PLAN overrides the list's GEMM dtype between fp32 and tf32 (a
 * "bf16" list's GEMMs read bf16 staging buffers: overriding them is an error, and so
 * is GEMM_BF16 on a float32 list: pd2bwc --precision bf16 makes the casts). NULL
 * with a message naming the file (a plan made with --backend cpu has no launch lists). */
CxProgram *cx_program_load(const CudaDeviceOps *ops, const char *plan_dir, int stage, GemmType gemm,
                           char *err, size_t errlen);
void cx_program_free(CxProgram *p);
/* Bytes of block c (CX_SCRATCH included) the list needs. */
int64_t cx_program_block(const CxProgram *p, int c);
/* Offset of the f32 loss in CX_SCRATCH, or -1 (the stage has no loss); of the u64
 * out-of-range id counter the runtime zeroes and reads. */
int64_t cx_program_loss_offset(const CxProgram *p);
int64_t cx_program_bad_ids_offset(const CxProgram *p);
/* A bf16 list whose weight versions hold the bf16 copies (2bw's weight prediction,
 * codegen.h CodegenCudaOptions.bf16_in_versions): the byte offsets in the params block
 * of the weights a GEMM reads from the version itself, *n of them (their bf16 copy in
 * the first half of their float32 place; params_bf16 is the version's params block);
 * NULL, *n = 0: the copies are beside the versions. */
const int64_t *cx_program_folded(const CxProgram *p, int *n);
/* The list's "bf16_in_versions" when it has one (else *off NULL: true): offsets inside
 * the params block (params bytes), whose params_bf16 block must be as large, into *off
 * (pd_malloc'd, *n of them); false: malformed (cuda_exec_fold.c). */
bool cx_fold_offsets(const struct cJSON *list, int64_t params, int64_t params_bf16, int64_t **off, int *n);
/* The library kernels (cuda_kernels.cuh) the executor launches itself (cuda_exec_device.c,
 * cuda_exec_list.c): cx_library_complete's one list, in this order. */
typedef enum CxLibKernel {
  CX_K_SET_U32, CX_K_SUMSQ_PARTIAL, CX_K_SUMSQ_FINAL, CX_K_COPY, CX_K_ADAMW_DEV, CX_K_SGD_DEV, CX_K_SUM_ORDERED,
  CX_K_CAST_BF16, CX_K_ADAMW_MULTI, CX_K_PREDICT_DEV, CX_NLIB_KERNELS
} CxLibKernel;
/* Library kernel k of the program, looked up (and checked) once by cx_program_load. */
void *cx_program_lib_kernel(const CxProgram *p, CxLibKernel k);
/* Any kernel of the program's library module, by name; PD_CHECKs it exists. */
void *cx_program_kernel(const CxProgram *p, const char *name);
int cx_program_nlaunches(const CxProgram *p, CxPass pass); /* kernels + GEMMs */
/* The dtype of the program's GEMMs as loaded (overrides applied; the first GEMM's when
 * they differ, GEMM_FP32 when there is none): what a benchmark beside it times. */
GemmType cx_program_gemm_type(const CxProgram *p);
/* Replays pass `pass` with bases and runtime values from r. Asynchronous. When the
 * pass has dropout it first launches pkc_set_u32(scratch + microbatch_key,
 * r->microbatch) on r->stream (stream-ordered, no host wait). With graph ops, the
 * pass's launches are cached as CUDA graphs keyed by (pass, every base, stream,
 * training, seed): the first sighting of a key replays eagerly (warms cuBLAS and
 * module loading), the second captures, instantiates and launches it, later ones
 * launch it; past CX_MAX_GRAPHS graphs a program replays eagerly. A failed capture is
 * a bug (pd_fatal). */
void cx_program_run(CxProgram *p, CxPass pass, const CxReplay *r);
#define CX_MAX_GRAPHS 64
/* What cx_program_run did so far (tests; the GPU's summary lines). */
typedef struct CxGraphStats {
  int64_t captured; /* graphs captured and instantiated */
  int64_t launches; /* passes run as a graph launch */
  int64_t eager;    /* passes replayed launch by launch */
} CxGraphStats;
CxGraphStats cx_program_graph_stats(const CxProgram *p);

/* The per-step optimizer values on the device (lr, 1/m times the clip factor, t + 1,
 * the delay compensation in force: 0 in a flushed step; the weight prediction's k):
 * kernels/cuda_adamw_multi.cuh's pkc_step_scalars, field for field. */
typedef struct CxStepScalars {
  double lr, grad_scale;
  int64_t t;
  double delay_comp, predict;
} CxStepScalars;
_Static_assert(sizeof(CxStepScalars) == 40, "CxStepScalars must match pkc_step_scalars");

/* One of a step's own CUDA graphs (a norm or an update, outside the passes), keyed by
 * what its frozen arguments depend on. */
typedef struct CxStepGraph {
  uint64_t key;
  bool seen;
  void *graph;
} CxStepGraph;
/* Issues issue(arg)'s work on `stream` through g as cx_program_run does a pass:
 * eagerly when g is NULL, there are no graph ops or on its first sighting, captured on
 * the second, launched after; counted in *stats (NULL: not counted). A failed capture
 * is a bug (pd_fatal, naming stage and replica). (cuda_exec_step.c) */
void cx_step_graph_run(const CudaDeviceOps *ops, int stream, CxStepGraph *g, void (*issue)(void *), void *arg,
                       CxGraphStats *stats, int stage, int replica);
/* The stage's segments (the list's "segments"). */
int cx_program_segments(const CxProgram *p);

/* ---- the launch list's files (cuda_exec_files.c), for cx_program_load ------------- */

/* plan.json's stages[stage].program.cuda: the launch list's file name (into lname) and
 * the stage's rng_base. false with a message. */
bool cx_stage_files(const char *plan_dir, int stage, char *lname, size_t lsize, uint32_t *rng_base, char *err,
                    size_t errlen);
/* plan_dir/name, checked to hash to `want` (the launch list lpath's record); NULL with
 * a message. */
char *cx_read_checked(const char *plan_dir, const char *name, const char *want, const char *lpath, char *err,
                      size_t errlen);
/* Whether the loaded kernel library has every CxLibKernel (each into out[k]); false with
 * "regenerate the plan" (a plan from an older pd2bwc). */
bool cx_library_complete(const CudaDeviceOps *ops, void *module, const char *plan_dir, void **out, char *err,
                         size_t errlen);

/* ---- profiles: --profile-out (cuda_profile.c) -------------------------------------- */

/* From now on cx_program_run replays each training pass of a microbatch from from_mb
 * on (the reference's index, CxReplay.microbatch) launch by launch, not as a graph,
 * with a device event at each segment boundary, and keeps each segment's time. Off
 * (never called): cx_program_run is unchanged. */
void cx_program_profile(CxProgram *p, int64_t from_mb);
/* The times so far (waits for the device first); NULL when not profiled. */
const SegTimes *cx_program_profile_times(CxProgram *p);
/* What cx_program_run calls (cuda_profile.c). */
typedef struct CxProfile CxProfile;
CxProfile *cx_profile_create(const CudaDeviceOps *ops, int nsegs, int64_t from_mb);
void cx_profile_destroy(CxProfile *f);
bool cx_profile_timed(const CxProfile *f, const CxReplay *r);
/* Records the pass's first event on `stream`; returns its record. */
int cx_profile_begin(CxProfile *f, CxPass pass, int stream);
/* Records the event after segment seg of record rec. */
void cx_profile_mark(CxProfile *f, int rec, int seg);
const SegTimes *cx_profile_times(CxProfile *f);

/* ---- what pd2bwrun --backend cuda asks for (runtime/cuda/pipe/) -------- */

/* pd2bwrun's options are one struct for every backend (runtime/pipeline/pipeline.h
 * PipeOptions: data, steps, checkpoints, validation, log, --reference, and the GPU's
 * device, gemm override, graphs off, bench and kernel profile). */
typedef PipeOptions CxOptions;

/* ---- the plan interpreter's CUDA device (cuda_exec_device.c) -------------------- */

typedef struct ExecDevice ExecDevice;

/* Stage `stage` of plan on the device behind ops (which outlives it) as a device of
 * the plan interpreter (runtime/exec/exec.h): its launch lists loaded (gemm as
 * cx_program_load takes it), its arena the table's one allocation; batch_samples:
 * the samples of one batch (b·m·w), uploaded at once. NULL with a message naming
 * the plan. Destroyed with exec_device_destroy. */
ExecDevice *cx_exec_device(const CudaDeviceOps *ops, const RtPlan *plan, int stage, GemmType gemm,
                           int64_t batch_samples, char *err, size_t errlen);
/* How its passes ran (cx_program_graph_stats), its optimizer steps and its norms
 * (eager, captured, launched as a graph). */
CxGraphStats cx_exec_device_pass_stats(const ExecDevice *d);
CxGraphStats cx_exec_device_update_stats(const ExecDevice *d);
CxGraphStats cx_exec_device_norm_stats(const ExecDevice *d);
/* The device memory it holds (the arena and its extras), once the arena is allocated;
 * the dtype of its GEMMs (cx_program_gemm_type). */
uint64_t cx_exec_device_bytes(const ExecDevice *d);
GemmType cx_exec_device_gemm_type(const ExecDevice *d);
/* Its stage program (cx_program_profile: --profile-out). */
CxProgram *cx_exec_device_program(ExecDevice *d);
/* The table it issues on: everything goes on its stream 0 (the same-GPU link and the
 * NCCL link, cx_nccl_link, issue there too, so the passes are ordered after them). */
const CudaDeviceOps *cx_exec_device_ops(const ExecDevice *d);
/* A pipeline rank: n weight versions (the plan's, at most PIPE_MAX_SLOTS) get a bf16
 * copy each (default 2). Before the arena. */
void cx_exec_device_set_versions(ExecDevice *d, int n);
/* The bf16 weight copies it holds beside the versions (0 where the versions hold them,
 * cx_program_folded), once set_versions was called. */
uint64_t cx_exec_device_bf16_bytes(const ExecDevice *d);
/* The bf16 copy of the weight version at w (a params block of the arena; registered
 * as a version with a copy if it was not, as a pass reading it would) and whether it
 * is stale, cast again before a pass reads it; 0 for a plan without bf16 copies. What
 * the optimizer step left there, for tests: a copy that is not stale must be the cast
 * of its version. */
GpuPtr cx_exec_device_bf16_copy(ExecDevice *d, const void *w, bool *stale);
/* --trace: the interpreter's clock marks (runtime/exec/exec.h mark) become events on
 * the device's stream, read as seconds since `origin` (an event of the same GPU,
 * recorded and complete before the run: every rank's times on one clock). NULL (the
 * default): no marks. */
void cx_exec_device_set_origin(ExecDevice *d, void *origin);
/* fn(ctx, d) is called as d is destroyed, before anything of it is freed (its counts,
 * its program's profile: single-GPU mode reads them as each rank ends). */
void cx_exec_device_at_end(ExecDevice *d, void (*fn)(void *ctx, ExecDevice *d), void *ctx);
/* Bytes the device's one allocation takes for an arena of arena_bytes (cx_share_reserve). */
uint64_t cx_exec_device_need(const ExecDevice *d, uint64_t arena_bytes);

/* ---- one GPU, several ranks (cuda_exec_share.c, cuda_link_local.c) --------------- */

/* Single-GPU pipeline mode: every stage replica a host thread with its own device
 * (cx_exec_device) on a VIEW of the one GPU: stream 0 of rank r's view is the GPU's
 * stream 1 + r, its alloc hands out rank r's part of the one allocation
 * cx_share_reserve made (bytes[r] each), and every call of every view runs under one
 * lock (held from capture_begin to capture_end). gpu outlives the share. NULL with a
 * message (a device without streams, events or device copies). */
typedef struct CxShare CxShare;
CxShare *cx_share_create(const CudaDeviceOps *gpu, int nranks, char *err, size_t errlen);
const CudaDeviceOps *cx_share_view(CxShare *sh, int rank);
bool cx_share_reserve(CxShare *sh, const uint64_t *bytes, char *err, size_t errlen);
void cx_share_destroy(CxShare *sh);
/* The same-GPU link (runtime/exec/exec.h) of the rank whose device is dev (a
 * cx_exec_device on a share view: its sum_ordered sums the replicas) and which issues
 * on ops (that view: cx_exec_device_ops) over the local transport t (not owned). */
typedef struct ExecLink ExecLink;
typedef struct Transport Transport;
ExecLink *cx_local_link(Transport *t, ExecDevice *dev, const CudaDeviceOps *ops);

/* ---- multi-GPU mode's link (cuda_link_nccl.c; cuda_exec_dev_none.c without the toolkit) */

/* The plan interpreter's link of this process's rank of plan p (one MPI process per
 * stage replica, t its transport, dev a cx_exec_device of the rank's stage, which needs
 * native_stream): device memory by NCCL (libnccl, or PD2BW_LIBNCCL) on dev's stream,
 * host memory, progress and failures over t (runtime/exec/exec.h). Its communicators
 * are made at its first NCCL call. NULL with a message (no libnccl, no stream handles). */
ExecLink *cx_nccl_link(Transport *t, const PipePlan *p, ExecDevice *dev, char *err, size_t errlen);

/* ---- the kernel profile (cuda_exec_kprof.c) -------------------------------------- */

typedef struct CxKprof CxKprof;
/* Fills *out with a table that passes every op on to `in` (which outlives it), each
 * launch and GEMM between two event records on its stream, and no graph entries
 * (every pass eager). */
CxKprof *cx_kprof_wrap(const CudaDeviceOps *in, CudaDeviceOps *out);
/* Waits for the device, then writes (atomically) the Markdown table of the ten
 * kernels (GEMMs by dtype and shape) with the most GPU time, and one row for the
 * rest: calls, ms, share of the total; `what` names the run in its first line.
 * The last use of k but cx_kprof_free. false with a message. */
bool cx_kprof_write(CxKprof *k, const char *path, const char *what, char *err, size_t errlen);
/* Destroys its events (before the device closes) and frees it. */
void cx_kprof_free(CxKprof *k);

/* cx_main on an open device (tests pass the emulator's): cx_pipe_main (no
 * --bench-gemm). */
int cx_run(const char *prog, const char *plan_dir, const CudaDeviceOps *ops, const char *device_name,
                  const CxOptions *o);

#endif /* PD2BW_RUNTIME_CUDA_EXEC_H */
