/* tests/cuda/test_cuda_sass.c — the attention kernels really run on tensor cores, and
 * the elementwise kernels really move 128 bits a memory instruction.
 *
 * NVRTC compiles the kernel library (pd_cuda_kernels_src) as the code generator does
 * for a GPT-2 model (PKC_ATT_HS=64, PKC_ATT_T=1024) for sm_80 and sm_90; cuobjdump -sass disassembles
 * the cubin, and every tensor-core kernel's SASS must hold HMMA (mma.sync), LDSM
 * (ldmatrix) and LDGSTS (cp.async). A helper that fell back to scalar code, or a kernel
 * that stopped using it, fails here. Every elementwise kernel with a 128-bit fast path
 * (cuda_kernels.cuh: pkc_map1, pkc_map2, the casts, dropout; cuda_adamw_multi.cuh: the
 * multi-tensor AdamW; the ordered sum; cuda_kernels_optim.cuh: the weight prediction) must hold LDG.E.128 and
 * STG.E.128 (pkc_fill_f32, which reads nothing, only the store). Needs the toolkit's cuobjdump (configure-time
 * PD2BW_CUOBJDUMP, or the environment's PD2BW_CUOBJDUMP): without it the test is
 * skipped (exit 77), never passed.
 */
#define _GNU_SOURCE /* memmem */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../test.h"
#include "pkc_helpers_src.h"
#include "pkc_kernels_src.h"
#include "runtime/cuda/cuda_backend.h"

#ifndef PD2BW_CUOBJDUMP
#define PD2BW_CUOBJDUMP ""
#endif

static const char *cuobjdump(void) {
  const char *e = getenv("PD2BW_CUOBJDUMP");
  if (e && *e) return e;
  return PD2BW_CUOBJDUMP[0] && access(PD2BW_CUOBJDUMP, X_OK) == 0 ? PD2BW_CUOBJDUMP : NULL;
}

/* cuobjdump -sass of the cubin at path, as one string (NULL on failure). */
static char *sass_of(const char *tool, const char *path) {
  int fd[2];
  if (pipe(fd) != 0) return NULL;
  pid_t pid = fork();
  if (pid == 0) {
    /* cuobjdump runs nvdisasm, which a toolkit keeps beside it: put its folder first */
    const char *slash = strrchr(tool, '/'), *old = getenv("PATH");
    if (slash) {
      size_t n = (size_t)(slash - tool);
      char *p = malloc(n + strlen(old ? old : "") + 2);
      memcpy(p, tool, n);
      p[n] = ':';
      strcpy(p + n + 1, old ? old : "");
      setenv("PATH", p, 1);
    }
    dup2(fd[1], 1);
    close(fd[0]);
    close(fd[1]);
    execl(tool, "cuobjdump", "-sass", path, (char *)NULL);
    _exit(127);
  }
  close(fd[1]);
  size_t cap = 1 << 20, n = 0;
  char *buf = malloc(cap);
  ssize_t r;
  while ((r = read(fd[0], buf + n, cap - n - 1)) > 0) {
    n += (size_t)r;
    if (cap - n < 4096) buf = realloc(buf, cap *= 2);
  }
  close(fd[0]);
  int st = 0;
  waitpid(pid, &st, 0);
  buf[n] = 0;
  if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
    free(buf);
    return NULL;
  }
  return buf;
}

/* Whether kernel's SASS (from its "Function : name" header to the next) holds op. */
static int kernel_has(const char *sass, const char *kernel, const char *op) {
  char head[160];
  snprintf(head, sizeof head, "Function : %s\n", kernel);
  const char *s = strstr(sass, head);
  if (!s) return -1;
  s += strlen(head);
  const char *end = strstr(s, "Function : ");
  const char *hit = strstr(s, op);
  return hit && (!end || hit < end);
}

static const char *tool;
static int arch;

/* NVRTC's cubin of src (the defines ndef of def) for this test's arch, disassembled:
 * the SASS as one string, NULL (with the failure EXPECTed) when either step fails. */
static char *compile_sass(const char *src, const char *name, const char **def, int ndef) {
  CudaCompileOptions o = {arch, name, "", def, ndef};
  CudaBinary b;
  char *err = NULL;
  bool ok = cuda_nvrtc_compile(src, &o, &b, &err);
  if (!ok) fprintf(stderr, "%s\n", err);
  EXPECT(ok);
  free(err);
  if (!ok) return NULL;
  char path[] = "/tmp/pd2bw-test-sass-XXXXXX";
  int fd = mkstemp(path);
  EXPECT(fd >= 0 && write(fd, b.data, b.size) == (ssize_t)b.size);
  close(fd);
  char *sass = sass_of(tool, path);
  unlink(path);
  cuda_binary_free(&b);
  EXPECT(sass != NULL);
  return sass;
}

static const char *const tensor_core_kernels[] = {
    "pkc_mma_check_bf16",           "pkc_flash_attention_fwd_bf16",         "pkc_flash_attention_bwd_dq_bf16",
    "pkc_flash_attention_bwd_dkv_bf16", "pkc_flash_attention_gqa_fwd_bf16", "pkc_flash_attention_gqa_bwd_dq_bf16",
    "pkc_flash_attention_gqa_bwd_dkv_bf16"};

/* The elementwise kernels with a 128-bit path (launch kinds PKC_ELEM4 / PKC_ELEM8, and
 * dropout's blocks of four). */
static const char *const vector_kernels[] = {
    "pkc_fill_f32",         "pkc_copy_f32",         "pkc_scale_inplace_f32", "pkc_axpy_f32",
    "pkc_cast_f32_to_bf16", "pkc_cast_bf16_to_f32", "pkc_add_fwd_f32",       "pkc_add_bias_fwd_f32",
    "pkc_mul_fwd_f32",      "pkc_mul_bwd_f32",      "pkc_scale_fwd_f32",     "pkc_gelu_fwd_f32",
    "pkc_gelu_bwd_f32",     "pkc_relu_fwd_f32",     "pkc_relu_bwd_f32",      "pkc_dropout_fwd_f32",
    "pkc_dropout_bwd_f32",  "pkc_adamw_multi_dev_f32", "pkc_sum_ordered_f32",  "pkc_predict_step_dev_f32"};

static void test_tensor_core_sass(void) {
  const char *def[] = {"-DPKC_ATT_HS=64", "-DPKC_ATT_T=1024"};
  char *sass = compile_sass(pd_cuda_kernels_src, "kernels.cu", def, 2);
  if (!sass) return;
  for (size_t k = 0; k < sizeof tensor_core_kernels / sizeof *tensor_core_kernels; k++) {
    static const char *const ops[] = {"HMMA.16816.F32.BF16", "LDSM", "LDGSTS"};
    for (int i = 0; i < 3; i++) {
      int has = kernel_has(sass, tensor_core_kernels[k], ops[i]);
      if (has != 1)
        fprintf(stderr, "sm_%d: %s: %s\n", arch, tensor_core_kernels[k],
                has < 0 ? "not in the SASS" : ops[i]);
      EXPECT_EQ_INT(has, 1);
    }
  }
  /* and the fp32 kernels stay scalar: the check can tell the two apart */
  EXPECT_EQ_INT(kernel_has(sass, "pkc_attention_fwd_f32", "HMMA"), 0);
  EXPECT_EQ_INT(kernel_has(sass, "pkc_attention_gqa_fwd_f32", "HMMA"), 0);
  for (size_t k = 0; k < sizeof vector_kernels / sizeof *vector_kernels; k++) {
    static const char *const ops[] = {"STG.E.128", "LDG.E.128"};
    int nops = strcmp(vector_kernels[k], "pkc_fill_f32") == 0 ? 1 : 2;
    for (int i = 0; i < nops; i++) {
      int has = kernel_has(sass, vector_kernels[k], ops[i]);
      if (has != 1)
        fprintf(stderr, "sm_%d: %s: %s\n", arch, vector_kernels[k],
                has < 0 ? "not in the SASS" : ops[i]);
      EXPECT_EQ_INT(has, 1);
    }
  }
  /* a kernel with no vector path has none: the check can tell the two apart */
  EXPECT_EQ_INT(kernel_has(sass, "pkc_positions_bwd_f32", "LDG.E.128"), 0);
  /* no local-memory load or store (a spill, or an array indexed at run time): the
   * ordered sum's sources, indexed by a loop of constant bound, live in registers, and
   * the classifier's one body keeps its store choice a constant. (The flash kernels
   * have a stack frame by design: dropout's keep test is a call, cuda_flash_common.cuh
   * pkc_flash_keep, on a path taken only with dropout.) */
  static const char *const register_kernels[] = {"pkc_sum_ordered_f32", "pkc_classifier_f32", "pkc_classifier_bf16"};
  for (size_t k = 0; k < sizeof register_kernels / sizeof *register_kernels; k++)
    for (int i = 0; i < 2; i++) {
      int has = kernel_has(sass, register_kernels[k], i ? "STL" : "LDL");
      if (has != 0) fprintf(stderr, "sm_%d: %s: %s\n", arch, register_kernels[k], i ? "STL" : "LDL");
      EXPECT_EQ_INT(has, 0);
    }
  free(sass);
}

/* The generated elementwise chains (codegen/cgen_cuda_fuse.c) take the 128-bit path
 * too: the golden GPT stage program (tests/golden/codegen/tinygpt.stage0.cu, argv[2],
 * with the helpers' text the golden file elides) compiled as the runtime compiles a stage; each fused kernel without a layernorm
 * (whose comment names none: those are row kernels) holds LDG.E.128 and STG.E.128,
 * and the row kernels none (the check can tell the two apart). */
static const char *stage_path;

static void test_fused_chain_sass(void) {
  FILE *f = fopen(stage_path, "rb");
  EXPECT(f != NULL);
  if (!f) return;
  /* the golden file elides the helpers' verbatim text: put it back in front */
  static char src[1 << 21];
  size_t h = strlen(pd_cuda_helpers_src);
  memcpy(src, pd_cuda_helpers_src, h);
  size_t n = h + fread(src + h, 1, sizeof src - 1 - h, f);
  fclose(f);
  src[n] = 0;
  char *sass = compile_sass(src, "stage0.cu", NULL, 0);
  if (!sass) return;
  int vec = 0, rows = 0;
  for (const char *c = strstr(src, "/* fused:"); c; c = strstr(c + 1, "/* fused:")) {
    const char *end = strstr(c, "*/"), *name = strstr(c, "void fused");
    if (!end || !name) break;
    char kernel[32];
    if (sscanf(name + 5, "%31[a-z0-9]", kernel) != 1) break;
    bool row = memmem(c, (size_t)(end - c), "layernorm", 9) != NULL;
    static const char *const ops[] = {"LDG.E.128", "STG.E.128"};
    for (int i = 0; i < 2; i++) {
      int has = kernel_has(sass, kernel, ops[i]);
      if (has != !row) fprintf(stderr, "sm_%d: %s (%s): %s %s\n", arch, kernel, row ? "row" : "elementwise", ops[i], has < 0 ? "not in the SASS" : has ? "present" : "missing");
      EXPECT_EQ_INT(has, !row);
    }
    row ? rows++ : vec++;
  }
  EXPECT(vec >= 2 && rows >= 2); /* the golden GPT has both kinds */
  free(sass);
}

/* argv[1]: the SM version (80 or 90; CTest runs one test per arch); argv[2]: the golden
 * stage program. */
int main(int argc, char **argv) {
  arch = argc > 1 ? atoi(argv[1]) : 0;
  stage_path = argc > 2 ? argv[2] : NULL;
  if (arch != 80 && arch != 90) {
    fprintf(stderr, "usage: test_cuda_sass 80|90\n");
    return 2;
  }
  tool = cuobjdump();
  if (!tool) {
    printf("test_cuda_sass: skipped: no cuobjdump (configure with -DPD2BW_CUOBJDUMP=PATH)\n");
    return 77;
  }
  RUN(test_tensor_core_sass);
  if (stage_path) RUN(test_fused_chain_sass);
  return TEST_REPORT();
}
