/* runtime/cuda/pipe/cuda_pipe_multi.c — multi-GPU mode (--transport nccl, cuda_pipe.h):
 * each MPI process is one rank of the CPU MPI pipeline (runtime/pipeline/pipeline_run.c
 * pipeline_run_rank: the PipeRank, the driver loop of init, resume, training,
 * validation, gathering, --save and the agreed error message, and the plan
 * interpreter, runtime/exec/exec_interp.c), with a CUDA device (cx_exec_device: the
 * stage's launch lists, its passes, norm and update as CUDA graphs) and an NCCL link
 * (cx_nccl_link, runtime/cuda/exec/cuda_link_nccl.c) in place of the CPU's, through
 * PipeOptions' per-rank factories. So the update rule, data order, per-step checks,
 * checkpoints and messages are the CPU pipeline's; what this file adds is only the
 * translation of the CUDA options. */
#include "runtime/cuda/pipe/cuda_pipe.h"

#include <string.h>

#include "runtime/exec/exec.h"
#include "runtime/pipeline/pipeline_rank.h"

typedef struct MultiRun {
  const PipePlan *p;
  const CudaDeviceOps *ops;
  const CxOptions *o;
} MultiRun;

static ExecDevice *rank_device(void *ctx, int rank, int stage, char *err, size_t errlen) {
  MultiRun *x = ctx;
  (void)rank;
  /* one batch of every replica's samples (the rank's loader's batch, B = b·w·m) */
  ExecDevice *d = cx_exec_device(x->ops, x->p->rt, stage, x->o->gemm, x->p->b * x->p->m * x->p->w, err, errlen);
  if (d) cx_exec_device_set_versions(d, x->p->st[stage].nversions); /* a bf16 copy of each (pipedream: d of them) */
  return d;
}

static ExecLink *rank_link(void *ctx, Transport *t, ExecDevice *dev, char *err, size_t errlen) {
  return cx_nccl_link(t, ((MultiRun *)ctx)->p, dev, err, errlen);
}

int cx_pipe_train_nccl(const PipePlan *p, const CudaDeviceOps *ops, const CxOptions *o, Transport *t,
                       PipeOutcome *out, char *err, size_t errlen) {
  memset(out, 0, sizeof *out);
  if (transport_size(t) != p->nranks) {
    snprintf(err, errlen, "the plan has %d stage replicas (%d stages x %d replicas) but %d processes were started: "
             "run it as mpirun -np %d", p->nranks, p->d, p->w, transport_size(t), p->nranks);
    transport_abort(t, err);
    return 1;
  }
  MultiRun x = {.p = p, .ops = ops, .o = o};
  /* the CPU driver's options, with this mode's devices and links (no trace or profile:
   * refused by cx_pipe_nccl_launch; the log: streamed by the driver's rank 0) */
  PipeOptions po = *o;
  po.timeout_s = transport_timeout(t), po.trace_path = po.profile_out = NULL;
  po.rank_device = rank_device, po.rank_link = rank_link, po.rank_ctx = &x;
  return pipeline_run_rank(p, &po, t, out, err, errlen);
}
