/* kernels/cuda_kernels_optim.cuh — the CUDA optimizer steps, AdamW (with 2BW's delay
 * compensation) and SGD with momentum, element by element, each with its values by
 * value or read on the device (pkc_step_scalars; the multi-tensor AdamW is
 * cuda_adamw_multi.cuh); and 2bw's weight prediction after a per-tensor step.
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
#error "kernels/cuda_kernels_optim.cuh is a part of kernels/cuda_kernels.cuh: include that"
#endif

/* ===== optimizers ================================================================ */

/* AdamW's element loop, shared by the by-value and _dev kernels. */
static __device__ __forceinline__ void pkc_adamw_apply(float *w_out, const float *w_in,
                                                       const float *grad, float *m, float *v,
                                                       pkc_i64 n, double lr, double beta1,
                                                       double beta2, double eps,
                                                       double weight_decay, int decay, float bc1,
                                                       float bc2, double grad_scale,
                                                       double delay_comp) {
  pkc_adamw_c c = pkc_adamw_consts(lr, beta1, beta2, eps, weight_decay, decay, bc1, bc2,
                                   grad_scale, delay_comp);
  for (pkc_i64 i = pkc_tid(); i < n; i += pkc_nthreads()) {
    float mi = m[i], vi = v[i];
    /* w_out holds W(t-1) on entry (2bw) */
    float wo = pkc_adamw_elem(c, grad[i], w_in[i], c.dc != 0.0f ? w_out[i] : 0.0f, mi, vi);
    m[i] = mi;
    v[i] = vi;
    w_out[i] = wo;
  }
}

/* AdamW, as the CPU's pk_adamw_step_f32 (same arguments, same float arithmetic;
 * the bias corrections in double, once per block). w_out may alias w_in; with
 * delay_comp > 0 it holds W(t-1) on entry (the CPU's comment says what is done). */
__global__ void pkc_adamw_step_f32(float *w_out, const float *w_in, const float *grad, float *m,
                                   float *v, pkc_i64 n, double lr, double beta1, double beta2,
                                   double eps, double weight_decay, int decay, pkc_i64 t,
                                   double grad_scale, double delay_comp) {
  __shared__ float bc[2];
  pkc_adamw_bias_corrections(bc, beta1, beta2, (double)t);
  pkc_adamw_apply(w_out, w_in, grad, m, v, n, lr, beta1, beta2, eps, weight_decay, decay, bc[0],
                  bc[1], grad_scale, delay_comp);
}

/* pkc_adamw_step_f32 with lr, t, grad_scale and the delay compensation in force (0 in
 * a flushed step) read from s (bit for bit the same). */
__global__ void pkc_adamw_step_dev_f32(float *w_out, const float *w_in, const float *grad, float *m,
                                       float *v, pkc_i64 n, double beta1, double beta2, double eps,
                                       double weight_decay, int decay, const pkc_step_scalars *s) {
  __shared__ float bc[2];
  pkc_adamw_bias_corrections(bc, beta1, beta2, (double)s->t);
  pkc_adamw_apply(w_out, w_in, grad, m, v, n, s->lr, beta1, beta2, eps, weight_decay, decay,
                  bc[0], bc[1], s->grad_scale, s->delay_comp);
}

/* SGD's element loop, shared by the by-value and _dev kernels. */
static __device__ __forceinline__ void pkc_sgd_apply(float *w_out, const float *w_in,
                                                     const float *grad, float *buf, pkc_i64 n,
                                                     double lr, double momentum,
                                                     double weight_decay, int decay,
                                                     double grad_scale) {
  float lr_ = (float)lr, mu = (float)momentum, gs = (float)grad_scale;
  float wd = decay ? (float)weight_decay : 0.0f;
  for (pkc_i64 i = pkc_tid(); i < n; i += pkc_nthreads()) {
    float w = w_in[i];
    float g = grad[i] * gs + wd * w;
    if (buf) {
      buf[i] = mu * buf[i] + g;
      g = buf[i];
    }
    w_out[i] = w - lr_ * g;
  }
}

/* SGD with momentum, as pk_sgd_step_f32 (buf may be NULL when momentum == 0). */
__global__ void pkc_sgd_step_f32(float *w_out, const float *w_in, const float *grad, float *buf,
                                 pkc_i64 n, double lr, double momentum, double weight_decay,
                                 int decay, double grad_scale) {
  pkc_sgd_apply(w_out, w_in, grad, buf, n, lr, momentum, weight_decay, decay, grad_scale);
}

/* pkc_sgd_step_f32 with lr and grad_scale read from s. */
__global__ void pkc_sgd_step_dev_f32(float *w_out, const float *w_in, const float *grad, float *buf,
                                     pkc_i64 n, double momentum, double weight_decay, int decay,
                                     const pkc_step_scalars *s) {
  pkc_sgd_apply(w_out, w_in, grad, buf, n, s->lr, momentum, weight_decay, decay, s->grad_scale);
}

/* 2bw's weight prediction of one tensor after its step, as pk_predict_step_f32 (the same
 * bits: pkc_predict_elem): w_slot holds the new W(t+1), master the W(t) it was stepped
 * from; master takes W(t+1) and w_slot W(t+1) + k·(W(t+1) - W(t)), k = s->predict (read
 * on the device, so one captured update graph serves every step). 128-bit steps when
 * both are 16-byte aligned (PKC_ELEM4), the rest one by one. */
__global__ void pkc_predict_step_dev_f32(float *w_slot, float *master, pkc_i64 n,
                                         const pkc_step_scalars *s) {
  float k = (float)s->predict;
  pkc_i64 i0 = 0;
  if (pkc_aligned16(w_slot) && pkc_aligned16(master)) {
    pkc_i64 n4 = n >> 2;
    for (pkc_i64 i = pkc_tid(); i < n4; i += pkc_nthreads()) {
      pkc_f4 w = ((const pkc_f4 *)w_slot)[i], old = ((const pkc_f4 *)master)[i];
      ((pkc_f4 *)master)[i] = w;
      ((pkc_f4 *)w_slot)[i] = pkc_predict4(k, w, old);
    }
    i0 = n4 << 2;
  }
  for (pkc_i64 i = i0 + pkc_tid(); i < n; i += pkc_nthreads()) {
    float w = w_slot[i], old = master[i];
    master[i] = w;
    w_slot[i] = pkc_predict_elem(k, w, old);
  }
}
