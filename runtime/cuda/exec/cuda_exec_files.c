/* runtime/cuda/exec/cuda_exec_files.c — the files a stage's launch list comes with
 * (cuda_exec.h, "the launch list's files"): plan.json's program.cuda names the stage's
 * list (stages with the same program share one) and its rng_base, and each source the
 * list names is read and checked against the hash the list records, before anything
 * is compiled; and the loaded library checked for the kernels the executor launches
 * itself. cx_program_load (cuda_exec_list.c) reads the list's content. */
#include "runtime/cuda/exec/cuda_exec.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

char *cx_read_checked(const char *plan_dir, const char *name, const char *want, const char *lpath, char *err,
                      size_t errlen) {
  char *path = io_join(plan_dir, name);
  size_t len = 0;
  char *src = io_read_all(path, &len, err, errlen);
  if (src) {
    char h[17];
    codegen_hash_hex(src, len, h);
    if (strcmp(h, want) != 0) {
      snprintf(err, errlen, "%s: its hash %s is not the launch list's %s (%s): the plan was edited or mixed", path, h,
               want, lpath);
      free(src);
      src = NULL;
    }
  }
  free(path);
  return src;
}

bool cx_stage_files(const char *plan_dir, int stage, char *lname, size_t lsize, uint32_t *rng_base, char *err,
                    size_t errlen) {
  char *path = io_join(plan_dir, "plan.json");
  cJSON *plan = io_read_json_object(path, "", err, errlen);
  if (!plan) { /* err says why */
    free(path);
    return false;
  }
  const cJSON *st = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(plan, "stages"), stage);
  const cJSON *cuda = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(st, "program"), "cuda");
  const cJSON *ln = cJSON_GetObjectItemCaseSensitive(cuda, "launch_list");
  const cJSON *rb = cJSON_GetObjectItemCaseSensitive(cuda, "rng_base");
  bool ok = false;
  if (!cuda) {
    snprintf(err, errlen, "%s: stage %d has no CUDA program (a plan made with pd2bwc --backend cpu has none)", path,
             stage);
  } else if (!cJSON_IsString(ln) || strchr(ln->valuestring, '/') || strlen(ln->valuestring) >= lsize ||
             !cJSON_IsNumber(rb) || rb->valuedouble < 0 || rb->valuedouble > UINT32_MAX) {
    snprintf(err, errlen,
             "%s: stage %d's program.cuda lacks a launch_list file name or an rng_base (a plan from an older pd2bwc, "
             "whose stages each had their own launch list); regenerate the plan with this pd2bwc",
             path, stage);
  } else {
    snprintf(lname, lsize, "%s", ln->valuestring);
    *rng_base = (uint32_t)rb->valuedouble;
    ok = true;
  }
  cJSON_Delete(plan);
  free(path);
  return ok;
}

bool cx_library_complete(const CudaDeviceOps *ops, void *module, const char *plan_dir, void **out, char *err,
                         size_t errlen) {
  static const char *const own[CX_NLIB_KERNELS] = {
      [CX_K_SET_U32] = "pkc_set_u32", [CX_K_SUMSQ_PARTIAL] = "pkc_sumsq_partial_f32",
      [CX_K_SUMSQ_FINAL] = "pkc_sumsq_final_f32", [CX_K_COPY] = "pkc_copy_f32",
      [CX_K_ADAMW_DEV] = "pkc_adamw_step_dev_f32", [CX_K_SGD_DEV] = "pkc_sgd_step_dev_f32",
      [CX_K_SUM_ORDERED] = "pkc_sum_ordered_f32", [CX_K_CAST_BF16] = "pkc_cast_f32_to_bf16",
      [CX_K_ADAMW_MULTI] = "pkc_adamw_multi_dev_f32", [CX_K_PREDICT_DEV] = "pkc_predict_step_dev_f32"};
  for (size_t k = 0; k < sizeof own / sizeof *own; k++)
    if (!(out[k] = ops->kernel(ops->dev, module, own[k]))) {
      snprintf(err, errlen, "%s: %s has no %s (a plan from an older pd2bwc): regenerate the plan with this pd2bwc",
               plan_dir, CODEGEN_CUDA_LIBRARY, own[k]);
      return false;
    }
  return true;
}
