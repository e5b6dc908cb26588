/* codegen/cgen_cuda.c — the CUDA program of one stage and its launch list (codegen.h).
 *
 * A plan's GPU program is two modules, each compiled by NVRTC at load time:
 *  - kernels.cu, the kernel library, one per plan (codegen_cuda_library_source): a
 *    banner, "#define PKC_ATT_HS <hs>" when every attention op of the model has head
 *    size hs (the kernels then keep a head's q/accumulators in registers, and the
 *    tensor-core attention is compiled for hs), then the verbatim text of philox.h,
 *    kernels/cuda_helpers.cuh, cuda_mma.cuh, cuda_flash_*.cuh and cuda_kernels.cuh
 *    (embedded at build time: pkc_kernels_src.h). Nothing in it depends on the plan
 *    but hs, so every plan with the same head size has the same text, and NVRTC's
 *    disk cache (runtime/cuda/nvrtc_compile.c) compiles it once for all of them;
 *  - stageN.cu, the stage's own program: a banner, the verbatim text of philox.h and
 *    cuda_helpers.cuh (pkc_helpers_src.h: device helpers only, no kernel), then the
 *    stage's own kernels, fusedK: one per fused elementwise chain, or chain plus
 *    the layernorm of its residual add (cgen_cuda_fuse.c), every length and offset a
 *    literal.
 * Why two: the library is ~85% of a whole stage's NVRTC time and the same for every
 * stage; compiled once per plan (and cached across plans), a stage costs only its
 * fused kernels. Nothing in either runs by itself. What runs, in order, is
 * stageN.launch.json:
 *
 *   { "format": 6, "source", "hash" (of the .cu), "library": {"source": "kernels.cu", "hash"} (the
 *     plan's kernel library), "block": 256, "nvrtc_options": [], "gemm_dtype": "tf32"|"fp32"|"bf16",
 *     "mixed_precision": "none"|"bf16-fp32-master" (with bf16), "blocks": {params, grads, stash, work,
 *     inputs, boundary, cuda_scratch: bytes}, "cuda_scratch": {bad_ids: 0 (u64 counter of out-of-range
 *     ids/targets; the runtime zeroes and reads it), ce_nvalid, loss, microbatch_key (u32: the
 *     microbatch's global index, written by the runtime before every pass that reads it), ce_rows:
 *     offsets; with bf16 also bf16_staging: where the GEMM operands' bfloat16 copies start}, "loss": {buf,
 *     offset} of the f32 loss after forward | null, "kernels": [distinct names launched], "forward":
 *     [entry], "backward": [entry], "segments" (cgen_cuda_segments.c) }
 *   entry: {"op": id - the pass's smallest op id, "kernel": name, "module": "library"|"stage" (the module that
 *           defines it: kernels.cu or stageN.cu), "grid", "block", "shared": bytes,
 *           "args": [arg]}
 *       or {"op": id, "gemm": {transa, transb, M, N, K, lda, ldb, ldc, alpha, beta,
 *                               A, B, C: pointer, dtype[, epilogue, bias, bias_accumulate,
 *                               aux, ldaux: contract/contract.h GemmEpilogue; the list says "gemm_epilogues"]}}
 *   arg:   {"type": "ptr", "buf": block name|null, "offset", "bytes"}
 *          {"type": "i32"|"i64"|"u32"|"u64"|"f32"|"f64", "value": v}
 *          {"type": ..., "runtime": "seed"|"training"|"dropout_p"
 *                        (then "value" is p; the runtime passes 0 when not training)
 *                        |"rng_base" (u32: a Philox stream, the runtime passes the
 *                        stage's program.cuda.rng_base + "value")}
 * Nothing in a list or its .cu names the stage, so stages with the same program share
 * both files (codegen_cuda_stages; plan.json's program.cuda names each stage's).
 * The microbatch index is no argument (format 2 passed it by value): the random
 * kernels take a pointer to cuda_scratch's microbatch_key (a "ptr" argument, null when
 * the op's p is 0), so a pass's arguments are the same for every microbatch of a
 * weight version and stash slot, and a runtime may capture a pass once as a CUDA graph
 * and replay it.
 * A pointer is the block's base (of the microbatch's stash slot, inputs and boundary
 * copy, of the weight version the microbatch uses) plus offset; "bytes" is the most
 * the kernel touches from there. Argument types are exactly the kernel's parameter
 * types (cuda_launch passes a pointer to each). GEMMs are row-major with cuda_gemm's
 * (= pk_sgemm_fn's) semantics, so each is the same call the CPU program makes, but
 * for the leading dimension of the classifier's logits and their gradient: the layout
 * pads those rows to a multiple of 128 when the vocabulary is not a multiple of 8
 * (passes/layout.h, "padded rows"), so that cuBLAS runs its aligned kernels. The
 * GEMMs keep N (or K) = V and pass ld = the padded stride rather than running over
 * Vp columns: the padding then needs no zeroing and never reaches the loss, and the
 * weight (wte[V, C], leading dimension C) is never padded, so neither are its
 * gradient, its norm, its AdamW state or a checkpoint. The cross-entropy kernels take
 * the stride too; the CPU program writes the same rows contiguously.
 * A "bf16" GEMM's A and B are bfloat16 (uint16 bits, leading dimensions in elements),
 * C float32: a weight is read from "params_bf16", its version's bf16 copy that the
 * optimizer writes, and any other operand is cast before it (cgen_cuda_bf16.c; the
 * casts' staging is cuda_scratch from bf16_staging on, the same bytes for every GEMM,
 * so cuda_scratch grows by the largest GEMM's cast operands). In a bf16 list, attention with a
 * head size that is a multiple of 16 is pkc_flash_attention_*_bf16 (tensor cores),
 * after casts of its qkv (and, backward, dy) into the same staging bytes.
 *
 * The mapping op -> launches mirrors cgen_c.c's emit_op call for call: the same
 * accumulation rules (layout's `accumulate`, a scratch temporary plus axpy for ops
 * that cannot add into their output), the same scratch, the same Philox streams
 * (seed, forward op id, microbatch), so the two backends compute the same thing.
 * Differences, all GPU-specific: linear's bias is added after its GEMM (beta 0,
 * usually fused with what follows), embedding_bwd zero-fills then adds atomically,
 * cross-entropy reduces through cuda_scratch, layernorm_bwd and attention_bwd are
 * two and three kernels. -Wswitch-enum keeps emit_op complete.
 */
#include "codegen/cgen_cuda_internal.h"

#include <limits.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "pkc_helpers_src.h"
#include "pkc_kernels_src.h"
#include "kernels/cuda_kernel_list.h"

/* ---- pointers and arguments ------------------------------------------------------- */

const char *cu_buf_name(int cls) {
  return cls == CU_SCRATCH ? "cuda_scratch" : cls == CU_PARAMS16 ? "params_bf16" : buf_class_name((BufClass)cls);
}

CuPtr cu_buf(int cls, int64_t off) { return (CuPtr){cls, off}; }

CuPtr cu_tensor(const CuEmit *e, int t) {
  const TensorPlace *pl = &e->L->place[t];
  PD_CHECK(pl->cls != BUF_NONE, "(tensor %d '%s' has no place in stage %d)", t, e->g->tensors[t].name,
           e->stage);
  return (CuPtr){(int)pl->cls, pl->offset};
}

int64_t cu_numel(const CuEmit *e, int t) { return shape_numel(&e->g->tensors[t].shape, e->L->b); }
static int64_t lastd(const CuEmit *e, int t) {
  const Shape *s = &e->g->tensors[t].shape;
  return s->rank ? s->dim[s->rank - 1] : 1;
}
static int64_t rows(const CuEmit *e, int t) { return cu_numel(e, t) / lastd(e, t); }
/* t's row stride in its place: its last dimension, or the padding layout.h gives the
 * classifier's logits and their gradient (every GEMM and cross-entropy launch passes it) */
static int64_t ld(const CuEmit *e, int t) { return e->L->ld[t]; }
static bool acc(const CuEmit *e, int t) { return e->L->place[t].accumulate; }

cJSON *cu_arg_ptr(CuPtr p) {
  cJSON *a = cJSON_CreateObject();
  cJSON_AddStringToObject(a, "type", "ptr");
  if (p.cls < 0) {
    cJSON_AddNullToObject(a, "buf");
    return a;
  }
  cJSON_AddStringToObject(a, "buf", cu_buf_name(p.cls));
  cJSON_AddNumberToObject(a, "offset", (double)p.off);
  return a;
}

cJSON *cu_arg_num(const char *type, double v) {
  cJSON *a = cJSON_CreateObject();
  cJSON_AddStringToObject(a, "type", type);
  cJSON_AddNumberToObject(a, "value", v);
  return a;
}

cJSON *cu_arg_runtime(const char *type, const char *what, double value) {
  cJSON *a = cJSON_CreateObject();
  cJSON_AddStringToObject(a, "type", type);
  cJSON_AddStringToObject(a, "runtime", what);
  if (strcmp(what, "dropout_p") == 0 || strcmp(what, "rng_base") == 0) cJSON_AddNumberToObject(a, "value", value);
  return a;
}

cJSON *cu_arg_stream(const CuEmit *e, int op_id) {
  PD_CHECK(op_id >= e->rng_base, "(op %d's stream below the stage's rng_base %d)", op_id, e->rng_base);
  return cu_arg_runtime("u32", "rng_base", op_id - e->rng_base);
}

static cJSON *P(const CuEmit *e, int t) { return cu_arg_ptr(cu_tensor(e, t)); }
static cJSON *PP(CuPtr p) { return cu_arg_ptr(p); }
static cJSON *NUL(void) { return cu_arg_ptr((CuPtr){-1, 0}); }
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

static int library_index(const char *name);

/* Lists each kernel once, in first-use order. A library kernel is looked up in the
 * listed set by its index (scanning the list per launch made the CUDA programs of a
 * 10,000-layer model take minutes); a stage's own kernels are named s<stage>_fused<n>
 * with n counting up, so each is launched, and listed, exactly once. */
static void add_kernel_name(CuEmit *e, const char *name) {
  int i = library_index(name);
  if (i >= 0) {
    if (e->lib_listed[i]) return;
    e->lib_listed[i] = true;
  }
  cJSON_AddItemToArray(e->kernels, cJSON_CreateString(name));
}

static bool in_library(const char *name) { return library_index(name) >= 0; }

void cu_launch(CuEmit *e, int op, const char *name, int kind, int64_t items, unsigned block,
               int nargs, ...) {
  cJSON *l = cJSON_CreateObject();
  cJSON_AddNumberToObject(l, "op", op - e->op_base);
  cJSON_AddStringToObject(l, "kernel", name);
  cJSON_AddStringToObject(l, "module", in_library(name) ? "library" : "stage");
  cJSON_AddNumberToObject(l, "grid", pkc_grid((PkcLaunchKind)kind, items, block, CU_MAX_GRID));
  cJSON_AddNumberToObject(l, "block", block);
  cJSON_AddNumberToObject(l, "shared", 0); /* every kernel's shared memory is static */
  cJSON *args = cJSON_AddArrayToObject(l, "args");
  va_list ap;
  va_start(ap, nargs);
  for (int i = 0; i < nargs; i++) cJSON_AddItemToArray(args, va_arg(ap, cJSON *));
  va_end(ap);
  cJSON_AddItemToArray(e->list, l);
  add_kernel_name(e, name);
}

/* Launch of a library kernel with one block size (its kind from cuda_kernel_list.h). */
#define KERNEL_KIND(k, kind) {#k, kind},
static const struct {
  const char *name;
  PkcLaunchKind kind;
} kinds[] = {PKC_KERNEL_LIST(KERNEL_KIND)};
#undef KERNEL_KIND

/* True for a kernel of the library module (kernels.cu): every name of
 * cuda_kernel_list.h; the stage's own kernels (fusedK) never are. */
#define LIBRARY_KERNELS (sizeof kinds / sizeof kinds[0])

static int library_index(const char *name) {
  for (size_t i = 0; i < LIBRARY_KERNELS; i++)
    if (strcmp(kinds[i].name, name) == 0) return (int)i;
  return -1;
}

static int kind_of(const char *name) {
  for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++)
    if (strcmp(kinds[i].name, name) == 0) return (int)kinds[i].kind;
  PD_CHECK(false, "(kernel %s is not in cuda_kernel_list.h)", name);
  return PKC_ONE;
}

#define LAUNCH(e, op, name, items, ...)                                                            \
  cu_launch(e, op, name, kind_of(name), items, CU_BLOCK,                                         \
            (int)(sizeof((cJSON *[]){__VA_ARGS__}) / sizeof(cJSON *)), __VA_ARGS__)
#define LAUNCH_B(e, op, name, items, block, ...)                                                   \
  cu_launch(e, op, name, kind_of(name), items, block,                                             \
            (int)(sizeof((cJSON *[]){__VA_ARGS__}) / sizeof(cJSON *)), __VA_ARGS__)

static cJSON *ptr_json(CuPtr p) {
  cJSON *a = cJSON_CreateObject();
  cJSON_AddStringToObject(a, "buf", cu_buf_name(p.cls));
  cJSON_AddNumberToObject(a, "offset", (double)p.off);
  return a;
}

/* One row-major GEMM: C[M,N] = alpha·op(A)·op(B) + beta·C (pk_sgemm_fn, cuda_gemm).
 * bf16: A and B first go through cu_stage_bf16 (a weight's bf16 copy, or a cast), C f32. */
static void gemm(CuEmit *e, int op, int ta, int tb, int64_t M, int64_t N, int64_t K, double alpha,
                 CuPtr A, int64_t lda, CuPtr B, int64_t ldb, double beta, CuPtr C, int64_t ldc) {
  PD_CHECK(M <= 2147483647LL && N <= 2147483647LL && K <= 2147483647LL, "(GEMM too large)");
  if (e->o->gemm == CGEN_GEMM_BF16) {
    int64_t a_end, b_end;
    A = cu_stage_bf16(e, op, A, ta ? K : M, ta ? M : K, lda, cu_bf16_staging(e), &a_end);
    B = cu_stage_bf16(e, op, B, tb ? N : K, tb ? K : N, ldb, cu_bf16_align(a_end), &b_end);
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
  cJSON_AddItemToObject(gm, "A", ptr_json(A));
  cJSON_AddItemToObject(gm, "B", ptr_json(B));
  cJSON_AddItemToObject(gm, "C", ptr_json(C));
  cJSON_AddStringToObject(gm, "dtype", cgen_gemm_dtype_name(e->o->gemm));
  cJSON_AddItemToArray(e->list, l);
}

/* ---- the ops --------------------------------------------------------------------- */

/* True when t was placed on (accumulated into) the same gradient as `into`. */
static bool folded_into(const CuEmit *e, int t, int into) {
  const TensorPlace *a = &e->L->place[t], *b = &e->L->place[into];
  return a->alias >= 0 && a->cls == b->cls && a->offset == b->offset && a->accumulate;
}

static CuPtr scratch_of(const CuEmit *e, const Op *op) {
  return cu_buf(BUF_WORK, e->L->scratch_off[op->id]);
}

/* The temporary an op computes into when it must add into a gradient but cannot. */
static CuPtr acc_temp(const CuEmit *e, const Op *op) {
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
static void emit_flash_attention(CuEmit *e, const Op *op, CuPtr Y, int64_t B, int64_t T, int64_t C) {
  bool fwd = op->kind == OP_ATTENTION;
  int qkv = op->in[fwd ? 0 : 1], NH = (int)op->attr[0], causal = (int)op->attr[1];
  double p = op->attr[2];
  int stream = fwd ? op->id : op->fwd_op;
  int64_t tiles = B * NH * ((T + CU_FLASH_ROWS - 1) / CU_FLASH_ROWS), end;
  CuPtr Q16 = cu_stage_bf16(e, op->id, cu_tensor(e, qkv), B * T, 3 * C, 3 * C, cu_bf16_staging(e), &end);
  if (fwd) {
    LAUNCH_B(e, op->id, "pkc_flash_attention_fwd_bf16", tiles, CU_FLASH_BLOCK, PP(Y), P(e, op->out[1]),
             PP(Q16), I32(B), I32(T), I32(C), I32(NH), I32(causal), DROP(p), SEED(), cu_arg_stream(e, stream), MB(p));
    return;
  }
  CuPtr Y16 = cu_stage_bf16(e, op->id, cu_tensor(e, op->in[0]), B * T, C, C, cu_bf16_align(end), &end);
  CuPtr work = scratch_of(e, op);
  LAUNCH_B(e, op->id, "pkc_flash_attention_bwd_dq_bf16", tiles, CU_FLASH_BLOCK, PP(Y), P(e, op->in[3]), PP(work),
           PP(Y16), PP(Q16), I32(B), I32(T), I32(C), I32(NH), I32(causal), DROP(p), SEED(), cu_arg_stream(e, stream), MB(p));
  LAUNCH_B(e, op->id, "pkc_flash_attention_bwd_dkv_bf16", tiles, CU_FLASH_BLOCK, PP(Y), P(e, op->in[3]),
           PP(work), PP(Y16), PP(Q16), I32(B), I32(T), I32(C), I32(NH), I32(causal), DROP(p), SEED(),
           cu_arg_stream(e, stream), MB(p));
}

/* attention(qkv) -> (out, lse); attention_bwd(dy, qkv, out, lse): FlashAttention-2's
 * backward, D = rowsum(dy∘out) per query row into the op's scratch (B·NH·T floats)
 * first, then dq and dkv from lse and D (kernels/cuda_kernels.cuh). */
static void emit_attention(CuEmit *e, const Op *op, CuPtr Y) {
  const Graph *g = e->g;
  bool fwd = op->kind == OP_ATTENTION;
  int qkv = op->in[fwd ? 0 : 1];
  int64_t T = g->tensors[qkv].shape.dim[1], C = lastd(e, qkv) / 3, B = cu_numel(e, qkv) / (T * 3 * C);
  int NH = (int)op->attr[0], causal = (int)op->attr[1];
  double p = op->attr[2];
  int stream = fwd ? op->id : op->fwd_op;
  int64_t items = B * NH * T, qe, de;
  CuPtr work = scratch_of(e, op);
  if (!fwd) {
    PD_CHECK(e->L->scratch_bytes[op->id] >= B * NH * T * 4, "(attention_bwd scratch too small)");
    LAUNCH_B(e, op->id, "pkc_attention_bwd_delta_f32", items, CU_ATT_BLOCK, PP(work), P(e, op->in[0]),
             P(e, op->in[2]), I32(B), I32(T), I32(C), I32(NH));
  }
  if (e->o->gemm == CGEN_GEMM_BF16 && layout_cuda_attention_operands(g, op, e->flash_hs, e->L->b, &qe, &de)) {
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
 * classifier kernel in the forward (pkc_classifier_f32, with fusion on): the stage's
 * backward differentiates op with the same targets and ignore index, the layout put
 * its gradient over the logits, and no other op of the graph reads the logits, so the
 * forward may overwrite them with the gradient. Else NULL. (One scan of the graph per
 * cross-entropy op: a model has one.) */
static const Op *classifier_bwd(const CuEmit *e, const Op *op) {
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

/* Emits op (not fused). For a linear with a bias, `bias_done` says the caller fused
 * the bias into a kernel of its own; else it is added here. */
static void emit_op(CuEmit *e, const Op *op, bool bias_done) {
  const Graph *g = e->g;
  int y = op->out[0];
  CuPtr Y = cu_tensor(e, y);
  bool via_temp = acc(e, y) && e->L->place[y].alias < 0 && !layout_accumulates_natively(op->kind);
  if (via_temp) Y = acc_temp(e, op);
  int A = acc(e, y) ? 1 : 0;
  int id = op->id;
  switch (op->kind) {
  case OP_EMBEDDING:
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
  case OP_MUL:
    LAUNCH(e, id, "pkc_mul_fwd_f32", cu_numel(e, y), PP(Y), P(e, op->in[0]), P(e, op->in[1]),
           I64(cu_numel(e, y)));
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
  case OP_LAYERNORM:
    LAUNCH(e, id, "pkc_layernorm_fwd_f32", rows(e, y), PP(Y), NUL(), P(e, op->in[0]), P(e, op->in[1]),
           P(e, op->in[2]), I64(rows(e, y)), I32(lastd(e, y)), F32(op->attr[0]));
    break;
  case OP_GELU:
  case OP_RELU:
    LAUNCH(e, id, op->kind == OP_GELU ? "pkc_gelu_fwd_f32" : "pkc_relu_fwd_f32", cu_numel(e, y), PP(Y),
           P(e, op->in[0]), I64(cu_numel(e, y)));
    break;
  case OP_SOFTMAX:
    LAUNCH(e, id, "pkc_softmax_fwd_f32", rows(e, y), PP(Y), P(e, op->in[0]), I64(rows(e, y)),
           I32(lastd(e, y)));
    break;
  case OP_ATTENTION:
  case OP_ATTENTION_BWD:
    emit_attention(e, op, Y);
    break;
  case OP_DROPOUT:
  case OP_DROPOUT_BWD: {
    int64_t n = cu_numel(e, y);
    LAUNCH(e, id, op->kind == OP_DROPOUT ? "pkc_dropout_fwd_f32" : "pkc_dropout_bwd_f32", (n + 3) / 4,
           PP(Y), P(e, op->in[0]), I64(n), DROP(op->attr[0]), SEED(),
           cu_arg_stream(e, op->kind == OP_DROPOUT ? op->id : op->fwd_op), MB(op->attr[0]));
    break;
  }
  case OP_RESHAPE: {
    CuPtr X = cu_tensor(e, op->in[0]);
    int64_t bytes = e->L->place[y].bytes;
    if (X.cls == Y.cls && X.off == Y.off) break; /* placed in place: nothing to move */
    PD_CHECK(X.cls != Y.cls || X.off + bytes <= Y.off || Y.off + bytes <= X.off,
             "(reshape %d: overlapping copy)", id);
    LAUNCH(e, id, "pkc_copy_f32", bytes / 4, PP(Y), PP(X), I64(bytes / 4));
    break;
  }
  case OP_GATHER: {
    int64_t Pn = lastd(e, op->in[1]), T = g->tensors[op->in[0]].shape.dim[1];
    LAUNCH(e, id, "pkc_gather_fwd_f32", cu_numel(e, y), PP(Y), P(e, op->in[0]), P(e, op->in[1]),
           I32(cu_numel(e, op->in[1]) / Pn), I32(T), I32(Pn), I32(lastd(e, y)), BAD());
    break;
  }
  case OP_CROSS_ENTROPY: {
    int64_t M = rows(e, op->in[0]), V = lastd(e, op->in[0]);
    need_scratch(e, CU_SCRATCH_ROWS + M * 8);
    CuPtr rl = cu_buf(CU_SCRATCH, CU_SCRATCH_ROWS);
    const Op *bw = classifier_bwd(e, op);
    if (bw) { /* the fused classifier: the gradient too, over the logits, when training */
      CuPtr nv = cu_buf(CU_SCRATCH, CU_SCRATCH_NVALID);
      LAUNCH(e, id, "pkc_cross_entropy_count_f32", 1, PP(nv), P(e, op->in[1]), I64(M), I32(V),
             I32((int64_t)op->attr[0]));
      LAUNCH(e, id, "pkc_classifier_f32", M, PP(rl), P(e, bw->out[0]), P(e, op->in[0]), P(e, op->in[1]), I64(M),
             I32(V), I32(ld(e, op->in[0])), I32((int64_t)op->attr[0]), F32(1), PP(nv),
             cu_arg_runtime("i32", "training", 0));
      e->done[bw->id] = true; /* its launches are these */
    } else {
      LAUNCH(e, id, "pkc_cross_entropy_rows_f32", M, PP(rl), P(e, op->in[0]), P(e, op->in[1]), I64(M), I32(V),
             I32(ld(e, op->in[0])), I32((int64_t)op->attr[0]));
    }
    CuPtr loss = cu_buf(CU_SCRATCH, CU_SCRATCH_LOSS);
    LAUNCH(e, id, "pkc_cross_entropy_reduce_f32", 1, PP(loss), PP(cu_buf(CU_SCRATCH, CU_SCRATCH_NVALID)), BAD(),
           PP(rl), P(e, op->in[1]), I64(M), I32(V), I32((int64_t)op->attr[0]));
    LAUNCH(e, id, "pkc_copy_f32", 1, PP(Y), PP(loss), I64(1)); /* the tensor too, as the CPU program */
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
    int64_t Cc = lastd(e, op->in[0]), T = dy->dim[dy->rank - 2], R = (int64_t)op->attr[0];
    LAUNCH(e, id, "pkc_positions_bwd_f32", R * Cc, PP(Y), P(e, op->in[0]), I32(cu_numel(e, op->in[0]) / (T * Cc)),
           I32(T), I32(Cc), I32(R), I32(A));
    break;
  }
  case OP_LINEAR_DW: { /* dW[K,N] (+)= x[M,K]ᵀ·dy[M,N] */
    int64_t M = rows(e, op->in[0]), K = lastd(e, op->in[0]), N = lastd(e, op->in[1]);
    gemm(e, id, 1, 0, K, N, M, 1, cu_tensor(e, op->in[0]), ld(e, op->in[0]), cu_tensor(e, op->in[1]),
         ld(e, op->in[1]), A, Y, ld(e, y));
    break;
  }
  case OP_BIAS_GRAD:
    LAUNCH(e, id, "pkc_bias_grad_f32", lastd(e, op->in[0]), PP(Y), P(e, op->in[0]), I64(rows(e, op->in[0])),
           I32(lastd(e, op->in[0])), I32(A));
    break;
  case OP_MATMUL_DW_T: { /* dW[N,K] (+)= dy[M,N]ᵀ·x[M,K] */
    int64_t M = rows(e, op->in[1]), K = lastd(e, op->in[1]), N = lastd(e, op->in[0]);
    gemm(e, id, 1, 0, N, K, M, 1, cu_tensor(e, op->in[0]), ld(e, op->in[0]), cu_tensor(e, op->in[1]),
         ld(e, op->in[1]), A, Y, ld(e, y));
    break;
  }
  case OP_LAYERNORM_BWD: {
    int dg = op->out[1], db = op->out[2];
    bool want_g = acc(e, dg) || cgen_sole_consumer(e->g, e->L, dg) >= 0 || e->L->place[dg].cls != BUF_WORK;
    bool want_b = acc(e, db) || cgen_sole_consumer(e->g, e->L, db) >= 0 || e->L->place[db].cls != BUF_WORK;
    PD_CHECK(!(want_g && want_b) || acc(e, dg) == acc(e, db), "(layernorm_bwd: one of dgamma/dbeta accumulated)");
    int la = (want_g && acc(e, dg)) || (want_b && acc(e, db));
    int64_t M = rows(e, y), Cc = lastd(e, y);
    CuPtr stats = scratch_of(e, op);
    /* dx is op->out[0]: the CPU program writes it directly (its place, never a temp) */
    LAUNCH(e, id, "pkc_layernorm_bwd_dx_f32", M, P(e, y), PP(stats), I32(0), P(e, op->in[0]), P(e, op->in[1]),
           P(e, op->in[2]), I64(M), I32(Cc), F32(op->attr[0]));
    if (want_g || want_b)
      LAUNCH(e, id, "pkc_layernorm_bwd_params_f32", Cc, want_g ? P(e, dg) : NUL(), want_b ? P(e, db) : NUL(),
             PP(stats), P(e, op->in[0]), P(e, op->in[1]), I64(M), I32(Cc), I32(la));
    via_temp = false; /* as the CPU program: layernorm_bwd accumulates natively */
    break;
  }
  case OP_GELU_BWD:
  case OP_RELU_BWD:
    LAUNCH(e, id, op->kind == OP_GELU_BWD ? "pkc_gelu_bwd_f32" : "pkc_relu_bwd_f32", cu_numel(e, y), PP(Y),
           P(e, op->in[0]), P(e, op->in[1]), I64(cu_numel(e, y)));
    break;
  case OP_SOFTMAX_BWD:
    LAUNCH(e, id, "pkc_softmax_bwd_f32", rows(e, y), PP(Y), P(e, op->in[0]), P(e, op->in[1]), I64(rows(e, y)),
           I32(lastd(e, y)));
    break;
  case OP_GATHER_BWD: {
    int64_t Pn = lastd(e, op->in[1]), B = cu_numel(e, op->in[1]) / Pn;
    LAUNCH(e, id, "pkc_gather_bwd_f32", B * lastd(e, y), PP(Y), P(e, op->in[0]), P(e, op->in[1]), I32(B),
           I32((int64_t)op->attr[0]), I32(Pn), I32(lastd(e, y)), BAD());
    break;
  }
  case OP_CROSS_ENTROPY_BWD: {
    int64_t M = rows(e, op->in[0]), V = lastd(e, op->in[0]);
    int ign = (int)op->attr[0];
    need_scratch(e, CU_SCRATCH_ROWS);
    CuPtr nv = cu_buf(CU_SCRATCH, CU_SCRATCH_NVALID);
    LAUNCH(e, id, "pkc_cross_entropy_count_f32", 1, PP(nv), P(e, op->in[1]), I64(M), I32(V), I32(ign));
    PD_CHECK(ld(e, y) == ld(e, op->in[0]), "(cross_entropy_bwd: dlogits and logits with different strides)");
    LAUNCH(e, id, "pkc_cross_entropy_bwd_f32", M, PP(Y), P(e, op->in[0]), P(e, op->in[1]), I64(M), I32(V),
           I32(ld(e, y)), I32(ign), F32(1), PP(nv));
    break;
  }
  case OP_COUNT:
    PD_CHECK(false, "(OP_COUNT is not an op)");
    break;
  }
  if (via_temp)
    LAUNCH(e, id, "pkc_axpy_f32", cu_numel(e, y), P(e, y), F32(1), PP(Y), I64(cu_numel(e, y)));
}

/* ---- the stage ------------------------------------------------------------------- */

/* A stage's ops grouped by region, each region's in the stage's order (the CPU
 * program's order): region r's ops are ops[start[r - first] .. start[r - first + 1]).
 * One counting sort instead of a scan of the stage per region. */
typedef struct RegionOps {
  int first, *start, *ops;
} RegionOps;

static RegionOps region_ops_index(const Graph *g, const int *ops, int n, int first, int last) {
  int nr = last - first + 1;
  RegionOps x = {first, pd_calloc((size_t)nr + 1, sizeof(int)), pd_malloc(((size_t)n + 1) * sizeof(int))};
  for (int k = 0; k < n; k++) x.start[g->ops[ops[k]].region - first + 1]++;
  for (int r = 0; r < nr; r++) x.start[r + 1] += x.start[r];
  int *fill = pd_malloc(((size_t)nr + 1) * sizeof(int));
  memcpy(fill, x.start, ((size_t)nr + 1) * sizeof(int));
  for (int k = 0; k < n; k++) x.ops[fill[g->ops[ops[k]].region - first]++] = ops[k];
  free(fill);
  return x;
}

static void emit_region(CuEmit *e, const RegionOps *x, int r, bool forward) {
  const Graph *g = e->g;
  int *list = x->ops + x->start[r - x->first], n = x->start[r - x->first + 1] - x->start[r - x->first];
  int end = x->start[r - x->first + 1], total = x->start[e->L->last_region - x->first + 1];
  e->next_region_op = forward && end < total ? x->ops[end] : -1; /* regions without ops hold none */
  for (int k = 0; k < n; k++) {
    const Op *op = &g->ops[list[k]];
    if (e->done[op->id]) continue;
    if (cu_epilogue_from(e, list, n, k) > 0) continue; /* it emitted (and marked) the ops */
    if (e->o->fuse) {
      bool linear_bias = op->kind == OP_LINEAR && op->nin == 3 && !acc(e, op->out[0]);
      int used = cu_fuse_from(e, list, n, k, linear_bias ? op->id : -1);
      if (used > 0) continue; /* cu_fuse_from emitted (and marked) the ops */
    }
    e->done[op->id] = true;
    emit_op(e, op, false);
  }
}

/* Called by cu_fuse_from for the linear whose bias it fuses: the GEMM alone. */
void cu_emit_linear_gemm(CuEmit *e, const Op *op) { emit_op(e, op, true); }

char *codegen_cuda_library_source(const Graph *g) {
  Str src = {0};
  int hs = layout_cuda_head_size(g); /* the whole graph, not a stage: one library per plan */
  /* nothing of the model but hs: plans with the same head size share the text */
  str_printf(&src,
             "/* " CODEGEN_CUDA_LIBRARY " — the CUDA kernel library of a pd2bw plan, generated by pd2bwc "
             PD2BW_VERSION ". Do not edit.\n"
             " * Every library kernel, one module; each stage's launch list says which kernels it\n"
             " * launches from here (\"module\": \"library\") and which from its stageN.cu. */\n");
  if (hs) str_printf(&src, "\n/* every attention op of the model has head size %d */\n#define PKC_ATT_HS %d\n", hs, hs);
  str_printf(&src, "\n/* ==== kernels/philox.h, cuda_helpers.cuh, cuda_mma.cuh, cuda_flash_*.cuh and cuda_kernels.cuh, verbatim ==== */\n");
  str_printf(&src, "%s", pd_cuda_kernels_src);
  str_printf(&src, "/* ==== end of the kernels ==== */\n");
  return src.p;
}

static void add_blocks(cJSON *j, const StageLayout *L, int64_t scratch, bool bf16) {
  cJSON *b = cJSON_AddObjectToObject(j, "blocks");
  for (int c = BUF_PARAMS; c < BUF_CLASS_COUNT; c++)
    cJSON_AddNumberToObject(b, buf_class_name((BufClass)c), (double)L->total[c]);
  cJSON_AddNumberToObject(b, "cuda_scratch", (double)scratch);
  if (bf16) cJSON_AddNumberToObject(b, "params_bf16", (double)(L->total[BUF_PARAMS] / 2));
}

char *codegen_cuda_source(const Graph *g, const StageLayout *L, int stage, const CodegenCudaOptions *o,
                          cJSON **launch_list) {
  Str src = {0}, own = {0};
  cJSON *j = cJSON_CreateObject();
  CuEmit e = {.g = g, .L = L, .o = o, .stage = stage, .src = &own, .kernels = cJSON_CreateArray()};
  e.done = pd_calloc((size_t)g->nops + 1, 1);
  e.scratch = CU_SCRATCH_ROWS; /* the bad-id counter is always there */
  e.lib_listed = pd_calloc(LIBRARY_KERNELS, sizeof *e.lib_listed);
  e.flash_hs = layout_cuda_flash_head_size(g);
  RegionOps fx = region_ops_index(g, L->fwd_ops, L->nfwd, L->first_region, L->last_region);
  RegionOps bx = region_ops_index(g, L->bwd_ops, L->nbwd, L->first_region, L->last_region);

  cJSON *fwd = cJSON_CreateArray(), *bwd = cJSON_CreateArray();
  e.rng_base = codegen_rng_base(L);
  e.list = fwd;
  e.op_base = e.rng_base;
  for (int r = L->first_region; r <= L->last_region; r++) emit_region(&e, &fx, r, true);
  e.list = bwd;
  e.op_base = INT_MAX; /* the smallest backward op id */
  for (int k = 0; k < L->nbwd; k++)
    if (L->bwd_ops[k] < e.op_base) e.op_base = L->bwd_ops[k];
  for (int r = L->last_region; r >= L->first_region; r--) emit_region(&e, &bx, r, false);
  free(fx.start);
  free(fx.ops);
  free(bx.start);
  free(bx.ops);
  free(e.lib_listed);
  free(e.done);
  /* The block's size is layout_cuda_scratch_bytes's, the figure the planner counts in
   * the stage's device memory; what the launches above reach must lie inside it. */
  int64_t reached = e.scratch;
  e.scratch = layout_cuda_scratch_bytes(L, o->gemm == CGEN_GEMM_BF16);
  PD_CHECK(reached <= e.scratch, "(stage %d's launches reach byte %lld of cuda_scratch, but "
           "layout_cuda_scratch_bytes sizes it %lld: update passes/layout_cuda.c)", stage,
           (long long)reached, (long long)e.scratch);

  str_printf(&src,
             "/* stage%d.cu — generated by pd2bwc " PD2BW_VERSION " from model '%s'. Do not edit.\n"
             " * Stage %d: regions %s..%s, %d forward ops, %d backward ops, microbatch size %lld,\n"
             " * float32. Blocks (bytes): params %lld, grads %lld, stash %lld, work %lld,\n"
             " * inputs %lld, boundary %lld, cuda_scratch %lld. The launch list\n"
             " * (stage%d.launch.json) says what runs. This file defines only the stage's own\n"
             " * kernels; the library kernels it launches are in " CODEGEN_CUDA_LIBRARY ", a module of\n"
             " * their own. */\n",
             stage, g->name, stage, g->regions[L->first_region].name, g->regions[L->last_region].name,
             L->nfwd, L->nbwd, (long long)L->b, (long long)L->total[BUF_PARAMS],
             (long long)L->total[BUF_GRADS], (long long)L->total[BUF_STASH], (long long)L->total[BUF_WORK],
             (long long)L->total[BUF_INPUTS], (long long)L->total[BUF_BOUNDARY], (long long)e.scratch, stage);
  str_printf(&src, "\n/* ==== kernels/philox.h and cuda_helpers.cuh, verbatim ==== */\n");
  str_printf(&src, "%s", pd_cuda_helpers_src);
  str_printf(&src, "/* ==== end of the helpers ==== */\n");
  if (own.p) {
    str_printf(&src,
               "\n/* ==== stage %d's own kernels: fused elementwise chains ==== */\n"
               "#define TF(base, off) ((float *)(void *)((base) + (off)))\n%s",
               stage, own.p);
  }
  free(own.p);

  if (launch_list) {
    char hash[17];
    codegen_hash_hex(src.p, src.n, hash);
    char name[64];
    cJSON_AddNumberToObject(j, "format", CODEGEN_CUDA_LIST_FORMAT);
    snprintf(name, sizeof name, "stage%d.cu", stage);
    cJSON_AddStringToObject(j, "source", name);
    cJSON_AddStringToObject(j, "hash", hash);
    char *lib = codegen_cuda_library_source(g);
    cJSON *lj = cJSON_AddObjectToObject(j, "library");
    cJSON_AddStringToObject(lj, "source", CODEGEN_CUDA_LIBRARY);
    codegen_hash_hex(lib, strlen(lib), hash);
    cJSON_AddStringToObject(lj, "hash", hash);
    free(lib);
    cJSON_AddNumberToObject(j, "microbatch_size", (double)L->b);
    cJSON_AddNumberToObject(j, "block", CU_BLOCK);
    cJSON_AddNumberToObject(j, "att_head_size", layout_cuda_head_size(g));
    cJSON_AddItemToObject(j, "nvrtc_options", cJSON_CreateArray());
    cJSON_AddStringToObject(j, "gemm_dtype", cgen_gemm_dtype_name(o->gemm));
    cJSON_AddStringToObject(j, "mixed_precision", o->gemm == CGEN_GEMM_BF16 ? "bf16-fp32-master" : "none");
    cJSON_AddStringToObject(j, "gemm_epilogues", o->gemm_epilogues ? "on" : "off");
    add_blocks(j, L, e.scratch, o->gemm == CGEN_GEMM_BF16);
    cJSON *cs = cJSON_AddObjectToObject(j, "cuda_scratch");
    cJSON_AddNumberToObject(cs, "bad_ids", CU_SCRATCH_BAD);
    cJSON_AddNumberToObject(cs, "ce_nvalid", CU_SCRATCH_NVALID);
    cJSON_AddNumberToObject(cs, "ce_rows", CU_SCRATCH_ROWS);
    cJSON_AddNumberToObject(cs, "loss", CU_SCRATCH_LOSS);
    cJSON_AddNumberToObject(cs, "microbatch_key", CU_SCRATCH_MBKEY);
    if (o->gemm == CGEN_GEMM_BF16) cJSON_AddNumberToObject(cs, "bf16_staging", (double)cu_bf16_staging(&e));
    if (L->loss >= 0) { /* written by the forward; valid until the next forward */
      cJSON_AddItemToObject(j, "loss", ptr_json(cu_buf(CU_SCRATCH, CU_SCRATCH_LOSS)));
    } else {
      cJSON_AddNullToObject(j, "loss");
    }
    cJSON_AddItemToObject(j, "kernels", e.kernels);
    cJSON_AddItemToObject(j, "forward", fwd);
    cJSON_AddItemToObject(j, "backward", bwd);
    cu_list_segments(g, L, j);
    *launch_list = j;
  } else {
    cJSON_Delete(fwd);
    cJSON_Delete(bwd);
    cJSON_Delete(e.kernels);
    cJSON_Delete(j);
  }
  return src.p;
}
