/* tests/cudaexec/test_cudaexec_badids.c — token ids outside the vocabulary on the GPU
 * (issue 13; the interpreter's per-step check, runtime/exec/exec_interp.c). The one-stage
 * trainer with the emulated GPU as its device (pd2bwrun --backend cuda's) counts them on
 * the device and reports them late, with the step's norm (ExecDeviceOps.late_bad_ids):
 * the run must stop at the step the CPU trainer stops at, with the same message (the
 * file and the step; the count is the step's passes' on the GPU, the first offending
 * pass's on the CPU). A token file with ids 64..67 (the vocabulary is 64) in its
 * second batch.
 *
 *   test_cudaexec_badids PD2BWC   (in the source tree)
 */
#include <stdlib.h>
#include <string.h>

#include "emu_train.h"
#include "runtime/exec/exec.h"
#include "runtime/io/io.h"
#include "test.h"

static char tmp[64] = "/tmp/pd2bw-test-cudabadids-XXXXXX";

/* train.bin with tokens 64..67 at offsets 40..43, as bad.bin. */
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

/* Up to EMU_STEPS steps on bad.bin, on the GPU or the CPU; the step a per-step check
 * stopped (1-based, 0: none) and its message in why. */
static int stop_step(bool gpu, char *why, size_t n) {
  char dir[256], path[256], err[RT_ERR_LEN] = "", ierr[IO_ERR_LEN] = "";
  emu_path(dir, sizeof dir, "pgpipe");
  emu_path(path, sizeof path, "bad.bin");
  RtPlan *p = rt_plan_load(dir, err, sizeof err);
  CudaDeviceOps ops = {0};
  ExecDevice *dev = NULL;
  if (p && gpu) {
    ops = emu_device_ops(tmp, EMU_IN_ORDER);
    dev = cx_exec_device(&ops, p, 0, GEMM_PLAN, p->b * p->m, err, sizeof err);
  }
  Trainer *t = p && (!gpu || dev) ? trainer_create(p, &(TrainerOptions){.device = dev, .data_path = "bad.bin"}, err,
                                                   sizeof err)
                                  : NULL;
  DataFile *df = t ? data_open(path, DATA_AUTO, 0, ierr, sizeof ierr) : NULL;
  DataLoader *dl = df ? data_loader_create(df, (int)(p->b * p->m), 8, false, 0, ierr, sizeof ierr) : NULL;
  if (!dl) printf("  FAIL: %s%s\n", err, ierr);
  int stopped = 0;
  why[0] = 0;
  for (int s = 0; dl && s < EMU_STEPS && !stopped; s++) {
    StepStats ss;
    trainer_step(t, dl, &ss);
    if (ss.error) {
      stopped = s + 1;
      snprintf(why, n, "%s", ss.error);
    }
  }
  data_loader_destroy(dl);
  if (df) data_close(df);
  trainer_destroy(t);
  exec_device_destroy(dev);
  rt_plan_free(p);
  return stopped;
}

static void test_bad_ids(void) {
  EXPECT(emu_make_plan("pgpipe", "--schedule gpipe"));
  EXPECT(bad_tokens());
  char gpu[RT_ERR_LEN], cpu[RT_ERR_LEN];
  int g = stop_step(true, gpu, sizeof gpu), c = stop_step(false, cpu, sizeof cpu);
  printf("  emulated GPU: stopped at step %d: %s\n  CPU:          stopped at step %d: %s\n", g, gpu, c, cpu);
  EXPECT(c > 0 && g == c);
  /* the count differs: the CPU stops at the first pass that saw them, the GPU's device
   * counts the step's passes (read with the norm) */
  char want[128];
  snprintf(want, sizeof want, " token ids or targets outside the model's vocabulary in step %d", c);
  EXPECT(strncmp(gpu, "bad.bin: ", 9) == 0 && strstr(gpu, want) && strncmp(cpu, "bad.bin: ", 9) == 0 && strstr(cpu, want));
}

int main(int argc, char **argv) {
  const char *part = emu_test_begin(argc, argv, false, "usage: test_cudaexec_badids PD2BWC", tmp);
  if (!part) return 2;
  EXPECT(emu_train_files());
  RUN(test_bad_ids);
  emu_test_end();
  return TEST_REPORT();
}
