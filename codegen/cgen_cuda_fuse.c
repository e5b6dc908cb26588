/* codegen/cgen_cuda_fuse.c — the stage's own kernels: fused elementwise chains.
 *
 * The chains are cgen_c_fuse.c's (the same rule, cgen_fusible, so the two programs
 * agree on what is stored); intermediates stay in registers. GPU additions: a linear
 * with a bias is emitted as its GEMM (beta 0) followed by a kernel that adds the bias
 * in place and continues with the chain that reads the linear's output (the bias lead:
 * bias + gelu, bias + dropout + residual add), so the pre-activation is read and
 * written once; a chain ending in an add that the next op layer-normalises becomes one
 * row kernel (emit_add_layernorm); a chain of aligned quads runs four elements a thread
 * (Vec). Invariants: every operand is at a literal offset of a block base, every
 * length a literal; dropout draws pkc_dropout_fwd_f32's Philox element, so masks agree
 * bit for bit with it and the CPU program, and reads the microbatch index from
 * cuda_scratch (mbkey), so the launch is the same for every microbatch; every path
 * computes each element by the same expressions, so the bits do not depend on the path;
 * a chain stops before its output would overlap an operand it still reads elsewhere. */
#include "codegen/cgen_cuda_internal.h"
#include "codegen/cgen_lower.h"

#include <stdlib.h>
#include <string.h>

#include "kernels/cuda_kernel_list.h"

#define MAX_CHAIN 16

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

/* The places of tensors a and b share a byte (identical places included). */
static bool hazard_any(const CuEmit *e, int a, int b) {
  const TensorPlace *x = &e->L->place[a], *y = &e->L->place[b];
  return x->cls == y->cls && x->offset < y->offset + y->bytes && y->offset < x->offset + x->bytes;
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

/* The 128-bit path of an elementwise chain (launch kind PKC_ELEM4; one LDG.E.128 per
 * tensor read, one STG.E.128 per tensor written, one Philox block per quad for each
 * dropout: tests/cuda/test_cuda_sass.c checks the golden GPT's SASS): a thread takes the four elements
 * i = 4q .. 4q+3 of quad q, loads each tensor the chain reads from memory once as a
 * pkc_f4 (register r<k>; a bias vector's quad q % (m/4)), runs the chain's statements
 * once per lane on the lane's component, and stores each output quad once
 * (registers w0: the bias lead's kept output, w1: the chain's output). Each element
 * is computed by the same expressions as on the scalar path, so the bits are the
 * same. VEC_COLLECT runs the statements only to list the tensors they read. */
#define VEC_MAX_READS 32
enum { VEC_SCALAR = -1, VEC_COLLECT = -2 };
typedef struct Vec {
  int lane;                /* 0..3, or VEC_SCALAR / VEC_COLLECT */
  int t[VEC_MAX_READS], n; /* tensors read from memory (collected), in order */
  int reads_of_lead;       /* of the reads, how many are of the bias lead's output */
  bool overflow;
} Vec;

/* "TF(W, 1234)[i]" or, for a bias vector, "TF(P, 64)[i % 768]"; on the 128-bit path
 * the lane's component of the tensor's register, "r2.z". */
static void operand(const CuEmit *e, char *b, size_t n, int t, int64_t len, Vec *v, int lead_y) {
  if (v && v->lane == VEC_COLLECT) {
    int k = 0;
    while (k < v->n && v->t[k] != t) k++;
    if (k == v->n && v->n < VEC_MAX_READS) v->t[v->n++] = t;
    if (k == VEC_MAX_READS) v->overflow = true;
    if (t == lead_y) v->reads_of_lead++;
  }
  if (v && v->lane >= 0) {
    int k = 0;
    while (k < v->n && v->t[k] != t) k++;
    PD_CHECK(k < v->n, "(tensor %d read on the 128-bit path but not collected)", t);
    snprintf(b, n, "r%d.%c", k, "xyzw"[v->lane]);
    return;
  }
  CuPlace p = cu_tensor(e, t);
  int64_t m = cu_numel(e, t);
  if (m != len)
    snprintf(b, n, "TF(%s, %lld)[i %% %lld]", base_name(p.cls), (long long)p.off, (long long)m);
  else
    snprintf(b, n, "TF(%s, %lld)[i]", base_name(p.cls), (long long)p.off);
}

/* A store of `val` to tensor t (w = 0: the bias lead's output, 1: the chain's). */
static void store(const CuEmit *e, const char *ind, int t, int64_t len, const Vec *v, int w, const char *val) {
  if (v && v->lane >= 0) {
    str_printf(e->src, "%s    w%d.%c = %s;\n", ind, w, "xyzw"[v->lane], val);
    return;
  }
  char a[160];
  operand(e, a, sizeof a, t, len, NULL, -1);
  str_printf(e->src, "%s    %s = %s;\n", ind, a, val);
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
    if (e->done[c] || nx->region != region || !cgen_fusible(g, nx)) break;
    if (cgen_needs_upcast(e->L, nx)) break; /* its upcast goes before it, not before the kernel */
    if (n > 0 ? cgen_sole_consumer(e->g, e->L, t) != c : !uses(nx, t)) break;
    if (cu_numel(e, nx->out[0]) != len || acc(e, nx->out[0])) break;
    if (nx->nin == 2 && nx->in[0] == nx->in[1]) break;
    chain[n++] = c;
  }
  return n;
}

/* Whether a bias lead's output (the linear's, lead_y) is stored, or lives only in a
 * register like any other intermediate of the chain starting at op first. */
static bool lead_kept(const CuEmit *e, int lead_y, int first) {
  const TensorPlace *pl = &e->L->place[lead_y];
  return pl->cls != BUF_WORK || pl->accumulate || pl->alias >= 0 || lead_y == e->g->loss ||
         cgen_sole_consumer(e->g, e->L, lead_y) != first;
}

/* The chain's statements for element i (in scope in the generated code): its
 * values v0..v{n-1} in registers, the bias lead's vb, and the stores; `ind` indents
 * them further. */
static void emit_chain_body(CuEmit *e, const int *chain, int n, const Op *first, int bias_lead, int lead_y,
                            int64_t len, const char *ind, Vec *v) {
  const Graph *g = e->g;
  Str *s = e->src;
  int out = g->ops[chain[n - 1]].out[0];
  char a[160], other[160];
  const char *prev = NULL;
  char prevbuf[16];
  if (bias_lead >= 0) {
    operand(e, a, sizeof a, lead_y, len, v, lead_y);
    operand(e, other, sizeof other, first->in[2], len, v, lead_y);
    str_printf(s, "%s    const float vb = %s + %s;\n", ind, a, other);
    if (lead_kept(e, lead_y, chain[0])) store(e, ind, lead_y, len, v, 0, "vb");
    prev = "vb";
  }
  for (int i = 0; i < n; i++) {
    const Op *op = &g->ops[chain[i]];
    int in_chain = i > 0 ? g->ops[chain[i - 1]].out[0] : lead_y; /* the value in a register */
    char x[160];
    if (prev && (in_chain == op->in[0] || (op->nin > 1 && in_chain == op->in[1])))
      snprintf(x, sizeof x, "%s", prev);
    else
      operand(e, x, sizeof x, op->in[0], len, v, lead_y);
    if (op->nin == 2) { /* the operand that is not the value in a register */
      int oth = prev && op->in[0] == in_chain ? op->in[1] : prev && op->in[1] == in_chain ? op->in[0] : op->in[1];
      operand(e, other, sizeof other, oth, len, v, lead_y);
    }
    str_printf(s, "%s    const float v%d = ", ind, i);
    if (op_masks_elements(op)) { /* the backward replays its forward's stream */
      if (v && v->lane >= 0) /* the quad's Philox block, drawn once (vec_open) */
        str_printf(s, "(pkc_u64)rb%d.v[%d] >= thr%d ? ", i, v->lane, i);
      else
        str_printf(s, "(pkc_u64)pk_rng_block(seed, rng_base + %du, microbatch, (pkc_u64)i >> 2).v[i & 3] >= thr%d ? ",
                   op_rng_stream(op) - e->rng_base, i);
      cgen_elem_print(s, CGEN_CUDA, op, x, op->nin == 2 ? other : NULL);
      str_printf(s, " * ks%d : 0.0f", i);
    } else {
      cgen_elem_print(s, CGEN_CUDA, op, x, op->nin == 2 ? other : NULL);
    }
    str_printf(s, ";\n");
    snprintf(prevbuf, sizeof prevbuf, "v%d", i);
    prev = prevbuf;
  }
  store(e, ind, out, len, v, 1, prev);
}

static int64_t lastd_of(const CuEmit *e, int t) {
  const Shape *sh = &e->g->tensors[t].shape;
  return sh->dim[sh->rank - 1];
}

/* The layernorm that may fuse with chain[0..n) (its last op an add): the op emitted
 * next (the region's next, or after the region's last the next region's first: a
 * GPT's regions end at the residual stream) normalises the add's output over its last
 * dimension into a tensor that is not accumulated, and whose place is disjoint from
 * (or the same as) everything the chain reads and writes (a row's values are all read
 * before its output is written, by the same threads). Else NULL. */
static const Op *layernorm_after(const CuEmit *e, const int *ops, int nops, int next, const int *chain, int n,
                                 int lead_y, int64_t len) {
  const Graph *g = e->g;
  int lo = next < nops ? ops[next] : e->next_region_op;
  if (!e->o->fuse || n < 1 || lo < 0) return NULL;
  const Op *last = &g->ops[chain[n - 1]], *ln = &g->ops[lo];
  int sum = last->out[0], y = ln->out[0];
  if (last->kind != OP_ADD || ln->kind != OP_LAYERNORM || e->done[ln->id] || cgen_needs_upcast(e->L, ln)) return NULL;
  if (ln->in[0] != sum || cu_numel(e, y) != len || acc(e, y) || len % lastd_of(e, sum) != 0) return NULL;
  if (hazard(e, y, sum) || (lead_y >= 0 && hazard(e, y, lead_y))) return NULL;
  for (int i = 0; i < n; i++) {
    const Op *op = &g->ops[chain[i]];
    for (int j = 0; j < op->nin; j++)
      if (hazard(e, y, op->in[j])) return NULL;
  }
  return ln;
}

/* The row kernel of chain[0..n) + layernorm ln (a GPT block's x + attn(...) then ln_2,
 * or the embeddings' sum then ln_1; a lone add, n = 1, too): block r computes row r of
 * the chain, stores the sum (the residual stream, read later) and normalises it into
 * ln's output with the loops and expressions of pkc_layernorm_fwd_f32 (the same
 * per-thread column loops at the same block size, the same block-sum tree), the chain
 * in place of its first read of x, so the bits are those of the two kernels it replaces. */
static void emit_add_layernorm(CuEmit *e, const int *chain, int n, const Op *first, int bias_lead, int lead_y,
                               int64_t len, const Op *ln) {
  const Graph *g = e->g;
  Str *s = e->src;
  int sum = g->ops[chain[n - 1]].out[0];
  int64_t C = lastd_of(e, sum), M = len / C;
  CuPlace x = cu_tensor(e, sum), y = cu_tensor(e, ln->out[0]), ga = cu_tensor(e, ln->in[1]),
        be = cu_tensor(e, ln->in[2]);
  str_printf(s, "  __shared__ float sh[PKC_MAX_BLOCK];\n");
  str_printf(s, "  for (pkc_i64 r = blockIdx.x; r < %lldLL; r += gridDim.x) {\n", (long long)M);
  str_printf(s, "    float s = 0;\n");
  str_printf(s, "    for (int c = (int)threadIdx.x; c < %lld; c += (int)blockDim.x) {\n", (long long)C);
  str_printf(s, "      const pkc_i64 i = r * %lldLL + c;\n", (long long)C);
  emit_chain_body(e, chain, n, first, bias_lead, lead_y, len, "  ", NULL);
  str_printf(s, "      s += v%d;\n    }\n", n - 1);
  str_printf(s, "    const float *xr = TF(%s, %lld) + r * %lldLL;\n", base_name(x.cls), (long long)x.off,
             (long long)C);
  str_printf(s, "    const float *gamma = TF(%s, %lld), *beta = TF(%s, %lld);\n", base_name(ga.cls),
             (long long)ga.off, base_name(be.cls), (long long)be.off);
  str_printf(s, "    float m = pkc_block_sum(s, sh) / (float)%lld;\n", (long long)C);
  str_printf(s, "    float v = 0;\n");
  str_printf(s, "    for (int c = (int)threadIdx.x; c < %lld; c += (int)blockDim.x) v += (xr[c] - m) * (xr[c] - m);\n",
             (long long)C);
  str_printf(s, "    v = pkc_block_sum(v, sh) / (float)%lld;\n", (long long)C);
  str_printf(s, "    float rs = 1.0f / sqrtf(v + (float)%.17g);\n", ln->attr[0]);
  str_printf(s, "    float *yr = TF(%s, %lld) + r * %lldLL;\n", base_name(y.cls), (long long)y.off, (long long)C);
  str_printf(s, "    for (int c = (int)threadIdx.x; c < %lld; c += (int)blockDim.x)\n", (long long)C);
  str_printf(s, "      yr[c] = (xr[c] - m) * rs * gamma[c] + beta[c];\n");
  str_printf(s, "  }\n");
}

/* Whether chain[0..n) can take the 128-bit path, with v's reads collected: four
 * elements at a time (len % 4 == 0), every tensor it reads or writes 16-byte aligned
 * in its block (the blocks' bases are 256-aligned), a bias vector's length a multiple
 * of 4, and the bias lead's output, once stored back, read from memory only by the
 * bias add itself (the scalar path would read the stored value back; the quad's
 * register holds the old one), nor overlapping anything else the chain reads. */
static bool vec_ok(CuEmit *e, const int *chain, int n, const Op *first, int bias_lead, int lead_y, int64_t len,
                   Vec *v) {
  if (len % 4 != 0) return false;
  *v = (Vec){.lane = VEC_COLLECT};
  Str *keep_src = e->src, scratch = {0};
  e->src = &scratch; /* the statements are only read for their operands */
  emit_chain_body(e, chain, n, first, bias_lead, lead_y, len, "", v);
  e->src = keep_src;
  free(scratch.p);
  if (v->overflow || (lead_y >= 0 && v->reads_of_lead > 1)) return false;
  int out = e->g->ops[chain[n - 1]].out[0];
  int written[2] = {lead_y, out};
  for (int w = 0; w < 2; w++)
    if (written[w] >= 0 && cu_tensor(e, written[w]).off % 16 != 0) return false;
  for (int k = 0; k < v->n; k++) {
    int64_t m = cu_numel(e, v->t[k]);
    if (cu_tensor(e, v->t[k]).off % 16 != 0 || (m != len && (m % 4 != 0 || len % m != 0))) return false;
    if (lead_y >= 0 && v->t[k] != lead_y && hazard_any(e, lead_y, v->t[k])) return false;
  }
  return true;
}

/* The 128-bit loop (see Vec), its reads collected in v. */
static void emit_chain_vec(CuEmit *e, const int *chain, int n, const Op *first, int bias_lead, int lead_y,
                           int64_t len, Vec *v) {
  Str *s = e->src;
  const Graph *g = e->g;
  str_printf(s, "  for (pkc_i64 q = pkc_tid(); q < %lldLL; q += pkc_nthreads()) {\n", (long long)(len / 4));
  for (int k = 0; k < v->n; k++) {
    CuPlace p = cu_tensor(e, v->t[k]);
    int64_t m = cu_numel(e, v->t[k]);
    str_printf(s, "    const pkc_f4 r%d = ((const pkc_f4 *)TF(%s, %lld))[q", k, base_name(p.cls), (long long)p.off);
    if (m != len) str_printf(s, " %% %lldLL", (long long)(m / 4));
    str_printf(s, "];\n");
  }
  for (int i = 0; i < n; i++) {
    const Op *op = &g->ops[chain[i]];
    if (op_masks_elements(op))
      str_printf(s, "    const PhiloxCtr rb%d = pk_rng_block(seed, rng_base + %du, microbatch, (pkc_u64)q);\n", i,
                 op_rng_stream(op) - e->rng_base);
  }
  str_printf(s, "    pkc_f4 w0, w1;\n    (void)w0;\n");
  Vec lane = *v;
  for (int l = 0; l < 4; l++) {
    lane.lane = l;
    str_printf(s, "    {\n      const pkc_i64 i = 4 * q + %d;\n      (void)i;\n", l);
    emit_chain_body(e, chain, n, first, bias_lead, lead_y, len, "  ", &lane);
    str_printf(s, "    }\n");
  }
  bool keep = bias_lead >= 0 && lead_kept(e, lead_y, chain[0]);
  int written[2] = {keep ? lead_y : -1, g->ops[chain[n - 1]].out[0]};
  for (int w = 0; w < 2; w++)
    if (written[w] >= 0) {
      CuPlace p = cu_tensor(e, written[w]);
      str_printf(s, "    ((pkc_f4 *)TF(%s, %lld))[q] = w%d;\n", base_name(p.cls), (long long)p.off, w);
    }
  str_printf(s, "  }\n");
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
    if (!cgen_fusible(g, first) || acc(e, first->out[0])) return 0;
    len = cu_numel(e, first->out[0]);
    chain[n++] = ops[k];
    /* extend looks at ops[next + n]: with ops[k] already the chain's first, the next
     * candidate is ops[k + 1] */
    n = extend(e, ops, nops, k, first->region, first->out[0], len, chain, 1);
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
  const Op *ln = layernorm_after(e, ops, nops, k + n + (bias_lead >= 0 ? 1 : 0), chain, n, lead_y, len);
  if (bias_lead >= 0 ? n == 0 : n < (ln ? 1 : 2)) return 0;

  for (int i = 0; i < n; i++) e->done[chain[i]] = true;
  if (ln) e->done[ln->id] = true;
  if (bias_lead >= 0) {
    e->done[first->id] = true;
    cu_emit_linear_gemm(e, first); /* the GEMM only: the bias is added below */
  }

  Str *s = e->src;
  int out = g->ops[chain[n - 1]].out[0];
  bool random = false; /* a dropout with p > 0: the kernel reads the microbatch key */
  for (int i = 0; i < n; i++) {
    const Op *op = &g->ops[chain[i]];
    if (op_masks_elements(op)) random = true;
  }
  char name[64];
  snprintf(name, sizeof name, "fused%d", e->nfused++); /* by place: stages may share the file */
  str_printf(s, "\n/* fused:");
  if (bias_lead >= 0) str_printf(s, " bias of linear(op %d)", first->id);
  for (int i = 0; i < n; i++) str_printf(s, " %s(op %d)", op_info[g->ops[chain[i]].kind].name, chain[i]);
  if (ln) str_printf(s, " layernorm(op %d)", ln->id);
  str_printf(s, " -> %s, %lld elements */\n", g->tensors[ln ? ln->out[0] : out].name, (long long)len);
  str_printf(s,
             "extern \"C\" __global__ void %s(char *P, char *G, char *S, char *W, char *I, char *X,\n"
             "    pkc_u64 seed, const pkc_u32 *mbkey, int training, pkc_u32 rng_base) {\n"
             "  (void)P, (void)G, (void)S, (void)W, (void)I, (void)X, (void)seed, (void)mbkey, (void)rng_base;\n",
             name);
  if (random) /* read once, in device memory: the runtime writes it before the pass */
    str_printf(s, "  const pkc_u32 microbatch = training ? *mbkey : 0u;\n");
  for (int i = 0; i < n; i++) {
    const Op *op = &g->ops[chain[i]];
    if (op_masks_elements(op)) {
      str_printf(s, "  const double p%d = training ? %.17g : 0.0;\n", i, op_rng_p(op));
      str_printf(s, "  const pkc_u64 thr%d = pk_rng_threshold(p%d);\n", i, i);
      str_printf(s, "  const float ks%d = pkc_keep_scale(p%d);\n", i, i);
    }
  }
  str_printf(s, "  (void)training;\n");
  Vec v;
  bool vec = !ln && vec_ok(e, chain, n, first, bias_lead, lead_y, len, &v);
  if (ln) {
    emit_add_layernorm(e, chain, n, first, bias_lead, lead_y, len, ln);
  } else if (vec) {
    emit_chain_vec(e, chain, n, first, bias_lead, lead_y, len, &v);
  } else {
    str_printf(s, "  for (pkc_i64 i = pkc_tid(); i < %lldLL; i += pkc_nthreads()) {\n", (long long)len);
    emit_chain_body(e, chain, n, first, bias_lead, lead_y, len, "", NULL);
    str_printf(s, "  }\n");
  }
  str_printf(s, "}\n");

  cu_launch(e, ln ? ln->id : chain[n - 1], name, ln ? PKC_ROW : vec ? PKC_ELEM4 : PKC_ELEM,
            ln ? len / lastd_of(e, out) : len,
            CU_BLOCK, 10, cu_arg_ptr(cu_buf(BUF_PARAMS, 0)),
            cu_arg_ptr(cu_buf(BUF_GRADS, 0)), cu_arg_ptr(cu_buf(BUF_STASH, 0)), cu_arg_ptr(cu_buf(BUF_WORK, 0)),
            cu_arg_ptr(cu_buf(BUF_INPUTS, 0)), cu_arg_ptr(cu_buf(BUF_BOUNDARY, 0)), cu_arg_runtime("u64", "seed", 0),
            cu_arg_ptr(random ? cu_buf(CU_SCRATCH, CU_SCRATCH_MBKEY) : (CuPlace){-1, 0}),
            cu_arg_runtime("i32", "training", 0), cu_arg_stream(e, e->rng_base));
  return n + (bias_lead >= 0 ? 1 : 0) + (ln ? 1 : 0);
}
