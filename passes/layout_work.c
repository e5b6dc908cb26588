/* passes/layout_work.c — the layout's WORK block and bf16 storage (see layout.h).
 *
 * WORK is assigned by a linear scan over the stage's op order (forward ops, then
 * backward ops) with a first-fit free list: an op's outputs (and its kernel scratch)
 * are allocated before its dead inputs are released, so no kernel ever sees an output
 * overlapping an input it reads, except the in-place cases the layout chose (an
 * alias: cross-entropy backward writes dlogits over the logits when that is their
 * last use). In a bf16 layout each working place (layout_stage_bf16) is an interval of
 * the same scan: from its producer, or from the pass's first reader when the pass does
 * not produce it (codegen upcasts it there), to the pass's last reader. Nothing is live
 * in WORK from one pass to the other, so microbatches may interleave their passes as
 * before. The classifier's gradient kept in the stash (layout_classifier_grad) is the
 * exception: the backward gives neither it nor the logits a working place. */
#include "passes/layout_internal.h"

#include <stdlib.h>
#include <string.h>

/* ---- first-fit allocation over a sorted list of live intervals -------------------- */

typedef struct Live {
  int64_t off, size;
  int owner; /* tensor id, or -1 - op id for scratch, or a working place (work_owner) */
} Live;

typedef struct WorkAlloc {
  Live *v;
  int n, cap;
  int64_t peak;
} WorkAlloc;

static int64_t work_alloc(WorkAlloc *w, int64_t size, int owner) {
  size = layout_align_up(size > 0 ? size : 1);
  int64_t off = 0;
  int at = 0;
  for (; at < w->n; at++) {
    if (w->v[at].off - off >= size) break;
    off = w->v[at].off + w->v[at].size;
  }
  if (w->n == w->cap) {
    w->cap = w->cap ? 2 * w->cap : 16;
    w->v = pd_realloc(w->v, (size_t)w->cap * sizeof *w->v);
  }
  memmove(&w->v[at + 1], &w->v[at], (size_t)(w->n - at) * sizeof *w->v);
  w->v[at] = (Live){off, size, owner};
  w->n++;
  if (off + size > w->peak) w->peak = off + size;
  return off;
}

static void work_free(WorkAlloc *w, int owner) {
  for (int i = 0; i < w->n; i++)
    if (w->v[i].owner == owner) {
      memmove(&w->v[i], &w->v[i + 1], (size_t)(w->n - i - 1) * sizeof *w->v);
      w->n--;
      return;
    }
  PD_CHECK(false, "(freeing a WORK interval that is not live: owner %d)", owner);
}

/* ---- bf16 storage -------------------------------------------------------------------- */

/* Statistics stay float32: attention's log-sum-exp rows, softmax's probabilities. */
bool layout_bf16_storable(const Graph *g, int t) {
  const Tensor *x = &g->tensors[t];
  if (x->dtype != DT_F32 || t == g->loss) return false;
  if (x->producer < 0) return true;
  const Op *op = &g->ops[x->producer];
  bool lse = op_info[op->kind].family == OPFAM_ATTENTION && op_has(op->kind, OPF_FWD) && op->nout > 1 &&
             op->out[1] == t; /* attention's and attention_gqa's */
  return !(lse || op->kind == OP_SOFTMAX);
}

void layout_mark_bf16(StageLocal *S) {
  const Graph *g = S->ix->g;
  for (int k = 0; k < S->n; k++) {
    TensorPlace *pl = &S->pl[k];
    pl->work[0] = pl->work[1] = -1;
    pl->up[0] = pl->up[1] = -1;
    int t = S->tens[k];
    if (!S->ix->bf16 || (pl->cls != BUF_STASH && pl->cls != BUF_BOUNDARY) || pl->alias >= 0 || pl->accumulate ||
        !layout_bf16_storable(g, t))
      continue;
    pl->bf16 = true;
    pl->bytes /= 2; /* float32 bytes, padded rows included: 2 a element now */
  }
}

/* Input i of op reads the gradient as the row-major [rows, V] bf16 operand the C
 * program's GEMMs take (cpu_kernels_layers.h: pk_matmul_bf16a, pk_gemm_dw_bf16):
 * matmul's a (op(a) = a: matmul never transposes a), linear_dw's dy (in 1),
 * matmul_dw_t's (in 0). */
static bool grad_rows_operand(const Op *op, int i) {
  return ((op->kind == OP_MATMUL || op->kind == OP_MATMUL_DW_T) && i == 0) || (op->kind == OP_LINEAR_DW && i == 1);
}

bool layout_classifier_grad_ok(const Graph *g, int t) {
  int po = t >= 0 ? g->tensors[t].producer : -1;
  const Op *b = po >= 0 ? &g->ops[po] : NULL;
  if (!b || b->kind != OP_CROSS_ENTROPY_BWD || b->fwd_op < 0) return false;
  const Op *f = &g->ops[b->fwd_op];
  int logits = b->in[0], reads = 0;
  if (f->kind != OP_CROSS_ENTROPY || f->in[0] != logits || f->in[1] != b->in[1] || f->attr[0] != b->attr[0] ||
      !layout_bf16_storable(g, logits))
    return false;
  for (int o = 0; o < g->nops; o++) {
    const Op *r = &g->ops[o];
    int n = 0;
    for (int i = 0; i < r->nin; i++) {
      if (r->in[i] == logits && r != f && r != b) return false; /* the gradient replaces them */
      if (r->in[i] != t) continue;
      if (!grad_rows_operand(r, i) || r->fwd_op < 0) return false;
      n++;
    }
    if (n > 1) return false;
    reads += n;
  }
  return reads > 0;
}

/* The cross_entropy_bwd at position k qualifies (layout.h, "the classifier's gradient
 * in the stash"): layout_classifier_grad_ok, and in this stage the logits are stored
 * in STASH, the gradient placed over them, its forward op and every reader here. */
static bool classifier_qualifies(const StageLocal *S, int k) {
  const Graph *g = S->ix->g;
  const Op *b = &g->ops[S->order[k]];
  int grad = b->out[0];
  if (!layout_classifier_grad_ok(g, grad)) return false;
  const TensorPlace *pi = place_of(S, b->in[0]), *po = place_of(S, grad);
  if (!pi->bf16 || pi->cls != BUF_STASH || po->alias != b->in[0] || po->accumulate) return false;
  bool fwd_here = false;
  for (int j = 0; j < S->nfwd; j++) fwd_here = fwd_here || S->order[j] == b->fwd_op;
  int reads = 0;
  for (int j = S->nfwd; j < S->nfwd + S->nbwd; j++) {
    const Op *r = &g->ops[S->order[j]];
    for (int i = 0; i < r->nin; i++) reads += r->in[i] == grad;
  }
  return fwd_here && reads == S->ix->nconsumers[grad];
}

void layout_classifier_grad(StageLocal *S) {
  for (int k = S->nfwd; k < S->nfwd + S->nbwd && S->ix->bf16; k++)
    if (S->cls_grad < 0 && classifier_qualifies(S, k)) S->cls_grad = S->ix->g->ops[S->order[k]].out[0];
}

/* A working place's owner in the free list: distinct from tensor ids and scratch. */
static int work_owner(const StageLocal *S, int t, int pass) { return (1 + pass) * S->ix->g->ntensors + t; }

/* Per bf16 root slot r and pass p (index 2r + p): the positions in order where its
 * working place begins (ws) and ends (we), -1 when the pass does not touch it; and
 * TensorPlace.up: the op before which the pass upcasts it (its first reader there),
 * when the pass does not produce it. root[s]: the slot whose place s reuses.
 * One reader makes the place begin earlier: a gelu_bwd's pre-GELU input, from its
 * gradient's producer on (the matmul that a CUDA list's dgelu epilogue computes the
 * gelu_bwd with, upcast included: codegen/cgen_cuda_epilogue.c), and the gelu_bwd's
 * output (in WORK) with it: early[2k] is the input's root slot whose place begins at
 * position k, early[2k + 1] the output's slot, or -1. In float32 layouts the input is
 * in STASH and nothing moves. */
static void working_intervals(StageLocal *S, const int *root, int *ws, int *we, int *early) {
  const Graph *g = S->ix->g;
  int norder = S->nfwd + S->nbwd;
  int *prod = pd_malloc((size_t)(S->n ? S->n : 1) * sizeof(int));
  for (int s = 0; s < S->n; s++) prod[s] = -1, ws[2 * s] = ws[2 * s + 1] = we[2 * s] = we[2 * s + 1] = -1;
  for (int k = 0; k < 2 * norder; k++) early[k] = -1;
  int cls = S->cls_grad >= 0 ? root[slot_of(S, S->cls_grad)] : -1; /* the logits' slot */
  for (int k = 0; k < norder; k++) {
    const Op *op = &g->ops[S->order[k]];
    int p = k >= S->nfwd;
    for (int i = 0; i < op->nin + op->nout; i++) {
      int s = slot_of(S, i < op->nin ? op->in[i] : op->out[i - op->nin]), r = root[s];
      if (i >= op->nin && r == s) prod[r] = k;
      if (!S->pl[r].bf16 || (p == 1 && r == cls)) continue; /* the backward reads the stash's gradient */
      if (ws[2 * r + p] < 0) ws[2 * r + p] = k;
      if (we[2 * r + p] < k) we[2 * r + p] = k;
    }
  }
  for (int r = 0; r < S->n; r++)
    for (int p = 0; p < 2 && S->pl[r].bf16; p++) {
      int at = ws[2 * r + p];
      if (at < 0 || prod[r] == at) continue;
      const Op *u = &g->ops[S->pl[r].up[p] = S->order[at]];
      int before = u->kind == OP_GELU_BWD && u->in[1] == S->tens[r] ? prod[slot_of(S, u->in[0])] : -1;
      int d = slot_of(S, u->out[0]);
      const TensorPlace *pd = &S->pl[d];
      if (before < 0 || before >= at || (before >= S->nfwd) != p || early[2 * before] >= 0 || pd->cls != BUF_WORK ||
          root[d] != d || pd->accumulate)
        continue;
      ws[2 * r + p] = before, early[2 * before] = r, early[2 * before + 1] = d;
    }
  free(prod);
}

/* At position k (pass p): the working places that begin here, before the op's scratch
 * and outputs (upcast == true: those of values the pass does not produce, which
 * codegen casts in before the op, early[k]'s included; false: the op's own bf16
 * outputs). */
static void working_begin(StageLocal *S, WorkAlloc *w, const int *root, const int *ws, const int *early, int k,
                          bool upcast) {
  const Op *op = &S->ix->g->ops[S->order[k]];
  int p = k >= S->nfwd;
  int lo = upcast ? 0 : op->nin, hi = upcast ? op->nin + 1 : op->nin + op->nout;
  for (int i = lo; i < hi; i++) {
    int t = i < op->nin ? op->in[i] : i == op->nin && upcast ? (early[2 * k] >= 0 ? S->tens[early[2 * k]] : -1)
                                                                : op->out[i - op->nin];
    if (t < 0) continue;
    int s = slot_of(S, t), r = root[s];
    TensorPlace *pl = &S->pl[r];
    if (!pl->bf16 || ws[2 * r + p] != k || pl->work[p] >= 0 || (upcast == (pl->up[p] < 0)) || r != s) continue;
    pl->work[p] = work_alloc(w, 2 * pl->bytes, work_owner(S, t, p));
  }
}

/* At position k: releases the working places whose pass ends here. */
static void working_end(StageLocal *S, WorkAlloc *w, const int *root, int *we, int k) {
  const Op *op = &S->ix->g->ops[S->order[k]];
  int p = k >= S->nfwd;
  for (int i = 0; i < op->nin + op->nout; i++) {
    int r = root[slot_of(S, i < op->nin ? op->in[i] : op->out[i - op->nin])];
    if (!S->pl[r].bf16 || we[2 * r + p] != k) continue;
    we[2 * r + p] = -2; /* released */
    work_free(w, work_owner(S, S->tens[r], p));
  }
}

/* ---- WORK ------------------------------------------------------------------------------ */

/* Per slot: the slot whose WORK place it reuses (an alias's root) and the position
 * in order where that root's life ends. An alias extends its root's interval to its
 * own last use. */
static void work_lives(StageLocal *S, const int *last, int *root, int *end) {
  const Graph *g = S->ix->g;
  int n = S->n, norder = S->nfwd + S->nbwd;
  for (int k = 0; k < n; k++)
    root[k] = S->pl[k].alias >= 0 && S->pl[k].cls == BUF_WORK ? slot_of(S, alias_root(S, S->tens[k])) : k;
  for (int k = 0; k < n; k++) end[k] = -1;
  for (int k = 0; k < norder; k++) {
    const Op *op = &g->ops[S->order[k]];
    for (int i = 0; i < op->nout; i++) {
      int r = root[slot_of(S, op->out[i])];
      if (end[r] < k) end[r] = k; /* a value nobody reads dies at birth */
    }
  }
  for (int k = 0; k < n; k++)
    if (last[k] > end[root[k]]) end[root[k]] = last[k];
}

/* First fit in op order (work_alloc), scratch and bf16 working places included. */
void layout_work_offsets(StageLocal *S, const int *last) {
  const Graph *g = S->ix->g;
  int n = S->n, norder = S->nfwd + S->nbwd;
  int nz = n ? n : 1;
  int *root = pd_malloc((size_t)nz * sizeof(int)), *end = pd_malloc((size_t)nz * sizeof(int));
  int *ws = pd_malloc(2 * (size_t)nz * sizeof(int)), *we = pd_malloc(2 * (size_t)nz * sizeof(int));
  int *early = pd_malloc(2 * (size_t)(norder ? norder : 1) * sizeof(int));
  bool *placed = pd_calloc((size_t)nz, sizeof(bool)); /* WORK outputs placed early */
  work_lives(S, last, root, end);
  working_intervals(S, root, ws, we, early);

  S->scratch_off = pd_calloc((size_t)(norder ? norder : 1), sizeof(int64_t));
  S->scratch_bytes = pd_calloc((size_t)(norder ? norder : 1), sizeof(int64_t));
  WorkAlloc w = {0};
  for (int k = 0; k < norder; k++) {
    int o = S->order[k];
    const Op *op = &g->ops[o];
    working_begin(S, &w, root, ws, early, k, true);
    /* Sizes are float32 bytes; a float64 program doubles every offset and size. */
    int64_t sc = layout_op_scratch_elems(g, op, S->b) * 4;
    for (int i = 0; i < op->nout; i++) {
      const TensorPlace *pl = place_of(S, op->out[i]);
      if (pl->accumulate && pl->alias < 0 && !op_has(op->kind, OPF_ACCUMULATES))
        sc = layout_align_up(sc) + pl->bytes; /* compute into scratch, then add */
    }
    if (sc > 0) {
      S->scratch_bytes[k] = sc;
      S->scratch_off[k] = work_alloc(&w, sc, -1 - o);
    }
    for (int i = 0; i < op->nout; i++) {
      int s = slot_of(S, op->out[i]);
      if (S->pl[s].cls != BUF_WORK || placed[s]) continue;
      if (root[s] != s) continue; /* placed with its root below */
      S->pl[s].offset = work_alloc(&w, S->pl[s].bytes, op->out[i]);
    }
    int d = early[2 * k + 1];
    if (d >= 0) S->pl[d].offset = work_alloc(&w, S->pl[d].bytes, S->tens[d]), placed[d] = true;
    working_begin(S, &w, root, ws, early, k, false);
    if (sc > 0) work_free(&w, -1 - o);
    /* Release every WORK root whose life ends here (inputs read last, dead outputs). */
    for (int i = 0; i < op->nin + op->nout; i++) {
      int r = root[slot_of(S, i < op->nin ? op->in[i] : op->out[i - op->nin])];
      if (S->pl[r].cls != BUF_WORK || end[r] != k) continue;
      end[r] = -2; /* released */
      work_free(&w, S->tens[r]);
    }
    working_end(S, &w, root, we, k);
  }
  PD_CHECK(w.n == 0, "(%d WORK intervals still live after the stage's last op)", w.n);
  S->total[BUF_WORK] = layout_align_up(w.peak);
  free(w.v);
  free(root), free(end), free(ws), free(we), free(early), free(placed);
}

void layout_alias_places(StageLocal *S) {
  const Graph *g = S->ix->g;
  for (int k = 0; k < S->n; k++) {
    TensorPlace *pl = &S->pl[k];
    if (pl->alias < 0) continue;
    const TensorPlace *r = place_of(S, alias_root(S, S->tens[k]));
    if (S->tens[k] == S->cls_grad) { /* the forward's classifier stores it there, as bf16 */
      int root = alias_root(S, S->tens[k]);
      *pl = *r;
      pl->alias = root;
      pl->work[0] = pl->work[1] = pl->up[0] = pl->up[1] = -1;
      continue;
    }
    if (r->bf16) { /* on the root's float32 working place of the alias's pass */
      int pass = g->ops[g->tensors[S->tens[k]].producer].fwd_op >= 0;
      PD_CHECK(r->work[pass] >= 0, "(t%d aliases bf16 t%d, which has no working place in its pass)", S->tens[k],
               alias_root(S, S->tens[k]));
      pl->cls = BUF_WORK;
      pl->offset = r->work[pass];
      continue;
    }
    pl->cls = r->cls;
    pl->offset = r->offset;
  }
}
