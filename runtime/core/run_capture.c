/* runtime/core/run_capture.c — running a program from an argument vector, output captured.
 *
 * No shell ever sees a path (issue 12): a plan directory, $PD2BW_CACHE or $HOME may
 * hold quotes, `$(...)`, ';' or newlines, and each reaches the program as one argv
 * element, unexpanded. posix_spawnp searches PATH for argv[0] as the shell did. */
#define _GNU_SOURCE /* pipe2: the pipe is close-on-exec from birth, see below */
#include "runtime/core/runtime.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

static double rt_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Reads the child's output until it closes the pipe or the deadline passes
 * (deadline <= 0: none); false on the deadline. */
static bool read_until(int fd, double deadline, char **out, size_t *n, size_t *cap) {
  for (;;) {
    int wait_ms = -1;
    if (deadline > 0) {
      double left = deadline - rt_now();
      if (left <= 0) return false;
      wait_ms = left > 1 ? 1000 : (int)(left * 1000) + 1;
    }
    struct pollfd pfd = {.fd = fd, .events = POLLIN};
    int pr = poll(&pfd, 1, wait_ms);
    if (pr < 0 && errno == EINTR) continue;
    if (pr == 0) continue; /* the deadline is checked above */
    ssize_t k = read(fd, *out + *n, *cap - *n - 1);
    if (k < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (k <= 0) return true;
    *n += (size_t)k;
    if (*cap - *n < 2) *out = pd_realloc(*out, *cap *= 2);
  }
}

char *rt_run_capture(char *const argv[], double timeout_s, int *status) {
  *status = -1;
  /* O_CLOEXEC: ranks are threads of one process and compile at once; a child another
   * thread spawns must not inherit this pipe's write end, or our read would wait for
   * that child to exit as well. */
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return NULL;
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&fa, fds[1], 1); /* dup2 clears close-on-exec */
  posix_spawn_file_actions_adddup2(&fa, fds[1], 2);
  /* With a timeout the child leads a process group of its own, so that killing it
   * ends what it started too (cc's cc1, as, ld), not only the driver. */
  posix_spawnattr_t at;
  posix_spawnattr_init(&at);
  if (timeout_s > 0) {
    posix_spawnattr_setflags(&at, POSIX_SPAWN_SETPGROUP);
    posix_spawnattr_setpgroup(&at, 0);
  }
  pid_t pid;
  int rc = posix_spawnp(&pid, argv[0], &fa, &at, argv, environ);
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&at);
  close(fds[1]);
  if (rc != 0) {
    close(fds[0]);
    errno = rc;
    return NULL;
  }
  size_t n = 0, cap = 4096;
  char *out = pd_malloc(cap);
  bool done = read_until(fds[0], timeout_s > 0 ? rt_now() + timeout_s : 0, &out, &n, &cap);
  out[n] = 0;
  close(fds[0]);
  if (!done) kill(-pid, SIGKILL); /* the whole group; then reaped below */
  int st;
  while (waitpid(pid, &st, 0) < 0)
    if (errno != EINTR) return out; /* *status stays -1 */
  *status = !done ? RT_RUN_TIMED_OUT : WIFEXITED(st) ? WEXITSTATUS(st) : WIFSIGNALED(st) ? -1 - WTERMSIG(st) : -1;
  return out;
}

int rt_split_words(const char *s, char ***words) {
  int n = 0;
  char **w = NULL;
  for (const char *p = s;;) {
    while (*p == ' ' || *p == '\t') p++;
    if (!*p) break;
    const char *e = p;
    while (*e && *e != ' ' && *e != '\t') e++;
    w = pd_realloc(w, (size_t)(n + 1) * sizeof *w);
    size_t len = (size_t)(e - p);
    w[n] = pd_malloc(len + 1);
    memcpy(w[n], p, len);
    w[n++][len] = 0;
    p = e;
  }
  *words = w;
  return n;
}
