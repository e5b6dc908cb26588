/* runtime/core/console.c — the one format of a training step, on the console and in the
 * --log-json file, for every executor (the one-stage trainer and the CUDA trainer
 * through runtime/core/log.c; the pipelined executors, threads, MPI and the GPU's,
 * through log.c: rank 0 of a pipelined run streams it, runtime/pipeline/pipeline_log.c).
 *
 * The line: step/total, the global loss (the mean over every microbatch of every
 * replica), lr, grad norm (of the averaged gradient, before clipping), ms, tok/s,
 * GFLOP/s, MFU where the plan knows the device peak (plan.json "peak_flops", the
 * cluster file's peak for the plan's precision), ETA, and the validation loss when
 * one was taken. The JSON object has the same numbers under the same keys in every
 * mode ("mfu" null when the peak is unknown). And the one error line (rt_fail). */
#include "runtime/core/runtime.h"

#include <math.h>
#include <stdio.h>

ConsoleStep console_step(int64_t step, int64_t nsteps, double loss, double lr, double grad_norm, double ms,
                         double tokens, double flops, double peak_flops, double val_loss) {
  double sec = ms / 1e3;
  ConsoleStep s = {.step = step, .nsteps = nsteps, .loss = loss, .lr = lr, .grad_norm = grad_norm, .ms = ms,
                   .tokens_per_s = sec > 0 ? tokens / sec : 0, .gflops = sec > 0 ? flops / sec / 1e9 : 0,
                   .mfu = NAN, .eta_s = NAN, .val_loss = val_loss};
  if (peak_flops > 0 && sec > 0) s.mfu = flops / sec / peak_flops;
  return s;
}

static int eta_text(double s, char *buf, size_t n) {
  if (!(s >= 0)) return snprintf(buf, n, "-");
  long long t = llround(s);
  if (t >= 3600) return snprintf(buf, n, "%lldh%02lldm", t / 3600, t / 60 % 60);
  if (t >= 60) return snprintf(buf, n, "%lldm%02llds", t / 60, t % 60);
  return snprintf(buf, n, "%llds", t);
}

int console_step_line(const ConsoleStep *s, char *buf, size_t n) {
  char mfu[32] = "", eta[32], val[48] = "";
  if (!isnan(s->mfu)) snprintf(mfu, sizeof mfu, " | MFU %.1f%%", 100 * s->mfu);
  eta_text(s->eta_s, eta, sizeof eta);
  if (!isnan(s->val_loss)) snprintf(val, sizeof val, " | val loss %.4f", s->val_loss);
  return snprintf(buf, n,
                  "step %lld/%lld | loss %.4f | lr %.2e | grad norm %.4f | %.1f ms | %.0f tok/s | %.1f GFLOP/s%s | "
                  "ETA %s%s",
                  (long long)s->step, (long long)s->nsteps, s->loss, s->lr, s->grad_norm, s->ms, s->tokens_per_s,
                  s->gflops, mfu, eta, val);
}

/* A JSON number (%.9g when exact, else %.6g), or null for NAN (not measured, or no
 * peak known). */
static const char *jnum(char *buf, size_t n, bool exact, double x) {
  if (isnan(x) || isinf(x)) return "null";
  if (exact) snprintf(buf, n, "%.9g", x);
  else snprintf(buf, n, "%.6g", x);
  return buf;
}

int console_json_line(const ConsoleStep *s, char *buf, size_t n) {
  char gn[32], ms[32], tps[32], gf[32], mfu[32], val[48] = "";
  bool timed = !isnan(s->ms);
  if (!isnan(s->val_loss)) snprintf(val, sizeof val, ", \"val_loss\": %.9g", s->val_loss);
  return snprintf(buf, n,
                  "{\"step\": %lld, \"loss\": %.9g, \"lr\": %.9g, \"grad_norm\": %s, \"ms\": %s, \"tokens_per_s\": %s, "
                  "\"gflops\": %s, \"mfu\": %s%s}\n",
                  (long long)s->step, s->loss, s->lr, jnum(gn, sizeof gn, true, s->grad_norm),
                  jnum(ms, sizeof ms, false, s->ms), jnum(tps, sizeof tps, false, timed ? s->tokens_per_s : NAN),
                  jnum(gf, sizeof gf, false, timed ? s->gflops : NAN), jnum(mfu, sizeof mfu, false, s->mfu), val);
}

int rt_fail(const char *prog, const char *msg) {
  fprintf(stderr, "%s: error: %s\n", prog, msg);
  return 1;
}
