/* runtime/atomic_file.c — files that appear whole or not at all.
 *
 * A reader (another rank resuming, a user's script) must never see half a
 * checkpoint or half a token file, even when we are killed mid-write. So we
 * write PATH.tmp.<pid>, fsync it, rename it over PATH (atomic on POSIX within a
 * file system), and fsync the directory so the rename itself survives a crash.
 * The pid in the temp name keeps two processes writing the same path from
 * trampling each other's temp file.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "runtime/io.h"

bool atomic_open(AtomicFile *af, const char *path, char *err, size_t errlen) {
  memset(af, 0, sizeof *af);
  size_t n = strlen(path) + 32;
  af->path = pd_strdup(path);
  af->tmp = pd_malloc(n);
  snprintf(af->tmp, n, "%s.tmp.%ld", path, (long)getpid());
  af->f = fopen(af->tmp, "wb");
  if (!af->f) {
    snprintf(err, errlen, "%s: cannot create %s: %s", path, af->tmp, strerror(errno));
    free(af->path);
    free(af->tmp);
    memset(af, 0, sizeof *af);
    return false;
  }
  return true;
}

void atomic_write(AtomicFile *af, const void *p, size_t n) {
  if (af->err_no || n == 0) return;
  if (fwrite(p, 1, n, af->f) != n) af->err_no = errno ? errno : EIO;
}

static void atomic_release(AtomicFile *af) {
  free(af->path);
  free(af->tmp);
  memset(af, 0, sizeof *af);
}

void atomic_abort(AtomicFile *af) {
  if (!af->tmp) return;
  if (af->f) fclose(af->f);
  unlink(af->tmp);
  atomic_release(af);
}

/* The directory part of path ("." when none), for the fsync after rename. */
static void fsync_parent_dir(const char *path) {
  const char *slash = strrchr(path, '/');
  char *dir = slash ? pd_strdup(path) : pd_strdup(".");
  if (slash) dir[slash == path ? 1 : slash - path] = '\0';
  int fd = open(dir, O_RDONLY | O_DIRECTORY);
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
  if (!af->err_no && rename(af->tmp, af->path) != 0) af->err_no = errno, step = "rename";
  if (af->err_no) {
    snprintf(err, errlen, "%s: cannot write (%s of %s): %s", af->path, step ? step : "write",
             af->tmp, strerror(af->err_no));
    unlink(af->tmp);
    atomic_release(af);
    return false;
  }
  fsync_parent_dir(af->path);
  atomic_release(af);
  return true;
}

bool atomic_write_text(const char *path, const char *text, char *err, size_t errlen) {
  AtomicFile af;
  if (!atomic_open(&af, path, err, errlen)) return false;
  atomic_write(&af, text, strlen(text));
  return atomic_commit(&af, err, errlen);
}
