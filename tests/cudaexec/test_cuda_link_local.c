/* tests/cudaexec/test_cuda_link_local.c — the same-GPU link (runtime/cuda/exec/cuda_link_local.c)
 * between three rank threads over the local transport, each on its view of one
 * emulated device (cx_share_view; emu_device.h: streams reordered, highest first, so
 * a missing event wait shows as stale data):
 *  - point to point: rank 0's buffer, written on its stream just before the send (a
 *    device copy from a staging area), lands in rank 2's after waitall: the receiver's
 *    copy waits for the sender's event;
 *  - the norm exchange (PIPE_TAG_NORM: host doubles) passes as it is;
 *  - the replica all-reduce: each member's buffer written on its stream just before;
 *    the sum in ascending group order, the same bits on every member: per element the
 *    members hold 1e8, 1 and -1e8, which sum to 0 in that order ((1e8 + 1) - 1e8: the
 *    1 is lost) and to 1 when the third is added before the second (transport_coll.c's
 *    rule is ascending).
 * Each rank's device is a stand-in whose sum_ordered launches the kernel library's
 * pkc_sum_ordered_f32 on the rank's stream, as cx_exec_device's does (NR <= its 8
 * sources: one launch).
 *
 *   test_cuda_link_local PD2BWC    (in the source tree: the emulator compiles kernels there)
 */
#include <stdlib.h>
#include <string.h>

#include "emu_train.h"
#include "pkc_kernels_src.h"
#include "runtime/exec/exec.h"
#include "runtime/pipeline/pipeline_rank.h"
#include "test.h"

static char tmp[64] = "/tmp/pd2bw-test-cuda-link-XXXXXX";

#define NR 3    /* ranks */
#define N 1000  /* floats per buffer */

typedef struct Ctx {
  CxShare *sh;
  void *k_sum;
  float got_p2p[N], got_sum[NR][N];
  double got_norm[NR];
  char err[NR][TRANSPORT_ERR_LEN];
} Ctx;

/* The stand-in device: only what the link calls (sum_ordered). */
typedef struct FakeDev {
  ExecDevice base;
  const CudaDeviceOps *ops;
  const Ctx *c;
} FakeDev;

static void fake_sum_ordered(ExecDevice *d, float *dst, const float *const *src, int n, int64_t numel) {
  const FakeDev *f = (const FakeDev *)(const void *)d;
  GpuPtr y = (GpuPtr)(uintptr_t)dst, s[8];
  for (int q = 0; q < 8; q++) s[q] = (GpuPtr)(uintptr_t)src[q < n ? q : 0];
  void *args[] = {&y, &n, &numel, &s[0], &s[1], &s[2], &s[3], &s[4], &s[5], &s[6], &s[7]};
  f->ops->launch(f->ops->dev, 0, f->c->k_sum, (unsigned)((numel + 255) / 256), 256, args);
}

static const ExecDeviceOps fake_ops = {.name = "fake", .sum_ordered = fake_sum_ordered};

/* Writes v into buf on the rank's stream (staged: htod waits, the copy does not). */
static void write_queued(const CudaDeviceOps *v, GpuPtr stage, GpuPtr buf, float val) {
  float *h = malloc(N * sizeof *h);
  for (int i = 0; i < N; i++) h[i] = val;
  v->htod(v->dev, stage, h, N * sizeof *h);
  v->dtod(v->dev, 0, buf, stage, N * sizeof *h);
  free(h);
}

static int rank_fn(Transport *t, void *arg) {
  Ctx *c = arg;
  int r = transport_rank(t);
  const CudaDeviceOps *v = cx_share_view(c->sh, r);
  GpuPtr base;
  if (!v->alloc(v->dev, 3 * N * sizeof(float), &base, c->err[r], sizeof c->err[r])) return 1;
  GpuPtr stage = base, buf = base + N * sizeof(float), rx = base + 2 * N * sizeof(float);
  FakeDev d = {.base.ops = &fake_ops, .ops = v, .c = c};
  ExecLink *L = cx_local_link(t, &d.base, v);
  TransportStatus s = TRANSPORT_OK;
  /* point to point: 0 -> 2 */
  ExecReq *rq = NULL;
  if (r == 0) {
    write_queued(v, stage, buf, 7.0f);
    s = L->ops->post(L, true, 2, PIPE_TAG_ACT, (void *)(uintptr_t)buf, N * sizeof(float), "test message", &rq);
  } else if (r == 2) {
    s = L->ops->post(L, false, 0, PIPE_TAG_ACT, (void *)(uintptr_t)rx, N * sizeof(float), "test message", &rq);
  }
  if (s == TRANSPORT_OK && rq) s = L->ops->waitall(L, &rq, 1);
  if (s == TRANSPORT_OK && r == 2) v->dtoh(v->dev, c->got_p2p, rx, sizeof c->got_p2p);
  /* the norm exchange: host doubles around the ring */
  double mine = 10.0 + r, from = 0;
  ExecReq *nq[2];
  if (s == TRANSPORT_OK) s = L->ops->post(L, true, (r + 1) % NR, PIPE_TAG_NORM, &mine, sizeof mine, "norm", &nq[0]);
  if (s == TRANSPORT_OK)
    s = L->ops->post(L, false, (r + NR - 1) % NR, PIPE_TAG_NORM, &from, sizeof from, "norm", &nq[1]);
  if (s == TRANSPORT_OK) s = L->ops->waitall(L, nq, 2);
  c->got_norm[r] = from;
  /* the all-reduce: 1e8, 1, -1e8 */
  const int ranks[NR] = {0, 1, 2};
  ExecGroup *g = NULL;
  if (s == TRANSPORT_OK) s = L->ops->group_create(L, ranks, NR, &g);
  if (s == TRANSPORT_OK) {
    write_queued(v, stage, buf, (const float[NR]){1e8f, 1.0f, -1e8f}[r]);
    s = L->ops->allreduce_sum_f32(g, (float *)(uintptr_t)buf, N, "test all-reduce");
  }
  if (s == TRANSPORT_OK) v->dtoh(v->dev, c->got_sum[r], buf, sizeof c->got_sum[r]);
  if (s != TRANSPORT_OK) snprintf(c->err[r], sizeof c->err[r], "%s", L->ops->error(L));
  if (g) L->ops->group_destroy(g);
  exec_link_destroy(L);
  return s == TRANSPORT_OK ? 0 : 1;
}

static void test_link(void) {
  char err[RT_ERR_LEN];
  CudaDeviceOps ops = emu_device_ops(tmp, EMU_HIGHEST_FIRST);
  Ctx *c = calloc(1, sizeof *c);
  void *lib = ops.load(ops.dev, pd_cuda_kernels_src, "kernels.cu", err, sizeof err);
  EXPECT(lib != NULL);
  if (!lib) return;
  c->k_sum = ops.kernel(ops.dev, lib, "pkc_sum_ordered_f32");
  c->sh = cx_share_create(&ops, NR, err, sizeof err);
  EXPECT(c->sh != NULL);
  uint64_t bytes[NR] = {3 * N * sizeof(float), 3 * N * sizeof(float), 3 * N * sizeof(float)};
  EXPECT(cx_share_reserve(c->sh, bytes, err, sizeof err));
  TransportWorld *w = transport_local_create_world(NR, 20);
  char terr[TRANSPORT_ERR_LEN] = "";
  int rc = transport_local_run(w, rank_fn, c, terr, sizeof terr);
  transport_local_destroy_world(w);
  for (int r = 0; r < NR; r++)
    if (c->err[r][0]) printf("  rank %d: %s\n", r, c->err[r]);
  EXPECT(rc == 0);
  int stale = 0, wrong[NR] = {0};
  for (int i = 0; i < N; i++) stale += c->got_p2p[i] != 7.0f;
  for (int r = 0; r < NR; r++)
    for (int i = 0; i < N; i++) wrong[r] += c->got_sum[r][i] != 0.0f;
  printf("  point to point: %d of %d elements not the sender's; norm exchange: %g %g %g; all-reduce: %d %d %d "
         "elements not (1e8 + 1) - 1e8 = 0 (first: %g)\n", stale, N, c->got_norm[0], c->got_norm[1], c->got_norm[2],
         wrong[0], wrong[1], wrong[2], (double)c->got_sum[0][0]);
  EXPECT(stale == 0);
  for (int r = 0; r < NR; r++) EXPECT(c->got_norm[r] == 10.0 + (r + NR - 1) % NR);
  for (int r = 0; r < NR; r++) EXPECT(wrong[r] == 0);
  EmuCounts n = emu_device_counts();
  EXPECT(n.max_queued > 1 && n.waits > 0); /* work really was queued, and waited for */
  cx_share_destroy(c->sh);
  free(c);
  emu_device_release();
}

int main(int argc, char **argv) {
  if (!emu_test_begin(argc, argv, false, "usage: test_cuda_link_local PD2BWC", tmp)) return 2;
  RUN(test_link);
  emu_test_end();
  return TEST_REPORT();
}
