/* A synthetic GPT for planner tests: prologue (positions; the token embedding is
 * tied with the LM head in the epilogue), L identical blocks, epilogue (final norm,
 * LM head, loss). Per-sample sizes follow the usual transformer counts. */
#ifndef PLANNER_GPT_INPUT_H
#define PLANNER_GPT_INPUT_H

#include <stdio.h>

#include "passes/planner.h"

static inline void gpt_input(PlanInput *in, int L, double C, double T, double V, double H,
                             int64_t batch) {
  plan_input_init(in, "gpt");
  in->batch = batch;
  in->input_bytes = T * 8;
  PlanSegment *s = plan_input_add_segment(in, "prologue");
  s->params = (int64_t)(T * C);
  s->fwd_flops = 2 * T * C, s->fwd_bytes = 3 * T * C * 4;
  s->bwd_flops = 2 * s->fwd_flops, s->bwd_bytes = 2 * s->fwd_bytes;
  s->out_bytes = T * C * 4, s->stash_bytes = T * 8, s->workspace_bytes = T * C * 4;
  for (int l = 0; l < L; l++) {
    char name[32];
    snprintf(name, sizeof name, "h.%d", l);
    s = plan_input_add_segment(in, name);
    s->params = (int64_t)(12 * C * C + 13 * C);
    s->fwd_flops = 24 * T * C * C + 4 * T * T * C;
    s->fwd_bytes = 12 * C * C * 4 + 16 * T * C * 4;
    s->bwd_flops = 2 * s->fwd_flops, s->bwd_bytes = 2 * s->fwd_bytes;
    s->out_bytes = T * C * 4;
    s->stash_bytes = (34 * T * C + 5 * H * T * T) * 2;
    s->workspace_bytes = 4 * T * C * 4 + H * T * T * 4;
  }
  s = plan_input_add_segment(in, "epilogue");
  s->params = (int64_t)(2 * C);
  s->fwd_flops = 2 * T * C * V + 5 * T * V, s->fwd_bytes = V * C * 4 + 3 * T * V * 4;
  s->bwd_flops = 2 * s->fwd_flops, s->bwd_bytes = 2 * s->fwd_bytes;
  s->out_bytes = 0, s->stash_bytes = T * V * 4 + T * C * 4, s->workspace_bytes = T * V * 4;
  int tied[2] = {0, L + 1};
  plan_input_add_tied(in, "wte", (int64_t)(V * C), tied, 2);
}

static inline Cluster test_cluster(int nodes, int dpn, double mem_gib) {
  Cluster c = {0};
  c.name = "test";
  c.nodes = nodes, c.devices_per_node = dpn;
  c.device = "test";
  c.memory_bytes = mem_gib * 1024.0 * 1024.0 * 1024.0;
  c.flops = 100e12, c.mem_bandwidth = 2e12;
  c.intra_bandwidth = 150e9, c.inter_bandwidth = 25e9;
  return c;
}

#endif
