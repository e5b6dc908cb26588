/* runtime/pipeline/pipeline_weights.c — a rank's weights from host memory
 * (runtime/pipeline/pipeline_rank.h: pipe_rank_set_weights, pipe_rank_init_weights):
 * the arena is the device's (runtime/exec/exec.h upload), so the initial weights,
 * --init and --resume are made on the host and uploaded into every weight version. */
#include <stdlib.h>
#include <string.h>

#include "runtime/pipeline/pipeline_rank.h"

/* --resume: the checkpoint holds nothing but the plan's model (every stage's parameters,
 * their optimizer state and weight versions): extra layers are refused, not dropped. */
bool pipe_ckpt_exact(const PipePlan *p, const SafeTensors *s, char *err, size_t errlen) {
  int n = 0;
  for (int i = 0; i < p->d; i++) n += p->rt->stages[i].nparams;
  const char **names = pd_malloc(((size_t)n + 1) * sizeof *names);
  n = 0;
  for (int i = 0; i < p->d; i++)
    for (int k = 0; k < p->rt->stages[i].nparams; k++) names[n++] = p->rt->stages[i].params[k].name;
  bool ok = ckpt_check_extras(s, names, n, "this plan's model", err, errlen);
  free(names);
  return ok;
}

void pipe_rank_set_weights(PipeRank *R, const char *w, int newest, const char *prev, int prev_slot) {
  uint64_t pb = (uint64_t)R->st->blocks[BUF_PARAMS];
  for (int v = 0; v < R->nversions; v++)
    R->dev->ops->upload(R->dev, R->w[v], prev && v == prev_slot ? prev : w, pb);
  R->newest = newest;
}

void pipe_rank_init_weights(PipeRank *R) {
  char *w = pd_calloc((size_t)R->st->blocks[BUF_PARAMS] + 1, 1);
  for (int k = 0; k < R->st->nparams; k++)
    rt_init_param((float *)(void *)(w + R->st->params[k].offset), &R->st->params[k], R->tc.seed);
  pipe_rank_set_weights(R, w, 0, NULL, -1);
  free(w);
}
