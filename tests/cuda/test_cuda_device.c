/* tests/cuda/test_cuda_device.c — the device backend fails clearly without a driver.
 *
 * Every scenario runs in a child process (the libraries are loaded once per process,
 * and the environment variable that picks them must be set before that): the child
 * tries the call and writes the message it got to a pipe; the parent checks the
 * exact wording a user sees. On a machine WITH a GPU the default-environment
 * scenario opens the device instead, and that is checked to work.
 */
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../test.h"
#include "runtime/cuda/cuda_backend.h"

#ifndef PD2BW_TEST_STUB_LIBCUDA
#define PD2BW_TEST_STUB_LIBCUDA ""
#endif

typedef enum Scenario {
  SC_DEVICE, /* cuda_dev_open(0): "" on success, else its message */
  SC_NVRTC,  /* compile a tiny kernel */
  SC_CUBLAS, /* cuda_cublas_available */
  SC_LT,     /* cuda_lt_available (cuBLASLt: GEMM epilogues) */
  SC_NCCL    /* nccl_available */
} Scenario;

/* Runs the scenario in a child with env_name=env_value (NULL: unchanged); returns
 * its message ("OK" when the call succeeded), or "CRASHED" when the child died. */
static void run_child(Scenario sc, const char *env_name, const char *env_value, char *out,
                      size_t outlen) {
  int fds[2];
  out[0] = 0;
  if (pipe(fds) != 0) {
    snprintf(out, outlen, "pipe failed");
    return;
  }
  fflush(stdout);
  fflush(stderr);
  pid_t pid = fork();
  if (pid == 0) {
    close(fds[0]);
    if (env_name) setenv(env_name, env_value, 1);
    char msg[1024] = "OK";
    char err[1024] = "";
    switch (sc) {
    case SC_DEVICE: {
      CudaDeviceOps *d = cuda_dev_open(0, err, sizeof err);
      if (!d)
        snprintf(msg, sizeof msg, "%s", err);
      else
        snprintf(msg, sizeof msg, "OK %s sm_%d", cuda_dev_name(d), cuda_dev_arch(d));
      cuda_dev_close(d);
      break;
    }
    case SC_NVRTC: {
      CudaCompileOptions o = {90, "t.cu", "", NULL, 0};
      CudaBinary b;
      char *e = NULL;
      if (!cuda_nvrtc_compile("extern \"C\" __global__ void k(void) {}\n", &o, &b, &e))
        snprintf(msg, sizeof msg, "%s", e);
      cuda_binary_free(&b);
      free(e);
      break;
    }
    case SC_CUBLAS:
      if (!cuda_cublas_available(err, sizeof err)) snprintf(msg, sizeof msg, "%s", err);
      break;
    case SC_LT:
      if (!cuda_lt_available(err, sizeof err)) snprintf(msg, sizeof msg, "%s", err);
      break;
    case SC_NCCL:
      if (!nccl_available(err, sizeof err)) snprintf(msg, sizeof msg, "%s", err);
      break;
    }
    if (write(fds[1], msg, strlen(msg) + 1) < 0) _exit(3);
    _exit(0);
  }
  close(fds[1]);
  size_t n = 0;
  ssize_t r;
  while (n + 1 < outlen && (r = read(fds[0], out + n, outlen - 1 - n)) > 0) n += (size_t)r;
  out[n] = 0;
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) snprintf(out, outlen, "CRASHED");
}

static int starts_with(const char *s, const char *p) { return strncmp(s, p, strlen(p)) == 0; }

/* The message a user sees on a machine without a driver. */
static void test_no_driver_message(void) {
  char msg[1024];
  run_child(SC_DEVICE, "PD2BW_LIBCUDA", "/nonexistent/libcuda.so.1", msg, sizeof msg);
  printf("no driver: %s\n", msg);
  EXPECT(starts_with(msg, "cuda backend: no CUDA driver found (/nonexistent/libcuda.so.1"));
  EXPECT(strstr(msg, "); use --backend cpu") != NULL);
}

/* This machine as it is: either a GPU works, or the same clear message (never a
 * crash). */
static void test_default_environment(void) {
  char msg[1024];
  run_child(SC_DEVICE, NULL, NULL, msg, sizeof msg);
  printf("default: %s\n", msg);
  if (starts_with(msg, "OK ")) {
    EXPECT(strstr(msg, "sm_") != NULL);
  } else {
    EXPECT(starts_with(msg, "cuda backend: no CUDA"));
    EXPECT(strstr(msg, "use --backend cpu") != NULL);
  }
}

/* The toolkit's stub libcuda: every driver symbol pd2bw uses must resolve (else the
 * message would say "too old"), and cuInit's refusal must be explained. */
static bool have_stub_driver(void) {
  return PD2BW_TEST_STUB_LIBCUDA[0] && access(PD2BW_TEST_STUB_LIBCUDA, R_OK) == 0;
}

static void test_stub_driver(void) {
  char msg[1024];
  run_child(SC_DEVICE, "PD2BW_LIBCUDA", PD2BW_TEST_STUB_LIBCUDA, msg, sizeof msg);
  printf("stub: %s\n", msg);
  EXPECT(starts_with(
      msg, "cuda backend: no CUDA driver found (libcuda.so.1 is the CUDA toolkit's stub"));
  EXPECT(strstr(msg, "CUDA_ERROR_STUB_LIBRARY") != NULL);
  EXPECT(strstr(msg, "use --backend cpu") != NULL);
}

static void test_no_nvrtc_message(void) {
  char msg[1024];
  run_child(SC_NVRTC, "PD2BW_LIBNVRTC", "/nonexistent/libnvrtc.so", msg, sizeof msg);
  printf("no nvrtc: %s\n", msg);
  EXPECT(starts_with(msg, "cannot compile CUDA code: NVRTC not found (/nonexistent/libnvrtc.so"));
}

/* cuBLAS, cuBLASLt and NCCL need no GPU to load: all their symbols must resolve here. */
static void test_cublas_and_nccl_load(void) {
  char msg[1024];
  run_child(SC_CUBLAS, NULL, NULL, msg, sizeof msg);
  printf("cublas: %s\n", msg);
  EXPECT_STREQ(msg, "OK");
  run_child(SC_NCCL, NULL, NULL, msg, sizeof msg);
  printf("nccl: %s\n", msg);
  EXPECT_STREQ(msg, "OK");
  run_child(SC_NCCL, "PD2BW_LIBNCCL", "/nonexistent/libnccl.so.2", msg, sizeof msg);
  EXPECT(starts_with(msg, "nccl transport: NCCL not found (/nonexistent/libnccl.so.2"));
  run_child(SC_CUBLAS, "PD2BW_LIBCUBLAS", "/nonexistent/libcublas.so", msg, sizeof msg);
  EXPECT(starts_with(msg, "cuda backend: cuBLAS not found (/nonexistent/libcublas.so"));
  run_child(SC_LT, NULL, NULL, msg, sizeof msg);
  printf("cublasLt: %s\n", msg);
  EXPECT_STREQ(msg, "OK");
  run_child(SC_LT, "PD2BW_LIBCUBLASLT", "/nonexistent/libcublasLt.so", msg, sizeof msg);
  EXPECT(starts_with(msg, "cuda backend: cuBLASLt not found (/nonexistent/libcublasLt.so"));
}

/* `test_cuda_device stub` runs the stub-driver check alone: a CTest skip (exit 77,
 * SKIP_RETURN_CODE in tests/cuda/CMakeLists.txt) where the toolkit has no stub
 * libcuda, so that a build without one shows the check as skipped, never as passed. */
int main(int argc, char **argv) {
  if (argc > 1 && strcmp(argv[1], "stub") == 0) {
    if (!have_stub_driver()) {
      printf("test_cuda_device stub: skipped: no stub libcuda in this CUDA toolkit (%s)\n",
             PD2BW_TEST_STUB_LIBCUDA[0] ? PD2BW_TEST_STUB_LIBCUDA : "not found at configure time");
      return 77;
    }
    RUN(test_stub_driver);
    return TEST_REPORT();
  }
  RUN(test_no_driver_message);
  RUN(test_default_environment);
  RUN(test_no_nvrtc_message);
  RUN(test_cublas_and_nccl_load);
  return TEST_REPORT();
}
