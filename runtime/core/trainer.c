/* runtime/core/trainer.c — what every executor shares about a model's parameters: their
 * deterministic initial values, the learning rate of a step, and a checkpoint's
 * metadata and seed (the format itself is written by runtime/pipeline pipe_save).
 * The one-stage trainer itself is a d = 1, w = 1 plan run by the interpreter
 * (runtime/pipeline/pipeline_one.c). */
#include "runtime/core/runtime.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu_kernels.h"

#define ERR(...) (snprintf(err, errlen, __VA_ARGS__), false)

/* ---- parameters ---------------------------------------------------------------- */

void rt_init_param(float *w, const RtParam *p, uint64_t seed) {
  if (p->init != INIT_NORMAL) {
    float v = p->init == INIT_ONES ? 1.0f : 0.0f;
    for (int64_t i = 0; i < p->numel; i++) w[i] = v;
    return;
  }
  uint64_t h = contract_fnv1a(CONTRACT_FNV_BASIS, p->name, strlen(p->name));
  /* Counter words 2 and 3 hold the name's hash; words 0-1 the pair index. One block
   * of four draws makes two normals (Box-Muller, u1 in (0,1], u2 in [0,1)). */
  int64_t npairs = (p->numel + 1) / 2;
  PK_OMP(omp parallel for schedule(static) if (npairs >= PK_PAR_MIN))
  for (int64_t k = 0; k < npairs; k++) {
    int64_t i = 2 * k;
    PhiloxCtr r = pk_rng_block(seed, (uint32_t)(h >> 32), (uint32_t)h, (uint64_t)k);
    double u1 = ((double)r.v[0] + 1.0) / 4294967296.0, u2 = (double)r.v[1] / 4294967296.0;
    double rad = sqrt(-2.0 * log(u1)), th = 6.283185307179586 * u2;
    w[i] = (float)(p->std * rad * cos(th));
    if (i + 1 < p->numel) w[i + 1] = (float)(p->std * rad * sin(th));
  }
}

/* ---- the learning rate -------------------------------------------------------------- */

bool rt_loss_ok(double loss, int64_t s, char *msg, size_t n) {
  if (isfinite(loss)) return true;
  snprintf(msg, n, "the loss is %g at step %lld: training diverged (lower the learning rate?)", loss, (long long)s + 1);
  return false;
}

double rt_lr_at(const TrainConfig *c, int64_t s) {
  if (c->schedule == LR_CONSTANT) return c->lr;
  if (c->warmup > 0 && s < c->warmup) return c->lr * (double)(s + 1) / (double)c->warmup;
  int64_t span = c->steps - c->warmup;
  double prog = span > 0 ? (double)(s - c->warmup) / (double)span : 1.0;
  if (prog > 1) prog = 1;
  if (c->schedule == LR_COSINE) return c->min_lr + 0.5 * (1 + cos(M_PI * prog)) * (c->lr - c->min_lr);
  return c->lr - (c->lr - c->min_lr) * prog;
}

/* ---- checkpoints ------------------------------------------------------------------------ */

/* A metadata value that must be a decimal integer in [0, max]: strtoull saturates and
 * strtoll accepts signs and spaces, so the digits are checked here and an out-of-range
 * value is an error naming the key, never a clamped INT64_MAX. */
static bool meta_uint(const SafeTensors *s, const char *path, const char *key, uint64_t max, uint64_t *out,
                      char *err, size_t errlen) {
  const char *v = st_meta(s, key);
  if (!v) return ERR("%s: no '%s' in the metadata (not a pd2bw training checkpoint)", path, key);
  bool digits = *v != '\0';
  for (const char *c = v; *c && digits; c++) digits = *c >= '0' && *c <= '9';
  errno = 0;
  unsigned long long x = digits ? strtoull(v, NULL, 10) : 0;
  if (!digits || errno == ERANGE || x > max)
    return ERR("%s: metadata %s = \"%.40s\": must be an integer 0..%llu", path, key, v, (unsigned long long)max);
  *out = x;
  return true;
}

bool rt_ckpt_meta(const SafeTensors *s, const char *path, int64_t *step, uint64_t *seed, char *err, size_t errlen) {
  uint64_t x;
  if (!meta_uint(s, path, "step", RT_STEP_MAX, &x, err, errlen)) return false;
  *step = (int64_t)x;
  if (seed && st_meta(s, "seed") && !meta_uint(s, path, "seed", UINT64_MAX, seed, err, errlen)) return false;
  return true;
}

bool rt_run_seed(const char *resume_path, bool seed_set, uint64_t seed, uint64_t plan_seed, uint64_t *out, char *err,
                 size_t errlen) {
  *out = seed_set ? seed : plan_seed;
  if (seed_set || !resume_path) return true;
  SafeTensors *s = st_open(resume_path, err, errlen);
  if (!s) return false;
  int64_t step;
  bool ok = rt_ckpt_meta(s, resume_path, &step, out, err, errlen);
  st_close(s);
  return ok;
}

