/* tests/cudaexec/test_cudapipe_timeout.c — pd2bwrun --backend cuda --timeout in
 * single-GPU pipeline mode, without a GPU: a rank that stops answering ends the run
 * within the given timeout, with the message naming it.
 *
 * The run goes through cx_pipe_main (pd2bwrun --backend cuda's path once the device
 * is open: cx_main hands it the parsed options, --timeout as timeout_s) on the
 * emulated device (emu_device.h), a gpipe plan with d = 2, m = 4, 3 steps, with
 * PD2BW_FAULT_INJECT=1:1:hang (runtime/exec/exec_interp.c: rank 1 stops answering at
 * batch 1) and timeout_s = 2. Rank 0's wait must time out after 2 s naming rank 1 and
 * what it was doing (runtime/transport/transport.c: "rank 1 stopped answering (no
 * progress for ..., in RECV_ACT 1) ... timed out after 2 s"; the stall detector's
 * record, kept through the same-GPU link's progress, cuda_link_local.c: its host side
 * is exec_transport_link's), status 1, and the whole run well within the default
 * timeout (60 s, under which the message would say 60 s and the run would last more
 * than a minute).
 * The run is a child process, as pd2bwrun is: the hanging rank is still asleep when
 * the others have failed, so the local transport's watchdog ends the process (status
 * 1) after naming the failure, as it does for the CPU pipeline (tests/pipeline/faults.sh).
 *
 *   test_cudapipe_timeout PD2BWC   (in the source tree)
 */
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "emu_train.h"
#include "runtime/cuda/pipe/cuda_pipe.h"
#include "test.h"

#define BOUND_S 45.0 /* under the default timeout; the plan's modules may be built first */

static char tmp[64] = "/tmp/pd2bw-test-cudapipe-timeout-XXXXXX";

/* cx_pipe_main in a child process (the local transport's watchdog ends the whole
 * process, _exit(1), when the hanging rank has not stopped 2 s after the others gave
 * up on it: pd2bwrun's exit), its stderr in a file; that text into msg (a sanitizer's
 * "==" lines left out). Returns the child's exit status (-1: no normal exit). */
static int run_main(const char *dir, const CxOptions *o, char *msg, size_t n) {
  char path[256];
  emu_path(path, sizeof path, "stderr.txt");
  fflush(stdout);
  fflush(stderr);
  pid_t pid = fork();
  if (pid == 0) {
    int rc = 1, fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd >= 0 && dup2(fd, 2) == 2) {
      CudaDeviceOps ops = emu_device_ops(tmp, EMU_LOWEST_FIRST);
      rc = cx_pipe_main("pd2bwrun", dir, &ops, "emulated", o, NULL);
    }
    fflush(stdout);
    fflush(stderr);
    _exit(rc);
  }
  int st = 0;
  if (pid < 0 || waitpid(pid, &st, 0) != pid) st = -1;
  msg[0] = 0;
  FILE *r = fopen(path, "r");
  char line[1024];
  size_t len = 0;
  while (r && fgets(line, sizeof line, r))
    if (strncmp(line, "==", 2) != 0 && len + strlen(line) < n) len += (size_t)snprintf(msg + len, n - len, "%s", line);
  if (r) fclose(r);
  return st != -1 && WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static void test_hang(void) {
  bool made = emu_pipe_make_plan("p2", "--precision fp32 --stages 2 --replicas 1 --microbatches 4 --schedule gpipe "
                                       "--recompute off");
  EXPECT(made);
  if (!made) return;
  char dir[256], data[256], msg[4096];
  emu_path(dir, sizeof dir, "p2");
  emu_path(data, sizeof data, "train.bin");
  CxOptions o = {.data_path = data, .steps = 3, .quiet = true, .gemm = GEMM_PLAN, .timeout_s = 2};
  setenv("PD2BW_FAULT_INJECT", "1:1:hang", 1);
  double t0 = emu_now_s();
  int rc = run_main(dir, &o, msg, sizeof msg);
  double dt = emu_now_s() - t0;
  unsetenv("PD2BW_FAULT_INJECT");
  printf("  --timeout 2, rank 1 stops answering at batch 1: status %d after %.1f s:\n%s", rc, dt, msg);
  EXPECT(rc == 1);
  EXPECT(dt < BOUND_S);
  /* what rank 1 was doing: the stall detector's record, through the link's progress */
  EXPECT(strstr(msg, "rank 1 stopped answering (no progress for") != NULL && strstr(msg, "s, in RECV_ACT 1)") != NULL);
  EXPECT(strstr(msg, "timed out after 2 s") != NULL);
}

int main(int argc, char **argv) {
  if (!emu_test_begin(argc, argv, false, "usage: test_cudapipe_timeout PD2BWC", tmp)) return 2;
  EXPECT(emu_pipe_files());
  RUN(test_hang);
  emu_test_end();
  return TEST_REPORT();
}
