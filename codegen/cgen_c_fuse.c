/* codegen/cgen_c_fuse.c — a C stage program's fused elementwise loops (CodegenOptions.fuse).
 *
 * A chain of elementwise ops — those whose ops.def row gives an element expression
 * (cgen_fusible: add with the same shape or a bias vector, mul, scale, gelu, relu,
 * dropout and dropout's backward) — where every intermediate has one consumer, is in
 * WORK and is not accumulated, becomes one loop; the intermediates are never stored.
 * Dropout inside a fused loop draws the same Philox element as the dropout kernel
 * (element e of the op's stream), so fused and unfused programs give the same bits of
 * mask. cgen_cuda_fuse.c fuses the same chains on the GPU. Kept apart from cgen_c.c
 * (one kernel call per op) because it writes loops, not calls.
 */
#include "codegen/cgen_c_internal.h"
#include "codegen/cgen_lower.h"

#include <stdio.h>

/* True when writing tensor `out` elementwise could clobber an element of `in` not
 * yet read: their bytes overlap but they do not start at the same place. */
static bool hazard(Emit *e, int out, int in) {
  const TensorPlace *a = &e->L->place[out], *b = &e->L->place[in];
  if (a->cls != b->cls) return false;
  bool disjoint = a->offset + a->bytes <= b->offset || b->offset + b->bytes <= a->offset;
  return !disjoint && !(a->offset == b->offset && a->bytes == b->bytes);
}

/* Collects into chain[] the ops, consecutive in the stage's order ops[k..], that
 * form one elementwise chain; returns its length (1: nothing to fuse). Only
 * consecutive ops fuse, so moving a computation never crosses another op and the
 * layout's liveness (computed for op order) stays valid. */
static int chain_from(Emit *e, const int *ops, int nops, int k, int *chain, int max) {
  const Graph *g = e->g;
  int n = 0;
  int64_t len = cc_numel(e, g->ops[ops[k]].out[0]);
  chain[n++] = ops[k];
  while (n < max && k + n < nops) {
    const Op *cur = &g->ops[chain[n - 1]];
    int t = cur->out[0];
    const TensorPlace *pl = &e->L->place[t];
    if (pl->cls != BUF_WORK || pl->accumulate || pl->alias >= 0 || t == g->loss) break;
    int c = ops[k + n];
    if (cgen_sole_consumer(e->g, e->L, t) != c || e->done[c] || g->ops[c].region != cur->region) break;
    const Op *nx = &g->ops[c];
    if (!cgen_fusible(g, nx) || cc_numel(e, nx->out[0]) != len || cc_acc(e, nx->out[0])) break;
    if (cgen_needs_upcast(e->L, nx)) break; /* its upcast goes before it, not before the loop */
    if (nx->nin == 2) {
      if (nx->in[0] == nx->in[1]) break;
      /* a bias vector is indexed i % N: the chained value must be the full operand */
      if (cc_numel(e, nx->in[0] == t ? nx->in[0] : nx->in[1]) != len) break;
    }
    chain[n++] = c;
  }
  /* Drop ops from the end until the final output clobbers no operand still read. */
  while (n > 1) {
    int out = g->ops[chain[n - 1]].out[0];
    bool bad = false;
    for (int i = 0; i < n && !bad; i++) {
      const Op *op = &g->ops[chain[i]];
      for (int j = 0; j < op->nin && !bad; j++) {
        int x = op->in[j];
        bool internal = i > 0 && x == g->ops[chain[i - 1]].out[0];
        if (!internal && hazard(e, out, x)) bad = true;
      }
    }
    if (!bad) break;
    n--;
  }
  return n;
}

/* Value expression of operand t at element i (a bias vector is indexed i % N). */
static void operand(Emit *e, char *b, size_t n, int t, int64_t len) {
  if (cc_numel(e, t) != len)
    snprintf(b, n, "%s[i %% %lld]", cc_ptr(e, t), (long long)cc_numel(e, t));
  else
    snprintf(b, n, "%s[i]", cc_ptr(e, t));
}

static void emit_fused(Emit *e, const int *chain, int n) {
  const Graph *g = e->g;
  Str *s = e->s;
  int64_t len = cc_numel(e, g->ops[chain[0]].out[0]);
  int out = g->ops[chain[n - 1]].out[0];
  str_printf(s, "  /* fused:");
  for (int k = 0; k < n; k++) str_printf(s, " %s(op %d)", op_info[g->ops[chain[k]].kind].name, chain[k]);
  str_printf(s, " -> %s */\n  {\n", g->tensors[out].name);
  bool any_rng = false;
  for (int k = 0; k < n; k++) {
    const Op *op = &g->ops[chain[k]];
    if (op_masks_elements(op)) {
      any_rng = true;
      str_printf(s, "    const uint64_t thr%d = pk_rng_threshold(%s);\n", k, cc_pexpr(e, op_rng_p(op)));
      str_printf(s, "    const R ks%d = thr%d ? (R)(1.0 / (1.0 - %.17g)) : (R)1;\n", k, k, op_rng_p(op));
    }
  }
  str_printf(s, "    R *const y = %s;\n", cc_ptr(e, out));
  str_printf(s, "    PK_OMP(omp parallel for schedule(static) if (%lld >= PK_PAR_MIN))\n", (long long)len);
  if (any_rng) {
    /* Blocks of four elements: one Philox call gives the four draws (philox.h). */
    str_printf(s, "    for (int64_t blk = 0; blk < %lld; blk++) {\n", (long long)((len + 3) / 4));
    for (int k = 0; k < n; k++) {
      const Op *op = &g->ops[chain[k]];
      if (op_masks_elements(op))
        str_printf(s,
                   "      const PhiloxCtr r%d = thr%d ? pk_rng_block(ctx->seed, ctx->rng_base + %du, ctx->microbatch,\n"
                   "                                                 (uint64_t)blk)\n"
                   "                                 : (PhiloxCtr){{0, 0, 0, 0}};\n",
                   k, k, op_rng_stream(op) - e->rng_base);
    }
    str_printf(s, "      for (int j = 0; j < 4 && blk * 4 + j < %lld; j++) {\n        const int64_t i = blk * 4 + j;\n",
               (long long)len);
  } else {
    str_printf(s, "    for (int64_t i = 0; i < %lld; i++) {\n", (long long)len);
  }
  int prev = -1;
  for (int k = 0; k < n; k++) {
    const Op *op = &g->ops[chain[k]];
    char a[160];
    if (k == 0) {
      operand(e, a, sizeof a, op->in[0], len);
    } else {
      snprintf(a, sizeof a, "v%d", prev);
    }
    char other[160];
    if (op->nin == 2) { /* the operand that is not the chained value */
      int oth = k > 0 && op->in[0] == g->ops[chain[k - 1]].out[0] ? op->in[1] : k > 0 ? op->in[0] : op->in[1];
      operand(e, other, sizeof other, oth, len);
    }
    str_printf(s, "%sconst R v%d = ", any_rng ? "        " : "      ", k);
    if (op_masks_elements(op)) { /* the backward replays its forward's stream (r%d drawn above) */
      str_printf(s, "(uint64_t)r%d.v[j] >= thr%d ? ", k, k);
      cgen_elem_print(s, CGEN_C, op, a, op->nin == 2 ? other : NULL);
      str_printf(s, " * ks%d : (R)0", k);
    } else {
      cgen_elem_print(s, CGEN_C, op, a, op->nin == 2 ? other : NULL);
    }
    str_printf(s, ";\n");
    prev = k;
  }
  if (any_rng)
    str_printf(s, "        y[i] = v%d;\n      }\n    }\n  }\n", prev);
  else
    str_printf(s, "      y[i] = v%d;\n    }\n  }\n", prev);
}

int cc_fuse_from(Emit *e, const int *ops, int nops, int k) {
  const Op *op = &e->g->ops[ops[k]];
  if (!e->o->fuse || !cgen_fusible(e->g, op) || cc_acc(e, op->out[0])) return 0;
  int chain[16];
  int n = chain_from(e, ops, nops, k, chain, 16);
  if (n < 2) return 0;
  for (int i = 0; i < n; i++) e->done[chain[i]] = true;
  emit_fused(e, chain, n);
  return n;
}
