/* codegen/cgen_c.c — the C program of one stage (see codegen.h).
 *
 * Layout of a generated stageN.c:
 *   1. a banner (model, stage, regions, microbatch size, real type);
 *   2. the kernels' text, verbatim (philox.h then cpu_kernels.h), instantiated for
 *      float or, with CodegenOptions.f64, double;
 *   3. StageCtx (the stringised PD2BW_STAGE_CTX_FIELDS) and short macros that turn
 *      (block, constant offset) into a typed pointer;
 *   4. per region, a static forward and a static backward function: one kernel call
 *      (or one fused loop, cgen_c_fuse.c, tried first at each op) per op, every shape
 *      and offset a literal;
 *   5. the exported entry points (cgen_c_entry.c).
 * Ops map to kernels by the table's op family (emit_op): a generic family's op is the
 * call cgen_lower.h derives from its ops.def row; the others have one emitter per
 * family here, each switching over its own kinds. */
#include "codegen/cgen_c_internal.h"
#include "codegen/cgen_lower.h"

#include <inttypes.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "pk_kernels_src.h"

#define STR_(x) #x
#define STR(x) STR_(x)

void str_printf(Str *s, const char *fmt, ...) {
  va_list ap;
  for (;;) {
    size_t room = s->cap - s->n;
    va_start(ap, fmt);
    int k = vsnprintf(s->p ? s->p + s->n : NULL, s->p ? room : 0, fmt, ap);
    va_end(ap);
    PD_CHECK(k >= 0, "(vsnprintf)");
    if (s->p && (size_t)k < room) {
      s->n += (size_t)k;
      return;
    }
    s->cap = s->cap * 2 + (size_t)k + 256;
    s->p = pd_realloc(s->p, s->cap);
  }
}

/* ---- operands ------------------------------------------------------------------ */

static const char *base_of(BufClass c) {
  switch (c) {
  case BUF_PARAMS: return "P";
  case BUF_GRADS: return "G";
  case BUF_STASH: return "S";
  case BUF_WORK: return "W";
  case BUF_INPUTS: return "I";
  case BUF_BOUNDARY: return "X";
  case BUF_NONE:
  case BUF_CLASS_COUNT: break;
  }
  PD_CHECK(false, "(tensor without a place)");
  return "?";
}

/* A typed pointer expression for tensor t (in e->strs: lives as long as the emit). */
const char *cc_ptr(Emit *e, int t) {
  const TensorPlace *pl = &e->L->place[t];
  const char *ty = e->g->tensors[t].dtype == DT_I32 ? "TI" : "TR";
  return arena_printf(e->strs, "%s(%s, %lld)", ty, base_of(pl->cls), (long long)(pl->offset * e->rs));
}

int64_t cc_numel(Emit *e, int t) { return shape_numel(&e->g->tensors[t].shape, e->L->b); }
int64_t cc_lastd(Emit *e, int t) {
  const Shape *s = &e->g->tensors[t].shape;
  return s->rank ? s->dim[s->rank - 1] : 1;
}
static int64_t rows(Emit *e, int t) { return cc_numel(e, t) / cc_lastd(e, t); }

bool cc_acc(Emit *e, int t) { return e->L->place[t].accumulate; }

/* True when t was placed on (accumulated into) the same gradient as `into`. */
static bool folded_into(Emit *e, int t, int into) {
  const TensorPlace *a = &e->L->place[t], *b = &e->L->place[into];
  return a->alias >= 0 && a->cls == b->cls && a->offset == b->offset && a->accumulate;
}

/* "ctx->training ? p : 0.0": evaluation turns dropout off. */
const char *cc_pexpr(Emit *e, double p) {
  return p == 0 ? "0.0" : arena_printf(e->strs, "(ctx->training ? %.17g : 0.0)", p);
}

static void rng(Emit *e, char *b, size_t n, int opid) {
  snprintf(b, n, "(PkRng){ctx->seed, ctx->rng_base + %du, ctx->microbatch}", opid - e->rng_base);
}

int codegen_rng_base(const StageLayout *L) {
  int base = INT_MAX;
  for (int k = 0; k < L->nfwd; k++)
    if (L->fwd_ops[k] < base) base = L->fwd_ops[k];
  return base == INT_MAX ? 0 : base;
}

/* The scratch temporary of an op that must add its result into a gradient. */
static const char *acc_temp(Emit *e, const Op *op) {
  int64_t k = layout_op_scratch_elems(e->g, op, e->L->b) * 4;
  k = (k + LAYOUT_ALIGN - 1) / LAYOUT_ALIGN * LAYOUT_ALIGN;
  return arena_printf(e->strs, "TR(W, %lld)", (long long)((e->L->scratch_off[op->id] + k) * e->rs));
}

static const char *scratch(Emit *e, const Op *op) {
  return arena_printf(e->strs, "TR(W, %lld)", (long long)(e->L->scratch_off[op->id] * e->rs));
}

static void describe(Emit *e, const Op *op) {
  const Graph *g = e->g;
  char sb[64];
  str_printf(e->s, "  /* op %d %s:", op->id, op_info[op->kind].name);
  for (int i = 0; i < op->nout; i++)
    str_printf(e->s, " %s%s", g->tensors[op->out[i]].name,
               shape_str(&g->tensors[op->out[i]].shape, sb, sizeof sb));
  str_printf(e->s, " <-");
  for (int i = 0; i < op->nin; i++) str_printf(e->s, " %s", g->tensors[op->in[i]].name);
  str_printf(e->s, " */\n");
}

/* ---- one op ------------------------------------------------------------------------- */

/* Where an op's kernel writes (emit_op works it out, a family's emitter uses it): y,
 * the op's output; Y, the pointer expression written, y's place or, when y must
 * accumulate but the kernel cannot, the op's scratch temporary (emit_op then adds it
 * into y); A: y is accumulated into. */
typedef struct OpDest {
  int y;
  const char *Y;
  int A;
  bool via_temp;
} OpDest;

/* Ids select rows: embedding, positions and gather, and their gradients. */
static void emit_lookup(Emit *e, const Op *op, const OpDest *d) {
  const Graph *g = e->g;
  Str *s = e->s;
  int y = d->y;
  const char *Y = d->Y;
  int A = d->A;
  switch ((int)op->kind) { /* emit_op's switch names every kind; here only the family's */
  case OP_EMBEDDING:
    str_printf(s, "  ctx->bad_ids += K(embedding_fwd)(%s, %s, %s, %lld, %lld, %lld);\n", Y,
               cc_ptr(e, op->in[0]), cc_ptr(e, op->in[1]), (long long)cc_numel(e, op->in[1]),
               (long long)cc_lastd(e, op->in[0]), (long long)g->tensors[op->in[0]].shape.dim[0]);
    break;
  case OP_POSITIONS: {
    int64_t T = cc_lastd(e, op->in[1]);
    str_printf(s, "  K(positions_fwd)(%s, %s, %lld, %lld, %lld);\n", Y, cc_ptr(e, op->in[0]),
               (long long)(cc_numel(e, op->in[1]) / T), (long long)T, (long long)cc_lastd(e, op->in[0]));
    break;
  }
  case OP_GATHER: {
    int64_t P = cc_lastd(e, op->in[1]), T = g->tensors[op->in[0]].shape.dim[1];
    str_printf(s, "  ctx->bad_ids += K(gather_fwd)(%s, %s, %s, %lld, %lld, %lld, %lld);\n", Y,
               cc_ptr(e, op->in[0]), cc_ptr(e, op->in[1]), (long long)(cc_numel(e, op->in[1]) / P),
               (long long)T, (long long)P, (long long)cc_lastd(e, y));
    break;
  }
  case OP_EMBEDDING_BWD:
    str_printf(s, "  K(embedding_bwd)(%s, %s, %s, %lld, %lld, %lld, %d);\n", Y, cc_ptr(e, op->in[0]),
               cc_ptr(e, op->in[1]), (long long)cc_numel(e, op->in[1]), (long long)cc_lastd(e, y),
               (long long)op->attr[0], A);
    break;
  case OP_POSITIONS_BWD: {
    const Shape *dy = &g->tensors[op->in[0]].shape;
    int64_t C = cc_lastd(e, op->in[0]), T = dy->dim[dy->rank - 2];
    str_printf(s, "  K(positions_bwd)(%s, %s, %lld, %lld, %lld, %lld, %d);\n", Y, cc_ptr(e, op->in[0]),
               (long long)(cc_numel(e, op->in[0]) / (T * C)), (long long)T, (long long)C,
               (long long)op->attr[0], A);
    break;
  }
  case OP_GATHER_BWD: {
    int64_t P = cc_lastd(e, op->in[1]);
    str_printf(s, "  ctx->bad_ids += K(gather_bwd)(%s, %s, %s, %lld, %lld, %lld, %lld);\n", Y,
               cc_ptr(e, op->in[0]), cc_ptr(e, op->in[1]), (long long)(cc_numel(e, op->in[1]) / P),
               (long long)op->attr[0], (long long)P, (long long)cc_lastd(e, y));
    break;
  }
  default:
    PD_CHECK(false, "(op %s is not of emit_lookup's family)", op_info[op->kind].name);
  }
}

/* The dense layers: linear and matmul (GEMMs) and their weight gradients. */
static void emit_dense(Emit *e, const Op *op, const OpDest *d) {
  Str *s = e->s;
  int y = d->y;
  const char *Y = d->Y;
  int A = d->A;
  if (cc_gemm_bf16(e, op, Y, A)) return; /* it reads the classifier's bf16 gradient */
  switch ((int)op->kind) { /* emit_op's switch names every kind; here only the family's */
  case OP_LINEAR:
    str_printf(s, "  K(linear_fwd)(%s, %s, %s, %s, %lld, %lld, %lld);\n", Y, cc_ptr(e, op->in[0]),
               cc_ptr(e, op->in[1]), op->nin == 3 ? cc_ptr(e, op->in[2]) : "NULL",
               (long long)rows(e, op->in[0]), (long long)cc_lastd(e, op->in[0]),
               (long long)cc_lastd(e, y));
    break;
  case OP_MATMUL:
    str_printf(s, "  K(matmul_fwd)(%s, %s, %s, %lld, %lld, %lld, 0, %d);\n", Y, cc_ptr(e, op->in[0]),
               cc_ptr(e, op->in[1]), (long long)rows(e, op->in[0]), (long long)cc_lastd(e, op->in[0]),
               (long long)cc_lastd(e, y), op->attr[0] != 0);
    break;
  case OP_LINEAR_DW:
    str_printf(s, "  K(linear_dw)(%s, %s, %s, %lld, %lld, %lld, %d);\n", Y, cc_ptr(e, op->in[0]),
               cc_ptr(e, op->in[1]), (long long)rows(e, op->in[0]), (long long)cc_lastd(e, op->in[0]),
               (long long)cc_lastd(e, op->in[1]), A);
    break;
  case OP_MATMUL_DW_T: /* dW[N,K] = dy[M,N]ᵀ·x[M,K] */
    str_printf(s, "  K(matmul_db)(%s, %s, %s, %lld, %lld, %lld, 0, 1, %d);\n", Y, cc_ptr(e, op->in[1]),
               cc_ptr(e, op->in[0]), (long long)rows(e, op->in[1]), (long long)cc_lastd(e, op->in[1]),
               (long long)cc_lastd(e, op->in[0]), A);
    break;
  default:
    PD_CHECK(false, "(op %s is not of emit_dense's family)", op_info[op->kind].name);
  }
}

/* Element for element, lowered by hand: add, scale, dropout (and its gradient) and reshape. */
static void emit_elementwise(Emit *e, const Op *op, const OpDest *d) {
  const Graph *g = e->g;
  Str *s = e->s;
  char r[96];
  int y = d->y;
  const char *Y = d->Y;
  int A = d->A;
  bool via_temp = d->via_temp;
  switch ((int)op->kind) { /* emit_op's switch names every kind; here only the family's */
  case OP_ADD:
    if (A && !via_temp) {
      for (int i = 0; i < 2; i++) {
        if (i == 1 && op->in[1] == op->in[0]) {
          str_printf(s, "  K(axpy)(%s, 1, %s, %lld);\n", Y, cc_ptr(e, op->in[1]), (long long)cc_numel(e, y));
          continue;
        }
        if (folded_into(e, op->in[i], y)) continue;
        PD_CHECK(cc_numel(e, op->in[i]) == cc_numel(e, y), "(accumulating a broadcast add)");
        str_printf(s, "  K(axpy)(%s, 1, %s, %lld);\n", Y, cc_ptr(e, op->in[i]), (long long)cc_numel(e, y));
      }
    } else if (cc_numel(e, op->in[1]) == cc_numel(e, y)) {
      str_printf(s, "  K(add_fwd)(%s, %s, %s, %lld);\n", Y, cc_ptr(e, op->in[0]), cc_ptr(e, op->in[1]),
                 (long long)cc_numel(e, y));
    } else {
      str_printf(s, "  K(add_bias_fwd)(%s, %s, %s, %lld, %lld);\n", Y, cc_ptr(e, op->in[0]),
                 cc_ptr(e, op->in[1]), (long long)rows(e, y), (long long)cc_lastd(e, y));
    }
    break;
  case OP_SCALE:
    if (A && !via_temp) {
      if (!folded_into(e, op->in[0], y))
        str_printf(s, "  K(axpy)(%s, (R)%.17g, %s, %lld);\n", Y, op->attr[0], cc_ptr(e, op->in[0]),
                   (long long)cc_numel(e, y));
    } else {
      str_printf(s, "  K(scale_fwd)(%s, %s, (R)%.17g, %lld);\n", Y, cc_ptr(e, op->in[0]), op->attr[0],
                 (long long)cc_numel(e, y));
    }
    break;
  case OP_DROPOUT:
  case OP_DROPOUT_BWD:
    rng(e, r, sizeof r, op_rng_stream(op));
    str_printf(s, "  K(%s)(%s, %s, %lld, %s, %s);\n", op_info[op->kind].kernel, Y, cc_ptr(e, op->in[0]),
               (long long)cc_numel(e, y), cc_pexpr(e, op_rng_p(op)), r);
    break;
  case OP_RESHAPE:
    str_printf(s, "  memmove(%s, %s, %lld);\n", Y, cc_ptr(e, op->in[0]),
               (long long)(e->L->place[y].bytes * (g->tensors[y].dtype == DT_I32 ? 1 : e->rs)));
    break;
  default:
    PD_CHECK(false, "(op %s is not of emit_elementwise's family)", op_info[op->kind].name);
  }
}

/* Layernorm and its gradient. */
static void emit_norm(Emit *e, const Op *op, const OpDest *d) {
  Str *s = e->s;
  int y = d->y;
  const char *Y = d->Y;
  switch ((int)op->kind) { /* emit_op's switch names every kind; here only the family's */
  case OP_LAYERNORM:
    str_printf(s, "  K(layernorm_fwd)(%s, NULL, %s, %s, %s, %lld, %lld, (R)%.17g);\n", Y,
               cc_ptr(e, op->in[0]), cc_ptr(e, op->in[1]), cc_ptr(e, op->in[2]), (long long)rows(e, y),
               (long long)cc_lastd(e, y), op->attr[0]);
    break;
  case OP_LAYERNORM_BWD: {
    int dg = op->out[1], db = op->out[2];
    bool want_g = cc_acc(e, dg) || cgen_sole_consumer(e->g, e->L, dg) >= 0 || e->L->place[dg].cls != BUF_WORK;
    bool want_b = cc_acc(e, db) || cgen_sole_consumer(e->g, e->L, db) >= 0 || e->L->place[db].cls != BUF_WORK;
    PD_CHECK(!(want_g && want_b) || cc_acc(e, dg) == cc_acc(e, db), "(layernorm_bwd: one of dgamma/dbeta accumulated)");
    int la = (want_g && cc_acc(e, dg)) || (want_b && cc_acc(e, db));
    str_printf(s, "  K(layernorm_bwd)(%s, %s, %s, %s, 0, %s, %s, %s, %lld, %lld, (R)%.17g, %d);\n",
               cc_ptr(e, y), want_g ? cc_ptr(e, dg) : "NULL", want_b ? cc_ptr(e, db) : "NULL",
               scratch(e, op), cc_ptr(e, op->in[0]), cc_ptr(e, op->in[1]), cc_ptr(e, op->in[2]),
               (long long)rows(e, y), (long long)cc_lastd(e, y), op->attr[0], la);
    break;
  }
  default:
    PD_CHECK(false, "(op %s is not of emit_norm's family)", op_info[op->kind].name);
  }
}

/* Attention and its gradient. */
static void emit_attention(Emit *e, const Op *op, const OpDest *d) {
  const Graph *g = e->g;
  Str *s = e->s;
  char r[96];
  const char *Y = d->Y;
  switch ((int)op->kind) { /* emit_op's switch names every kind; here only the family's */
  case OP_ATTENTION:
  case OP_ATTENTION_BWD: {
    int qkv = op->in[op->kind == OP_ATTENTION ? 0 : 1];
    const Shape *q = &g->tensors[qkv].shape;
    int64_t T = q->dim[1], C = cc_lastd(e, qkv) / 3, B = cc_numel(e, qkv) / (T * 3 * C);
    rng(e, r, sizeof r, op_rng_stream(op));
    if (op->kind == OP_ATTENTION)
      str_printf(s, "  K(attention_fwd)(%s, %s, %s, %s, %lld, %lld, %lld, %d, %d, %s, %s);\n", Y,
                 cc_ptr(e, op->out[1]), cc_ptr(e, qkv), scratch(e, op), (long long)B, (long long)T, (long long)C,
                 (int)op->attr[0], (int)op->attr[1], cc_pexpr(e, op->attr[2]), r);
    else
      str_printf(s, "  K(attention_bwd)(%s, %s, %s, %s, %s, %s, %lld, %lld, %lld, %d, %d, %s, %s);\n",
                 Y, cc_ptr(e, op->in[0]), cc_ptr(e, qkv), cc_ptr(e, op->in[2]), cc_ptr(e, op->in[3]), scratch(e, op), (long long)B, (long long)T,
                 (long long)C, (int)op->attr[0], (int)op->attr[1], cc_pexpr(e, op->attr[2]), r);
    break;
  }
  case OP_ATTENTION_GQA:
  case OP_ATTENTION_GQA_BWD: { /* separate q, k, v; kv_heads dividing heads */
    AttnGeom a;
    op_attention_geom(g, op, &a);
    int64_t T = a.T, B = cc_numel(e, a.q) / (T * a.heads * a.hs);
    rng(e, r, sizeof r, op_rng_stream(op));
    if (a.fwd) {
      str_printf(s, "  K(attention_gqa_fwd)(%s, %s, %s, %s, %s, %s, %lld, %lld, %d, %d, %lld, %d, %s, %s);\n", Y,
                 cc_ptr(e, op->out[1]), cc_ptr(e, op->in[0]), cc_ptr(e, op->in[1]), cc_ptr(e, op->in[2]),
                 scratch(e, op), (long long)B, (long long)T, a.heads, a.kv_heads, (long long)a.hs, a.causal,
                 cc_pexpr(e, a.p), r);
      break;
    }
    PD_CHECK(!cc_acc(e, op->out[1]) && !cc_acc(e, op->out[2]), "(attention_gqa_bwd: dk or dv accumulated)");
    str_printf(s, "  K(attention_gqa_bwd)(%s, %s, %s, %s, %s, ", Y, cc_ptr(e, op->out[1]), cc_ptr(e, op->out[2]),
               cc_ptr(e, op->in[0]), cc_ptr(e, op->in[1]));
    str_printf(s, "%s, %s, %s, %s, %s, %lld, %lld, %d, %d, %lld, %d, %s, %s);\n", cc_ptr(e, op->in[2]),
               cc_ptr(e, op->in[3]), cc_ptr(e, op->in[4]), cc_ptr(e, op->in[5]), scratch(e, op), (long long)B,
               (long long)T, a.heads, a.kv_heads, (long long)a.hs, a.causal, cc_pexpr(e, a.p), r);
    break;
  }
  default:
    PD_CHECK(false, "(op %s is not of emit_attention's family)", op_info[op->kind].name);
  }
}

/* The loss: cross-entropy and its gradient. */
static void emit_loss(Emit *e, const Op *op, const OpDest *d) {
  Str *s = e->s;
  const char *Y = d->Y;
  switch ((int)op->kind) { /* emit_op's switch names every kind; here only the family's */
  case OP_CROSS_ENTROPY:
    str_printf(s,
               "  {\n    R l_;\n    ctx->bad_ids += K(cross_entropy_fwd)(&l_, %s, %s, %lld, %lld, %d);\n"
               "    *%s = l_;\n    if (ctx->loss) *ctx->loss = (double)l_;\n  }\n",
               cc_ptr(e, op->in[0]), cc_ptr(e, op->in[1]), (long long)rows(e, op->in[0]),
               (long long)cc_lastd(e, op->in[0]), (int)op->attr[0], Y);
    cc_classifier_fwd(e, op);
    break;
  case OP_CROSS_ENTROPY_BWD:
    str_printf(s, "  K(cross_entropy_bwd)(%s, %s, %s, %lld, %lld, %d, (R)1);\n", Y, cc_ptr(e, op->in[0]),
               cc_ptr(e, op->in[1]), (long long)rows(e, op->in[0]), (long long)cc_lastd(e, op->in[0]),
               (int)op->attr[0]);
    break;
  default:
    PD_CHECK(false, "(op %s is not of emit_loss's family)", op_info[op->kind].name);
  }
}

/* A generic family's op (cgen_lower.h): its kernel call, as the table gives it. */
static void emit_generic(Emit *e, const Op *op, const OpDest *d) {
  KernelCall c = cgen_lower_call(e->g, op, e->L->b, d->A);
  str_printf(e->s, "  K(%s)(", c.kernel);
  for (int i = 0; i < c.nargs; i++) {
    const KArg *a = &c.arg[i];
    if (i) str_printf(e->s, ", ");
    switch (a->kind) {
    case KARG_DEST: str_printf(e->s, "%s", d->Y); break;
    case KARG_TENSOR: str_printf(e->s, "%s", cc_ptr(e, a->tensor)); break;
    case KARG_I64:
    case KARG_I32: str_printf(e->s, "%lld", (long long)a->value); break;
    case KARG_REAL: str_printf(e->s, "(R)%.17g", a->value); break;
    case KARG_FLAG: str_printf(e->s, "%d", (int)a->value); break;
    }
  }
  str_printf(e->s, ");\n");
}

/* One kernel call (or a few) per op, by the table's op family: generic families
 * lower through cgen_lower.h, the others through their family's emitter. An output
 * the layout places with `accumulate` is added into (kernel flag, or an axpy from the
 * op's scratch temporary), and an add whose inputs were all accumulated onto its
 * output emits nothing. */
static void emit_op(Emit *e, const Op *op) {
  int y = op->out[0];
  OpDest d = {.y = y, .Y = cc_ptr(e, y)};
  describe(e, op);
  /* An op that must accumulate but cannot computes into its scratch temporary. */
  d.via_temp = cc_acc(e, y) && e->L->place[y].alias < 0 && !op_has(op->kind, OPF_ACCUMULATES);
  if (d.via_temp) d.Y = acc_temp(e, op);
  d.A = cc_acc(e, y) ? 1 : 0;
  switch (op_info[op->kind].family) {
  case OPFAM_MAP:
  case OPFAM_ROWS:
  case OPFAM_SEQ: emit_generic(e, op, &d); break;
  case OPFAM_LOOKUP: emit_lookup(e, op, &d); break;
  case OPFAM_DENSE: emit_dense(e, op, &d); break;
  case OPFAM_ELEMENTWISE: emit_elementwise(e, op, &d); break;
  case OPFAM_NORM: emit_norm(e, op, &d); break;
  case OPFAM_ATTENTION: emit_attention(e, op, &d); break;
  case OPFAM_LOSS: emit_loss(e, op, &d); break;
  case OPFAM_COUNT: PD_CHECK(false, "(OPFAM_COUNT is not a family)"); break;
  }
  if (d.via_temp)
    str_printf(e->s, "  K(axpy)(%s, 1, %s, %lld);\n", cc_ptr(e, y), d.Y, (long long)cc_numel(e, y));
}

/* ---- the file ---------------------------------------------------------------------- */

/* The positions in a stage's op list of each region's ops, in list order (a
 * counting sort), so that emitting region by region is linear in the ops, not a
 * scan of the whole list per region. Region r's are pos[start[r - first] ..
 * start[r - first + 1]). */
typedef struct RegionIndex {
  int first, *start, *pos;
} RegionIndex;

static RegionIndex region_index(const Graph *g, const StageLayout *L, const int *ops, int n) {
  int nr = L->last_region - L->first_region + 1;
  RegionIndex x = {L->first_region, pd_calloc((size_t)nr + 1, sizeof(int)), pd_malloc((size_t)(n ? n : 1) * sizeof(int))};
  for (int k = 0; k < n; k++) x.start[g->ops[ops[k]].region - x.first + 1]++;
  for (int r = 0; r < nr; r++) x.start[r + 1] += x.start[r];
  int *fill = pd_malloc((size_t)nr * sizeof(int));
  memcpy(fill, x.start, (size_t)nr * sizeof(int));
  for (int k = 0; k < n; k++) x.pos[fill[g->ops[ops[k]].region - x.first]++] = k;
  free(fill);
  return x;
}

static bool region_has(const RegionIndex *x, int r) { return x->start[r - x->first + 1] > x->start[r - x->first]; }

/* bf16 layouts (passes/layout.h, "bf16 storage"): the exact upcasts op is the first
 * reader of in its pass, before it; the casts down of the stored outputs of the ops a
 * unit emitted (done, not yet cast), after it. */
static void emit_upcasts(Emit *e, const Op *op) {
  for (int i = 0; i < op->nin; i++) {
    int t = op->in[i];
    const TensorPlace *pl = &e->stored->place[t];
    bool again = false;
    for (int j = 0; j < i; j++) again = again || op->in[j] == t;
    if (!pl->bf16 || again || (pl->up[0] != op->id && pl->up[1] != op->id)) continue;
    str_printf(e->s, "  pk_bf16_load(%s, (const uint16_t *)(void *)(%s + %lld), %lld); /* %s up */\n", cc_ptr(e, t),
               base_of(pl->cls), (long long)pl->offset, (long long)cc_numel(e, t), e->g->tensors[t].name);
  }
}

static void emit_downcasts(Emit *e, const int *ops, const RegionIndex *x, int r, int from) {
  for (int j = from; j < x->start[r - x->first + 1]; j++) {
    const Op *op = &e->g->ops[ops[x->pos[j]]];
    if (!e->done[op->id] || e->cast[op->id]) continue;
    e->cast[op->id] = true;
    for (int i = 0; i < op->nout; i++) {
      const TensorPlace *pl = &e->stored->place[op->out[i]];
      if (!pl->bf16) continue;
      str_printf(e->s, "  pk_bf16_store((uint16_t *)(void *)(%s + %lld), %s, %lld); /* %s down */\n", base_of(pl->cls),
                 (long long)pl->offset, cc_ptr(e, op->out[i]), (long long)cc_numel(e, op->out[i]),
                 e->g->tensors[op->out[i]].name);
    }
  }
}

static void emit_region(Emit *e, int r, const int *ops, int nops, const RegionIndex *x, const char *dir) {
  const Graph *g = e->g;
  char fn[128];
  cgen_c_region_fn(fn, sizeof fn, dir, r - e->L->first_region);
  str_printf(e->s, "\n/* %s of region %s */\nstatic void %s(StageCtx *ctx) {\n  BASES;\n",
             strcmp(dir, "fwd") == 0 ? "forward" : "backward", g->regions[r].name, fn);
  for (int j = x->start[r - x->first]; j < x->start[r - x->first + 1]; j++) {
    int k = x->pos[j];
    const Op *op = &g->ops[ops[k]];
    if (e->done[op->id]) continue;
    if (e->stored->bf16) emit_upcasts(e, op);
    if (cc_fuse_from(e, ops, nops, k) == 0) { /* else it emitted (and marked) the ops */
      e->done[op->id] = true;
      emit_op(e, op);
    }
    if (e->stored->bf16) emit_downcasts(e, ops, x, r, j);
  }
  str_printf(e->s, "}\n");
}

char *codegen_c_source(const Graph *g, const StageLayout *L, int stage, const CodegenOptions *o) {
  Str s = {0};
  Emit e = {.g = g, .L = L, .o = o, .s = &s, .rs = o->f64 ? 2 : 1, .rng_base = codegen_rng_base(L), .stored = L,
            .strs = arena_create()};
  PD_CHECK(!(o->f64 && L->bf16), "(a bf16 layout has no float64 program)");
  e.done = pd_calloc((size_t)g->nops + 1, 1);
  e.cast = pd_calloc((size_t)g->nops + 1, 1);
  cc_classifier_start(&e);
  TensorPlace *vf, *vb; /* each pass's view of L (cgen_pass_view) */
  StageLayout fwd_view = cgen_pass_view(L, 0, &vf), bwd_view = cgen_pass_view(L, 1, &vb);
  str_printf(&s,
             "/* stage%d.c — generated by pd2bwc " PD2BW_VERSION " from model '%s'. Do not edit.\n"
             " * Stage %d: regions %s..%s, %d forward ops, %d backward ops, microbatch size %lld,\n"
             " * %s. Blocks (bytes): params %lld, grads %lld, stash %lld, work %lld,\n"
             " * inputs %lld, boundary %lld. ABI %d (codegen/codegen.h). */\n",
             stage, g->name, stage, g->regions[L->first_region].name, g->regions[L->last_region].name,
             L->nfwd, L->nbwd, (long long)L->b, o->f64 ? "float64" : "float32",
             (long long)(L->total[BUF_PARAMS] * e.rs), (long long)(L->total[BUF_GRADS] * e.rs),
             (long long)(L->total[BUF_STASH] * e.rs), (long long)(L->total[BUF_WORK] * e.rs),
             (long long)(L->total[BUF_INPUTS] * e.rs), (long long)(L->total[BUF_BOUNDARY] * e.rs),
             PD2BW_STAGE_ABI);
  str_printf(&s, "\n/* ==== kernels/philox.h and cpu_kernels.h, verbatim ==== */\n");
  if (o->f64) str_printf(&s, "#define PK_F64\n");
  str_printf(&s, "%s", pd_cpu_kernels_src);
  const char *sfx = o->f64 ? "f64" : "f32";
  str_printf(&s,
             "/* ==== end of the kernels ==== */\n\n"
             "typedef pk_real_%s R;\n"
             "#define K(name) pk_##name##_%s\n"

             "#define TR(base, off) ((R *)(void *)((base) + (off)))\n"
             "#define TI(base, off) ((int32_t *)(void *)((base) + (off)))\n"
             "\ntypedef struct StageCtx {\n  %s\n} StageCtx;\n\n"
             "#define BASES                                                              \\\n"
             "  char *const P = (char *)ctx->params, *const G = (char *)ctx->grads;      \\\n"
             "  char *const S = (char *)ctx->stash, *const W = (char *)ctx->work;        \\\n"
             "  char *const I = (char *)ctx->inputs, *const X = (char *)ctx->boundary;   \\\n"
             "  (void)P, (void)G, (void)S, (void)W, (void)I, (void)X\n",
             sfx, sfx, STR(PD2BW_STAGE_CTX_FIELDS));
  RegionIndex fx = region_index(g, L, L->fwd_ops, L->nfwd), bx = region_index(g, L, L->bwd_ops, L->nbwd);
  e.L = &fwd_view;
  for (int r = L->first_region; r <= L->last_region; r++)
    if (region_has(&fx, r)) emit_region(&e, r, L->fwd_ops, L->nfwd, &fx, "fwd");
  e.L = &bwd_view;
  for (int r = L->last_region; r >= L->first_region; r--)
    if (region_has(&bx, r)) emit_region(&e, r, L->bwd_ops, L->nbwd, &bx, "bwd");
  e.L = L;
  free(vf), free(vb);
  int nseg = L->last_region - L->first_region + 1;
  bool *has = pd_calloc(2 * (size_t)nseg, sizeof(bool));
  for (int k = 0; k < nseg; k++)
    has[k] = region_has(&fx, L->first_region + k), has[nseg + k] = region_has(&bx, L->first_region + k);
  cgen_c_entries(&s, nseg, has, has + nseg, o->f64);
  free(has);
  free(fx.start), free(fx.pos), free(bx.start), free(bx.pos);
  free(e.done);
  free(e.cast);
  arena_destroy(e.strs);
  return s.p;
}
