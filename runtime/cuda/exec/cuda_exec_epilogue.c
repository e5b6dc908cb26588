/* runtime/cuda/exec/cuda_exec_epilogue.c — see cuda_exec_epilogue.h.
 *
 * The checks are what every device can run: the emulator replays an epilogue as the
 * unfused kernels (tests/cudaexec/emu_device.c), which want unpadded rows, and
 * cuBLASLt (runtime/cuda/cuda_lt.c) wants an aux leading dimension that is a multiple
 * of 8. So a damaged list is a message at load time, never a wild write. */
#include "runtime/cuda/exec/cuda_exec_epilogue.h"

#include <string.h>

/* A {"buf", "offset"} vector of `bytes` inside its block; false when not. */
static bool vec(const cJSON *o, int64_t bytes, const int64_t *block, int *blk, int64_t *off) {
  const cJSON *b = cJSON_GetObjectItemCaseSensitive(o, "buf"), *f = cJSON_GetObjectItemCaseSensitive(o, "offset");
  *blk = cJSON_IsString(b) ? cx_block_of(b->valuestring) : -1;
  *off = cJSON_IsNumber(f) ? (int64_t)f->valuedouble : -1;
  return *blk >= 0 && *off >= 0 && *off + bytes <= block[*blk];
}

const char *cx_epilogue_load(const cJSON *gm, int M, int N, int tb, int ldb, int ldc, float beta, bool bf16,
                             const int64_t *block, CxEpiRef *out) {
  memset(out, 0, sizeof *out);
  out->biasblk = out->auxblk = -1;
  const cJSON *k = cJSON_GetObjectItemCaseSensitive(gm, "epilogue");
  if (!k) return NULL;
  if (!cJSON_IsString(k) || !gemm_epilogue_parse(k->valuestring, &out->kind))
    return "GEMM epilogue is not none, bias, gelu_aux_bias, dgelu or bgradb";
  GemmEpilogue x = out->kind;
  if (x == GEMM_EPI_NONE) return NULL;
  bool bias = x == GEMM_EPI_BIAS || x == GEMM_EPI_GELU_AUX_BIAS || x == GEMM_EPI_BGRADB;
  bool aux = x == GEMM_EPI_GELU_AUX_BIAS || x == GEMM_EPI_DGELU;
  const cJSON *bo = cJSON_GetObjectItemCaseSensitive(gm, "bias"), *ao = cJSON_GetObjectItemCaseSensitive(gm, "aux");
  const cJSON *ld = cJSON_GetObjectItemCaseSensitive(gm, "ldaux"), *acc = cJSON_GetObjectItemCaseSensitive(gm, "bias_accumulate");
  out->ldaux = cJSON_IsNumber(ld) ? ld->valueint : 0;
  out->bias_acc = cJSON_IsNumber(acc) && acc->valueint != 0;
  if ((bias && !bo) || (aux && (!ao || out->ldaux != N || out->ldaux % 8)) || (x == GEMM_EPI_BGRADB && !acc))
    return "GEMM epilogue without its bias or aux, or aux rows padded (or not a multiple of 8: cuBLASLt)";
  if (bias && !vec(bo, (int64_t)N * 4, block, &out->biasblk, &out->biasoff))
    return "GEMM epilogue's bias outside the block";
  if (aux && !vec(ao, (int64_t)M * out->ldaux * 4, block, &out->auxblk, &out->auxoff))
    return "GEMM epilogue's aux outside the block";
  if (x == GEMM_EPI_BGRADB ? tb || ldb != N || bf16 : ldc != N || (x != GEMM_EPI_BIAS && beta != 0))
    return "GEMM epilogue on a padded, transposed, accumulating or bf16 operand it cannot take";
  return NULL;
}

GpuEpilogue cx_epilogue_at(const CxEpiRef *r, const GpuPtr *base) {
  return (GpuEpilogue){r->kind, r->biasblk < 0 ? 0 : base[r->biasblk] + (GpuPtr)r->biasoff, r->bias_acc,
                       r->auxblk < 0 ? 0 : base[r->auxblk] + (GpuPtr)r->auxoff, r->ldaux};
}
