/* tests/nccl/fake_nccl.c — a stand-in libnccl for tests only: the NCCL functions
 * runtime/cuda/nccl_transport.c dlopens, over MPI on HOST memory (the emulated
 * device's memory is host memory). Loaded with PD2BW_LIBNCCL=<this library>; the
 * process must have initialised MPI already (the mpi transport does).
 *
 * What it is and is not:
 *  - every call finishes its work before it returns (the stream argument is ignored):
 *    the caller makes sure the device has finished what the call reads (the tests'
 *    device table syncs the device when asked for a stream handle, which the
 *    executor does right before each NCCL call);
 *  - a unique id carries the root's world rank and a per-root serial number;
 *    ncclCommInitRank sends each member's world rank to the root, which sends the
 *    table back (on MPI_COMM_WORLD with the communicator's own tags, apart from the
 *    mpi transport's duplicated communicators);
 *  - send/receive between ncclGroupStart and ncclGroupEnd are posted together at the
 *    outermost ncclGroupEnd (MPI_Isend/MPI_Irecv, then MPI_Waitall), as NCCL's group
 *    semantics require; messages to one peer on one communicator match in order;
 *  - ncclAllReduce (ncclSum, float32 or float64) is deterministic: the group's first
 *    rank adds the members' buffers in ascending rank order, ((b0 + b1) + b2) + ...,
 *    and sends the result to the others: the CPU executor's order (transport.h), so
 *    runs match the CPU reference as single-GPU mode's do. Real NCCL's order differs.
 *  - counts calls (fake_nccl_counts) so tests can see the traffic went through it.
 */
#include <mpi.h>
#include <nccl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* nccl.h declares these without a prototype */
ncclResult_t ncclGroupStart(void);
ncclResult_t ncclGroupEnd(void);

#define FAKE_MAGIC 0x6e63636cu /* "nccl" */
#define FAKE_TAG0 1000 /* communicator k: tag FAKE_TAG0 + 2k (setup, collectives), + 2k + 1 (sends) */

struct ncclComm {
  int nranks, rank;
  int *world; /* world rank of each member */
  int tag;    /* send/receive tag */
  int ctag;   /* collectives' tag (setup's, once setup is done): apart from sends */
};

typedef struct FakeId {
  uint32_t magic;
  int root;   /* world rank */
  int serial; /* the root's count of ids made */
} FakeId;

typedef struct FakeOp {
  ncclComm_t comm;
  void *buf;
  size_t bytes;
  int peer;
  int send;
} FakeOp;

static int group_depth;
static FakeOp *ops;
static int nops, cap_ops;
static long counts[3]; /* sends+receives, all-reduces, communicators */

/* What a test reads back through dlsym: sends+receives, all-reduces, communicators. */
void fake_nccl_counts(long out[3]);
void fake_nccl_counts(long out[3]) { memcpy(out, counts, sizeof counts); }

static int world_rank(void) {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}

/* Bytes of the types the executor uses; 0 for the rest (refused). */
static size_t dtype_bytes(ncclDataType_t t) {
  if (t == ncclInt8 || t == ncclUint8) return 1;
  if (t == ncclFloat32) return 4;
  if (t == ncclFloat64) return 8;
  return 0;
}

ncclResult_t ncclGetUniqueId(ncclUniqueId *id) {
  static int serial;
  memset(id, 0, sizeof *id);
  FakeId f = {.magic = FAKE_MAGIC, .root = world_rank(), .serial = serial++};
  memcpy(id->internal, &f, sizeof f);
  return ncclSuccess;
}

ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank) {
  FakeId f;
  memcpy(&f, id.internal, sizeof f);
  int wsize = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &wsize);
  if (f.magic != FAKE_MAGIC || nranks < 1 || rank < 0 || rank >= nranks || f.serial > 63) return ncclInvalidArgument;
  ncclComm_t c = calloc(1, sizeof *c);
  c->nranks = nranks;
  c->rank = rank;
  c->world = calloc((size_t)nranks, sizeof(int));
  int k = f.root * 64 + f.serial, tag = FAKE_TAG0 + 2 * k;
  c->tag = tag + 1;
  c->ctag = tag;
  int me[2] = {rank, world_rank()};
  if (rank == 0) {
    c->world[0] = me[1];
    for (int i = 1; i < nranks; i++) {
      int got[2];
      MPI_Recv(got, 2, MPI_INT, MPI_ANY_SOURCE, tag, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      if (got[0] <= 0 || got[0] >= nranks) return ncclInvalidArgument;
      c->world[got[0]] = got[1];
    }
    for (int i = 1; i < nranks; i++) MPI_Send(c->world, nranks, MPI_INT, c->world[i], tag, MPI_COMM_WORLD);
  } else {
    MPI_Send(me, 2, MPI_INT, f.root, tag, MPI_COMM_WORLD);
    MPI_Recv(c->world, nranks, MPI_INT, f.root, tag, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
  }
  counts[2]++;
  *comm = c;
  return ncclSuccess;
}

ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  if (comm) free(comm->world);
  free(comm);
  return ncclSuccess;
}

ncclResult_t ncclCommAbort(ncclComm_t comm) { return ncclCommDestroy(comm); }

ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *asyncError) {
  (void)comm;
  *asyncError = ncclSuccess;
  return ncclSuccess;
}

const char *ncclGetErrorString(ncclResult_t result) {
  if (result == ncclSuccess) return "no error (fake NCCL)";
  if (result == ncclInvalidArgument) return "invalid argument (fake NCCL)";
  if (result == ncclInvalidUsage) return "invalid usage (fake NCCL)";
  return "error (fake NCCL)";
}

static ncclResult_t flush(void) {
  MPI_Request *rq = calloc((size_t)nops + 1, sizeof *rq);
  for (int i = 0; i < nops; i++) {
    FakeOp *o = &ops[i];
    int peer = o->comm->world[o->peer];
    if (o->send) MPI_Isend(o->buf, (int)o->bytes, MPI_BYTE, peer, o->comm->tag, MPI_COMM_WORLD, &rq[i]);
    else MPI_Irecv(o->buf, (int)o->bytes, MPI_BYTE, peer, o->comm->tag, MPI_COMM_WORLD, &rq[i]);
  }
  int rc = MPI_Waitall(nops, rq, MPI_STATUSES_IGNORE);
  free(rq);
  nops = 0;
  return rc == MPI_SUCCESS ? ncclSuccess : ncclSystemError;
}

ncclResult_t ncclGroupStart(void) {
  group_depth++;
  return ncclSuccess;
}

ncclResult_t ncclGroupEnd(void) {
  if (group_depth <= 0) return ncclInvalidUsage;
  return --group_depth == 0 ? flush() : ncclSuccess;
}

static ncclResult_t p2p(void *buf, size_t count, ncclDataType_t t, int peer, ncclComm_t comm, int send) {
  size_t b = dtype_bytes(t);
  if (!b || !comm || peer < 0 || peer >= comm->nranks || peer == comm->rank || count * b > (size_t)INT32_MAX)
    return ncclInvalidArgument;
  if (nops == cap_ops) {
    cap_ops = cap_ops ? 2 * cap_ops : 16;
    ops = realloc(ops, (size_t)cap_ops * sizeof *ops);
  }
  ops[nops++] = (FakeOp){.comm = comm, .buf = buf, .bytes = count * b, .peer = peer, .send = send};
  counts[0]++;
  return group_depth ? ncclSuccess : flush();
}

ncclResult_t ncclSend(const void *sendbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
                      cudaStream_t stream) {
  (void)stream;
  return p2p((void *)(uintptr_t)sendbuff, count, datatype, peer, comm, 1);
}

ncclResult_t ncclRecv(void *recvbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
                      cudaStream_t stream) {
  (void)stream;
  return p2p(recvbuff, count, datatype, peer, comm, 0);
}

ncclResult_t ncclAllReduce(const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype,
                           ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  (void)stream;
  size_t b = dtype_bytes(datatype), bytes = count * b;
  if (op != ncclSum || (datatype != ncclFloat32 && datatype != ncclFloat64) || !comm || bytes > (size_t)INT32_MAX)
    return ncclInvalidArgument;
  if (group_depth) return ncclInvalidUsage; /* not needed by the executor */
  counts[1]++;
  if (sendbuff != recvbuff) memmove(recvbuff, sendbuff, bytes);
  if (comm->nranks == 1) return ncclSuccess;
  if (comm->rank != 0) {
    MPI_Send(recvbuff, (int)bytes, MPI_BYTE, comm->world[0], comm->ctag, MPI_COMM_WORLD);
    MPI_Recv(recvbuff, (int)bytes, MPI_BYTE, comm->world[0], comm->ctag, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    return ncclSuccess;
  }
  char *in = malloc(bytes + 1);
  for (int r = 1; r < comm->nranks; r++) {
    MPI_Recv(in, (int)bytes, MPI_BYTE, comm->world[r], comm->ctag, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    if (datatype == ncclFloat32) {
      float *acc = recvbuff;
      const float *x = (const float *)(const void *)in;
      for (size_t i = 0; i < count; i++) acc[i] += x[i];
    } else {
      double *acc = recvbuff;
      const double *x = (const double *)(const void *)in;
      for (size_t i = 0; i < count; i++) acc[i] += x[i];
    }
  }
  free(in);
  for (int r = 1; r < comm->nranks; r++)
    MPI_Send(recvbuff, (int)bytes, MPI_BYTE, comm->world[r], comm->ctag, MPI_COMM_WORLD);
  return ncclSuccess;
}
