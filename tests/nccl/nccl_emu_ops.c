/* tests/nccl/nccl_emu_ops.c — see nccl_emu_ops.h. */
#include "nccl_emu_ops.h"

#include <stdint.h>

#define TAG_BARRIER 31000 /* below the link's tag (cuda_link_nccl.c: 32000) */

static CxDeviceOps inner;

static void *emu_native_stream(void *dev, int stream) {
  inner.sync(dev);
  return (void *)(uintptr_t)(stream + 1);
}

CxDeviceOps nccl_emu_ops(const char *dir, EmuOrder order) {
  inner = emu_device_ops(dir, order);
  CxDeviceOps o = inner;
  o.native_stream = emu_native_stream;
  return o;
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
