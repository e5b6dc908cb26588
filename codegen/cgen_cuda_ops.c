/* codegen/cgen_cuda_ops.c — the launches of one op that is not fused: the entries of a
 * stage's launch list (cgen_cuda.c writes the list; docs/plan-format.md its format).
 *
 * The mapping op -> launches mirrors cgen_c.c's emit_op call for call: the same
 * accumulation rules (layout's `accumulate`, a scratch temporary plus axpy for ops
 * that cannot add into their output), the same scratch, the same Philox streams
 * (seed, forward op id, microbatch), so the two backends compute the same thing.
 * Differences, all GPU-specific: linear's bias is added after its GEMM (beta 0,
 * usually fused with what follows), embedding_bwd zero-fills then adds atomically,
 * cross-entropy reduces through cuda_scratch, layernorm_bwd and attention_bwd are
 * two and three kernels. emit_op sends each op by the table's family: a generic
 * family's op to the launch cgen_lower.h derives from its row (the KernelCall the C
 * program's call comes from), the others to their family's emitter. Kept apart from
 * cgen_cuda.c (the list, the kernel names, the two modules' text) as the one place
 * that knows each op's kernels and arguments. */
#include "codegen/cgen_cuda_internal.h"
#include "codegen/cgen_lower.h"

/* ---- shapes, strides and arguments ----------------------------------------------- */

static int64_t lastd(const CuEmit *e, int t) {
  const Shape *s = &e->g->tensors[t].shape;
  return s->rank ? s->dim[s->rank - 1] : 1;
}
static int64_t rows(const CuEmit *e, int t) { return cu_numel(e, t) / lastd(e, t); }
/* t's row stride in its place: its last dimension, or the padding layout.h gives the
 * classifier's logits and their gradient (every GEMM and cross-entropy launch passes it) */
static int64_t ld(const CuEmit *e, int t) { return e->L->ld[t]; }
static bool acc(const CuEmit *e, int t) { return e->L->place[t].accumulate; }

static cJSON *P(const CuEmit *e, int t) { return cu_arg_ptr(cu_tensor(e, t)); }
static cJSON *PP(CuPlace p) { return cu_arg_ptr(p); }
static cJSON *NUL(void) { return cu_arg_ptr((CuPlace){-1, 0}); }
static cJSON *I32(int64_t v) {
  PD_CHECK(v >= -2147483648LL && v <= 2147483647LL, "(%lld does not fit a kernel's int)", (long long)v);
  return cu_arg_num("i32", (double)v);
}
static cJSON *I64(int64_t v) { return cu_arg_num("i64", (double)v); }
static cJSON *F32(double v) { return cu_arg_num("f32", v); }
static cJSON *SEED(void) { return cu_arg_runtime("u64", "seed", 0); }
/* The random kernels' mbkey: the microbatch key in cuda_scratch (NULL when p is 0:
 * the kernel then never reads it, and the pass needs no key). */
static cJSON *MB(double p) { return p > 0 ? PP(cu_buf(CU_SCRATCH, CU_SCRATCH_MBKEY)) : NUL(); }
static cJSON *DROP(double p) {
  return p > 0 ? cu_arg_runtime("f64", "dropout_p", p) : cu_arg_num("f64", 0);
}
static cJSON *BAD(void) { return PP(cu_buf(CU_SCRATCH, CU_SCRATCH_BAD)); }

#define LAUNCH(e, op, name, items, ...)                                                            \
  cu_launch(e, op, name, cu_kernel_kind(name), items, CU_BLOCK,                                         \
            (int)(sizeof((cJSON *[]){__VA_ARGS__}) / sizeof(cJSON *)), __VA_ARGS__)
#define LAUNCH_B(e, op, name, items, block, ...)                                                   \
  cu_launch(e, op, name, cu_kernel_kind(name), items, block,                                             \
            (int)(sizeof((cJSON *[]){__VA_ARGS__}) / sizeof(cJSON *)), __VA_ARGS__)

/* One row-major GEMM: C[M,N] = alpha·op(A)·op(B) + beta·C (pk_sgemm_fn, cuda_gemm).
 * bf16: A and B first go through cu_stage_bf16 (a weight's or a stored tensor's bf16
 * copy, or a cast), C f32. */
static void gemm(CuEmit *e, int op, int ta, int tb, int64_t M, int64_t N, int64_t K, double alpha,
                 CuPlace A, int64_t lda, CuPlace B, int64_t ldb, double beta, CuPlace C, int64_t ldc) {
  PD_CHECK(M <= 2147483647LL && N <= 2147483647LL && K <= 2147483647LL, "(GEMM too large)");
  if (e->o->gemm == GEMM_BF16) { /* every GEMM's A and B are its op's in[0] and in[1] */
    int64_t a_end, b_end;
    const Op *o = &e->g->ops[op];
    A = cu_stage_bf16(e, op, o->in[0], A, ta ? K : M, ta ? M : K, lda, cu_bf16_staging(e), &a_end);
    B = cu_stage_bf16(e, op, o->in[1], B, tb ? N : K, tb ? K : N, ldb, cu_bf16_align(a_end), &b_end);
  }
  cJSON *l = cJSON_CreateObject();
  cJSON_AddNumberToObject(l, "op", op - e->op_base);
  cJSON *gm = cJSON_AddObjectToObject(l, "gemm");
  cJSON_AddNumberToObject(gm, "transa", ta);
  cJSON_AddNumberToObject(gm, "transb", tb);
  cJSON_AddNumberToObject(gm, "M", (double)M);
  cJSON_AddNumberToObject(gm, "N", (double)N);
  cJSON_AddNumberToObject(gm, "K", (double)K);
  cJSON_AddNumberToObject(gm, "lda", (double)lda);
  cJSON_AddNumberToObject(gm, "ldb", (double)ldb);
  cJSON_AddNumberToObject(gm, "ldc", (double)ldc);
  cJSON_AddNumberToObject(gm, "alpha", alpha);
  cJSON_AddNumberToObject(gm, "beta", beta);
  cJSON_AddItemToObject(gm, "A", cu_place_json(A));
  cJSON_AddItemToObject(gm, "B", cu_place_json(B));
  cJSON_AddItemToObject(gm, "C", cu_place_json(C));
  cJSON_AddStringToObject(gm, "dtype", gemm_type_name(e->o->gemm));
  cJSON_AddItemToArray(e->list, l);
}

/* ---- the ops --------------------------------------------------------------------- */

/* True when t was placed on (accumulated into) the same gradient as `into`. */
static bool folded_into(const CuEmit *e, int t, int into) {
  const TensorPlace *a = &e->L->place[t], *b = &e->L->place[into];
  return a->alias >= 0 && a->cls == b->cls && a->offset == b->offset && a->accumulate;
}

static CuPlace scratch_of(const CuEmit *e, const Op *op) {
  return cu_buf(BUF_WORK, e->L->scratch_off[op->id]);
}

/* The temporary an op computes into when it must add into a gradient but cannot. */
static CuPlace acc_temp(const CuEmit *e, const Op *op) {
  int64_t k = layout_op_scratch_elems(e->g, op, e->L->b) * 4;
  k = (k + LAYOUT_ALIGN - 1) / LAYOUT_ALIGN * LAYOUT_ALIGN;
  return cu_buf(BUF_WORK, e->L->scratch_off[op->id] + k);
}

static void need_scratch(CuEmit *e, int64_t bytes) {
  if (bytes > e->scratch) e->scratch = bytes;
}

/* Attention on tensor cores (kernels/cuda_flash_*.cuh) in a bf16 plan whose head
 * size qualifies (layout_cuda_attention_operands; fp32 and tf32 plans keep the fp32
 * kernels, exact to the CPU's attention): qkv, and backward dy, cast to bf16 into
 * cuda_scratch's staging (as a bf16 GEMM's operands: the same bytes, qkv then dy), then
 * the forward (out and lse), or the backward's dq and dkv kernels (lse from the
 * forward, D already in the op's scratch: emit_attention). */
static void emit_flash_attention(CuEmit *e, const Op *op, CuPlace Y, int64_t B, int64_t T, int64_t C) {
  bool fwd = op->kind == OP_ATTENTION;
  int qkv = op->in[fwd ? 0 : 1], NH = (int)op->attr[0], causal = (int)op->attr[1];
  double p = op->attr[2];
  int stream = op_rng_stream(op);
  int64_t tiles = B * NH * ((T + CU_FLASH_ROWS - 1) / CU_FLASH_ROWS), end;
  CuPlace Q16 = cu_stage_bf16(e, op->id, qkv, cu_tensor(e, qkv), B * T, 3 * C, 3 * C, cu_bf16_staging(e), &end);
  if (fwd) {
    LAUNCH_B(e, op->id, "pkc_flash_attention_fwd_bf16", tiles, CU_FLASH_BLOCK, PP(Y), P(e, op->out[1]),
             PP(Q16), I32(B), I32(T), I32(C), I32(NH), I32(causal), DROP(p), SEED(), cu_arg_stream(e, stream), MB(p));
    return;
  }
  CuPlace Y16 = cu_stage_bf16(e, op->id, op->in[0], cu_tensor(e, op->in[0]), B * T, C, C, cu_bf16_align(end), &end);
  CuPlace work = scratch_of(e, op);
  LAUNCH_B(e, op->id, "pkc_flash_attention_bwd_dq_bf16", tiles, CU_FLASH_BLOCK, PP(Y), P(e, op->in[3]), PP(work),
           PP(Y16), PP(Q16), I32(B), I32(T), I32(C), I32(NH), I32(causal), DROP(p), SEED(), cu_arg_stream(e, stream), MB(p));
  LAUNCH_B(e, op->id, "pkc_flash_attention_bwd_dkv_bf16", tiles, CU_FLASH_BLOCK, PP(Y), P(e, op->in[3]),
           PP(work), PP(Y16), PP(Q16), I32(B), I32(T), I32(C), I32(NH), I32(causal), DROP(p), SEED(),
           cu_arg_stream(e, stream), MB(p));
}

/* attention(qkv) -> (out, lse); attention_bwd(dy, qkv, out, lse): FlashAttention-2's
 * backward, D = rowsum(dy∘out) per query row into the op's scratch (B·NH·T floats)
 * first, then dq and dkv from lse and D (kernels/cuda_kernels.cuh). */
/* attention_gqa on tensor cores in a bf16 plan (as emit_flash_attention): q, k, v (and
 * backward dy) cast to bf16 into the staging, each from an aligned offset, then the
 * forward, or the backward's dq and dkv kernels (D already in the op's scratch). */
static void emit_flash_attention_gqa(CuEmit *e, const Op *op, const AttnGeom *a, CuPlace Y, int64_t B) {
  int q = a->fwd ? 0 : 1, stream = op_rng_stream(op);
  int64_t T = a->T, ntile = (T + CU_FLASH_ROWS - 1) / CU_FLASH_ROWS, end = cu_bf16_staging(e);
  CuPlace X16[4];
  for (int j = 0; j < 3; j++) {
    int t = op->in[q + j];
    int64_t cols = (j ? a->kv_heads : a->heads) * a->hs;
    X16[j] = cu_stage_bf16(e, op->id, t, cu_tensor(e, t), B * T, cols, cols, j ? cu_bf16_align(end) : end, &end);
  }
  if (a->fwd) {
    LAUNCH_B(e, op->id, "pkc_flash_attention_gqa_fwd_bf16", B * a->heads * ntile, CU_FLASH_BLOCK, PP(Y),
             P(e, op->out[1]), PP(X16[0]), PP(X16[1]), PP(X16[2]), I32(B), I32(T), I32(a->heads), I32(a->kv_heads),
             I32(a->hs), I32(a->causal), DROP(a->p), SEED(), cu_arg_stream(e, stream), MB(a->p));
    return;
  }
  int64_t C = a->heads * a->hs;
  X16[3] = cu_stage_bf16(e, op->id, op->in[0], cu_tensor(e, op->in[0]), B * T, C, C, cu_bf16_align(end), &end);
  CuPlace work = scratch_of(e, op);
  LAUNCH_B(e, op->id, "pkc_flash_attention_gqa_bwd_dq_bf16", B * a->heads * ntile, CU_FLASH_BLOCK, PP(Y),
           P(e, op->in[5]), PP(work), PP(X16[3]), PP(X16[0]), PP(X16[1]), PP(X16[2]), I32(B), I32(T), I32(a->heads),
           I32(a->kv_heads), I32(a->hs), I32(a->causal), DROP(a->p), SEED(), cu_arg_stream(e, stream), MB(a->p));
  LAUNCH_B(e, op->id, "pkc_flash_attention_gqa_bwd_dkv_bf16", B * a->kv_heads * ntile, CU_FLASH_BLOCK,
           P(e, op->out[1]), P(e, op->out[2]), P(e, op->in[5]), PP(work), PP(X16[3]), PP(X16[0]), PP(X16[1]),
           PP(X16[2]), I32(B), I32(T), I32(a->heads), I32(a->kv_heads), I32(a->hs), I32(a->causal), DROP(a->p), SEED(),
           cu_arg_stream(e, stream), MB(a->p));
}

/* attention_gqa(q, k, v) -> (out, lse); attention_gqa_bwd(dy, q, k, v, out, lse) ->
 * dq, dk, dv: the fp32 kernels, or in a bf16 plan whose head size qualifies the
 * tensor-core ones; the backward after the same delta kernel as attention's. */
static void emit_attention_gqa(CuEmit *e, const Op *op, CuPlace Y) {
  AttnGeom a;
  op_attention_geom(e->g, op, &a);
  int64_t T = a.T, C = a.heads * a.hs, B = cu_numel(e, a.q) / (T * C), qe, de;
  int stream = op_rng_stream(op);
  int64_t items = B * a.heads * T;
  bool flash =
      e->o->gemm == GEMM_BF16 && layout_cuda_attention_operands(e->g, op, e->flash_hs, e->L->b, &qe, &de);
  if (a.fwd && flash) {
    emit_flash_attention_gqa(e, op, &a, Y, B);
    return;
  }
  if (a.fwd) {
    LAUNCH_B(e, op->id, "pkc_attention_gqa_fwd_f32", items, CU_ATT_BLOCK, PP(Y), P(e, op->out[1]), P(e, op->in[0]),
             P(e, op->in[1]), P(e, op->in[2]), I32(B), I32(T), I32(a.heads), I32(a.kv_heads), I32(a.hs),
             I32(a.causal), DROP(a.p), SEED(), cu_arg_stream(e, stream), MB(a.p));
    return;
  }
  CuPlace work = scratch_of(e, op);
  PD_CHECK(e->L->scratch_bytes[op->id] >= B * a.heads * T * 4, "(attention_gqa_bwd scratch too small)");
  LAUNCH_B(e, op->id, "pkc_attention_bwd_delta_f32", items, CU_ATT_BLOCK, PP(work), P(e, op->in[0]),
           P(e, op->in[4]), I32(B), I32(T), I32(C), I32(a.heads));
  if (flash) {
    emit_flash_attention_gqa(e, op, &a, Y, B);
    return;
  }
  LAUNCH_B(e, op->id, "pkc_attention_gqa_bwd_dq_f32", items, CU_ATT_BLOCK, PP(Y), P(e, op->in[5]), PP(work),
           P(e, op->in[0]), P(e, op->in[1]), P(e, op->in[2]), P(e, op->in[3]), I32(B), I32(T), I32(a.heads),
           I32(a.kv_heads), I32(a.hs), I32(a.causal), DROP(a.p), SEED(), cu_arg_stream(e, stream), MB(a.p));
  LAUNCH_B(e, op->id, "pkc_attention_gqa_bwd_dkv_f32", B * a.kv_heads * T, CU_ATT_BLOCK, P(e, op->out[1]),
           P(e, op->out[2]), P(e, op->in[5]), PP(work), P(e, op->in[0]), P(e, op->in[1]), P(e, op->in[2]),
           P(e, op->in[3]), I32(B), I32(T), I32(a.heads), I32(a.kv_heads), I32(a.hs), I32(a.causal), DROP(a.p),
           SEED(), cu_arg_stream(e, stream), MB(a.p));
}

static void emit_attention(CuEmit *e, const Op *op, CuPlace Y) {
  const Graph *g = e->g;
  AttnGeom ag;
  if (op_attention_geom(g, op, &ag) && !ag.packed) {
    emit_attention_gqa(e, op, Y);
    return;
  }
  bool fwd = op->kind == OP_ATTENTION;
  int qkv = op->in[fwd ? 0 : 1];
  int64_t T = g->tensors[qkv].shape.dim[1], C = lastd(e, qkv) / 3, B = cu_numel(e, qkv) / (T * 3 * C);
  int NH = (int)op->attr[0], causal = (int)op->attr[1];
  double p = op->attr[2];
  int stream = op_rng_stream(op);
  int64_t items = B * NH * T, qe, de;
  CuPlace work = scratch_of(e, op);
  if (!fwd) {
    PD_CHECK(e->L->scratch_bytes[op->id] >= B * NH * T * 4, "(attention_bwd scratch too small)");
    LAUNCH_B(e, op->id, "pkc_attention_bwd_delta_f32", items, CU_ATT_BLOCK, PP(work), P(e, op->in[0]),
             P(e, op->in[2]), I32(B), I32(T), I32(C), I32(NH));
  }
  if (e->o->gemm == GEMM_BF16 && layout_cuda_attention_operands(g, op, e->flash_hs, e->L->b, &qe, &de)) {
    emit_flash_attention(e, op, Y, B, T, C);
    return;
  }
  if (fwd) {
    LAUNCH_B(e, op->id, "pkc_attention_fwd_f32", items, CU_ATT_BLOCK, PP(Y), P(e, op->out[1]), P(e, qkv),
             I32(B), I32(T), I32(C), I32(NH), I32(causal), DROP(p), SEED(), cu_arg_stream(e, stream), MB(p));
    return;
  }
  LAUNCH_B(e, op->id, "pkc_attention_bwd_dq_f32", items, CU_ATT_BLOCK, PP(Y), P(e, op->in[3]), PP(work),
           P(e, op->in[0]), P(e, qkv), I32(B), I32(T), I32(C), I32(NH), I32(causal), DROP(p), SEED(),
           cu_arg_stream(e, stream), MB(p));
  LAUNCH_B(e, op->id, "pkc_attention_bwd_dkv_f32", items, CU_ATT_BLOCK, PP(Y), P(e, op->in[3]), PP(work),
           P(e, op->in[0]), P(e, qkv), I32(B), I32(T), I32(C), I32(NH), I32(causal), DROP(p), SEED(),
           cu_arg_stream(e, stream), MB(p));
}

/* The cross_entropy_bwd of forward cross-entropy `op` when the two run as one
 * classifier kernel in the forward. float32 logits (with fusion on): the stage's
 * backward differentiates op with the same targets and ignore index, the layout put
 * its gradient over the logits, and no other op of the graph reads the logits, so
 * pkc_classifier_f32 may overwrite them with the gradient in place. Else NULL. (One
 * scan of the graph per cross-entropy op: a model has one.) bf16 logits (a bf16
 * plan's stash): the layout decides (StageLayout.cls_grad, passes/layout.h: "the
 * classifier's gradient in the stash"; fused or not, since the layout gave the
 * backward no working place for it): pkc_classifier_bf16 reads the forward's float32
 * logits and writes the gradient as bf16 into the logits' stored place, which is the
 * gradient's place (their cast down is not emitted), and the backward's GEMMs read it
 * there (cu_stage_bf16). The C program does the same (cgen_c.c). */
static const Op *classifier_bwd(const CuEmit *e, const Op *op) {
  const TensorPlace *lp = &e->stored->place[op->in[0]];
  if (lp->bf16) /* the layout's choice, as cu_find_classifier found it (one per stage) */
    return e->cls_grad >= 0 && e->stored->place[e->cls_grad].alias == op->in[0] && op->in[0] == e->cls_logits
               ? &e->g->ops[e->cls_bwd]
               : NULL;
  if (!e->o->fuse) return NULL;
  for (int k = 0; k < e->L->nbwd; k++) {
    const Op *b = &e->g->ops[e->L->bwd_ops[k]];
    if (b->kind != OP_CROSS_ENTROPY_BWD || b->fwd_op != op->id) continue;
    const TensorPlace *pl = &e->L->place[b->out[0]];
    bool same = b->in[0] == op->in[0] && b->in[1] == op->in[1] && b->attr[0] == op->attr[0];
    if (!same || pl->alias != op->in[0] || pl->accumulate) return NULL;
    for (int o = 0; o < e->g->nops; o++) { /* no other reader would see the gradient */
      const Op *r = &e->g->ops[o];
      for (int i = 0; i < r->nin; i++)
        if (r->in[i] == op->in[0] && r != op && r != b) return NULL;
    }
    return b;
  }
  return NULL;
}

void cu_find_classifier(CuEmit *e) {
  int t = e->stored->bf16 ? e->stored->cls_grad : -1;
  if (t < 0) return;
  const Op *b = &e->g->ops[e->g->tensors[t].producer];
  for (int i = 0; i < e->g->ops[b->fwd_op].nin; i++) PD_CHECK(b->in[i] == e->g->ops[b->fwd_op].in[i]);
  e->cls_logits = b->in[0], e->cls_grad = t, e->cls_bwd = b->id;
}

/* Where an op's launches write (emit_op works it out, a family's emitter uses it): y,
 * the op's output; Y, y's place or, when y must accumulate but the kernel cannot, the
 * op's scratch temporary (emit_op then adds it into y; layernorm_bwd, which
 * accumulates natively, clears via_temp); A: y is accumulated into; bias_done: see
 * emit_op. */
typedef struct OpDest {
  int y;
  CuPlace Y;
  int A;
  bool via_temp, bias_done;
} OpDest;

/* Ids select rows: embedding, positions and gather, and their gradients. */
static void emit_lookup(CuEmit *e, const Op *op, const OpDest *d) {
  const Graph *g = e->g;
  int y = d->y;
  CuPlace Y = d->Y;
  int A = d->A;
  int id = op->id;
  switch ((int)op->kind) { /* emit_op's switch names every kind; here only the family's */
  case OP_EMBEDDING: /* a version holding the table's bf16 copy (CuEmit.folded): from there */
    if (e->folded && e->folded[op->in[0]])
      LAUNCH(e, id, "pkc_embedding_fwd_bf16_f32", cu_numel(e, op->in[1]) * lastd(e, op->in[0]), PP(Y),
             cu_arg_ptr(cu_buf(CU_PARAMS16, e->L->place[op->in[0]].offset)), P(e, op->in[1]),
             I64(cu_numel(e, op->in[1])), I32(lastd(e, op->in[0])), I32(g->tensors[op->in[0]].shape.dim[0]), BAD());
    else
      LAUNCH(e, id, "pkc_embedding_fwd_f32", cu_numel(e, op->in[1]) * lastd(e, op->in[0]), PP(Y),
             P(e, op->in[0]), P(e, op->in[1]), I64(cu_numel(e, op->in[1])), I32(lastd(e, op->in[0])),
             I32(g->tensors[op->in[0]].shape.dim[0]), BAD());
    break;
  case OP_POSITIONS: {
    int64_t T = lastd(e, op->in[1]), Cc = lastd(e, op->in[0]);
    LAUNCH(e, id, "pkc_positions_fwd_f32", cu_numel(e, op->in[1]) * Cc, PP(Y), P(e, op->in[0]),
           I32(cu_numel(e, op->in[1]) / T), I32(T), I32(Cc));
    break;
  }
  case OP_GATHER: {
    int64_t Pn = lastd(e, op->in[1]), T = g->tensors[op->in[0]].shape.dim[1];
    LAUNCH(e, id, "pkc_gather_fwd_f32", cu_numel(e, y), PP(Y), P(e, op->in[0]), P(e, op->in[1]),
           I32(cu_numel(e, op->in[1]) / Pn), I32(T), I32(Pn), I32(lastd(e, y)), BAD());
    break;
  }
  case OP_EMBEDDING_BWD: {
    int64_t Cc = lastd(e, y), V = (int64_t)op->attr[0], n = cu_numel(e, op->in[1]);
    if (!A) LAUNCH(e, id, "pkc_fill_f32", V * Cc, PP(Y), F32(0), I64(V * Cc));
    LAUNCH(e, id, "pkc_embedding_bwd_f32", n * Cc, PP(Y), P(e, op->in[0]), P(e, op->in[1]), I64(n), I32(Cc),
           I32(V), BAD());
    break;
  }
  case OP_POSITIONS_BWD: {
    const Shape *dy = &g->tensors[op->in[0]].shape;
    PD_CHECK(dy->rank >= 2, "(positions_bwd: dy of rank %d)", dy->rank); /* and gcc sees T's index */
    int64_t Cc = lastd(e, op->in[0]), T = dy->dim[dy->rank - 2], R = (int64_t)op->attr[0];
    LAUNCH(e, id, "pkc_positions_bwd_f32", R * Cc, PP(Y), P(e, op->in[0]), I32(cu_numel(e, op->in[0]) / (T * Cc)),
           I32(T), I32(Cc), I32(R), I32(A));
    break;
  }
  case OP_GATHER_BWD: {
    int64_t Pn = lastd(e, op->in[1]), B = cu_numel(e, op->in[1]) / Pn;
    LAUNCH(e, id, "pkc_gather_bwd_f32", B * lastd(e, y), PP(Y), P(e, op->in[0]), P(e, op->in[1]), I32(B),
           I32((int64_t)op->attr[0]), I32(Pn), I32(lastd(e, y)), BAD());
    break;
  }
  default:
    PD_CHECK(false, "(op %s is not of emit_lookup's family)", op_info[op->kind].name);
  }
}

/* The dense layers: linear and matmul (GEMMs) and their weight gradients. */
static void emit_dense(CuEmit *e, const Op *op, const OpDest *d) {
  int y = d->y;
  CuPlace Y = d->Y;
  int A = d->A;
  int id = op->id;
  bool bias_done = d->bias_done;
  switch ((int)op->kind) { /* emit_op's switch names every kind; here only the family's */
  case OP_LINEAR: {
    int64_t M = rows(e, op->in[0]), K = lastd(e, op->in[0]), N = lastd(e, y);
    gemm(e, id, 0, 0, M, N, K, 1, cu_tensor(e, op->in[0]), ld(e, op->in[0]), cu_tensor(e, op->in[1]),
         ld(e, op->in[1]), 0, Y, ld(e, y));
    if (op->nin == 3 && !bias_done)
      LAUNCH(e, id, "pkc_add_bias_fwd_f32", M * N, PP(Y), PP(Y), P(e, op->in[2]), I64(M), I32(N));
    break;
  }
  case OP_MATMUL: {
    int64_t M = rows(e, op->in[0]), K = lastd(e, op->in[0]), N = lastd(e, y);
    int tb = op->attr[0] != 0;
    gemm(e, id, 0, tb, M, N, K, 1, cu_tensor(e, op->in[0]), ld(e, op->in[0]), cu_tensor(e, op->in[1]),
         ld(e, op->in[1]), 0, Y, ld(e, y));
    break;
  }
  case OP_LINEAR_DW: { /* dW[K,N] (+)= x[M,K]ᵀ·dy[M,N] */
    int64_t M = rows(e, op->in[0]), K = lastd(e, op->in[0]), N = lastd(e, op->in[1]);
    gemm(e, id, 1, 0, K, N, M, 1, cu_tensor(e, op->in[0]), ld(e, op->in[0]), cu_tensor(e, op->in[1]),
         ld(e, op->in[1]), A, Y, ld(e, y));
    break;
  }
  case OP_MATMUL_DW_T: { /* dW[N,K] (+)= dy[M,N]ᵀ·x[M,K] */
    int64_t M = rows(e, op->in[1]), K = lastd(e, op->in[1]), N = lastd(e, op->in[0]);
    gemm(e, id, 1, 0, N, K, M, 1, cu_tensor(e, op->in[0]), ld(e, op->in[0]), cu_tensor(e, op->in[1]),
         ld(e, op->in[1]), A, Y, ld(e, y));
    break;
  }
  default:
    PD_CHECK(false, "(op %s is not of emit_dense's family)", op_info[op->kind].name);
  }
}

/* Element for element, lowered by hand: add, scale, dropout (and its gradient) and reshape. */
static void emit_elementwise(CuEmit *e, const Op *op, const OpDest *d) {
  int y = d->y;
  CuPlace Y = d->Y;
  int A = d->A;
  bool via_temp = d->via_temp;
  int id = op->id;
  switch ((int)op->kind) { /* emit_op's switch names every kind; here only the family's */
  case OP_ADD:
    if (A && !via_temp) {
      for (int i = 0; i < 2; i++) {
        if (i == 1 && op->in[1] == op->in[0]) {
          LAUNCH(e, id, "pkc_axpy_f32", cu_numel(e, y), PP(Y), F32(1), P(e, op->in[1]), I64(cu_numel(e, y)));
          continue;
        }
        if (folded_into(e, op->in[i], y)) continue;
        PD_CHECK(cu_numel(e, op->in[i]) == cu_numel(e, y), "(accumulating a broadcast add)");
        LAUNCH(e, id, "pkc_axpy_f32", cu_numel(e, y), PP(Y), F32(1), P(e, op->in[i]), I64(cu_numel(e, y)));
      }
    } else if (cu_numel(e, op->in[1]) == cu_numel(e, y)) {
      LAUNCH(e, id, "pkc_add_fwd_f32", cu_numel(e, y), PP(Y), P(e, op->in[0]), P(e, op->in[1]),
             I64(cu_numel(e, y)));
    } else {
      LAUNCH(e, id, "pkc_add_bias_fwd_f32", cu_numel(e, y), PP(Y), P(e, op->in[0]), P(e, op->in[1]),
             I64(rows(e, y)), I32(lastd(e, y)));
    }
    break;
  case OP_SCALE:
    if (A && !via_temp) {
      if (!folded_into(e, op->in[0], y))
        LAUNCH(e, id, "pkc_axpy_f32", cu_numel(e, y), PP(Y), F32(op->attr[0]), P(e, op->in[0]),
               I64(cu_numel(e, y)));
    } else {
      LAUNCH(e, id, "pkc_scale_fwd_f32", cu_numel(e, y), PP(Y), P(e, op->in[0]), F32(op->attr[0]),
             I64(cu_numel(e, y)));
    }
    break;
  case OP_DROPOUT:
  case OP_DROPOUT_BWD: {
    int64_t n = cu_numel(e, y);
    char name[64];
    snprintf(name, sizeof name, "pkc_%s_f32", op_info[op->kind].kernel);
    LAUNCH(e, id, name, (n + 3) / 4, PP(Y), P(e, op->in[0]), I64(n), DROP(op_rng_p(op)), SEED(),
           cu_arg_stream(e, op_rng_stream(op)), MB(op_rng_p(op)));
    break;
  }
  case OP_RESHAPE: {
    CuPlace X = cu_tensor(e, op->in[0]);
    int64_t bytes = e->L->place[y].bytes;
    if (X.cls == Y.cls && X.off == Y.off) break; /* placed in place: nothing to move */
    PD_CHECK(X.cls != Y.cls || X.off + bytes <= Y.off || Y.off + bytes <= X.off,
             "(reshape %d: overlapping copy)", id);
    LAUNCH(e, id, "pkc_copy_f32", bytes / 4, PP(Y), PP(X), I64(bytes / 4));
    break;
  }
  default:
    PD_CHECK(false, "(op %s is not of emit_elementwise's family)", op_info[op->kind].name);
  }
}

/* Layernorm and its gradient. */
static void emit_norm(CuEmit *e, const Op *op, OpDest *d) {
  int y = d->y;
  CuPlace Y = d->Y;
  int id = op->id;
  switch ((int)op->kind) { /* emit_op's switch names every kind; here only the family's */
  case OP_LAYERNORM:
    LAUNCH(e, id, "pkc_layernorm_fwd_f32", rows(e, y), PP(Y), NUL(), P(e, op->in[0]), P(e, op->in[1]),
           P(e, op->in[2]), I64(rows(e, y)), I32(lastd(e, y)), F32(op->attr[0]));
    break;
  case OP_LAYERNORM_BWD: {
    int dg = op->out[1], db = op->out[2];
    bool want_g = acc(e, dg) || cgen_sole_consumer(e->g, e->L, dg) >= 0 || e->L->place[dg].cls != BUF_WORK;
    bool want_b = acc(e, db) || cgen_sole_consumer(e->g, e->L, db) >= 0 || e->L->place[db].cls != BUF_WORK;
    PD_CHECK(!(want_g && want_b) || acc(e, dg) == acc(e, db), "(layernorm_bwd: one of dgamma/dbeta accumulated)");
    int la = (want_g && acc(e, dg)) || (want_b && acc(e, db));
    int64_t M = rows(e, y), Cc = lastd(e, y);
    CuPlace stats = scratch_of(e, op);
    /* dx is op->out[0]: the CPU program writes it directly (its place, never a temp) */
    LAUNCH(e, id, "pkc_layernorm_bwd_dx_f32", M, P(e, y), PP(stats), I32(0), P(e, op->in[0]), P(e, op->in[1]),
           P(e, op->in[2]), I64(M), I32(Cc), F32(op->attr[0]));
    if (want_g || want_b)
      LAUNCH(e, id, "pkc_layernorm_bwd_params_f32", Cc, want_g ? P(e, dg) : NUL(), want_b ? P(e, db) : NUL(),
             PP(stats), P(e, op->in[0]), P(e, op->in[1]), I64(M), I32(Cc), I32(la));
    d->via_temp = false; /* as the CPU program: layernorm_bwd accumulates natively */
    break;
  }
  default:
    PD_CHECK(false, "(op %s is not of emit_norm's family)", op_info[op->kind].name);
  }
}

/* The loss: cross-entropy and its gradient. */
static void emit_loss(CuEmit *e, const Op *op, const OpDest *d) {
  int y = d->y;
  CuPlace Y = d->Y;
  int id = op->id;
  switch ((int)op->kind) { /* emit_op's switch names every kind; here only the family's */
  case OP_CROSS_ENTROPY: {
    int64_t M = rows(e, op->in[0]), V = lastd(e, op->in[0]);
    need_scratch(e, CU_SCRATCH_ROWS + M * 8);
    CuPlace rl = cu_buf(CU_SCRATCH, CU_SCRATCH_ROWS);
    const Op *bw = classifier_bwd(e, op);
    if (bw) { /* the fused classifier: the gradient too, over the logits, when training */
      CuPlace nv = cu_buf(CU_SCRATCH, CU_SCRATCH_NVALID);
      LAUNCH(e, id, "pkc_cross_entropy_count_f32", 1, PP(nv), P(e, op->in[1]), I64(M), I32(V),
             I32((int64_t)op->attr[0]));
      const TensorPlace *sp = &e->stored->place[op->in[0]];
      if (sp->bf16) /* the gradient as bf16 into the logits' stored place (classifier_bwd) */
        LAUNCH(e, id, "pkc_classifier_bf16", M, PP(rl), PP(cu_buf((int)sp->cls, sp->offset)), P(e, op->in[0]),
               P(e, op->in[1]), I64(M), I32(V), I32(ld(e, op->in[0])), I32((int64_t)op->attr[0]), F32(1), PP(nv),
               cu_arg_runtime("i32", "training", 0));
      else
        LAUNCH(e, id, "pkc_classifier_f32", M, PP(rl), P(e, bw->out[0]), P(e, op->in[0]), P(e, op->in[1]), I64(M),
               I32(V), I32(ld(e, op->in[0])), I32((int64_t)op->attr[0]), F32(1), PP(nv),
               cu_arg_runtime("i32", "training", 0));
      e->done[bw->id] = true; /* its launches are these */
    } else {
      LAUNCH(e, id, "pkc_cross_entropy_rows_f32", M, PP(rl), P(e, op->in[0]), P(e, op->in[1]), I64(M), I32(V),
             I32(ld(e, op->in[0])), I32((int64_t)op->attr[0]));
    }
    CuPlace loss = cu_buf(CU_SCRATCH, CU_SCRATCH_LOSS);
    LAUNCH(e, id, "pkc_cross_entropy_reduce_f32", 1, PP(loss), PP(cu_buf(CU_SCRATCH, CU_SCRATCH_NVALID)), BAD(),
           PP(rl), P(e, op->in[1]), I64(M), I32(V), I32((int64_t)op->attr[0]));
    LAUNCH(e, id, "pkc_copy_f32", 1, PP(Y), PP(loss), I64(1)); /* the tensor too, as the CPU program */
    break;
  }
  case OP_CROSS_ENTROPY_BWD: {
    int64_t M = rows(e, op->in[0]), V = lastd(e, op->in[0]);
    int ign = (int)op->attr[0];
    need_scratch(e, CU_SCRATCH_ROWS);
    CuPlace nv = cu_buf(CU_SCRATCH, CU_SCRATCH_NVALID);
    LAUNCH(e, id, "pkc_cross_entropy_count_f32", 1, PP(nv), P(e, op->in[1]), I64(M), I32(V), I32(ign));
    PD_CHECK(ld(e, y) == ld(e, op->in[0]), "(cross_entropy_bwd: dlogits and logits with different strides)");
    LAUNCH(e, id, "pkc_cross_entropy_bwd_f32", M, PP(Y), P(e, op->in[0]), P(e, op->in[1]), I64(M), I32(V),
           I32(ld(e, y)), I32(ign), F32(1), PP(nv));
    break;
  }
  default:
    PD_CHECK(false, "(op %s is not of emit_loss's family)", op_info[op->kind].name);
  }
}

/* A generic family's op (cgen_lower.h): the launch of its kernel, as the table gives it. */
static void emit_generic(CuEmit *e, const Op *op, const OpDest *d) {
  KernelCall c = cgen_lower_call(e->g, op, e->L->b, d->A);
  char name[64];
  snprintf(name, sizeof name, "pkc_%s_f32", c.kernel);
  cJSON *arg[KCALL_MAX_ARGS];
  for (int i = 0; i < c.nargs; i++) {
    const KArg *a = &c.arg[i];
    switch (a->kind) {
    case KARG_DEST: arg[i] = PP(d->Y); break;
    case KARG_TENSOR: arg[i] = P(e, a->tensor); break;
    case KARG_I64: arg[i] = I64((int64_t)a->value); break;
    case KARG_I32:
    case KARG_FLAG: arg[i] = I32((int64_t)a->value); break;
    case KARG_REAL: arg[i] = F32(a->value); break;
    }
  }
  int kind = cu_kernel_kind(name);
  cu_launch_args(e, op->id, name, kind, cgen_kcall_items(&c, kind), CU_BLOCK, c.nargs, arg);
}

/* Emits op (not fused), by the table's op family: generic families lower through
 * cgen_lower.h, the others through their family's emitter. For a linear with a bias,
 * `bias_done` says the caller fused the bias into a kernel of its own; else it is
 * added here. */
static void emit_op(CuEmit *e, const Op *op, bool bias_done) {
  int y = op->out[0];
  OpDest d = {.y = y, .Y = cu_tensor(e, y), .bias_done = bias_done};
  d.via_temp = acc(e, y) && e->L->place[y].alias < 0 && !op_has(op->kind, OPF_ACCUMULATES);
  if (d.via_temp) d.Y = acc_temp(e, op);
  d.A = acc(e, y) ? 1 : 0;
  switch (op_info[op->kind].family) {
  case OPFAM_MAP:
  case OPFAM_ROWS:
  case OPFAM_SEQ: emit_generic(e, op, &d); break;
  case OPFAM_LOOKUP: emit_lookup(e, op, &d); break;
  case OPFAM_DENSE: emit_dense(e, op, &d); break;
  case OPFAM_ELEMENTWISE: emit_elementwise(e, op, &d); break;
  case OPFAM_NORM: emit_norm(e, op, &d); break;
  case OPFAM_ATTENTION: emit_attention(e, op, d.Y); break;
  case OPFAM_LOSS: emit_loss(e, op, &d); break;
  case OPFAM_COUNT: PD_CHECK(false, "(OPFAM_COUNT is not a family)"); break;
  }
  if (d.via_temp)
    LAUNCH(e, op->id, "pkc_axpy_f32", cu_numel(e, y), P(e, y), F32(1), PP(d.Y), I64(cu_numel(e, y)));
}

/* Called by cu_fuse_from for the linear whose bias it fuses: the GEMM alone. */
void cu_emit_linear_gemm(CuEmit *e, const Op *op) { emit_op(e, op, true); }

void cu_emit_op(CuEmit *e, const Op *op) { emit_op(e, op, false); }
