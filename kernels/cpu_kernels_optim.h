/* kernels/cpu_kernels_optim.h — the CPU optimizer steps, AdamW (with 2BW's delay
 * compensation) and SGD with momentum, element by element.
 *
 * A part of kernels/cpu_kernels.h, not a header of its own: cpu_kernels.h includes it
 * inside each instantiation (float32, float64), where PK(), PK_REAL and Part 1's
 * helpers are defined, so it has no include guard; the text that generated programs
 * carry has this file in place of that #include (kernels/embed.cmake). Its own file
 * so that each family of kernels reads on its own (cpu_kernels.h held all of them in
 * ~1000 lines). */
#ifndef PK_REAL
#error "kernels/cpu_kernels_optim.h is a part of kernels/cpu_kernels.h: include that"
#endif

/* ---- optimizers ----------------------------------------------------------------- */

/* One AdamW step (Loshchilov & Hutter; PyTorch's AdamW), element by element:
 *   g = grad·grad_scale     (grad_scale folds in clipping and 1/accumulation)
 *   m = β1·m + (1-β1)·g,  v = β2·v + (1-β2)·g²
 *   w_out = w_in - lr·( m/(1-β1^t) / (sqrt(v/(1-β2^t)) + eps) + wd·w_in )
 * with wd = weight_decay only when `decay` (decoupled; biases and norms pass 0).
 * t is the 1-based step. w_out may alias w_in; 2BW writes the new version into the
 * oldest version's buffer, so they usually differ.
 *
 * Delay compensation (train.delay_comp = λ > 0, the 2bw rule only: docs/update-rules.md).
 * 2BW's g was taken at W(t-1), which w_out holds on entry (its old contents are read
 * before they are overwritten); w_in is W(t). The first moment takes the first-order
 * Taylor estimate of the gradient at W(t),
 *   g~ = g + λ·sqrt(v/(1-β2^t))·(w_in - w_out)
 * instead of g: DC-ASGD-a (Zheng et al. 2017), whose curvature estimate λ·g·g /
 * sqrt(mean square of g) takes Adam's bias-corrected second moment v̂ (the new one,
 * of the raw g) for both the g·g and the mean square. λ = 0 is plain AdamW, bit for
 * bit; w_out == w_in (no older version) compensates nothing. */
PK_API void PK(adamw_step)(PK_REAL *w_out, const PK_REAL *w_in, const PK_REAL *grad,
                           PK_REAL *m, PK_REAL *v, int64_t n, double lr, double beta1,
                           double beta2, double eps, double weight_decay, int decay,
                           int64_t t, double grad_scale, double delay_comp) {
  /* 1-β computed in double: 1 - 0.999f is off by 5e-5 relative in float. */
  PK_REAL b1 = (PK_REAL)beta1, b2 = (PK_REAL)beta2;
  PK_REAL ob1 = (PK_REAL)(1.0 - beta1), ob2 = (PK_REAL)(1.0 - beta2);
  PK_REAL bc1 = (PK_REAL)(1.0 - pow(beta1, (double)t));
  PK_REAL bc2 = (PK_REAL)(1.0 - pow(beta2, (double)t));
  PK_REAL lr_ = (PK_REAL)lr, eps_ = (PK_REAL)eps, gs = (PK_REAL)grad_scale;
  PK_REAL wd = decay ? (PK_REAL)weight_decay : 0, dc = (PK_REAL)delay_comp;
  PK_OMP(omp parallel for schedule(static) if (n >= PK_PAR_MIN))
  for (int64_t i = 0; i < n; i++) {
    PK_REAL g = grad[i] * gs;
    PK_REAL vi = b2 * v[i] + ob2 * g * g;
    PK_REAL w = w_in[i];
    PK_REAL gc = dc != 0 ? g + dc * PK_SQRT(vi / bc2) * (w - w_out[i]) : g;
    PK_REAL mi = b1 * m[i] + ob1 * gc;
    m[i] = mi;
    v[i] = vi;
    w_out[i] = w - lr_ * ((mi / bc1) / (PK_SQRT(vi / bc2) + eps_) + wd * w);
  }
}

/* 2bw's weight prediction (train.predict = k, docs/update-rules.md), after the
 * optimizer wrote W(t+1) into w_slot from the master's W(t):
 *   master = W(t+1),  w_slot = W(t+1) + k·(W(t+1) - W(t))
 * the weights the next batch that reads w_slot runs on. */
PK_API void PK(predict_step)(PK_REAL *w_slot, PK_REAL *master, int64_t n, double k) {
  PK_REAL k_ = (PK_REAL)k;
  PK_OMP(omp parallel for schedule(static) if (n >= PK_PAR_MIN))
  for (int64_t i = 0; i < n; i++) {
    PK_REAL w = w_slot[i], old = master[i];
    master[i] = w;
    w_slot[i] = w + k_ * (w - old);
  }
}

/* SGD with momentum (PyTorch's SGD, dampening 0, coupled L2 weight decay):
 *   g = grad·grad_scale + wd·w_in,  buf = momentum·buf + g,  w_out = w_in - lr·buf
 * wd = weight_decay only when `decay`. buf may be NULL when momentum == 0. A
 * zero-initialised buf gives buf = g on the first step, as PyTorch does. */
PK_API void PK(sgd_step)(PK_REAL *w_out, const PK_REAL *w_in, const PK_REAL *grad,
                         PK_REAL *buf, int64_t n, double lr, double momentum,
                         double weight_decay, int decay, double grad_scale) {
  PK_REAL lr_ = (PK_REAL)lr, mu = (PK_REAL)momentum, gs = (PK_REAL)grad_scale;
  PK_REAL wd = decay ? (PK_REAL)weight_decay : 0;
  PK_OMP(omp parallel for schedule(static) if (n >= PK_PAR_MIN))
  for (int64_t i = 0; i < n; i++) {
    PK_REAL w = w_in[i];
    PK_REAL g = grad[i] * gs + wd * w;
    if (buf) {
      buf[i] = mu * buf[i] + g;
      g = buf[i];
    }
    w_out[i] = w - lr_ * g;
  }
}
