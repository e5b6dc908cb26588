/* runtime/pipeline/pipeline_data.c — a rank's token files: which ids the model allows
 * and the loader of its batches, shared by the pipeline, its sequential references and
 * validation (pipeline_eval.c). Contracts: pipeline_rank.h. */
#include "runtime/pipeline/pipeline_rank.h"

#include <cjson/cJSON.h>
#include <string.h>

int64_t pipe_vocab(const RtPlan *rt) {
  cJSON *consts = cJSON_Parse(rt->model_consts ? rt->model_consts : "{}");
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(consts, "vocab");
  int64_t vocab = cJSON_IsNumber(v) && v->valuedouble >= 1 && v->valuedouble == (double)(int64_t)v->valuedouble
                      ? (int64_t)v->valuedouble
                      : 0;
  cJSON_Delete(consts);
  if (vocab) return vocab;
  for (int s = 0; s < rt->nstages; s++)
    for (int k = 0; k < rt->stages[s].nparams; k++)
      if (strcmp(rt->stages[s].params[k].name, "wte") == 0 || strcmp(rt->stages[s].params[k].name, "embed") == 0)
        vocab = rt->stages[s].params[k].shape[0];
  return vocab;
}

bool pipe_data_open(const PipeOptions *o, int64_t vocab, int64_t B, int T, uint64_t seed, DataFile **df,
                    DataLoader **dl, char *err, size_t errlen) {
  char ierr[IO_ERR_LEN];
  *dl = NULL;
  *df = data_open(o->data_path, DATA_AUTO, vocab, ierr, sizeof ierr);
  if (!*df || !(*dl = data_loader_create(*df, (int)B, T, o->shuffle, seed, ierr, sizeof ierr))) {
    snprintf(err, errlen, "%s", ierr);
    return false;
  }
  return true;
}
