/* make_test_plan — writes a one-stage plan of the tiny GPT (built through the IR
 * API) and a learnable token file, for pd2bwrun's command-line test:
 *     make_test_plan DIR TOKENS_FILE
 * vocab 32, seq 16, width 32, 2 heads, 2 layers; batch 8 = microbatch 4 x 2. */
#include "build_models.h"
#include "codegen/codegen.h"
#include "passes/passes.h"

#include <stdlib.h>

int main(int argc, char **argv) {
  (void)build_mlp;
  if (argc != 3) {
    fprintf(stderr, "usage: make_test_plan DIR TOKENS_FILE\n");
    return 2;
  }
  Arena *a = arena_create();
  Diag d;
  diag_init(&d, stderr);
  Graph *g = build_tiny_gpt(a, &d, 32, 16, 32, 2, 2);
  g->train = (TrainConfig){.batch = 8, .microbatch = 4, .optimizer = OPT_ADAMW, .lr = 3e-3, .beta1 = 0.9,
                           .beta2 = 0.99, .eps = 1e-8, .weight_decay = 0.1, .schedule = LR_COSINE,
                           .warmup = 2, .steps = 12, .min_lr = 3e-4, .clip = 1.0, .seed = 7};
  if (!pass_autodiff(g, &d) ||
      !codegen_single_stage_plan(g, 4, 2, &(CodegenOptions){.fuse = true}, argv[1], &d))
    return 1;
  FILE *f = fopen(argv[2], "wb");
  if (!f) return 1;
  uint16_t t = 1;
  uint32_t seed = 1;
  for (int i = 0; i < 3000; i++) {
    seed = seed * 1664525u + 1013904223u;
    t = (uint16_t)(i % 8 == 0 ? (seed >> 16) % 32u : (5u * t + 3) % 32u);
    fwrite(&t, 2, 1, f);
  }
  fclose(f);
  graph_destroy(g);
  arena_destroy(a);
  return 0;
}
