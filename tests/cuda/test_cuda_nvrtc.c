/* tests/cuda/test_cuda_nvrtc.c — the CUDA kernels compile with NVRTC, and the cache.
 *
 * NVRTC needs no GPU, so this runs in CI: the embedded kernel text (philox.h +
 * cuda_kernels.cuh, exactly what the code generator writes into a plan's kernels.cu)
 * plus a small stage-like driver kernel must compile for sm_90 and sm_80 (there with the
 * attention head size fixed, PKC_ATT_HS=64, as a generated stage does) into a cubin that
 * holds every kernel of cuda_kernel_list.h and no other pkc_ kernel. Then: the second
 * compile comes from the cache, a changed option misses it, a corrupt entry is
 * recompiled, and a broken source gives NVRTC's log naming the line.
 */
#include <dirent.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../test.h"
#include "ir/ir.h"
#include "pkc_kernels_src.h"
#include "runtime/cuda/cuda_backend.h"
#include "kernels/cuda_kernel_list.h"

static char cache_dir[] = "/tmp/pd2bw-test-nvrtc-XXXXXX";

/* A stage-like fused kernel built on the header's device helpers (a generated
 * stageN.cu holds only such kernels, in its own module). */
static const char driver_src[] =
    "\nextern \"C\" __global__ void stage0_fused_bias_gelu(float *y, const float *x,\n"
    "    const float *bias, pkc_i64 M, int N) {\n"
    "  __shared__ float sh[PKC_MAX_BLOCK];\n"
    "  for (pkc_i64 k = pkc_tid(); k < M * N; k += pkc_nthreads()) {\n"
    "    float v = x[k] + bias[k % N];\n"
    "    y[k] = 0.5f * v * (1.0f + tanhf(PKC_GELU_K * (v + PKC_GELU_A * v * v * v)));\n"
    "  }\n"
    "  float s = pkc_block_sum(1.0f, sh);\n"
    "  if (s < 0) y[0] = s;\n"
    "}\n";

static char *stage_source(void) {
  size_t a = strlen(pd_cuda_kernels_src), b = strlen(driver_src);
  char *s = pd_malloc(a + b + 1);
  memcpy(s, pd_cuda_kernels_src, a);
  memcpy(s + a, driver_src, b + 1);
  return s;
}

static const char *const kernel_names[] = {
#define NAME(k, kind) #k,
    PKC_KERNEL_LIST(NAME)
#undef NAME
};
#define NKERNELS ((int)(sizeof kernel_names / sizeof kernel_names[0]))

/* Every kernel named in the cubin's section names (".text.<kernel>") must be one of
 * ours or the driver's; returns how many distinct pkc_ kernels it has. */
static int count_pkc_kernels(const CudaBinary *b) {
  const char *p = b->data;
  static const char tag[] = ".text.";
  int seen[256] = {0}, distinct = 0;
  for (size_t i = 1; i + sizeof tag < b->size; i++) {
    if (p[i - 1] != 0 || memcmp(p + i, tag, sizeof tag - 1) != 0) continue;
    const char *name = p + i + sizeof tag - 1;
    if (strncmp(name, "pkc_", 4) != 0) {
      EXPECT(strcmp(name, "stage0_fused_bias_gelu") == 0);
      continue;
    }
    int k = 0;
    while (k < NKERNELS && strcmp(kernel_names[k], name) != 0) k++;
    if (k == NKERNELS) {
      fprintf(stderr, "cubin has kernel %s, missing from cuda_kernel_list.h\n", name);
      EXPECT(k < NKERNELS);
      continue;
    }
    if (!seen[k]++) distinct++;
  }
  return distinct;
}

static void compile_for(int arch, const char *define) {
  char *src = stage_source();
  const char *extra[] = {define};
  CudaCompileOptions o = {arch, "stage0.cu", cache_dir, define ? extra : NULL, define ? 1 : 0};
  CudaBinary b;
  char *err = NULL;
  bool ok = cuda_nvrtc_compile(src, &o, &b, &err);
  if (!ok) fprintf(stderr, "%s\n", err);
  EXPECT(ok);
  if (ok) {
    EXPECT(b.size > 1000);
    EXPECT(memcmp(b.data,
                  "\x7f"
                  "ELF",
                  4) == 0);
    EXPECT(!b.cache_hit);
    for (int k = 0; k < NKERNELS; k++) {
      if (!cuda_cubin_has_symbol(&b, kernel_names[k]))
        fprintf(stderr, "missing %s\n", kernel_names[k]);
      EXPECT(cuda_cubin_has_symbol(&b, kernel_names[k]));
    }
    EXPECT(cuda_cubin_has_symbol(&b, "stage0_fused_bias_gelu"));
    EXPECT(!cuda_cubin_has_symbol(&b, "pkc_no_such_kernel"));
    EXPECT_EQ_INT(count_pkc_kernels(&b), NKERNELS);

    /* The same source and options again: from the cache, the same bytes. */
    CudaBinary b2;
    char *err2 = NULL;
    EXPECT(cuda_nvrtc_compile(src, &o, &b2, &err2));
    EXPECT(b2.cache_hit);
    EXPECT(b2.size == b.size && memcmp(b2.data, b.data, b.size) == 0);
    EXPECT_STREQ(b2.key, b.key);
    cuda_binary_free(&b2);
    free(err2);
  }
  cuda_binary_free(&b);
  free(err);
  free(src);
}

static void test_kernels_compile_sm90(void) { compile_for(90, NULL); }
/* sm_80 with the head size fixed, as the code generator will compile a GPT-2 stage. */
static void test_kernels_compile_sm80(void) { compile_for(80, "-DPKC_ATT_HS=64"); }

static const char tiny_src[] = "extern \"C\" __global__ void k(float *x) { x[0] = 1.0f; }\n";

static void test_cache_key_covers_options(void) {
  CudaCompileOptions o = {90, "tiny.cu", cache_dir, NULL, 0};
  const char *extra[] = {"-DPKC_SOMETHING=1"};
  CudaCompileOptions o2 = {90, "tiny.cu", cache_dir, extra, 1};
  CudaCompileOptions o3 = {80, "tiny.cu", cache_dir, NULL, 0};
  CudaBinary a, b, c2, d;
  char *err = NULL;
  EXPECT(cuda_nvrtc_compile(tiny_src, &o, &a, &err));
  EXPECT(cuda_nvrtc_compile(tiny_src, &o2, &b, &err));
  EXPECT(cuda_nvrtc_compile(tiny_src, &o3, &c2, &err));
  EXPECT(!b.cache_hit && !c2.cache_hit);
  EXPECT(strcmp(a.key, b.key) != 0 && strcmp(a.key, c2.key) != 0);
  /* A different source misses too. */
  EXPECT(cuda_nvrtc_compile("extern \"C\" __global__ void k(float *x) { x[0] = 2.0f; }\n", &o, &d,
                            &err));
  EXPECT(!d.cache_hit && strcmp(a.key, d.key) != 0);
  cuda_binary_free(&a), cuda_binary_free(&b), cuda_binary_free(&c2), cuda_binary_free(&d);
  free(err);
}

static void test_corrupt_cache_entry_is_recompiled(void) {
  CudaCompileOptions o = {90, "tiny.cu", cache_dir, NULL, 0};
  CudaBinary a, b, c2;
  char *err = NULL;
  EXPECT(cuda_nvrtc_compile(tiny_src, &o, &a, &err));
  char path[512];
  snprintf(path, sizeof path, "%s/cuda/%s.cubin", cache_dir, a.key);
  FILE *f = fopen(path, "wb"); /* truncated, not an ELF image */
  EXPECT(f != NULL);
  if (f) {
    fputs("garbage", f);
    fclose(f);
  }
  EXPECT(cuda_nvrtc_compile(tiny_src, &o, &b, &err));
  EXPECT(!b.cache_hit);
  EXPECT(b.size == a.size && memcmp(a.data, b.data, a.size) == 0);
  EXPECT(cuda_nvrtc_compile(tiny_src, &o, &c2, &err)); /* and the entry was repaired */
  EXPECT(c2.cache_hit);
  cuda_binary_free(&a), cuda_binary_free(&b), cuda_binary_free(&c2);
  free(err);
}

/* A damaged entry that still starts like an ELF image (issue 12, item 7): half of the
 * cubin, then one flipped byte in the middle. Each is recompiled, never handed out,
 * and the entry repaired. */
static void damage(const char *path, bool truncate_half) {
  FILE *f = fopen(path, "rb");
  EXPECT(f != NULL);
  if (!f) return;
  static unsigned char buf[1 << 20];
  size_t n = fread(buf, 1, sizeof buf, f);
  fclose(f);
  EXPECT(n > 64 && n < sizeof buf);
  if (truncate_half) n /= 2;
  else buf[n / 2] ^= 0xFF;
  f = fopen(path, "wb");
  EXPECT(f && fwrite(buf, 1, n, f) == n);
  if (f) fclose(f);
}

static void test_damaged_cache_entry_is_recompiled(void) {
  CudaCompileOptions o = {90, "tiny.cu", cache_dir, NULL, 0};
  CudaBinary a, b, c2;
  char *err = NULL;
  EXPECT(cuda_nvrtc_compile(tiny_src, &o, &a, &err));
  char path[512];
  snprintf(path, sizeof path, "%s/cuda/%s.cubin", cache_dir, a.key);
  for (int k = 0; k < 2; k++) {
    damage(path, k == 0);
    EXPECT(cuda_nvrtc_compile(tiny_src, &o, &b, &err));
    EXPECT(!b.cache_hit);
    EXPECT(b.size == a.size && memcmp(a.data, b.data, a.size) == 0);
    EXPECT(cuda_nvrtc_compile(tiny_src, &o, &c2, &err));
    EXPECT(c2.cache_hit);
    EXPECT(c2.size == a.size && memcmp(a.data, c2.data, a.size) == 0);
    cuda_binary_free(&b), cuda_binary_free(&c2);
  }
  cuda_binary_free(&a);
  free(err);
}

/* A dead process's temporary cubin, idle for 20 minutes, goes when the next entry is
 * written; a fresh one (its writer may be on another host) and a live pid's stay. */
static void test_stale_temporaries_removed(void) {
  pid_t dead = fork();
  if (dead == 0) _exit(0);
  waitpid(dead, NULL, 0);
  char cdir[512], stale[600], fresh[600], live[600];
  snprintf(cdir, sizeof cdir, "%s/cuda", cache_dir);
  mkdir(cdir, 0700); /* (a cuda/ that others may write is not used: issue 24) */
  const char *key = "0123456789abcdef0123456789abcdef";
  snprintf(stale, sizeof stale, "%s/%s.cubin.tmp.%ld.1", cdir, key, (long)dead);
  snprintf(fresh, sizeof fresh, "%s/%s.cubin.tmp.%ld.2", cdir, key, (long)dead);
  snprintf(live, sizeof live, "%s/%s.cubin.tmp.%ld.1", cdir, key, (long)getppid());
  const char *files[] = {stale, fresh, live};
  for (int i = 0; i < 3; i++) {
    FILE *f = fopen(files[i], "wb");
    EXPECT(f != NULL);
    if (f) fclose(f);
  }
  struct timespec old[2] = {{time(NULL) - 1200, 0}, {time(NULL) - 1200, 0}};
  EXPECT(utimensat(AT_FDCWD, stale, old, 0) == 0);
  EXPECT(utimensat(AT_FDCWD, live, old, 0) == 0);
  CudaCompileOptions o = {90, "stale.cu", cache_dir, NULL, 0};
  CudaBinary b;
  char *err = NULL;
  EXPECT(cuda_nvrtc_compile("extern \"C\" __global__ void stale_k(void) {}\n", &o, &b, &err));
  EXPECT(!b.cache_hit);
  struct stat st;
  EXPECT(stat(stale, &st) != 0);
  EXPECT(stat(fresh, &st) == 0 && stat(live, &st) == 0);
  cuda_binary_free(&b);
  free(err);
}

/* The caches trust only their owner (issue 24, item 2; the stage cache's rule,
 * runtime/io/cache_dir.c): a cache directory that group and others can write (k = 0),
 * or whose cuda/ they can (k = 1), is not used. An entry planted there under the
 * right key, with a valid seal (another program's cubin), is never handed out,
 * nothing is written there, and the compile goes to a private directory. */
static void copy_file(const char *from, const char *to) {
  static unsigned char buf[1 << 20];
  FILE *f = fopen(from, "rb"), *g = fopen(to, "wb");
  size_t n = f ? fread(buf, 1, sizeof buf, f) : 0;
  EXPECT(f && g && n > 0 && fwrite(buf, 1, n, g) == n);
  if (f) fclose(f);
  if (g) fclose(g);
}

static void test_untrusted_cache_not_used(void) {
  CudaCompileOptions good = {90, "tiny.cu", cache_dir, NULL, 0};
  CudaBinary a, p, b;
  char *err = NULL;
  EXPECT(cuda_nvrtc_compile(tiny_src, &good, &a, &err));
  /* the planted entry: another program's sealed cubin under tiny.cu's key */
  EXPECT(cuda_nvrtc_compile("extern \"C\" __global__ void planted(float *x) { x[1] = 3.0f; }\n", &good, &p, &err));
  for (int k = 0; k < 2; k++) {
    char bad[600], sub[700], entry[800], planted[800];
    snprintf(bad, sizeof bad, "%s/untrusted%d", cache_dir, k);
    snprintf(sub, sizeof sub, "%s/cuda", bad);
    EXPECT(mkdir(bad, 0700) == 0 && mkdir(sub, 0700) == 0 && chmod(k == 0 ? bad : sub, 0777) == 0);
    snprintf(entry, sizeof entry, "%s/cuda/%s.cubin", cache_dir, p.key);
    snprintf(planted, sizeof planted, "%s/%s.cubin", sub, a.key);
    copy_file(entry, planted);
    CudaCompileOptions o = {90, "tiny.cu", bad, NULL, 0};
    EXPECT(cuda_nvrtc_compile(tiny_src, &o, &b, &err)); /* (k = 1: the private directory's hit) */
    EXPECT(b.size == a.size && memcmp(a.data, b.data, a.size) == 0);
    cuda_binary_free(&b);
    int n = 0;
    DIR *d = opendir(sub);
    for (struct dirent *e; d && (e = readdir(d)) != NULL;) n += e->d_name[0] != '.';
    if (d) closedir(d);
    EXPECT(n == 1); /* the planted entry only */
  }
  cuda_binary_free(&a), cuda_binary_free(&p);
  free(err);
}

static void test_cache_disabled(void) {
  CudaCompileOptions o = {90, "tiny.cu", "", NULL, 0};
  CudaBinary a, b;
  char *err = NULL;
  EXPECT(cuda_nvrtc_compile(tiny_src, &o, &a, &err));
  EXPECT(cuda_nvrtc_compile(tiny_src, &o, &b, &err));
  EXPECT(!a.cache_hit && !b.cache_hit);
  cuda_binary_free(&a), cuda_binary_free(&b);
  free(err);
}

/* A user-visible compile error: NVRTC's log, naming the program and the line. */
static void test_broken_source_names_line(void) {
  const char *src = "extern \"C\" __global__ void ok(float *x) { x[0] = 1.0f; }\n"
                    "\n"
                    "extern \"C\" __global__ void bad(float *x) { x[0] = undeclared_thing; }\n";
  CudaCompileOptions o = {90, "broken.cu", cache_dir, NULL, 0};
  CudaBinary b;
  char *err = NULL;
  EXPECT(!cuda_nvrtc_compile(src, &o, &b, &err));
  EXPECT(err != NULL);
  if (err) {
    EXPECT(strstr(err, "broken.cu(3)") != NULL);
    EXPECT(strstr(err, "undeclared_thing") != NULL);
    EXPECT(strstr(err, "sm_90") != NULL);
  }
  EXPECT(b.data == NULL && b.size == 0);
  free(err);
}

static void test_bad_arch(void) {
  CudaCompileOptions o = {0, "tiny.cu", cache_dir, NULL, 0};
  CudaBinary b;
  char *err = NULL;
  EXPECT(!cuda_nvrtc_compile(tiny_src, &o, &b, &err));
  EXPECT(err && strstr(err, "bad architecture 0"));
  free(err);
}

static void test_version(void) {
  int major = 0, minor = 0;
  char err[256];
  EXPECT(cuda_nvrtc_version(&major, &minor, err, sizeof err));
  EXPECT(major >= 11);
}

static void rm_rf(const char *dir) {
  char cmd[600];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
}

/* No argument: everything. "sm90", "sm80", "misc": one part (CTest runs the three
 * in parallel: each full compile takes a few CPU seconds). */
int main(int argc, char **argv) {
  const char *part = argc > 1 ? argv[1] : "all";
  bool all = !strcmp(part, "all");
  if (!all && strcmp(part, "sm90") && strcmp(part, "sm80") && strcmp(part, "misc")) {
    fprintf(stderr, "usage: test_cuda_nvrtc [sm90|sm80|misc]\n");
    return 2;
  }
  if (!mkdtemp(cache_dir)) {
    perror("mkdtemp");
    return 1;
  }
  if (all || !strcmp(part, "sm90")) RUN(test_kernels_compile_sm90);
  if (all || !strcmp(part, "sm80")) RUN(test_kernels_compile_sm80);
  if (all || !strcmp(part, "misc")) {
    RUN(test_version);
    RUN(test_cache_key_covers_options);
    RUN(test_corrupt_cache_entry_is_recompiled);
    RUN(test_damaged_cache_entry_is_recompiled);
    RUN(test_stale_temporaries_removed);
    RUN(test_cache_disabled);
    RUN(test_untrusted_cache_not_used);
    RUN(test_broken_source_names_line);
    RUN(test_bad_arch);
  }
  rm_rf(cache_dir);
  return TEST_REPORT();
}
