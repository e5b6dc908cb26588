/* bench/gpu/gpu_nccl_check.c — the real libnccl on one GPU, through the runtime's own
 * NCCL layer (runtime/cuda/nccl_transport.c), for scripts/gpu-check.sh step (g).
 *
 *     gpu_nccl_check [--device N] [--count N]
 *
 * Why a program of its own: multi-GPU mode makes communicators only for groups of two
 * ranks or more, and NCCL refuses two ranks on one GPU, so on a one-GPU machine
 * pd2bwrun never loads libnccl. This one does, on a communicator of one rank, and
 * checks the loader, every symbol, the bootstrap, each collective and dtype the layer
 * uses and the asynchronous-error check (the list: bench/gpu/README.md). Prints
 * "gpu_nccl_check: PASS ..." with NCCL's elapsed times.
 * Exit status: 0 pass, 1 a result differs, 2 no libnccl or a failed call, 77 no GPU. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "runtime/cuda/cuda_backend.h"

#define EXIT_NO_GPU 77

static void no_bcast(void *buf, size_t bytes, int root, void *user) { /* one rank: nothing to hand on */
  (void)buf, (void)bytes, (void)root, (void)user;
}

static double now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

int main(int argc, char **argv) {
  int device = 0;
  size_t count = 1 << 24; /* 64 MiB of float32 */
  for (int i = 1; i < argc; i++) {
    char *end;
    long long v = i + 1 < argc ? strtoll(argv[i + 1], &end, 10) : -1;
    if (i + 1 >= argc || *end || v < 0 || v > (1ll << 28)) {
      fprintf(stderr, "usage: gpu_nccl_check [--device N] [--count N]\n");
      return 2;
    }
    if (!strcmp(argv[i], "--device")) device = (int)v;
    else if (!strcmp(argv[i], "--count") && v > 0) count = (size_t)v;
    else {
      fprintf(stderr, "usage: gpu_nccl_check [--device N] [--count N]\n");
      return 2;
    }
    i++;
  }
  char err[1024];
  CudaDeviceOps *o = cuda_dev_open(device, err, sizeof err);
  if (!o) {
    printf("gpu_nccl_check: NO GPU: %s\n", err);
    return EXIT_NO_GPU;
  }
  if (!nccl_available(err, sizeof err)) {
    printf("gpu_nccl_check: no usable libnccl: %s\n", err);
    return 2;
  }
  o->thread_enter(o->dev);
  double t0 = now_ms();
  NcclComm *c = nccl_comm_create(1, 0, no_bcast, NULL, err, sizeof err);
  if (!c) {
    printf("gpu_nccl_check: ncclCommInitRank on one rank: %s\n", err);
    return 2;
  }
  double t_init = now_ms() - t0;
  GpuPtr base;
  size_t bytes = count * 4;
  if (!o->alloc(o->dev, 3 * bytes + 512, &base, err, sizeof err)) {
    printf("gpu_nccl_check: %s\n", err);
    return 2;
  }
  GpuPtr a = base, b = (base + bytes + 255) & ~255ull, d64 = (b + bytes + 255) & ~255ull;
  float *h = malloc(bytes), *back = malloc(bytes);
  for (size_t i = 0; i < count; i++) h[i] = (float)(i % 1000) * 0.5f - 7.25f;
  o->htod(o->dev, a, h, bytes);
  void *stream = NULL; /* the legacy default stream: ordered with the copies (cuMemcpy*) */
  t0 = now_ms();
  nccl_allreduce_sum(c, stream, a, a, count, NCCL_DT_F32);
  o->sync(o->dev);
  double t_ar = now_ms() - t0;
  o->dtoh(o->dev, back, a, bytes);
  bool ar_ok = memcmp(h, back, bytes) == 0;
  o->memset0(o->dev, 0, b, bytes);
  o->sync(o->dev); /* the runtime's stream 0 may not be the default stream */
  t0 = now_ms();
  nccl_group_start(c);
  nccl_send(c, stream, a, bytes, NCCL_DT_U8, 0);
  nccl_recv(c, stream, b, bytes, NCCL_DT_U8, 0);
  nccl_group_end(c);
  o->sync(o->dev);
  double t_p2p = now_ms() - t0;
  o->dtoh(o->dev, back, b, bytes);
  bool p2p_ok = memcmp(h, back, bytes) == 0;
  /* the other dtypes the executor reduces: bf16 gradients, f64 norm parts (bits kept) */
  nccl_allreduce_sum(c, stream, b, b, count * 2, NCCL_DT_BF16);
  nccl_allreduce_sum(c, stream, d64, d64, count / 2, NCCL_DT_F64);
  o->sync(o->dev);
  o->dtoh(o->dev, back, b, bytes);
  bool dt_ok = memcmp(h, back, bytes) == 0;
  bool healthy = nccl_comm_ok(c, err, sizeof err);
  nccl_comm_destroy(c);
  bool pass = ar_ok && p2p_ok && dt_ok && healthy;
  printf("gpu_nccl_check: %s: one-rank communicator on %s: init %.1f ms; all-reduce f32 of %zu MiB %.2f ms (%s); "
         "send/recv to itself %.2f ms (%s); bf16/f64 all-reduces (%s); %s\n",
         pass ? "PASS" : "FAIL", cuda_dev_name(o), t_init, bytes >> 20, t_ar, ar_ok ? "unchanged" : "CHANGED",
         t_p2p, p2p_ok ? "copied" : "WRONG", dt_ok ? "unchanged" : "CHANGED", healthy ? "no async error" : err);
  free(h);
  free(back);
  cuda_dev_close(o);
  return pass ? 0 : 1;
}
