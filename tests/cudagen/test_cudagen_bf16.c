/* tests/cudagen/test_cudagen_bf16.c — the launch lists of pd2bwc --precision bf16.
 *
 * usage: test_cudagen_bf16 PD2BWC     (run from the source root)
 *
 * A bf16 plan must be the tf32 plan plus the casts and its bf16 storage, and nothing
 * else: for several models and partitions, pd2bwc compiles the same model twice
 * (default precision and --precision bf16) and each stage's bf16 launch list is walked
 * beside the tf32 one. The bf16 plan stores its stashed and sent activations as
 * bfloat16 and computes on float32 working places in WORK (passes/layout.h, "bf16
 * storage"), so an activation's pointer may differ (a stash/boundary/work place in the
 * tf32 list is a work place in the bf16 one); every other argument is the same. The
 * storage casts (pkc_cast_f32_to_bf16 into the stash or boundary block, and
 * pkc_cast_bf16_to_f32 out of them) are skipped, each checked to lie inside its
 * blocks. The fused classifier (tf32: pkc_classifier_f32, its gradient over the
 * logits) is pkc_classifier_bf16 where the logits are stored (the STASH): the same
 * arguments but the gradient's, now the logits' stored bf16 place (no cast down of the
 * logits before it), and the backward's GEMMs read that place as their operand with no
 * cast; in a GPT list (want_cls) the stage with the loss launches it once, no
 * pkc_cross_entropy_bwd_f32 at all, and two backward GEMMs (the LM head's dx and dW)
 * read its place. Elsewhere the bf16 forward computes the row losses alone and its
 * backward gets the cross-entropy's own launches. Every kernel launch must
 * otherwise be identical; every tf32 GEMM must appear in the bf16 list
 * as the same GEMM with dtype "bf16" whose weight operands (the tf32 GEMM's A or B in
 * the params block) are read from the params_bf16 block (the bf16 weight copy the
 * optimizer writes: half the offset, inside params/2 bytes; in a 2bw plan with weight
 * prediction, whose weight versions hold the copies, the weight's own offset, listed in
 * the list's bf16_in_versions, inside params bytes; an embedding lookup's table is read
 * there too, pkc_embedding_fwd_bf16_f32 at the table's own offset) with no cast, and whose
 * other operands are each a pkc_cast_f32_to_bf16 launch (same op) before it. The casts
 * must read the tf32 GEMM's operand (or its working place) with the element count the
 * GEMM spans (from its leading dimension), and write 2-byte elements into cuda_scratch
 * past the cross-entropy row losses, A and B apart, 256-byte aligned, inside the block
 * size the list declares. Attention (head size a multiple of 16) is the exception:
 * each fp32 attention kernel becomes its tensor-core twin (pkc_flash_attention_*_bf16)
 * after the casts of its qkv (and dy), with every other argument the same. The
 * blocks: params, grads and inputs the same, stash and boundary smaller (the exact
 * sizes: test_cudapipe_bf16's memory part). The CPU programs (stageN.c) store the same
 * tensors as bf16 (pk_bf16_store), so they change exactly when the list stores any.
 * Golden: the MLP's bf16 launch list (tests/golden/codegen/mlp.bf16.launch.json, its
 * hashes and "source" dropped so a kernel-library change does not touch it) shows what
 * a bf16 list looks like; PD2BW_REGEN=1 rewrites it after an intended change.
 * Plus the user errors of --precision: a bad value, or bf16 with --backend cpu, is one
 * clear message, a non-zero status and no plan directory.
 */
#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cudagen_util.h"
#include "test.h"

static const char *pd2bwc;
static char tmp[] = "/tmp/pd2bw-test-cudagen-bf16-XXXXXX";

static cJSON *read_json(const char *dir, const char *name) {
  char path[512];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  char *t = cg_read_all(path);
  cJSON *j = t ? cJSON_Parse(t) : NULL;
  free(t);
  if (!j) fprintf(stderr, "  cannot read %s\n", path);
  return j;
}

static bool compile(const char *name, const char *args) {
  char cmd[1024];
  snprintf(cmd, sizeof cmd, "'%s' %s -o '%s/%s' -q", pd2bwc, args, tmp, name);
  int rc = system(cmd);
  if (rc != 0) fprintf(stderr, "  failed: %s\n", cmd);
  return rc == 0;
}

static double num(const cJSON *o, const char *k) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
  return cJSON_IsNumber(v) ? v->valuedouble : -1e300;
}

static const char *str(const cJSON *o, const char *k) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
  return cJSON_IsString(v) ? v->valuestring : "";
}

#define MAX_STORED 4096
typedef struct Tally {
  int gemms, casts, kernels, flash; /* flash: attention launches now on tensor cores */
  int stores;                       /* storage casts (bf16 stash and boundary) */
  int stored_operands;              /* GEMM/attention operands read from their stored copy */
  int nstored;                      /* the stored copies cast down so far: their block */
  char stored_buf[MAX_STORED][12];  /* (stash or boundary), offset and elements */
  double stored_off[MAX_STORED], stored_n[MAX_STORED];
  int weight_operands;              /* GEMM operands read from params_bf16, uncast */
  int classifiers;                  /* pkc_classifier_bf16 launches */
  double cls_off;                   /* the last one's gradient place (stash offset) */
} Tally;

/* A pointer ({buf, offset}, optionally with "type": "ptr") as (block name, offset):
 * a (the bf16 list's) is b (the tf32 list's); for an activation, anywhere in the same
 * block (the stash and the boundary shrink, so what stays float32 there moves) or its
 * float32 working place (in work, wherever the layout put it). */
static bool same_ptr(const cJSON *a, const cJSON *b) {
  if (strcmp(str(a, "buf"), str(b, "buf")) == 0 && num(a, "offset") == num(b, "offset")) return true;
  const char *from = str(b, "buf"), *to = str(a, "buf");
  bool act = strcmp(from, "work") == 0 || strcmp(from, "stash") == 0 || strcmp(from, "boundary") == 0;
  return act && (strcmp(to, "work") == 0 || strcmp(to, from) == 0);
}

/* Argument y (bf16 list) of argument x (tf32 list): equal, a pointer as same_ptr. */
static bool same_arg(const cJSON *y, const cJSON *x) {
  if (!y) return false;
  if (strcmp(str(x, "type"), "ptr") == 0 && cJSON_IsString(cJSON_GetObjectItemCaseSensitive(x, "buf")))
    return strcmp(str(y, "type"), "ptr") == 0 && same_ptr(y, x);
  return cJSON_Compare(x, y, 1);
}

/* A launch of the bf16 list equal to the tf32 one but for activation pointers; and an
 * embedding lookup whose version holds the table's bf16 copy (weight prediction:
 * bf16_in_versions) reads it there, at the table's own offset in params_bf16. */
static bool same_launch(const cJSON *e16, const cJSON *e32) {
  bool lookup16 = e16 && strcmp(str(e16, "kernel"), "pkc_embedding_fwd_bf16_f32") == 0 &&
                  strcmp(str(e32, "kernel"), "pkc_embedding_fwd_f32") == 0;
  if (!e16 || (!lookup16 && strcmp(str(e16, "kernel"), str(e32, "kernel")) != 0) || num(e16, "op") != num(e32, "op") ||
      num(e16, "grid") != num(e32, "grid") || num(e16, "block") != num(e32, "block"))
    return false;
  const cJSON *a16 = cJSON_GetObjectItemCaseSensitive(e16, "args"), *a32 = cJSON_GetObjectItemCaseSensitive(e32, "args");
  if (cJSON_GetArraySize(a16) != cJSON_GetArraySize(a32)) return false;
  for (int k = 0; k < cJSON_GetArraySize(a32); k++) {
    const cJSON *y = cJSON_GetArrayItem(a16, k), *x = cJSON_GetArrayItem(a32, k);
    if (lookup16 && k == 1 ? strcmp(str(y, "buf"), "params_bf16") != 0 || strcmp(str(x, "buf"), "params") != 0 ||
                                 num(y, "offset") != num(x, "offset")
                           : !same_arg(y, x))
      return false;
  }
  return true;
}

/* True for a storage cast of the bf16 list (passes/layout.h, "bf16 storage"): into the
 * stash or boundary block after a producer, or out of it before a first reader. The
 * stored copy (2-byte elements) and the working place (4-byte) lie in their blocks. */
static bool storage_cast(const cJSON *e, const cJSON *blocks, Tally *t) {
  bool down = strcmp(str(e, "kernel"), "pkc_cast_f32_to_bf16") == 0;
  if (!down && strcmp(str(e, "kernel"), "pkc_cast_bf16_to_f32") != 0) return false;
  const cJSON *args = cJSON_GetObjectItemCaseSensitive(e, "args");
  const cJSON *dst = cJSON_GetArrayItem(args, 0), *src = cJSON_GetArrayItem(args, 1);
  const cJSON *stored = down ? dst : src, *work = down ? src : dst;
  if (down && strcmp(str(dst, "buf"), "cuda_scratch") == 0) return false; /* a GEMM operand's staging */
  double n = num(cJSON_GetArrayItem(args, 2), "value");
  EXPECT(strcmp(str(stored, "buf"), "stash") == 0 || strcmp(str(stored, "buf"), "boundary") == 0);
  EXPECT_STREQ(str(work, "buf"), "work");
  EXPECT(n > 0 && num(stored, "offset") + 2 * n <= num(blocks, str(stored, "buf")));
  EXPECT(num(work, "offset") + 4 * n <= num(blocks, "work"));
  t->stores++;
  /* a copy is cast up whole, as it was cast down (padded rows included) */
  int k = 0;
  while (k < t->nstored && !(strcmp(t->stored_buf[k], str(stored, "buf")) == 0 && t->stored_off[k] == num(stored, "offset")))
    k++;
  if (k < t->nstored) EXPECT(t->stored_n[k] == n);
  else if (down && k < MAX_STORED) {
    snprintf(t->stored_buf[k], sizeof t->stored_buf[k], "%s", str(stored, "buf"));
    t->stored_off[k] = num(stored, "offset"), t->stored_n[k] = n, t->nstored++;
  }
  return true;
}

/* True when some entry of pass p is op's. */
static bool pass_has_op(const cJSON *p, double op) {
  const cJSON *e;
  cJSON_ArrayForEach(e, p) if (num(e, "op") == op) return true;
  return false;
}

/* Elements a row-major operand of r rows x c columns at leading dimension ld spans. */
static double span(double r, double c, double ld) { return (r - 1) * ld + c; }


/* Checks cast launch `c` for operand `src` (the tf32 GEMM's) of n elements; returns its
 * staging offset in cuda_scratch, or -1. */
static double check_cast(const cJSON *c, int op, const cJSON *src, double n, const cJSON *blocks) {
  EXPECT_STREQ(str(c, "kernel"), "pkc_cast_f32_to_bf16");
  EXPECT(num(c, "op") == op);
  const cJSON *args = cJSON_GetObjectItemCaseSensitive(c, "args");
  EXPECT(cJSON_GetArraySize(args) == 3);
  const cJSON *dst = cJSON_GetArrayItem(args, 0), *from = cJSON_GetArrayItem(args, 1), *cnt = cJSON_GetArrayItem(args, 2);
  if (!dst || !from || !cnt) return -1;
  EXPECT(same_ptr(from, src));
  EXPECT_STREQ(str(cnt, "type"), "i64");
  EXPECT(num(cnt, "value") == n);
  /* the source lies in its block (float32), the copy in cuda_scratch (bf16) */
  EXPECT(num(from, "offset") >= 0 && num(from, "offset") + 4 * n <= num(blocks, str(from, "buf")));
  EXPECT_STREQ(str(dst, "buf"), "cuda_scratch");
  double off = num(dst, "offset");
  EXPECT(off >= 0 && off + 2 * n <= num(blocks, "cuda_scratch"));
  EXPECT((long long)off % 256 == 0);
  /* one thread per 8 elements (PKC_ELEM8): the launch covers them all (kernels also
   * stride) */
  EXPECT(num(c, "grid") * num(c, "block") * 8 >= n || num(c, "grid") >= 1024);
  return off;
}

/* The tf32 list's fp32 attention kernels and what a bf16 list launches instead when the
 * head size qualifies (codegen/cgen_cuda_ops.c emit_flash_attention): `casts` casts first
 * (qkv, then dy), and every argument the same but the bf16 copies for the fp32 inputs
 * (the backward's pkc_attention_bwd_delta_f32, D = dy·out, is in both lists alike). */
static const struct {
  const char *f32, *flash;
  int casts;
  int qkv, dy; /* the fp32 kernel's argument indices of qkv and dy (-1: none) */
} att_map[] = {
    {"pkc_attention_fwd_f32", "pkc_flash_attention_fwd_bf16", 1, 2, -1},
    {"pkc_attention_bwd_dq_f32", "pkc_flash_attention_bwd_dq_bf16", 2, 4, 3},
    {"pkc_attention_bwd_dkv_f32", "pkc_flash_attention_bwd_dkv_bf16", 0, 4, 3},
};

/* Checks the bf16 launches at p16[*i..] standing for the fp32 attention launch e32
 * (att_map[m]); q16, y16: the staged qkv and dy, set by the casts. */
static void check_flash(const cJSON *p16, int *i, const cJSON *e32, int m, const cJSON **q16, const cJSON **y16,
                        double staging, const cJSON *blocks, Tally *t) {
  const cJSON *a32 = cJSON_GetObjectItemCaseSensitive(e32, "args");
  int op = (int)num(e32, "op"), first = att_map[m].qkv + 1; /* B, T, C follow qkv, the last pointer */
  double B = num(cJSON_GetArrayItem(a32, first), "value"), T = num(cJSON_GetArrayItem(a32, first + 1), "value");
  double C = num(cJSON_GetArrayItem(a32, first + 2), "value");
  /* qkv stored as bf16 (a bf16 plan's stash) is read from its copy, not cast */
  int fl = *i;
  while (fl < *i + 2 && strcmp(str(cJSON_GetArrayItem(p16, fl), "kernel"), att_map[m].flash) != 0) fl++;
  const cJSON *fq = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(p16, fl), "args"), att_map[m].qkv);
  bool q_stored = att_map[m].casts >= 1 && strcmp(str(fq, "buf"), "cuda_scratch") != 0;
  if (q_stored) {
    EXPECT(strcmp(str(fq, "buf"), "stash") == 0 || strcmp(str(fq, "buf"), "boundary") == 0);
    EXPECT(num(fq, "offset") + 2 * B * T * 3 * C <= num(blocks, str(fq, "buf")));
    *q16 = fq;
    t->stored_operands++;
  } else if (att_map[m].casts >= 1) {
    double off = check_cast(cJSON_GetArrayItem(p16, (*i)++), op, cJSON_GetArrayItem(a32, att_map[m].qkv), B * T * 3 * C,
                            blocks);
    EXPECT(off >= staging);
    *q16 = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(p16, *i - 1), "args"), 0);
    t->casts++;
  }
  if (att_map[m].casts == 2) {
    double off = check_cast(cJSON_GetArrayItem(p16, (*i)++), op, cJSON_GetArrayItem(a32, att_map[m].dy), B * T * C,
                            blocks);
    EXPECT(off >= (q_stored ? staging : num(*q16, "offset") + 2 * B * T * 3 * C));
    *y16 = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(p16, *i - 1), "args"), 0);
    t->casts++;
  }
  const cJSON *e16 = cJSON_GetArrayItem(p16, (*i)++);
  EXPECT_STREQ(str(e16, "kernel"), att_map[m].flash);
  EXPECT(num(e16, "op") == op && num(e16, "block") == 128 && num(e16, "grid") >= 1);
  const cJSON *a16 = cJSON_GetObjectItemCaseSensitive(e16, "args");
  int n32 = cJSON_GetArraySize(a32);
  EXPECT_EQ_INT(cJSON_GetArraySize(a16), n32);
  for (int k = 0; k < n32; k++) {
    const cJSON *x = cJSON_GetArrayItem(a32, k);
    const cJSON *y = cJSON_GetArrayItem(a16, k);
    if (k == att_map[m].qkv) EXPECT(*q16 && same_ptr(y, *q16));
    else if (k == att_map[m].dy) EXPECT(*y16 && same_ptr(y, *y16));
    else EXPECT(same_arg(y, x));
  }
  t->flash++;
}

/* e16, the bf16 list's pkc_classifier_bf16, in place of e32 (the tf32 list's
 * pkc_classifier_f32): every argument the same but the gradient's (argument 1), which
 * is a place of the stash holding M rows ld apart of 2-byte elements. */
static void check_classifier(const cJSON *e16, const cJSON *e32, const cJSON *blocks, Tally *t) {
  const cJSON *a16 = cJSON_GetObjectItemCaseSensitive(e16, "args"), *a32 = cJSON_GetObjectItemCaseSensitive(e32, "args");
  EXPECT_EQ_INT(cJSON_GetArraySize(a16), cJSON_GetArraySize(a32));
  EXPECT(num(e16, "op") == num(e32, "op"));
  for (int a = 0; a < cJSON_GetArraySize(a32); a++)
    if (a != 1) EXPECT(same_arg(cJSON_GetArrayItem(a16, a), cJSON_GetArrayItem(a32, a)));
  const cJSON *d = cJSON_GetArrayItem(a16, 1);
  double M = num(cJSON_GetArrayItem(a16, 4), "value"), ld = num(cJSON_GetArrayItem(a16, 6), "value");
  EXPECT_STREQ(str(d, "buf"), "stash");
  EXPECT(num(d, "offset") >= 0 && num(d, "offset") + 2 * M * ld <= num(blocks, "stash"));
  t->classifiers++;
  t->cls_off = num(d, "offset");
}

/* One pass ("forward"/"backward") of a stage: the bf16 list against the tf32 one. */
static void check_pass(const cJSON *l16, const cJSON *l32, const char *pass, double staging, Tally *t) {
  const cJSON *p16 = cJSON_GetObjectItemCaseSensitive(l16, pass), *p32 = cJSON_GetObjectItemCaseSensitive(l32, pass);
  const cJSON *blocks = cJSON_GetObjectItemCaseSensitive(l16, "blocks");
  int n16 = cJSON_GetArraySize(p16), n32 = cJSON_GetArraySize(p32), i = 0;
  const cJSON *q16 = NULL, *y16 = NULL;
  for (int k = 0; k < n32; k++) {
    const cJSON *e32 = cJSON_GetArrayItem(p32, k);
    const cJSON *g32 = cJSON_GetObjectItemCaseSensitive(e32, "gemm");
    /* the bf16 list's storage casts, and the launches of a cross_entropy_bwd that the
     * tf32 list ran in its forward classifier kernel */
    while (i < n16 && (storage_cast(cJSON_GetArrayItem(p16, i), blocks, t) ||
                       !pass_has_op(p32, num(cJSON_GetArrayItem(p16, i), "op"))))
      i++;
    const char *kn = str(e32, "kernel");
    if (strcmp(kn, "pkc_cross_entropy_count_f32") == 0 &&
        strcmp(str(cJSON_GetArrayItem(p32, k + 1), "kernel"), "pkc_classifier_f32") == 0 &&
        strcmp(str(cJSON_GetArrayItem(p16, i + 1), "kernel"), "pkc_classifier_bf16") != 0)
      continue; /* the classifier's count: an unfused bf16 forward counts in its backward */
    if (strcmp(kn, "pkc_classifier_f32") == 0) {
      const cJSON *e16 = cJSON_GetArrayItem(p16, i++);
      if (strcmp(str(e16, "kernel"), "pkc_classifier_bf16") == 0) check_classifier(e16, e32, blocks, t);
      else EXPECT_STREQ(str(e16, "kernel"), "pkc_cross_entropy_rows_f32"); /* the row losses alone */
      continue;
    }
    int m = -1;
    for (int a = 0; a < (int)(sizeof att_map / sizeof att_map[0]); a++)
      if (!g32 && strcmp(str(e32, "kernel"), att_map[a].f32) == 0) m = a;
    if (m >= 0 && strcmp(str(cJSON_GetArrayItem(p16, i), "kernel"), att_map[m].f32) != 0) {
      check_flash(p16, &i, e32, m, &q16, &y16, staging, blocks, t);
      continue;
    }
    if (!g32) { /* a kernel: unchanged, argument for argument */
      const cJSON *e16 = cJSON_GetArrayItem(p16, i++);
      EXPECT(same_launch(e16, e32));
      t->kernels++;
      continue;
    }
    /* a weight operand (params) is read from the bf16 weight copy, uncast; any other
     * operand is one cast launch before the GEMM */
    const cJSON *a32 = cJSON_GetObjectItemCaseSensitive(g32, "A"), *b32 = cJSON_GetObjectItemCaseSensitive(g32, "B");
    bool wa = strcmp(str(a32, "buf"), "params") == 0, wb = strcmp(str(b32, "buf"), "params") == 0;
    /* an operand stored as bf16 (the stash or boundary) is read from its copy, not cast */
    int gi = i;
    while (gi < n16 && !cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(p16, gi), "gemm")) gi++;
    const cJSON *gg = cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(p16, gi), "gemm");
    bool sa = false, sb = false;
    for (int q = 0; gg && q < 2; q++) {
      const char *buf = str(cJSON_GetObjectItemCaseSensitive(gg, q ? "B" : "A"), "buf");
      bool st = strcmp(buf, "stash") == 0 || strcmp(buf, "boundary") == 0;
      if (q) sb = st;
      else sa = st;
    }
    wa = wa || sa, wb = wb || sb; /* neither is cast */
    int ncast = !wa + !wb;
    if (i + ncast + 1 > n16) {
      EXPECT(!"bf16 list ends before a GEMM");
      return;
    }
    const cJSON *ca = wa ? NULL : cJSON_GetArrayItem(p16, i), *cb = wb ? NULL : cJSON_GetArrayItem(p16, i + !wa);
    const cJSON *e16 = cJSON_GetArrayItem(p16, i + ncast);
    i += ncast + 1;
    const cJSON *g16 = cJSON_GetObjectItemCaseSensitive(e16, "gemm");
    EXPECT(g16 != NULL);
    if (!g16) return;
    int op = (int)num(e32, "op");
    EXPECT(num(e16, "op") == op);
    double M = num(g32, "M"), N = num(g32, "N"), K = num(g32, "K");
    bool ta = num(g32, "transa") != 0, tb = num(g32, "transb") != 0;
    double na = span(ta ? K : M, ta ? M : K, num(g32, "lda")), nb = span(tb ? N : K, tb ? K : N, num(g32, "ldb"));
    const cJSON *ops32[2] = {a32, b32}, *casts[2] = {ca, cb};
    double n_[2] = {na, nb}, at[2] = {-1, -1};
    for (int q = 0; q < 2; q++) {
      const cJSON *x16 = cJSON_GetObjectItemCaseSensitive(g16, q ? "B" : "A");
      if (!casts[q] && (q ? sb : sa)) { /* a stored copy, inside its block */
        EXPECT(same_ptr(x16, ops32[q]));
        EXPECT(num(x16, "offset") + 2 * n_[q] <= num(blocks, str(x16, "buf")));
        t->stored_operands++;
        continue;
      }
      if (!casts[q]) { /* the weight copy: bf16 at half the float32 offset (or the weight's own
                          where the versions hold the copies), inside its block */
        const cJSON *fold = cJSON_GetObjectItemCaseSensitive(l16, "bf16_in_versions"), *f;
        bool listed = false;
        cJSON_ArrayForEach(f, fold) listed |= f->valuedouble == num(ops32[q], "offset");
        EXPECT_STREQ(str(x16, "buf"), "params_bf16");
        EXPECT(num(x16, "offset") * (fold ? 1 : 2) == num(ops32[q], "offset"));
        EXPECT(!fold || listed);
        EXPECT(num(x16, "offset") + 2 * n_[q] <= num(blocks, "params_bf16"));
        t->weight_operands++;
        continue;
      }
      at[q] = check_cast(casts[q], op, ops32[q], n_[q], blocks);
      EXPECT(at[q] >= staging); /* staged after the cross-entropy rows */
      EXPECT(same_ptr(x16, cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(casts[q], "args"), 0)));
      t->casts++;
    }
    if (ca && cb) EXPECT(at[1] >= at[0] + 2 * na); /* A before B without overlap */
    EXPECT_STREQ(str(g16, "dtype"), "bf16");
    EXPECT_STREQ(str(g32, "dtype"), "tf32");
    /* everything else about the GEMM is the tf32 one's (C stays float32 in place) */
    static const char *const same[] = {"transa", "transb", "M", "N", "K", "lda", "ldb", "ldc", "alpha", "beta"};
    for (size_t q = 0; q < sizeof same / sizeof same[0]; q++) EXPECT(num(g16, same[q]) == num(g32, same[q]));
    EXPECT(same_ptr(cJSON_GetObjectItemCaseSensitive(g16, "C"), cJSON_GetObjectItemCaseSensitive(g32, "C")));
    t->gemms++;
  }
  while (i < n16 && storage_cast(cJSON_GetArrayItem(p16, i), blocks, t)) i++;
  EXPECT_EQ_INT(i, n16);
}

/* The end of the cross-entropy row losses in cuda_scratch (the staging must start
 * after it): ce_rows + 8 bytes per row of every pkc_cross_entropy_rows_f32 and
 * pkc_classifier_f32 launch (M: argument 3, and 4 in the fused classifier). */
static double ce_rows_end(const cJSON *l) {
  double end = num(cJSON_GetObjectItemCaseSensitive(l, "cuda_scratch"), "ce_rows");
  const cJSON *e;
  cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(l, "forward")) {
    bool fused = strcmp(str(e, "kernel"), "pkc_classifier_f32") == 0 || strcmp(str(e, "kernel"), "pkc_classifier_bf16") == 0;
    if (!fused && strcmp(str(e, "kernel"), "pkc_cross_entropy_rows_f32") != 0) continue;
    const cJSON *args = cJSON_GetObjectItemCaseSensitive(e, "args");
    double off = num(cJSON_GetArrayItem(args, 0), "offset"), rows = num(cJSON_GetArrayItem(args, fused ? 4 : 3), "value");
    if (off + 8 * rows > end) end = off + 8 * rows;
  }
  return end;
}

/* Compiles `args` both ways and checks every stage. */
/* Launches of `kernel` in list l (both passes), and backward GEMMs with an operand at
 * stash offset `off`. */
static int count_kernel(const cJSON *l, const char *kernel) {
  int n = 0;
  const cJSON *e;
  for (int p = 0; p < 2; p++)
    cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(l, p ? "backward" : "forward")) n += strcmp(str(e, "kernel"), kernel) == 0;
  return n;
}
static int gemms_reading(const cJSON *l, double off) {
  int n = 0;
  const cJSON *e;
  cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(l, "backward")) {
    const cJSON *g = cJSON_GetObjectItemCaseSensitive(e, "gemm");
    for (int q = 0; g && q < 2; q++) {
      const cJSON *x = cJSON_GetObjectItemCaseSensitive(g, q ? "B" : "A");
      n += strcmp(str(x, "buf"), "stash") == 0 && num(x, "offset") == off;
    }
  }
  return n;
}

/* want_cls: a GPT plan (fusion on), whose loss stage runs the bf16 classifier. */
static void check_model_cls(const char *tag, const char *args, bool want_flash, bool want_cls);
static void check_model(const char *tag, const char *args, bool want_flash) { check_model_cls(tag, args, want_flash, false); }
static void check_model_cls(const char *tag, const char *args, bool want_flash, bool want_cls) {
  char n16[64], n32[64], d16[256], d32[256];
  snprintf(n16, sizeof n16, "%s-bf16", tag);
  snprintf(n32, sizeof n32, "%s-tf32", tag);
  char a16[512];
  snprintf(a16, sizeof a16, "%s --precision bf16", args);
  if (!compile(n32, args) || !compile(n16, a16)) {
    EXPECT(!"pd2bwc failed");
    return;
  }
  snprintf(d16, sizeof d16, "%s/%s", tmp, n16);
  snprintf(d32, sizeof d32, "%s/%s", tmp, n32);
  cJSON *plan16 = read_json(d16, "plan.json");
  int nst = cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(plan16, "stages"));
  EXPECT(nst >= 1);
  Tally t = {0};
  for (int s = 0; s < nst; s++) {
    char name[64];
    snprintf(name, sizeof name, "stage%d.launch.json", s);
    cJSON *l16 = read_json(d16, name), *l32 = read_json(d32, name);
    EXPECT(l16 && l32);
    if (!l16 || !l32) {
      cJSON_Delete(l16);
      cJSON_Delete(l32);
      continue;
    }
    EXPECT_STREQ(str(l16, "gemm_dtype"), "bf16");
    EXPECT_STREQ(str(l16, "mixed_precision"), "bf16-fp32-master");
    EXPECT_STREQ(str(l32, "gemm_dtype"), "tf32");
    EXPECT_STREQ(str(l32, "mixed_precision"), "none");
    /* the weights, gradients and inputs keep their blocks; the stash and the boundary
     * shrink (bf16), WORK holds the working places, cuda_scratch grows */
    const cJSON *b16 = cJSON_GetObjectItemCaseSensitive(l16, "blocks"), *b32 = cJSON_GetObjectItemCaseSensitive(l32, "blocks");
    const cJSON *b;
    cJSON_ArrayForEach(b, b32) {
      if (strcmp(b->string, "cuda_scratch") == 0) EXPECT(num(b16, b->string) >= b->valuedouble);
      else if (strcmp(b->string, "stash") == 0 || strcmp(b->string, "boundary") == 0)
        EXPECT(num(b16, b->string) <= b->valuedouble && (b->valuedouble == 0 || num(b16, b->string) < b->valuedouble));
      else if (strcmp(b->string, "work") != 0) EXPECT(num(b16, b->string) == b->valuedouble);
    }
    /* plus the bf16 weight copy's block, half the params block (the params block where
     * the versions hold the copies) */
    bool fold = cJSON_GetObjectItemCaseSensitive(l16, "bf16_in_versions") != NULL;
    EXPECT(num(b16, "params_bf16") * (fold ? 1 : 2) == num(b32, "params"));
    EXPECT(cJSON_GetObjectItemCaseSensitive(b32, "params_bf16") == NULL);
    double staging = num(cJSON_GetObjectItemCaseSensitive(l16, "cuda_scratch"), "bf16_staging");
    EXPECT(staging >= ce_rows_end(l16));
    EXPECT(staging >= ce_rows_end(l32));
    EXPECT((long long)staging % 256 == 0);
    Tally st = {0};
    check_pass(l16, l32, "forward", staging, &st);
    check_pass(l16, l32, "backward", staging, &st);
    if (st.classifiers) { /* its gradient: no cross_entropy_bwd, the LM head's GEMMs read it */
      EXPECT_EQ_INT(st.classifiers, 1);
      EXPECT_EQ_INT(count_kernel(l16, "pkc_cross_entropy_bwd_f32"), 0);
      EXPECT_EQ_INT(gemms_reading(l16, st.cls_off), 2);
      t.classifiers++;
    }
    /* the kernel names: the tf32 list's (the fp32 attention kernels replaced one for
     * one, no fused classifier) plus the casts and the unfused cross-entropy's */
    const cJSON *k16 = cJSON_GetObjectItemCaseSensitive(l16, "kernels"), *k32 = cJSON_GetObjectItemCaseSensitive(l32, "kernels");
    const cJSON *kk;
    cJSON_ArrayForEach(kk, k32) {
      bool att = strncmp(kk->valuestring, "pkc_attention_", 14) == 0 && st.flash > 0, found = false;
      const cJSON *k2;
      cJSON_ArrayForEach(k2, k16) found = found || strcmp(k2->valuestring, kk->valuestring) == 0 ||
                                          (strcmp(kk->valuestring, "pkc_embedding_fwd_f32") == 0 &&
                                           strcmp(k2->valuestring, "pkc_embedding_fwd_bf16_f32") == 0);
      if (!found && !att && strcmp(kk->valuestring, "pkc_classifier_f32") != 0)
        fprintf(stderr, "  %s: not in the bf16 list's kernels\n", kk->valuestring);
      EXPECT(found || att || strcmp(kk->valuestring, "pkc_classifier_f32") == 0);
    }
    /* the C program stores as bf16 what the list does */
    snprintf(name, sizeof name, "stage%d.c", s);
    char p16[512], p32[512];
    snprintf(p16, sizeof p16, "%s/%s", d16, name);
    snprintf(p32, sizeof p32, "%s/%s", d32, name);
    char *c16 = cg_read_all(p16), *c32 = cg_read_all(p32);
    EXPECT(c16 && c32 && (strstr(c16, "  pk_bf16_store(") != NULL) == (st.stores > 0));
    EXPECT(c16 && c32 && (strcmp(c16, c32) == 0) == (st.stores == 0));
    free(c16);
    free(c32);
    /* plan.json records the precision per stage */
    const cJSON *cu = cJSON_GetObjectItemCaseSensitive(
        cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(plan16, "stages"), s), "program"),
        "cuda");
    EXPECT_STREQ(str(cu, "gemm_dtype"), "bf16");
    EXPECT(num(cu, "cuda_scratch") == num(b16, "cuda_scratch"));
    printf("  %s stage %d: %d GEMMs, %d casts, %d weight operands from params_bf16, %d kernels unchanged, %d "
           "attention launches on tensor cores, %d storage casts, %d operands read from their stored copy; "
           "cuda_scratch %.0f -> %.0f, stash %.0f -> %.0f, boundary %.0f -> %.0f, work %.0f -> %.0f bytes\n",
           tag, s, st.gemms, st.casts, st.weight_operands, st.kernels, st.flash, st.stores, st.stored_operands,
           num(b32, "cuda_scratch"),
           num(b16, "cuda_scratch"), num(b32, "stash"), num(b16, "stash"), num(b32, "boundary"),
           num(b16, "boundary"), num(b32, "work"), num(b16, "work"));
    t.gemms += st.gemms;
    t.flash += st.flash;
    t.casts += st.casts;
    t.weight_operands += st.weight_operands;
    cJSON_Delete(l16);
    cJSON_Delete(l32);
  }
  EXPECT(t.gemms > 0 && t.weight_operands > 0);
  if (want_flash) EXPECT(t.flash > 0);
  if (want_cls) EXPECT_EQ_INT(t.classifiers, 1);
  cJSON_Delete(plan16);
}

static void test_tinygpt_one_stage(void) {
  check_model_cls("tinygpt1", "models/tinygpt.model --stages 1 --replicas 1", true, true);
}
static void test_tinygpt_two_stages(void) {
  check_model_cls("tinygpt2", "models/tinygpt.model --cluster models/clusters/cpu2.cluster --stages 2 --replicas 1 --schedule 2bw",
                  true, true);
}
static void test_bert_small(void) {
  check_model("bert", "models/bert.model -D layers=2 -D dim=64 -D heads=2 -D seq=16 -D vocab=128 -D npred=4 --stages 2 "
                      "--replicas 1 --microbatch-size 2 --cluster models/clusters/cpu2.cluster", true);
}
/* An odd vocabulary: the logits' rows padded to 128, their bf16 copy cast whole. */
static void test_tinygpt_padded(void) {
  check_model_cls("tinygpt67", "models/tinygpt.model -D vocab=67 --stages 1 --replicas 1", true, true);
}
static void test_mlp(void) { check_model("mlp", "models/mlp.model --stages 1 --replicas 1", false); }

#define GOLDEN "tests/golden/codegen/mlp.bf16.launch.json"

static void test_golden_mlp(void) {
  char dir[256];
  snprintf(dir, sizeof dir, "%s/mlp-bf16", tmp);
  struct stat sb;
  if (stat(dir, &sb) != 0) EXPECT(compile("mlp-bf16", "models/mlp.model --stages 1 --replicas 1 --precision bf16"));
  cJSON *l = read_json(dir, "stage0.launch.json");
  EXPECT(l != NULL);
  if (!l) return;
  cJSON_DeleteItemFromObjectCaseSensitive(l, "hash");
  cJSON_DeleteItemFromObjectCaseSensitive(l, "source");
  cJSON_DeleteItemFromObjectCaseSensitive(cJSON_GetObjectItemCaseSensitive(l, "library"), "hash");
  char *got = cJSON_Print(l);
  cJSON_Delete(l);
  size_t n = strlen(got);
  got = realloc(got, n + 2);
  memcpy(got + n, "\n", 2);
  EXPECT(cg_golden(GOLDEN, got));
  free(got);
}

/* --precision mistakes: one message, status 1, no plan directory. */
static void expect_refused(const char *args, const char *want) {
  char cmd[1024], out[256], errf[256];
  snprintf(out, sizeof out, "%s/refused", tmp);
  snprintf(errf, sizeof errf, "%s/refused.err", tmp);
  snprintf(cmd, sizeof cmd, "'%s' models/tinygpt.model -o '%s' %s 2>'%s'", pd2bwc, out, args, errf);
  int rc = system(cmd);
  EXPECT(rc != 0);
  char *msg = cg_read_all(errf);
  printf("  pd2bwc %s: %s", args, msg ? msg : "(nothing)\n");
  EXPECT(msg && strstr(msg, want) != NULL);
  free(msg);
  struct stat sb;
  EXPECT(stat(out, &sb) != 0);
}

static void test_precision_errors(void) {
  expect_refused("--precision bf8", "pd2bwc: error: --precision takes tf32, fp32 or bf16, got 'bf8'");
  expect_refused("--precision", "pd2bwc: error: option '--precision' needs a value");
  expect_refused("--backend cpu --precision bf16", "--precision bf16 applies to the CUDA programs");
}

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: test_cudagen_bf16 PD2BWC\n");
    return 2;
  }
  pd2bwc = argv[1];
  if (!mkdtemp(tmp)) {
    perror("mkdtemp");
    return 1;
  }
  RUN(test_tinygpt_one_stage);
  RUN(test_tinygpt_two_stages);
  RUN(test_bert_small);
  RUN(test_tinygpt_padded);
  RUN(test_mlp);
  RUN(test_golden_mlp);
  RUN(test_precision_errors);
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmp);
  return TEST_REPORT();
}
