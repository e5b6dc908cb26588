/* tests/cudaexec/test_cudaexec_lines.c — what pd2bwrun --backend cuda prints for a
 * one-stage plan, now that it runs as single-GPU pipeline mode on one rank
 * (runtime/cuda/pipe/cuda_pipe_main.c's one-stage words), on the emulated device:
 *   - a run with --save and --val-data (cx_run, not quiet): the GPU banner
 *     ("plan P (model M), microbatch b x m per step, GPU 0 (emulated)"), the summary
 *     scripts/gpu-check-lib.sh reads with ", saved PATH" in it and no separate "saved"
 *     line, the graphs line whose updates ("N as a graph, M launch by launch") add up
 *     to the steps, one "validation loss" line; with --trace (single-GPU mode's, now a
 *     one-stage plan's too) the trace file and its line;
 *   - that checkpoint resumed at --steps: "nothing to train" on stderr, no summary, the
 *     validation loss of the saved weights (the same figure);
 *   - cx_pipe_main's --bench-gemm figures (cx_main times them after the run):
 *     the model's MLP GEMM (M = b·T, N = 4·dim, K = dim) and the rate achieved.
 *
 *   test_cudaexec_lines PD2BWC   (in the source tree)
 */
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "emu_train.h"
#include "runtime/cuda/pipe/cuda_pipe.h"
#include "runtime/io/io.h"
#include "test.h"

static char tmp[64] = "/tmp/pd2bw-test-cudalines-XXXXXX";

/* cx_run (bench NULL) or cx_pipe_main with bench, its stdout and stderr read
 * back into out and errs (malloc'd); the status. */
static int run(const CxOptions *o, CxBench *bench, char **out, char **errs) {
  char dir[256], po[256], pe[256], ierr[IO_ERR_LEN];
  emu_path(dir, sizeof dir, "p1");
  emu_path(po, sizeof po, "stdout.txt");
  emu_path(pe, sizeof pe, "stderr.txt");
  fflush(stdout), fflush(stderr);
  int k1 = dup(1), k2 = dup(2);
  int f1 = open(po, O_WRONLY | O_CREAT | O_TRUNC, 0644), f2 = open(pe, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  int rc = -1;
  if (k1 >= 0 && k2 >= 0 && f1 >= 0 && f2 >= 0 && dup2(f1, 1) == 1 && dup2(f2, 2) == 2) {
    CudaDeviceOps ops = emu_device_ops(tmp, EMU_IN_ORDER);
    rc = bench ? cx_pipe_main("lines", dir, &ops, "emulated", o, bench)
               : cx_run("lines", dir, &ops, "emulated", o);
  }
  fflush(stdout), fflush(stderr);
  dup2(k1, 1), dup2(k2, 2);
  close(k1), close(k2), close(f1), close(f2);
  size_t n;
  *out = io_read_all(po, &n, ierr, sizeof ierr);
  *errs = io_read_all(pe, &n, ierr, sizeof ierr);
  printf("  status %d; stdout:\n%s  stderr:\n%s", rc, *out ? *out : "(none)\n", *errs ? *errs : "(none)\n");
  return rc;
}

/* The line of text starting with prefix (NULL: none); its count in *n. */
static const char *line_of(const char *text, const char *prefix, int *n) {
  const char *first = NULL;
  *n = 0;
  for (const char *l = text; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL)
    if (strncmp(l, prefix, strlen(prefix)) == 0) first = first ? first : l, ++*n;
  return first;
}

static void test_lines(void) {
  EXPECT(emu_train_files());
  EXPECT(emu_make_plan("p1", "--schedule 2bw"));
  char data[256], ck[256], banner[512], *out = NULL, *errs = NULL;
  emu_path(data, sizeof data, "train.bin");
  emu_path(ck, sizeof ck, "ck.safetensors");
  char tr[256], want[300];
  emu_path(tr, sizeof tr, "trace.json");
  CxOptions o = {.data_path = data, .steps = 3, .gemm = GEMM_PLAN, .save_path = ck, .val_path = data,
                       .eval_batches = 1, .trace_path = tr};
  EXPECT(run(&o, NULL, &out, &errs) == 0);
  int n;
  snprintf(banner, sizeof banner, "lines: plan %s/p1 (model cxgpt), microbatch 2 x %d per step, GPU 0 (emulated)\n",
           tmp, EMU_MB);
  const char *l = line_of(out, banner, &n);
  EXPECT(l == out && n == 1);
  long long steps = 0, upd_graph = -1, upd_eager = -1;
  double loss, ms, tok, tf, gib, val = 0, val2 = -1;
  char tail[300] = "";
  l = line_of(out, "lines: 3 steps, final loss ", &n);
  EXPECT(n == 1 && sscanf(l, "lines: %lld steps, final loss %lf, %lf ms/step, %lf tok/s, %lf TFLOP/s achieved (arena "
                             "%lf GiB), saved %299s", &steps, &loss, &ms, &tok, &tf, &gib, tail) == 7);
  EXPECT(steps == 3 && ms > 0 && tok > 0 && strcmp(tail, ck) == 0);
  EXPECT(line_of(out, "lines: saved ", &n) == NULL); /* the summary says it */
  l = line_of(out, "lines: graphs: ", &n);
  EXPECT(n == 1 && l && strstr(l, "; updates: ") &&
         sscanf(strstr(l, "; updates: "), "; updates: %lld as a graph, %lld launch by launch", &upd_graph,
                &upd_eager) == 2);
  EXPECT(upd_graph + upd_eager == 3 && upd_graph > 0);
  l = line_of(out, "lines: validation loss ", &n);
  EXPECT(n == 1 && sscanf(l, "lines: validation loss %lf", &val) == 1);
  snprintf(want, sizeof want, "lines: trace %s\n", tr);
  EXPECT(line_of(out, want, &n) != NULL && n == 1);
  cJSON *trace = emu_read_json(tr);
  EXPECT(cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(trace, "traceEvents")) > 3 * 2 * 2);
  cJSON_Delete(trace);
  free(out), free(errs);
  /* resumed at --steps: nothing to train, the saved weights' validation loss */
  CxOptions r = {.data_path = data, .steps = 3, .gemm = GEMM_PLAN, .resume_path = ck, .val_path = data,
                       .eval_batches = 1};
  EXPECT(run(&r, NULL, &out, &errs) == 0);
  EXPECT(errs && strstr(errs, "nothing to train"));
  EXPECT(line_of(out, "lines: 3 steps", &n) == NULL && line_of(out, "lines: graphs", &n) == NULL);
  l = line_of(out, "lines: validation loss ", &n);
  EXPECT(n == 1 && sscanf(l, "lines: validation loss %lf", &val2) == 1 && val2 == val);
  free(out), free(errs);
  /* --bench-gemm's figures: the model's MLP GEMM, its shape from the plan */
  CxBench b = {.M = 0};
  CxOptions q = {.data_path = data, .steps = 2, .quiet = true, .gemm = GEMM_PLAN};
  EXPECT(run(&q, &b, &out, &errs) == 0);
  free(out), free(errs);
  char dir[256], err[RT_ERR_LEN];
  emu_path(dir, sizeof dir, "p1");
  PipePlan *p = pipe_plan_load(dir, err, sizeof err);
  EXPECT(p != NULL);
  int64_t dim = 0, T = 0;
  for (int k = 0; p && k < p->rt->stages[0].nparams; k++)
    if (strcmp(p->rt->stages[0].params[k].name, "wte") == 0) dim = p->rt->stages[0].params[k].shape[1];
  for (int k = 0; p && k < p->rt->stages[0].ninputs; k++)
    if (p->rt->stages[0].inputs[k].stream != STREAM_OTHER) T = p->rt->stages[0].inputs[k].shape[1];
  printf("  bench: M %d N %d K %d (dim %lld, T %lld), type %d, %.3g TFLOP/s\n", b.M, b.N, b.K, (long long)dim,
         (long long)T, (int)b.type, b.tflops);
  EXPECT(p && dim > 0 && b.M == p->b * T && b.N == 4 * dim && b.K == dim && b.tflops > 0);
  pipe_plan_free(p);
}

int main(int argc, char **argv) {
  if (!emu_test_begin(argc, argv, false, "usage: test_cudaexec_lines PD2BWC", tmp)) return 2;
  RUN(test_lines);
  emu_test_end();
  return TEST_REPORT();
}
