/* runtime/cuda/pipe/cuda_pipe.h — the CUDA pipeline modes. Single-GPU pipeline mode: every
 * stage replica of a d-stage, w-replica plan on ONE device, so a pipeline plan can be
 * checked on one GPU; a one-stage plan is its d = w = 1 case (pd2bwrun --backend cuda
 * runs every plan here but with --transport nccl). Multi-GPU mode (--transport nccl, cuda_pipe_multi.c): one MPI
 * process per stage replica, each a rank of the CPU MPI pipeline (runtime/pipeline,
 * the plan interpreter runtime/exec/) on the CUDA device of runtime/cuda/exec/
 * (cuda_exec_device.c) with an NCCL link (cuda_link_nccl.c, whose header says what
 * goes where and what has never run).
 *
 * What this folder (runtime/cuda/pipe/, built into pd2bw_cuda_exec) owns:
 *   cuda_pipe_threads.c  single-GPU mode on the shared interpreter (below)
 *   cuda_pipe_multi.c    multi-GPU mode: the CPU MPI pipeline with CUDA devices and
 *                        NCCL links (its device and link factories)
 *   cuda_pipe_main.c     both modes as a backend of pd2bwrun's one pipeline driver
 *                        (runtime/pipeline/pipeline_main.c pipeline_main_on: it adds
 *                        the banner, the training call and the summary's GPU words),
 *                        and multi-GPU mode's launch
 * Both modes are the CPU pipelines' interpreter and driver; the device and the links
 * are runtime/cuda/exec/'s.
 *
 * SINGLE-GPU MODE runs the plan's instruction streams on the CPU pipelines' own
 * interpreter (runtime/exec/exec.h) and driver (runtime/pipeline/pipeline_run.c:
 * pipeline_run_local, so data order, dropout keys, 1/(w·m) scaling, global-norm
 * clipping, tied sums, weight versions, 2bw's deferred tied steps, --init, --resume,
 * --save and validation are that code's, and so are the per-step checks and the step
 * lines). What differs is only where things run:
 *
 *  - a host thread per stage replica ("SR", rank stage·w + replica), each with its own
 *    CUDA device (runtime/cuda/exec/cuda_exec_device.c cx_exec_device: the stage's
 *    launch lists as CUDA graphs, the norm and the update as graphs of their own, the
 *    multi-tensor AdamW writing each version's bf16 copy) on a VIEW of the one GPU
 *    (cuda_exec_share.c: stream 1 + rank, its part of the one allocation, one lock
 *    around the issuing so a capture never interleaves with another thread's work);
 *  - the same-GPU link between them (runtime/cuda/exec/cuda_link_local.c): matching,
 *    rendezvous, the stall detector and the timeouts that name a dead rank are the
 *    local transport's (runtime/transport/transport_local.c), which carries small host
 *    records; a message's data is a device copy on the receiver's stream after an
 *    event of the sender's, and the sender's stream waits for the copy before it
 *    overwrites the buffer; the replica all-reduce sums on the first member's stream in
 *    ascending replica order (transport_coll.c's bits) and copies the sum back; the
 *    norm exchange and the losses are host messages;
 *  - memory: ONE device allocation, one part per SR: the plan's stages[i].memory.
 *    total_bytes (every buffer at its planned offset: the CPU executor's layout), then
 *    the device's extras (reported apart): the launch list's cuda_scratch, norm
 *    partials, the loss ring, the token images of a few batches (uploaded once per
 *    batch), the bf16 copies of the stage's weight versions, the AdamW table;
 *  - --trace: the interpreter marks each instruction's (or send/receive group's) start
 *    and end on the SR's stream with device events against one origin, so the trace
 *    (one process, a thread per SR) and the measured bubble per stage are the GPU's;
 *    --profile-out: each SR's program times its segments (cuda_profile.c).
 * The measured step time is the median of rank 0's update-to-update times after the
 * first step.
 *
 * Tested: in CI, tests/cudaexec/test_cudapipe_emu and the others run it on an emulated
 * device (tests/cudaexec/emu_device.h, thread-safe) whose streams really reorder work,
 * so the event protocol above is checked (without the receiver's wait for the
 * sender's event the run differs from the reference). NOT run on a GPU yet (each rank
 * thread makes the context current through its view: CxDeviceOps thread_enter,
 * runtime/cuda/cuda_device.c cuda_dev_make_current). On an H200 (2026-11-30,
 * bench/gpu/RESULTS.md) the older single-threaded interpreter ran a 4-stage 2bw plan
 * against the CPU reference, and the one-stage trainer (exec_one.c on
 * cuda_exec_device.c) the one-stage plans that now run here on one rank: the next
 * lent GPU's scripts/gpu-check.sh is this path's first run on a GPU.
 *
 * Checkpoints and validation are runtime/pipeline/pipeline_run.c's in both modes:
 * --save writes replica 0 of every stage through the CPU pipeline's writer (pipe_save:
 * the one-stage trainer's format, so any executor resumes it), --resume and --init
 * read any executor's file, --val-data trains in stretches that end where a
 * validation is due (runtime/pipeline/pipeline_eval.h's loss).
 *
 * NOT done: traces and measured bubbles in multi-GPU mode (refused). Overlap is not a
 * goal yet: token uploads and clip norms wait for the whole device. */
#ifndef PD2BW_RUNTIME_CUDA_PIPE_H
#define PD2BW_RUNTIME_CUDA_PIPE_H

#include "runtime/cuda/exec/cuda_exec.h"
#include "runtime/transport/transport.h"

/* What single-GPU mode reports besides the outcome (its summary line). */
typedef struct CxPipeStats {
  uint64_t extra_bytes; /* the device's extras per SR (the largest) */
  uint64_t weights_bf16; /* bf16 lists: the bf16 weight copies allocated, all SRs together
                            (the plan's memory.weights_bf16 summed over stage replicas) */
  CxGraphStats graphs;  /* cx_program_graph_stats summed over every SR's programs */
  CxGraphStats steps;   /* the norms and updates of every SR (cx_exec_device's) */
  CxGraphStats updates; /* the updates alone (a one-stage plan's summary line) */
  uint64_t bytes;       /* the device memory of an SR (the largest: cx_exec_device_bytes) */
  CxGemmType gemm;      /* the dtype its GEMMs ran in (cx_exec_device_gemm_type) */
} CxPipeStats;

/* What a one-stage run leaves for --bench-gemm (cuda_exec_main.c): the model's MLP
 * GEMM (M = b·T tokens, N = 4·dim, K = dim) in the dtype training ran, and the rate
 * training achieved. M = 0: nothing to time. */
typedef struct CxBench {
  CxGemmType type;
  int M, N, K;
  double tflops;
} CxBench;

/* Trains plan p (any number of stages and replicas, one included) for o->steps batches on the device
 * behind ops (which needs the stream/event/dtod entries). Fills out as
 * pipeline_run_local does: per-microbatch losses in the reference's order, the newest
 * weights of replica 0, arena_bytes per stage (the SR part, = the plan's figure), and
 * stats (may be NULL). With o->trace_path, out->bubble holds the measured bubble per
 * stage and the trace is written (cuda_pipe_threads.c). 0, or 1 with the cause in err. */
int cx_pipe_train(const PipePlan *p, const CxDeviceOps *ops, const CudaExecOptions *o, PipeOutcome *out,
                  CxPipeStats *stats, char *err, size_t errlen);

/* The plan's predicted bubble fraction (plan_dir/plan.json "predicted"), or a
 * negative value when the plan has none. */
double cx_pipe_predicted_bubble(const char *plan_dir);

/* cuda_exec_main's path for every plan without --transport nccl: pipeline_main_on
 * with single-GPU mode on ops (the device called device_name in messages) as its
 * backend: the CPU pipeline's log, validation, saved/trace lines and --reference, the
 * summary with the graph counts and executor bytes. A one-stage plan (one rank) has the
 * one-stage words: its banner, the summary gpu-check.sh reads (steady-state rate,
 * arena, "saved"), its passes' and updates' graph counts; bench (may be NULL) gets what
 * --bench-gemm times. 0, or 1 after one "prog: error:" line. */
int cuda_pipe_main(const char *prog, const char *plan_dir, const CxDeviceOps *ops, const char *device_name,
                   const CudaExecOptions *o, CxBench *bench);

/* Multi-GPU mode: this process (rank transport_rank(t) of the plan's d·w ranks) trains
 * its stage replica as pipeline_run_rank does on the CPU, on a cx_exec_device over ops
 * (which needs native_stream) with cx_nccl_link (libnccl, or PD2BW_LIBNCCL) between
 * ranks. Collective: every rank calls it. Rank 0's out is filled as pipeline_run_rank
 * fills it; the others' is left empty. Takes o's --save (rank 0 writes it), --resume,
 * --init and validation. 0, or 1 with the cause in err (after transport_abort, so the
 * others stop); or 1 on EVERY rank after a failure all of them agreed on (a checkpoint
 * some rank cannot read, a --save rank 0 cannot write: no abort), the message in rank
 * 0's err and the others' err empty (one message for the job). */
int cx_pipe_train_nccl(const PipePlan *p, const CxDeviceOps *ops, const CudaExecOptions *o, Transport *t,
                       PipeOutcome *out, char *err, size_t errlen);

/* cuda_pipe_main for multi-GPU mode on an open device and transport (pipeline_main_on
 * with this rank of t): rank 0 reports, writes o->log_json and checks o->reference. 0, or 1 after one "prog: error:" line
 * (none on the ranks other than 0 after a failure all agreed on). */
int cuda_pipe_nccl_main(const char *prog, const char *plan_dir, const CxDeviceOps *ops, const char *device_name,
                        const CudaExecOptions *o, Transport *t);

/* pd2bwrun --backend cuda --transport nccl under mpirun: MPI (transport_mpi_create),
 * GPU o->device + this rank's index on its host, cuda_pipe_nccl_main, and the
 * transport's end (MPI_Finalize, or MPI_Abort after a failure). */
int cuda_pipe_nccl_launch(const char *prog, const char *plan_dir, const CudaExecOptions *o);

#endif /* PD2BW_RUNTIME_CUDA_PIPE_H */
