/* tests/codegen/gpt_dropout.h — the tiny GPT of tests/ir/build_models.h with the
 * paper's dropouts (after the embeddings, on both residual branches, on the attention
 * probabilities), so the generated program's RNG paths are exercised. */
#ifndef PD2BW_TEST_GPT_DROPOUT_H
#define PD2BW_TEST_GPT_DROPOUT_H

#include "build_models.h"

static Graph *build_gpt_dropout(Arena *a, Diag *d, int V, int T, int C, int H, int L, double p) {
  return build_gpt(a, d, "gptdrop", V, T, C, H, L, p);
}

#endif
