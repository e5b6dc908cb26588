/* tests/cudagen/cudagen_check.h — checks of a generated stageN.cu, the plan's kernel
 * library (kernels.cu) and the launch list, that need no GPU, shared by the cudagen
 * tests.
 *
 *  - check_launch_list: every launch names a kernel defined in the module its entry
 *    says ("library": kernels.cu, "stage": stageN.cu), with exactly its parameter
 *    count and types (parsed from the kernel's declaration); the stage source defines
 *    no library kernel (the point of the split) and the list's library hash is the
 *    library's;
 *    every pointer is a block the list declares, at an offset inside it; every GEMM's
 *    operands (ld·rows as the descriptor says) fit their blocks; every literal offset
 *    a generated kernel dereferences, times its loop length, fits its block; the
 *    "kernels" array is exactly the set launched.
 *  - check_gemms_match_cpu: the GEMMs of the launch list, in order, are the GEMM
 *    calls the CPU program (stageN.c) makes, re-derived from its kernel calls with
 *    the formulas of kernels/cpu_kernels.h (a leading dimension the GPU
 *    layout pads, passes/layout.h's LAYOUT_ROW_PAD, stands for the CPU's unpadded one).
 *  - check_gemm_alignment: every GEMM's A, B and C start 16 bytes aligned in their
 *    blocks and have leading dimensions that are multiples of 8 elements (cuBLAS's
 *    tensor-core kernels; else it falls back to its align1 kernels).
 */
#ifndef PD2BW_TESTS_CUDAGEN_CHECK_H
#define PD2BW_TESTS_CUDAGEN_CHECK_H

#include <cjson/cJSON.h>
#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include "codegen/codegen.h"
#include "passes/layout.h"
#include "test.h"

/* ---- kernel signatures ------------------------------------------------------------ */

/* Parameter types of `__global__ void name(...)` in src, as launch-list types; -1
 * when src has no such kernel. */
static int kernel_sig(const char *src, const char *name, char types[][4], int max) {
  char pat[160];
  snprintf(pat, sizeof pat, "__global__ void %s(", name);
  const char *p = strstr(src, pat);
  if (!p) return -1;
  p += strlen(pat);
  int n = 0;
  while (*p && *p != ')') {
    const char *q = p;
    while (*q && *q != ',' && *q != ')') q++;
    char par[128];
    size_t len = (size_t)(q - p) < sizeof par - 1 ? (size_t)(q - p) : sizeof par - 1;
    memcpy(par, p, len);
    par[len] = 0;
    const char *t = "?";
    if (strchr(par, '*')) t = "ptr";
    else if (strstr(par, "pkc_i64") || strstr(par, "long long")) t = strstr(par, "unsigned") ? "u64" : "i64";
    else if (strstr(par, "pkc_u64")) t = "u64";
    else if (strstr(par, "pkc_u32") || strstr(par, "unsigned")) t = "u32";
    else if (strstr(par, "double")) t = "f64";
    else if (strstr(par, "float")) t = "f32";
    else if (strstr(par, "int")) t = "i32";
    if (n < max) snprintf(types[n], 4, "%s", t);
    n++;
    p = *q == ',' ? q + 1 : q;
  }
  return n;
}

static double block_size(const cJSON *list, const char *buf) {
  const cJSON *b = cJSON_GetObjectItem(cJSON_GetObjectItem(list, "blocks"), buf);
  return cJSON_IsNumber(b) ? b->valuedouble : -1;
}

static int nerr_;
#define CG_FAIL(...)                                                                               \
  do {                                                                                             \
    if (nerr_++ < 8) fprintf(stderr, "  launch list: " __VA_ARGS__);                              \
  } while (0)

/* A pointer {buf, offset} at most `bytes` long inside its block. */
static void check_ptr(const cJSON *list, const cJSON *p, double bytes, const char *what) {
  const cJSON *buf = cJSON_GetObjectItem(p, "buf");
  if (cJSON_IsNull(buf)) return;
  double off = cJSON_GetObjectItem(p, "offset") ? cJSON_GetObjectItem(p, "offset")->valuedouble : -1;
  double size = cJSON_IsString(buf) ? block_size(list, buf->valuestring) : -1;
  if (size < 0 || off < 0 || (off > 0 && off + (bytes > 0 ? bytes : 1) > size) || off + bytes > size)
    CG_FAIL("%s: %s+%.0f (%.0f bytes) outside its block (%.0f bytes)\n", what,
            cJSON_IsString(buf) ? buf->valuestring : "?", off, bytes, size);
}

/* Every TF(B, off)[i] / [i % m] of each generated kernel lies inside block B. */
static void check_fused_offsets(const cJSON *list, const char *src) {
  static const struct {
    char c;
    const char *buf;
  } bases[] = {{'P', "params"}, {'G', "grads"}, {'S', "stash"}, {'W', "work"}, {'I', "inputs"}, {'X', "boundary"}};
  const char *own = strstr(src, "stage");
  own = own ? strstr(src, "'s own kernels") : NULL;
  if (!own) return;
  const char *k = own;
  while ((k = strstr(k, "i < ")) != NULL) {
    long long len = strtoll(k + 4, NULL, 10);
    const char *end = strstr(k, "\n}\n");
    const char *t = k;
    while ((t = strstr(t, "TF(")) != NULL && (!end || t < end)) {
      char base = t[3];
      long long off = strtoll(t + 6, NULL, 10);
      const char *br = strchr(t, ']');
      const char *mod = strstr(t, "[i % ");
      long long n = mod && mod < br ? strtoll(mod + 5, NULL, 10) : len;
      const char *name = NULL;
      for (size_t b = 0; b < sizeof bases / sizeof bases[0]; b++)
        if (bases[b].c == base) name = bases[b].buf;
      double size = name ? block_size(list, name) : -1;
      if (!name || off < 0 || (double)off + 4.0 * (double)n > size)
        CG_FAIL("fused kernel reads %c+%lld for %lld floats: outside its block (%.0f bytes)\n", base, off, n, size);
      t += 3;
    }
    k += 4;
  }
}

/* A GEMM operand: rows·ld as stored. */
static void check_gemm(const cJSON *list, const cJSON *gm) {
  int ta = cJSON_GetObjectItem(gm, "transa")->valueint, tb = cJSON_GetObjectItem(gm, "transb")->valueint;
  double M = cJSON_GetObjectItem(gm, "M")->valuedouble, N = cJSON_GetObjectItem(gm, "N")->valuedouble;
  double K = cJSON_GetObjectItem(gm, "K")->valuedouble;
  double lda = cJSON_GetObjectItem(gm, "lda")->valuedouble, ldb = cJSON_GetObjectItem(gm, "ldb")->valuedouble;
  double ldc = cJSON_GetObjectItem(gm, "ldc")->valuedouble;
  double ar = ta ? K : M, ac = ta ? M : K, br = tb ? N : K, bc = tb ? K : N;
  if (lda < ac || ldb < bc || ldc < N || M < 1 || N < 1 || K < 1) CG_FAIL("GEMM with bad shape/leading dims\n");
  check_ptr(list, cJSON_GetObjectItem(gm, "A"), 4 * ((ar - 1) * lda + ac), "GEMM A");
  check_ptr(list, cJSON_GetObjectItem(gm, "B"), 4 * ((br - 1) * ldb + bc), "GEMM B");
  check_ptr(list, cJSON_GetObjectItem(gm, "C"), 4 * ((M - 1) * ldc + N), "GEMM C");
  const char *dt = cJSON_GetStringValue(cJSON_GetObjectItem(gm, "dtype"));
  if (!dt || (strcmp(dt, "tf32") != 0 && strcmp(dt, "fp32") != 0 && strcmp(dt, "bf16") != 0))
    CG_FAIL("GEMM dtype %s\n", dt ? dt : "(none)");
}

/* Problems (printed, up to 8) with the alignment of the list's GEMMs; `what` names
 * the list in the messages. */
static inline int check_gemm_alignment(const cJSON *list, const char *what) {
  static const char *const dirs[] = {"forward", "backward"}, *const ops[] = {"A", "B", "C"},
                           *const lds[] = {"lda", "ldb", "ldc"};
  int bad = 0;
  for (int d = 0; d < 2; d++) {
    const cJSON *en;
    cJSON_ArrayForEach(en, cJSON_GetObjectItem(list, dirs[d])) {
      const cJSON *gm = cJSON_GetObjectItem(en, "gemm");
      if (!gm) continue;
      int op = (int)cJSON_GetObjectItem(en, "op")->valuedouble;
      for (int i = 0; i < 3; i++) {
        long long off = (long long)cJSON_GetObjectItem(cJSON_GetObjectItem(gm, ops[i]), "offset")->valuedouble;
        long long ld = (long long)cJSON_GetObjectItem(gm, lds[i])->valuedouble;
        if (off % 16 == 0 && ld % 8 == 0) continue;
        if (bad++ < 8)
          fprintf(stderr, "  %s: %s GEMM of op %d: %s at offset %lld, %s %lld (want 16-byte offsets, ld %% 8 == 0)\n",
                  what, dirs[d], op, ops[i], off, lds[i], ld);
      }
    }
  }
  return bad;
}

/* Returns the number of problems found (each printed, up to 8). lib: kernels.cu,
 * src: stageN.cu. */
static int check_launch_list(const cJSON *list, const char *lib, const char *src) {
  nerr_ = 0;
  if (strstr(src, "__global__ void pkc_")) CG_FAIL("the stage source defines a library kernel\n");
  const cJSON *lj = cJSON_GetObjectItem(list, "library");
  char lh[17];
  codegen_hash_hex(lib, strlen(lib), lh);
  if (!cJSON_IsString(cJSON_GetObjectItem(lj, "hash")) || strcmp(cJSON_GetObjectItem(lj, "hash")->valuestring, lh) != 0)
    CG_FAIL("\"library\" hash is not the library source's %s\n", lh);
  static const char *const dirs[] = {"forward", "backward"};
  int seen_n = 0;
  const char *seen[512];
  for (int d = 0; d < 2; d++) {
    const cJSON *arr = cJSON_GetObjectItem(list, dirs[d]), *en;
    if (!cJSON_IsArray(arr)) CG_FAIL("no %s array\n", dirs[d]);
    cJSON_ArrayForEach(en, arr) {
      const cJSON *gm = cJSON_GetObjectItem(en, "gemm");
      if (gm) {
        check_gemm(list, gm);
        continue;
      }
      const char *name = cJSON_GetStringValue(cJSON_GetObjectItem(en, "kernel"));
      if (!name) {
        CG_FAIL("entry neither a kernel nor a GEMM\n");
        continue;
      }
      int s;
      for (s = 0; s < seen_n && strcmp(seen[s], name) != 0; s++) {}
      if (s == seen_n && seen_n < 512) seen[seen_n++] = name;
      const char *mod = cJSON_GetStringValue(cJSON_GetObjectItem(en, "module"));
      bool in_lib = mod && strcmp(mod, "library") == 0;
      if (!mod || (!in_lib && strcmp(mod, "stage") != 0)) CG_FAIL("%s: no module (library|stage)\n", name);
      char types[32][4];
      int np = kernel_sig(in_lib ? lib : src, name, types, 32);
      const cJSON *args = cJSON_GetObjectItem(en, "args"), *a;
      if (np < 0) CG_FAIL("%s is not defined in its module (%s)\n", name, mod ? mod : "?");
      if (np >= 0 && cJSON_GetArraySize(args) != np)
        CG_FAIL("%s takes %d arguments, the list passes %d\n", name, np, cJSON_GetArraySize(args));
      double grid = cJSON_GetObjectItem(en, "grid")->valuedouble, block = cJSON_GetObjectItem(en, "block")->valuedouble;
      if (grid < 1 || block < 32 || block > 1024 || ((int)block & ((int)block - 1)) != 0 ||
          cJSON_GetObjectItem(en, "shared")->valuedouble != 0)
        CG_FAIL("%s: bad launch configuration\n", name);
      int i = 0;
      cJSON_ArrayForEach(a, args) {
        const char *ty = cJSON_GetStringValue(cJSON_GetObjectItem(a, "type"));
        if (np >= 0 && i < np && (!ty || strcmp(ty, types[i]) != 0))
          CG_FAIL("%s argument %d: list says %s, kernel takes %s\n", name, i, ty ? ty : "?", types[i]);
        if (ty && strcmp(ty, "ptr") == 0) check_ptr(list, a, 0, name);
        const cJSON *rt = cJSON_GetObjectItem(a, "runtime");
        if (rt) {
          const char *w = cJSON_GetStringValue(rt);
          /* no "microbatch" since format 3: it is read from cuda_scratch (microbatch_key);
           * "rng_base" since format 4: the stage's base + value, a dropout stream */
          if (!w || (strcmp(w, "seed") && strcmp(w, "training") && strcmp(w, "dropout_p") &&
                     (strcmp(w, "rng_base") || !cJSON_IsNumber(cJSON_GetObjectItem(a, "value")))))
            CG_FAIL("%s argument %d: unknown runtime value\n", name, i);
        } else if (ty && strcmp(ty, "ptr") != 0 && !cJSON_IsNumber(cJSON_GetObjectItem(a, "value"))) {
          CG_FAIL("%s argument %d: scalar without a value\n", name, i);
        }
        i++;
      }
    }
  }
  const cJSON *ks = cJSON_GetObjectItem(list, "kernels"), *k;
  if (cJSON_GetArraySize(ks) != seen_n) CG_FAIL("\"kernels\" lists %d names, %d launched\n", cJSON_GetArraySize(ks), seen_n);
  cJSON_ArrayForEach(k, ks) {
    int s;
    for (s = 0; s < seen_n && strcmp(seen[s], k->valuestring) != 0; s++) {}
    if (s == seen_n) CG_FAIL("\"kernels\" names %s, never launched\n", k->valuestring);
  }
  const cJSON *loss = cJSON_GetObjectItem(list, "loss");
  if (loss && !cJSON_IsNull(loss)) check_ptr(list, loss, 4, "loss");
  check_fused_offsets(list, src);
  return nerr_;
}

/* ---- the CPU program's GEMMs --------------------------------------------------------- */

typedef struct GemmCall {
  int ta, tb;
  long long M, N, K, lda, ldb, ldc;
  char Ab, Bb, Cb; /* block letters: P G S W I X */
  long long Ao, Bo, Co;
  int beta;       /* 0/1; -1: not compared (linear with a bias: the GPU adds it after) */
} GemmCall;

/* "TR(W, 123)" -> 'W', 123; "NULL" -> 0. */
static char parse_ptr(const char *s, long long *off) {
  while (*s == ' ') s++;
  if (strncmp(s, "TR(", 3) != 0 && strncmp(s, "TI(", 3) != 0) return 0;
  *off = strtoll(s + 6, NULL, 10);
  return s[3];
}

/* Splits the argument list starting after '(' at p into args (commas at depth 0). */
static int split_args(const char *p, char args[][64], int max) {
  int n = 0, depth = 0;
  size_t k = 0;
  for (; *p; p++) {
    if (*p == '(') depth++;
    if (*p == ')' && depth-- == 0) break;
    if (*p == ',' && depth == 0) {
      args[n][k] = 0;
      if (++n >= max) return n;
      k = 0;
      continue;
    }
    if (k < 63) args[n][k++] = *p;
  }
  args[n][k] = 0;
  return n + 1;
}

/* The GEMM calls of a CPU stage program, in program order (forward functions, then
 * backward, as the entry points call them — the region functions are defined in
 * that order). */
static int cpu_gemms(const char *src, GemmCall *out, int max) {
  static const char *const names[] = {"K(linear_fwd)(", "K(matmul_fwd)(", "K(linear_dw)(", "K(matmul_db)("};
  int n = 0;
  for (const char *p = src; *p && n < max; p++) {
    int which = -1;
    for (int k = 0; k < 4; k++)
      if (strncmp(p, names[k], strlen(names[k])) == 0) which = k;
    if (which < 0 || (p > src && p[-1] == 'P')) continue; /* PK(...): a definition */
    char a[12][64];
    int na = split_args(p + strlen(names[which]), a, 12);
    GemmCall g = {0};
    long long o0 = 0, o1 = 0, o2 = 0, o3 = 0;
    char b0 = parse_ptr(a[0], &o0), b1 = parse_ptr(a[1], &o1), b2 = parse_ptr(a[2], &o2);
    if (which == 0 && na == 7) { /* linear_fwd(y, x, W, bias, M, K, N) */
      char b3 = parse_ptr(a[3], &o3);
      long long M = atoll(a[4]), K = atoll(a[5]), N = atoll(a[6]);
      g = (GemmCall){0, 0, M, N, K, K, N, N, b1, b2, b0, o1, o2, o0, b3 ? -1 : 0};
    } else if (which == 1 && na == 8) { /* matmul_fwd(y, a, b, M, K, N, ta, tb) */
      long long M = atoll(a[3]), K = atoll(a[4]), N = atoll(a[5]);
      int ta = atoi(a[6]), tb = atoi(a[7]);
      g = (GemmCall){ta, tb, M, N, K, ta ? M : K, tb ? K : N, N, b1, b2, b0, o1, o2, o0, 0};
    } else if (which == 2 && na == 7) { /* linear_dw(dW, x, dy, M, K, N, acc) */
      long long M = atoll(a[3]), K = atoll(a[4]), N = atoll(a[5]);
      g = (GemmCall){1, 0, K, N, M, K, N, N, b1, b2, b0, o1, o2, o0, atoi(a[6]) ? 1 : 0};
    } else if (which == 3 && na == 9) { /* matmul_db(db, a, dy, M, K, N, ta, tb, acc) */
      long long M = atoll(a[3]), K = atoll(a[4]), N = atoll(a[5]);
      int ta = atoi(a[6]), tb = atoi(a[7]), beta = atoi(a[8]) ? 1 : 0;
      if (!tb)
        g = (GemmCall){!ta, 0, K, N, M, ta ? M : K, N, N, b1, b2, b0, o1, o2, o0, beta};
      else
        g = (GemmCall){1, ta, N, K, M, N, ta ? M : K, K, b2, b1, b0, o2, o1, o0, beta};
    } else {
      continue; /* the kernel's own definition or a comment */
    }
    if (!g.Ab || !g.Bb || !g.Cb) continue;
    out[n++] = g;
  }
  return n;
}

static char letter_of(const char *buf) {
  static const char *const names[] = {"params", "grads", "stash", "work", "inputs", "boundary"};
  static const char letters[] = "PGSWIX";
  for (int i = 0; i < 6; i++)
    if (strcmp(buf, names[i]) == 0) return letters[i];
  return '?';
}

static GemmCall gpu_gemm(const cJSON *gm) {
  GemmCall g;
#define GI(k) ((long long)cJSON_GetObjectItem(gm, k)->valuedouble)
  g.ta = (int)GI("transa"), g.tb = (int)GI("transb");
  g.M = GI("M"), g.N = GI("N"), g.K = GI("K"), g.lda = GI("lda"), g.ldb = GI("ldb"), g.ldc = GI("ldc");
#undef GI
  const char *ab[3] = {"A", "B", "C"};
  char *lt[3] = {&g.Ab, &g.Bb, &g.Cb};
  long long *of[3] = {&g.Ao, &g.Bo, &g.Co};
  for (int i = 0; i < 3; i++) {
    const cJSON *p = cJSON_GetObjectItem(gm, ab[i]);
    *lt[i] = letter_of(cJSON_GetStringValue(cJSON_GetObjectItem(p, "buf")));
    *of[i] = (long long)cJSON_GetObjectItem(p, "offset")->valuedouble;
  }
  g.beta = (int)cJSON_GetObjectItem(gm, "beta")->valuedouble;
  return g;
}

/* The CPU program's leading dimension cpu and the GPU's gpu agree: equal, or gpu is
 * the layout's padding of an unaligned cpu (the CPU writes those rows contiguously). */
static bool same_ld(long long cpu, long long gpu) {
  return cpu == gpu || (cpu % 8 != 0 && gpu == (cpu + LAYOUT_ROW_PAD - 1) / LAYOUT_ROW_PAD * LAYOUT_ROW_PAD);
}

/* Number of disagreements (printed) between the launch list's GEMMs and the CPU
 * program's; *ngemm gets how many GEMMs were compared. */
static int check_gemms_match_cpu(const cJSON *list, const char *cpu_src, int *ngemm) {
  int max = 4096;
  GemmCall *cpu = calloc((size_t)max, sizeof *cpu);
  int nc = cpu_gemms(cpu_src, cpu, max), ng = 0, bad = 0;
  static const char *const dirs[] = {"forward", "backward"};
  for (int d = 0; d < 2; d++) {
    const cJSON *en;
    cJSON_ArrayForEach(en, cJSON_GetObjectItem(list, dirs[d])) {
      const cJSON *gm = cJSON_GetObjectItem(en, "gemm");
      if (!gm) continue;
      GemmCall g = gpu_gemm(gm);
      if (ng >= nc) {
        if (bad++ < 4) fprintf(stderr, "  GEMM %d of the launch list has no CPU counterpart\n", ng);
        ng++;
        continue;
      }
      GemmCall c = cpu[ng];
      bool same = c.ta == g.ta && c.tb == g.tb && c.M == g.M && c.N == g.N && c.K == g.K &&
                  same_ld(c.lda, g.lda) && same_ld(c.ldb, g.ldb) && same_ld(c.ldc, g.ldc) && c.Ab == g.Ab && c.Bb == g.Bb && c.Cb == g.Cb &&
                  c.Ao == g.Ao && c.Bo == g.Bo && c.Co == g.Co && (c.beta < 0 || c.beta == g.beta);
      if (!same && bad++ < 4)
        fprintf(stderr,
                "  GEMM %d differs: CPU (%d,%d, %lld,%lld,%lld, %c%lld/%lld %c%lld/%lld %c%lld/%lld b%d) GPU "
                "(%d,%d, %lld,%lld,%lld, %c%lld/%lld %c%lld/%lld %c%lld/%lld b%d)\n",
                ng, c.ta, c.tb, c.M, c.N, c.K, c.Ab, c.Ao, c.lda, c.Bb, c.Bo, c.ldb, c.Cb, c.Co, c.ldc, c.beta, g.ta,
                g.tb, g.M, g.N, g.K, g.Ab, g.Ao, g.lda, g.Bb, g.Bo, g.ldb, g.Cb, g.Co, g.ldc, g.beta);
      ng++;
    }
  }
  if (ng != nc) {
    if (bad++ < 8) fprintf(stderr, "  %d GEMMs in the launch list, %d in the CPU program\n", ng, nc);
  }
  free(cpu);
  *ngemm = ng;
  return bad;
}

#endif
