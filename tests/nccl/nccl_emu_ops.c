/* tests/nccl/nccl_emu_ops.c — see nccl_emu_ops.h. */
#include "nccl_emu_ops.h"

#include <dlfcn.h>
#include <stdint.h>
#include <stdlib.h>

#include "cudaexec/emu_train.h"
#include "runtime/core/runtime.h"

#define TAG_BARRIER 31000 /* below the link's tag (cuda_link_nccl.c: 32000) */

static CudaDeviceOps inner;

static void *emu_native_stream(void *dev, int stream) {
  inner.sync(dev);
  return (void *)(uintptr_t)(stream + 1);
}

CudaDeviceOps nccl_emu_ops(const char *dir, EmuOrder order) {
  inner = emu_device_ops(dir, order);
  CudaDeviceOps o = inner;
  o.native_stream = emu_native_stream;
  return o;
}

const char *nccl_test_begin(int *argc, char ***argv, const char *prog, double timeout_s, int np, const char *usage,
                            char *tmp, Transport **t) {
  char err[RT_ERR_LEN + TRANSPORT_ERR_LEN];
  *t = transport_mpi_create(argc, argv, timeout_s, err, sizeof err);
  if (!*t) {
    fprintf(stderr, "%s: %s\n", prog, err);
    return NULL;
  }
  const char *part = emu_test_begin(*argc, *argv, true, usage, tmp);
  if (part && getenv("PD2BW_LIBNCCL") && (np <= 0 || transport_size(*t) == np)) return part;
  if (part) fprintf(stderr, "%s: needs PD2BW_LIBNCCL naming tests/nccl's fake libnccl%s\n", prog,
                    np > 0 ? " and mpirun -np of the usage" : "");
  transport_abort(*t, "bad arguments");
  transport_destroy(*t);
  *t = NULL;
  return NULL;
}

void nccl_fake_counts(long c[3]) {
  c[0] = c[1] = c[2] = 0;
  void *h = dlopen(getenv("PD2BW_LIBNCCL"), RTLD_NOW | RTLD_NOLOAD);
  void (*fn)(long *) = h ? (void (*)(long *))(uintptr_t)dlsym(h, "fake_nccl_counts") : NULL;
  if (fn) fn(c);
  if (h) dlclose(h);
}

bool nccl_test_barrier(Transport *t) {
  char b = 0;
  bool ok = true;
  if (transport_rank(t) == 0) {
    for (int i = 1; ok && i < transport_size(t); i++)
      ok = transport_recv(t, i, TAG_BARRIER, &b, 1, "barrier") == TRANSPORT_OK;
    for (int i = 1; ok && i < transport_size(t); i++)
      ok = transport_send(t, i, TAG_BARRIER, &b, 1, "barrier") == TRANSPORT_OK;
  } else {
    ok = transport_send(t, 0, TAG_BARRIER, &b, 1, "barrier") == TRANSPORT_OK &&
         transport_recv(t, 0, TAG_BARRIER, &b, 1, "barrier") == TRANSPORT_OK;
  }
  return ok;
}
