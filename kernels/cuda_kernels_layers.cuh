/* kernels/cuda_kernels_layers.cuh — the CUDA kernels of the ops that hold weights and of
 * the arithmetic between them: embedding and positions (rows of a table), add, mul
 * and scale, the bias of a linear and its gradient (the GEMMs themselves are cuBLAS
 * calls), layernorm and rmsnorm.
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
#error "kernels/cuda_kernels_layers.cuh is a part of kernels/cuda_kernels.cuh: include that"
#endif

/* ===== embedding, positions ==================================================== */

/* out[i,:] = table[ids[i],:] for n tokens (pkc_embedding_rows). */
__global__ void pkc_embedding_fwd_f32(float *out, const float *table, const int *ids, pkc_i64 n,
                                      int C, int V, unsigned long long *bad) {
  pkc_embedding_rows(out, table, ids, n, C, V, bad);
}

/* The same from a bfloat16 table (the bf16 copy a weight version holds of a tied
 * embedding that the LM head's GEMM reads on the same stage, under 2bw's weight prediction:
 * docs/update-rules.md, "Memory"). */
__global__ void pkc_embedding_fwd_bf16_f32(float *out, const unsigned short *table, const int *ids, pkc_i64 n,
                                           int C, int V, unsigned long long *bad) {
  pkc_embedding_rows(out, table, ids, n, C, V, bad);
}

/* dtable[ids[i],:] += dy[i,:]. Accumulates: for the CPU's accumulate = 0, launch
 * pkc_fill_f32(dtable, 0, V·C) first. atomicAdd, so the summation order of a row
 * that several tokens share varies from run to run (float rounding only); bad ids
 * are skipped and counted. */
__global__ void pkc_embedding_bwd_f32(float *dtable, const float *dy, const int *ids, pkc_i64 n,
                                      int C, int V, unsigned long long *bad) {
  pkc_i64 total = n * C;
  for (pkc_i64 k = pkc_tid(); k < total; k += pkc_nthreads()) {
    pkc_i64 i = k / C;
    int c = (int)(k - i * C);
    int id = ids[i];
    if (id < 0 || id >= V) {
      if (c == 0) pkc_count_bad(bad);
      continue;
    }
    atomicAdd(&dtable[(pkc_i64)id * C + c], dy[k]);
  }
}

/* out[b,t,:] = table[t,:]. */
__global__ void pkc_positions_fwd_f32(float *out, const float *table, int B, int T, int C) {
  pkc_i64 per = (pkc_i64)T * C, total = (pkc_i64)B * per;
  for (pkc_i64 k = pkc_tid(); k < total; k += pkc_nthreads()) out[k] = table[k % per];
}

/* dtable[t,:] (+)= Σ_b dy[b,t,:] for t < T, summed over b in order; rows T..rows-1
 * zeroed when !accumulate. One thread per table element: deterministic. */
__global__ void pkc_positions_bwd_f32(float *dtable, const float *dy, int B, int T, int C, int rows,
                                      int accumulate) {
  pkc_i64 total = (pkc_i64)rows * C;
  for (pkc_i64 k = pkc_tid(); k < total; k += pkc_nthreads()) {
    pkc_i64 t = k / C;
    if (t >= T) {
      if (!accumulate) dtable[k] = 0;
      continue;
    }
    float acc = accumulate ? dtable[k] : 0.0f;
    for (int b = 0; b < B; b++) acc += dy[(pkc_i64)b * T * C + k];
    dtable[k] = acc;
  }
}

/* ===== add, mul, scale, bias =================================================== */

__global__ void pkc_add_fwd_f32(float *y, const float *a, const float *b, pkc_i64 n) {
  pkc_map2(y, a, b, n, [](float u, float v) { return u + v; });
}

/* y[M,N] = a[M,N] + bias[N] (y may alias a): also linear's bias after the GEMM.
 * 128-bit steps (as pkc_map2) when N is a multiple of 4 and the pointers aligned. */
__global__ void pkc_add_bias_fwd_f32(float *y, const float *a, const float *bias, pkc_i64 M,
                                     int N) {
  pkc_i64 total = M * N, k0 = 0;
  if (N % 4 == 0 && pkc_aligned16(y) && pkc_aligned16(a) && pkc_aligned16(bias)) {
    pkc_i64 n4 = total >> 2;
    int N4 = N >> 2;
    for (pkc_i64 i = pkc_tid(); i < n4; i += pkc_nthreads()) {
      pkc_f4 u = ((const pkc_f4 *)a)[i], v = ((const pkc_f4 *)bias)[i % N4];
      u.x = u.x + v.x;
      u.y = u.y + v.y;
      u.z = u.z + v.z;
      u.w = u.w + v.w;
      ((pkc_f4 *)y)[i] = u;
    }
    k0 = n4 << 2; /* = total */
  }
  for (pkc_i64 k = k0 + pkc_tid(); k < total; k += pkc_nthreads()) y[k] = a[k] + bias[k % N];
}

__global__ void pkc_mul_fwd_f32(float *y, const float *a, const float *b, pkc_i64 n) {
  pkc_map2(y, a, b, n, [](float u, float v) { return u * v; });
}

/* da = dy ⊙ b, db = dy ⊙ a; either may be NULL. dy is read once for both. */
__global__ void pkc_mul_bwd_f32(float *da, float *db, const float *dy, const float *a,
                                const float *b, pkc_i64 n) {
  pkc_i64 i0 = 0;
  if (pkc_aligned16(da) && pkc_aligned16(db) && pkc_aligned16(dy) && pkc_aligned16(a) &&
      pkc_aligned16(b)) { /* NULL is aligned, and then never read or written */
    pkc_i64 n4 = n >> 2;
    for (pkc_i64 i = pkc_tid(); i < n4; i += pkc_nthreads()) {
      pkc_f4 g = ((const pkc_f4 *)dy)[i];
      if (da) {
        pkc_f4 v = ((const pkc_f4 *)b)[i];
        v.x = g.x * v.x;
        v.y = g.y * v.y;
        v.z = g.z * v.z;
        v.w = g.w * v.w;
        ((pkc_f4 *)da)[i] = v;
      }
      if (db) {
        pkc_f4 u = ((const pkc_f4 *)a)[i];
        u.x = g.x * u.x;
        u.y = g.y * u.y;
        u.z = g.z * u.z;
        u.w = g.w * u.w;
        ((pkc_f4 *)db)[i] = u;
      }
    }
    i0 = n4 << 2;
  }
  for (pkc_i64 i = i0 + pkc_tid(); i < n; i += pkc_nthreads()) {
    float g = dy[i];
    if (da) da[i] = g * b[i];
    if (db) db[i] = g * a[i];
  }
}

__global__ void pkc_scale_fwd_f32(float *y, const float *x, float s, pkc_i64 n) {
  pkc_map1(y, x, n, [=](float v) { return s * v; });
}

/* db[N] (+)= Σ_rows dy[M,N]. Column kernel: a block owns 32 columns; its
 * blockDim.x/32 thread groups sum interleaved rows, then the groups' partials are
 * added in group order. Deterministic. */
__global__ void pkc_bias_grad_f32(float *db, const float *dy, pkc_i64 M, int N, int accumulate) {
  __shared__ float sh[PKC_MAX_BLOCK];
  int lane = (int)(threadIdx.x & 31u), grp = (int)(threadIdx.x >> 5);
  int ngrp = (int)(blockDim.x >> 5);
  for (int c0 = (int)blockIdx.x * 32; c0 < N; c0 += (int)gridDim.x * 32) {
    int c = c0 + lane;
    float acc = 0;
    if (c < N)
      for (pkc_i64 r = grp; r < M; r += ngrp) acc += dy[r * N + c];
    sh[threadIdx.x] = acc;
    __syncthreads();
    if (grp == 0 && c < N) {
      float s = accumulate ? db[c] : 0.0f;
      for (int g = 0; g < ngrp; g++) s += sh[g * 32 + lane];
      db[c] = s;
    }
    __syncthreads();
  }
}

/* ===== layernorm ================================================================ */

/* Row kernel. y = (x - mean)·rstd·gamma + beta, biased variance, two passes (as the
 * CPU). stats (2·M, may be NULL) receives mean and rstd. */
__global__ void pkc_layernorm_fwd_f32(float *y, float *stats, const float *x, const float *gamma,
                                      const float *beta, pkc_i64 M, int C, float eps) {
  __shared__ float sh[PKC_MAX_BLOCK];
  for (pkc_i64 r = blockIdx.x; r < M; r += gridDim.x) {
    const float *xr = x + r * C;
    float s = 0;
    for (int c = (int)threadIdx.x; c < C; c += (int)blockDim.x) s += xr[c];
    float m = pkc_block_sum(s, sh) / (float)C;
    float v = 0;
    for (int c = (int)threadIdx.x; c < C; c += (int)blockDim.x) v += (xr[c] - m) * (xr[c] - m);
    v = pkc_block_sum(v, sh) / (float)C;
    float rs = 1.0f / sqrtf(v + eps);
    float *yr = y + r * C;
    for (int c = (int)threadIdx.x; c < C; c += (int)blockDim.x)
      yr[c] = (xr[c] - m) * rs * gamma[c] + beta[c];
    if (stats && threadIdx.x == 0) {
      stats[2 * r] = m;
      stats[2 * r + 1] = rs;
    }
  }
}

/* Row kernel, layernorm_bwd phase 1: dx = rstd·(dxhat - mean(dxhat) - xhat·mean(dxhat·xhat)),
 * dxhat = dy·gamma. stats (2·M) is required: with have_stats it holds the forward's
 * mean/rstd, else they are recomputed into it. Phase 2 (parameter gradients):
 * pkc_layernorm_bwd_params_f32, launched after this one, reads stats. */
__global__ void pkc_layernorm_bwd_dx_f32(float *dx, float *stats, int have_stats, const float *dy,
                                         const float *x, const float *gamma, pkc_i64 M, int C,
                                         float eps) {
  __shared__ float sh[PKC_MAX_BLOCK];
  for (pkc_i64 r = blockIdx.x; r < M; r += gridDim.x) {
    const float *xr = x + r * C, *g = dy + r * C;
    float m, rs;
    if (have_stats) {
      m = stats[2 * r];
      rs = stats[2 * r + 1];
    } else {
      float s = 0;
      for (int c = (int)threadIdx.x; c < C; c += (int)blockDim.x) s += xr[c];
      m = pkc_block_sum(s, sh) / (float)C;
      float v = 0;
      for (int c = (int)threadIdx.x; c < C; c += (int)blockDim.x) v += (xr[c] - m) * (xr[c] - m);
      v = pkc_block_sum(v, sh) / (float)C;
      rs = 1.0f / sqrtf(v + eps);
      if (threadIdx.x == 0) {
        stats[2 * r] = m;
        stats[2 * r + 1] = rs;
      }
    }
    float s1 = 0, s2 = 0;
    for (int c = (int)threadIdx.x; c < C; c += (int)blockDim.x) {
      float dxh = g[c] * gamma[c];
      s1 += dxh;
      s2 += dxh * (xr[c] - m) * rs;
    }
    s1 = pkc_block_sum(s1, sh) / (float)C;
    s2 = pkc_block_sum(s2, sh) / (float)C;
    float *dr = dx + r * C;
    for (int c = (int)threadIdx.x; c < C; c += (int)blockDim.x) {
      float xh = (xr[c] - m) * rs;
      dr[c] = rs * (g[c] * gamma[c] - s1 - xh * s2);
    }
  }
}

/* Column kernel, layernorm_bwd phase 2: dgamma (+)= Σ_rows dy·xhat, dbeta (+)= Σ_rows dy
 * (either may be NULL), with the stats phase 1 left. Same scheme as bias_grad. */
__global__ void pkc_layernorm_bwd_params_f32(float *dgamma, float *dbeta, const float *stats,
                                             const float *dy, const float *x, pkc_i64 M, int C,
                                             int accumulate) {
  __shared__ float shg[PKC_MAX_BLOCK];
  __shared__ float shb[PKC_MAX_BLOCK];
  int lane = (int)(threadIdx.x & 31u), grp = (int)(threadIdx.x >> 5);
  int ngrp = (int)(blockDim.x >> 5);
  for (int c0 = (int)blockIdx.x * 32; c0 < C; c0 += (int)gridDim.x * 32) {
    int c = c0 + lane;
    float ag = 0, ab = 0;
    if (c < C)
      for (pkc_i64 r = grp; r < M; r += ngrp) {
        float g = dy[r * C + c];
        ag += g * (x[r * C + c] - stats[2 * r]) * stats[2 * r + 1];
        ab += g;
      }
    shg[threadIdx.x] = ag;
    shb[threadIdx.x] = ab;
    __syncthreads();
    if (grp == 0 && c < C) {
      float sg = accumulate && dgamma ? dgamma[c] : 0.0f;
      float sb = accumulate && dbeta ? dbeta[c] : 0.0f;
      for (int k = 0; k < ngrp; k++) {
        sg += shg[k * 32 + lane];
        sb += shb[k * 32 + lane];
      }
      if (dgamma) dgamma[c] = sg;
      if (dbeta) dbeta[c] = sb;
    }
    __syncthreads();
  }
}

/* ===== rmsnorm (Llama's: Hugging Face's LlamaRMSNorm in float32) ================== */

/* Row kernel: y = x·rstd·gamma, rstd = 1/sqrt(mean(x²) + eps) (pk_rmsnorm_fwd's twin). */
__global__ void pkc_rmsnorm_fwd_f32(float *y, const float *x, const float *gamma, pkc_i64 M, int C, float eps) {
  __shared__ float sh[PKC_MAX_BLOCK];
  for (pkc_i64 r = blockIdx.x; r < M; r += gridDim.x) {
    const float *xr = x + r * C;
    float s = 0;
    for (int c = (int)threadIdx.x; c < C; c += (int)blockDim.x) s += xr[c] * xr[c];
    float rs = 1.0f / sqrtf(pkc_block_sum(s, sh) / (float)C + eps);
    for (int c = (int)threadIdx.x; c < C; c += (int)blockDim.x) y[r * C + c] = xr[c] * rs * gamma[c];
  }
}

/* Row kernel: dx = rstd·(dy·gamma - x·k), k = rstd²·mean(dy·gamma·x) (pk_rmsnorm_bwd's twin). */
__global__ void pkc_rmsnorm_bwd_f32(float *dx, const float *dy, const float *x, const float *gamma, pkc_i64 M,
                                    int C, float eps) {
  __shared__ float sh[PKC_MAX_BLOCK];
  for (pkc_i64 r = blockIdx.x; r < M; r += gridDim.x) {
    const float *xr = x + r * C, *g = dy + r * C;
    float s = 0, d = 0;
    for (int c = (int)threadIdx.x; c < C; c += (int)blockDim.x) {
      s += xr[c] * xr[c];
      d += g[c] * gamma[c] * xr[c];
    }
    float rs = 1.0f / sqrtf(pkc_block_sum(s, sh) / (float)C + eps);
    float k = pkc_block_sum(d, sh) * rs * rs / (float)C;
    for (int c = (int)threadIdx.x; c < C; c += (int)blockDim.x) dx[r * C + c] = rs * (g[c] * gamma[c] - xr[c] * k);
  }
}

/* Column kernel: dgamma (+)= Σ_rows dy·x·rstd, bias_grad's scheme (a block per 32
 * columns, its warps over rows); each warp recomputes its row's rstd with a warp sum,
 * as pk_rmsnorm_dgamma does per chunk, so no stats pass between two ops. */
__global__ void pkc_rmsnorm_dgamma_f32(float *dgamma, const float *dy, const float *x, pkc_i64 M, int C, float eps,
                                       int accumulate) {
  __shared__ float sh[PKC_MAX_BLOCK];
  int lane = (int)(threadIdx.x & 31u), grp = (int)(threadIdx.x >> 5);
  int ngrp = (int)(blockDim.x >> 5);
  for (int c0 = (int)blockIdx.x * 32; c0 < C; c0 += (int)gridDim.x * 32) {
    int c = c0 + lane;
    float a = 0;
    for (pkc_i64 r = grp; r < M; r += ngrp) { /* the whole warp: the shuffles need every lane */
      const float *xr = x + r * C;
      float s = 0;
      for (int k = lane; k < C; k += 32) s += xr[k] * xr[k];
      for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
      float rs = 1.0f / sqrtf(s / (float)C + eps);
      if (c < C) a += dy[r * C + c] * xr[c] * rs;
    }
    sh[threadIdx.x] = a;
    __syncthreads();
    if (grp == 0 && c < C) {
      float t = accumulate ? dgamma[c] : 0.0f;
      for (int k = 0; k < ngrp; k++) t += sh[k * 32 + lane];
      dgamma[c] = t;
    }
    __syncthreads();
  }
}

/* ===== rope (rotary position embedding, Hugging Face's rotate-half convention) ===== */

/* Row kernel: row r of x[B,T,C] (position t = r mod T), its heads of D = C/heads, each
 * thread a pair (x_i, x_{i+D/2}) turned by sgn·a, a = t·(1/theta^(2i/D)) in float32
 * (pk_rope_'s twin: y_i = x_i·cos - x_{i+D/2}·sin, y_{i+D/2} = x_{i+D/2}·cos + x_i·sin). */
static __device__ __forceinline__ void pkc_rope_(float *y, const float *x, pkc_i64 rows, int T, int C, float heads,
                                                 float theta, float sgn) {
  int H = (int)heads, D = C / H, half = D / 2;
  for (pkc_i64 r = blockIdx.x; r < rows; r += gridDim.x) {
    float t = (float)(r % T);
    for (int j = (int)threadIdx.x; j < H * half; j += (int)blockDim.x) {
      int h = j / half, i = j - h * half;
      float inv = 1.0f / powf(theta, (float)(2 * i) / (float)D);
      float a = t * inv, cs = cosf(a), sn = sgn * sinf(a);
      pkc_i64 k = r * C + h * D + i;
      float u = x[k], v = x[k + half];
      y[k] = u * cs - v * sn;
      y[k + half] = v * cs + u * sn;
    }
  }
}

/* Row kernel: rope(x) (pk_rope_fwd's twin). */
__global__ void pkc_rope_fwd_f32(float *y, const float *x, pkc_i64 rows, int T, int C, float heads, float theta) {
  pkc_rope_(y, x, rows, T, C, heads, theta, 1.0f);
}

/* Row kernel: rope_bwd(dy) -> dx, the rotation by -a (pk_rope_bwd's twin). */
__global__ void pkc_rope_bwd_f32(float *dx, const float *dy, pkc_i64 rows, int T, int C, float heads,
                                 float theta) {
  pkc_rope_(dx, dy, rows, T, C, heads, theta, -1.0f);
}
