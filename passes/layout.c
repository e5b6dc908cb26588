/* passes/layout.c — per-stage tensor layout (see layout.h).
 *
 * Three steps. (1) Collect the stage's ops (forward ops of its regions, then the
 * backward ops autodiff placed in them) and classify every tensor they touch.
 * (2) Decide which values are accumulated into a parameter gradient: the gradient
 * itself, then — walking back through the adds that sum contributions — every
 * contribution whose only consumer is such an add and whose producer can add into
 * its output (a layernorm backward's two parameter gradients then get one flag,
 * layernorm_one_accumulate_flag). (3) Assign offsets: PARAMS/GRADS/INPUTS/STASH/
 * BOUNDARY sequentially, WORK by a linear scan over the stage's op order with a first-fit free list: an
 * op's outputs (and its kernel scratch) are allocated before its dead inputs are
 * released, so no kernel ever sees an output overlapping an input it reads, except
 * the one in-place case the kernels allow (cross-entropy backward writes dlogits over
 * the logits when that is their last use: the largest activation of a GPT).
 */
#include "passes/layout.h"

#include <stdlib.h>
#include <string.h>

static int64_t align_up(int64_t x) { return (x + LAYOUT_ALIGN - 1) / LAYOUT_ALIGN * LAYOUT_ALIGN; }

int64_t layout_op_scratch_elems(const Graph *g, const Op *op, int64_t b) {
  if (op->kind == OP_ATTENTION || op->kind == OP_ATTENTION_BWD) {
    const Tensor *qkv = &g->tensors[op->in[op->kind == OP_ATTENTION ? 0 : 1]];
    int64_t nb = qkv->shape.batched ? b : qkv->shape.dim[0];
    int64_t rows = nb * (int64_t)op->attr[0]; /* pk_attention_work_elems */
    return (rows > 2 ? rows : 2) * qkv->shape.dim[1];
  }
  if (op->kind == OP_LAYERNORM_BWD) {
    const Tensor *x = &g->tensors[op->in[1]];
    int64_t c = x->shape.dim[x->shape.rank - 1];
    return 2 * (shape_numel(&x->shape, b) / c);
  }
  return 0;
}

/* Ops whose kernel (or generated loop) can add into its output. */
bool layout_accumulates_natively(OpKind k) {
  return k == OP_EMBEDDING_BWD || k == OP_POSITIONS_BWD || k == OP_LINEAR_DW ||
         k == OP_BIAS_GRAD || k == OP_MATMUL_DW_T || k == OP_LAYERNORM_BWD || k == OP_ADD ||
         k == OP_SCALE;
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

/* ---- WORK: first-fit allocation over a sorted list of live intervals ------------- */

typedef struct Live {
  int64_t off, size;
  int owner; /* tensor id, or -1 - op id for scratch */
} Live;

typedef struct WorkAlloc {
  Live *v;
  int n, cap;
  int64_t peak;
} WorkAlloc;

static int64_t work_alloc(WorkAlloc *w, int64_t size, int owner) {
  size = align_up(size > 0 ? size : 1);
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

/* ---- the layout -------------------------------------------------------------------- */

/* True when t is a gradient contribution that step (2) folded into a sum. */
static bool folded_contribution(const StageLayout *L, const Graph *g, int t) {
  return L->place[t].alias >= 0 && L->place[t].accumulate && g->tensors[t].kind == TK_ACT_GRAD;
}

static void unfold(StageLayout *L, int t) {
  L->place[t].cls = BUF_WORK;
  L->place[t].accumulate = false;
  L->place[t].alias = -1;
}

/* layernorm_bwd writes dgamma and dbeta with one accumulate flag, reading both
 * old values before adding either. A gain tied across repeat copies with a bias per
 * copy (or the reverse) makes one output a folded contribution and the other the
 * parameter's own gradient: both accumulate, which is what step (2) gives. When the
 * two still disagree, or both fold onto the same gradient (gamma and beta one
 * weight), the folded ones go back to WORK and their sums add them explicitly. */
static void layernorm_one_accumulate_flag(StageLayout *L, const Graph *g) {
  for (int o = 0; o < g->nops; o++) {
    const Op *op = &g->ops[o];
    if (op->kind != OP_LAYERNORM_BWD || !layout_has_op(L, o)) continue;
    int dg = op->out[1], db = op->out[2];
    bool same_root = false;
    if (folded_contribution(L, g, dg) && folded_contribution(L, g, db)) {
      int a = dg, b = db;
      while (L->place[a].alias >= 0) a = L->place[a].alias;
      while (L->place[b].alias >= 0) b = L->place[b].alias;
      same_root = a == b;
    }
    if (!same_root && L->place[dg].accumulate == L->place[db].accumulate) continue;
    if (folded_contribution(L, g, dg)) unfold(L, dg);
    if (folded_contribution(L, g, db)) unfold(L, db);
  }
}

StageLayout *layout_stage(const Graph *g, int first_region, int last_region, int64_t b) {
  PD_CHECK(b >= 1 && first_region >= 0 && first_region <= last_region && last_region < g->nregions);
  StageLayout *L = pd_calloc(1, sizeof *L);
  L->g = g;
  L->first_region = first_region;
  L->last_region = last_region;
  L->b = b;
  L->loss = -1;
  int nt = g->ntensors, nfwd_all = g->nfwd_ops ? g->nfwd_ops : g->nops;
  L->fwd_ops = pd_malloc((size_t)g->nops * sizeof(int));
  L->bwd_ops = pd_malloc((size_t)g->nops * sizeof(int));
  for (int o = 0; o < g->nops; o++) {
    if (!layout_has_op(L, o)) continue;
    if (o < nfwd_all)
      L->fwd_ops[L->nfwd++] = o;
    else
      L->bwd_ops[L->nbwd++] = o;
  }
  L->place = pd_calloc((size_t)nt, sizeof *L->place);
  L->scratch_off = pd_calloc((size_t)g->nops, sizeof(int64_t));
  L->scratch_bytes = pd_calloc((size_t)g->nops, sizeof(int64_t));
  L->ld = layout_row_strides(g);
  for (int t = 0; t < nt; t++) {
    L->place[t].alias = -1;
    L->place[t].bytes = layout_padded_numel(g, L->ld, t, b) * (int64_t)dtype_size(g->tensors[t].dtype);
  }

  /* Per tensor: read by a stage fwd op / bwd op / an op of another stage; consumer
   * count over the whole graph; produced inside the stage. */
  int norder = L->nfwd + L->nbwd;
  int *order = pd_malloc((size_t)(norder ? norder : 1) * sizeof(int));
  memcpy(order, L->fwd_ops, (size_t)L->nfwd * sizeof(int));
  memcpy(order + L->nfwd, L->bwd_ops, (size_t)L->nbwd * sizeof(int));
  bool *read_fwd = pd_calloc((size_t)nt, 1), *read_bwd = pd_calloc((size_t)nt, 1);
  bool *read_out = pd_calloc((size_t)nt, 1), *touched = pd_calloc((size_t)nt, 1);
  int *nuse = pd_calloc((size_t)nt, sizeof(int));
  int *last = pd_malloc((size_t)nt * sizeof(int)); /* index into order of the last use */
  for (int t = 0; t < nt; t++) last[t] = -1;
  L->sole_reader = pd_malloc((size_t)(nt ? nt : 1) * sizeof(int));
  for (int t = 0; t < nt; t++) L->sole_reader[t] = -1;
  for (int o = 0; o < g->nops; o++) {
    const Op *op = &g->ops[o];
    bool in_stage = layout_has_op(L, o);
    for (int i = 0; i < op->nin; i++) {
      int t = op->in[i];
      L->sole_reader[t] = nuse[t]++ == 0 ? o : -1;
      if (!in_stage)
        read_out[t] = true;
      else if (o < nfwd_all)
        read_fwd[t] = true;
      else
        read_bwd[t] = true;
    }
  }
  for (int k = 0; k < norder; k++) {
    const Op *op = &g->ops[order[k]];
    for (int i = 0; i < op->nin; i++) {
      touched[op->in[i]] = true;
      last[op->in[i]] = k;
    }
    for (int i = 0; i < op->nout; i++) touched[op->out[i]] = true;
  }
  if (g->loss >= 0 && touched[g->loss]) L->loss = g->loss;

  /* (1) classes. */
  for (int t = 0; t < nt; t++) {
    if (!touched[t]) continue;
    const Tensor *x = &g->tensors[t];
    bool mine = x->producer >= 0 && layout_has_op(L, x->producer);
    BufClass c = BUF_WORK;
    switch (x->kind) {
    case TK_PARAM: c = BUF_PARAMS; break;
    case TK_INPUT: c = BUF_INPUTS; break;
    case TK_GRAD: c = mine ? BUF_GRADS : BUF_BOUNDARY; break;
    case TK_ACT:
      if (!mine || (read_bwd[t] && x->producer < nfwd_all))
        c = BUF_STASH;
      else if (read_out[t])
        c = BUF_BOUNDARY;
      break;
    case TK_ACT_GRAD:
      if (!mine || read_out[t]) c = BUF_BOUNDARY;
      break;
    }
    L->place[t].cls = c;
  }

  /* A tied parameter's gradient contribution that another stage would sum (GPT: the
   * LM head's part of dwte, read by the prologue's add) accumulates straight into
   * this stage's own gradient of the parameter: TIED_SYNC sums the stages'. */
  int *gparam = pd_malloc((size_t)nt * sizeof(int));
  for (int t = 0; t < nt; t++) {
    gparam[t] = -1;
    const Tensor *x = &g->tensors[t];
    if (L->place[t].cls != BUF_BOUNDARY || x->kind != TK_ACT_GRAD || x->producer < 0 ||
        !layout_has_op(L, x->producer))
      continue;
    int p = layout_contribution_param(g, t);
    if (p < 0 || !touched[g->params[p].tensor]) continue;
    if (L->place[t].bytes != L->place[g->params[p].tensor].bytes) continue;
    L->place[t].cls = BUF_GRADS;
    gparam[t] = p;
  }

  /* (2) accumulation: gradients, then their single-use contributions. */
  int *stack = pd_malloc((size_t)nt * sizeof(int)), nstack = 0;
  for (int t = 0; t < nt; t++)
    if (L->place[t].cls == BUF_GRADS) {
      L->place[t].accumulate = true;
      stack[nstack++] = t;
    }
  while (nstack > 0) {
    int t = stack[--nstack];
    const Op *p = &g->ops[g->tensors[t].producer];
    bool sum = p->kind == OP_ADD || (p->kind == OP_SCALE && p->attr[0] == 1);
    if (!sum || (p->kind == OP_ADD && p->in[0] == p->in[1])) continue;
    for (int i = 0; i < p->nin; i++) {
      int c = p->in[i];
      const Tensor *x = &g->tensors[c];
      if (x->kind != TK_ACT_GRAD || nuse[c] != 1) continue;
      if (L->place[c].cls == BUF_BOUNDARY && x->producer >= 0 && !layout_has_op(L, x->producer) &&
          L->place[c].bytes == L->place[t].bytes) {
        /* another stage's contribution, accumulated into its own copy of the
         * gradient: here the sum skips it (TIED_SYNC adds the copies) */
        L->place[c].cls = BUF_GRADS;
        L->place[c].accumulate = true;
        L->place[c].alias = t;
        continue;
      }
      if (L->place[c].cls != BUF_WORK) continue;
      if (L->place[c].bytes != L->place[t].bytes) continue;
      const Op *q = &g->ops[x->producer];
      if (!layout_accumulates_natively(q->kind)) continue;
      L->place[c].cls = BUF_GRADS;
      L->place[c].accumulate = true;
      L->place[c].alias = t;
      stack[nstack++] = c;
    }
  }
  free(stack);
  layernorm_one_accumulate_flag(L, g);

  /* In place: dlogits over the logits when that is their last use. */
  for (int k = L->nfwd; k < norder; k++) {
    const Op *op = &g->ops[order[k]];
    if (op->kind != OP_CROSS_ENTROPY_BWD) continue;
    int in = op->in[0], out = op->out[0];
    BufClass c = L->place[in].cls, co = L->place[out].cls;
    if (last[in] == k && (c == BUF_WORK || c == BUF_STASH) && co == BUF_WORK &&
        L->place[in].alias < 0 && L->place[in].bytes == L->place[out].bytes)
      L->place[out].alias = in;
  }

  /* (3) offsets. Params (and their gradients, same offsets) in parameter order. */
  L->params = pd_malloc((size_t)(g->nparams ? g->nparams : 1) * sizeof(int));
  for (int p = 0; p < g->nparams; p++) {
    int w = g->params[p].tensor;
    if (!touched[w]) continue;
    L->params[L->nparams++] = p;
    L->place[w].offset = L->total[BUF_PARAMS];
    L->total[BUF_PARAMS] += align_up(L->place[w].bytes);
  }
  L->total[BUF_GRADS] = L->total[BUF_PARAMS];
  for (int t = 0; t < nt; t++) {
    TensorPlace *pl = &L->place[t];
    if (pl->cls == BUF_GRADS && pl->alias < 0) {
      int p = g->tensors[t].param >= 0 ? g->tensors[t].param : gparam[t];
      PD_CHECK(p >= 0, "(gradient tensor %d has no parameter)", t);
      int w = g->params[p].tensor;
      pl->offset = touched[w] ? L->place[w].offset : L->total[BUF_GRADS];
      if (!touched[w]) L->total[BUF_GRADS] += align_up(pl->bytes);
    } else if (pl->cls == BUF_INPUTS || pl->cls == BUF_STASH || pl->cls == BUF_BOUNDARY) {
      pl->offset = L->total[pl->cls];
      L->total[pl->cls] += align_up(pl->bytes);
    }
  }

  /* WORK by liveness. An alias extends its root's interval to its own last use. */
  int *root = pd_malloc((size_t)nt * sizeof(int));
  for (int t = 0; t < nt; t++) root[t] = t;
  for (int t = 0; t < nt; t++)
    if (L->place[t].alias >= 0 && L->place[t].cls == BUF_WORK) {
      int r = L->place[t].alias;
      while (L->place[r].alias >= 0) r = L->place[r].alias;
      root[t] = r;
    }
  int *end = pd_malloc((size_t)nt * sizeof(int));
  for (int t = 0; t < nt; t++) end[t] = -1;
  for (int k = 0; k < norder; k++) {
    const Op *op = &g->ops[order[k]];
    for (int i = 0; i < op->nout; i++) {
      int t = op->out[i];
      if (end[root[t]] < k) end[root[t]] = k; /* a value nobody reads dies at birth */
    }
  }
  for (int t = 0; t < nt; t++)
    if (last[t] > end[root[t]]) end[root[t]] = last[t];

  WorkAlloc w = {0};
  for (int k = 0; k < norder; k++) {
    int o = order[k];
    const Op *op = &g->ops[o];
    /* Sizes are float32 bytes; a float64 program doubles every offset and size. */
    int64_t sc = layout_op_scratch_elems(g, op, b) * 4;
    for (int i = 0; i < op->nout; i++) {
      const TensorPlace *pl = &L->place[op->out[i]];
      if (pl->accumulate && pl->alias < 0 && !layout_accumulates_natively(op->kind))
        sc = align_up(sc) + pl->bytes; /* compute into scratch, then add */
    }
    if (sc > 0) {
      L->scratch_bytes[o] = sc;
      L->scratch_off[o] = work_alloc(&w, sc, -1 - o);
    }
    for (int i = 0; i < op->nout; i++) {
      int t = op->out[i];
      if (L->place[t].cls != BUF_WORK) continue;
      if (root[t] != t) continue; /* placed with its root below */
      L->place[t].offset = work_alloc(&w, L->place[t].bytes, t);
    }
    if (sc > 0) work_free(&w, -1 - o);
    /* Release every WORK root whose life ends here (inputs read last, dead outputs). */
    for (int i = 0; i < op->nin + op->nout; i++) {
      int t = i < op->nin ? op->in[i] : op->out[i - op->nin];
      int r = root[t];
      if (L->place[r].cls != BUF_WORK || end[r] != k) continue;
      end[r] = -2; /* released */
      work_free(&w, r);
    }
  }
  PD_CHECK(w.n == 0, "(%d WORK intervals still live after the stage's last op)", w.n);
  L->total[BUF_WORK] = align_up(w.peak);
  free(w.v);
  /* Aliases take their target's place. */
  for (int t = 0; t < nt; t++) {
    TensorPlace *pl = &L->place[t];
    if (pl->alias < 0) continue;
    int r = pl->alias;
    while (L->place[r].alias >= 0) r = L->place[r].alias;
    pl->cls = L->place[r].cls;
    pl->offset = L->place[r].offset;
  }
  free(root);
  free(end);
  free(gparam);
  free(order);
  free(read_fwd);
  free(read_bwd);
  free(read_out);
  free(touched);
  free(nuse);
  free(last);
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
      fputc('\n', out);
    }
}
