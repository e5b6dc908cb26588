/* runtime/cuda/nccl_transport.c — NCCL communicators for the nccl transport.
 *
 * STATUS: a skeleton that compiles and links everywhere but has NEVER RUN (the
 * machines this was written on have no GPU). Untested: the bootstrap, every
 * collective and point-to-point call, error polling. What to check first on a GPU
 * machine is listed in bench/gpu/README.md.
 *
 * Bootstrap (NCCL's documented MPI example): group rank 0 calls ncclGetUniqueId, the
 * caller's broadcast (MPI_Bcast over the group's MPI communicator; passed in so this
 * folder needs no MPI) hands the 128-byte id to the group, and every rank calls
 * ncclCommInitRank with its device's context current. One NcclComm per group: the
 * stage's replicas (gradient all-reduce), the tied-parameter pair, the pipeline
 * neighbours (point-to-point activations and gradients).
 *
 * libnccl.so.2 is dlopen()ed on first use, like every NVIDIA library here.
 */
#include <nccl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/ir.h"
#include "runtime/cuda/cuda_internal.h"

/* clang-format off */
#define PD_NCCL_FUNCS(X)                                                                  \
  X(ncclGetUniqueId) X(ncclCommInitRank) X(ncclCommDestroy) X(ncclCommAbort)              \
  X(ncclCommGetAsyncError) X(ncclGetErrorString) X(ncclGroupStart) X(ncclGroupEnd)        \
  X(ncclSend) X(ncclRecv) X(ncclAllReduce)
/* clang-format on */

typedef struct NcclApi {
#define PD_NCCL_FIELD(f) __typeof__(f) *f;
  PD_NCCL_FUNCS(PD_NCCL_FIELD)
#undef PD_NCCL_FIELD
} NcclApi;

static NcclApi nccl_api;
static int nccl_state; /* 0 not tried, 1 loaded, -1 failed (nccl_why) */
static char nccl_why[640];

/* Runs once per process, whichever thread asks first (rank threads may open their
 * devices concurrently). */
static pthread_once_t nccl_once = PTHREAD_ONCE_INIT;
static void nccl_load_once(void) {
  static const char *const names[] = {"libnccl.so.2", "libnccl.so", NULL};
  char why[512];
  nccl_state = -1;
  void *h = cuda_dlopen("PD2BW_LIBNCCL", names, why, sizeof why);
  bool ok = h != NULL;
  if (!ok) snprintf(nccl_why, sizeof nccl_why, "nccl transport: NCCL not found (%s)", why);
#define PD_NCCL_SYM(f)                                                                             \
  if (ok && !(nccl_api.f = (__typeof__(f) *)cuda_dlsym(h, PD_SYMNAME(f), "libnccl.so.2", why,      \
                                                       sizeof why))) {                             \
    ok = false;                                                                                    \
    snprintf(nccl_why, sizeof nccl_why, "nccl transport: %s", why);                                \
  }
  PD_NCCL_FUNCS(PD_NCCL_SYM)
#undef PD_NCCL_SYM
  if (ok) nccl_state = 1;
}

static const NcclApi *nccl_load(char *err, size_t errlen) {
  pthread_once(&nccl_once, nccl_load_once);
  if (nccl_state < 0) {
    snprintf(err, errlen, "%s", nccl_why);
    return NULL;
  }
  return &nccl_api;
}

bool nccl_available(char *err, size_t errlen) { return nccl_load(err, errlen) != NULL; }

#define NCCL_CHECK(call)                                                                           \
  do {                                                                                             \
    ncclResult_t nc_r_ = (call);                                                                   \
    if (nc_r_ != ncclSuccess)                                                                      \
      pd_fatal(__FILE__, __LINE__, "NCCL call failed: %s returned %s (%d)", #call,                 \
               nccl_api.ncclGetErrorString(nc_r_), (int)nc_r_);                                    \
  } while (0)

struct NcclComm {
  CudaDev *dev;
  ncclComm_t comm;
  int nranks, rank;
};

static ncclDataType_t nccl_dtype(NcclDtype t) {
  switch (t) {
  case NCCL_DT_F32: return ncclFloat32;
  case NCCL_DT_BF16: return ncclBfloat16;
  }
  PD_CHECK(0, "bad NcclDtype %d", (int)t);
  return ncclFloat32;
}

NcclComm *nccl_comm_create(CudaDev *d, int nranks, int rank, NcclBcastFn bcast, void *user,
                           char *err, size_t errlen) {
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
  cuda_dev_make_current(d);
  NcclComm *c = pd_calloc(1, sizeof *c);
  c->dev = d;
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

void nccl_send(NcclComm *c, CudaStreamId s, CudaPtr buf, size_t count, NcclDtype t, int peer) {
  PD_CHECK(peer >= 0 && peer < c->nranks && peer != c->rank, "peer %d", peer);
  NCCL_CHECK(nccl_api.ncclSend((const void *)(uintptr_t)buf, count, nccl_dtype(t), peer, c->comm,
                               (cudaStream_t)cuda_dev_stream(c->dev, s)));
}

void nccl_recv(NcclComm *c, CudaStreamId s, CudaPtr buf, size_t count, NcclDtype t, int peer) {
  PD_CHECK(peer >= 0 && peer < c->nranks && peer != c->rank, "peer %d", peer);
  NCCL_CHECK(nccl_api.ncclRecv((void *)(uintptr_t)buf, count, nccl_dtype(t), peer, c->comm,
                               (cudaStream_t)cuda_dev_stream(c->dev, s)));
}

void nccl_allreduce_sum(NcclComm *c, CudaStreamId s, CudaPtr send, CudaPtr recv, size_t count,
                        NcclDtype t) {
  NCCL_CHECK(nccl_api.ncclAllReduce((const void *)(uintptr_t)send, (void *)(uintptr_t)recv, count,
                                    nccl_dtype(t), ncclSum, c->comm,
                                    (cudaStream_t)cuda_dev_stream(c->dev, s)));
}

bool nccl_comm_ok(NcclComm *c, char *err, size_t errlen) {
  ncclResult_t async = ncclSuccess;
  NCCL_CHECK(nccl_api.ncclCommGetAsyncError(c->comm, &async));
  if (async == ncclSuccess || async == ncclInProgress) return true;
  snprintf(err, errlen, "nccl transport: rank %d of %d: communicator failed: %s", c->rank,
           c->nranks, nccl_api.ncclGetErrorString(async));
  return false;
}
