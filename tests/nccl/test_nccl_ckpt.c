/* tests/nccl/test_nccl_ckpt.c — checkpoints, --init and validation in multi-GPU mode
 * (cx_pipe_train_nccl: the CPU MPI pipeline's, runtime/pipeline/pipeline_run.c) under
 * mpirun -np 2, without GPUs: each rank one stage of a d = 2, w = 1 2bw plan (clip 1:
 * the pipeline norm; a tied wte: deferred tied steps) on its own emulated device,
 * tests/nccl/fake_nccl.c as libnccl (test_nccl_emu.c says what that checks and what
 * not). Rank 0 compares with the CPU pipeline (threads,
 * pipeline_run_local) on the same files:
 *
 *   resume  multi-GPU 3 steps + --save, then --resume to 6 == multi-GPU 6 straight ==
 *           the CPU pipeline resuming the same file;
 *   fromcpu the other direction: the CPU pipeline's step-3 checkpoint resumed in
 *           multi-GPU mode == the CPU pipeline's 6 straight;
 *   init    --init of a CPU checkpoint == the CPU pipeline with that --init (and it
 *           moved the losses: the file was read);
 *   eval    the validation loss on the same weights (a checkpoint resumed at --steps:
 *           nothing trains) == the CPU pipeline's; --eval-every 1 over 2 steps: each
 *           logged loss == the CPU pipeline's, and training is bit-identical with and
 *           without the evaluations;
 *   errors  through cx_pipe_nccl_main (pd2bwrun's path): a checkpoint of another
 *           model (every rank fails to read it), a checkpoint only rank 1 cannot
 *           read (its stage's tensors missing) and a --save rank 0 cannot write: every
 *           rank returns 1, rank 0 prints ONE "error:" line naming the file, the
 *           others print nothing, no --save file is left, the job goes on (no abort);
 *           a --save naming a FIFO: the same, refused by name, the FIFO kept.
 *
 *   mpirun -np 2 test_nccl_ckpt PD2BWC [all|resume|fromcpu|init|eval|errors]
 * PD2BW_LIBNCCL must name the fake library (CTest sets it). */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cudaexec/emu_train.h"
#include "nccl_emu_ops.h"
#include "runtime/cuda/pipe/cuda_pipe.h"
#include "test.h"

#define STEPS 6
#define HALF 3
/* test_cudaexec_ckpt's bounds (the emulated device against the CPU) */
#define LOSS_TOL 2e-5
#define WEIGHT_TOL 1e-4
#define EVAL_TOL 1e-5
#define INIT_WEIGHT_TOL 1e-3 /* test_cudaexec_ckpt.c says why --init's is wider */

/* emu_path's work directory: rank 0's, shared by both ranks for plans, data and
 * checkpoints; each rank's own (`own`) holds its emulated device's modules */
static char tmp[64] = "/tmp/pd2bw-test-ncclckpt-XXXXXX";
static char own[64];
static Transport *T;
static int rank;

static const char *PLAN_ARGS = "--precision fp32 -D clipv=1.0 --stages 2 --replicas 1 --microbatches 4 "
                               "--schedule 2bw --recompute off";

/* Largest relative difference of the microbatch losses of steps [from, to) (each
 * outcome indexed from its own first_step). */
static double loss_diff(const PipeOutcome *a, const PipeOutcome *b, int64_t from, int64_t to) {
  double worst = 0;
  for (int64_t s = from; s < to; s++)
    for (int64_t j = 0; j < a->mb_per_step; j++) {
      double x = a->mb_loss[(s - a->first_step) * a->mb_per_step + j];
      double y = b->mb_loss[(s - b->first_step) * b->mb_per_step + j];
      double d = fabs(x - y) / fmax(fabs(x), 1e-30);
      if (!(d <= worst)) worst = d;
    }
  return worst;
}

/* Largest |a - b| of the final weights, relative to each parameter's largest |a|. */
static double weight_diff(const PipeOutcome *a, const PipeOutcome *b) {
  double worst = 0;
  for (int k = 0; k < a->nparams; k++) {
    int q = -1;
    for (int j = 0; j < b->nparams; j++)
      if (strcmp(a->names[k], b->names[j]) == 0) q = j;
    if (q < 0 || b->numel[q] != a->numel[k]) return INFINITY;
    double scale = 0, d = 0;
    for (int64_t i = 0; i < a->numel[k]; i++) {
      scale = fmax(scale, fabs(a->weights[k][i]));
      d = fmax(d, fabs((double)a->weights[k][i] - (double)b->weights[q][i]));
    }
    worst = fmax(worst, d / (scale + 1e-30));
  }
  return worst;
}

/* Multi-GPU mode on every rank (collective); rank 0's out filled. */
static int multi(const PipePlan *p, CxOptions o, EmuOrder order, PipeOutcome *out) {
  char err[RT_ERR_LEN];
  CudaDeviceOps ops = nccl_emu_ops(own, order);
  o.quiet = true;
  o.gemm = GEMM_PLAN;
  double t0 = emu_now_s();
  int rc = cx_pipe_train_nccl(p, &ops, &o, T, out, err, sizeof err);
  if (rc) fprintf(stderr, "  rank %d: %s\n", rank, err);
  if (rank == 0) printf("  multi-GPU run, %lld steps: %.1f s\n", (long long)o.steps, emu_now_s() - t0);
  return rc;
}

/* The CPU pipeline (rank 0 only; the others wait at the barrier after it). */
static int cpu(const PipePlan *p, PipeOptions o, PipeOutcome *out) {
  char err[RT_ERR_LEN + TRANSPORT_ERR_LEN];
  o.quiet = true;
  o.threads = 1;
  double t0 = emu_now_s();
  int rc = pipeline_run_local(p, &o, out, err, sizeof err);
  if (rc) fprintf(stderr, "  CPU pipeline: %s\n", err);
  printf("  CPU pipeline run, %lld steps: %.1f s\n", (long long)o.steps, emu_now_s() - t0);
  return rc;
}

static void test_resume(void) {
  char data[256], ck[256];
  emu_path(data, sizeof data, "train.bin");
  emu_path(ck, sizeof ck, "multi3.safetensors");
  PipePlan *p = emu_pipe_load("p2bw", STEPS);
  EXPECT(p != NULL);
  if (!p) return;
  PipeOutcome half = {0}, full = {0}, rest = {0}, crest = {0}, cfull = {0};
  CxOptions o = {.data_path = data, .steps = HALF, .save_path = ck};
  EXPECT(multi(p, o, EMU_HIGHEST_FIRST, &half) == 0);
  o = (CxOptions){.data_path = data, .steps = STEPS};
  EXPECT(multi(p, o, EMU_LOWEST_FIRST, &full) == 0);
  o.resume_path = ck;
  EXPECT(multi(p, o, EMU_HIGHEST_FIRST, &rest) == 0);
  if (rank == 0) {
    EXPECT(access(ck, F_OK) == 0);
    PipeOptions po = {.data_path = data, .steps = STEPS, .resume_path = ck};
    EXPECT(cpu(p, po, &crest) == 0);
    po = (PipeOptions){.data_path = data, .steps = STEPS};
    EXPECT(cpu(p, po, &cfull) == 0);
  }
  if (rank == 0 && full.mb_loss && rest.mb_loss && crest.mb_loss && cfull.mb_loss) {
    EXPECT(rest.first_step == HALF && rest.steps == STEPS && crest.first_step == HALF);
    double d_self = loss_diff(&full, &rest, HALF, STEPS), w_self = weight_diff(&full, &rest);
    double d_cpu = loss_diff(&rest, &crest, HALF, STEPS), w_cpu = weight_diff(&rest, &crest);
    double d_full = loss_diff(&cfull, &full, 0, STEPS);
    printf("  multi-GPU 3 + --resume 3 vs 6 straight: losses %.2e, weights %.2e; vs the CPU pipeline resuming the "
           "same file: losses %.2e, weights %.2e; multi-GPU 6 straight vs the CPU pipeline: losses %.2e\n", d_self,
           w_self, d_cpu, w_cpu, d_full);
    EXPECT(d_self <= LOSS_TOL && w_self <= WEIGHT_TOL);
    EXPECT(d_cpu <= LOSS_TOL && w_cpu <= WEIGHT_TOL);
    EXPECT(d_full <= LOSS_TOL);
    /* it went on from step 3, not from the start: step 4 is not step 1 */
    EXPECT(fabs(rest.mb_loss[0] - full.mb_loss[0]) > 20 * LOSS_TOL * full.mb_loss[0]);
  }
  PipeOutcome *all[] = {&half, &full, &rest, &crest, &cfull};
  for (size_t i = 0; i < sizeof all / sizeof *all; i++) pipe_outcome_free(all[i]);
  pipe_plan_free(p);
}

/* The other direction: the CPU pipeline's step-3 checkpoint resumed in multi-GPU mode. */
static void test_fromcpu(void) {
  char data[256], cck[256];
  emu_path(data, sizeof data, "train.bin");
  emu_path(cck, sizeof cck, "cpu3.safetensors");
  PipePlan *p = emu_pipe_load("p2bw", STEPS);
  EXPECT(p != NULL);
  if (!p) return;
  PipeOutcome c3 = {0}, cfull = {0}, from_cpu = {0};
  if (rank == 0) {
    EXPECT(cpu(p, (PipeOptions){.data_path = data, .steps = HALF, .save_path = cck}, &c3) == 0);
    EXPECT(cpu(p, (PipeOptions){.data_path = data, .steps = STEPS}, &cfull) == 0);
  }
  EXPECT(nccl_test_barrier(T)); /* cpu3.safetensors is there */
  EXPECT(multi(p, (CxOptions){.data_path = data, .steps = STEPS, .resume_path = cck}, EMU_LOWEST_FIRST,
               &from_cpu) == 0);
  if (rank == 0 && cfull.mb_loss && from_cpu.mb_loss) {
    EXPECT(from_cpu.first_step == HALF);
    double d = loss_diff(&cfull, &from_cpu, HALF, STEPS), w = weight_diff(&cfull, &from_cpu);
    printf("  multi-GPU resuming the CPU pipeline's step-3 checkpoint vs CPU 6 straight: losses %.2e, weights "
           "%.2e\n", d, w);
    EXPECT(d <= LOSS_TOL && w <= WEIGHT_TOL);
    EXPECT(fabs(from_cpu.mb_loss[0] - cfull.mb_loss[0]) > 20 * LOSS_TOL * cfull.mb_loss[0]);
  }
  PipeOutcome *all[] = {&c3, &cfull, &from_cpu};
  for (size_t i = 0; i < sizeof all / sizeof *all; i++) pipe_outcome_free(all[i]);
  pipe_plan_free(p);
}

static void test_init(void) {
  char data[256], ck[256];
  emu_path(data, sizeof data, "train.bin");
  emu_path(ck, sizeof ck, "init2.safetensors");
  PipePlan *p = emu_pipe_load("p2bw", STEPS);
  EXPECT(p != NULL);
  if (!p) return;
  PipeOutcome c2 = {0}, ci = {0}, gi = {0}, g0 = {0};
  if (rank == 0) EXPECT(cpu(p, (PipeOptions){.data_path = data, .steps = 2, .save_path = ck}, &c2) == 0);
  EXPECT(nccl_test_barrier(T));
  EXPECT(multi(p, (CxOptions){.data_path = data, .steps = HALF, .init_path = ck}, EMU_HIGHEST_FIRST, &gi) == 0);
  EXPECT(multi(p, (CxOptions){.data_path = data, .steps = HALF}, EMU_LOWEST_FIRST, &g0) == 0);
  if (rank == 0) {
    EXPECT(cpu(p, (PipeOptions){.data_path = data, .steps = HALF, .init_path = ck}, &ci) == 0);
    if (ci.mb_loss && gi.mb_loss && g0.mb_loss) {
      double dl = loss_diff(&ci, &gi, 0, HALF), dw = weight_diff(&ci, &gi), moved = loss_diff(&g0, &gi, 0, 1);
      printf("  --init: multi-GPU vs CPU pipeline losses %.2e, weights %.2e; step 1 with and without --init %.2e "
             "apart\n", dl, dw, moved);
      EXPECT(dl <= LOSS_TOL);
      EXPECT(dw <= INIT_WEIGHT_TOL);
      EXPECT(moved > 20 * LOSS_TOL);
    }
  }
  PipeOutcome *all[] = {&c2, &ci, &gi, &g0};
  for (size_t i = 0; i < sizeof all / sizeof *all; i++) pipe_outcome_free(all[i]);
  pipe_plan_free(p);
}

static void test_eval(void) {
  char data[256], ck[256];
  emu_path(data, sizeof data, "train.bin");
  emu_path(ck, sizeof ck, "eval2.safetensors");
  PipePlan *p = emu_pipe_load("p2bw", STEPS);
  EXPECT(p != NULL);
  if (!p) return;
  PipeOutcome c2 = {0}, cv = {0}, gv = {0}, ce = {0}, ge = {0}, gn = {0};
  if (rank == 0) {
    EXPECT(cpu(p, (PipeOptions){.data_path = data, .steps = 2, .save_path = ck}, &c2) == 0);
    EXPECT(cpu(p, (PipeOptions){.data_path = data, .steps = 2, .resume_path = ck, .val_path = data,
                                .eval_batches = 2}, &cv) == 0);
    EXPECT(cpu(p, (PipeOptions){.data_path = data, .steps = 2, .val_path = data, .eval_every = 1,
                                .eval_batches = 2}, &ce) == 0);
  }
  EXPECT(nccl_test_barrier(T));
  /* the same weights: resumed at --steps 2, evaluated only */
  EXPECT(multi(p, (CxOptions){.data_path = data, .steps = 2, .resume_path = ck, .val_path = data,
                                    .eval_batches = 2}, EMU_HIGHEST_FIRST, &gv) == 0);
  EXPECT(multi(p, (CxOptions){.data_path = data, .steps = 2, .val_path = data, .eval_every = 1,
                                    .eval_batches = 2}, EMU_LOWEST_FIRST, &ge) == 0);
  EXPECT(multi(p, (CxOptions){.data_path = data, .steps = 2}, EMU_LOWEST_FIRST, &gn) == 0);
  if (rank == 0 && cv.mb_loss && gv.mb_loss && ce.mb_loss && ge.mb_loss && gn.mb_loss) {
    double d = fabs(cv.val_final - gv.val_final) / cv.val_final;
    printf("  validation on the same weights: CPU pipeline %.9f, multi-GPU %.9f (%.2e apart, bound %.0e)\n",
           cv.val_final, gv.val_final, d, EVAL_TOL);
    EXPECT(d <= EVAL_TOL);
    for (int s = 0; s < 2; s++) {
      printf("  step %d: val loss CPU pipeline %.9f, multi-GPU %.9f\n", s + 1, ce.val_loss[s], ge.val_loss[s]);
      EXPECT_NEAR(ce.val_loss[s], ge.val_loss[s], LOSS_TOL, 0);
    }
    EXPECT(fabs(ge.val_loss[0] - ge.val_loss[1]) > 20 * LOSS_TOL * ge.val_loss[0]); /* it trained */
    double same = loss_diff(&ge, &gn, 0, 2);
    printf("  multi-GPU training losses with and without the evaluations: %.2e apart\n", same);
    EXPECT(same == 0 && weight_diff(&ge, &gn) == 0);
  }
  PipeOutcome *all[] = {&c2, &cv, &gv, &ce, &ge, &gn};
  for (size_t i = 0; i < sizeof all / sizeof *all; i++) pipe_outcome_free(all[i]);
  pipe_plan_free(p);
}

/* cx_pipe_nccl_main (pd2bwrun's path) with this rank's stderr in a file; its text
 * into msg. */
static int run_main(const char *plan, CxOptions o, char *msg, size_t n) {
  char dir[256], path[256];
  emu_path(dir, sizeof dir, plan);
  snprintf(path, sizeof path, "%s/stderr%d.txt", tmp, rank);
  fflush(stderr);
  int fd = dup(2);
  FILE *f = freopen(path, "w", stderr);
  CudaDeviceOps ops = nccl_emu_ops(own, EMU_IN_ORDER);
  o.quiet = true;
  o.gemm = GEMM_PLAN;
  int rc = f ? cx_pipe_nccl_main("pd2bwrun", dir, &ops, "emulated", &o, T) : -1;
  fflush(stderr);
  dup2(fd, 2);
  close(fd);
  msg[0] = 0;
  FILE *r = fopen(path, "r");
  char line[1024];
  size_t len = 0;
  while (r && fgets(line, sizeof line, r)) /* a sanitizer's notices ("==pid==...") are not ours */
    if (strncmp(line, "==", 2) != 0 && len + strlen(line) < n) len += (size_t)snprintf(msg + len, n - len, "%s", line);
  if (r) fclose(r);
  printf("  rank %d: status %d: %s%s", rank, rc, msg, msg[0] ? "" : "(nothing)\n");
  return rc;
}

/* Every rank failed with status 1; rank 0 printed one error line containing `name`,
 * the others nothing; no file at `save`; the transport still works. */
static void expect_one_failure(int rc, const char *msg, const char *name, const char *save) {
  EXPECT(rc == 1);
  if (rank == 0) {
    EXPECT(strstr(msg, "pd2bwrun: error: ") == msg && strstr(msg, name) != NULL);
    EXPECT(strchr(msg, '\n') == msg + strlen(msg) - 1); /* one line */
  } else {
    EXPECT(msg[0] == 0);
  }
  EXPECT(access(save, F_OK) != 0);
  EXPECT(transport_status(T) == TRANSPORT_OK);
  EXPECT(nccl_test_barrier(T));
}

/* Copies checkpoint src to dst without the tensors of stage `stage` alone (those
 * only that stage's rank reads). */
static bool drop_stage(const PipePlan *p, int stage, const char *src, const char *dst) {
  char err[RT_ERR_LEN];
  SafeTensors *f = st_open(src, err, sizeof err);
  if (!f) {
    fprintf(stderr, "  %s\n", err);
    return false;
  }
  int n = 0;
  StEntry *e = pd_calloc(4 * 64, sizeof *e);
  float **bufs = pd_calloc(4 * 64, sizeof *bufs);
  for (int s = 0; s < p->d; s++)
    for (int k = 0; k < p->rt->stages[s].nparams; k++) {
      const RtParam *q = &p->rt->stages[s].params[k];
      bool elsewhere = false, seen = false;
      for (int t = 0; t < p->d; t++)
        for (int j = 0; t != stage && j < p->rt->stages[t].nparams; j++)
          elsewhere |= strcmp(p->rt->stages[t].params[j].name, q->name) == 0;
      for (int j = 0; j < n; j++) seen |= strstr(e[j].name, q->name) && strcmp(e[j].name, q->name) == 0;
      if (s == stage && !elsewhere) continue;
      if (seen) continue;
      static const char *pre[4] = {"", "opt.m.", "opt.v.", "prev."};
      for (int v = 0; v < 4 && n < 4 * 64; v++) {
        char *nm = pd_malloc(strlen(q->name) + 8);
        sprintf(nm, "%s%s", pre[v], q->name);
        const StTensor *x = st_find(f, nm);
        if (!x) {
          free(nm);
          continue;
        }
        bufs[n] = pd_malloc((size_t)q->bytes + 4);
        if (!st_read_f32(f, x, bufs[n], err, sizeof err)) fprintf(stderr, "  %s\n", err);
        e[n] = (StEntry){.name = nm, .dtype = ST_F32, .rank = q->rank, .data = bufs[n]};
        for (int d = 0; d < q->rank; d++) e[n].shape[d] = q->shape[d];
        n++;
      }
    }
  const char *meta[] = {"format", "pd2bw", "model", p->rt->model, "step", st_meta(f, "step"), "seed",
                        st_meta(f, "seed")};
  bool ok = st_write(dst, e, n, meta, 4, err, sizeof err);
  if (!ok) fprintf(stderr, "  %s\n", err);
  for (int j = 0; j < n; j++) {
    free((char *)e[j].name);
    free(bufs[j]);
  }
  free(e);
  free(bufs);
  st_close(f);
  return ok;
}

static void test_errors(void) {
  char data[256], good[256], other[256], part[256], out[256], msg[2048];
  emu_path(data, sizeof data, "train.bin");
  emu_path(good, sizeof good, "good1.safetensors");
  emu_path(other, sizeof other, "d8.safetensors");
  emu_path(part, sizeof part, "nostage1.safetensors");
  emu_path(out, sizeof out, "never.safetensors");
  PipePlan *p = emu_pipe_load("p2bw", STEPS);
  PipePlan *q = emu_pipe_load("pd8", STEPS);
  EXPECT(p != NULL && q != NULL);
  if (!p || !q) return;
  if (rank == 0) {
    PipeOutcome a = {0}, b = {0};
    EXPECT(cpu(p, (PipeOptions){.data_path = data, .steps = 1, .save_path = good}, &a) == 0);
    EXPECT(cpu(q, (PipeOptions){.data_path = data, .steps = 1, .save_path = other}, &b) == 0);
    EXPECT(drop_stage(p, 1, good, part));
    pipe_outcome_free(&a);
    pipe_outcome_free(&b);
  }
  EXPECT(nccl_test_barrier(T));
  /* another model's checkpoint: every rank fails to read it */
  int rc = run_main("p2bw", (CxOptions){.data_path = data, .steps = 2, .resume_path = other, .save_path = out},
                    msg, sizeof msg);
  expect_one_failure(rc, msg, "d8.safetensors", out);
  /* --init of it: the same */
  rc = run_main("p2bw", (CxOptions){.data_path = data, .steps = 2, .init_path = other, .save_path = out}, msg,
                sizeof msg);
  expect_one_failure(rc, msg, "d8.safetensors", out);
  /* only rank 1 (stage 1) misses its tensors: rank 0 says rank 1's message */
  rc = run_main("p2bw", (CxOptions){.data_path = data, .steps = 2, .resume_path = part, .save_path = out}, msg,
                sizeof msg);
  expect_one_failure(rc, msg, "nostage1.safetensors", out);
  /* a --save only rank 0 writes, into a directory that does not exist */
  emu_path(out, sizeof out, "nodir/x.safetensors");
  rc = run_main("p2bw", (CxOptions){.data_path = data, .steps = 1, .save_path = out}, msg, sizeof msg);
  expect_one_failure(rc, msg, "nodir/x.safetensors", out);
  /* a --save naming a FIFO: rank 0 refuses it before anything is read or trained,
   * every rank stops with its one message, and the FIFO stays (runtime/io/io.h) */
  emu_path(out, sizeof out, "out.fifo");
  if (rank == 0) EXPECT(mkfifo(out, 0644) == 0);
  rc = run_main("p2bw", (CxOptions){.data_path = data, .steps = 1, .save_path = out}, msg, sizeof msg);
  EXPECT(rc == 1);
  if (rank == 0) {
    EXPECT(strstr(msg, "pd2bwrun: error: --save ") == msg && strstr(msg, "FIFO") != NULL);
    struct stat fst;
    EXPECT(lstat(out, &fst) == 0 && S_ISFIFO(fst.st_mode));
  } else {
    EXPECT(msg[0] == 0);
  }
  EXPECT(transport_status(T) == TRANSPORT_OK);
  EXPECT(nccl_test_barrier(T));
  /* and a good run through the same path still works after all that */
  emu_path(out, sizeof out, "ok.safetensors");
  rc = run_main("p2bw", (CxOptions){.data_path = data, .steps = 2, .resume_path = good, .save_path = out}, msg,
                sizeof msg);
  EXPECT(rc == 0 && msg[0] == 0);
  if (rank == 0) EXPECT(access(out, F_OK) == 0);
  pipe_plan_free(p);
  pipe_plan_free(q);
}

int main(int argc, char **argv) {
  const char *which = nccl_test_begin(&argc, &argv, "test_nccl_ckpt", 120, 2, "usage: mpirun -np 2 test_nccl_ckpt "
                                      "PD2BWC [all|resume|fromcpu|init|eval|errors]", tmp, &T);
  if (!which) return 2;
  rank = transport_rank(T);
  memcpy(own, tmp, sizeof own);
  if (rank == 0) {
    EXPECT(emu_pipe_files());
    EXPECT(emu_pipe_make_plan("p2bw", PLAN_ARGS));
    char args[512];
    snprintf(args, sizeof args, "%s -D dim=8", PLAN_ARGS);
    EXPECT(emu_pipe_make_plan("pd8", args));
    EXPECT(transport_send(T, 1, 31001, tmp, sizeof tmp, "the work directory") == TRANSPORT_OK);
  } else {
    EXPECT(transport_recv(T, 0, 31001, tmp, sizeof tmp, "the work directory") == TRANSPORT_OK);
  }
  if (emu_test_part(which, "resume")) RUN(test_resume);
  if (emu_test_part(which, "fromcpu")) RUN(test_fromcpu);
  if (emu_test_part(which, "init")) RUN(test_init);
  if (emu_test_part(which, "eval")) RUN(test_eval);
  if (emu_test_part(which, "errors")) RUN(test_errors);
  EXPECT(nccl_test_barrier(T)); /* rank 0 removes the shared directory, each rank its own */
  memcpy(tmp, own, sizeof tmp);
  emu_test_end();
  int rc = TEST_REPORT();
  transport_destroy(T);
  return rc;
}
