/* tests/nccl/nccl_emu_ops.h — the emulated device (tests/cudaexec/emu_device.h) as
 * multi-GPU mode needs it, shared by tests/nccl's tests: plus the stream handle NCCL
 * calls take, where asking for one first runs everything issued (fake_nccl.c reads
 * and writes host memory at once). And a barrier over the Transport, for files one
 * rank writes that the others then read. */
#ifndef PD2BW_TESTS_NCCL_EMU_OPS_H
#define PD2BW_TESTS_NCCL_EMU_OPS_H

#include "cudaexec/emu_device.h"
#include "runtime/transport/transport.h"

/* The device of work directory `dir` (emu_device_ops: its modules are built there;
 * the string must outlive the device) with native_stream. */
CxDeviceOps nccl_emu_ops(const char *dir, EmuOrder order);
/* Every rank waits until all are here; false on a transport failure. */
bool nccl_test_barrier(Transport *t);

#endif
