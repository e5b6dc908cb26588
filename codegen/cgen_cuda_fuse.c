/* codegen/cgen_cuda_fuse.c — the stage's own kernels: fused elementwise chains.
 *
 * The chains are cgen_c.c's (the same rule, so the two programs agree on what is
 * stored): consecutive ops of one region among add (same shape or a bias vector),
 * mul, scale, gelu, relu, dropout and dropout_bwd, where every intermediate has one
 * consumer, lives in WORK, is not accumulated and is not the loss; intermediates
 * stay in registers. One GPU addition: a linear with a bias is emitted as its GEMM
 * (beta 0) followed by a kernel that adds the bias in place — and that kernel then
 * continues with the chain that consumes the linear's output (bias + gelu, bias +
 * dropout + residual add), so the pre-activation is read and written once.
 *
 * A generated kernel takes the blocks' bases and finds every operand at a literal
 * offset; lengths are literals too. Dropout inside draws the same Philox element as
 * pkc_dropout_fwd_f32 and the CPU program (element i of the forward op's stream),
 * so masks agree bit for bit; its microbatch index is read once from the key in
 * cuda_scratch (mbkey, null for a chain without a random op), never passed by value,
 * so the launch is the same for every microbatch (a CUDA graph replays it). A chain
 * is cut short while its final output would overlap an operand it still reads at
 * another place (threads run in any order).
 */
#include "codegen/cgen_cuda_internal.h"

#include <string.h>

#include "kernels/cuda_kernel_list.h"

#define MAX_CHAIN 16

static bool fusible_kind(const Graph *g, const Op *op) {
  OpKind k = op->kind;
  if (k == OP_ADD || k == OP_MUL) return g->tensors[op->in[0]].dtype == DT_F32;
  return k == OP_SCALE || k == OP_GELU || k == OP_RELU || k == OP_DROPOUT || k == OP_DROPOUT_BWD;
}

static bool acc(const CuEmit *e, int t) { return e->L->place[t].accumulate; }

static bool uses(const Op *op, int t) {
  for (int i = 0; i < op->nin; i++)
    if (op->in[i] == t) return true;
  return false;
}

/* Writing `out` elementwise could clobber an element of `in` not yet read. */
static bool hazard(const CuEmit *e, int out, int in) {
  const TensorPlace *a = &e->L->place[out], *b = &e->L->place[in];
  if (a->cls != b->cls) return false;
  bool disjoint = a->offset + a->bytes <= b->offset || b->offset + b->bytes <= a->offset;
  return !disjoint && !(a->offset == b->offset && a->bytes == b->bytes);
}

static const char *base_name(int cls) {
  switch ((BufClass)cls) {
  case BUF_PARAMS: return "P";
  case BUF_GRADS: return "G";
  case BUF_STASH: return "S";
  case BUF_WORK: return "W";
  case BUF_INPUTS: return "I";
  case BUF_BOUNDARY: return "X";
  case BUF_NONE:
  case BUF_CLASS_COUNT: break;
  }
  PD_CHECK(false, "(no base for block %d)", cls);
  return "?";
}

/* "TF(W, 1234)[i]" or, for a bias vector, "TF(P, 64)[i % 768]". */
static void operand(const CuEmit *e, char *b, size_t n, int t, int64_t len) {
  CuPtr p = cu_tensor(e, t);
  int64_t m = cu_numel(e, t);
  if (m != len)
    snprintf(b, n, "TF(%s, %lld)[i %% %lld]", base_name(p.cls), (long long)p.off, (long long)m);
  else
    snprintf(b, n, "TF(%s, %lld)[i]", base_name(p.cls), (long long)p.off);
}

/* Extends chain[0..n) (n may be 0 when a bias lead feeds it: `t0` is then the lead's
 * output) with the consecutive ops ops[next..]. */
static int extend(CuEmit *e, const int *ops, int nops, int next, int region, int t0, int64_t len,
                  int *chain, int n) {
  const Graph *g = e->g;
  while (n < MAX_CHAIN && next + n < nops) {
    int t;
    if (n == 0) {
      t = t0; /* the linear's output: stored anyway, may have other readers */
    } else {
      t = g->ops[chain[n - 1]].out[0];
      const TensorPlace *pl = &e->L->place[t];
      if (pl->cls != BUF_WORK || pl->accumulate || pl->alias >= 0 || t == g->loss) break;
    }
    int c = ops[next + n];
    const Op *nx = &g->ops[c];
    if (e->done[c] || nx->region != region || !fusible_kind(g, nx)) break;
    if (n > 0 ? cgen_sole_consumer(e->g, e->L, t) != c : !uses(nx, t)) break;
    if (cu_numel(e, nx->out[0]) != len || acc(e, nx->out[0])) break;
    if ((nx->kind == OP_ADD || nx->kind == OP_MUL) && nx->in[0] == nx->in[1]) break;
    chain[n++] = c;
  }
  return n;
}

int cu_fuse_from(CuEmit *e, const int *ops, int nops, int k, int bias_lead) {
  const Graph *g = e->g;
  const Op *first = &g->ops[ops[k]];
  int chain[MAX_CHAIN], n = 0, lead_y = -1;
  int64_t len;
  if (bias_lead >= 0) {
    lead_y = first->out[0];
    len = cu_numel(e, lead_y);
    n = extend(e, ops, nops, k + 1, first->region, lead_y, len, chain, 0);
  } else {
    if (!fusible_kind(g, first) || acc(e, first->out[0])) return 0;
    len = cu_numel(e, first->out[0]);
    chain[n++] = ops[k];
    n = extend(e, ops, nops, k + 1, first->region, first->out[0], len, chain, 1);
  }
  /* Drop ops from the end until the final output clobbers nothing still read. */
  while (n > 0) {
    int out = g->ops[chain[n - 1]].out[0];
    bool bad = lead_y >= 0 && hazard(e, out, lead_y);
    for (int i = 0; i < n && !bad; i++) {
      const Op *op = &g->ops[chain[i]];
      for (int j = 0; j < op->nin && !bad; j++) {
        int x = op->in[j];
        bool internal = i > 0 && x == g->ops[chain[i - 1]].out[0];
        if (!internal && x != lead_y && hazard(e, out, x)) bad = true;
      }
    }
    if (!bad) break;
    n--;
  }
  if (bias_lead >= 0 ? n == 0 : n < 2) return 0;

  for (int i = 0; i < n; i++) e->done[chain[i]] = true;
  if (bias_lead >= 0) {
    e->done[first->id] = true;
    cu_emit_linear_gemm(e, first); /* the GEMM only: the bias is added below */
  }

  Str *s = e->src;
  int out = g->ops[chain[n - 1]].out[0];
  bool random = false; /* a dropout with p > 0: the kernel reads the microbatch key */
  for (int i = 0; i < n; i++) {
    const Op *op = &g->ops[chain[i]];
    if ((op->kind == OP_DROPOUT || op->kind == OP_DROPOUT_BWD) && op->attr[0] > 0) random = true;
  }
  char name[64];
  snprintf(name, sizeof name, "s%d_fused%d", e->stage, e->nfused++);
  str_printf(s, "\n/* fused:");
  if (bias_lead >= 0) str_printf(s, " bias of linear(op %d)", first->id);
  for (int i = 0; i < n; i++) str_printf(s, " %s(op %d)", op_info[g->ops[chain[i]].kind].name, chain[i]);
  str_printf(s, " -> %s, %lld elements */\n", g->tensors[out].name, (long long)len);
  str_printf(s,
             "extern \"C\" __global__ void %s(char *P, char *G, char *S, char *W, char *I, char *X,\n"
             "    pkc_u64 seed, const pkc_u32 *mbkey, int training) {\n"
             "  (void)P, (void)G, (void)S, (void)W, (void)I, (void)X, (void)seed, (void)mbkey;\n",
             name);
  if (random) /* read once, in device memory: the runtime writes it before the pass */
    str_printf(s, "  const pkc_u32 microbatch = training ? *mbkey : 0u;\n");
  for (int i = 0; i < n; i++) {
    const Op *op = &g->ops[chain[i]];
    if ((op->kind == OP_DROPOUT || op->kind == OP_DROPOUT_BWD) && op->attr[0] > 0) {
      str_printf(s, "  const double p%d = training ? %.17g : 0.0;\n", i, op->attr[0]);
      str_printf(s, "  const pkc_u64 thr%d = pk_rng_threshold(p%d);\n", i, i);
      str_printf(s, "  const float ks%d = pkc_keep_scale(p%d);\n", i, i);
    }
  }
  str_printf(s, "  (void)training;\n  for (pkc_i64 i = pkc_tid(); i < %lldLL; i += pkc_nthreads()) {\n",
             (long long)len);
  char a[160], other[160];
  const char *prev = NULL;
  char prevbuf[16];
  if (bias_lead >= 0) {
    /* the linear's output is stored unless it is an intermediate like any other */
    const TensorPlace *pl = &e->L->place[lead_y];
    bool keep = pl->cls != BUF_WORK || pl->accumulate || pl->alias >= 0 || lead_y == g->loss ||
                cgen_sole_consumer(e->g, e->L, lead_y) != chain[0];
    operand(e, a, sizeof a, lead_y, len);
    operand(e, other, sizeof other, first->in[2], len);
    str_printf(s, "    const float vb = %s + %s;\n", a, other);
    if (keep) str_printf(s, "    %s = vb;\n", a);
    prev = "vb";
  }
  for (int i = 0; i < n; i++) {
    const Op *op = &g->ops[chain[i]];
    int in_chain = i > 0 ? g->ops[chain[i - 1]].out[0] : lead_y; /* the value in a register */
    char x[160];
    if (prev && (in_chain == op->in[0] || (op->nin > 1 && in_chain == op->in[1])))
      snprintf(x, sizeof x, "%s", prev);
    else
      operand(e, x, sizeof x, op->in[0], len);
    if (op->kind == OP_ADD || op->kind == OP_MUL) {
      int oth = prev && op->in[0] == in_chain ? op->in[1] : prev && op->in[1] == in_chain ? op->in[0] : op->in[1];
      operand(e, other, sizeof other, oth, len);
    }
    str_printf(s, "    const float v%d = ", i);
    if (op->kind == OP_ADD) {
      str_printf(s, "%s + %s", x, other);
    } else if (op->kind == OP_MUL) {
      str_printf(s, "%s * %s", x, other);
    } else if (op->kind == OP_SCALE) {
      str_printf(s, "(float)%.17g * %s", op->attr[0], x);
    } else if (op->kind == OP_RELU) {
      str_printf(s, "%s > 0 ? %s : 0.0f", x, x);
    } else if (op->kind == OP_GELU) {
      str_printf(s, "0.5f * %s * (1.0f + tanhf(PKC_GELU_K * (%s + PKC_GELU_A * %s * %s * %s)))", x, x, x, x, x);
    } else if ((op->kind == OP_DROPOUT || op->kind == OP_DROPOUT_BWD) && op->attr[0] > 0) {
      /* the backward replays its forward's stream */
      str_printf(s,
                 "(pkc_u64)pk_rng_block(seed, %du, microbatch, (pkc_u64)i >> 2).v[i & 3] >= thr%d ? %s * ks%d : 0.0f",
                 op->kind == OP_DROPOUT ? op->id : op->fwd_op, i, x, i);
    } else {
      PD_CHECK(op->kind == OP_DROPOUT || op->kind == OP_DROPOUT_BWD, "(op %s in a fused chain)",
               op_info[op->kind].name);
      str_printf(s, "%s", x); /* dropout with p = 0 */
    }
    str_printf(s, ";\n");
    snprintf(prevbuf, sizeof prevbuf, "v%d", i);
    prev = prevbuf;
  }
  operand(e, a, sizeof a, out, len);
  str_printf(s, "    %s = %s;\n", a, prev);
  str_printf(s, "  }\n}\n");

  cu_launch(e, chain[n - 1], name, PKC_ELEM, len, CU_BLOCK, 9, cu_arg_ptr(cu_buf(BUF_PARAMS, 0)),
            cu_arg_ptr(cu_buf(BUF_GRADS, 0)), cu_arg_ptr(cu_buf(BUF_STASH, 0)), cu_arg_ptr(cu_buf(BUF_WORK, 0)),
            cu_arg_ptr(cu_buf(BUF_INPUTS, 0)), cu_arg_ptr(cu_buf(BUF_BOUNDARY, 0)), cu_arg_runtime("u64", "seed", 0),
            cu_arg_ptr(random ? cu_buf(CU_SCRATCH, CU_SCRATCH_MBKEY) : (CuPtr){-1, 0}),
            cu_arg_runtime("i32", "training", 0));
  return n + (bias_lead >= 0 ? 1 : 0);
}
