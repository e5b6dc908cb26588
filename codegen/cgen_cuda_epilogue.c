/* codegen/cgen_cuda_epilogue.c — bias, GELU and bias gradients folded into the GEMMs
 * (pd2bwc --gemm-epilogues on; docs/gpu.md, "GEMM epilogues"): the GEMM entry of the
 * launch list carries an "epilogue" (contract/contract.h: GemmEpilogue), which a GPU
 * runs as a cuBLASLt epilogue (runtime/cuda/cuda_lt.c) and the emulator as the very
 * kernels it replaces. The patterns, a GPT's MLP and projections, are one function
 * each: linear_forward (gelu_aux_bias, bias), matmul_dgelu, dw_bgrad. A linear whose
 * output an elementwise chain reads next keeps a plain GEMM: that chain's fused kernel
 * adds the bias at no cost (cgen_cuda_fuse.c's bias lead; with fusion off the GEMM
 * gets "bias" too). Invariants: an op computed at the GEMM instead of where it stood
 * writes (and reads) earlier, so every op between the two must neither touch what it
 * writes (places, scratch included) nor write what it reads (clear_between), or the
 * GEMM is emitted plain; every tensor involved is unpadded (plain), and an aux has a
 * last dimension divisible by 8 (CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD must be). */
#include "codegen/cgen_cuda_internal.h"
#include "codegen/cgen_lower.h"

#include <string.h>

/* A tensor's (or a scratch area's) bytes in its block. */
typedef struct Span {
  int cls;
  int64_t off, bytes;
} Span;

static Span span(const CuEmit *e, int t) {
  const TensorPlace *p = &e->L->place[t];
  return (Span){(int)p->cls, p->offset, p->bytes};
}

static bool overlap(Span a, Span b) {
  return a.cls == b.cls && a.cls != BUF_NONE && a.bytes > 0 && b.bytes > 0 && a.off < b.off + b.bytes &&
         b.off < a.off + a.bytes;
}

static int64_t lastdim(const CuEmit *e, int t) {
  const Shape *s = &e->g->tensors[t].shape;
  return s->rank ? s->dim[s->rank - 1] : 1;
}

/* t lies in a block, is overwritten (not accumulated) and its rows are unpadded
 * (ld = its last dimension: the emulator's kernels and cuBLASLt's aux layout assume it). */
static bool plain(const CuEmit *e, int t) {
  const TensorPlace *p = &e->L->place[t];
  return p->cls != BUF_NONE && !p->accumulate && e->L->ld[t] == lastdim(e, t);
}

/* No op between positions k and j of ops (exclusive, those not emitted yet: they run
 * after the GEMM) reads or writes `w` (written early) or writes `r` (read early). */
static bool clear_between(const CuEmit *e, const int *ops, int k, int j, Span w, Span r) {
  for (int q = k + 1; q < j; q++) {
    const Op *op = &e->g->ops[ops[q]];
    if (e->done[op->id]) continue;
    Span scr = {BUF_WORK, e->L->scratch_off[op->id], e->L->scratch_bytes[op->id]};
    if (overlap(w, scr)) return false;
    for (int i = 0; i < op->nin; i++)
      if (overlap(w, span(e, op->in[i]))) return false;
    for (int i = 0; i < op->nout; i++)
      if (overlap(w, span(e, op->out[i])) || overlap(r, span(e, op->out[i]))) return false;
  }
  return true;
}

static bool reads(const Op *op, int t) {
  for (int i = 0; i < op->nin; i++)
    if (op->in[i] == t) return true;
  return false;
}

static cJSON *ptr(CuPlace p) {
  cJSON *a = cJSON_CreateObject();
  cJSON_AddStringToObject(a, "buf", cu_buf_name(p.cls));
  cJSON_AddNumberToObject(a, "offset", (double)p.off);
  return a;
}

/* The op's GEMM (emitted by cgen_cuda_ops.c, a linear's bias left out) with the epilogue:
 * C moved to `c` when c.cls >= 0; bias (with bias_acc for bgradb) and aux (ldaux)
 * when their cls >= 0. */
static void gemm_with(CuEmit *e, const Op *op, GemmEpilogue kind, CuPlace c, CuPlace bias, int bias_acc, CuPlace aux,
                      int64_t ldaux) {
  cu_emit_linear_gemm(e, op);
  cJSON *last = cJSON_GetArrayItem(e->list, cJSON_GetArraySize(e->list) - 1);
  cJSON *gm = cJSON_GetObjectItemCaseSensitive(last, "gemm");
  PD_CHECK(gm && cJSON_GetObjectItemCaseSensitive(last, "op")->valueint == op->id - e->op_base,
           "(op %d's GEMM is not the last launch)", op->id);
  if (c.cls >= 0) cJSON_ReplaceItemInObjectCaseSensitive(gm, "C", ptr(c));
  cJSON_AddStringToObject(gm, "epilogue", gemm_epilogue_name(kind));
  if (bias.cls >= 0) cJSON_AddItemToObject(gm, "bias", ptr(bias));
  if (kind == GEMM_EPI_BGRADB) cJSON_AddNumberToObject(gm, "bias_accumulate", bias_acc);
  if (aux.cls >= 0) {
    cJSON_AddItemToObject(gm, "aux", ptr(aux));
    cJSON_AddNumberToObject(gm, "ldaux", (double)ldaux);
  }
  e->done[op->id] = true;
}

static const CuPlace NONE = {-1, 0};

/* linear + bias (+ gelu): gelu_aux_bias (C = the gelu's output, aux = the linear's
 * output, the pre-GELU value gelu_bwd reads, left where the layout put it) or bias. */
static int linear_forward(CuEmit *e, const int *ops, int nops, int k) {
  const Op *op = &e->g->ops[ops[k]];
  int y = op->out[0];
  if (op->kind != OP_LINEAR || op->nin != 3 || !plain(e, y)) return 0;
  CuPlace bias = cu_tensor(e, op->in[2]);
  const Op *ge = k + 1 < nops ? &e->g->ops[ops[k + 1]] : NULL;
  if (ge && !e->done[ge->id] && ge->kind == OP_GELU && ge->in[0] == y && plain(e, ge->out[0]) &&
      lastdim(e, y) % 8 == 0) {
    Span out = span(e, ge->out[0]);
    bool apart = true;
    for (int i = 0; i < op->nin; i++) apart = apart && !overlap(out, span(e, op->in[i]));
    if (apart && !overlap(out, span(e, y))) {
      gemm_with(e, op, GEMM_EPI_GELU_AUX_BIAS, cu_tensor(e, ge->out[0]), bias, 0, cu_tensor(e, y), lastdim(e, y));
      e->done[ge->id] = true;
      return 2;
    }
  }
  /* a chain that reads the output adds the bias for free (cu_fuse_from's bias lead) */
  if (e->o->fuse && ge && !e->done[ge->id] && cgen_fusible(e->g, ge) && reads(ge, y))
    return 0;
  gemm_with(e, op, GEMM_EPI_BIAS, NONE, bias, 0, NONE, 0);
  return 1;
}

/* matmul (a linear's dx) whose output only a later gelu_bwd of the region reads:
 * dgelu, C = the gelu_bwd's output, aux = its pre-GELU input; the matmul's own output
 * is never written. */
static int matmul_dgelu(CuEmit *e, const int *ops, int nops, int k) {
  const Op *op = &e->g->ops[ops[k]];
  int t = op->out[0];
  if (op->kind != OP_MATMUL || !plain(e, t) || e->L->place[t].cls != BUF_WORK || t == e->g->loss) return 0;
  int c = cgen_sole_consumer(e->g, e->L, t), j = k + 1;
  while (j < nops && ops[j] != c) j++;
  if (c < 0 || j == nops || e->done[c]) return 0;
  const Op *gb = &e->g->ops[c];
  int h = gb->in[1], dh = gb->out[0];
  if (gb->kind != OP_GELU_BWD || gb->in[0] != t || h == t || !plain(e, dh) || !plain(e, h) || lastdim(e, dh) % 8)
    return 0;
  Span w = span(e, dh);
  if (overlap(w, span(e, h)) || overlap(w, span(e, op->in[0])) || overlap(w, span(e, op->in[1])) ||
      !clear_between(e, ops, k, j, w, span(e, h)))
    return 0;
  /* bf16 storage: when h is cast up for the gelu_bwd, the cast moves before the GEMM,
   * so h's working place (reserved from the gelu_bwd on) must be touched by nothing
   * from here to there, nor hold the GEMM's operands */
  bool up = cgen_needs_upcast(e->L, gb);
  if (up && (overlap(span(e, h), span(e, op->in[0])) || overlap(span(e, h), span(e, op->in[1])) ||
             !clear_between(e, ops, k, j, span(e, h), span(e, h))))
    return 0;
  if (up) cu_emit_upcasts(e, gb, op->id);
  gemm_with(e, op, GEMM_EPI_DGELU, cu_tensor(e, dh), NONE, 0, cu_tensor(e, h), lastdim(e, h));
  e->done[c] = true;
  return 1;
}

/* linear_dw(x, dy) and a later bias_grad(dy) of the region: bgradb into the bias
 * gradient, accumulating as the bias_grad kernel does. Not with bf16 GEMMs: their B is
 * dy's bfloat16 copy, and the bias gradient would be summed from it, not from float32
 * dy as the CPU program does. */
static int dw_bgrad(CuEmit *e, const int *ops, int nops, int k) {
  const Op *op = &e->g->ops[ops[k]];
  if (op->kind != OP_LINEAR_DW || e->o->gemm == GEMM_BF16) return 0;
  int dy = op->in[1], j = k + 1;
  if (e->L->ld[dy] != lastdim(e, dy)) return 0;
  while (j < nops && !(e->g->ops[ops[j]].kind == OP_BIAS_GRAD && e->g->ops[ops[j]].in[0] == dy)) j++;
  if (j == nops || e->done[ops[j]]) return 0;
  const Op *bg = &e->g->ops[ops[j]];
  int db = bg->out[0];
  Span w = span(e, db);
  if (e->L->place[db].cls == BUF_NONE || overlap(w, span(e, op->out[0])) || overlap(w, span(e, dy)) ||
      overlap(w, span(e, op->in[0])) || !clear_between(e, ops, k, j, w, span(e, dy)))
    return 0;
  gemm_with(e, op, GEMM_EPI_BGRADB, NONE, cu_tensor(e, db), e->L->place[db].accumulate ? 1 : 0, NONE, 0);
  e->done[bg->id] = true;
  return 1;
}

int cu_epilogue_from(CuEmit *e, const int *ops, int nops, int k) {
  if (!e->o->gemm_epilogues) return 0;
  int n = linear_forward(e, ops, nops, k);
  if (!n) n = matmul_dgelu(e, ops, nops, k);
  if (!n) n = dw_bgrad(e, ops, nops, k);
  return n;
}
