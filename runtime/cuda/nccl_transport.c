/* runtime/cuda/nccl_transport.c — NCCL communicators for multi-GPU pipeline mode's link
 * (runtime/cuda/exec/cuda_link_nccl.c); libnccl.so.2 is dlopen()ed on first use. The
 * bootstrap is NCCL's documented MPI example: group rank 0 calls ncclGetUniqueId, the
 * caller's broadcast (passed in, so this folder needs no MPI) hands the id to the group,
 * every rank calls ncclCommInitRank with its device's context current. One NcclComm per
 * group (a stage's replicas, a tied parameter's stages, the pipeline); streams come in as
 * the driver's handles (CudaDeviceOps.native_stream).
 *
 * STATUS: NEVER RUN WITH THE REAL libnccl ON GPUs. CI runs this file against
 * tests/nccl/fake_nccl.c, a stand-in libnccl over MPI on host memory (PD2BW_LIBNCCL):
 * the bootstrap, grouped send/receive, all-reduces and call sequence are exercised,
 * NCCL's own behaviour (device-side blocking, ring summation order) is not; what to
 * check first on a GPU machine is in bench/gpu/README.md. */
#include <nccl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/ir.h"
#include "runtime/cuda/cuda_internal.h"

/* The stream handle (a CUstream, which is a cudaStream_t) nccl_send & co. take. */
#define NCCL_STREAM(s) ((cudaStream_t)(s))

/* clang-format off */
#define PD_NCCL_FUNCS(X)                                                                  \
  X(ncclGetUniqueId) X(ncclCommInitRank) X(ncclCommDestroy) X(ncclCommAbort)              \
  X(ncclCommGetAsyncError) X(ncclGetErrorString) X(ncclGroupStart) X(ncclGroupEnd)        \
  X(ncclSend) X(ncclRecv) X(ncclAllReduce)
/* clang-format on */

typedef struct NcclApi {
  CUDA_API_FIELDS(PD_NCCL_FUNCS)
} NcclApi;

static NcclApi nccl_api;
CUDA_API_BIND(nccl_bind, nccl_api, PD_NCCL_FUNCS, "libnccl.so.2", "nccl transport: ", "")

static const char *const nccl_names[] = {"libnccl.so.2", "libnccl.so", NULL};
static CudaLib nccl_lib = CUDA_LIB("PD2BW_LIBNCCL", nccl_names, "nccl transport: NCCL not found (", ")", nccl_bind);

static const NcclApi *nccl_load(char *err, size_t errlen) {
  return cuda_lib_load(&nccl_lib, err, errlen) ? &nccl_api : NULL;
}

bool nccl_available(char *err, size_t errlen) { return nccl_load(err, errlen) != NULL; }

#define NCCL_CHECK(call) CUDA_LIB_CHECK(ncclResult_t, call, ncclSuccess, "NCCL", nccl_api.ncclGetErrorString)

struct NcclComm {
  ncclComm_t comm;
  int nranks, rank;
};

static ncclDataType_t nccl_dtype(NcclDtype t) {
  switch (t) {
  case NCCL_DT_F32: return ncclFloat32;
  case NCCL_DT_BF16: return ncclBfloat16;
  case NCCL_DT_F64: return ncclFloat64;
  case NCCL_DT_U8: return ncclUint8;
  }
  PD_CHECK(0, "bad NcclDtype %d", (int)t);
  return ncclFloat32;
}

NcclComm *nccl_comm_create(int nranks, int rank, NcclBcastFn bcast, void *user, char *err,
                           size_t errlen) {
  PD_CHECK(nranks >= 1 && rank >= 0 && rank < nranks && bcast, "nranks %d rank %d", nranks, rank);
  const NcclApi *api = nccl_load(err, errlen);
  if (!api) return NULL;
  ncclUniqueId id;
  memset(&id, 0, sizeof id);
  if (rank == 0) {
    ncclResult_t r = api->ncclGetUniqueId(&id);
    if (r != ncclSuccess) {
      snprintf(err, errlen, "nccl transport: ncclGetUniqueId failed: %s",
               api->ncclGetErrorString(r));
      /* The other ranks wait in the broadcast: send them the zero id, which makes
       * their ncclCommInitRank fail too instead of hanging. */
      bcast(&id, sizeof id, 0, user);
      return NULL;
    }
  }
  bcast(&id, sizeof id, 0, user);
  NcclComm *c = pd_calloc(1, sizeof *c);
  c->nranks = nranks;
  c->rank = rank;
  ncclResult_t r = api->ncclCommInitRank(&c->comm, nranks, id, rank);
  if (r != ncclSuccess) {
    snprintf(err, errlen, "nccl transport: ncclCommInitRank (rank %d of %d) failed: %s", rank,
             nranks, api->ncclGetErrorString(r));
    free(c);
    return NULL;
  }
  return c;
}

void nccl_comm_destroy(NcclComm *c) {
  if (!c) return;
  NCCL_CHECK(nccl_api.ncclCommDestroy(c->comm));
  free(c);
}

void nccl_group_start(NcclComm *c) {
  (void)c;
  NCCL_CHECK(nccl_api.ncclGroupStart());
}

void nccl_group_end(NcclComm *c) {
  (void)c;
  NCCL_CHECK(nccl_api.ncclGroupEnd());
}

void nccl_send(NcclComm *c, void *s, GpuPtr buf, size_t count, NcclDtype t, int peer) {
  PD_CHECK(peer >= 0 && peer < c->nranks && peer != c->rank, "peer %d", peer);
  NCCL_CHECK(nccl_api.ncclSend((const void *)(uintptr_t)buf, count, nccl_dtype(t), peer, c->comm,
                               NCCL_STREAM(s)));
}

void nccl_recv(NcclComm *c, void *s, GpuPtr buf, size_t count, NcclDtype t, int peer) {
  PD_CHECK(peer >= 0 && peer < c->nranks && peer != c->rank, "peer %d", peer);
  NCCL_CHECK(nccl_api.ncclRecv((void *)(uintptr_t)buf, count, nccl_dtype(t), peer, c->comm,
                               NCCL_STREAM(s)));
}

void nccl_allreduce_sum(NcclComm *c, void *s, GpuPtr send, GpuPtr recv, size_t count,
                        NcclDtype t) {
  NCCL_CHECK(nccl_api.ncclAllReduce((const void *)(uintptr_t)send, (void *)(uintptr_t)recv, count,
                                    nccl_dtype(t), ncclSum, c->comm,
                                    NCCL_STREAM(s)));
}

bool nccl_comm_ok(NcclComm *c, char *err, size_t errlen) {
  ncclResult_t async = ncclSuccess;
  NCCL_CHECK(nccl_api.ncclCommGetAsyncError(c->comm, &async));
  if (async == ncclSuccess || async == ncclInProgress) return true;
  snprintf(err, errlen, "nccl transport: rank %d of %d: communicator failed: %s", c->rank,
           c->nranks, nccl_api.ncclGetErrorString(async));
  return false;
}
