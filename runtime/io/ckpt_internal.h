/* runtime/io/ckpt_internal.h — what the checkpoint importers share: GPT-2's and llm.c's
 * (ckpt_import.c) and Hugging Face Llama directories' (ckpt_llama.c). Each maps a
 * pd2bw parameter to a source tensor described in pd2bw's orientation and hands it
 * to the one copy, ckpt_copy. */
#ifndef PD2BW_RUNTIME_IO_CKPT_INTERNAL_H
#define PD2BW_RUNTIME_IO_CKPT_INTERNAL_H

#include "runtime/io/io.h"

/* A source tensor in pd2bw orientation: element (r, c) of the [rows, cols] matrix
 * the model wants is data[r·rs + c·cs] (a transposing source: rs = 1, cs = rows of
 * the stored [out, in]); `data` holds float32 (converted). */
typedef struct CkptSrc {
  char desc[300]; /* where it came from, for messages */
  int rank;
  int64_t rows, cols; /* rank 1: rows = 1 */
  int64_t rs, cs;
  const float *data;
  int64_t min_rows; /* CKPT_ROWS_VOCAB: the real vocabulary the model must cover */
} CkptSrc;

/* How the model's rows may differ from the source's. */
typedef enum CkptRows {
  CKPT_ROWS_EXACT,
  CKPT_ROWS_VOCAB,  /* a padded vocabulary: at least min_rows; extra rows zero */
  CKPT_ROWS_PREFIX, /* a shorter context: the first rows */
} CkptRows;

/* A parameter name's part after "h.<i>." with *layer = i (0..1000000), or the whole name
 * with *layer = -1 when it has no "h." prefix; NULL when that prefix is malformed. */
const char *ckpt_layer_suffix(const char *name, int *layer);

/* Copies s into p->dst, checking shapes (an error names both) and finiteness. */
bool ckpt_copy(const CkptParam *p, CkptRows rule, const CkptSrc *s, const char *path, char *err,
               size_t errlen);

/* Reads tensor t of st (`name` there) for parameter p into *buf (grown) and describes
 * it in *s in pd2bw orientation (transposed: a rank-2 tensor stored [out, in]); false
 * with a message when its rank is not `rank` (both shapes named) or it cannot be read. */
bool ckpt_src_read(const SafeTensors *st, const StTensor *t, const char *name, const CkptParam *p, int rank,
                   bool transposed, float **buf, CkptSrc *s, char *err, size_t errlen);

/* A Hugging Face Llama directory (ckpt_llama.c): config.json (cfg, parsed from cfg_path
 * by the caller) checked against the parameters, model.safetensors or the shards its
 * index names. */
bool ckpt_import_llama_dir(const char *dir, const char *cfg_path, const struct cJSON *cfg, const CkptParam *params,
                           int n, const char *consts_json, char *err, size_t errlen);

#endif /* PD2BW_RUNTIME_IO_CKPT_INTERNAL_H */
