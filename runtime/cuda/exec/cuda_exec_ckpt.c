/* runtime/cuda/exec/cuda_exec_ckpt.c — checkpoints of the one-stage GPU trainer (cuda_exec.h).
 *
 * The format is the CPU trainer's, written and read by the same code (runtime.h
 * rt_ckpt_save / rt_ckpt_resume / rt_ckpt_init): the device blocks (newest weights,
 * AdamW m and v, for 2bw the older version) are copied into host blocks of the params
 * block's layout, which those functions take. So a GPU checkpoint resumes on the CPU
 * (one-stage or pipelined: names do not depend on the partition) and the other way
 * round, and a failed read leaves the device untouched (the host copies go up only
 * when the whole file was read). */
#include "runtime/cuda/exec/cuda_exec.h"

#include <stdlib.h>

/* Host blocks for t's state (prev only for 2bw); one allocation, freed with free(b->params). */
static RtCkptBlocks host_blocks(const CxTrainerState *s) {
  size_t pb = (size_t)s->plan->stages[0].blocks[BUF_PARAMS];
  char *mem = pd_calloc(4 * pb + 1, 1);
  return (RtCkptBlocks){.plan = s->plan, .st = &s->plan->stages[0], .params = mem, .opt_m = mem + pb,
                        .opt_v = mem + 2 * pb, .prev = s->prev ? mem + 3 * pb : NULL};
}

/* Copies the device state into b (to_host) or b onto the device. */
static void transfer(const CxTrainerState *s, const RtCkptBlocks *b, bool to_host) {
  size_t pb = (size_t)s->plan->stages[0].blocks[BUF_PARAMS];
  CxPtr dev[4] = {s->params, s->adam_m, s->adam_v, s->prev};
  char *host[4] = {b->params, b->opt_m, b->opt_v, b->prev};
  for (int q = 0; q < 4; q++) {
    if (!host[q]) continue;
    if (to_host) s->ops->dtoh(s->ops->dev, host[q], dev[q], pb);
    else s->ops->htod(s->ops->dev, dev[q], host[q], pb);
  }
}

bool cx_trainer_save(CxTrainer *t, const char *path, char *err, size_t errlen) {
  CxTrainerState s = cx_trainer_state(t);
  RtCkptBlocks b = host_blocks(&s);
  transfer(&s, &b, true);
  bool ok = rt_ckpt_save(&b, s.step, s.seed, path, err, errlen);
  free(b.params);
  return ok;
}

bool cx_trainer_resume(CxTrainer *t, const char *path, char *err, size_t errlen) {
  CxTrainerState s = cx_trainer_state(t);
  RtCkptBlocks b = host_blocks(&s);
  int64_t step = s.step;
  uint64_t seed = s.seed;
  bool ok = rt_ckpt_resume(&b, path, &step, &seed, err, errlen);
  if (ok) {
    transfer(&s, &b, false);
    cx_trainer_weights_loaded(t);
    cx_trainer_set_position(t, step, seed);
  }
  free(b.params);
  return ok;
}

bool cx_trainer_init_from(CxTrainer *t, const char *path, char *err, size_t errlen) {
  CxTrainerState s = cx_trainer_state(t);
  RtCkptBlocks b = host_blocks(&s);
  b.opt_m = b.opt_v = NULL; /* the optimizer state stays zero */
  bool ok = rt_ckpt_init(&b, path, err, errlen);
  if (ok) {
    transfer(&s, &b, false);
    cx_trainer_weights_loaded(t);
  }
  free(b.params);
  return ok;
}
