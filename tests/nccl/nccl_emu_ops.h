/* tests/nccl/nccl_emu_ops.h — the emulated device (tests/cudaexec/emu_device.h) as
 * multi-GPU mode needs it, shared by tests/nccl's tests: plus the stream handle NCCL
 * calls take, where asking for one first runs everything issued (fake_nccl.c reads
 * and writes host memory at once). The start every test's main shares (the MPI
 * transport, the emulator's work directory, the fake libnccl required), the fake's
 * call counts, and a barrier over the Transport, for files one rank writes that the
 * others then read. */
#ifndef PD2BW_TESTS_NCCL_EMU_OPS_H
#define PD2BW_TESTS_NCCL_EMU_OPS_H

#include "cudaexec/emu_device.h"
#include "runtime/transport/transport.h"

/* The device of work directory `dir` (emu_device_ops: its modules are built there;
 * the string must outlive the device) with native_stream. */
CudaDeviceOps nccl_emu_ops(const char *dir, EmuOrder order);
/* main's start under mpirun: the MPI transport (timeout_s) into *t, then
 * emu_test_begin(argc, argv, true, usage, tmp); PD2BW_LIBNCCL must name the fake and,
 * when np > 0, np processes must run. Returns the part; NULL after saying why, with
 * the transport aborted and destroyed (main returns 2). */
const char *nccl_test_begin(int *argc, char ***argv, const char *prog, double timeout_s, int np, const char *usage,
                            char *tmp, Transport **t);
/* The fake's call counts so far: sends+receives, all-reduces, communicators (zeros
 * when the fake is not loaded). */
void nccl_fake_counts(long c[3]);
/* Every rank waits until all are here; false on a transport failure. */
bool nccl_test_barrier(Transport *t);

#endif
