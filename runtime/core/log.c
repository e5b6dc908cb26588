/* runtime/core/log.c — what a training run prints.
 *
 * One line per step in the style of llm.c and Megatron, so logs can be compared by
 * eye; a JSON-lines file (--log-json) with the same numbers for plots and tests; both
 * formatted by runtime/core/console.c. On a terminal the step lines are drawn over one
 * another as a progress bar (\r) and only every `keep_every`-th step, evaluations and
 * the last step stay on screen; piped to a file every step is its own line. Quiet
 * (-q): no step lines. The JSON log is streamed, not written whole and renamed like
 * every other output: a log is most wanted when a run is interrupted, and `tail -f`
 * should work (open_json and append_line say what stands in for atomicity). */
#include "runtime/core/runtime.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

struct RtLog {
  FILE *out;
  int json;          /* descriptor of the JSON log, -1 without one */
  char *json_path;   /* as given, for messages */
  off_t json_bytes;  /* the whole lines written: where a failed line is cut back to */
  char err[IO_ERR_LEN];
  bool tty, quiet;
  int64_t keep_every;
  double peak;            /* FLOP/s of the devices (0: unknown) */
  double ms_sum;          /* the steps logged so far, for the ETA */
  int64_t nlogged;
};

/* Opens path's target for appending; -1 with why in err. The path is checked like
 * every output (output_path.c: a symlink is followed, a device, FIFO, socket or
 * directory refused, and O_NONBLOCK keeps a FIFO put there since from hanging the
 * open). */
static int open_json(const char *path, char *err, size_t errlen) {
  char msg[IO_ERR_LEN];
  char *target = output_target(path, msg, sizeof msg);
  if (!target) {
    snprintf(err, errlen, "%s: cannot write the JSON log: %s", path, msg);
    return -1;
  }
  int fd = open(target, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC | O_NONBLOCK, 0666);
  struct stat st;
  if (fd < 0) {
    snprintf(err, errlen, "%s: cannot write the JSON log: %s", path, strerror(errno));
  } else if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    snprintf(err, errlen, "%s: cannot write the JSON log: not a regular file", path);
    close(fd);
    fd = -1;
  } else {
    (void)fcntl(fd, F_SETFL, O_APPEND); /* blocking again: a regular file never waits anyway */
  }
  free(target);
  return fd;
}

RtLog *rt_log_open(const char *json_path, FILE *out, bool quiet, char *err, size_t errlen) {
  RtLog *l = pd_calloc(1, sizeof *l);
  l->out = out;
  l->quiet = quiet;
  l->tty = isatty(fileno(out));
  l->keep_every = 10;
  l->json = -1;
  if (json_path) {
    l->json = open_json(json_path, err, errlen);
    if (l->json < 0) {
      free(l);
      return NULL;
    }
    l->json_path = pd_strdup(json_path);
  }
  return l;
}

/* One line in one write(2) to the O_APPEND descriptor; a line that fails halfway (a
 * full disk, EFBIG) is cut off again with ftruncate, so the file always ends with the
 * last whole line. A failed write ends the run with the path, the step and the cause
 * (rt_log_error); rt_log_finish fsyncs and reports a failing fsync or close so. */
static bool append_line(RtLog *l, const char *line, size_t n, int64_t step) {
  size_t done = 0;
  while (done < n) {
    ssize_t w = write(l->json, line + done, n - done);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      int e = w < 0 ? errno : EIO;
      if (done > 0) (void)ftruncate(l->json, l->json_bytes);
      snprintf(l->err, sizeof l->err, "%s: cannot write the JSON log at step %lld: %s", l->json_path,
               (long long)step, strerror(e));
      return false;
    }
    done += (size_t)w;
  }
  l->json_bytes += (off_t)n;
  return true;
}

void rt_log_set_peak(RtLog *l, double peak_flops) { l->peak = peak_flops; }

void rt_log_set_plain(RtLog *l) { l->tty = false; }

bool rt_log_step(RtLog *l, int64_t step, int64_t nsteps, const StepStats *s, double tokens, double flops,
                 double val_loss) {
  ConsoleStep cs = console_step(step, nsteps, s->loss, s->lr, s->grad_norm, s->ms, tokens, flops, l->peak, val_loss);
  l->ms_sum += s->ms;
  l->nlogged++;
  cs.eta_s = l->ms_sum / (double)l->nlogged * (double)(nsteps - step) / 1e3;
  char line[512];
  int n = console_step_line(&cs, line, sizeof line);
  PD_CHECK(n > 0 && (size_t)n < sizeof line, "(step line of %d bytes)", n);
  if (l->quiet) {
    /* nothing on the terminal */
  } else if (l->tty) { /* a progress bar drawn over itself; every keep_every-th line stays */
    bool keep = step == nsteps || step % l->keep_every == 0 || !isnan(val_loss) || step == 1;
    char bar[24];
    int fill = nsteps > 0 ? (int)(20 * step / nsteps) : 20;
    for (int i = 0; i < 20; i++) bar[i] = i < fill ? '#' : '.';
    bar[20] = 0;
    fprintf(l->out, "\r%s%s%s%s\033[K%s", keep ? "" : "[", keep ? "" : bar, keep ? "" : "] ", line, keep ? "\n" : "");
  } else {
    fprintf(l->out, "%s\n", line);
  }
  fflush(l->out);
  if (l->json < 0) return true;
  char js[512];
  n = console_json_line(&cs, js, sizeof js);
  PD_CHECK(n > 0 && (size_t)n < sizeof js, "(JSON log line of %d bytes)", n);
  return append_line(l, js, (size_t)n, step);
}

bool rt_log_finish(RtLog *l, char *err, size_t errlen) {
  if (!l || l->json < 0) return true;
  const char *what = NULL;
  int e = 0;
  if (fsync(l->json) != 0) what = "fsync", e = errno;
  if (close(l->json) != 0 && !what) what = "close", e = errno;
  l->json = -1;
  if (what) snprintf(err, errlen, "%s: cannot write the JSON log (%s): %s", l->json_path, what, strerror(e));
  return what == NULL;
}

const char *rt_log_error(const RtLog *l) { return l->err; }

void rt_log_close(RtLog *l) {
  if (!l) return;
  if (l->json >= 0) close(l->json);
  free(l->json_path);
  free(l);
}
