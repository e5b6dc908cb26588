/* passes/layout.c — per-stage tensor layout (see layout.h).
 *
 * Three steps. (1) Collect the stage's ops (forward ops of its regions, then the
 * backward ops autodiff placed in them) and classify every tensor they touch.
 * (2) Decide which values are accumulated into a parameter gradient: the gradient
 * itself, then — walking back through the adds that sum contributions — every
 * contribution whose only consumer is such an add and whose producer can add into
 * its output (a layernorm backward's two parameter gradients then get one flag,
 * layernorm_one_accumulate_flag). In a bf16 layout, mark what STASH and BOUNDARY
 * store as bfloat16 (layout_work.c). (3) Assign offsets: PARAMS/GRADS/INPUTS/STASH/
 * BOUNDARY sequentially, WORK by a linear scan over the stage's op order
 * (layout_work.c), in which the one in-place case the kernels allow is decided here:
 * cross-entropy backward writes dlogits over the logits when that is their last use
 * (the largest activation of a GPT; with bf16 logits, over their float32 working place).
 */
#include "passes/layout_internal.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

int64_t layout_op_scratch_elems(const Graph *g, const Op *op, int64_t b) {
  AttnGeom a;
  if (op_attention_geom(g, op, &a)) {
    const Tensor *q = &g->tensors[a.q];
    int64_t nb = q->shape.batched ? b : q->shape.dim[0];
    int64_t rows = nb * (int64_t)a.heads; /* pk_attention_work_elems */
    return (rows > 2 ? rows : 2) * a.T;
  }
  if (op->kind == OP_LAYERNORM_BWD) {
    const Tensor *x = &g->tensors[op->in[1]];
    int64_t c = x->shape.dim[x->shape.rank - 1];
    return 2 * (shape_numel(&x->shape, b) / c);
  }
  return 0;
}

int layout_contribution_param(const Graph *g, int t) {
  for (int hops = 0; hops < 64; hops++) {
    if (g->tensors[t].kind == TK_GRAD) return g->tensors[t].param;
    int consumer = -1, n = 0;
    for (int o = 0; o < g->nops; o++)
      for (int i = 0; i < g->ops[o].nin; i++)
        if (g->ops[o].in[i] == t) {
          consumer = o;
          n++;
          break;
        }
    if (n != 1) return -1;
    const Op *op = &g->ops[consumer];
    if (op->kind != OP_ADD && !(op->kind == OP_SCALE && op->attr[0] == 1)) return -1;
    t = op->out[0];
  }
  return -1;
}

bool layout_has_op(const StageLayout *L, int o) {
  const Op *op = &L->g->ops[o];
  return op->region >= L->first_region && op->region <= L->last_region;
}

/* ---- the layout -------------------------------------------------------------------- */

static bool in_stage(const StageLocal *S, int o) {
  int r = S->ix->g->ops[o].region;
  return r >= S->first && r <= S->last;
}

/* True when t is a gradient contribution that step (2) folded into a sum. */
static bool folded_contribution(const StageLocal *S, const Graph *g, int t) {
  const TensorPlace *p = place_of(S, t);
  return p->alias >= 0 && p->accumulate && g->tensors[t].kind == TK_ACT_GRAD;
}

static void unfold(TensorPlace *p) {
  p->cls = BUF_WORK;
  p->accumulate = false;
  p->alias = -1;
}

/* layernorm_bwd writes dgamma and dbeta with one accumulate flag, reading both
 * old values before adding either. A gain tied across repeat copies with a bias per
 * copy (or the reverse) makes one output a folded contribution and the other the
 * parameter's own gradient: both accumulate, which is what step (2) gives. When the
 * two still disagree, or both fold onto the same gradient (gamma and beta one
 * weight), the folded ones go back to WORK and their sums add them explicitly. */
static void layernorm_one_accumulate_flag(StageLocal *S, const Graph *g) {
  for (int k = 0; k < S->nfwd + S->nbwd; k++) {
    const Op *op = &g->ops[S->order[k]];
    if (op->kind != OP_LAYERNORM_BWD) continue;
    int dg = op->out[1], db = op->out[2];
    bool same_root = folded_contribution(S, g, dg) && folded_contribution(S, g, db) &&
                     alias_root(S, dg) == alias_root(S, db);
    if (!same_root && place_of(S, dg)->accumulate == place_of(S, db)->accumulate) continue;
    if (folded_contribution(S, g, dg)) unfold(place_of(S, dg));
    if (folded_contribution(S, g, db)) unfold(place_of(S, db));
  }
}

/* layout_contribution_param through the index's consumer table: O(hops). */
static int contribution_param(const LayoutIndex *ix, int t) {
  const Graph *g = ix->g;
  for (int hops = 0; hops < 64; hops++) {
    if (g->tensors[t].kind == TK_GRAD) return g->tensors[t].param;
    if (ix->nconsumers[t] != 1) return -1;
    const Op *op = &g->ops[ix->consumer[t]];
    if (op->kind != OP_ADD && !(op->kind == OP_SCALE && op->attr[0] == 1)) return -1;
    t = op->out[0];
  }
  return -1;
}

static int cmp_int(const void *a, const void *b) {
  int x = *(const int *)a, y = *(const int *)b;
  return (x > y) - (x < y);
}

/* Region first..last's op ids of one direction, ascending, into v. Autodiff numbers
 * the backward ops from the loss back, so the regions' backward lists come out
 * ascending when taken last region first. */
static int collect_ops(const int *start, const int *ops, int first, int last, bool from_last, int *v) {
  int n = 0;
  for (int i = 0; i <= last - first; i++) {
    int r = from_last ? last - i : first + i;
    for (int j = start[r]; j < start[r + 1]; j++) v[n++] = ops[j];
  }
  for (int i = 1; i < n; i++)
    if (v[i - 1] > v[i]) { /* regions interleave */
      qsort(v, (size_t)n, sizeof *v, cmp_int);
      break;
    }
  return n;
}

static void local_free(StageLocal *S) {
  for (int k = 0; k < S->n; k++) S->ix->slot[S->tens[k]] = -1;
  free(S->order), free(S->tens), free(S->pl), free(S->scratch_off), free(S->scratch_bytes), free(S->params);
}

/* The touched tensors, ascending (the block offsets below follow tensor order),
 * their slots and their placements' sizes. */
static void collect_tensors(StageLocal *S) {
  const LayoutIndex *ix = S->ix;
  const Graph *g = ix->g;
  int norder = S->nfwd + S->nbwd;
  int cap = 16;
  S->tens = pd_malloc((size_t)cap * sizeof(int));
  for (int k = 0; k < norder; k++) {
    const Op *op = &g->ops[S->order[k]];
    for (int i = 0; i < op->nin + op->nout; i++) {
      int t = i < op->nin ? op->in[i] : op->out[i - op->nin];
      if (ix->slot[t] >= 0) continue;
      if (S->n == cap) S->tens = pd_realloc(S->tens, (size_t)(cap *= 2) * sizeof(int));
      ix->slot[t] = 0;
      S->tens[S->n++] = t;
    }
  }
  int tmin = INT_MAX, tmax = -1;
  for (int k = 0; k < S->n; k++) {
    if (S->tens[k] < tmin) tmin = S->tens[k];
    if (S->tens[k] > tmax) tmax = S->tens[k];
  }
  if (tmax - tmin < 8 * S->n) { /* dense (a stage of many blocks): a scan, not a sort */
    int k = 0;
    for (int t = tmin; t <= tmax; t++)
      if (ix->slot[t] >= 0) S->tens[k++] = t;
  } else {
    qsort(S->tens, (size_t)S->n, sizeof(int), cmp_int);
  }
  int n = S->n;
  for (int k = 0; k < n; k++) ix->slot[S->tens[k]] = k;
  S->pl = pd_calloc((size_t)(n ? n : 1), sizeof *S->pl);
  for (int k = 0; k < n; k++) {
    S->pl[k].alias = -1;
    S->pl[k].bytes = layout_padded_numel(g, ix->ld, S->tens[k], S->b) * (int64_t)dtype_size(g->tensors[S->tens[k]].dtype);
  }
}

/* Per slot: read by a backward op of the stage; the position in order of its last
 * use. (Read by another stage's op: rmin/rmax of the index.) And the loss, when the
 * stage holds it. */
static void find_reads(StageLocal *S, bool *read_bwd, int *last) {
  const Graph *g = S->ix->g;
  int n = S->n, norder = S->nfwd + S->nbwd;
  for (int k = 0; k < n; k++) last[k] = -1;
  for (int k = 0; k < norder; k++) {
    const Op *op = &g->ops[S->order[k]];
    for (int i = 0; i < op->nin; i++) {
      int s = slot_of(S, op->in[i]);
      if (k >= S->nfwd) read_bwd[s] = true;
      last[s] = k;
    }
  }
  if (g->loss >= 0 && S->ix->slot[g->loss] >= 0) S->loss = g->loss;
}

/* (1) classes: which block each tensor lives in. */
static void assign_classes(StageLocal *S, const bool *read_bwd) {
  const LayoutIndex *ix = S->ix;
  const Graph *g = ix->g;
  int n = S->n;
  for (int k = 0; k < n; k++) {
    int t = S->tens[k];
    const Tensor *x = &g->tensors[t];
    bool mine = x->producer >= 0 && in_stage(S, x->producer);
    bool read_out = ix->rmin[t] < S->first || ix->rmax[t] > S->last;
    BufClass c = BUF_WORK;
    switch (x->kind) {
    case TK_PARAM: c = BUF_PARAMS; break;
    case TK_INPUT: c = BUF_INPUTS; break;
    case TK_GRAD: c = mine ? BUF_GRADS : BUF_BOUNDARY; break;
    case TK_ACT:
      if (!mine || (read_bwd[k] && x->producer < ix->nfwd_all))
        c = BUF_STASH;
      else if (read_out)
        c = BUF_BOUNDARY;
      break;
    case TK_ACT_GRAD:
      if (!mine || read_out) c = BUF_BOUNDARY;
      break;
    }
    S->pl[k].cls = c;
  }
}

/* A tied parameter's gradient contribution that another stage would sum (GPT: the
 * LM head's part of dwte, read by the prologue's add) accumulates straight into
 * this stage's own gradient of the parameter: TIED_SYNC sums the stages'. gparam[k]:
 * the parameter slot k contributes to, or -1. */
static void tied_contributions(StageLocal *S, int *gparam) {
  const Graph *g = S->ix->g;
  int n = S->n;
  for (int k = 0; k < n; k++) {
    gparam[k] = -1;
    int t = S->tens[k];
    const Tensor *x = &g->tensors[t];
    if (S->pl[k].cls != BUF_BOUNDARY || x->kind != TK_ACT_GRAD || x->producer < 0 || !in_stage(S, x->producer))
      continue;
    int p = contribution_param(S->ix, t);
    if (p < 0 || slot_of(S, g->params[p].tensor) < 0) continue;
    if (S->pl[k].bytes != place_of(S, g->params[p].tensor)->bytes) continue;
    S->pl[k].cls = BUF_GRADS;
    gparam[k] = p;
  }
}

/* (2) accumulation: gradients, then their single-use contributions. */
static void fold_accumulation(StageLocal *S) {
  const Graph *g = S->ix->g;
  int n = S->n, nz = n ? n : 1;
  int *stack = pd_malloc((size_t)nz * sizeof(int)), nstack = 0;
  for (int k = 0; k < n; k++)
    if (S->pl[k].cls == BUF_GRADS) {
      S->pl[k].accumulate = true;
      stack[nstack++] = S->tens[k];
    }
  while (nstack > 0) {
    int t = stack[--nstack];
    const Op *p = &g->ops[g->tensors[t].producer];
    bool sum = p->kind == OP_ADD || (p->kind == OP_SCALE && p->attr[0] == 1);
    if (!sum || (p->kind == OP_ADD && p->in[0] == p->in[1])) continue;
    for (int i = 0; i < p->nin; i++) {
      int c = p->in[i];
      const Tensor *x = &g->tensors[c];
      TensorPlace *pc = place_of(S, c);
      if (x->kind != TK_ACT_GRAD || S->ix->nuse[c] != 1) continue;
      if (pc->cls == BUF_BOUNDARY && x->producer >= 0 && !in_stage(S, x->producer) &&
          pc->bytes == place_of(S, t)->bytes) {
        /* another stage's contribution, accumulated into its own copy of the
         * gradient: here the sum skips it (TIED_SYNC adds the copies) */
        pc->cls = BUF_GRADS;
        pc->accumulate = true;
        pc->alias = t;
        continue;
      }
      if (pc->cls != BUF_WORK) continue;
      if (pc->bytes != place_of(S, t)->bytes) continue;
      const Op *q = &g->ops[x->producer];
      if (!op_has(q->kind, OPF_ACCUMULATES)) continue;
      pc->cls = BUF_GRADS;
      pc->accumulate = true;
      pc->alias = t;
      stack[nstack++] = c;
    }
  }
  free(stack);
  layernorm_one_accumulate_flag(S, g);
}

/* In place: dlogits over the logits when that is their last use. */
static void dlogits_in_place(StageLocal *S, const int *last) {
  const Graph *g = S->ix->g;
  int norder = S->nfwd + S->nbwd;
  for (int k = S->nfwd; k < norder; k++) {
    const Op *op = &g->ops[S->order[k]];
    if (op->kind != OP_CROSS_ENTROPY_BWD) continue;
    TensorPlace *pi = place_of(S, op->in[0]), *po = place_of(S, op->out[0]);
    int64_t in_bytes = pi->bf16 ? 2 * pi->bytes : pi->bytes; /* bf16: on its float32 working place */
    if (last[slot_of(S, op->in[0])] == k && (pi->cls == BUF_WORK || pi->cls == BUF_STASH) &&
        po->cls == BUF_WORK && pi->alias < 0 && in_bytes == po->bytes)
      po->alias = op->in[0];
  }
}

/* (3) offsets. Params (and their gradients, same offsets) in parameter order; then
 * INPUTS, STASH and BOUNDARY in tensor order. */
static void fixed_offsets(StageLocal *S, const int *gparam) {
  const Graph *g = S->ix->g;
  int n = S->n, nz = n ? n : 1;
  S->params = pd_malloc((size_t)nz * sizeof(int));
  for (int k = 0; k < n; k++)
    if (g->tensors[S->tens[k]].kind == TK_PARAM) S->params[S->nparams++] = g->tensors[S->tens[k]].param;
  qsort(S->params, (size_t)S->nparams, sizeof(int), cmp_int);
  for (int i = 0; i < S->nparams; i++) {
    TensorPlace *pw = place_of(S, g->params[S->params[i]].tensor);
    pw->offset = S->total[BUF_PARAMS];
    S->total[BUF_PARAMS] += layout_align_up(pw->bytes);
  }
  S->total[BUF_GRADS] = S->total[BUF_PARAMS];
  for (int k = 0; k < n; k++) {
    TensorPlace *pl = &S->pl[k];
    int t = S->tens[k];
    if (pl->cls == BUF_GRADS && pl->alias < 0) {
      int p = g->tensors[t].param >= 0 ? g->tensors[t].param : gparam[k];
      PD_CHECK(p >= 0, "(gradient tensor %d has no parameter)", t);
      int w = g->params[p].tensor;
      pl->offset = slot_of(S, w) >= 0 ? place_of(S, w)->offset : S->total[BUF_GRADS];
      if (slot_of(S, w) < 0) S->total[BUF_GRADS] += layout_align_up(pl->bytes);
    } else if (pl->cls == BUF_INPUTS || pl->cls == BUF_STASH || pl->cls == BUF_BOUNDARY) {
      pl->offset = S->total[pl->cls];
      S->total[pl->cls] += layout_align_up(pl->bytes);
    }
  }
}

/* Lays out regions first..last at microbatch b: the stage's ops in order, the tensors
 * they touch, then the steps above, each over all of them before the next. */
static void layout_local(LayoutIndex *ix, int first_region, int last_region, int64_t b, StageLocal *S) {
  const Graph *g = ix->g;
  PD_CHECK(b >= 1 && first_region >= 0 && first_region <= last_region && last_region < g->nregions);
  memset(S, 0, sizeof *S);
  S->ix = ix, S->first = first_region, S->last = last_region, S->b = b, S->loss = -1, S->cls_grad = -1;
  int nf = ix->fwd_start[last_region + 1] - ix->fwd_start[first_region];
  int nb = ix->bwd_start[last_region + 1] - ix->bwd_start[first_region];
  S->order = pd_malloc((size_t)(nf + nb ? nf + nb : 1) * sizeof(int));
  S->nfwd = collect_ops(ix->fwd_start, ix->fwd_ops, first_region, last_region, false, S->order);
  S->nbwd = collect_ops(ix->bwd_start, ix->bwd_ops, first_region, last_region, true, S->order + S->nfwd);
  collect_tensors(S);
  int nz = S->n ? S->n : 1;
  bool *read_bwd = pd_calloc((size_t)nz, 1);
  int *last = pd_malloc((size_t)nz * sizeof(int));
  find_reads(S, read_bwd, last);
  assign_classes(S, read_bwd);
  int *gparam = pd_malloc((size_t)nz * sizeof(int));
  tied_contributions(S, gparam);
  fold_accumulation(S);
  layout_mark_bf16(S);
  dlogits_in_place(S, last);
  layout_classifier_grad(S);
  fixed_offsets(S, gparam);
  layout_work_offsets(S, last);
  layout_alias_places(S);
  free(gparam);
  free(read_bwd);
  free(last);
}

void layout_stage_totals(LayoutIndex *ix, int first_region, int last_region, int64_t b,
                         int64_t total[BUF_CLASS_COUNT]) {
  StageLocal S;
  layout_local(ix, first_region, last_region, b, &S);
  memcpy(total, S.total, sizeof S.total);
  local_free(&S);
}

StageLayout *layout_stage(const Graph *g, int first_region, int last_region, int64_t b) {
  return layout_stage_bf16(g, first_region, last_region, b, false);
}

StageLayout *layout_stage_bf16(const Graph *g, int first_region, int last_region, int64_t b, bool bf16) {
  LayoutIndex *ix = layout_index_create(g);
  ix->bf16 = bf16;
  StageLocal S;
  layout_local(ix, first_region, last_region, b, &S);
  StageLayout *L = pd_calloc(1, sizeof *L);
  L->g = g;
  L->first_region = first_region;
  L->last_region = last_region;
  L->b = b;
  L->bf16 = bf16;
  L->loss = S.loss;
  L->cls_grad = S.cls_grad;
  L->nfwd = S.nfwd, L->nbwd = S.nbwd;
  L->fwd_ops = pd_malloc((size_t)(S.nfwd ? S.nfwd : 1) * sizeof(int));
  L->bwd_ops = pd_malloc((size_t)(S.nbwd ? S.nbwd : 1) * sizeof(int));
  memcpy(L->fwd_ops, S.order, (size_t)S.nfwd * sizeof(int));
  memcpy(L->bwd_ops, S.order + S.nfwd, (size_t)S.nbwd * sizeof(int));
  L->params = S.params, S.params = NULL;
  L->nparams = S.nparams;
  memcpy(L->total, S.total, sizeof S.total);
  /* the graph-sized arrays codegen indexes by tensor and op id */
  int nt = g->ntensors;
  L->place = pd_calloc((size_t)(nt ? nt : 1), sizeof *L->place);
  for (int t = 0; t < nt; t++) {
    L->place[t].alias = -1;
    L->place[t].work[0] = L->place[t].work[1] = L->place[t].up[0] = L->place[t].up[1] = -1;
    L->place[t].bytes = layout_padded_numel(g, ix->ld, t, b) * (int64_t)dtype_size(g->tensors[t].dtype);
  }
  for (int k = 0; k < S.n; k++) L->place[S.tens[k]] = S.pl[k];
  L->scratch_off = pd_calloc((size_t)(g->nops ? g->nops : 1), sizeof(int64_t));
  L->scratch_bytes = pd_calloc((size_t)(g->nops ? g->nops : 1), sizeof(int64_t));
  for (int k = 0; k < S.nfwd + S.nbwd; k++) {
    L->scratch_off[S.order[k]] = S.scratch_off[k];
    L->scratch_bytes[S.order[k]] = S.scratch_bytes[k];
  }
  local_free(&S);
  L->sole_reader = ix->sole_reader, ix->sole_reader = NULL;
  L->ld = ix->ld, ix->ld = NULL;
  layout_index_destroy(ix);
  return L;
}

void layout_destroy(StageLayout *L) {
  if (!L) return;
  free(L->fwd_ops);
  free(L->bwd_ops);
  free(L->params);
  free(L->place);
  free(L->scratch_off);
  free(L->scratch_bytes);
  free(L->sole_reader);
  free(L->ld);
  free(L);
}

void layout_dump(const StageLayout *L, FILE *out) {
  const Graph *g = L->g;
  fprintf(out, "stage regions %s..%s, microbatch %lld: %d forward ops, %d backward ops\n",
          g->regions[L->first_region].name, g->regions[L->last_region].name, (long long)L->b,
          L->nfwd, L->nbwd);
  for (int c = BUF_PARAMS; c < BUF_CLASS_COUNT; c++)
    fprintf(out, "  %-8s %12lld bytes\n", buf_class_name((BufClass)c), (long long)L->total[c]);
  for (int c = BUF_PARAMS; c < BUF_CLASS_COUNT; c++)
    for (int t = 0; t < g->ntensors; t++) {
      const TensorPlace *pl = &L->place[t];
      if ((int)pl->cls != c) continue;
      char sb[64];
      fprintf(out, "  %-8s %10lld +%-10lld t%-4d %s %s%s", buf_class_name(pl->cls),
              (long long)pl->offset, (long long)pl->bytes, t, g->tensors[t].name,
              shape_str(&g->tensors[t].shape, sb, sizeof sb), pl->accumulate ? " +=" : "");
      if (pl->alias >= 0) fprintf(out, " (on t%d)", pl->alias);
      if (pl->bf16) fprintf(out, " bf16, work fwd %lld bwd %lld", (long long)pl->work[0], (long long)pl->work[1]);
      fputc('\n', out);
    }
}
