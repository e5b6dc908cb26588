/* runtime/pipeline_ref.c — checking a pipelined run against the sequential reference.
 *
 * pd2bwc writes PLAN/reference/: the same model as ONE stage, microbatch size b and
 * w·m microbatches per step, i.e. the global batch of the pipeline. The one-stage
 * trainer (runtime/trainer.c) runs it with the pipeline's update rule (vanilla for
 * gpipe/1f1b, one step delayed for 2bw) over the same data in the same microbatch
 * order and dropout keys (runtime/pipeline.h), from the same checkpoint when the run
 * resumed. Then the loss of every microbatch and, at the end, every weight are
 * compared:
 *     loss:   |a - b| <= tol · max(|b|, 1)
 *     weight: max_i |a_i - b_i| <= 10·tol · max(max_i |b_i|, 1e-2)   (per tensor)
 * Summation order differs (per replica then across replicas; tied contributions per
 * stage then across stages), so the gradients' bits differ by f32 rounding (~1e-7
 * relative). Losses see that only through the weights and stay within ~1e-6. AdamW
 * divides each element's step by that element's own gradient scale, so where a
 * gradient is near zero (fresh biases) the rounding becomes a visible part of a step:
 * hence the looser weight bound, still far below one step's size (lr ~ 1e-3). */
#include "runtime/pipeline_rank.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

bool pipeline_check_reference(const PipePlan *p, const PipeOptions *o, const PipeOutcome *got, double tol,
                              FILE *out, char *err, size_t errlen) {
  if (p->schedule == PS_PIPEDREAM) {
    snprintf(err, errlen, "--reference: the sequential executor has no pipedream (per-stage delay) rule");
    return false;
  }
  size_t n = strlen(p->rt->dir) + 32;
  char *dir = pd_malloc(n);
  snprintf(dir, n, "%s/reference", p->rt->dir);
  RtPlan *rp = rt_plan_load(dir, err, errlen);
  free(dir);
  if (!rp) return false;
  bool ok = true;
  Trainer *t = NULL;
  DataFile *df = NULL;
  DataLoader *dl = NULL;
  if (rp->b != p->b || rp->m != p->m * p->w) {
    snprintf(err, errlen, "%s: microbatches %lld x %lld, the pipeline's global batch is %lld x %lld", rp->dir,
             (long long)rp->m, (long long)rp->b, (long long)(p->m * p->w), (long long)p->b);
    ok = false;
  }
  rp->delayed = p->schedule == PS_2BW;
  rp->train.steps = p->rt->train.steps;
  TrainerOptions to = {.seed = o->seed, .seed_set = o->seed_set};
  if (ok) ok = (t = trainer_create(rp, &to, err, errlen)) != NULL;
  if (ok && o->resume_path) ok = trainer_resume(t, o->resume_path, err, errlen);
  const RtStage *st = &rp->stages[0];
  int T = 0;
  int64_t vocab = 0;
  for (int k = 0; ok && k < st->ninputs; k++)
    if (st->inputs[k].stream != STREAM_OTHER) T = (int)st->inputs[k].shape[1];
  for (int k = 0; ok && k < st->nparams; k++)
    if (strcmp(st->params[k].name, "wte") == 0) vocab = st->params[k].shape[0];
  char ierr[IO_ERR_LEN];
  if (ok && (!(df = data_open(o->data_path, DATA_AUTO, vocab, ierr, sizeof ierr)) ||
             !(dl = data_loader_create(df, (int)(rp->b * rp->m), T, o->shuffle,
                                                o->seed_set ? o->seed : rp->train.seed, ierr, sizeof ierr)))) {
    snprintf(err, errlen, "%s", ierr);
    ok = false;
  }
  double worst_loss = 0, worst_w = 0;
  const char *worst_name = "";
  int64_t worst_step = -1;
  if (ok) {
    fprintf(out, "reference: sequential executor, %s rule, %lld microbatches of %lld per step\n",
            rp->delayed ? "2bw (delayed)" : "vanilla", (long long)rp->m, (long long)rp->b);
    for (int64_t s = got->first_step; s < got->steps; s++) {
      StepStats ss;
      trainer_step(t, dl, &ss);
      /* every microbatch's loss, in the reference's order */
      double step_worst = 0;
      for (int64_t j = 0; j < got->mb_per_step; j++) {
        double a = got->mb_loss[(s - got->first_step) * got->mb_per_step + j], b = ss.mb_loss[j];
        double rel = fabs(a - b) / (fabs(b) > 1 ? fabs(b) : 1);
        if (!(rel <= step_worst)) step_worst = rel;
      }
      if (!(step_worst <= worst_loss) || worst_step < 0) worst_loss = step_worst, worst_step = s;
      fprintf(out, "  step %lld: loss %.7f (pipeline) %.7f (reference), worst microbatch rel. diff %.2e\n",
              (long long)s + 1, got->step_loss[s - got->first_step], ss.loss, step_worst);
    }
    const float *w = trainer_params(t);
    for (int k = 0; k < st->nparams; k++) {
      const RtParam *q = &st->params[k];
      int j = -1;
      for (int i = 0; i < got->nparams && j < 0; i++)
        if (strcmp(got->names[i], q->name) == 0) j = i;
      if (j < 0 || got->numel[j] != q->numel) {
        snprintf(err, errlen, "--reference: parameter '%s' is missing or has another size in the pipeline", q->name);
        ok = false;
        break;
      }
      const float *ref = (const float *)(const void *)((const char *)w + q->offset);
      double mx = 0, md = 0;
      for (int64_t i = 0; i < q->numel; i++) {
        double d = fabs((double)got->weights[j][i] - ref[i]);
        if (fabs(ref[i]) > mx) mx = fabs(ref[i]);
        if (d > md || d != d) md = d;
      }
      double rel = md / (mx > 1e-2 ? mx : 1e-2);
      if (rel > 10 * tol || rel != rel) fprintf(out, "  weight %s: rel. diff %.2e\n", q->name, rel);
      if (rel > worst_w || rel != rel) {
        worst_w = rel;
        worst_name = q->name;
      }
    }
  }
  if (ok) {
    bool match = worst_loss <= tol && worst_w <= 10 * tol;
    fprintf(out, "reference: worst microbatch loss rel. diff %.2e (step %lld, bound %.0e), worst weight rel. diff %.2e (%s, "
            "bound %.0e): %s\n", worst_loss, (long long)worst_step + 1, tol, worst_w, worst_name, 10 * tol,
            match ? "MATCH" : "DIFFER");
    if (!match) {
      snprintf(err, errlen, "--reference: the pipeline differs from the sequential reference (loss %.2e, weight "
               "%.2e in %s; bounds %.0e, %.0e)", worst_loss, worst_w, worst_name, tol, 10 * tol);
      ok = false;
    }
  }
  data_loader_destroy(dl);
  if (df) data_close(df);
  trainer_destroy(t);
  rt_plan_free(rp);
  return ok;
}
