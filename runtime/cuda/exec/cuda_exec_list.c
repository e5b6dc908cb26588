/* runtime/cuda/exec/cuda_exec_list.c — a stage's launch list (contract/contract.h),
 * loaded once and replayed. Both modules' sources (kernels.cu, stageN.cu) are checked
 * against the list's hashes before either is compiled; the library loads first (a device
 * may return the module it already has for the same text). Loading makes flat arrays:
 * per entry a GEMM (operands as (block, offset)) or a kernel (resolved handle, grid,
 * block, arguments pre-encoded as 8-byte cells, runtime ones filled at replay); every
 * pointer is checked against its block here, so a damaged list is a message at load,
 * not a wild write. Replay allocates nothing. CUDA graphs: the microbatch index reaches
 * the kernels through cuda_scratch's microbatch_key (written by pkc_set_u32 on the
 * pass's stream just before it), so a pass varies only with its block bases, stream,
 * training and seed: the cache key. A pass runs eagerly at its key's first sighting, is
 * captured at the second and launched as a graph after; past CX_MAX_KEYS keys or
 * CX_MAX_GRAPHS graphs, passes run eagerly. */
#include "runtime/cuda/exec/cuda_exec.h"
#include "runtime/cuda/exec/cuda_exec_epilogue.h"

#include <cjson/cJSON.h>
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/core/json_read.h"

#define CX_MAX_ARGS 32

/* What an argument cell holds. */
typedef enum CxArgKind {
  CXA_PTR,      /* base[blk] + off (blk < 0: the null pointer) */
  CXA_LITERAL,  /* `bits`, the value encoded as the parameter's type */
  CXA_SEED,     /* the training seed, as a u64 */
  CXA_TRAINING, /* 1 or 0, as an i32 */
  CXA_DROPOUT   /* f64 p when training, else 0 (value in `bits` as a double) */
} CxArgKind;

typedef struct CxArg {
  CxArgKind kind;
  int blk;
  int64_t off;
  uint64_t bits;
} CxArg;

typedef struct CxEntry {
  bool is_gemm;
  /* kernel */
  void *kernel;
  unsigned grid, block;
  int nargs, first_arg; /* into CxProgram.args */
  /* GEMM */
  GemmType type;
  int ta, tb, M, N, K, lda, ldb, ldc;
  float alpha, beta;
  int ablk, bblk, cblk;
  int64_t aoff, boff, coff;
  CxEpiRef epi; /* its epilogue (cuda_exec_epilogue.h) */
} CxEntry;

/* What makes a captured pass reusable: everything cx_program_run reads from the
 * CxReplay except the microbatch (which the pass reads from the device). */
typedef struct CxGraphKey {
  CxPass pass;
  int stream;
  bool training;
  uint64_t seed;
  GpuPtr base[CX_NBLOCKS];
} CxGraphKey;

typedef struct CxGraphSlot {
  CxGraphKey key;
  void *graph; /* NULL until the second sighting captured it */
} CxGraphSlot;

/* Distinct keys remembered (seen once or captured); the graphs are at most
 * CX_MAX_GRAPHS of them. Twice as many: keys seen only once need a slot too. */
#define CX_MAX_KEYS (2 * CX_MAX_GRAPHS)

struct CxProgram {
  const CudaDeviceOps *ops;
  void *module;     /* stageN.cu: the stage's own kernels */
  void *lib_module; /* kernels.cu: the library */
  int64_t block[CX_NBLOCKS];
  int64_t loss_off, bad_off, mbkey_off;
  bool needs_key[2]; /* per pass: some kernel reads the microbatch key */
  void *lib[CX_NLIB_KERNELS]; /* the library kernels (CX_K_SET_U32 writes the key) */
  CxEntry *e[2];
  int ne[2];
  int nseg;         /* the stage's segments ("segments", format 5) */
  int *seg_n[2];    /* per pass, per segment: its launches (forward from segment 0 on,
                       backward from segment nseg-1 down) */
  CxProfile *prof;  /* --profile-out: timed passes replay segment by segment; NULL: off */
  CxArg *args;
  int nargs;
  CxGraphSlot slot[CX_MAX_KEYS];
  int nslots, ngraphs;
  CxGraphStats stats;
  int64_t *folded; int nfolded; /* "bf16_in_versions" (cx_program_folded); NULL: none */
};

#define ERR(...) (snprintf(err, errlen, __VA_ARGS__), false)

int cx_block_of(const char *name) {
  for (int c = BUF_PARAMS; c < CX_NBLOCKS; c++)
    if (strcmp(name, cx_block_name(c)) == 0) return c;
  return -1;
}

/* The loader: JsonRd's located messages ("FILE: forward[3].gemm.M = 1e+20: must be an
 * integer 1..2147483647"), every number range-checked before it is converted. */
typedef struct Ld {
  CxProgram *p;
  uint32_t rng_base; /* the stage's: a "rng_base" argument is it + the value */
  JsonRd r;
} Ld;

/* "base[i]" or "base[i].key" into b */
static const char *item(char *b, size_t n, const char *base, int i, const char *key) {
  snprintf(b, n, "%s[%d]%s%s", base, i, key ? "." : "", key ? key : "");
  return b;
}

/* A (buf, offset) pointer at path; checks that `bytes` (if given) from there lie in the block. */
static void ld_ptr(Ld *l, const cJSON *o, const char *path, int *blk, int64_t *off) {
  const cJSON *buf = cJSON_GetObjectItemCaseSensitive(o, "buf");
  *blk = -1;
  *off = 0;
  if (l->r.failed || cJSON_IsNull(buf)) return;
  if (!cJSON_IsString(buf) || (*blk = cx_block_of(buf->valuestring)) < 0) {
    jr_fail_value(&l->r, path, "buf", buf ? buf : o, "not a block of the launch list");
    *blk = -1;
    return;
  }
  *off = jr_count(&l->r, o, path, "offset", 0, true);
  int64_t bytes = jr_count(&l->r, o, path, "bytes", 0, false);
  if (!l->r.failed && *off + bytes > l->p->block[*blk]) {
    char b[160];
    snprintf(b, sizeof b, "pointer %s+%lld (%lld bytes) outside the block (%lld bytes)", buf->valuestring,
             (long long)*off, (long long)bytes, (long long)l->p->block[*blk]);
    jr_fail(&l->r, path, b);
  }
}

static int ld_dim(Ld *l, const cJSON *o, const char *path, const char *key) {
  return (int)jr_int(&l->r, o, path, key, 1, INT32_MAX, 1, true);
}

/* GEMM operand `key` (A, B or C) of the GEMM at path */
static void ld_operand(Ld *l, const cJSON *gm, const char *path, const char *key, int *blk, int64_t *off) {
  char b[96];
  snprintf(b, sizeof b, "%.80s.%s", path, key);
  ld_ptr(l, jr_get(&l->r, gm, path, key), b, blk, off);
}

static void ld_gemm(Ld *l, const cJSON *gm, CxEntry *e, GemmType over, const char *path) {
  e->is_gemm = true;
  e->ta = (int)jr_int(&l->r, gm, path, "transa", 0, 1, 0, true);
  e->tb = (int)jr_int(&l->r, gm, path, "transb", 0, 1, 0, true);
  e->M = ld_dim(l, gm, path, "M");
  e->N = ld_dim(l, gm, path, "N");
  e->K = ld_dim(l, gm, path, "K");
  e->lda = ld_dim(l, gm, path, "lda");
  e->ldb = ld_dim(l, gm, path, "ldb");
  e->ldc = ld_dim(l, gm, path, "ldc");
  e->alpha = (float)jr_real(&l->r, gm, path, "alpha", -FLT_MAX, false, FLT_MAX, true, 1, true);
  e->beta = (float)jr_real(&l->r, gm, path, "beta", -FLT_MAX, false, FLT_MAX, true, 0, true);
  e->type = GEMM_FP32;
  const char *dt = jr_str(&l->r, gm, path, "dtype", "fp32");
  if (!gemm_type_parse(dt, &e->type)) jr_fail(&l->r, path, "GEMM dtype is not fp32, tf32 or bf16");
  /* bf16 operands are the list's own casts: no override can make them float32 or back */
  if (over != GEMM_PLAN && (e->type == GEMM_BF16) != (over == GEMM_BF16))
    jr_fail(&l->r, path, e->type == GEMM_BF16 ? "a bf16 GEMM (pd2bwc --precision bf16) cannot be run as fp32/tf32"
                                                : "a float32 GEMM cannot be run as bf16 (make the plan with "
                                                  "pd2bwc --precision bf16)");
  if (over != GEMM_PLAN) e->type = over;
  ld_operand(l, gm, path, "A", &e->ablk, &e->aoff);
  ld_operand(l, gm, path, "B", &e->bblk, &e->boff);
  ld_operand(l, gm, path, "C", &e->cblk, &e->coff);
  if (l->r.failed) return;
  /* the extents the row-major operands span, from their leading dimensions (in double:
   * exact below 2^53, and a product of two int32 dimensions would overflow int64 bytes) */
  double ar = e->ta ? e->K : e->M, br = e->tb ? e->N : e->K, ab = e->type == GEMM_BF16 ? 2 : 4;
  double need[3][2] = {{e->ablk, e->aoff + ((ar - 1) * e->lda + (e->ta ? e->M : e->K)) * ab},
                       {e->bblk, e->boff + ((br - 1) * e->ldb + (e->tb ? e->K : e->N)) * ab},
                       {e->cblk, e->coff + ((double)(e->M - 1) * e->ldc + e->N) * 4}};
  for (int k = 0; k < 3 && !l->r.failed; k++)
    if (need[k][0] < 0 || need[k][1] > (double)l->p->block[(int)need[k][0]])
      jr_fail(&l->r, path, "GEMM operand outside its block");
  const char *bad = l->r.failed ? NULL : cx_epilogue_load(gm, e->M, e->N, e->tb, e->ldb, e->ldc, e->beta,
                                                         e->type == GEMM_BF16, l->p->block, &e->epi);
  if (bad) jr_fail(&l->r, path, bad);
}

/* A literal argument's value at path, range-checked for its type and encoded as the
 * kernel parameter's bytes; false for an unknown type. */
static bool encode(Ld *l, const cJSON *a, const char *path, const char *ty, uint64_t *bits) {
  JsonRd *r = &l->r;
  *bits = 0;
  if (strcmp(ty, "i32") == 0) {
    int32_t x = (int32_t)jr_int(r, a, path, "value", INT32_MIN, INT32_MAX, 0, false);
    memcpy(bits, &x, 4);
  } else if (strcmp(ty, "u32") == 0) {
    uint32_t x = (uint32_t)jr_int(r, a, path, "value", 0, UINT32_MAX, 0, false);
    memcpy(bits, &x, 4);
  } else if (strcmp(ty, "i64") == 0) {
    int64_t x = jr_int(r, a, path, "value", -JR_INT_MAX, JR_INT_MAX, 0, false);
    memcpy(bits, &x, 8);
  } else if (strcmp(ty, "u64") == 0) {
    uint64_t x = (uint64_t)jr_count(r, a, path, "value", 0, false);
    memcpy(bits, &x, 8);
  } else if (strcmp(ty, "f32") == 0) {
    float x = (float)jr_real(r, a, path, "value", -FLT_MAX, false, FLT_MAX, true, 0, false);
    memcpy(bits, &x, 4);
  } else if (strcmp(ty, "f64") == 0) {
    double x = jr_real(r, a, path, "value", -DBL_MAX, false, DBL_MAX, true, 0, false);
    memcpy(bits, &x, 8);
  } else {
    return false;
  }
  return true;
}

static void ld_arg(Ld *l, const cJSON *a, CxArg *out, const char *path) {
  memset(out, 0, sizeof *out);
  const char *ty = jr_str(&l->r, a, path, "type", NULL);
  if (l->r.failed) return;
  if (strcmp(ty, "ptr") == 0) {
    out->kind = CXA_PTR;
    ld_ptr(l, a, path, &out->blk, &out->off);
    return;
  }
  out->kind = CXA_LITERAL;
  if (!encode(l, a, path, ty, &out->bits)) jr_fail(&l->r, path, "argument of an unknown type");
  const char *w = jr_str(&l->r, a, path, "runtime", "");
  if (l->r.failed || !*w) return;
  uint32_t v = 0;
  memcpy(&v, &out->bits, 4); /* (a u32's value) */
  if (strcmp(w, "seed") == 0 && strcmp(ty, "u64") == 0) out->kind = CXA_SEED;
  else if (strcmp(w, "training") == 0 && strcmp(ty, "i32") == 0) out->kind = CXA_TRAINING;
  else if (strcmp(w, "dropout_p") == 0 && strcmp(ty, "f64") == 0) out->kind = CXA_DROPOUT;
  else if (strcmp(w, "rng_base") == 0 && strcmp(ty, "u32") == 0 && v <= UINT32_MAX - l->rng_base)
    out->bits = l->rng_base + v; /* a literal once the stage is known */
  else jr_fail(&l->r, path, "runtime argument of an unknown kind or type");
}

static void ld_kernel(Ld *l, const cJSON *en, CxEntry *e, CxPass pass, const char *path) {
  CxProgram *p = l->p;
  const char *k = jr_str(&l->r, en, path, "kernel", NULL), *mod = jr_str(&l->r, en, path, "module", "");
  const cJSON *args = jr_get(&l->r, en, path, "args");
  if (!l->r.failed && !cJSON_IsArray(args)) jr_fail_value(&l->r, path, "args", args, "expected an array");
  bool lib = strcmp(mod, "library") == 0;
  if (!l->r.failed && !lib && strcmp(mod, "stage") != 0)
    jr_fail(&l->r, path, "kernel without a 'module' (\"library\" or \"stage\")");
  if (l->r.failed) return;
  e->kernel = p->ops->kernel(p->ops->dev, lib ? p->lib_module : p->module, k);
  if (!e->kernel) {
    char b[256];
    snprintf(b, sizeof b, "kernel %s is not in the compiled %s", k,
             lib ? "kernel library (" CODEGEN_CUDA_LIBRARY ")" : "stage program");
    jr_fail(&l->r, path, b);
  }
  e->grid = (unsigned)jr_int(&l->r, en, path, "grid", 1, INT32_MAX, 1, true);
  e->block = (unsigned)jr_int(&l->r, en, path, "block", 1, 1024, 1, true);
  e->first_arg = p->nargs;
  const cJSON *a;
  cJSON_ArrayForEach(a, args) {
    char ap[96];
    if (e->nargs == CX_MAX_ARGS) {
      jr_fail(&l->r, path, "more than 32 kernel arguments");
      return;
    }
    CxArg *arg = &p->args[p->nargs++];
    snprintf(ap, sizeof ap, "%.60s.args[%d]", path, e->nargs++);
    ld_arg(l, a, arg, ap);
    if (arg->kind == CXA_PTR && arg->blk == CX_SCRATCH && arg->off == p->mbkey_off) p->needs_key[pass] = true;
  }
}

static void ld_pass(Ld *l, const cJSON *list, CxPass pass, GemmType over) {
  const char *where = pass == CX_FORWARD ? "forward" : "backward";
  const cJSON *arr = jr_get(&l->r, list, "", where);
  if (!l->r.failed && !cJSON_IsArray(arr)) jr_fail_value(&l->r, "", where, arr, "expected an array");
  if (l->r.failed) return;
  int n = cJSON_GetArraySize(arr), nargs = 0;
  const cJSON *en;
  cJSON_ArrayForEach(en, arr) nargs += cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(en, "args"));
  CxProgram *p = l->p;
  p->e[pass] = pd_calloc((size_t)n + 1, sizeof(CxEntry));
  p->ne[pass] = n;
  p->args = pd_realloc(p->args, ((size_t)p->nargs + (size_t)nargs + 1) * sizeof(CxArg));
  int i = 0;
  cJSON_ArrayForEach(en, arr) {
    char path[64];
    const cJSON *gm = cJSON_GetObjectItemCaseSensitive(en, "gemm");
    if (gm) ld_gemm(l, gm, &p->e[pass][i], over, item(path, sizeof path, where, i, "gemm"));
    else ld_kernel(l, en, &p->e[pass][i], pass, item(path, sizeof path, where, i, NULL));
    if (l->r.failed) return;
    i++;
  }
}

/* "segments": {"forward": [n], "backward": [n]}, per segment of the stage its count
 * of the pass's entries; every entry belongs to one segment. */
static void ld_segments(Ld *l, const cJSON *list) {
  const cJSON *segs = cJSON_GetObjectItemCaseSensitive(list, "segments");
  CxProgram *p = l->p;
  for (int pass = 0; pass < 2 && !l->r.failed; pass++) {
    const char *where = pass == CX_FORWARD ? "segments.forward" : "segments.backward";
    const cJSON *arr = cJSON_GetObjectItemCaseSensitive(segs, pass == CX_FORWARD ? "forward" : "backward");
    int n = cJSON_GetArraySize(arr), sum = 0, k = 0;
    if (!cJSON_IsArray(arr) || n < 1 || (pass == CX_BACKWARD && n != p->nseg)) {
      jr_fail(&l->r, where, "missing, empty, or not one count per segment of the stage");
      return;
    }
    p->nseg = n;
    p->seg_n[pass] = pd_calloc((size_t)n, sizeof(int));
    const cJSON *c;
    cJSON_ArrayForEach(c, arr) {
      if (!cJSON_IsNumber(c) || !(c->valuedouble >= 0 && c->valuedouble <= p->ne[pass] - sum) ||
          c->valuedouble != floor(c->valuedouble)) {
        char b[64];
        jr_fail(&l->r, item(b, sizeof b, where, k, NULL), "not a count of the pass's launches");
        return;
      }
      sum += p->seg_n[pass][k++] = (int)c->valuedouble;
    }
    if (sum != p->ne[pass]) jr_fail(&l->r, where, "the segments' launches do not add up to the pass's");
  }
}

CxProgram *cx_program_load(const CudaDeviceOps *ops, const char *plan_dir, int stage, GemmType gemm,
                           char *err, size_t errlen) {
  char name[256];
  uint32_t rng_base = 0;
  if (!cx_stage_files(plan_dir, stage, name, sizeof name, &rng_base, err, errlen)) return NULL;
  char *lpath = io_join(plan_dir, name), *src = NULL, *libsrc = NULL, *text = NULL;
  CxProgram *p = NULL;
  cJSON *list = NULL;
  size_t len = 0;
  char ioerr[IO_ERR_LEN];
  text = io_read_all(lpath, &len, ioerr, sizeof ioerr);
  if (!text) {
    snprintf(err, errlen, "%s (a plan made with pd2bwc --backend cpu has no CUDA programs)", ioerr);
    goto out;
  }
  list = cJSON_ParseWithLength(text, len);
  const cJSON *fmt = cJSON_GetObjectItemCaseSensitive(list, "format");
  const cJSON *srcname = cJSON_GetObjectItemCaseSensitive(list, "source");
  const cJSON *hash = cJSON_GetObjectItemCaseSensitive(list, "hash");
  const cJSON *lib = cJSON_GetObjectItemCaseSensitive(list, "library");
  const cJSON *libname = cJSON_GetObjectItemCaseSensitive(lib, "source");
  const cJSON *libhash = cJSON_GetObjectItemCaseSensitive(lib, "hash");
  const cJSON *blocks = cJSON_GetObjectItemCaseSensitive(list, "blocks");
  const cJSON *scr = cJSON_GetObjectItemCaseSensitive(list, "cuda_scratch");
  if (list && cJSON_IsNumber(fmt) && fmt->valueint < CODEGEN_CUDA_LIST_FORMAT) {
    snprintf(err, errlen,
             "%s: a launch list of format %d, older than this runtime's %d (which reads the microbatch index "
             "from device memory, for CUDA graphs, takes dropout streams relative to the stage's rng_base, "
             "so that stages share programs, and reads GEMM epilogues and each segment's count of launches, "
             "for --profile-out); regenerate the plan with this pd2bwc",
             lpath, fmt->valueint, CODEGEN_CUDA_LIST_FORMAT);
    goto out;
  }
  if (!list || !cJSON_IsNumber(fmt) || fmt->valueint != CODEGEN_CUDA_LIST_FORMAT || !cJSON_IsString(srcname) ||
      !cJSON_IsString(hash) || !cJSON_IsString(libname) || !cJSON_IsString(libhash) || !cJSON_IsObject(blocks) ||
      !cJSON_IsObject(scr)) {
    snprintf(err, errlen,
             "%s: not a launch list of format %d (format, source, hash, library {source, hash}, blocks, "
             "cuda_scratch); a plan from an older pd2bwc must be compiled again",
             lpath, CODEGEN_CUDA_LIST_FORMAT);
    goto out;
  }
  /* both sources checked before anything is compiled */
  src = cx_read_checked(plan_dir, srcname->valuestring, hash->valuestring, lpath, err, errlen);
  if (!src) goto out;
  libsrc = cx_read_checked(plan_dir, libname->valuestring, libhash->valuestring, lpath, err, errlen);
  if (!libsrc) goto out;
  p = pd_calloc(1, sizeof *p);
  p->ops = ops;
  Ld l = {.p = p, .rng_base = rng_base, .r = {.file = lpath, .err = err, .errlen = errlen}};
  for (int c = BUF_PARAMS; c < CX_NBLOCKS; c++) /* only bf16 lists have params_bf16 */
    p->block[c] = jr_count(&l.r, blocks, "blocks", cx_block_name(c), 0, c != CX_PARAMS16);
  if (!l.r.failed && !cx_fold_offsets(list, p->block[BUF_PARAMS], p->block[CX_PARAMS16], &p->folded, &p->nfolded))
    jr_fail(&l.r, "bf16_in_versions", "not offsets inside the params block, or params_bf16 is not that block");
  const cJSON *loss = cJSON_GetObjectItemCaseSensitive(list, "loss");
  p->loss_off = -1;
  if (cJSON_IsObject(loss)) {
    int blk;
    ld_ptr(&l, loss, "loss", &blk, &p->loss_off);
    if (!l.r.failed && blk != CX_SCRATCH) jr_fail(&l.r, "loss", "the loss is not in cuda_scratch");
  }
  p->bad_off = jr_count(&l.r, scr, "cuda_scratch", "bad_ids", 0, true);
  p->mbkey_off = jr_count(&l.r, scr, "cuda_scratch", "microbatch_key", 0, true);
  if (!l.r.failed && (p->mbkey_off % 4 || p->mbkey_off + 4 > p->block[CX_SCRATCH]))
    jr_fail(&l.r, "cuda_scratch.microbatch_key", "outside cuda_scratch or not 4-byte aligned");
  if (l.r.failed) goto fail;
  p->lib_module = ops->load(ops->dev, libsrc, libname->valuestring, err, errlen);
  if (!p->lib_module) goto fail;
  p->module = ops->load(ops->dev, src, srcname->valuestring, err, errlen);
  if (!p->module) goto fail;
  if (!cx_library_complete(ops, p->lib_module, plan_dir, p->lib, err, errlen)) goto fail;
  ld_pass(&l, list, CX_FORWARD, gemm);
  ld_pass(&l, list, CX_BACKWARD, gemm);
  ld_segments(&l, list);
  if (!l.r.failed) goto out;
fail:
  cx_program_free(p);
  p = NULL;
out:
  cJSON_Delete(list);
  free(text);
  free(src);
  free(libsrc);
  free(lpath);
  return p;
}

void cx_program_free(CxProgram *p) {
  if (!p) return;
  for (int i = 0; i < p->nslots; i++)
    if (p->slot[i].graph) p->ops->graph_destroy(p->ops->dev, p->slot[i].graph);
  cx_profile_destroy(p->prof);
  free(p->e[0]);
  free(p->e[1]);
  free(p->seg_n[0]);
  free(p->seg_n[1]);
  free(p->args), free(p->folded);
  free(p);
}

int64_t cx_program_block(const CxProgram *p, int c) { return c > BUF_NONE && c < CX_NBLOCKS ? p->block[c] : 0; }
int64_t cx_program_loss_offset(const CxProgram *p) { return p->loss_off; }
const int64_t *cx_program_folded(const CxProgram *p, int *n) { return *n = p->nfolded, p->folded; }
int64_t cx_program_bad_ids_offset(const CxProgram *p) { return p->bad_off; }
int cx_program_nlaunches(const CxProgram *p, CxPass pass) { return p->ne[pass]; }

GemmType cx_program_gemm_type(const CxProgram *p) {
  for (int pass = 0; pass < 2; pass++)
    for (int i = 0; i < p->ne[pass]; i++)
      if (p->e[pass][i].is_gemm) return p->e[pass][i].type;
  return GEMM_FP32;
}

void *cx_program_kernel(const CxProgram *p, const char *name) {
  void *k = p->ops->kernel(p->ops->dev, p->lib_module, name);
  PD_CHECK(k != NULL, "(library kernel %s missing from the library module)", name);
  return k;
}

void *cx_program_lib_kernel(const CxProgram *p, CxLibKernel k) { return p->lib[k]; }

static GpuPtr at(const CxReplay *r, int blk, int64_t off) { return blk < 0 ? 0 : r->base[blk] + (GpuPtr)off; }

/* Launches [from, to) of the pass, one by one (or into a capture: the device records
 * them). */
static void replay_range(const CxProgram *p, CxPass pass, const CxReplay *r, int from, int to) {
  const CudaDeviceOps *ops = p->ops;
  for (int i = from; i < to; i++) {
    const CxEntry *e = &p->e[pass][i];
    if (e->is_gemm) {
      GpuGemm g = {e->type, e->ta, e->tb, e->M, e->N, e->K, e->alpha, e->beta, at(r, e->ablk, e->aoff),
                   at(r, e->bblk, e->boff), at(r, e->cblk, e->coff), e->lda, e->ldb, e->ldc,
                   cx_epilogue_at(&e->epi, r->base)};
      ops->gemm(ops->dev, r->stream, &g);
      continue;
    }
    uint64_t cell[CX_MAX_ARGS];
    void *args[CX_MAX_ARGS];
    for (int k = 0; k < e->nargs; k++) {
      const CxArg *a = &p->args[e->first_arg + k];
      cell[k] = 0;
      switch (a->kind) {
      case CXA_PTR: cell[k] = at(r, a->blk, a->off); break; /* a CUdeviceptr-sized pointer */
      case CXA_LITERAL: cell[k] = a->bits; break;
      case CXA_SEED: cell[k] = r->seed; break;
      case CXA_TRAINING: {
        int32_t x = r->training ? 1 : 0;
        memcpy(&cell[k], &x, 4);
        break;
      }
      case CXA_DROPOUT:
        cell[k] = r->training ? a->bits : 0; /* the f64 0.0 is all-zero bits */
        break;
      }
      args[k] = &cell[k];
    }
    ops->launch(ops->dev, r->stream, e->kernel, e->grid, e->block, args);
  }
}

static void replay(const CxProgram *p, CxPass pass, const CxReplay *r) { replay_range(p, pass, r, 0, p->ne[pass]); }

/* --profile-out: the pass segment by segment in its order, a device event on its
 * stream before the first and after each (runtime/cuda/exec/cuda_profile.c reads them). */
static void replay_timed(CxProgram *p, CxPass pass, const CxReplay *r) {
  int rec = cx_profile_begin(p->prof, pass, r->stream), at = 0;
  for (int i = 0; i < p->nseg; i++) {
    int k = pass == CX_FORWARD ? i : p->nseg - 1 - i;
    replay_range(p, pass, r, at, at + p->seg_n[pass][k]);
    at += p->seg_n[pass][k];
    cx_profile_mark(p->prof, rec, k);
  }
}

static bool same_key(const CxGraphKey *a, const CxGraphKey *b) {
  if (a->pass != b->pass || a->stream != b->stream || a->training != b->training || a->seed != b->seed) return false;
  for (int c = BUF_PARAMS; c < CX_NBLOCKS; c++)
    if (a->base[c] != b->base[c]) return false;
  return true;
}

/* The slot of r's key for `pass`, a new one on its first sighting (*fresh), or NULL
 * when the table is full. */
static CxGraphSlot *find_slot(CxProgram *p, CxPass pass, const CxReplay *r, bool *fresh) {
  CxGraphKey k = {.pass = pass, .stream = r->stream, .training = r->training, .seed = r->seed};
  for (int c = BUF_PARAMS; c < CX_NBLOCKS; c++) k.base[c] = r->base[c];
  *fresh = false;
  for (int i = 0; i < p->nslots; i++)
    if (same_key(&p->slot[i].key, &k)) return &p->slot[i];
  if (p->nslots == CX_MAX_KEYS) return NULL;
  *fresh = true;
  p->slot[p->nslots] = (CxGraphSlot){.key = k};
  return &p->slot[p->nslots++];
}

void cx_program_run(CxProgram *p, CxPass pass, const CxReplay *r) {
  const CudaDeviceOps *ops = p->ops;
  if (p->needs_key[pass]) { /* before the pass, on its stream: the kernels read it there */
    GpuPtr dst = r->base[CX_SCRATCH] + (GpuPtr)p->mbkey_off;
    uint32_t mb = r->microbatch;
    void *args[2] = {&dst, &mb};
    ops->launch(ops->dev, r->stream, p->lib[CX_K_SET_U32], 1, 1, args);
  }
  if (p->prof && cx_profile_timed(p->prof, r)) { /* launch by launch: a graph cannot be split by segment */
    replay_timed(p, pass, r);
    p->stats.eager++;
    return;
  }
  bool fresh = false;
  CxGraphSlot *s = ops->capture_begin && p->ne[pass] > 0 ? find_slot(p, pass, r, &fresh) : NULL;
  if (s && !s->graph && !fresh && p->ngraphs < CX_MAX_GRAPHS) { /* the second sighting: capture */
    char err[512];
    if (!ops->capture_begin(ops->dev, r->stream, err, sizeof err))
      pd_fatal(__FILE__, __LINE__, "capturing the %s pass as a CUDA graph: %s",
               pass == CX_FORWARD ? "forward" : "backward", err);
    replay(p, pass, r);
    s->graph = ops->capture_end(ops->dev, r->stream, err, sizeof err);
    if (!s->graph)
      pd_fatal(__FILE__, __LINE__, "capturing the %s pass as a CUDA graph: %s",
               pass == CX_FORWARD ? "forward" : "backward", err);
    p->ngraphs++;
    p->stats.captured++;
  }
  if (s && s->graph) {
    ops->graph_launch(ops->dev, s->graph, r->stream);
    p->stats.launches++;
    return;
  }
  replay(p, pass, r);
  p->stats.eager++;
}

CxGraphStats cx_program_graph_stats(const CxProgram *p) { return p->stats; }

int cx_program_segments(const CxProgram *p) { return p->nseg; }

void cx_program_profile(CxProgram *p, int64_t from_mb) {
  if (!p->prof) p->prof = cx_profile_create(p->ops, p->nseg, from_mb);
}

const SegTimes *cx_program_profile_times(CxProgram *p) { return p->prof ? cx_profile_times(p->prof) : NULL; }

void cx_ops_no_graphs(CudaDeviceOps *ops) {
  ops->capture_begin = NULL;
  ops->capture_end = NULL;
  ops->graph_launch = NULL;
  ops->graph_destroy = NULL;
}
