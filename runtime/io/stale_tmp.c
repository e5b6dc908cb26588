/* runtime/io/stale_tmp.c — recognising temporary files left by dead processes (io.h).
 *
 * pd2bw names its temporaries after the writing process (DIR.tmp.<pid>,
 * <key>.so.tmp.<pid>.<n>), so a later run can tell one whose writer is gone
 * (SIGKILL, a crash, a power cut) from one that is still being written: kill(pid, 0)
 * fails with ESRCH only when no such process exists. A pid from another host (a
 * cache under an NFS home directory, shared by the nodes of a cluster) may be alive
 * there and dead here, so the caches also ask that the file be unchanged for a while
 * (stale_tmp_idle): a live writer's temporary is seconds old when it is renamed. */
#include "runtime/io/io.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <limits.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

/* Digits at *p (no sign, no leading zero) up to a non-digit; false if none or > max. */
static bool digits(const char **p, long max, long *v) {
  const char *s = *p;
  if (*s < '1' || *s > '9') return false;
  long x = 0;
  while (*s >= '0' && *s <= '9') {
    if (x > (max - (*s - '0')) / 10) return false;
    x = x * 10 + (*s++ - '0');
  }
  *v = x;
  *p = s;
  return true;
}

long stale_tmp_pid(const char *name, size_t stem, const char *tag, bool serial) {
  size_t tl = strlen(tag);
  if (strlen(name) < stem || strncmp(name + stem, tag, tl) != 0) return -1;
  const char *p = name + stem + tl;
  long pid, n;
  if (!digits(&p, INT_MAX, &pid)) return -1;
  if (serial && (*p++ != '.' || !digits(&p, LONG_MAX, &n))) return -1;
  return *p ? -1 : pid;
}

bool stale_tmp_pid_dead(long pid) {
  return pid > 0 && kill((pid_t)pid, 0) != 0 && errno == ESRCH;
}

bool stale_tmp_idle(const char *path, int seconds) {
  struct stat st;
  return lstat(path, &st) == 0 && difftime(time(NULL), st.st_mtime) > seconds;
}

void stale_tmp_sweep_cache(const char *dir, size_t hexlen, const char *ext) {
  DIR *d = opendir(dir);
  if (!d) return;
  size_t stem = hexlen + strlen(ext);
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    const char *name = e->d_name;
    if (strspn(name, "0123456789abcdef") != hexlen || strncmp(name + hexlen, ext, strlen(ext)) != 0) continue;
    long pid = stale_tmp_pid(name, stem, ".tmp.", true);
    if (pid < 0 || pid == (long)getpid() || !stale_tmp_pid_dead(pid)) continue;
    char *path = io_join(dir, name);
    if (stale_tmp_idle(path, STALE_TMP_CACHE_IDLE_S)) unlink(path);
    free(path);
  }
  closedir(d);
}
