/* tests/cudagen/test_cudagen_plans.c — the CUDA programs of every golden plan.
 *
 * usage: test_cudagen_plans PD2BWC lists|nvrtc90|nvrtc80     (run from the source root)
 *
 * For each case of tests/plans/cases.txt, pd2bwc compiles the plan (its partition,
 * microbatch size, stageN.c and, with its default --backend both, kernels.cu,
 * stageN.cu and stageN.launch.json). PART says what is checked (CTest runs the parts
 * in parallel):
 *   lists     the test loads the same model through the front end and passes and
 *             generates every stage's stageN.cu and launch list with
 *             codegen_cuda_source for the plan's regions and microbatch size: they
 *             (and kernels.cu) must be the files pd2bwc wrote, the launch list is
 *             well-formed against its two modules and blocks, its GEMMs are
 *             exactly the GEMM calls of the stageN.c, and (GPT, Llama cases) every GEMM
 *             of this list and of the stage's bf16 list has 16-byte aligned
 *             operands and leading dimensions that are multiples of 8
 *             (cudagen_check.h);
 *   nvrtcNN   NVRTC compiles, for sm_NN (90: H100/H200, 80: A100), to a cubin with
 *             the runtime's options (cuda_nvrtc_compile, cache off), EVERY distinct
 *             stageN.cu and every distinct kernels.cu pd2bwc wrote for the cases
 *             (identical sources, by hash, once), and checks each cubin holds every
 *             kernel the launch lists name in that module — the library also every
 *             kernel of cuda_kernel_list.h, which the GPU trainer resolves itself.
 * The library is the same text for every plan with the same head size (a handful for
 * all cases), so the per-stage cost is the stage's own fused kernels; the sources
 * are shared out over forked workers, one per core (PD2BW_NVRTC_JOBS overrides).
 */
#include <cjson/cJSON.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "codegen/codegen.h"
#include "codegen/cgen_internal.h" /* cgen_code_only */
#include "cudagen_check.h"
#include "cudagen_util.h"
#include "frontend/frontend.h"
#include "passes/passes.h"
#include "kernels/cuda_kernel_list.h"
#include "test.h"
#ifdef PD2BW_HAVE_CUDA
#include "runtime/cuda/cuda_backend.h"
#endif

static const char *pd2bwc;
static char tmpdir[] = "/tmp/pd2bw-test-cudagen-plans-XXXXXX";

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

typedef struct Case {
  char name[128];
  char args[1024];
} Case;

static int read_cases(Case *cs, int max) {
  FILE *f = fopen("tests/plans/cases.txt", "r");
  EXPECT(f != NULL);
  if (!f) return 0;
  char line[2048];
  int n = 0;
  while (fgets(line, sizeof line, f) && n < max) {
    char *bar = strchr(line, '|');
    if (line[0] == '#' || !bar) continue;
    *bar = 0;
    char *nm = line, *ar = bar + 1;
    while (*nm == ' ') nm++;
    char *e = nm + strlen(nm);
    while (e > nm && (e[-1] == ' ' || e[-1] == '\t')) *--e = 0;
    while (*ar == ' ') ar++;
    e = ar + strlen(ar);
    while (e > ar && (e[-1] == '\n' || e[-1] == ' ')) *--e = 0;
    snprintf(cs[n].name, sizeof cs[n].name, "%.127s", nm); /* bounded: -Wformat-truncation at -O0 */
    snprintf(cs[n].args, sizeof cs[n].args, "%.1023s", ar);
    n++;
  }
  fclose(f);
  return n;
}

/* Runs pd2bwc for case c into tmpdir/NAME.plan; its plan.json parsed, or NULL. */
static cJSON *make_plan(const Case *c, char *out, size_t outlen) {
  char cmd[2048];
  snprintf(out, outlen, "%s/%s.plan", tmpdir, c->name);
  snprintf(cmd, sizeof cmd, "%s %s -q -o %s >/dev/null", pd2bwc, c->args, out);
  int rc = system(cmd);
  EXPECT(rc == 0);
  if (rc != 0) {
    fprintf(stderr, "  %s: pd2bwc failed: %s\n", c->name, cmd);
    return NULL;
  }
  char path[800];
  snprintf(path, sizeof path, "%s/plan.json", out);
  char *pj = cg_read_all(path);
  cJSON *plan = pj ? cJSON_Parse(pj) : NULL;
  free(pj);
  EXPECT(plan != NULL);
  return plan;
}

static void remove_plan(const char *out) {
  char cmd[800];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", out);
  EXPECT(system(cmd) == 0);
}

/* ---- lists: the written files against an in-process generation ------------------------ */

static void lists_case(const Case *c) {
  char out[700], path[800];
  cJSON *plan = make_plan(c, out, sizeof out);
  if (!plan) return;
  int64_t b = (int64_t)cJSON_GetObjectItem(cJSON_GetObjectItem(plan, "config"), "microbatch_size")->valuedouble;

  /* The model and its -D overrides: the first word, then "-D name=value" pairs. */
  char args[1024];
  snprintf(args, sizeof args, "%s", c->args);
  const char *over[64];
  int nover = 0;
  char *model = strtok(args, " ");
  for (char *w = strtok(NULL, " "); w; w = strtok(NULL, " "))
    if (strcmp(w, "-D") == 0 && nover < 64) over[nover++] = strtok(NULL, " ");
  Arena *a = arena_create();
  Diag d;
  diag_init(&d, stderr);
  Graph *g = frontend_load_model(a, &d, model, over, nover);
  EXPECT(g != NULL);
  PassOptions po = {.print_after = NULL, .print_to = stdout, .verify = true};
  if (g) EXPECT(passes_run(g, &d, &po));
  char *lib = g ? codegen_cuda_library_source(g) : NULL;
  snprintf(path, sizeof path, "%s/%s", out, CODEGEN_CUDA_LIBRARY);
  char *lib_written = cg_read_all(path);
  EXPECT(lib && lib_written && strcmp(lib, lib_written) == 0);
  const cJSON *stages = cJSON_GetObjectItem(plan, "stages");
  int ns = cJSON_GetArraySize(stages), checked = 0, gemms = 0;
  for (int i = 0; g && i < ns; i++) {
    const cJSON *st = cJSON_GetArrayItem(stages, i);
    int r0 = (int)cJSON_GetObjectItem(st, "first_segment")->valuedouble;
    int r1 = (int)cJSON_GetObjectItem(st, "last_segment")->valuedouble - 1;
    const cJSON *prog = cJSON_GetObjectItem(st, "program");
    EXPECT(r0 >= 0 && r1 < g->nregions && r0 <= r1);
    if (!(r0 >= 0 && r1 < g->nregions && r0 <= r1)) continue;
    EXPECT_STREQ(g->regions[r0].name, cJSON_GetStringValue(cJSON_GetObjectItem(prog, "first_region")));
    StageLayout *L = layout_stage(g, r0, r1, b);
    cJSON *list = NULL;
    char *src = codegen_cuda_source(g, L, i, &(CodegenCudaOptions){.fuse = true, .gemm = GEMM_TF32}, &list);
    char what[300];
    snprintf(what, sizeof what, "%s stage%d.cu", c->name, i);
    /* the .cu the stage runs: its own or one it shares, the same code but comments */
    const cJSON *cu = cJSON_GetObjectItem(prog, "cuda");
    snprintf(path, sizeof path, "%s/%s", out, cJSON_GetStringValue(cJSON_GetObjectItem(cu, "source")));
    char *written = cg_read_all(path), *wcode = written ? cgen_code_only(written) : NULL, *code = cgen_code_only(src);
    if (!wcode || strcmp(wcode, code) != 0) fprintf(stderr, "  %s: not the code of the file pd2bwc wrote\n", what);
    EXPECT(wcode && strcmp(wcode, code) == 0);
    free(written), free(wcode), free(code);
    int bad = check_launch_list(list, lib, src);
    if (bad) fprintf(stderr, "  %s: %d launch-list problems\n", what, bad);
    EXPECT_EQ_INT(bad, 0);
    /* the C program the stage runs: its own stage<i>.c or one it shares */
    snprintf(path, sizeof path, "%s/%s", out, cJSON_GetStringValue(cJSON_GetObjectItem(prog, "source")));
    char *csrc = cg_read_all(path);
    EXPECT(csrc != NULL);
    int ng = 0;
    if (csrc) {
      int diff = check_gemms_match_cpu(list, csrc, &ng);
      if (diff) fprintf(stderr, "  %s: GEMMs differ from stage%d.c\n", what, i);
      EXPECT_EQ_INT(diff, 0);
    }
    free(csrc);
    /* cuBLAS's aligned kernels for every GEMM, the tf32 list's and the bf16 list's
     * (operands staged in cuda_scratch), in the GPT cases (gpt.model, tinygpt.model):
     * there the vocabulary (50257) is the only width that is not a multiple of 8, and
     * the layout pads the logits' rows; and the Llama cases (llama.model,
     * untied and -D tied=1: q, k, v, o, gate, up, down and the head, bf16 list included). Not yet BERT's, whose LM head adds a bias
     * (add and its gradient do not take a row stride), nor mlp.model's, whose weights
     * are 10 wide (parameters keep their shape; only a padded staging copy would do). */
    if (strstr(c->args, "gpt.model") || strstr(c->args, "models/llama")) {
      EXPECT_EQ_INT(check_gemm_alignment(list, what), 0);
      cJSON *list16 = NULL;
      free(codegen_cuda_source(g, L, i, &(CodegenCudaOptions){.fuse = true, .gemm = GEMM_BF16}, &list16));
      snprintf(what, sizeof what, "%s stage%d bf16", c->name, i);
      EXPECT_EQ_INT(check_gemm_alignment(list16, what), 0);
      cJSON_Delete(list16);
    }
    gemms += ng;
    checked++;
    free(src);
    cJSON_Delete(list);
    layout_destroy(L);
  }
  printf("  %s: %d stages, %d GEMMs agree with the CPU programs\n", c->name, checked, gemms);
  EXPECT(checked == ns && ns > 0);
  free(lib);
  free(lib_written);
  if (g) graph_destroy(g);
  arena_destroy(a);
  cJSON_Delete(plan);
  remove_plan(out);
}

/* ---- nvrtcNN: every distinct module pd2bwc wrote ------------------------------------- */

/* One distinct source and the kernels that must be in its cubin. */
typedef struct Job {
  char hash[17];
  char what[200]; /* the first case/file that had it */
  char *src;
  bool library;
  cJSON *need; /* array of names */
} Job;

static Job jobs[1024];
static int njobs;

static Job *job_for(const char *src, bool library, const char *what) {
  char h[17];
  codegen_hash_hex(src, strlen(src), h);
  for (int i = 0; i < njobs; i++)
    if (strcmp(jobs[i].hash, h) == 0) return &jobs[i];
  PD_CHECK(njobs < (int)(sizeof jobs / sizeof jobs[0]), "(more distinct sources than the test holds)");
  Job *j = &jobs[njobs++];
  memcpy(j->hash, h, 17);
  snprintf(j->what, sizeof j->what, "%s", what);
  j->src = pd_strdup(src);
  j->library = library;
  j->need = cJSON_CreateArray();
  return j;
}

static void need(Job *j, const char *name) {
  const cJSON *k;
  cJSON_ArrayForEach(k, j->need) if (strcmp(k->valuestring, name) == 0) return;
  cJSON_AddItemToArray(j->need, cJSON_CreateString(name));
}

/* Reads the plan's modules and adds them (and what their cubins must hold) to jobs. */
static void collect_case(const Case *c) {
  char out[700], path[800], what[300];
  cJSON *plan = make_plan(c, out, sizeof out);
  if (!plan) return;
  int ns = cJSON_GetArraySize(cJSON_GetObjectItem(plan, "stages"));
  EXPECT(ns > 0);
  for (int i = 0; i < ns; i++) {
    const cJSON *cu = cJSON_GetObjectItem(cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(plan, "stages"), i),
                                                             "program"),
                                          "cuda");
    snprintf(path, sizeof path, "%s/%s", out, cJSON_GetStringValue(cJSON_GetObjectItem(cu, "launch_list")));
    char *lt = cg_read_all(path);
    cJSON *list = lt ? cJSON_Parse(lt) : NULL;
    free(lt);
    EXPECT(list != NULL);
    if (!list) continue;
    const char *sname = cJSON_GetStringValue(cJSON_GetObjectItem(list, "source"));
    const char *lname = cJSON_GetStringValue(cJSON_GetObjectItem(cJSON_GetObjectItem(list, "library"), "source"));
    EXPECT(sname && lname);
    snprintf(path, sizeof path, "%s/%s", out, sname ? sname : "?");
    char *src = cg_read_all(path);
    snprintf(path, sizeof path, "%s/%s", out, lname ? lname : "?");
    char *lib = cg_read_all(path);
    EXPECT(src && lib);
    if (src && lib) {
      snprintf(what, sizeof what, "%.120s %.60s", c->name, sname);
      Job *js = job_for(src, false, what);
      snprintf(what, sizeof what, "%.120s %.60s", c->name, lname);
      Job *jl = job_for(lib, true, what);
      EXPECT(!js->library && jl->library);
      CG_FOR_EACH_LAUNCH(en, list) {
        const char *k = cJSON_GetStringValue(cJSON_GetObjectItem(en, "kernel"));
        const char *m = cJSON_GetStringValue(cJSON_GetObjectItem(en, "module"));
        if (!k) continue; /* a GEMM */
        EXPECT(m && (strcmp(m, "library") == 0 || strcmp(m, "stage") == 0));
        need(m && strcmp(m, "library") == 0 ? jl : js, k);
      }
    }
    free(src);
    free(lib);
    cJSON_Delete(list);
  }
  cJSON_Delete(plan);
  remove_plan(out);
}

#ifdef PD2BW_HAVE_CUDA
/* Compiles job j for sm_arch; the number of problems (each printed). */
static int compile_job(const Job *j, int arch, double *secs) {
  CudaCompileOptions co = {arch, j->library ? CODEGEN_CUDA_LIBRARY : "stage.cu", "", NULL, 0}; /* no cache */
  CudaBinary bin;
  char *err = NULL;
  double t0 = now_s();
  bool ok = cuda_nvrtc_compile(j->src, &co, &bin, &err);
  *secs = now_s() - t0;
  int bad = 0;
  if (!ok) {
    fprintf(stderr, "  %s: %s\n", j->what, err ? err : "?");
    bad++;
  } else {
    const cJSON *k;
    int n = 0;
    cJSON_ArrayForEach(k, j->need) {
      if (!cuda_cubin_has_symbol(&bin, k->valuestring)) {
        fprintf(stderr, "  %s: sm_%d cubin lacks %s\n", j->what, arch, k->valuestring);
        bad++;
      }
      n++;
    }
    if (j->library) {
#define LIB_HAS(k, kind)                                                                                           \
  if (!cuda_cubin_has_symbol(&bin, #k)) {                                                                          \
    fprintf(stderr, "  %s: sm_%d cubin lacks library kernel %s\n", j->what, arch, #k);                             \
    bad++;                                                                                                         \
  }
      PKC_KERNEL_LIST(LIB_HAS)
#undef LIB_HAS
    }
    printf("  %s: sm_%d, %zu-byte cubin, %d kernels launched from it, NVRTC %.1f s\n", j->what, arch, bin.size, n,
           *secs);
    cuda_binary_free(&bin);
  }
  free(err);
  return bad;
}
#endif

/* Larger sources first (the libraries), so the workers finish together. */
static int by_size_desc(const void *a, const void *b) {
  size_t x = strlen(((const Job *)a)->src), y = strlen(((const Job *)b)->src);
  return x < y ? 1 : x > y ? -1 : 0;
}

static int ncases;
static Case cases[128];
static int arch;

static void test_cases_read(void) { EXPECT(ncases > 10); }

static void test_lists(void) {
  for (int i = 0; i < ncases; i++) lists_case(&cases[i]);
}

static void test_nvrtc_every_module(void) {
  for (int i = 0; i < ncases; i++) collect_case(&cases[i]);
  int nlib = 0;
  for (int i = 0; i < njobs; i++) nlib += jobs[i].library;
  /* several head sizes; most stages differ, but equal programs are one module (the
   * Llama 1B shape's middle stages with a tied or untied head: 56 modules, 60 cases) */
  EXPECT(nlib >= 2 && njobs - nlib > ncases / 2);
#ifndef PD2BW_HAVE_CUDA
  fprintf(stderr, "  built without the CUDA toolkit: no NVRTC\n");
  EXPECT(false);
#else
  qsort(jobs, (size_t)njobs, sizeof jobs[0], by_size_desc);
  long nproc = sysconf(_SC_NPROCESSORS_ONLN);
  int nw = getenv("PD2BW_NVRTC_JOBS") ? atoi(getenv("PD2BW_NVRTC_JOBS")) : (int)(nproc > 0 ? nproc : 1);
  if (nw < 1) nw = 1;
  if (nw > 16) nw = 16;
  fflush(stdout);
  fflush(stderr);
  double t0 = now_s();
  struct rusage ru0, ru1;
  getrusage(RUSAGE_CHILDREN, &ru0);
  pid_t pid[16];
  for (int w = 0; w < nw; w++) {
    pid[w] = fork();
    EXPECT(pid[w] >= 0);
    if (pid[w] == 0) { /* worker w: jobs w, w + nw, ...; exit status: problems (capped) */
      setvbuf(stdout, NULL, _IOLBF, 0); /* whole lines: the workers share the output */
      setvbuf(stderr, NULL, _IOLBF, 0);
      int bad = 0, n = 0;
      double secs = 0;
      for (int i = w; i < njobs; i += nw, n++) {
        double s;
        bad += compile_job(&jobs[i], arch, &s);
        secs += s;
      }
      printf("  worker %d: %d sources, NVRTC %.1f s\n", w, n, secs);
      fflush(stdout);
      _exit(bad > 100 ? 100 : bad);
    }
  }
  int bad = 0;
  for (int w = 0; w < nw; w++) {
    int st = 0;
    if (pid[w] > 0 && waitpid(pid[w], &st, 0) == pid[w] && WIFEXITED(st)) bad += WEXITSTATUS(st);
    else bad++;
  }
  getrusage(RUSAGE_CHILDREN, &ru1);
  double cpu = (double)(ru1.ru_utime.tv_sec - ru0.ru_utime.tv_sec) + 1e-6 * (double)(ru1.ru_utime.tv_usec - ru0.ru_utime.tv_usec) +
               (double)(ru1.ru_stime.tv_sec - ru0.ru_stime.tv_sec) + 1e-6 * (double)(ru1.ru_stime.tv_usec - ru0.ru_stime.tv_usec);
  printf("  sm_%d: %d distinct stage sources and %d distinct libraries compiled, %d workers: %.1f s CPU, %.1f s wall\n",
         arch, njobs - nlib, nlib, nw, cpu, now_s() - t0);
  EXPECT_EQ_INT(bad, 0);
#endif
  for (int i = 0; i < njobs; i++) {
    free(jobs[i].src);
    cJSON_Delete(jobs[i].need);
  }
}

int main(int argc, char **argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: %s PD2BWC lists|nvrtc90|nvrtc80\n", argv[0]);
    return 2;
  }
  pd2bwc = argv[1];
  const char *part = argv[2];
  bool lists = strcmp(part, "lists") == 0;
  arch = strcmp(part, "nvrtc90") == 0 ? 90 : strcmp(part, "nvrtc80") == 0 ? 80 : 0;
  if (!lists && !arch) {
    fprintf(stderr, "unknown part '%s'\n", part);
    return 2;
  }
  if (!mkdtemp(tmpdir)) {
    perror("mkdtemp");
    return 1;
  }
  ncases = read_cases(cases, 128);
  RUN(test_cases_read);
  if (lists) RUN(test_lists);
  else RUN(test_nvrtc_every_module);
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
  if (system(cmd) != 0) fprintf(stderr, "cannot remove %s\n", tmpdir);
  return TEST_REPORT();
}
