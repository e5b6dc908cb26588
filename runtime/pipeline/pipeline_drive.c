/* runtime/pipeline/pipeline_drive.c — the driver loop every pipelined mode shares
 * (runtime/pipeline/pipeline_rank.h: pipe_drive): every rank of pipeline_run.c, over
 * exec_run_batches, on the CPU or a CUDA device (both CUDA pipeline modes run here
 * too: runtime/cuda/pipe/cuda_pipe.h). Training runs in stretches that end where a
 * validation is due, so nothing is in flight while the validation runs; 2bw drains at
 * each, which changes timing, not values (consecutive stretches compute what one run
 * over their union does). After each stretch and its validation, `done` gets the
 * stretch: the streamed --log-json's last line of it (the others went out as it
 * trained) and the agreement on a failed write (pipeline_log.c); for that agreement
 * stretches are cut to at most log_every steps (one-rank plans: a step per stretch,
 * as the one-stage trainer, pipeline_one.c, does). */
#include <math.h>
#include <stdio.h>

#include "runtime/pipeline/pipeline_rank.h"

bool pipe_drive(const PipeDrive *d, double *val, double *val_final) {
  int64_t nb = d->steps > d->first ? d->steps - d->first : 0, K = d->eval ? d->eval_every : 0, lo = d->first;
  for (int64_t b = 0; b <= nb; b++) val[b] = NAN;
  *val_final = NAN;
  bool ok = true;
  do { /* always one stretch: a run resumed at (or past) --steps still validates */
    int64_t hi = d->steps;
    if (K > 0 && (lo / K + 1) * K < hi) hi = (lo / K + 1) * K;
    if (d->log_every > 0 && lo + d->log_every < hi) hi = lo + d->log_every;
    ok = d->run(d->ctx, lo, hi);
    if (ok && d->eval && (hi >= d->steps || (K > 0 && hi % K == 0))) {
      double v;
      ok = d->eval(d->ctx, &v);
      if (ok) {
        *val_final = v;
        if (hi > d->first) val[hi - 1 - d->first] = v;
      }
      if (ok && d->print && hi > d->first) {
        printf("step %5lld/%lld | val loss %.4f\n", (long long)hi, (long long)d->steps, v);
        fflush(stdout);
      }
    }
    /* the stretch's steps, each with its own validation loss: --log-json streamed */
    if (ok && d->done && hi > lo) ok = d->done(d->ctx, lo, hi, val[hi - 1 - d->first]);
    lo = hi;
  } while (ok && lo < d->steps);
  return ok;
}
