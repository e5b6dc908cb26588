/* runtime/cuda/pipe/cuda_pipe.h — the CUDA pipeline modes, as backends of pd2bwrun's
 * one pipeline driver (runtime/driver/driver.c).
 *
 * This folder owns single-GPU mode (cuda_pipe_threads.c: every stage replica of a plan
 * a host thread with its own CUDA device on a view of one GPU, joined by same-GPU
 * links; a one-stage plan is its d = w = 1 case), multi-GPU mode (cuda_pipe_multi.c:
 * one MPI process per stage replica with an NCCL link) and both modes' banner, call
 * and summary (cuda_pipe_main.c). Invariant: both modes are the CPU pipelines'
 * interpreter and driver (data order, scaling, clipping, tied sums, versions,
 * checkpoints, validation and the per-step checks are that code's); only the device
 * and the links (runtime/cuda/exec/) differ. docs/gpu.md, "Single-GPU pipeline mode",
 * says how the memory, the events and the trace work, and "Status" what has run on a GPU.
 */
#ifndef PD2BW_RUNTIME_CUDA_PIPE_H
#define PD2BW_RUNTIME_CUDA_PIPE_H

#include "runtime/cuda/exec/cuda_exec.h"
#include "runtime/driver/driver.h"
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
  GemmType gemm;      /* the dtype its GEMMs ran in (cx_exec_device_gemm_type) */
} CxPipeStats;

/* What a one-stage run leaves for --bench-gemm (cuda_pipe_run.c): the model's MLP
 * GEMM (M = b·T tokens, N = 4·dim, K = dim) in the dtype training ran, and the rate
 * training achieved. M = 0: nothing to time. */
typedef struct CxBench {
  GemmType type;
  int M, N, K;
  double tflops;
} CxBench;

/* Trains plan p (any number of stages and replicas, one included) for o->steps batches on the device
 * behind ops (which needs the stream/event/dtod entries). Fills out as
 * pipeline_run_local does: per-microbatch losses in the reference's order, the newest
 * weights of replica 0, arena_bytes per stage (the SR part, = the plan's figure), and
 * stats (may be NULL). With o->trace_path, out->bubble holds the measured bubble per
 * stage and the trace is written (cuda_pipe_threads.c). 0, or 1 with the cause in err. */
int cx_pipe_train(const PipePlan *p, const CudaDeviceOps *ops, const CxOptions *o, PipeOutcome *out,
                  CxPipeStats *stats, char *err, size_t errlen);

/* The plan's predicted bubble fraction (plan_dir/plan.json "predicted"), or a
 * negative value when the plan has none. */
double cx_pipe_predicted_bubble(const char *plan_dir);

/* cx_main's path for every plan without --transport nccl: pipeline_main_on
 * with single-GPU mode on ops (the device called device_name in messages) as its
 * backend: the CPU pipeline's log, validation, saved/trace lines and --reference, the
 * summary with the graph counts and executor bytes. A one-stage plan (one rank) has the
 * one-stage words: its banner, the summary gpu-check.sh reads (steady-state rate,
 * arena, "saved"), its passes' and updates' graph counts; bench (may be NULL) gets what
 * --bench-gemm times. 0, or 1 after one "prog: error:" line. */
int cx_pipe_main(const char *prog, const char *plan_dir, const CudaDeviceOps *ops, const char *device_name,
                   const CxOptions *o, CxBench *bench);

/* Multi-GPU mode: this process (rank transport_rank(t) of the plan's d·w ranks) trains
 * its stage replica as pipeline_run_rank does on the CPU, on a cx_exec_device over ops
 * (which needs native_stream) with cx_nccl_link (libnccl, or PD2BW_LIBNCCL) between
 * ranks. Collective: every rank calls it. Rank 0's out is filled as pipeline_run_rank
 * fills it; the others' is left empty. Takes o's --save (rank 0 writes it), --resume,
 * --init and validation. 0, or 1 with the cause in err (after transport_abort, so the
 * others stop); or 1 on EVERY rank after a failure all of them agreed on (a checkpoint
 * some rank cannot read, a --save rank 0 cannot write: no abort), the message in rank
 * 0's err and the others' err empty (one message for the job). */
int cx_pipe_train_nccl(const PipePlan *p, const CudaDeviceOps *ops, const CxOptions *o, Transport *t,
                       PipeOutcome *out, char *err, size_t errlen);

/* cx_pipe_main for multi-GPU mode on an open device and transport (pipeline_main_on
 * with this rank of t): rank 0 reports, writes o->log_json and checks o->reference. 0, or 1 after one "prog: error:" line
 * (none on the ranks other than 0 after a failure all agreed on). */
int cx_pipe_nccl_main(const char *prog, const char *plan_dir, const CudaDeviceOps *ops, const char *device_name,
                        const CxOptions *o, Transport *t);

/* pd2bwrun --backend cuda --transport nccl under mpirun: MPI (transport_mpi_create),
 * GPU o->device + this rank's index on its host, cx_pipe_nccl_main, and the
 * transport's end (MPI_Finalize, or MPI_Abort after a failure). */
int cx_pipe_nccl_launch(const char *prog, const char *plan_dir, const CxOptions *o);

/* pd2bwrun --backend cuda: trains the plan in plan_dir on GPU o->device (single-GPU
 * pipeline mode, one-stage plans included; --transport nccl: multi-GPU mode) for
 * o->steps steps, logging like pd2bwrun. 0 on success, 1 after one "prog: error:"
 * line on stderr. */
int cx_main(const char *prog, const char *plan_dir, const CxOptions *o);

#endif /* PD2BW_RUNTIME_CUDA_PIPE_H */
