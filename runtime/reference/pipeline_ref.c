/* runtime/reference/pipeline_ref.c — checking a pipelined run against the sequential
 * reference (reference.h). gpipe, 1f1b, 2bw: the one-stage trainer runs PLAN/reference
 * (the model as one stage, w·m microbatches per step) with the pipeline's update rule
 * over the same data, microbatch order and dropout keys, from the same checkpoint.
 * pipedream (its stages read different versions of a tied parameter for one microbatch,
 * which one stage cannot express): pipeline_seq.c, from step 0. Bounds, per microbatch
 * loss and per tensor at the end:
 *     loss:   |a - b| <= tol · max(|b|, 1)
 *     weight: max_i |a_i - b_i| <= 10·tol · max(max_i |b_i|, 1e-2)
 * Summation orders differ (replicas, tied members), so gradients differ by f32 rounding
 * (~1e-7 relative) and losses stay within ~1e-6; AdamW divides each element's step by
 * its own gradient scale, so near-zero gradients (fresh biases) make that rounding a
 * visible part of a step: hence the looser weight bound, far below one step (lr ~1e-3). */
#include "runtime/reference/reference.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

bool pipe_trainer_run(const PipePlan *p, const PipeOptions *o, PipeRule r, int64_t first, PipeOutcome *out, char *err,
                      size_t errlen) {
  memset(out, 0, sizeof *out);
  if (r == PIPE_RULE_STAGE_DELAY) {
    snprintf(err, errlen, "the one-stage reference has no %s rule", pipe_rule_name(r));
    return false;
  }
  char *dir = io_join(p->rt->dir, "reference");
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
  rp->delayed = r == PIPE_RULE_DELAYED;
  rp->train.steps = p->rt->train.steps;
  /* PLAN/reference is a gpipe plan, which cannot hold 2bw's compensation: the pipeline's */
  rp->train.delay_comp = rp->delayed ? p->rt->train.delay_comp : 0;
  rp->train.flush_steps = rp->delayed ? p->rt->train.flush_steps : 0; /* and its other 2bw settings */
  rp->train.predict = rp->delayed ? p->rt->train.predict : 0;
  TrainerOptions to = {.seed = o->seed, .seed_set = o->seed_set, .data_path = o->data_path};
  if (ok) ok = (t = trainer_create(rp, &to, err, errlen)) != NULL;
  if (ok && o->init_path) ok = trainer_init_from(t, o->init_path, err, errlen);
  if (ok && o->resume_path) ok = trainer_resume(t, o->resume_path, err, errlen);
  const RtStage *st = &rp->stages[0];
  if (ok)
    ok = pipe_data_open(o, pipe_vocab(rp), rp->b * rp->m, pipe_window(rp), o->seed_set ? o->seed : rp->train.seed, &df, &dl, err,
                        errlen);
  if (ok) {
    int64_t nb = o->steps - first;
    out->first_step = first;
    out->steps = o->steps;
    out->mb_per_step = rp->m;
    out->mb_loss = pd_calloc((size_t)(nb * rp->m + 1), sizeof(double));
    out->step_loss = pd_calloc((size_t)nb + 1, sizeof(double));
    for (int64_t s = 0; ok && s < nb; s++) {
      StepStats ss;
      trainer_step(t, dl, &ss);
      if (ss.error) {
        snprintf(err, errlen, "the reference: %s", ss.error);
        ok = false;
        break;
      }
      memcpy(out->mb_loss + s * rp->m, ss.mb_loss, (size_t)rp->m * sizeof(double));
      out->step_loss[s] = ss.loss;
    }
  }
  if (ok) {
    const float *w = trainer_params(t);
    out->nparams = st->nparams;
    out->names = pd_calloc((size_t)st->nparams + 1, sizeof(char *));
    out->numel = pd_calloc((size_t)st->nparams + 1, sizeof(int64_t));
    out->weights = pd_calloc((size_t)st->nparams + 1, sizeof(float *));
    for (int k = 0; k < st->nparams; k++) {
      const RtParam *q = &st->params[k];
      out->names[k] = pd_strdup(q->name);
      out->numel[k] = q->numel;
      out->weights[k] = pd_malloc((size_t)q->bytes + 4);
      memcpy(out->weights[k], (const char *)w + q->offset, (size_t)q->bytes);
    }
  }
  data_loader_destroy(dl);
  if (df) data_close(df);
  trainer_destroy(t);
  rt_plan_free(rp);
  return ok;
}

/* max_i |a_i - b_i| / max(max_i |b_i|, 1e-2); NaN anywhere counts as infinitely far. */
static double weight_diff(const float *a, const float *b, int64_t n) {
  double mx = 0, md = 0;
  for (int64_t i = 0; i < n; i++) {
    double d = fabs((double)a[i] - b[i]);
    if (fabs(b[i]) > mx) mx = fabs(b[i]);
    if (d > md || d != d) md = d;
  }
  return md / (mx > 1e-2 ? mx : 1e-2);
}

bool pipe_outcome_compare(const PipeOutcome *got, const PipeOutcome *ref, double tol, FILE *out, char *err,
                          size_t errlen) {
  if (got->first_step != ref->first_step || got->steps != ref->steps || got->mb_per_step != ref->mb_per_step) {
    snprintf(err, errlen, "--reference: the reference ran steps [%lld, %lld) x %lld microbatches, the pipeline "
             "[%lld, %lld) x %lld", (long long)ref->first_step, (long long)ref->steps, (long long)ref->mb_per_step,
             (long long)got->first_step, (long long)got->steps, (long long)got->mb_per_step);
    return false;
  }
  double worst_loss = 0, worst_w = 0;
  const char *worst_name = "-";
  int64_t worst_step = -1;
  for (int64_t s = got->first_step; s < got->steps; s++) {
    /* every microbatch's loss, in the reference's order */
    double step_worst = 0;
    for (int64_t j = 0; j < got->mb_per_step; j++) {
      int64_t at = (s - got->first_step) * got->mb_per_step + j;
      double a = got->mb_loss[at], b = ref->mb_loss[at];
      double rel = fabs(a - b) / (fabs(b) > 1 ? fabs(b) : 1);
      if (!(rel <= step_worst)) step_worst = rel;
    }
    if (!(step_worst <= worst_loss) || worst_step < 0) worst_loss = step_worst, worst_step = s;
    fprintf(out, "  step %lld: loss %.7f (pipeline) %.7f (reference), worst microbatch rel. diff %.2e\n",
            (long long)s + 1, got->step_loss[s - got->first_step], ref->step_loss[s - got->first_step], step_worst);
  }
  /* every tensor of the reference against every copy of it in got (a tied parameter
   * may be held once per stage on either side) */
  for (int k = 0; k < ref->nparams; k++) {
    int found = 0;
    for (int j = 0; j < got->nparams; j++) {
      if (strcmp(got->names[j], ref->names[k]) != 0) continue;
      if (got->numel[j] != ref->numel[k]) break;
      found++;
      double rel = weight_diff(got->weights[j], ref->weights[k], ref->numel[k]);
      if (rel > 10 * tol || rel != rel) fprintf(out, "  weight %s: rel. diff %.2e\n", ref->names[k], rel);
      if (rel > worst_w || rel != rel) {
        worst_w = rel;
        worst_name = ref->names[k];
      }
    }
    if (!found) {
      snprintf(err, errlen, "--reference: parameter '%s' is missing or has another size in the pipeline",
               ref->names[k]);
      return false;
    }
  }
  bool match = worst_loss <= tol && worst_w <= 10 * tol;
  fprintf(out, "reference: worst microbatch loss rel. diff %.2e (step %lld, bound %.0e), worst weight rel. diff %.2e "
          "(%s, bound %.0e): %s\n", worst_loss, (long long)worst_step + 1, tol, worst_w, worst_name, 10 * tol,
          match ? "MATCH" : "DIFFER");
  if (!match)
    snprintf(err, errlen, "--reference: the pipeline differs from the sequential reference (loss %.2e, weight "
             "%.2e in %s; bounds %.0e, %.0e)", worst_loss, worst_w, worst_name, tol, 10 * tol);
  return match;
}

bool pipeline_check_reference(const PipePlan *p, const PipeOptions *o, const PipeOutcome *got, double tol, FILE *out,
                              char *err, size_t errlen) {
  PipeRule r = pipe_rule_of(p->schedule);
  PipeOutcome ref;
  bool ok;
  if (r == PIPE_RULE_STAGE_DELAY) {
    if (o->resume_path || got->first_step > 0) {
      snprintf(err, errlen, "--reference cannot check a resumed pipedream run: its sequential executor starts "
               "from the initial weights (a checkpoint lacks the versions the stages still read)");
      return false;
    }
    ok = pipe_seq_run(p, o, r, &ref, err, errlen);
    if (ok)
      fprintf(out, "reference: sequential multi-stage executor (%d stages on one thread), %s rule, %lld "
              "microbatches of %lld per step\n", p->d, pipe_rule_name(r), (long long)ref.mb_per_step,
              (long long)p->b);
  } else {
    ok = pipe_trainer_run(p, o, r, got->first_step, &ref, err, errlen);
    if (ok)
      fprintf(out, "reference: sequential executor, %s rule, %lld microbatches of %lld per step\n", pipe_rule_name(r),
              (long long)ref.mb_per_step, (long long)p->b);
  }
  ok = ok && pipe_outcome_compare(got, &ref, tol, out, err, errlen);
  pipe_outcome_free(&ref);
  return ok;
}
