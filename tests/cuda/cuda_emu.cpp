// tests/cuda/cuda_emu.cpp — the CUDA kernels compiled for the host and run on fibres
// (cuda_emu.h says how and what it cannot show).
#include "cuda_emu.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <utility>

// ---- the CUDA built-ins the kernels use ------------------------------------------
struct EmuDim3 {
  unsigned x, y, z;
};
static EmuDim3 threadIdx, blockIdx, blockDim, gridDim;

#define PKC_EMULATE 1
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __shared__ static

static void __syncthreads(void);

static inline float atomicAdd(float *p, float v) {
  float old = *p;
  *p = old + v;
  return old;
}
static inline unsigned long long atomicAdd(unsigned long long *p, unsigned long long v) {
  unsigned long long old = *p;
  *p = old + v;
  return old;
}
static inline unsigned __float_as_uint(float f) {
  unsigned u;
  memcpy(&u, &f, 4);
  return u;
}
static inline float __uint_as_float(unsigned u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}

#include "runtime/cuda/cuda_kernel_list.h"
#include "runtime/cuda/cuda_kernels.cuh"
#include "runtime/kernels/philox.h"
#include "tests/cuda/emu_fiber.h"

// ---- fibres ---------------------------------------------------------------------------
namespace {

const size_t kStack = 128 * 1024;

struct Fiber {
  EmuFiber ctx;
  char *stack;
  bool done;
};

EmuFiber sched_ctx;
Fiber *fibers;
unsigned nfibers_alloc;
Fiber *cur;
void (*cur_kernel)(void **);
void **cur_args;
int reverse_blocks;

// Runs one CUDA thread; never returns (emu_fiber.h): the last switch leaves it.
void fiber_main() {
  cur_kernel(cur_args);
  cur->done = true;
  emu_fiber_switch(&cur->ctx, &sched_ctx);
  __builtin_trap(); // a finished fibre is never resumed
}

// Unpacks cuLaunchKernel-style args into a typed call of kernel K.
template <typename F> struct Caller;
template <typename... A> struct Caller<void(A...)> {
  template <void (*K)(A...), size_t... I>
  static void unpack(void **args, std::index_sequence<I...>) {
    K(load<A>(args[I])...);
  }
  template <typename T> static T load(void *p) {
    T v;
    memcpy(&v, p, sizeof v);
    return v;
  }
  template <void (*K)(A...)> static void call(void **args) {
    unpack<K>(args, std::index_sequence_for<A...>{});
  }
};

struct Entry {
  const char *name;
  void (*call)(void **);
};

#define EMU_ENTRY(k, kind) {#k, &Caller<decltype(k)>::call<k>},
const Entry kernels[] = {PKC_KERNEL_LIST(EMU_ENTRY)};
#undef EMU_ENTRY

} // namespace

static void __syncthreads(void) { emu_fiber_switch(&cur->ctx, &sched_ctx); }

// Kept out of line so the scheduler's loop variables live in its own frame.
__attribute__((noinline)) static void resume(Fiber *f, unsigned t) {
  cur = f;
  threadIdx = {t, 0, 0};
  emu_fiber_switch(&sched_ctx, &f->ctx);
}

// A fresh fibre that will run the current kernel from its start.
static void prepare(Fiber *f) {
  f->done = false;
  emu_fiber_init(&f->ctx, f->stack, kStack, fiber_main);
}

extern "C" void emu_set_reverse_blocks(int reverse) { reverse_blocks = reverse; }

extern "C" void emu_gemm_bf16(int ta, int tb, int M, int N, int K, float alpha, const void *A, int lda,
                              const void *B, int ldb, float beta, float *C, int ldc) {
  const unsigned short *a = (const unsigned short *)A, *b = (const unsigned short *)B;
  for (int i = 0; i < M; i++)
    for (int j = 0; j < N; j++) {
      float acc = 0;
      for (int p = 0; p < K; p++) {
        size_t ai = ta ? (size_t)p * lda + i : (size_t)i * lda + p;
        size_t bi = tb ? (size_t)j * ldb + p : (size_t)p * ldb + j;
        acc += __uint_as_float((unsigned)a[ai] << 16) * __uint_as_float((unsigned)b[bi] << 16);
      }
      float *c = &C[(size_t)i * ldc + j];
      *c = beta == 0 ? alpha * acc : alpha * acc + beta * *c;
    }
}

// The fibre pool lives as long as the module; a test that dlcloses the emulator
// would otherwise leave every stack behind.
__attribute__((destructor)) static void emu_free_fibers() {
  for (unsigned i = 0; i < nfibers_alloc; i++) free(fibers[i].stack);
  free(fibers);
  fibers = nullptr;
  nfibers_alloc = 0;
}

extern "C" int emu_launch(const char *name, unsigned grid, unsigned block, void **args) {
  const Entry *e = nullptr;
  for (const Entry &k : kernels)
    if (strcmp(k.name, name) == 0) e = &k;
  if (!e) return -1;
  if (block > nfibers_alloc) {
    fibers = (Fiber *)realloc(fibers, block * sizeof *fibers);
    for (unsigned i = nfibers_alloc; i < block; i++) fibers[i].stack = (char *)malloc(kStack);
    nfibers_alloc = block;
  }
  cur_kernel = e->call;
  cur_args = args;
  gridDim = {grid, 1, 1};
  blockDim = {block, 1, 1};
  for (unsigned i = 0; i < grid; i++) {
    unsigned b = reverse_blocks ? grid - 1 - i : i;
    blockIdx = {b, 0, 0};
    for (unsigned t = 0; t < block; t++) {
      prepare(&fibers[t]);
    }
    // Rounds: each live fibre runs to its next barrier (or its end); a fibre passes
    // barrier k only in round k+1, after every fibre reached barrier k.
    for (bool live = true; live;) {
      live = false;
      for (unsigned t = 0; t < block; t++) {
        Fiber *f = &fibers[t];
        if (f->done) continue;
        resume(f, t);
        live = live || !f->done;
      }
    }
  }
  return 0;
}
