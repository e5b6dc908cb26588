/* codegen/cgen_c_entry.c — the exported entry points of a stage's C program
 * (codegen/codegen.h, "The ABI"; the program's layout: cgen_c.c).
 *
 * Segment k of the stage is its k-th region. pd2bw_stage_forward_segment(ctx, k) and
 * pd2bw_stage_backward_segment(ctx, k) run that region's forward or backward function
 * (nothing for a region without one), and the whole-pass entry points are those calls
 * in order, forward k = 0 .. n-1 and backward k = n-1 .. 0. So a pass timed segment by
 * segment (pd2bwrun --profile-out, runtime/exec/exec_cpu.c) runs the very functions a
 * whole pass runs, in the same order: the same bits. */
#include "codegen/cgen_internal.h"

#include <stdio.h>

void cgen_c_region_fn(char *b, size_t n, const char *dir, int k) { snprintf(b, n, "%s_region%d", dir, k); }

void cgen_c_entries(Str *s, int nseg, const bool *has_fwd, const bool *has_bwd, bool f64) {
  str_printf(s, "\n/* ==== entry points ==== */\n"
                "int pd2bw_stage_abi(void) { return %d; }\n"
                "int pd2bw_stage_real_bytes(void) { return %d; }\n"
                "int pd2bw_stage_segments(void) { return %d; }\n",
             PD2BW_STAGE_ABI, f64 ? 8 : 4, nseg);
  char fn[64];
  for (int pass = 0; pass < 2; pass++) {
    const char *dir = pass ? "bwd" : "fwd", *name = pass ? "backward" : "forward";
    str_printf(s, "\nvoid pd2bw_stage_%s_segment(StageCtx *ctx, int k) {\n"
                  "  pk_set_sgemm((pk_sgemm_fn)ctx->sgemm);\n  switch (k) {\n", name);
    for (int k = 0; k < nseg; k++)
      if ((pass ? has_bwd : has_fwd)[k]) {
        cgen_c_region_fn(fn, sizeof fn, dir, k);
        str_printf(s, "  case %d: %s(ctx); break;\n", k, fn);
      }
    str_printf(s, "  default: break;\n  }\n}\n");
  }
  str_printf(s, "\nvoid pd2bw_stage_forward(StageCtx *ctx) {\n"
                "  for (int k = 0; k < %d; k++) pd2bw_stage_forward_segment(ctx, k);\n}\n\n"
                "void pd2bw_stage_backward(StageCtx *ctx) {\n"
                "  for (int k = %d; k >= 0; k--) pd2bw_stage_backward_segment(ctx, k);\n}\n",
             nseg, nseg - 1);
}
