/* passes/plan_input.c — the planner's input: segments and tied groups.
 *
 * A segment is one IR region (prologue, one block copy, epilogue). Costs come from
 * the op table at b = 1 and are therefore "per sample". What crosses a boundary
 * after segment r is every forward activation produced in a region <= r and read by
 * a forward op in a region > r (the residual stream, not just the last op's output).
 */
#include "passes/planner.h"

#include <string.h>

#include "passes/layout.h"

void plan_input_init(PlanInput *in, const char *name) {
  memset(in, 0, sizeof *in);
  in->name = pd_strdup(name ? name : "model");
}

void plan_input_free(PlanInput *in) {
  for (int i = 0; i < in->nsegs; i++) free(in->segs[i].name), free(in->segs[i].cuda), free(in->segs[i].ops);
  for (int i = 0; i < in->ntied; i++) free(in->tied[i].name), free(in->tied[i].segs);
  free(in->segs);
  free(in->tied);
  free(in->name);
  memset(in, 0, sizeof *in);
}

PlanSegment *plan_input_add_segment(PlanInput *in, const char *name) {
  if (in->nsegs == in->cap_segs) {
    in->cap_segs = in->cap_segs ? 2 * in->cap_segs : 16;
    in->segs = pd_realloc(in->segs, (size_t)in->cap_segs * sizeof *in->segs);
  }
  PlanSegment *s = &in->segs[in->nsegs++];
  memset(s, 0, sizeof *s);
  s->name = pd_strdup(name);
  return s;
}

void plan_segment_add_cuda(PlanSegment *s, PlanCudaTerm t) {
  s->cuda = pd_realloc(s->cuda, (size_t)(s->ncuda + 1) * sizeof *s->cuda);
  s->cuda[s->ncuda++] = t;
}

/* The op's cuda_scratch needs as exact linear functions of b: layout.h's counts at
 * b = 1 and b = 2 (element counts are linear in b: numel(b) = b·numel(1) for a batched
 * shape, constant otherwise). stored (bf16 plans, else NULL): per tensor, kept as
 * bfloat16 in the stash whatever the partition (an activation a backward op reads),
 * so read in place, not staged (layout_cuda_scratch_bytes; a tensor stored only
 * because it crosses the chosen partition's boundary is counted staged here), and the
 * classifier's gradient the layout keeps over the stored logits (layout.h). */
static void add_cuda_terms(const Graph *g, const Op *op, const int64_t *ld, int flash_hs, const bool *stored,
                           PlanSegment *s) {
  int64_t a1, b1, a2, b2;
  int ia = 0, ib = 1; /* the operands' input indices */
  bool gemm = layout_cuda_gemm_operands(g, op, ld, 1, &a1, &b1);
  if (gemm) {
    layout_cuda_gemm_operands(g, op, ld, 2, &a2, &b2);
  } else if (layout_cuda_attention_operands(g, op, flash_hs, 1, &a1, &b1)) { /* staged like a GEMM's */
    layout_cuda_attention_operands(g, op, flash_hs, 2, &a2, &b2);
    AttnGeom ag;
    op_attention_geom(g, op, &ag);
    gemm = true, ib = ag.fwd ? -1 : 0;
    ia = ag.packed ? (ag.fwd ? 0 : 1) : -1; /* attention_gqa's q, k, v: counted staged (layout_cuda.c alike) */
  }
  if (gemm) {
    if (stored && ia >= 0 && stored[op->in[ia]]) a1 = a2 = 0;
    if (stored && ib >= 0 && stored[op->in[ib]]) b1 = b2 = 0;
    plan_segment_add_cuda(s, (PlanCudaTerm){true, a2 - a1, 2 * a1 - a2, b2 - b1, 2 * b1 - b2});
  } else if (op->fwd_op < 0 && (a1 = layout_cuda_ce_rows(g, op, 1)) > 0) {
    a2 = layout_cuda_ce_rows(g, op, 2);
    plan_segment_add_cuda(s, (PlanCudaTerm){false, a2 - a1, 2 * a1 - a2, 0, 0});
  }
}

void plan_segment_add_op(PlanSegment *s, PlanOpTerm t) {
  if ((s->nops & (s->nops - 1)) == 0) /* grows at powers of two */
    s->ops = pd_realloc(s->ops, (size_t)(s->nops ? 2 * s->nops : 1) * sizeof *s->ops);
  s->ops[s->nops++] = t;
}

/* The op's FLOPs and bytes as linear functions of b (the op table at b = 1, 2). */
static void add_op_term(const Graph *g, const Op *op, const int64_t *ld, PlanSegment *s) {
  if (!op_info[op->kind].cost) return;
  OpCost c1 = op_info[op->kind].cost(g, op, 1), c2 = op_info[op->kind].cost(g, op, 2);
  if (c1.flops == 0 && c1.bytes == 0 && c2.flops == 0 && c2.bytes == 0) return; /* views */
  int64_t x, y;
  PlanOpTerm t = {layout_cuda_gemm_operands(g, op, ld, 1, &x, &y), op->fwd_op >= 0, c2.flops - c1.flops,
                  2 * c1.flops - c2.flops, c2.bytes - c1.bytes, 2 * c1.bytes - c2.bytes};
  plan_segment_add_op(s, t);
}

int plan_input_add_tied(PlanInput *in, const char *name, int64_t count, const int *segs,
                        int nsegs) {
  PD_CHECK(nsegs > 0, "tied group of %d segments", nsegs);
  if (in->ntied == in->cap_tied) {
    in->cap_tied = in->cap_tied ? 2 * in->cap_tied : 4;
    in->tied = pd_realloc(in->tied, (size_t)in->cap_tied * sizeof *in->tied);
  }
  PlanTied *t = &in->tied[in->ntied];
  memset(t, 0, sizeof *t);
  t->name = pd_strdup(name);
  t->count = count;
  t->nsegs = nsegs;
  t->segs = pd_malloc((size_t)nsegs * sizeof *t->segs);
  for (int i = 0; i < nsegs; i++) {
    PD_CHECK(segs[i] >= 0 && segs[i] < in->nsegs && (i == 0 || segs[i] > segs[i - 1]), "tied segment %d", segs[i]);
    t->segs[i] = segs[i];
  }
  return in->ntied++;
}

/* A differentiated segment's STASH, WORK and INPUTS blocks as its own stage program
 * lays them out (the layout codegen and plan_apply_layouts use), as per-sample and
 * fixed parts from b = 1 and b = 2. O(segment): the index holds the whole-graph part. */
static void layout_segment(LayoutIndex *ix, int r, PlanSegment *s) {
  int64_t t1[BUF_CLASS_COUNT], t2[BUF_CLASS_COUNT];
  layout_stage_totals(ix, r, r, 1, t1);
  layout_stage_totals(ix, r, r, 2, t2);
  double st1 = (double)t1[BUF_STASH], st2 = (double)t2[BUF_STASH];
  double w1 = (double)t1[BUF_WORK], w2 = (double)t2[BUF_WORK];
  double i1 = (double)t1[BUF_INPUTS], i2 = (double)t2[BUF_INPUTS];
  s->stash_bytes = st2 - st1, s->stash_fixed = 2 * st1 - st2;
  s->workspace_bytes = w2 - w1, s->workspace_fixed = 2 * w1 - w2;
  s->inputs_bytes = i2 - i1, s->inputs_fixed = 2 * i1 - i2;
}

/* Per sample, as layout.h places it (padded rows included: ld = layout_row_strides). */
static double tensor_bytes(const Graph *g, const int64_t *ld, int t) {
  return (double)layout_padded_numel(g, ld, t, 1) * (double)dtype_size(g->tensors[t].dtype);
}

/* add_cuda_terms's `stored` of a bf16 plan (caller frees). */
static bool *stored_tensors(const Graph *g) {
  bool *stored = pd_calloc((size_t)g->ntensors, sizeof(bool));
  for (int i = 0; i < g->nops; i++)
    for (int j = 0; j < g->ops[i].nin && g->ops[i].fwd_op >= 0; j++) {
      int t = g->ops[i].in[j];
      stored[t] = g->tensors[t].kind == TK_ACT && layout_bf16_storable(g, t);
    }
  for (int i = 0; i < g->nops; i++) /* the classifier's gradient, kept over the logits */
    if (g->ops[i].kind == OP_CROSS_ENTROPY_BWD && layout_classifier_grad_ok(g, g->ops[i].out[0]))
      stored[g->ops[i].out[0]] = true;
  return stored;
}

bool plan_input_from_graph(const Graph *g, PlanInput *out) { return plan_input_from_graph_bf16(g, false, out); }

bool plan_input_from_graph_bf16(const Graph *g, bool bf16, PlanInput *out) {
  plan_input_init(out, g->name);
  if (g->nregions == 0 || g->nops == 0) return false;
  int R = g->nregions;
  for (int r = 0; r < R; r++) plan_input_add_segment(out, g->regions[r].name);
  out->batch = g->train.batch;
  out->microbatch = g->train.microbatch;
  out->flush_steps = g->train.flush_steps > 0 ? g->train.flush_steps : 0;
  out->predict = g->train.predict > 0;
  out->sgd = g->train.optimizer == OPT_SGD;
  out->steps = g->train.steps;

  bool has_bwd = false;
  for (int i = 0; i < g->nops; i++)
    if (g->ops[i].fwd_op >= 0) has_bwd = true;

  /* Per tensor: the region that produces it and the last forward region that reads
   * it; whether a backward op reads it. */
  int *last_use = pd_malloc((size_t)g->ntensors * sizeof(int));
  bool *bwd_reads = pd_calloc((size_t)g->ntensors, sizeof(bool));
  bool *stored = bf16 ? stored_tensors(g) : NULL;
  for (int t = 0; t < g->ntensors; t++) last_use[t] = -1;
  int flash_hs = layout_cuda_flash_head_size(g);
  int64_t *ld = layout_row_strides(g);
  for (int i = 0; i < g->nops; i++) {
    const Op *op = &g->ops[i];
    PD_CHECK(op->region >= 0 && op->region < R, "op %d region %d", i, op->region);
    PlanSegment *s = &out->segs[op->region];
    add_cuda_terms(g, op, ld, flash_hs, stored, s);
    add_op_term(g, op, ld, s);
    OpCost c = op_info[op->kind].cost ? op_info[op->kind].cost(g, op, 1) : (OpCost){0, 0};
    if (op->fwd_op >= 0) {
      s->bwd_flops += c.flops;
      s->bwd_bytes += c.bytes;
    } else {
      s->fwd_flops += c.flops;
      s->fwd_bytes += c.bytes;
    }
    for (int j = 0; j < op->nin; j++) {
      int t = op->in[j];
      if (op->fwd_op >= 0) bwd_reads[t] = true;
      else if (op->region > last_use[t]) last_use[t] = op->region;
    }
  }
  /* crossing[r]: the change in out_bytes at region r (summed below), so that an
   * activation read many regions later costs O(1), not a loop over those regions */
  double *crossing = pd_calloc((size_t)R + 1, sizeof *crossing);
  for (int t = 0; t < g->ntensors; t++) {
    const Tensor *T = &g->tensors[t];
    if (T->kind == TK_INPUT) out->input_bytes += tensor_bytes(g, ld, t);
    if (T->kind != TK_ACT || T->producer < 0) continue;
    const Op *p = &g->ops[T->producer];
    if (p->fwd_op >= 0) continue;
    /* what the stash and the boundary hold of it: bf16 layouts store it in 2 bytes */
    double bytes = tensor_bytes(g, ld, t) / (bf16 && layout_bf16_storable(g, t) ? 2 : 1);
    /* Stash: read by the backward; without a backward yet, every activation. */
    if (!has_bwd || bwd_reads[t]) out->segs[p->region].stash_bytes += bytes;
    if (p->region < last_use[t]) { /* crosses every boundary in between */
      crossing[p->region] += bytes;
      crossing[last_use[t]] -= bytes;
    }
    if (tensor_bytes(g, ld, t) > out->segs[p->region].workspace_bytes) /* computed on in float32 */
      out->segs[p->region].workspace_bytes = tensor_bytes(g, ld, t);
  }
  double run = 0;
  for (int r = 0; r < R; r++) {
    run += crossing[r];
    out->segs[r].out_bytes += run;
  }
  free(crossing);
  if (!has_bwd)
    for (int r = 0; r < R; r++) {
      out->segs[r].bwd_flops = 2 * out->segs[r].fwd_flops;
      out->segs[r].bwd_bytes = 2 * out->segs[r].fwd_bytes;
    }
  else {
    LayoutIndex *ix = layout_index_create(g);
    ix->bf16 = bf16;
    for (int r = 0; r < R; r++) layout_segment(ix, r, &out->segs[r]);
    layout_index_destroy(ix);
  }

  /* Parameters: own region, unless used from several (tied). reader[t]: the region
   * of the last forward op reading tensor t (-1: none), for a param declared in one
   * region and used once in another. */
  int *reader = pd_malloc((size_t)g->ntensors * sizeof *reader);
  for (int t = 0; t < g->ntensors; t++) reader[t] = -1;
  for (int i = 0; i < g->nops; i++)
    for (int j = 0; j < g->ops[i].nin && g->ops[i].fwd_op < 0; j++) reader[g->ops[i].in[j]] = g->ops[i].region;
  bool *used = pd_calloc((size_t)R, sizeof(bool));
  int *segs = pd_malloc((size_t)R * sizeof *segs);
  for (int pi = 0; pi < g->nparams; pi++) {
    const Param *P = &g->params[pi];
    const Tensor *T = &g->tensors[P->tensor];
    int64_t n = shape_numel(&T->shape, 1);
    if (P->nuses_regions <= 1) {
      int r = reader[P->tensor] >= 0 ? reader[P->tensor] : P->region >= 0 && P->region < R ? P->region : 0;
      out->segs[r].params += n;
      continue;
    }
    memset(used, 0, (size_t)R * sizeof(bool));
    for (int i = 0; i < g->nops; i++)
      for (int j = 0; j < g->ops[i].nin; j++)
        if (g->ops[i].in[j] == P->tensor && g->ops[i].fwd_op < 0) used[g->ops[i].region] = true;
    int ns = 0;
    for (int r = 0; r < R; r++)
      if (used[r]) segs[ns++] = r;
    if (ns == 0) segs[ns++] = P->region >= 0 && P->region < R ? P->region : 0;
    plan_input_add_tied(out, T->name, n, segs, ns);
  }
  free(used);
  free(segs);
  free(reader);
  free(last_use);
  free(bwd_reads);
  free(stored);
  free(ld);
  return true;
}
