/* kernels/cuda_mma.cuh — the tensor-core and async-copy helpers of the kernel
 * library (warp-collective; sm_80 and later).
 *
 * Four PTX instructions, as inline PTX (NVRTC has no headers, so no mma.h/cuda_bf16.h):
 * mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32, ldmatrix.sync.aligned.m8n8.x4
 * (.trans).shared.b16, cp.async.cg.shared.global (16 bytes) with cp.async.commit_group
 * and wait_group; the fragment layouts they use precede their definitions below.
 *
 * Under PKC_EMULATE (tests/cuda/cuda_emu.cpp) each helper is a CPU definition with
 * exactly the instruction's layout: the lanes exchange their registers or row addresses
 * through the emulator's warp rendezvous (emu_warp_exchange), and each lane computes
 * what the instruction would leave in its registers. So a kernel that gets a fragment
 * wrong computes a wrong answer on the emulator too (tests/cuda/test_cuda_mma.c proves
 * the layout against a plain loop). cp.async is a plain 16-byte copy there. */
#ifndef PD2BW_CUDA_MMA_CUH
#define PD2BW_CUDA_MMA_CUH

#ifndef PD2BW_CUDA_HELPERS_CUH
#include "cuda_helpers.cuh"
#endif

/* Two floats as a bf16x2 register (round to nearest even): lo in the low half. */
static __device__ __forceinline__ unsigned pkc_pack_bf16x2(float lo, float hi) {
#if defined(PKC_EMULATE)
  return (unsigned)pkc_f32_to_bf16(lo) | ((unsigned)pkc_f32_to_bf16(hi) << 16);
#else
  unsigned r;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
#endif
}

/* The fragments the helpers below move (PTX ISA, "Matrix Fragments for mma.m16n8k16"
 * with .bf16), with g = lane>>2 (groupID) and c = lane&3 (threadID_in_group); each
 * 32-bit register holds two bf16, the lower-indexed element in the low half:
 *   A (16x16, row): a[0] = A[g][2c..2c+1],   a[1] = A[g+8][2c..2c+1],
 *                   a[2] = A[g][2c+8..2c+9], a[3] = A[g+8][2c+8..2c+9];
 *   B (16x8, col):  b[0] = B[2c..2c+1][g],   b[1] = B[2c+8..2c+9][g];
 *   C, D (16x8):    d[0], d[1] = D[g][2c], D[g][2c+1];  d[2], d[3] = D[g+8][2c], D[g+8][2c+1].
 * pkc_mma_bf16_16816: D[16x8] += A[16x16]·B[16x8], bf16 operands, fp32 accumulators.
 * pkc_ldmatrix_x4(_trans): four 8x8 b16 matrices from shared memory (lane 8j+r gives
 * row r of matrix j's address; register j of lane 4r+c holds matrix j's row r, columns
 * 2c, 2c+1, or with _trans its rows 2c, 2c+1 of column r). Each has a CPU definition
 * under PKC_EMULATE with exactly that layout, the GPU's inline PTX otherwise. */
#if defined(PKC_EMULATE)

/* Element (r, k) of the A fragment the warp's 32 lanes hold (regs: 4 per lane). */
static inline float pkc_emu_a(const unsigned *regs, int r, int k) {
  unsigned w = regs[((r & 7) * 4 + ((k & 7) >> 1)) * 4 + (r >= 8) + 2 * (k >= 8)];
  return pkc_bf16_to_f32((unsigned short)(w >> (16 * (k & 1))));
}
/* Element (k, n) of the B fragment (regs: 2 per lane). */
static inline float pkc_emu_b(const unsigned *regs, int k, int n) {
  unsigned w = regs[(n * 4 + ((k & 7) >> 1)) * 2 + (k >= 8)];
  return pkc_bf16_to_f32((unsigned short)(w >> (16 * (k & 1))));
}

static __device__ void pkc_mma_bf16_16816(float d[4], const unsigned a[4], const unsigned b[2]) {
  struct Frag {
    unsigned a[4], b[2];
  } mine = {{a[0], a[1], a[2], a[3]}, {b[0], b[1]}}, all[32];
  emu_warp_exchange(&mine, sizeof mine, all);
  unsigned A[32 * 4], Bv[32 * 2];
  for (int l = 0; l < 32; l++) {
    for (int i = 0; i < 4; i++) A[l * 4 + i] = all[l].a[i];
    for (int i = 0; i < 2; i++) Bv[l * 2 + i] = all[l].b[i];
  }
  int g = (int)(threadIdx.x & 31) >> 2, c = (int)threadIdx.x & 3;
  for (int i = 0; i < 4; i++) {
    int r = g + 8 * (i >> 1), n = 2 * c + (i & 1);
    float acc = d[i];
    for (int k = 0; k < 16; k++) acc += pkc_emu_a(A, r, k) * pkc_emu_b(Bv, k, n);
    d[i] = acc;
  }
}

static __device__ void pkc_ldmatrix_emu(unsigned r[4], const void *row, int trans) {
  const unsigned short *all[32];
  const unsigned short *mine = (const unsigned short *)row;
  emu_warp_exchange(&mine, sizeof mine, all);
  int g = (int)(threadIdx.x & 31) >> 2, c = (int)threadIdx.x & 3;
  for (int j = 0; j < 4; j++) {
    unsigned lo, hi;
    if (trans) {
      lo = all[8 * j + 2 * c][g];
      hi = all[8 * j + 2 * c + 1][g];
    } else {
      lo = all[8 * j + g][2 * c];
      hi = all[8 * j + g][2 * c + 1];
    }
    r[j] = lo | (hi << 16);
  }
}
static __device__ void pkc_ldmatrix_x4(unsigned r[4], const void *row) { pkc_ldmatrix_emu(r, row, 0); }
static __device__ void pkc_ldmatrix_x4_trans(unsigned r[4], const void *row) {
  pkc_ldmatrix_emu(r, row, 1);
}

static __device__ void pkc_cp_async16(void *smem, const void *gmem) { memcpy(smem, gmem, 16); }
static __device__ void pkc_cp_async_commit(void) {}
template <int N> static __device__ void pkc_cp_async_wait(void) {}

#else /* the GPU */

/* A generic pointer into shared memory as a .shared address. */
static __device__ __forceinline__ unsigned pkc_smem_addr(const void *p) {
  unsigned a;
  asm("{ .reg .u64 t; cvta.to.shared.u64 t, %1; cvt.u32.u64 %0, t; }\n" : "=r"(a) : "l"(p));
  return a;
}

static __device__ __forceinline__ void pkc_mma_bf16_16816(float d[4], const unsigned a[4],
                                                          const unsigned b[2]) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
               "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

static __device__ __forceinline__ void pkc_ldmatrix_x4(unsigned r[4], const void *row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(pkc_smem_addr(row)));
}
static __device__ __forceinline__ void pkc_ldmatrix_x4_trans(unsigned r[4], const void *row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(pkc_smem_addr(row)));
}

/* 16 bytes global -> shared, bypassing L1 (both 16-byte aligned). */
static __device__ __forceinline__ void pkc_cp_async16(void *smem, const void *gmem) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(pkc_smem_addr(smem)), "l"(gmem));
}
static __device__ __forceinline__ void pkc_cp_async_commit(void) {
  asm volatile("cp.async.commit_group;\n" ::);
}
/* Waits until at most N committed groups are still in flight. */
template <int N> static __device__ __forceinline__ void pkc_cp_async_wait(void) {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

#endif

/* The helpers' own check (tests/cuda/op_check.c "mma", on the emulator and on the GPU):
 * one warp computes three 16x8 products of A[16x32] (row-major) and B[32x8], into
 * D[3][16][8]: D[0] with A and B through ldmatrix (B row-major [k][n]: .trans), D[1]
 * with B given transposed as Bt[8x32] ([n][k]: plain ldmatrix), D[2] with the
 * fragments gathered from global memory by the layout above (no ldmatrix). All three
 * equal a plain loop's A·B only if the helpers keep the PTX fragment layout. Launch:
 * one block of 32 threads or more (threads past 32 idle). */
extern "C" __global__ void pkc_mma_check_bf16(float *D, const unsigned short *A, const unsigned short *B,
                                              const unsigned short *Bt) {
  __shared__ __align__(16) unsigned short sA[16 * 40], sB[32 * 16], sBt[8 * 40];
  if (threadIdx.x >= 32) return; /* whole warps only */
  const int lane = (int)threadIdx.x, g = lane >> 2, c = lane & 3;
  for (int i = lane; i < 64; i += 32) pkc_cp_async16(sA + (i >> 2) * 40 + (i & 3) * 8, A + i * 8);
  pkc_cp_async16(sB + lane * 16, B + lane * 8);
  pkc_cp_async16(sBt + (lane >> 2) * 40 + (lane & 3) * 8, Bt + lane * 8);
  pkc_cp_async_commit();
  pkc_cp_async_wait<0>();
  __syncwarp();
  float d[3][4] = {{0, 0, 0, 0}, {0, 0, 0, 0}, {0, 0, 0, 0}};
  unsigned b[4], bt[4];
  pkc_ldmatrix_x4_trans(b, sB + lane * 16);
  pkc_ldmatrix_x4(bt, sBt + (lane & 7) * 40 + (lane >> 3) * 8);
  for (int kk = 0; kk < 2; kk++) {
    unsigned a[4], ga[4], gb[2];
    pkc_ldmatrix_x4(a, sA + ((lane & 7) + ((lane >> 3) & 1) * 8) * 40 + 16 * kk + (lane >> 4) * 8);
    pkc_mma_bf16_16816(d[0], a, b + 2 * kk);
    pkc_mma_bf16_16816(d[1], a, bt + 2 * kk);
    for (int r = 0; r < 4; r++) {
      int row = g + 8 * (r & 1), col = 16 * kk + 2 * c + 8 * (r >> 1);
      ga[r] = (unsigned)A[row * 32 + col] | ((unsigned)A[row * 32 + col + 1] << 16);
    }
    for (int r = 0; r < 2; r++) {
      int k = 16 * kk + 2 * c + 8 * r;
      gb[r] = (unsigned)B[k * 8 + g] | ((unsigned)B[(k + 1) * 8 + g] << 16);
    }
    pkc_mma_bf16_16816(d[2], ga, gb);
  }
  for (int m = 0; m < 3; m++)
    for (int i = 0; i < 4; i++) D[m * 128 + (g + 8 * (i >> 1)) * 8 + 2 * c + (i & 1)] = d[m][i];
}

#endif /* PD2BW_CUDA_MMA_CUH */
