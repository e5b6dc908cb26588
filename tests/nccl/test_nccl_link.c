/* tests/nccl/test_nccl_link.c — multi-GPU mode's link alone (runtime/cuda/exec/cuda_link_nccl.c:
 * cx_nccl_link, the interpreter's ExecLinkOps over NCCL and the Transport) under
 * mpirun -np 2, each rank on its own emulated device with tests/nccl/fake_nccl.c as
 * libnccl (test_nccl_emu.c says what that checks and what not). The emulator's memory
 * is host memory, so plain host buffers stand in for the arena.
 *
 *   mpirun -np 2 test_nccl_link PD2BWC cross   a d = 2 2bw plan with a tied wte: rank 0
 *       posts its tied exchange, then sends an activation and only then waits for the
 *       tied exchange; rank 1 waits for the tied exchange first and receives the
 *       activation after it (2bw's order around OPT_STEP: batch t+1's activations and
 *       batch t's tied sum cross). Both arrive intact: NCCL has no tags, so the tied
 *       exchange needs its own communicator. Host messages (the norm's tag, blocking
 *       send/recv) make no NCCL call and no communicator; the first device message
 *       makes both (pipeline and tied group: 2), not one more after;
 *   mpirun -np 2 test_nccl_link PD2BWC reduce  a w = 2 plan: the replica all-reduce
 *       sums both ranks' buffers on the replica communicator (one all-reduce call);
 *   mpirun -np 2 test_nccl_link PD2BWC errors  a device table without stream handles
 *       is refused by name.
 * PD2BW_LIBNCCL must name the fake library (CTest sets it). */
#include <stdlib.h>
#include <string.h>

#include "cudaexec/emu_train.h"
#include "nccl_emu_ops.h"
#include "runtime/cuda/exec/cuda_exec.h"
#include "runtime/exec/exec.h"
#include "runtime/pipeline/pipeline_rank.h"
#include "test.h"

#define N 256 /* floats per message: the activation and the tied gradient alike */

static char tmp[64] = "/tmp/pd2bw-test-nccllink-XXXXXX";
static Transport *T;
static CudaDeviceOps ops; /* outlives each device made on it */

/* This rank's plan `name` (made with args), device and link; false with a message. */
static bool open_rank(const char *name, const char *args, PipePlan **p, ExecDevice **dev, ExecLink **link) {
  char dir[256], err[RT_ERR_LEN];
  *p = NULL, *dev = NULL, *link = NULL;
  if (!emu_pipe_make_plan(name, args)) return false;
  emu_path(dir, sizeof dir, name);
  *p = pipe_plan_load(dir, err, sizeof err);
  ops = nccl_emu_ops(tmp, EMU_LOWEST_FIRST);
  const PipePlan *q = *p;
  if (q) *dev = cx_exec_device(&ops, q->rt, q->rank_stage[transport_rank(T)], GEMM_PLAN, q->b * q->m * q->w, err,
                               sizeof err);
  if (*dev) *link = cx_nccl_link(T, q, *dev, err, sizeof err);
  if (!*link) fprintf(stderr, "  rank %d: %s\n", transport_rank(T), err);
  return *link != NULL;
}

static void close_rank(PipePlan *p, ExecDevice *dev, ExecLink *link) {
  exec_link_destroy(link); /* before its device */
  exec_device_destroy(dev);
  pipe_plan_free(p);
}

static void fill(float *x, float v) {
  for (int i = 0; i < N; i++) x[i] = v + (float)i;
}

static bool same(const float *x, float v) {
  for (int i = 0; i < N; i++)
    if (x[i] != v + (float)i) return false;
  return true;
}

static void test_cross(void) {
  PipePlan *p;
  ExecDevice *dev;
  ExecLink *L;
  EXPECT(open_rank("p2bw", "--precision fp32 --stages 2 --replicas 1 --microbatches 4 --schedule 2bw --recompute off",
                   &p, &dev, &L));
  if (!L) return;
  EXPECT(p->ngroups == 1 && p->groups[0].nstages == 2); /* wte on both stages */
  int me = transport_rank(T), peer = 1 - me;
  const ExecLinkOps *o = L->ops;
  long c[3];
  /* host memory first: the norm's tag and blocking messages, no NCCL at all */
  double part[2] = {0}, got = 0, mine = 10.0 + me;
  ExecReq *hr[2];
  part[me] = mine;
  EXPECT(o->post(L, true, peer, PIPE_TAG_NORM, &part[me], sizeof(double), "norm", &hr[0]) == TRANSPORT_OK);
  EXPECT(o->post(L, false, peer, PIPE_TAG_NORM, &part[peer], sizeof(double), "norm", &hr[1]) == TRANSPORT_OK);
  EXPECT(o->waitall(L, hr, 2) == TRANSPORT_OK);
  EXPECT(part[peer] == 10.0 + peer);
  if (me == 1) EXPECT(o->send(L, 0, PIPE_TAG_LOSS, &mine, sizeof mine, "loss") == TRANSPORT_OK);
  else EXPECT(o->recv(L, 1, PIPE_TAG_LOSS, &got, sizeof got, "loss") == TRANSPORT_OK && got == 11.0);
  nccl_fake_counts(c);
  printf("  rank %d after host messages: fake NCCL %ld sends+receives, %ld communicators\n", me, c[0], c[2]);
  EXPECT(c[0] == 0 && c[2] == 0);
  /* the tied exchange posted, then an activation crossing it */
  float *tx = malloc(N * sizeof(float)), *rx = malloc(N * sizeof(float)), *act = malloc(N * sizeof(float));
  fill(tx, 100.0f * (float)(me + 1));
  fill(rx, -1.0f);
  fill(act, me == 0 ? 7.0f : -1.0f);
  ExecReq *tr[2], *ar;
  EXPECT(o->post(L, true, peer, PIPE_TAG_TIED, tx, N * sizeof(float), "tied", &tr[0]) == TRANSPORT_OK);
  EXPECT(o->post(L, false, peer, PIPE_TAG_TIED, rx, N * sizeof(float), "tied", &tr[1]) == TRANSPORT_OK);
  if (me == 0) {
    EXPECT(o->post(L, true, 1, PIPE_TAG_ACT, act, N * sizeof(float), "activation", &ar) == TRANSPORT_OK);
    EXPECT(o->waitall(L, &ar, 1) == TRANSPORT_OK);
    EXPECT(o->waitall(L, tr, 2) == TRANSPORT_OK);
  } else {
    EXPECT(o->waitall(L, tr, 2) == TRANSPORT_OK);
    EXPECT(o->post(L, false, 0, PIPE_TAG_ACT, act, N * sizeof(float), "activation", &ar) == TRANSPORT_OK);
    EXPECT(o->waitall(L, &ar, 1) == TRANSPORT_OK);
  }
  bool tied_ok = same(rx, 100.0f * (float)(peer + 1)), act_ok = same(act, 7.0f);
  nccl_fake_counts(c);
  printf("  rank %d: tied gradient %s, activation %s; fake NCCL %ld sends+receives, %ld communicators\n", me,
         tied_ok ? "intact" : "WRONG", act_ok ? "intact" : "WRONG", c[0], c[2]);
  EXPECT(tied_ok && act_ok);
  EXPECT(c[0] == 3 && c[2] == 2); /* the pipeline's and the tied group's communicators */
  free(tx);
  free(rx);
  free(act);
  close_rank(p, dev, L);
}

static void test_reduce(void) {
  PipePlan *p;
  ExecDevice *dev;
  ExecLink *L;
  EXPECT(open_rank("pw2", "--precision fp32 --stages 1 --replicas 2 --microbatches 2 --schedule gpipe", &p, &dev, &L));
  if (!L) return;
  int me = transport_rank(T);
  ExecGroup *g = NULL;
  EXPECT(L->ops->group_create(L, p->st[0].rank_of_replica, 2, &g) == TRANSPORT_OK);
  float *x = malloc(N * sizeof(float));
  fill(x, me == 0 ? 0.5f : 1000.0f);
  EXPECT(L->ops->allreduce_sum_f32(g, x, N, "gradients") == TRANSPORT_OK);
  bool ok = true;
  for (int i = 0; i < N; i++) ok = ok && x[i] == (0.5f + (float)i) + (1000.0f + (float)i);
  long c[3];
  nccl_fake_counts(c);
  printf("  rank %d: all-reduce %s; fake NCCL %ld all-reduces, %ld communicators\n", me, ok ? "summed" : "WRONG", c[1],
         c[2]);
  EXPECT(ok && c[1] == 1 && c[2] == 1); /* the replica communicator only (d = 1: no pipeline) */
  L->ops->group_destroy(g);
  free(x);
  close_rank(p, dev, L);
}

static void test_errors(void) {
  char dir[256], err[RT_ERR_LEN] = "";
  EXPECT(emu_pipe_make_plan("pe", "--precision fp32 --stages 2 --replicas 1 --microbatches 4 --schedule gpipe"));
  emu_path(dir, sizeof dir, "pe");
  PipePlan *p = pipe_plan_load(dir, err, sizeof err);
  EXPECT(p != NULL);
  if (!p) return;
  ops = nccl_emu_ops(tmp, EMU_LOWEST_FIRST);
  ops.native_stream = NULL;
  ExecDevice *dev = cx_exec_device(&ops, p->rt, p->rank_stage[transport_rank(T)], GEMM_PLAN, p->b * p->m, err,
                                   sizeof err);
  EXPECT(dev != NULL);
  ExecLink *L = dev ? cx_nccl_link(T, p, dev, err, sizeof err) : NULL;
  printf("  without stream handles: %s\n", err);
  EXPECT(L == NULL && strstr(err, "native_stream") != NULL);
  exec_device_destroy(dev);
  pipe_plan_free(p);
}

int main(int argc, char **argv) {
  const char *part = nccl_test_begin(&argc, &argv, "test_nccl_link", 60, 2,
                                     "usage: mpirun -np 2 test_nccl_link PD2BWC [cross|reduce|errors]", tmp, &T);
  if (!part) return 2;
  if (emu_test_part(part, "cross")) RUN(test_cross);
  if (emu_test_part(part, "reduce")) RUN(test_reduce);
  if (emu_test_part(part, "errors")) RUN(test_errors);
  emu_test_end();
  int rc = TEST_REPORT();
  transport_destroy(T);
  return rc;
}
