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
#define __align__(n) __attribute__((aligned(n)))

static void __syncthreads(void);
static void __syncwarp(unsigned mask = 0xffffffffu);
static void emu_warp_exchange(const void *mine, unsigned bytes, void *all);

/* Warp shuffles (full mask only), from the warp rendezvous below. */
template <typename T> static T emu_shfl(T v, unsigned src) {
  static_assert(sizeof(T) <= 8, "shuffle of a type wider than 8 bytes");
  T all[32];
  emu_warp_exchange(&v, sizeof v, all);
  return all[src & 31];
}
template <typename T> static T __shfl_xor_sync(unsigned mask, T v, int lane_mask, int width = 32) {
  (void)mask;
  (void)width;
  return emu_shfl(v, (threadIdx.x & 31) ^ (unsigned)lane_mask);
}
template <typename T> static T __shfl_sync(unsigned mask, T v, int src, int width = 32) {
  (void)mask;
  (void)width;
  return emu_shfl(v, (unsigned)src);
}

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
/* a product rounded to float32 on its own (the device never contracts it into an fma) */
static inline float __fmul_rn(float a, float b) {
  volatile float p = a * b;
  return p;
}

#include "kernels/cuda_kernel_list.h"
#include "kernels/cuda_kernels.cuh"
#include "kernels/philox.h"
#include "tests/cuda/emu_fiber.h"

// ---- fibres ---------------------------------------------------------------------------
namespace {

const size_t kStack = 128 * 1024;

// Where a fibre stands: running (or runnable), waiting at __syncthreads, waiting at
// its warp's rendezvous, or returned.
enum FiberState { F_RUN, F_BLOCK_BAR, F_WARP_BAR, F_DONE };

struct Fiber {
  EmuFiber ctx;
  char *stack;
  FiberState state;
  unsigned warp_seq; // warp collectives this fibre has entered (selects the slot buffer)
};

// A warp collective's data: each lane deposits up to kSlot bytes in buffer seq&1, then
// waits until the warp's every lane has deposited. Two buffers suffice: a lane can
// deposit for collective n+2 only after every lane arrived at n+1, i.e. after every
// lane finished reading n.
const unsigned kSlot = 64;
struct WarpSlots {
  unsigned char data[2][32][kSlot];
  unsigned arrived;
};
WarpSlots *warps;
unsigned nwarps_alloc;
const char *divergence; // set when a launch's warp rendezvous cannot complete

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
  cur->state = F_DONE;
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

// The emulator's own checks of its warp rendezvous (test_cuda_emu.c): shuffles move
// data between lanes; a shuffle that odd lanes skip is divergent.
void emu_check_shfl(float *out) {
  float v = (float)threadIdx.x;
  float x = __shfl_xor_sync(0xffffffffu, v, 5);
  out[threadIdx.x] = x + 1000.0f * __shfl_sync(0xffffffffu, v, 3);
}
void emu_check_divergent(float *out) {
  if (threadIdx.x & 1) return;
  out[threadIdx.x] = __shfl_xor_sync(0xffffffffu, 1.0f, 2);
}

#define EMU_ENTRY(k, kind) {#k, &Caller<decltype(k)>::call<k>},
const Entry kernels[] = {PKC_KERNEL_LIST(EMU_ENTRY) EMU_ENTRY(emu_check_shfl, 0) EMU_ENTRY(emu_check_divergent, 0)};
#undef EMU_ENTRY

} // namespace

static void __syncthreads(void) {
  cur->state = F_BLOCK_BAR;
  emu_fiber_switch(&cur->ctx, &sched_ctx);
}

// The warp rendezvous: every lane of this fibre's warp (lanes 32w..32w+31 of the
// block) must arrive before any continues. A lane that returned or waits at
// __syncthreads instead is a divergent warp collective: the launch fails.
static void emu_warp_wait(void) {
  cur->state = F_WARP_BAR;
  emu_fiber_switch(&cur->ctx, &sched_ctx);
}

static void emu_warp_exchange(const void *mine, unsigned bytes, void *all) {
  unsigned lane = threadIdx.x & 31, w = threadIdx.x / 32, buf = cur->warp_seq++ & 1;
  if (bytes > kSlot) abort();
  memcpy(warps[w].data[buf][lane], mine, bytes);
  emu_warp_wait();
  unsigned n = blockDim.x - 32 * w < 32 ? blockDim.x - 32 * w : 32;
  for (unsigned l = 0; l < n; l++) memcpy((unsigned char *)all + l * bytes, warps[w].data[buf][l], bytes);
}

static void __syncwarp(unsigned mask) {
  (void)mask;
  emu_warp_wait();
}

// Kept out of line so the scheduler's loop variables live in its own frame.
__attribute__((noinline)) static void resume(Fiber *f, unsigned t) {
  cur = f;
  threadIdx = {t, 0, 0};
  emu_fiber_switch(&sched_ctx, &f->ctx);
}

// A fresh fibre that will run the current kernel from its start.
static void prepare(Fiber *f) {
  f->state = F_RUN;
  f->warp_seq = 0;
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
  free(warps);
  warps = nullptr;
  nwarps_alloc = 0;
}

extern "C" const char *emu_last_error(void) { return divergence; }

// Runs one block to its end; false when a warp collective diverged (which is then
// described in `divergence`).
static bool run_block(unsigned block) {
  unsigned nw = (block + 31) / 32;
  for (unsigned w = 0; w < nw; w++) warps[w].arrived = 0;
  for (;;) {
    // Rounds: each runnable fibre runs to its next barrier (or its end); a fibre passes
    // __syncthreads k only after every fibre reached it. A warp's lanes pass their
    // rendezvous as soon as the last lane arrives.
    bool ran = false;
    for (unsigned t = 0; t < block; t++) {
      Fiber *f = &fibers[t];
      if (f->state != F_RUN) continue;
      ran = true;
      resume(f, t);
      if (f->state != F_WARP_BAR) continue;
      unsigned w = t / 32, n = block - 32 * w < 32 ? block - 32 * w : 32;
      if (++warps[w].arrived < n) continue;
      warps[w].arrived = 0;
      for (unsigned l = 32 * w; l < 32 * w + n; l++) fibers[l].state = F_RUN;
    }
    if (ran) continue;
    bool any_bar = false;
    for (unsigned t = 0; t < block; t++) {
      if (fibers[t].state == F_WARP_BAR) {
        divergence = "a warp collective (shuffle, __syncwarp, mma, ldmatrix) that some lanes "
                     "of the warp never reached (they returned or wait at __syncthreads)";
        return false;
      }
      any_bar = any_bar || fibers[t].state == F_BLOCK_BAR;
    }
    if (!any_bar) return true;
    for (unsigned t = 0; t < block; t++)
      if (fibers[t].state == F_BLOCK_BAR) fibers[t].state = F_RUN;
  }
}

// Runs kernel `call` (a Caller's call) over the grid, each block's threads as fibres:
// the library kernels (emu_launch) and a generated module's own kernels
// (tests/cudaexec/emu_module.c: emu_stage_launch), some of which synchronise.
static int emu_run(const char *name, void (*call)(void **), unsigned grid, unsigned block, void **args) {
  if (block > nfibers_alloc) {
    fibers = (Fiber *)realloc(fibers, block * sizeof *fibers);
    for (unsigned i = nfibers_alloc; i < block; i++) fibers[i].stack = (char *)malloc(kStack);
    nfibers_alloc = block;
  }
  if ((block + 31) / 32 > nwarps_alloc) {
    nwarps_alloc = (block + 31) / 32;
    warps = (WarpSlots *)realloc(warps, nwarps_alloc * sizeof *warps);
  }
  divergence = nullptr;
  cur_kernel = call;
  cur_args = args;
  gridDim = {grid, 1, 1};
  blockDim = {block, 1, 1};
  for (unsigned i = 0; i < grid; i++) {
    unsigned b = reverse_blocks ? grid - 1 - i : i;
    blockIdx = {b, 0, 0};
    for (unsigned t = 0; t < block; t++) prepare(&fibers[t]);
    if (!run_block(block)) {
      fprintf(stderr, "emulator: %s: block %u: %s\n", name, b, divergence);
      return -2;
    }
  }
  return 0;
}

extern "C" int emu_launch(const char *name, unsigned grid, unsigned block, void **args) {
  for (const Entry &k : kernels)
    if (strcmp(k.name, name) == 0) return emu_run(name, k.call, grid, block, args);
  return -1;
}
