/* runtime/cuda/pipe/cuda_pipe.h — the CUDA pipeline executor. Single-GPU pipeline mode: every
 * stage replica of a d-stage, w-replica plan on ONE device, so a pipeline plan can be
 * checked on one GPU. Multi-GPU mode (--transport nccl, cuda_pipe_multi.c): one MPI
 * process per stage replica, each a rank of the CPU MPI pipeline (runtime/pipeline,
 * the plan interpreter runtime/exec/) on the CUDA device of runtime/cuda/exec/
 * (cuda_exec_device.c) with an NCCL link (cuda_link_nccl.c, whose header says what
 * goes where and what has never run).
 *
 * What this folder (runtime/cuda/pipe/, built into pd2bw_cuda_exec) owns:
 *   cuda_pipe.c          setup: stage programs, the device allocation, weights, --resume
 *   cuda_pipe_run.c      the interpreter of every stage replica's instruction stream
 *   cuda_pipe_dev.c      its device ops; cuda_pipe_graph.c the step as CUDA graphs
 *   cuda_pipe_link.c     the same-GPU link (single-GPU mode)
 *   cuda_pipe_drive.c    the driver loop; cuda_pipe_main.c pd2bwrun's entry point
 *   cuda_pipe_eval.c     the validation loss; cuda_pipe_trace.c --trace
 *   cuda_pipe_multi.c    multi-GPU mode: the CPU MPI pipeline with CUDA devices and
 *                        NCCL links (its device and link factories)
 *   cuda_pipe_internal.h the executor's state, private to this folder
 *
 * It runs the plan's instruction streams (contract/plan_streams.h plan_streams_build, the
 * same streams runtime/pipeline/pipeline.c interprets on CPU ranks) with the semantics of
 * runtime/pipeline/pipeline.h — data order, dropout keys, 1/(w·m) scaling, global-norm
 * clipping, tied-parameter sums in ascending stage order, weight versions (2bw's two,
 * pipedream's per-stage lag) and 2bw's deferred tied steps — so its losses and weights
 * match the same sequential reference (pipeline_check_reference). What differs is only
 * where things run:
 *
 *  - one host thread issues the instructions of every stage replica ("SR"). It walks
 *    the SRs round-robin and runs each as far as it can; an SR stops at a send/receive
 *    group whose partner messages are not posted yet (messages match FIFO per (sender,
 *    receiver, kind), as MPI's do, and a group completes when all its messages matched:
 *    rendezvous, so the sender's boundary block is never overwritten under a copy), at
 *    ALLREDUCE until every replica of its stage is there, and at OPT_STEP until every
 *    stage of its pipeline is there (the global norm needs them all: the CPU executor's
 *    norm exchange). A full round in which nothing moves is a stall, reported with
 *    every SR's blocked instruction, never a hang;
 *  - each SR has its own compute stream (ops stream 1 + its index) and event; the
 *    communication stream (ops stream 0) carries every cross-SR operation: a matched
 *    message is a device-to-device copy there, after the sender's and receiver's
 *    streams (events), and both streams wait for it before their next work; the replica
 *    all-reduce (pkc_axpy_f32 into replica 0's gradients in replica order, then
 *    copies back) and the tied-gradient sum (axpy in ascending stage order into the
 *    first member's buffer, copies to the others) likewise;
 *  - memory: ONE device allocation (ops->alloc is once per device), carved into one
 *    part per SR of exactly the plan's stages[i].memory.total_bytes, every buffer at its
 *    planned offset (weights × versions, grads, tied_grads, adam m/v, stash slots,
 *    activations, inputs, boundary, workspace; the CPU executor's layout), then the
 *    executor's own extras per SR (reported apart): the launch list's cuda_scratch,
 *    norm partials, the losses, and the token images of NB batches (uploaded once per
 *    batch, copied into the inputs block before each FWD/BWD on the SR's stream);
 *  - OPT_STEP: the AdamW/SGD kernels with the CPU executor's scale; the per-stage Σg²
 *    (pkc_sumsq kernels) come back to the host once per batch (the global norm, for
 *    clipping, the console and the log, in both modes).
 *
 * Both modes are one interpreter (cuda_pipe_run.c) over a link (same-GPU copies, or
 * NCCL): cuda_pipe_internal.h names the seams. The measured step time is the median
 * of the update-to-update times after the first step, as the CPU pipeline's.
 *
 * Tested: in CI, tests/cudaexec/test_cudapipe_emu runs it on an emulated device whose
 * streams really reorder work, so the event protocol above is checked; on an H200
 * (2026-11-30, bench/gpu/RESULTS.md), scripts/gpu-check.sh step (c) ran a 4-stage 2bw
 * plan against the CPU reference, with GEMMs of several streams in flight on one cuBLAS
 * handle (each stream has its own workspace: runtime/cuda/cuda_device.c).
 *
 * Checkpoints and validation, as runtime/pipeline/pipeline_run.c does them (single-GPU mode
 * here; multi-GPU mode IS pipeline_run.c's, per rank):
 * --save writes replica 0 of every stage through the CPU pipeline's writer (pipe_save:
 * the one-stage trainer's format, so any executor resumes it); --resume loads one
 * (any executor's) into the slots the streams use at its step and runs only the
 * instructions of the later batches (cp_select); --init reads the weights with
 * ckpt_import; --val-data trains in stretches that end where a validation is due and
 * evaluates between them (cuda_pipe_eval.c: runtime/pipeline/pipeline_eval.h's loss).
 *
 * --trace (single-GPU mode, cuda_pipe_trace.c): every instruction of every SR timed
 * with device events (FWD/BWD/OPT_STEP on the SR's stream, sends/receives as their
 * copies and ALLREDUCE as its sums on the communication stream), read back at the
 * host waits the run makes anyway, written in the CPU executor's Chrome trace form
 * (one process, one thread per SR); the bubble per stage measured as the CPU
 * executor measures it, printed beside the plan's prediction with the CUDA graph
 * counts. Untested on a GPU (the emulator's clock is a fake: tests check order and
 * counts, not times).
 *
 * NOT done: traces and measured bubbles in multi-GPU mode (refused).
 * Overlap is not a goal yet: a message
 * fences the sender's stream after the receiver's earlier work too, token uploads and
 * clip norms wait for the whole device. */
#ifndef PD2BW_RUNTIME_CUDA_PIPE_H
#define PD2BW_RUNTIME_CUDA_PIPE_H

#include "runtime/cuda/exec/cuda_exec.h"
#include "runtime/transport/transport.h"

/* Trains plan p (several stages and/or replicas) for o->steps batches on the device
 * behind ops (which needs the stream/event/dtod entries). Fills out as
 * pipeline_run_local does: per-microbatch losses in the reference's order, the newest
 * weights of replica 0, arena_bytes per stage (the SR part, = the plan's figure). 0, or
 * 1 with the cause in err. extra_bytes (may be NULL): the executor's extras per SR. */
int cx_pipe_train(const PipePlan *p, const CxDeviceOps *ops, const CudaExecOptions *o, PipeOutcome *out,
                  uint64_t *extra_bytes, char *err, size_t errlen);

/* What single-GPU mode reports besides the outcome (its summary line). */
typedef struct CxPipeStats {
  uint64_t extra_bytes; /* the executor's extras per SR (the largest) */
  uint64_t weights_bf16; /* bf16 lists: the bf16 weight copies allocated, all SRs together
                            (the plan's memory.weights_bf16 summed over stage replicas) */
  CxGraphStats graphs;  /* cx_program_graph_stats summed over the stage programs */
  CxGraphStats steps;   /* the norms and updates of every SR (cuda_pipe_graph.c) */
} CxPipeStats;

/* cx_pipe_train, filling stats (may be NULL). With o->trace_path, out->bubble holds
 * the measured bubble per stage and the trace is written (cuda_pipe_trace.c). */
int cx_pipe_train_stats(const PipePlan *p, const CxDeviceOps *ops, const CudaExecOptions *o, PipeOutcome *out,
                        CxPipeStats *stats, char *err, size_t errlen);

/* The plan's predicted bubble fraction (plan_dir/plan.json "predicted"), or a
 * negative value when the plan has none. */
double cx_pipe_predicted_bubble(const char *plan_dir);

/* cuda_exec_main's path for a plan with several stages or replicas: trains on ops (the
 * device called device_name in messages), reports like pd2bwrun's pipeline path,
 * writes o->log_json, and with o->reference compares with the sequential reference.
 * 0, or 1 after one "prog: error:" line. */
int cuda_pipe_main(const char *prog, const char *plan_dir, const CxDeviceOps *ops, const char *device_name,
                   const CudaExecOptions *o);

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

/* cuda_pipe_main for multi-GPU mode on an open device and transport: rank 0 reports,
 * writes o->log_json and checks o->reference. 0, or 1 after one "prog: error:" line
 * (none on the ranks other than 0 after a failure all agreed on). */
int cuda_pipe_nccl_main(const char *prog, const char *plan_dir, const CxDeviceOps *ops, const char *device_name,
                        const CudaExecOptions *o, Transport *t);

/* pd2bwrun --backend cuda --transport nccl under mpirun: MPI (transport_mpi_create),
 * GPU o->device + this rank's index on its host, cuda_pipe_nccl_main, and the
 * transport's end (MPI_Finalize, or MPI_Abort after a failure). */
int cuda_pipe_nccl_launch(const char *prog, const char *plan_dir, const CudaExecOptions *o);

#endif /* PD2BW_RUNTIME_CUDA_PIPE_H */
