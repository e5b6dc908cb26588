/* tests/cudaexec/emu_device.h — a CudaDeviceOps table (runtime/cuda/exec/cuda_exec.h) on the host
 * CUDA emulator (tests/cuda/cuda_emu.cpp), shared by the tests of the GPU trainer and
 * of single-GPU pipeline mode.
 *
 * "Loading" a module (a stageN.cu or the plan's kernels.cu) compiles it as host C++
 * with the emulator (emu_module.h), once per distinct text, with a table of its own
 * kernels and the parameter sizes of every kernel it can launch; device memory is
 * host memory; float32 GEMMs run through pd_sgemm (the CPU program's BLAS), bf16 GEMMs
 * through the emulator's emu_gemm_bf16 (bfloat16 A and B widened exactly, float
 * accumulation), which reads only the 16-bit copies the cast launches made. A GEMM's
 * epilogue (pd2bwc --gemm-epilogues on; cuBLASLt's on a GPU) runs as the library
 * kernels it replaces, at the generated launches' block size, so a plan with
 * epilogues trains to the same bits as one without. Kernel
 * arguments are captured at launch with the kernel's own parameter sizes, as
 * cuLaunchKernel does.
 *
 * Streams: EMU_IN_ORDER runs all work at once, as issued. The other orders QUEUE work
 * per stream and run it only when the host must wait (htod, dtoh, sync): each stream
 * as far as it can before the next one starts, lowest or highest stream first; an
 * event wait holds its stream until the record it captured has run. So a missing
 * event/wait between streams shows as stale data, which an in-order device would
 * hide. Event timing (event_ms) runs on a deterministic fake clock: one tick, reported
 * as 1 µs, per operation run (records and waits take none), stamped on an event when
 * its record runs.
 *
 * CUDA graphs: between capture_begin and capture_end, work issued on the capturing
 * stream is recorded and NOT run (kernel arguments captured by value, as CUDA does),
 * so a graph baked with a stale value really replays the stale value; graph_launch
 * issues a copy of the recorded work on its stream, queued like any other work in
 * the device's order. Host waits (htod, dtoh, sync) and event records or waits on
 * the capturing stream during a capture are bugs (CUDA would invalidate the capture)
 * and stop the test. After emu_device_set_graphs(false) the tables emu_device_ops
 * returns have the four graph entries NULL: the device "has no graphs" (a switch, not
 * an argument, so that helpers which open the device themselves, emu_train.c, follow
 * it).
 *
 * There is one device; emu_device_ops resets it for the next run. Every entry of the
 * table takes one process-wide recursive lock (single-GPU pipeline mode issues from a
 * thread per stage replica): queued work runs at a host wait with no other thread
 * issuing, and a capture holds the lock from capture_begin to capture_end. Work files go to `workdir`, which the caller removes.
 */
#ifndef PD2BW_TESTS_CUDAEXEC_EMU_DEVICE_H
#define PD2BW_TESTS_CUDAEXEC_EMU_DEVICE_H

#include "runtime/cuda/exec/cuda_exec.h"

/* How queued work runs. */
typedef enum EmuOrder {
  EMU_IN_ORDER,     /* at once, as issued (events are no-ops) */
  EMU_LOWEST_FIRST, /* queued; at a host wait, stream 0 runs as far as it can, then 1, ... */
  EMU_HIGHEST_FIRST /* queued; the highest stream first */
} EmuOrder;

/* What the device was asked to do since the last emu_device_ops. */
typedef struct EmuCounts {
  int launches;   /* kernel launches */
  int casts;      /* of those, pkc_cast_f32_to_bf16 */
  int att_casts;  /* the casts the tensor-core attention launched beside them: one per
                     pkc_flash_attention_fwd_bf16 (qkv), two per bwd_dq (qkv, dy) */
  int adamw_multi; /* of those, pkc_adamw_multi_dev_f32 (one per stage replica and update) */
  int adamw_one;   /* of those, the per-tensor AdamW kernels (pkc_adamw_step_f32 and _dev) */
  int predicts;    /* of those, the per-tensor weight predictions (pkc_predict_step_dev_f32) */
  int gemms;      /* GEMMs of every type */
  int bf16_gemms; /* of those, GEMM_BF16 */
  int epilogues[GEMM_EPI_COUNT]; /* GEMMs by epilogue ([GEMM_EPI_NONE]: plain ones) */
  int dtods, records, waits; /* device copies, event records, stream waits */
  int max_queued;            /* most operations queued at once (0 in order) */
  int captures;              /* graphs captured (capture_end) */
  int graph_launches;        /* graph_launch calls */
  int graph_ops;             /* operations those issued (not in launches/gemms above, which
                                count only work issued directly, outside any capture) */
  int host_waits;            /* htod, dtoh and sync calls: each waits for all device work */
  int host_stalls;           /* of those, the ones with work issued since the previous host
                                wait: on a GPU the device runs dry there while the host
                                waits, copies and issues more */
} EmuCounts;

/* The device, reset (arena freed, queues and counts emptied), running work in `order`;
 * modules are built under workdir. Every op of the table is set, the graph ops only
 * while graphs are on (emu_device_set_graphs; on at the start). */
CudaDeviceOps emu_device_ops(const char *workdir, EmuOrder order);
void emu_device_set_graphs(bool on);
EmuCounts emu_device_counts(void);
const char *emu_order_name(EmuOrder order);
/* Frees the arena and the queues (the loaded modules stay loaded). */
void emu_device_release(void);

#endif
