/* kernels/cuda_kernels_activations.cuh — the CUDA kernels of the elementwise and row-wise
 * nonlinearities, gelu, relu, silu and softmax; of dropout, the random op (its mask from
 * philox.h); and of gather, which picks rows by position.
 *
 * A part of kernels/cuda_kernels.cuh, not a header of its own: cuda_kernels.cuh
 * includes it inside its extern "C" block, after the 128-bit maps (pkc_map1,
 * pkc_map2) and the attention head-size macros it may use, so it has no include guard;
 * the library text that NVRTC compiles (kernels.cu) has this file in place of that
 * #include (kernels/embed.cmake), and the host emulator and the runtime include
 * cuda_kernels.cuh as before. Its own file so that each family of kernels reads on its
 * own (cuda_kernels.cuh held all of them in ~1100 lines), as cpu_kernels_<family>.h
 * do for the CPU twin; that file's conventions and cuda_kernels.cuh's launch
 * conventions hold here. */
#ifndef PD2BW_CUDA_KERNELS_CUH
#error "kernels/cuda_kernels_activations.cuh is a part of kernels/cuda_kernels.cuh: include that"
#endif

/* ===== gelu, relu, softmax ====================================================== */

/* PKC_SELFTEST_PERTURB, defined when compiling (never in a real build), multiplies
 * the result by 1.01, so tests/cuda/gpu_op_check --self-test can prove its checks
 * catch a wrong kernel. */
__global__ void pkc_gelu_fwd_f32(float *y, const float *x, pkc_i64 n) {
  pkc_map1(y, x, n, [](float v) {
    float r = 0.5f * v * (1.0f + tanhf(PKC_GELU_K * (v + PKC_GELU_A * v * v * v)));
#ifdef PKC_SELFTEST_PERTURB
    r *= 1.01f;
#endif
    return r;
  });
}

__global__ void pkc_gelu_bwd_f32(float *dx, const float *dy, const float *x, pkc_i64 n) {
  pkc_map2(dx, dy, x, n, [](float g, float v) {
    float th = tanhf(PKC_GELU_K * (v + PKC_GELU_A * v * v * v));
    float du = PKC_GELU_K * (1.0f + 3.0f * PKC_GELU_A * v * v);
    float d = 0.5f * (1.0f + th) + 0.5f * v * (1.0f - th * th) * du;
    return g * d;
  });
}

__global__ void pkc_relu_fwd_f32(float *y, const float *x, pkc_i64 n) {
  pkc_map1(y, x, n, [](float v) { return v > 0 ? v : 0.0f; });
}

__global__ void pkc_relu_bwd_f32(float *dx, const float *dy, const float *x, pkc_i64 n) {
  pkc_map2(dx, dy, x, n, [](float g, float v) { return v > 0 ? g : 0.0f; });
}

__global__ void pkc_silu_fwd_f32(float *y, const float *x, pkc_i64 n) {
  pkc_map1(y, x, n, [](float v) { return pkc_silu_(v); });
}

__global__ void pkc_silu_bwd_f32(float *dx, const float *dy, const float *x, pkc_i64 n) {
  pkc_map2(dx, dy, x, n, [](float g, float v) {
    float s = 1.0f / (1.0f + expf(-v));
    return g * s * (1.0f + v * (1.0f - s));
  });
}

/* Row kernel: softmax over each row of N, max-subtracted. */
__global__ void pkc_softmax_fwd_f32(float *y, const float *x, pkc_i64 M, int N) {
  __shared__ float sh[PKC_MAX_BLOCK];
  for (pkc_i64 r = blockIdx.x; r < M; r += gridDim.x) {
    const float *xr = x + r * N;
    float *yr = y + r * N;
    float mx = -3.402823466e38f;
    for (int c = (int)threadIdx.x; c < N; c += (int)blockDim.x) mx = xr[c] > mx ? xr[c] : mx;
    mx = pkc_block_max(mx, sh);
    float s = 0;
    for (int c = (int)threadIdx.x; c < N; c += (int)blockDim.x) s += (yr[c] = expf(xr[c] - mx));
    float inv = 1.0f / pkc_block_sum(s, sh);
    for (int c = (int)threadIdx.x; c < N; c += (int)blockDim.x) yr[c] *= inv;
  }
}

/* Row kernel: dx = y ⊙ (dy - Σ dy⊙y). */
__global__ void pkc_softmax_bwd_f32(float *dx, const float *dy, const float *y, pkc_i64 M, int N) {
  __shared__ float sh[PKC_MAX_BLOCK];
  for (pkc_i64 r = blockIdx.x; r < M; r += gridDim.x) {
    const float *g = dy + r * N, *yr = y + r * N;
    float s = 0;
    for (int c = (int)threadIdx.x; c < N; c += (int)blockDim.x) s += g[c] * yr[c];
    s = pkc_block_sum(s, sh);
    for (int c = (int)threadIdx.x; c < N; c += (int)blockDim.x) dx[r * N + c] = yr[c] * (g[c] - s);
  }
}

/* ===== dropout ================================================================== */

/* y = x ⊙ mask / (1-p), the CPU's mask bit for bit (y may alias x); the forward's
 * and the backward's one loop. One thread per
 * block of four elements: one Philox call each, and one 128-bit load and store when
 * the pointers are 16-byte aligned. */
static __device__ __forceinline__ void pkc_dropout_apply(float *y, const float *x, pkc_i64 n, double p,
                                                         pkc_u64 seed, pkc_u32 op,
                                                         const pkc_u32 *mbkey) {
  const pkc_u32 microbatch = p > 0 ? *mbkey : 0u; /* read once; NULL when p is 0 */
  pkc_u64 thr = pk_rng_threshold(p);
  float ks = pkc_keep_scale(p);
  pkc_i64 nblk = (n + 3) / 4;
  pkc_i64 nvec = pkc_aligned16(y) && pkc_aligned16(x) ? n >> 2 : 0; /* whole aligned blocks */
  for (pkc_i64 blk = pkc_tid(); blk < nblk; blk += pkc_nthreads()) {
    PhiloxCtr r;
    if (p > 0) r = pk_rng_block(seed, op, microbatch, (pkc_u64)blk);
    if (blk < nvec) { /* the block's four elements in one 128-bit load and store */
      pkc_f4 v = ((const pkc_f4 *)(x))[blk];
      if (p > 0) {
        v.x = (pkc_u64)r.v[0] >= thr ? v.x * ks : 0.0f;
        v.y = (pkc_u64)r.v[1] >= thr ? v.y * ks : 0.0f;
        v.z = (pkc_u64)r.v[2] >= thr ? v.z * ks : 0.0f;
        v.w = (pkc_u64)r.v[3] >= thr ? v.w * ks : 0.0f;
      }
      ((pkc_f4 *)(y))[blk] = v;
      continue;
    }
    for (int j = 0; j < 4 && blk * 4 + j < n; j++) {
      pkc_i64 i = blk * 4 + j;
      if (!(p > 0))
        y[i] = x[i];
      else
        y[i] = (pkc_u64)r.v[j] >= thr ? x[i] * ks : 0.0f;
    }
  }
}


/* y = x ⊙ mask / (1-p). */
__global__ void pkc_dropout_fwd_f32(float *y, const float *x, pkc_i64 n, double p, pkc_u64 seed,
                                    pkc_u32 op, const pkc_u32 *mbkey) {
  pkc_dropout_apply(y, x, n, p, seed, op, mbkey);
}

/* dx = dy ⊙ mask / (1-p) with the forward's (p, seed, op, microbatch). */
__global__ void pkc_dropout_bwd_f32(float *dx, const float *dy, pkc_i64 n, double p, pkc_u64 seed,
                                    pkc_u32 op, const pkc_u32 *mbkey) {
  pkc_dropout_apply(dx, dy, n, p, seed, op, mbkey);
}

/* ===== gather =================================================================== */

/* y[b,j,:] = x[b,pos[b,j],:]; a bad position gives a zero row (counted). */
__global__ void pkc_gather_fwd_f32(float *y, const float *x, const int *pos, int B, int T, int P,
                                   int C, unsigned long long *bad) {
  pkc_i64 total = (pkc_i64)B * P * C;
  for (pkc_i64 k = pkc_tid(); k < total; k += pkc_nthreads()) {
    pkc_i64 row = k / C; /* b·P + j */
    int c = (int)(k - row * C);
    int b = (int)(row / P);
    int t = pos[row];
    if (t < 0 || t >= T) {
      y[k] = 0;
      if (c == 0) pkc_count_bad(bad);
    } else {
      y[k] = x[((pkc_i64)b * T + t) * C + c];
    }
  }
}

/* dx = 0, then dx[b,pos[b,j],:] += dy[b,j,:] over j in order. One thread per (b, c)
 * owns dx[b,:,c], so repeated positions need no atomics and the sum is ordered. */
__global__ void pkc_gather_bwd_f32(float *dx, const float *dy, const int *pos, int B, int T, int P,
                                   int C, unsigned long long *bad) {
  pkc_i64 total = (pkc_i64)B * C;
  for (pkc_i64 k = pkc_tid(); k < total; k += pkc_nthreads()) {
    int b = (int)(k / C), c = (int)(k % C);
    float *d = dx + (pkc_i64)b * T * C + c;
    for (int t = 0; t < T; t++) d[(pkc_i64)t * C] = 0;
    for (int j = 0; j < P; j++) {
      int t = pos[(pkc_i64)b * P + j];
      if (t < 0 || t >= T) {
        if (c == 0) pkc_count_bad(bad);
        continue;
      }
      d[(pkc_i64)t * C] += dy[((pkc_i64)b * P + j) * C + c];
    }
  }
}
