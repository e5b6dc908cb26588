/* tests/cudaexec/test_cudaexec_interp.c — the plan interpreter (runtime/exec/) on the
 * CUDA device (runtime/cuda/exec/cuda_exec_device.c) against the one-stage GPU trainer
 * (cuda_exec_train.c), both on the emulated device (emu_device.h), issue 13 item 1(b):
 * the one-stage trainer as a d = w = 1 plan through the one interpreter, on a GPU.
 *
 * The same plan, data and EMU_STEPS steps through trainer_create with the CUDA device
 * (TrainerOptions.device) and through cx_trainer_*: every microbatch loss and every
 * step's gradient norm bit for bit (the same kernels in the same order: the passes'
 * launch lists, the two-phase sum of squares, the optimizer's _dev kernels), and the
 * final weights bit for bit (measured; the clip factor is computed as (1/m·clip)/norm
 * by the interpreter and 1/m·(clip/norm) by the GPU trainer, which round alike here);
 * the update graph captured once per weight-version order and launched after (graphs
 * on), the same bits with graphs off. 2bw (two weight versions, the delayed rule) and
 * gpipe. Host waits: from the second step on, every step stalls the host exactly
 * twice, as the GPU trainer's (test_cudaexec_emu): its batch's upload (which waits
 * for the previous update) and its norm; none between microbatches (the losses and
 * the id count come back late, with the norm).
 * Part "badids": token ids outside the vocabulary in one batch stop the interpreter's
 * run at the step the GPU trainer counts them in, with the message of every mode
 * (the count read late, with the norm: ExecDeviceOps.late_bad_ids).
 *
 *   test_cudaexec_interp PD2BWC [all|2bw|gpipe|badids]   (in the source tree)
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "emu_train.h"
#include "runtime/exec/exec.h"
#include "runtime/io/io.h"
#include "test.h"

static char tmp[64] = "/tmp/pd2bw-test-cudainterp-XXXXXX";

/* EMU_STEPS steps of `plan` on `data` through the interpreter on the CUDA device:
 * the host's stalls per step in stalls; the step a per-step check stopped (1-based,
 * its message in why) in *stopped, else 0. */
static bool run_on(const char *plan, const char *data, bool graphs, EmuRun *r, CxGraphStats *upd, int *stalls,
                   int *stopped, char *why, size_t whylen) {
  char dir[256], path[256], err[RT_ERR_LEN] = "", ierr[IO_ERR_LEN] = "";
  emu_path(dir, sizeof dir, plan);
  emu_path(path, sizeof path, data);
  *stopped = 0;
  RtPlan *p = rt_plan_load(dir, err, sizeof err);
  emu_device_set_graphs(graphs);
  CxDeviceOps ops = emu_device_ops(tmp, EMU_IN_ORDER);
  ExecDevice *dev = p ? cx_exec_device(&ops, p, 0, CX_GEMM_PLAN, p->b * p->m, err, sizeof err) : NULL;
  Trainer *t = dev ? trainer_create(p, &(TrainerOptions){.device = dev, .data_path = data}, err, sizeof err) : NULL;
  DataFile *df = t ? data_open(path, DATA_AUTO, 0, ierr, sizeof ierr) : NULL;
  DataLoader *dl = df ? data_loader_create(df, (int)(p->b * p->m), 8, false, 0, ierr, sizeof ierr) : NULL;
  bool ok = dl != NULL;
  if (!ok) printf("  FAIL: %s%s\n", err, ierr);
  EmuCounts before = emu_device_counts();
  for (int s = 0; ok && s < EMU_STEPS; s++) {
    StepStats ss;
    trainer_step(t, dl, &ss);
    EmuCounts now = emu_device_counts();
    stalls[s] = now.host_stalls - before.host_stalls;
    before = now;
    if (ss.error) {
      *stopped = s + 1;
      snprintf(why, whylen, "%s", ss.error);
      break;
    }
    for (int j = 0; ok && j < EMU_MB; j++) r->mb[s * EMU_MB + j] = ss.mb_loss[j];
    r->norm[s] = ss.grad_norm;
  }
  if (ok && !*stopped) {
    r->nw = p->stages[0].blocks[BUF_PARAMS] / 4;
    r->w = malloc((size_t)r->nw * 4);
    trainer_read_params(t, r->w);
    *upd = cx_exec_device_update_stats(dev);
  }
  data_loader_destroy(dl);
  if (df) data_close(df);
  trainer_destroy(t);
  exec_device_destroy(dev);
  rt_plan_free(p);
  emu_device_set_graphs(true);
  return ok;
}

static bool run_interp(const char *plan, bool graphs, EmuRun *r, CxGraphStats *upd, int *stalls) {
  int stopped;
  char why[RT_ERR_LEN];
  bool ok = run_on(plan, "train.bin", graphs, r, upd, stalls, &stopped, why, sizeof why);
  if (stopped) printf("  FAIL: step %d: %s\n", stopped, why);
  return ok && !stopped;
}

static void compare(const char *plan, const char *extra) {
  EXPECT(emu_make_plan(plan, extra));
  EmuRun gt = {0}, it = {0}, eager = {0};
  CxGraphStats upd = {0}, upd_eager = {0};
  int stalls[EMU_STEPS] = {0}, stalls_eager[EMU_STEPS] = {0};
  bool ok = emu_run_gpu(plan, &gt) && run_interp(plan, true, &it, &upd, stalls) &&
            run_interp(plan, false, &eager, &upd_eager, stalls_eager);
  EXPECT(ok);
  if (!ok) return;
  int nloss = 0, nnorm = 0;
  for (int i = 0; i < EMU_STEPS * EMU_MB; i++) nloss += gt.mb[i] != it.mb[i];
  for (int s = 0; s < EMU_STEPS; s++) nnorm += gt.norm[s] != it.norm[s];
  int64_t nw = 0;
  for (int64_t i = 0; i < gt.nw; i++) nw += memcmp(&gt.w[i], &it.w[i], 4) != 0;
  double wd = emu_weights_diff(&gt, &it);
  printf("  %s: %d of %d microbatch losses and %d of %d norms differ from the GPU trainer's; %lld of %lld weights "
         "(largest %.2e of the largest weight); updates: %lld captured, %lld launched, %lld eager\n",
         plan, nloss, EMU_STEPS * EMU_MB, nnorm, EMU_STEPS, (long long)nw, (long long)gt.nw, wd,
         (long long)upd.captured, (long long)upd.launches, (long long)upd.eager);
  printf("  %s: host stalls per step", plan);
  for (int s = 0; s < EMU_STEPS; s++) printf(" %d", stalls[s]);
  printf("\n");
  for (int s = 1; s < EMU_STEPS; s++) EXPECT(stalls[s] == 2 && stalls_eager[s] == 2);
  EXPECT(nloss == 0);
  EXPECT(nnorm == 0);
  EXPECT(nw == 0 && wd == 0);
  /* graphs: one per weight-version order, eager at first sight, then captured and launched */
  EXPECT(upd.captured >= 1 && upd.launches >= 1 && upd.launches + upd.eager == EMU_STEPS);
  EXPECT(upd_eager.captured == 0 && upd_eager.launches == 0);
  EXPECT(memcmp(it.w, eager.w, (size_t)it.nw * 4) == 0 && memcmp(it.mb, eager.mb, sizeof it.mb) == 0);
  free(gt.w);
  free(it.w);
  free(eager.w);
}

static void test_2bw(void) { compare("p2bw", "--schedule 2bw"); }
static void test_gpipe(void) { compare("pgpipe", "--schedule gpipe"); }

/* train.bin with tokens 64..67 (outside the vocabulary of 64) at offsets 40..43. */
static bool bad_tokens(void) {
  char src[256], dst[256];
  emu_path(src, sizeof src, "train.bin");
  emu_path(dst, sizeof dst, "bad.bin");
  FILE *in = fopen(src, "rb"), *out = fopen(dst, "wb");
  uint16_t tok;
  for (int i = 0; in && out && fread(&tok, 2, 1, in) == 1; i++) {
    if (i >= 40 && i < 44) tok = (uint16_t)(64 + i - 40);
    fwrite(&tok, 2, 1, out);
  }
  bool ok = in && out;
  if (in) fclose(in);
  if (out) ok = fclose(out) == 0 && ok;
  return ok;
}

static void test_bad_ids(void) {
  EXPECT(emu_make_plan("pgpipe", "--schedule gpipe"));
  EXPECT(bad_tokens());
  /* the GPU trainer's count per step, on the same data */
  char dir[256], path[256], err[RT_ERR_LEN] = "", ierr[IO_ERR_LEN] = "";
  emu_path(dir, sizeof dir, "pgpipe");
  emu_path(path, sizeof path, "bad.bin");
  RtPlan *p = rt_plan_load(dir, err, sizeof err);
  CxDeviceOps ops = emu_device_ops(tmp, EMU_IN_ORDER);
  CxTrainer *gt = p ? cx_trainer_create(p, &ops, NULL, err, sizeof err) : NULL;
  DataFile *df = gt ? data_open(path, DATA_AUTO, 0, ierr, sizeof ierr) : NULL;
  DataLoader *dl = df ? data_loader_create(df, (int)(p->b * p->m), 8, false, 0, ierr, sizeof ierr) : NULL;
  int first_bad = 0;
  for (int s = 0; dl && s < EMU_STEPS && !first_bad; s++) {
    StepStats ss;
    cx_trainer_step(gt, dl, &ss);
    if (ss.bad_ids) first_bad = s + 1;
  }
  data_loader_destroy(dl);
  if (df) data_close(df);
  cx_trainer_destroy(gt);
  rt_plan_free(p);
  EmuRun r = {0};
  CxGraphStats upd;
  int stalls[EMU_STEPS], stopped = 0;
  char why[RT_ERR_LEN] = "";
  EXPECT(run_on("pgpipe", "bad.bin", true, &r, &upd, stalls, &stopped, why, sizeof why));
  printf("  the GPU trainer counts bad ids first in step %d; the interpreter stopped at step %d: %s\n", first_bad,
         stopped, why);
  char want[128];
  snprintf(want, sizeof want, "token ids or targets outside the model's vocabulary in step %d", first_bad);
  EXPECT(first_bad > 0 && stopped == first_bad && strstr(why, want) && strstr(why, "bad.bin"));
  free(r.w);
}

int main(int argc, char **argv) {
  const char *part = emu_test_begin(argc, argv, true, "usage: test_cudaexec_interp PD2BWC [all|2bw|gpipe|badids]", tmp);
  if (!part) return 2;
  EXPECT(emu_train_files());
  if (emu_test_part(part, "2bw")) RUN(test_2bw);
  if (emu_test_part(part, "gpipe")) RUN(test_gpipe);
  if (emu_test_part(part, "badids")) RUN(test_bad_ids);
  emu_test_end();
  return TEST_REPORT();
}
