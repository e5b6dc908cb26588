/* codegen/cgen_cuda.c — the CUDA program of one stage and its launch list (codegen.h).
 *
 * A plan's GPU program is two NVRTC modules: kernels.cu, the kernel library, one per
 * plan (codegen_cuda_library_source: philox.h and the kernels/ CUDA headers verbatim),
 * and stageN.cu, the stage's own fused kernels (cgen_cuda_fuse.c) after philox.h and
 * cuda_helpers.cuh (pkc_helpers_src.h: device helpers, no kernel), every length and
 * offset a literal. Why two: the library is ~85% of a stage's NVRTC time and the same
 * for every stage; compiled once per plan (and cached across plans), a stage costs only
 * its fused kernels. What runs, in order, is stageN.launch.json (its format:
 * contract/contract.h, CODEGEN_CUDA_LIST_FORMAT). Invariants: nothing in a list or its .cu
 * names the stage, so stages with the same program share both files; a pass's
 * arguments are the same for every microbatch (the random kernels read its index from
 * cuda_scratch), so a runtime may capture a pass once as a CUDA graph; a GEMM entry is
 * the call the CPU program makes (cuda_gemm = pk_sgemm_fn). Each op's launches:
 * cgen_cuda_ops.c; bf16 operands: cgen_cuda_bf16.c. */
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

CuPlace cu_buf(int cls, int64_t off) { return (CuPlace){cls, off}; }

CuPlace cu_tensor(const CuEmit *e, int t) {
  const TensorPlace *pl = &e->L->place[t];
  PD_CHECK(pl->cls != BUF_NONE, "(tensor %d '%s' has no place in stage %d)", t, e->g->tensors[t].name,
           e->stage);
  return (CuPlace){(int)pl->cls, pl->offset};
}

int64_t cu_numel(const CuEmit *e, int t) { return shape_numel(&e->g->tensors[t].shape, e->L->b); }
cJSON *cu_arg_ptr(CuPlace p) {
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

cJSON *cu_place_json(CuPlace p) {
  cJSON *a = cJSON_CreateObject();
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
  cJSON *arg[CU_MAX_ARGS];
  PD_CHECK(nargs <= CU_MAX_ARGS, "(%s: %d arguments)", name, nargs);
  va_list ap;
  va_start(ap, nargs);
  for (int i = 0; i < nargs; i++) arg[i] = va_arg(ap, cJSON *);
  va_end(ap);
  cu_launch_args(e, op, name, kind, items, block, nargs, arg);
}

void cu_launch_args(CuEmit *e, int op, const char *name, int kind, int64_t items, unsigned block, int nargs,
                    cJSON *const *arg) {
  cJSON *l = cJSON_CreateObject();
  cJSON_AddNumberToObject(l, "op", op - e->op_base);
  cJSON_AddStringToObject(l, "kernel", name);
  cJSON_AddStringToObject(l, "module", in_library(name) ? "library" : "stage");
  cJSON_AddNumberToObject(l, "grid", pkc_grid((PkcLaunchKind)kind, items, block, CU_MAX_GRID));
  cJSON_AddNumberToObject(l, "block", block);
  cJSON_AddNumberToObject(l, "shared", 0); /* every kernel's shared memory is static */
  cJSON *args = cJSON_AddArrayToObject(l, "args");
  for (int i = 0; i < nargs; i++) cJSON_AddItemToArray(args, arg[i]);
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

int cu_kernel_kind(const char *name) {
  for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++)
    if (strcmp(kinds[i].name, name) == 0) return (int)kinds[i].kind;
  PD_CHECK(false, "(kernel %s is not in cuda_kernel_list.h)", name);
  return PKC_ONE;
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

/* bf16 layouts (passes/layout.h, "bf16 storage"; cgen_bf16.c): before op, the exact
 * upcasts of the stored values it is the first reader of in its pass (not of one that
 * every reader of the pass reads as bf16 from its stored copy: its working place is
 * then never read here, though the C program, whose GEMMs are float32, fills it);
 * after a unit, the casts down (round to nearest even) of the stored outputs of the
 * ops it emitted. */
void cu_emit_upcasts(CuEmit *e, const Op *op, int name) {
  for (int i = 0; i < op->nin; i++) {
    int t = op->in[i];
    const TensorPlace *pl = &e->stored->place[t];
    bool again = false;
    for (int j = 0; j < i; j++) again = again || op->in[j] == t;
    if (!pl->bf16 || again || (pl->up[0] != op->id && pl->up[1] != op->id) || !e->fp32_read[t]) continue;
    int64_t n = pl->bytes / 2; /* padded rows included */
    cu_launch(e, name, "pkc_cast_bf16_to_f32", PKC_ELEM8, n, CU_BLOCK, 3, cu_arg_ptr(cu_tensor(e, t)),
              cu_arg_ptr(cu_buf((int)pl->cls, pl->offset)), cu_arg_num("i64", (double)n));
  }
}

static void emit_downcasts(CuEmit *e, const int *list, int n, int from) {
  /* named like the unit's last entry (a residual add fused with the next region's
   * layernorm is the layernorm's: the list's segments stay contiguous) */
  const cJSON *last = cJSON_GetArrayItem(e->list, cJSON_GetArraySize(e->list) - 1);
  int name = last ? e->op_base + cJSON_GetObjectItemCaseSensitive(last, "op")->valueint : list[from];
  for (int j = from; j <= n; j++) {
    int o = j < n ? list[j] : e->next_region_op; /* a unit may take the next region's first op */
    if (o < 0 || !e->done[o] || e->cast[o]) continue;
    const Op *op = &e->g->ops[o];
    e->cast[o] = true;
    for (int i = 0; i < op->nout; i++) {
      const TensorPlace *pl = &e->stored->place[op->out[i]];
      if (!pl->bf16 || op->out[i] == e->cls_logits || op->out[i] == e->cls_grad)
        continue; /* the classifier fills that place */
      int64_t m = pl->bytes / 2;
      cu_launch(e, name, "pkc_cast_f32_to_bf16", PKC_ELEM8, m, CU_BLOCK, 3, cu_arg_ptr(cu_buf((int)pl->cls, pl->offset)),
                cu_arg_ptr(cu_tensor(e, op->out[i])), cu_arg_num("i64", (double)m));
    }
  }
}

/* Input i of op is read as bfloat16 from a stored copy (cu_stage_bf16): a GEMM's A or
 * B, the tensor-core attention's qkv, or attention_gqa's q, k, v (their dy is also read
 * as float32, by the delta). */
bool cu_bf16_operand(const CuEmit *e, const Op *op, int i) {
  AttnGeom a;
  if (op_has(op->kind, OPF_GEMM)) return i < 2;
  if (!e->flash_hs || !op_attention_geom(e->g, op, &a)) return false;
  int q = a.fwd ? 0 : 1;
  return i >= q && i < q + (a.packed ? 1 : 3);
}

/* e->fp32_read for the pass of ops[0..n): the stored tensors some op reads as float32. */
static void find_fp32_reads(CuEmit *e, const int *ops, int n) {
  memset(e->fp32_read, 0, (size_t)e->g->ntensors + 1);
  for (int k = 0; k < n && e->stored->bf16; k++) {
    const Op *op = &e->g->ops[ops[k]];
    if (op->id == e->cls_bwd) continue; /* never emitted: the forward's classifier kernel ran it */
    for (int i = 0; i < op->nin; i++)
      if (e->stored->place[op->in[i]].bf16 && !cu_bf16_operand(e, op, i)) e->fp32_read[op->in[i]] = true;
  }
}

/* ops[k] and what a GEMM epilogue or a fused kernel takes with it. */
static void emit_unit(CuEmit *e, const int *list, int n, int k) {
  const Op *op = &e->g->ops[list[k]];
  if (cu_epilogue_from(e, list, n, k) > 0) return; /* it emitted (and marked) the ops */
  if (e->o->fuse) {
    bool linear_bias = op->kind == OP_LINEAR && op->nin == 3 && !e->L->place[op->out[0]].accumulate;
    int used = cu_fuse_from(e, list, n, k, linear_bias ? op->id : -1);
    if (used > 0) return; /* cu_fuse_from emitted (and marked) the ops */
  }
  e->done[op->id] = true;
  cu_emit_op(e, op);
}

static void emit_region(CuEmit *e, const RegionOps *x, int r, bool forward) {
  const Graph *g = e->g;
  int *list = x->ops + x->start[r - x->first], n = x->start[r - x->first + 1] - x->start[r - x->first];
  int end = x->start[r - x->first + 1], total = x->start[e->L->last_region - x->first + 1];
  e->next_region_op = forward && end < total ? x->ops[end] : -1; /* regions without ops hold none */
  for (int k = 0; k < n; k++) {
    const Op *op = &g->ops[list[k]];
    if (e->done[op->id]) continue;
    if (e->stored->bf16) cu_emit_upcasts(e, op, op->id);
    emit_unit(e, list, n, k);
    if (e->stored->bf16) emit_downcasts(e, list, n, k);
  }
}

/* PKC_ATT_HS, when every attention op has one head size hs, lets the kernels keep a
 * head's q and accumulators in registers and compiles the tensor-core attention for hs;
 * PKC_ATT_T, when they also share one sequence length T, makes that attention's tile
 * counts and row offsets constants. The text depends on nothing else of the plan. */
char *codegen_cuda_library_source(const Graph *g) {
  Str src = {0};
  int hs = layout_cuda_head_size(g); /* the whole graph, not a stage: one library per plan */
  int T = layout_cuda_seq_len(g);
  /* nothing of the model but hs and T: plans with the same two share the text */
  str_printf(&src,
             "/* " CODEGEN_CUDA_LIBRARY " — the CUDA kernel library of a pd2bw plan, generated by pd2bwc "
             PD2BW_VERSION ". Do not edit.\n"
             " * Every library kernel, one module; each stage's launch list says which kernels it\n"
             " * launches from here (\"module\": \"library\") and which from its stageN.cu. */\n");
  if (hs) str_printf(&src, "\n/* every attention op of the model has head size %d */\n#define PKC_ATT_HS %d\n", hs, hs);
  if (hs && T)
    str_printf(&src, "/* and sequence length %d (the tensor-core attention's tiles are constants) */\n#define PKC_ATT_T %d\n",
               T, T);
  str_printf(&src, "\n/* ==== kernels/philox.h, cuda_helpers.cuh, cuda_mma.cuh, cuda_flash_*.cuh and cuda_kernels.cuh, verbatim ==== */\n");
  str_printf(&src, "%s", pd_cuda_kernels_src);
  str_printf(&src, "/* ==== end of the kernels ==== */\n");
  return src.p;
}

static void add_blocks(cJSON *j, const StageLayout *L, int64_t scratch, bool bf16, const char *folded) {
  cJSON *b = cJSON_AddObjectToObject(j, "blocks");
  for (int c = BUF_PARAMS; c < BUF_CLASS_COUNT; c++)
    cJSON_AddNumberToObject(b, buf_class_name((BufClass)c), (double)L->total[c]);
  cJSON_AddNumberToObject(b, "cuda_scratch", (double)scratch);
  /* the versions holding the copies: params_bf16 is the version's own block */
  if (bf16) cJSON_AddNumberToObject(b, "params_bf16", (double)(L->total[BUF_PARAMS] / (folded ? 1 : 2)));
  if (!folded) return;
  cJSON *f = cJSON_AddArrayToObject(j, "bf16_in_versions"); /* the folded weights' byte offsets */
  for (int t = 0; t < L->g->ntensors; t++)
    if (folded[t]) cJSON_AddItemToArray(f, cJSON_CreateNumber((double)L->place[t].offset));
}

char *codegen_cuda_source(const Graph *g, const StageLayout *L, int stage, const CodegenCudaOptions *o,
                          cJSON **launch_list) {
  Str src = {0}, own = {0};
  cJSON *j = cJSON_CreateObject();
  CuEmit e = {.g = g, .L = L, .o = o, .stage = stage, .src = &own, .kernels = cJSON_CreateArray(), .stored = L,
              .cls_logits = -1, .cls_grad = -1, .cls_bwd = -1};
  PD_CHECK(o->gemm >= GEMM_FP32 && o->gemm <= GEMM_BF16 && (!L->bf16 || o->gemm == GEMM_BF16), "(GEMM dtype)");
  e.done = pd_calloc((size_t)g->nops + 1, 1);
  e.cast = pd_calloc((size_t)g->nops + 1, 1);
  e.fp32_read = pd_calloc((size_t)g->ntensors + 1, 1);
  e.folded = cu_folded_weights(L, o);
  TensorPlace *vf, *vb; /* each pass's view of L (cgen_pass_view) */
  StageLayout fwd_view = cgen_pass_view(L, 0, &vf), bwd_view = cgen_pass_view(L, 1, &vb);
  e.scratch = CU_SCRATCH_ROWS; /* the bad-id counter is always there */
  e.lib_listed = pd_calloc(LIBRARY_KERNELS, sizeof *e.lib_listed);
  e.flash_hs = layout_cuda_flash_head_size(g);
  RegionOps fx = region_ops_index(g, L->fwd_ops, L->nfwd, L->first_region, L->last_region);
  RegionOps bx = region_ops_index(g, L->bwd_ops, L->nbwd, L->first_region, L->last_region);

  cJSON *fwd = cJSON_CreateArray(), *bwd = cJSON_CreateArray();
  e.rng_base = codegen_rng_base(L);
  e.list = fwd;
  e.op_base = e.rng_base;
  e.L = &fwd_view;
  cu_find_classifier(&e);
  find_fp32_reads(&e, L->fwd_ops, L->nfwd);
  for (int r = L->first_region; r <= L->last_region; r++) emit_region(&e, &fx, r, true);
  e.L = &bwd_view;
  find_fp32_reads(&e, L->bwd_ops, L->nbwd);
  e.list = bwd;
  e.op_base = INT_MAX; /* the smallest backward op id */
  for (int k = 0; k < L->nbwd; k++)
    if (L->bwd_ops[k] < e.op_base) e.op_base = L->bwd_ops[k];
  for (int r = L->last_region; r >= L->first_region; r--) emit_region(&e, &bx, r, false);
  e.L = L;
  free(vf), free(vb), free(e.cast), free(e.fp32_read);
  free(fx.start);
  free(fx.ops);
  free(bx.start);
  free(bx.ops);
  free(e.lib_listed);
  free(e.done);
  /* The block's size is layout_cuda_scratch_bytes's, the figure the planner counts in
   * the stage's device memory; what the launches above reach must lie inside it. */
  int64_t reached = e.scratch;
  e.scratch = layout_cuda_scratch_bytes(L, o->gemm == GEMM_BF16);
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
    cJSON_AddStringToObject(j, "gemm_dtype", gemm_type_name(o->gemm));
    cJSON_AddStringToObject(j, "mixed_precision", o->gemm == GEMM_BF16 ? "bf16-fp32-master" : "none");
    cJSON_AddStringToObject(j, "gemm_epilogues", o->gemm_epilogues ? "on" : "off");
    add_blocks(j, L, e.scratch, o->gemm == GEMM_BF16, e.folded);
    cJSON *cs = cJSON_AddObjectToObject(j, "cuda_scratch");
    cJSON_AddNumberToObject(cs, "bad_ids", CU_SCRATCH_BAD);
    cJSON_AddNumberToObject(cs, "ce_nvalid", CU_SCRATCH_NVALID);
    cJSON_AddNumberToObject(cs, "ce_rows", CU_SCRATCH_ROWS);
    cJSON_AddNumberToObject(cs, "loss", CU_SCRATCH_LOSS);
    cJSON_AddNumberToObject(cs, "microbatch_key", CU_SCRATCH_MBKEY);
    if (o->gemm == GEMM_BF16) cJSON_AddNumberToObject(cs, "bf16_staging", (double)cu_bf16_staging(&e));
    if (L->loss >= 0) { /* written by the forward; valid until the next forward */
      cJSON_AddItemToObject(j, "loss", cu_place_json(cu_buf(CU_SCRATCH, CU_SCRATCH_LOSS)));
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
  free(e.folded);
  return src.p;
}
