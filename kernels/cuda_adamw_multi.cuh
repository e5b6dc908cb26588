/* kernels/cuda_adamw_multi.cuh — AdamW's element step, and AdamW over ALL of a stage
 * replica's parameters in ONE launch (the multi-tensor apply of apex and PyTorch's
 * _foreach/fused optimizers): pkc_adamw_multi_dev_f32.
 *
 * pkc_adamw_elem is AdamW's one expression per element (cpu_kernels.h's pk_adamw_step,
 * float for float): every AdamW kernel calls it, so they give the same bits.
 * Why one table serves every launch: every parameter of a stage replica lies at the
 * same byte offset in each of its blocks (the weight versions, the gradients, m and v),
 * so a tensor is (element offset, count, decay, has a gradient) and the launch gets the
 * blocks' bases, whatever (version written, version read) pair it steps. 2bw's weight
 * prediction and the bf16 weight copies are fused into the same pass. The rules of
 * cuda_kernels.cuh hold (no system header; PKC_EMULATE on the host). */
#ifndef PD2BW_CUDA_ADAMW_MULTI_CUH
#define PD2BW_CUDA_ADAMW_MULTI_CUH

#ifndef PD2BW_CUDA_HELPERS_CUH
#include "cuda_helpers.cuh"
#endif

/* The per-step optimizer values in device memory, written by the host once per step
 * (runtime/cuda/exec/cuda_exec.h: its CxStepScalars is this layout), so that one captured
 * update graph (arguments frozen at capture) serves every step: the _dev optimizer
 * variants read them through a pointer. */
struct pkc_step_scalars {
  double lr;         /* this step's learning rate */
  double grad_scale; /* 1/m · the clip factor */
  pkc_i64 t;         /* the 1-based step of the bias corrections */
  double delay_comp; /* the compensation in force: 0 in a flushed (fresh) step */
  double predict;    /* k of the weight prediction (0 in a flushed start) */
};

/* AdamW's constants for one tensor and step, in float as the CPU rounds them
 * (1-beta in double first: 1 - 0.999f is off by 5e-5). bc1, bc2: the bias corrections. */
struct pkc_adamw_c {
  float b1, b2, ob1, ob2, lr, eps, gs, wd, dc, bc1, bc2;
};

static __device__ __forceinline__ pkc_adamw_c pkc_adamw_consts(double lr, double beta1, double beta2,
                                                              double eps, double weight_decay,
                                                              int decay, float bc1, float bc2,
                                                              double grad_scale,
                                                              double delay_comp) {
  pkc_adamw_c c;
  c.b1 = (float)beta1, c.b2 = (float)beta2;
  c.ob1 = (float)(1.0 - beta1), c.ob2 = (float)(1.0 - beta2);
  c.lr = (float)lr, c.eps = (float)eps, c.gs = (float)grad_scale;
  c.wd = decay ? (float)weight_decay : 0.0f, c.dc = (float)delay_comp;
  c.bc1 = bc1, c.bc2 = bc2;
  return c;
}

/* AdamW's bias corrections 1 - beta^t, in double and rounded to float once per block
 * (as the CPU computes them once per step): thread 0 writes bc[0..1] in shared memory,
 * and every thread of the block reads them after the barrier. */
static __device__ __forceinline__ void pkc_adamw_bias_corrections(float *bc, double beta1, double beta2,
                                                                  double t) {
  if (threadIdx.x == 0) {
    bc[0] = (float)(1.0 - pow(beta1, t));
    bc[1] = (float)(1.0 - pow(beta2, t));
  }
  __syncthreads();
}

/* One element of AdamW (pk_adamw_step's loop body, the same float expressions): the
 * raw gradient, W(t), W(t-1) (read only with delay compensation), m and v in and out;
 * returns the new weight. Every AdamW kernel (per tensor, and the multi-tensor one of
 * cuda_adamw_multi.cuh) calls this, so all give the same bits. */
static __device__ __forceinline__ float pkc_adamw_elem(const pkc_adamw_c &c, float grad, float w,
                                                       float w_prev, float &m, float &v) {
  float g = grad * c.gs;
  float vi = c.b2 * v + c.ob2 * g * g;
  /* delay compensation (2bw): W(t) - W(t-1), as the CPU's */
  float gc = c.dc != 0.0f ? g + c.dc * sqrtf(vi / c.bc2) * (w - w_prev) : g;
  float mi = c.b1 * m + c.ob1 * gc;
  m = mi;
  v = vi;
  return w - c.lr * ((mi / c.bc1) / (sqrtf(vi / c.bc2) + c.eps) + c.wd * w);
}

/* One element of 2bw's weight prediction (pk_predict_step's loop body): W(t+1) + k·(W(t+1)
 * - W(t)) from the new weight w and master's old one. The product is rounded on its own
 * (__fmul_rn: a GPU never contracts it into an fma), as the CPU's float expression. */
static __device__ __forceinline__ float pkc_predict_elem(float k, float w, float old) {
  return w + __fmul_rn(k, w - old);
}

static __device__ __forceinline__ pkc_f4 pkc_predict4(float k, pkc_f4 w, pkc_f4 old) {
  pkc_f4 r;
  r.x = pkc_predict_elem(k, w.x, old.x);
  r.y = pkc_predict_elem(k, w.y, old.y);
  r.z = pkc_predict_elem(k, w.z, old.z);
  r.w = pkc_predict_elem(k, w.w, old.w);
  return r;
}

/* One tensor of the multi-tensor step: runtime/cuda/exec/cuda_adamw_multi.h's CxAdamwTensor,
 * field for field. */
struct pkc_adamw_tensor {
  pkc_i64 off; /* element offset in every block */
  pkc_i64 n;   /* elements */
  int decay;   /* weight decay applies */
  int has_grad; /* 0: copy W(t) into the version written, no step */
  /* a bf16 plan's weight prediction, where the versions hold the bf16 copies
   * (docs/update-rules.md "Memory"): no float32 value in the version written, its bf16
   * copy instead in the first half of its float32 place there (element i at w_out's
   * element off, bf16 element i); delay compensation reads W(t-1) from that copy (the
   * weights its gradient was taken at, as the GEMMs read them); the master (never NULL
   * then) holds its float32 W */
  int fold;
  int pad_;
};

/* One chunk of the work: elements [chunk·size, (chunk+1)·size) of tensor `tensor`. */
struct pkc_adamw_chunk {
  unsigned tensor, chunk;
};

/* Four bf16 bits in one 64-bit word, element 0 in the low half (little-endian). */
static __device__ __forceinline__ pkc_u64 pkc_bf16x4(float a, float b, float c, float d) {
  return (pkc_u64)pkc_f32_to_bf16(a) | (pkc_u64)pkc_f32_to_bf16(b) << 16 |
         (pkc_u64)pkc_f32_to_bf16(c) << 32 | (pkc_u64)pkc_f32_to_bf16(d) << 48;
}

/* Elements [lo, hi) of one tensor (pointers at its offset), one by one; ma: master
 * (NULL: no prediction), k its factor; fold: the version written is w16 alone. */
static __device__ __forceinline__ void pkc_adamw_multi_scalar(const pkc_adamw_c &c, float *wo,
                                                              const float *wi, const float *g,
                                                              float *m, float *v, float *ma,
                                                              float k, unsigned short *w16,
                                                              bool fold, pkc_i64 lo, pkc_i64 hi) {
  for (pkc_i64 i = lo + threadIdx.x; i < hi; i += blockDim.x) {
    float mi = m[i], vi = v[i];
    float prev = c.dc == 0.0f ? 0.0f : fold ? pkc_bf16_to_f32(w16[i]) : wo[i];
    float w = pkc_adamw_elem(c, g[i], wi[i], prev, mi, vi);
    m[i] = mi;
    v[i] = vi;
    if (ma) {
      float old = ma[i];
      ma[i] = w;
      w = pkc_predict_elem(k, w, old);
    }
    if (!fold) wo[i] = w;
    if (w16) w16[i] = pkc_f32_to_bf16(w);
  }
}

/* A tensor without a gradient, elements [lo, hi): W(t) into the version written (and
 * predicted from master's old value, which it replaces), its bf16 copy. */
static __device__ __forceinline__ void pkc_adamw_multi_keep(float *wo, const float *wi, float *ma,
                                                            float k, unsigned short *w16, bool fold,
                                                            pkc_i64 lo, pkc_i64 hi) {
  for (pkc_i64 i = lo + threadIdx.x; i < hi; i += blockDim.x) {
    float w = wi[i];
    if (ma) {
      float old = ma[i];
      ma[i] = w;
      w = pkc_predict_elem(k, w, old);
      if (!fold) wo[i] = w;
    } else if (wo != wi && !fold) {
      wo[i] = w;
    }
    if (w16) w16[i] = pkc_f32_to_bf16(w);
  }
}

extern "C" {

/* AdamW of every tensor of `tensors` in one launch: blocks w_out (version written,
 * W(t-1) on entry under 2bw's delay compensation), w_in (version read), grad, m, v, the
 * optional master (weight prediction) and the optional bf16 copy w16 of the version
 * written; lr, t, grad_scale, the delay compensation and the prediction's k read from
 * s, as pkc_adamw_step_dev_f32 and pkc_predict_step_dev_f32 (the same bits).
 * The work is cut into chunks of `chunk` elements (a multiple of 4, so every chunk of a
 * 16-byte-aligned tensor starts 16-byte aligned); the host writes a map with one
 * (tensor, chunk) entry per chunk (runtime/cuda/exec/cuda_adamw_multi.c), and block b
 * steps chunk b, b + gridDim.x, ... (any grid is correct). A chunk whose five float
 * streams are 16-byte aligned (and its bf16 copy 8-byte aligned) moves them with
 * 128-bit loads and stores, four elements a step, its tail one by one; any other chunk
 * goes element by element. A tensor without a gradient keeps its value: W(t) copied
 * into the version written (a no-op when that is the version read).
 * master (may be NULL): 2bw's weight prediction (train.predict, docs/update-rules.md),
 * fused into the same pass: after an element's step (or copy) master takes its new
 * W(t+1) and the version written W(t+1) + k·(W(t+1) - W(t)), W(t) being master's old
 * value (pkc_predict_elem); w_in is master then.
 * w16 (may be NULL): a bfloat16 copy of the version written, at the same element
 * offsets, rewritten from every new weight (the predicted one under prediction; round
 * to nearest even, pkc_f32_to_bf16): the bf16 GEMMs read their weight operand there
 * (pd2bwc --precision bf16). A folded tensor (CxAdamwTensor.fold) keeps only its bf16
 * copy in the version written. */
__global__ void pkc_adamw_multi_dev_f32(float *w_out, const float *w_in, const float *grad,
                                        float *m, float *v, float *master, unsigned short *w16,
                                        const pkc_adamw_tensor *tensors,
                                        const pkc_adamw_chunk *chunks, pkc_i64 nchunks,
                                        pkc_i64 chunk, double beta1, double beta2, double eps,
                                        double weight_decay, const pkc_step_scalars *s) {
  __shared__ float bc[2];
  pkc_adamw_bias_corrections(bc, beta1, beta2, (double)s->t);
  float k = (float)s->predict;
  for (pkc_i64 b = blockIdx.x; b < nchunks; b += gridDim.x) {
    pkc_adamw_chunk ck = chunks[b];
    pkc_adamw_tensor t = tensors[ck.tensor];
    pkc_i64 lo = (pkc_i64)ck.chunk * chunk, hi = lo + chunk < t.n ? lo + chunk : t.n;
    float *wo = w_out + t.off, *mt = m + t.off, *vt = v + t.off;
    const float *wi = w_in + t.off, *gt = grad + t.off;
    float *ma = master ? master + t.off : 0;
    bool fold = t.fold != 0; /* the version written holds the bf16 copy in wo's place */
    unsigned short *h = fold ? (unsigned short *)(void *)wo : w16 ? w16 + t.off : 0;
    if (!t.has_grad) { /* no step: W(t) into the version written */
      pkc_adamw_multi_keep(wo, wi, ma, k, h, fold, lo, hi);
      continue;
    }
    pkc_adamw_c c = pkc_adamw_consts(s->lr, beta1, beta2, eps, weight_decay, t.decay, bc[0], bc[1],
                                     s->grad_scale, s->delay_comp);
    bool vec = pkc_aligned16(wo + lo) && pkc_aligned16(wi + lo) && pkc_aligned16(gt + lo) &&
               pkc_aligned16(mt + lo) && pkc_aligned16(vt + lo) && (!ma || pkc_aligned16(ma + lo)) &&
               (!h || ((pkc_u64)(h + lo) & 7u) == 0);
    pkc_i64 n4 = vec ? (hi - lo) / 4 : 0;
    for (pkc_i64 j = threadIdx.x; j < n4; j += blockDim.x) {
      pkc_i64 i = lo + 4 * j;
      pkc_f4 w4 = *(const pkc_f4 *)(wi + i), g4 = *(const pkc_f4 *)(gt + i);
      pkc_f4 m4 = *(const pkc_f4 *)(mt + i), v4 = *(const pkc_f4 *)(vt + i), p4 = {0, 0, 0, 0};
      if (c.dc != 0.0f && fold) {
        pkc_u64 h4 = *(const pkc_u64 *)(h + i);
        p4.x = pkc_bf16_to_f32((unsigned short)h4), p4.y = pkc_bf16_to_f32((unsigned short)(h4 >> 16));
        p4.z = pkc_bf16_to_f32((unsigned short)(h4 >> 32)), p4.w = pkc_bf16_to_f32((unsigned short)(h4 >> 48));
      } else if (c.dc != 0.0f) {
        p4 = *(const pkc_f4 *)(wo + i);
      }
      pkc_f4 o4;
      o4.x = pkc_adamw_elem(c, g4.x, w4.x, p4.x, m4.x, v4.x);
      o4.y = pkc_adamw_elem(c, g4.y, w4.y, p4.y, m4.y, v4.y);
      o4.z = pkc_adamw_elem(c, g4.z, w4.z, p4.z, m4.z, v4.z);
      o4.w = pkc_adamw_elem(c, g4.w, w4.w, p4.w, m4.w, v4.w);
      *(pkc_f4 *)(mt + i) = m4;
      *(pkc_f4 *)(vt + i) = v4;
      if (ma) { /* master's W(t) out, W(t+1) in; the version written predicted */
        pkc_f4 old = *(const pkc_f4 *)(ma + i);
        *(pkc_f4 *)(ma + i) = o4;
        o4 = pkc_predict4(k, o4, old);
      }
      if (!fold) *(pkc_f4 *)(wo + i) = o4;
      if (h) *(pkc_u64 *)(h + i) = pkc_bf16x4(o4.x, o4.y, o4.z, o4.w);
    }
    pkc_adamw_multi_scalar(c, wo, wi, gt, mt, vt, ma, k, h, fold, lo + 4 * n4, hi);
  }
}

} /* extern "C" */

#endif /* PD2BW_CUDA_ADAMW_MULTI_CUH */
