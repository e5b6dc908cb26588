/* runtime/io/atomic_file.c — files that appear whole or not at all (atomic_open/atomic_commit).
 *
 * A reader (another rank resuming, a user's script) must never see half a checkpoint or
 * half a token file, even when we are killed mid-write. So we write TARGET.tmp.<pid>,
 * fsync it, rename it over TARGET (atomic on POSIX within a file system) and fsync the
 * directory, so the rename itself survives a crash. TARGET is the path's final target
 * (output_path.c): a symlink is written through; a device, FIFO, socket or directory is
 * refused before anything is created. The pid keeps two processes writing one path off
 * each other's temporary; O_EXCL keeps us from opening whatever else (a planted symlink)
 * has that name.
 *
 * Invariant: no temporary outlives its process except after SIGKILL, whose leftover the
 * next write or check of the target removes (output_remove_stale_temps); while one
 * exists the catchable fatal signals remove it (temp_on_signal). Users: docs/output-files.md. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "runtime/io/io.h"

/* ---- the temporaries a signal must remove -------------------------------- */
/* While a temporary exists its name is in this fixed table, which a signal handler can
 * read without locks or allocation; SIGKILL cannot be caught (output_remove_stale_temps). */

#define TEMP_SLOTS 16
_Static_assert(ATOMIC_INT_LOCK_FREE == 2, "the slot flags are read in a signal handler");
static char temp_names[TEMP_SLOTS][PATH_MAX + 32];
static atomic_int temp_live[TEMP_SLOTS]; /* 1: temp_names[i] is a temporary that exists */
static pthread_mutex_t temp_mu = PTHREAD_MUTEX_INITIALIZER;
static int temp_count; /* live slots; the handlers are installed while > 0 */

static const int temp_signals[] = {SIGHUP, SIGINT, SIGQUIT, SIGTERM, SIGABRT};
#define TEMP_NSIG ((int)(sizeof temp_signals / sizeof temp_signals[0]))
static struct sigaction temp_prev[TEMP_NSIG]; /* the program's own actions, given back after */
static atomic_int temp_prev_spent[TEMP_NSIG]; /* a SA_RESETHAND handler of the program's has run */

static bool is_handler(const struct sigaction *a) {
  if (a->sa_flags & SA_SIGINFO) return a->sa_sigaction != NULL;
  return a->sa_handler != SIG_DFL && a->sa_handler != SIG_IGN;
}

/* Installed for temp_signals only while some temporary exists (SIGABRT: a PD_CHECK
 * failure). When the program had its own handler (the transports record SIGINT/SIGTERM
 * and shut down in order), that one runs and the write goes on to its commit or abort,
 * which remove the temporary themselves. Otherwise the signal would end the process: we
 * unlink every listed temporary, restore the default action and raise the signal again,
 * so the process ends as it would have and its exit status still names the signal. */
static void temp_on_signal(int sig, siginfo_t *info, void *uc) {
  int k = 0;
  while (k < TEMP_NSIG && temp_signals[k] != sig) k++;
  if (k == TEMP_NSIG) return;
  const struct sigaction *prev = &temp_prev[k];
  if (!atomic_load(&temp_prev_spent[k])) {
    if (!(prev->sa_flags & SA_SIGINFO) && prev->sa_handler == SIG_IGN) return;
    if (is_handler(prev)) { /* the program's own: it shuts down in order */
      if (prev->sa_flags & SA_RESETHAND) atomic_store(&temp_prev_spent[k], 1);
      if (prev->sa_flags & SA_SIGINFO) prev->sa_sigaction(sig, info, uc);
      else prev->sa_handler(sig);
      return;
    }
  }
  int saved = errno;
  for (int i = 0; i < TEMP_SLOTS; i++)
    if (atomic_load(&temp_live[i])) unlink(temp_names[i]);
  struct sigaction dfl;
  memset(&dfl, 0, sizeof dfl);
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);
  sigaction(sig, &dfl, NULL);
  raise(sig); /* blocked while this handler runs; delivered, with its default action, on return */
  errno = saved;
}

/* Lists tmp (before it is created); the slot, or -1 when the table is full or the
 * name too long (the file is then written unprotected; SIGKILL's rule applies). */
static int temp_register(const char *tmp) {
  if (strlen(tmp) >= sizeof temp_names[0]) return -1;
  pthread_mutex_lock(&temp_mu);
  int slot = -1;
  for (int i = 0; i < TEMP_SLOTS && slot < 0; i++)
    if (!atomic_load(&temp_live[i])) slot = i;
  if (slot >= 0) {
    strcpy(temp_names[slot], tmp);
    atomic_store(&temp_live[slot], 1); /* seq_cst: the name is complete before the flag */
    if (temp_count++ == 0) {
      struct sigaction sa;
      memset(&sa, 0, sizeof sa);
      sa.sa_sigaction = temp_on_signal;
      sa.sa_flags = SA_SIGINFO | SA_RESTART;
      sigfillset(&sa.sa_mask); /* one cleanup at a time */
      for (int k = 0; k < TEMP_NSIG; k++) {
        atomic_store(&temp_prev_spent[k], 0);
        PD_CHECK(sigaction(temp_signals[k], &sa, &temp_prev[k]) == 0, "(sigaction %d: %s)", temp_signals[k],
                 strerror(errno));
      }
    }
  }
  pthread_mutex_unlock(&temp_mu);
  return slot;
}

static void temp_unregister(int slot) {
  if (slot < 0) return;
  pthread_mutex_lock(&temp_mu);
  atomic_store(&temp_live[slot], 0);
  if (--temp_count == 0) {
    for (int k = 0; k < TEMP_NSIG; k++) {
      struct sigaction back = temp_prev[k];
      if (atomic_load(&temp_prev_spent[k])) { /* the kernel would have reset it */
        memset(&back, 0, sizeof back);
        back.sa_handler = SIG_DFL;
        sigemptyset(&back.sa_mask);
      }
      PD_CHECK(sigaction(temp_signals[k], &back, NULL) == 0, "(sigaction %d: %s)", temp_signals[k], strerror(errno));
    }
  }
  pthread_mutex_unlock(&temp_mu);
}

/* ---- atomic files --------------------------------------------------------- */

static void atomic_release(AtomicFile *af) {
  temp_unregister(af->slot);
  free(af->path);
  free(af->target);
  free(af->tmp);
  memset(af, 0, sizeof *af);
  af->slot = -1;
}

bool atomic_open(AtomicFile *af, const char *path, char *err, size_t errlen) {
  memset(af, 0, sizeof *af);
  af->slot = -1;
  char msg[IO_ERR_LEN];
  char *target = output_target(path, msg, sizeof msg);
  if (!target) {
    snprintf(err, errlen, "%s: %s", path, msg);
    return false;
  }
  output_remove_stale_temps(target);
  size_t n = strlen(target) + 32;
  af->path = pd_strdup(path);
  af->target = target;
  af->tmp = pd_malloc(n);
  snprintf(af->tmp, n, "%s.tmp.%ld", target, (long)getpid());
  af->slot = temp_register(af->tmp);
  int fd = open(af->tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
  if (fd >= 0) {
    /* a replaced file keeps its permissions (a private checkpoint stays private) */
    struct stat st;
    if (stat(target, &st) == 0) (void)fchmod(fd, st.st_mode & 07777);
    af->f = fdopen(fd, "wb");
    PD_CHECK(af->f != NULL, "(fdopen: %s)", strerror(errno));
  } else {
    snprintf(err, errlen, "%s: cannot create %s: %s", path, af->tmp, strerror(errno));
    atomic_release(af);
    return false;
  }
  return true;
}

void atomic_write(AtomicFile *af, const void *p, size_t n) {
  if (af->err_no || n == 0) return;
  errno = 0;
  if (fwrite(p, 1, n, af->f) != n) af->err_no = errno ? errno : EIO;
}

void atomic_abort(AtomicFile *af) {
  if (!af->tmp) return;
  if (af->f) fclose(af->f);
  unlink(af->tmp);
  atomic_release(af);
}

/* fsync of the target's directory after the rename. */
static void fsync_parent_dir(const char *path) {
  char *dir = output_dir_of(path);
  int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  /* Best effort: some file systems refuse fsync on directories, and the data
   * itself is already safe in the renamed file. */
  if (fd >= 0) {
    (void)fsync(fd);
    close(fd);
  }
  free(dir);
}

bool atomic_commit(AtomicFile *af, char *err, size_t errlen) {
  PD_CHECK(af->f != NULL, "(atomic_commit without atomic_open)");
  const char *step = NULL;
  if (!af->err_no && fflush(af->f) != 0) af->err_no = errno, step = "flush";
  if (!af->err_no && fsync(fileno(af->f)) != 0) af->err_no = errno, step = "fsync";
  if (fclose(af->f) != 0 && !af->err_no) af->err_no = errno, step = "close";
  af->f = NULL;
  if (!af->err_no && rename(af->tmp, af->target) != 0) af->err_no = errno, step = "rename";
  if (af->err_no) {
    snprintf(err, errlen, "%s: cannot write (%s of %s): %s", af->path, step ? step : "write", af->tmp,
             strerror(af->err_no));
    unlink(af->tmp);
    atomic_release(af);
    return false;
  }
  fsync_parent_dir(af->target);
  atomic_release(af);
  return true;
}

bool atomic_write_text(const char *path, const char *text, char *err, size_t errlen) {
  AtomicFile af;
  if (!atomic_open(&af, path, err, errlen)) return false;
  atomic_write(&af, text, strlen(text));
  return atomic_commit(&af, err, errlen);
}
