/* runtime/cuda/exec/cuda_exec_epilogue.h — a launch-list GEMM's epilogue, loaded and
 * resolved for a replay (private to runtime/cuda/exec/: cuda_exec_list.c's loader and
 * replay call these; the format is contract/contract.h's GemmEpilogue). */
#ifndef PD2BW_CUDA_EXEC_EPILOGUE_H
#define PD2BW_CUDA_EXEC_EPILOGUE_H

#include <cjson/cJSON.h>

#include "runtime/cuda/exec/cuda_exec.h"

/* The epilogue as loaded: its vectors as (block, offset), block -1 when absent. */
typedef struct CxEpiRef {
  GemmEpilogue kind;
  int biasblk, auxblk, bias_acc, ldaux;
  int64_t biasoff, auxoff;
} CxEpiRef;

/* The block a launch list's "buf" names (cuda_exec_list.c), or -1. */
int cx_block_of(const char *name);

/* Loads the "epilogue" of GEMM entry gm (C[M,N], B not transposed when !tb, leading
 * dimensions ldb and ldc, beta, bf16 operands) into out, against the blocks' sizes
 * (block[CX_NBLOCKS]). NULL, or what is wrong (a constant string). */
const char *cx_epilogue_load(const cJSON *gm, int M, int N, int tb, int ldb, int ldc, float beta, bool bf16,
                             const int64_t *block, CxEpiRef *out);

/* The epilogue at the replay's block bases (kind GEMM_EPI_NONE when the GEMM has none). */
GpuEpilogue cx_epilogue_at(const CxEpiRef *r, const GpuPtr *base);

#endif
