/* tests/cudagen/test_cudagen_plans.c — the CUDA programs of every golden plan.
 *
 * usage: test_cudagen_plans PD2BWC PART     (run from the source root)
 *
 * For each case of tests/plans/cases.txt, pd2bwc compiles the plan (its partition,
 * microbatch size and stageN.c files are the truth); the test loads the same model
 * through the front end and passes, and generates every stage's stageN.cu and
 * launch list with codegen_cuda_source for the plan's regions and microbatch size.
 * PART says what is checked (CTest runs the parts in parallel):
 *   lists     every stage of every case: the launch list is well-formed against its
 *             source and blocks, and its GEMMs are exactly the GEMM calls of the
 *             stageN.c pd2bwc wrote (cudagen_check.h);
 *   nvrtc90   NVRTC for sm_90 on a sample: both stages of the tiny GPT, the last
 *             (loss) stage of the MLP, the last stage of the first GPT case (head
 *             size 128, tied LM head, cross-entropy) and the first stage of the
 *             first BERT case (embeddings, head size 64);
 *   nvrtc80   NVRTC for sm_80: the tiny GPT's first stage and the BERT case's last.
 *   allNN:K:N every stage of every case (distinct sources once) for sm_NN, shard K of
 *             N of the cases: CI runs all shards of both architectures, so every
 *             generated stageN.cu of every golden plan is compiled by NVRTC.
 * Why a sample: every stage's source differs from every other's (its offsets are
 * literals), there are ~250 of them, and each costs NVRTC 3-8 s of one core here —
 * the pasted kernel library dominates, so what varies between stages (the fused
 * kernels, the head size) is covered by the sample's stage kinds: embedding, repeated
 * block, head and loss, with and without attention. Identical sources (the tiny GPT
 * under three schedules) are compiled once.
 * Each compiled cubin must hold every kernel its launch list names.
 */
#include <cjson/cJSON.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "codegen/codegen.h"
#include "cudagen_check.h"
#include "frontend/frontend.h"
#include "passes/passes.h"
#include "test.h"
#ifdef PD2BW_HAVE_CUDA
#include "runtime/cuda/cuda_backend.h"
#endif

static const char *pd2bwc;
static char tmpdir[] = "/tmp/pd2bw-test-cudagen-plans-XXXXXX";

static char *read_all(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *s = calloc((size_t)n + 1, 1);
  if (fread(s, 1, (size_t)n, f) != (size_t)n) n = 0;
  fclose(f);
  return s;
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
    snprintf(cs[n].name, sizeof cs[n].name, "%s", nm);
    snprintf(cs[n].args, sizeof cs[n].args, "%s", ar);
    n++;
  }
  fclose(f);
  return n;
}

/* The distinct sources compiled so far (by hash), per architecture. */
static char seen[1024][17];
static int nseen;

typedef struct Run {
  int arch;         /* 0: lists only */
  bool all_stages;  /* compile every distinct stage (else `pick` below) */
  bool first, middle, last;
} Run;

static void compile_stage(const char *src, const cJSON *list, int arch, const char *what) {
  char h[17];
  codegen_hash_hex(src, strlen(src), h);
  for (int i = 0; i < nseen; i++)
    if (strcmp(seen[i], h) == 0) return;
  if (nseen < (int)(sizeof seen / sizeof seen[0])) snprintf(seen[nseen++], 17, "%s", h);
#ifndef PD2BW_HAVE_CUDA
  (void)list, (void)arch, (void)what;
  fprintf(stderr, "  built without the CUDA toolkit: no NVRTC\n");
  EXPECT(false);
#else
  char cache[600];
  snprintf(cache, sizeof cache, "%s/cache", tmpdir);
  CudaCompileOptions co = {arch, what, cache, NULL, 0};
  CudaBinary bin;
  char *err = NULL;
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  bool ok = cuda_nvrtc_compile(src, &co, &bin, &err);
  clock_gettime(CLOCK_MONOTONIC, &t1);
  double secs = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
  if (!ok) fprintf(stderr, "  %s: %s\n", what, err ? err : "?");
  EXPECT(ok);
  if (ok) {
    const cJSON *k;
    cJSON_ArrayForEach(k, cJSON_GetObjectItem(list, "kernels")) {
      if (!cuda_cubin_has_symbol(&bin, k->valuestring)) fprintf(stderr, "  %s: cubin lacks %s\n", what, k->valuestring);
      EXPECT(cuda_cubin_has_symbol(&bin, k->valuestring));
    }
    printf("  %s: sm_%d, %zu-byte cubin, %d kernels, NVRTC %.1f s\n", what, arch, bin.size,
           cJSON_GetArraySize(cJSON_GetObjectItem(list, "kernels")), secs);
    cuda_binary_free(&bin);
  }
  free(err);
#endif
}

static void run_case(const Case *c, const Run *r) {
  char out[700], cmd[2048];
  snprintf(out, sizeof out, "%s/%s.plan", tmpdir, c->name);
  snprintf(cmd, sizeof cmd, "%s %s -q -o %s >/dev/null", pd2bwc, c->args, out);
  int rc = system(cmd);
  EXPECT(rc == 0);
  if (rc != 0) {
    fprintf(stderr, "  %s: pd2bwc failed: %s\n", c->name, cmd);
    return;
  }
  char path[800];
  snprintf(path, sizeof path, "%s/plan.json", out);
  char *pj = read_all(path);
  cJSON *plan = pj ? cJSON_Parse(pj) : NULL;
  free(pj);
  EXPECT(plan != NULL);
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
  const cJSON *stages = cJSON_GetObjectItem(plan, "stages");
  int ns = cJSON_GetArraySize(stages), checked = 0, gemms = 0;
  for (int i = 0; g && i < ns; i++) {
    bool pick = r->all_stages || (r->first && i == 0) || (r->middle && i == ns / 2) || (r->last && i == ns - 1);
    if (r->arch && !pick) continue;
    const cJSON *st = cJSON_GetArrayItem(stages, i);
    int r0 = (int)cJSON_GetObjectItem(st, "first_segment")->valuedouble;
    int r1 = (int)cJSON_GetObjectItem(st, "last_segment")->valuedouble - 1;
    const cJSON *prog = cJSON_GetObjectItem(st, "program");
    EXPECT(r0 >= 0 && r1 < g->nregions && r0 <= r1);
    if (!(r0 >= 0 && r1 < g->nregions && r0 <= r1)) continue;
    EXPECT_STREQ(g->regions[r0].name, cJSON_GetStringValue(cJSON_GetObjectItem(prog, "first_region")));
    StageLayout *L = layout_stage(g, r0, r1, b);
    cJSON *list = NULL;
    char *src = codegen_cuda_source(g, L, i, &(CodegenCudaOptions){.fuse = true}, &list);
    char what[300];
    snprintf(what, sizeof what, "%s stage%d.cu", c->name, i);
    if (r->arch) {
      compile_stage(src, list, r->arch, what);
    } else {
      int bad = check_launch_list(list, src);
      if (bad) fprintf(stderr, "  %s: %d launch-list problems\n", what, bad);
      EXPECT_EQ_INT(bad, 0);
      snprintf(path, sizeof path, "%s/stage%d.c", out, i);
      char *csrc = read_all(path);
      EXPECT(csrc != NULL);
      int ng = 0;
      if (csrc) {
        int diff = check_gemms_match_cpu(list, csrc, &ng);
        if (diff) fprintf(stderr, "  %s: GEMMs differ from stage%d.c\n", what, i);
        EXPECT_EQ_INT(diff, 0);
      }
      free(csrc);
      gemms += ng;
      checked++;
    }
    free(src);
    cJSON_Delete(list);
    layout_destroy(L);
  }
  if (!r->arch) {
    printf("  %s: %d stages, %d GEMMs agree with the CPU programs\n", c->name, checked, gemms);
    EXPECT(checked == ns && ns > 0);
  }
  if (g) graph_destroy(g);
  arena_destroy(a);
  cJSON_Delete(plan);
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", out);
  EXPECT(system(cmd) == 0);
}

/* RUN takes no arguments: the case and what to do with it. */
static const Case *cur_case;
static Run cur_run;
static void test_case(void) { run_case(cur_case, &cur_run); }
static int want_compiled;
static void test_sample_compiled(void) { EXPECT_EQ_INT(nseen, want_compiled); }
static int ncases;
static void test_cases_read(void) { EXPECT(ncases > 10); }

int main(int argc, char **argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: %s PD2BWC lists|nvrtc90|nvrtc80\n", argv[0]);
    return 2;
  }
  pd2bwc = argv[1];
  const char *part = argv[2];
  bool lists = strcmp(part, "lists") == 0, nv90 = strcmp(part, "nvrtc90") == 0;
  int all_arch = 0, shard = 0, nshards = 1;
  bool all = sscanf(part, "all%d:%d:%d", &all_arch, &shard, &nshards) == 3 && nshards > 0 &&
             shard >= 0 && shard < nshards && (all_arch == 80 || all_arch == 90);
  if (!lists && !nv90 && !all && strcmp(part, "nvrtc80") != 0) {
    fprintf(stderr, "unknown part '%s'\n", part);
    return 2;
  }
  if (!mkdtemp(tmpdir)) {
    perror("mkdtemp");
    return 1;
  }
  static Case cs[128];
  int n = ncases = read_cases(cs, 128);
  RUN(test_cases_read);
  bool gpt_done = false, bert_done = false;
  for (int i = 0; i < n; i++) {
    Run r = {0};
    if (all) {
      if (i % nshards != shard) continue;
      r.arch = all_arch;
      r.all_stages = true;
    } else if (!lists) {
      /* The sample (see the file comment); repeated sources are compiled once. */
      r.arch = nv90 ? 90 : 80;
      if (strncmp(cs[i].name, "tinygpt", 7) == 0) {
        r.all_stages = nv90;
        r.first = true;
      } else if (strncmp(cs[i].name, "mlp", 3) == 0 && nv90) {
        r.last = true;
      } else if (!gpt_done && strncmp(cs[i].name, "gpt", 3) == 0 && nv90) {
        r.last = true;
        gpt_done = true;
      } else if (!bert_done && strncmp(cs[i].name, "bert", 4) == 0) {
        r.first = nv90;
        r.last = !nv90;
        bert_done = true;
      } else {
        continue;
      }
    }
    cur_case = &cs[i];
    cur_run = r;
    RUN(test_case);
  }
  want_compiled = nv90 ? 5 : 2;
  if (!lists && !all) RUN(test_sample_compiled);
  if (all) printf("  %d distinct stage sources compiled for sm_%d\n", nseen, all_arch);
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
  if (system(cmd) != 0) fprintf(stderr, "cannot remove %s\n", tmpdir);
  return TEST_REPORT();
}
