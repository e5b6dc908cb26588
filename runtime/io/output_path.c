/* runtime/io/output_path.c — where an output file goes, decided before any work is done.
 *
 * Every file pd2bw writes for the user (--save, --log-json, --trace, --profile-out,
 * pd2bw-data's token files) is a regular file that we create, or replace whole. What
 * else a user may name instead, carelessly or not:
 *   - a symlink: written THROUGH, as `>` in a shell does. The link's final target is
 *     the file we replace (temporary + rename in the target's directory), the link
 *     stays. A dangling link creates the file it names.
 *   - a device, FIFO, socket or directory: refused, and never opened. Opening a FIFO
 *     for writing blocks until a reader comes; /dev/full fails every write; and as
 *     root, renaming a temporary over /dev/null would replace the device node.
 * output_path_check (one flag) and output_paths_check (all of a driver's flags) also
 * create and remove a temporary in the target's directory, so a missing or
 * read-only directory is reported when the run starts, not after the training; they
 * are what every driver calls before it loads anything.
 *
 * Temporaries are named TARGET.tmp.<pid> (atomic_file.c). A process killed with
 * SIGKILL leaves its temporary behind; the next check or write of the same target
 * removes those whose process is gone (kill(pid, 0) fails with ESRCH) and nothing
 * else: not another name, not a live process's, not a directory or link. A pid is
 * only meaningful on this host: a directory shared with another host could hold a
 * live process's temporary that looks stale here, so do not point two hosts'
 * concurrent runs at the same output file.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "runtime/io/io.h"

#define OUTPUT_MAX_LINKS 40 /* as the kernel's own limit on a path's symlinks */

static const char *kind_name(mode_t m) {
  if (S_ISDIR(m)) return "a directory";
  if (S_ISCHR(m)) return "a character device";
  if (S_ISBLK(m)) return "a block device";
  if (S_ISFIFO(m)) return "a FIFO";
  if (S_ISSOCK(m)) return "a socket";
  return "not a regular file";
}

/* The directory part of path: a new string, "." when there is none. */
char *output_dir_of(const char *path) {
  const char *slash = strrchr(path, '/');
  if (!slash) return pd_strdup(".");
  char *dir = pd_strdup(path);
  dir[slash == path ? 1 : slash - path] = '\0';
  return dir;
}

char *output_target(const char *path, char *err, size_t errlen) {
  if (!path[0]) {
    snprintf(err, errlen, "an empty path");
    return NULL;
  }
  char *cur = pd_strdup(path);
  for (int hops = 0;; hops++) {
    struct stat st;
    if (lstat(cur, &st) != 0) {
      if (errno == ENOENT) return cur; /* a new file; its directory is the creator's concern */
      if (strcmp(cur, path) == 0) snprintf(err, errlen, "%s", strerror(errno));
      else snprintf(err, errlen, "%s: %s", cur, strerror(errno));
      break;
    }
    if (S_ISREG(st.st_mode)) return cur;
    if (!S_ISLNK(st.st_mode)) {
      if (strcmp(cur, path) == 0)
        snprintf(err, errlen, "%s, not a regular file: pd2bw writes only regular files", kind_name(st.st_mode));
      else
        snprintf(err, errlen, "leads to %s, %s, not a regular file: pd2bw writes only regular files", cur,
                 kind_name(st.st_mode));
      break;
    }
    if (hops == OUTPUT_MAX_LINKS) {
      snprintf(err, errlen, "more than %d symbolic links in a row", OUTPUT_MAX_LINKS);
      break;
    }
    char link[PATH_MAX];
    ssize_t n = readlink(cur, link, sizeof link - 1);
    if (n < 0) {
      snprintf(err, errlen, "%s: %s", cur, strerror(errno));
      break;
    }
    link[n] = '\0';
    /* a relative link is relative to the directory holding it */
    char *next;
    if (link[0] == '/' || !strchr(cur, '/')) {
      next = pd_strdup(link);
    } else {
      char *dir = output_dir_of(cur);
      size_t len = strlen(dir) + strlen(link) + 2;
      next = pd_malloc(len);
      snprintf(next, len, "%s/%s", dir, link);
      free(dir);
    }
    free(cur);
    cur = next;
  }
  free(cur);
  return NULL;
}

/* "123" -> 123 for a decimal pid without sign or leading zero; -1 otherwise. */
static long parse_pid(const char *s) {
  if (s[0] < '1' || s[0] > '9') return -1;
  long v = 0;
  for (; *s; s++) {
    if (*s < '0' || *s > '9' || v > (INT_MAX - 9) / 10) return -1;
    v = v * 10 + (*s - '0');
  }
  return v;
}

int output_remove_stale_temps(const char *target) {
  char *dir = output_dir_of(target);
  const char *slash = strrchr(target, '/');
  const char *base = slash ? slash + 1 : target;
  size_t blen = strlen(base);
  int removed = 0;
  DIR *d = opendir(dir);
  if (d) {
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
      if (strncmp(e->d_name, base, blen) != 0 || strncmp(e->d_name + blen, ".tmp.", 5) != 0) continue;
      long pid = parse_pid(e->d_name + blen + 5);
      if (pid <= 0 || pid == (long)getpid()) continue;
      if (kill((pid_t)pid, 0) == 0 || errno != ESRCH) continue; /* alive, or not ours to judge */
      struct stat st;
      if (fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(st.st_mode)) continue;
      if (unlinkat(dirfd(d), e->d_name, 0) == 0) removed++;
    }
    closedir(d);
  }
  free(dir);
  return removed;
}

/* Creates and removes TARGET.tmp.<pid>: what atomic_open will do, done now. */
static bool probe_directory(const char *target, char *msg, size_t msglen) {
  size_t n = strlen(target) + 32;
  char *tmp = pd_malloc(n);
  snprintf(tmp, n, "%s.tmp.%ld", target, (long)getpid());
  int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  bool ok = fd >= 0;
  if (ok) {
    close(fd);
    unlink(tmp);
  } else {
    char *dir = output_dir_of(target);
    snprintf(msg, msglen, "cannot create files in %s: %s", dir, strerror(errno));
    free(dir);
  }
  free(tmp);
  return ok;
}

/* Checks one flag; its target (a new string) in *target_out when wanted. */
static bool check_one(const char *flag, const char *path, char **target_out, char *err, size_t errlen) {
  char msg[IO_ERR_LEN];
  char *target = output_target(path, msg, sizeof msg);
  if (target) {
    output_remove_stale_temps(target);
    if (!probe_directory(target, msg, sizeof msg)) {
      free(target);
      target = NULL;
    }
  }
  if (!target) {
    snprintf(err, errlen, "%s %s: %s", flag, path, msg);
    return false;
  }
  if (target_out) *target_out = target;
  else free(target);
  return true;
}

bool output_path_check(const char *flag, const char *path, char *err, size_t errlen) {
  return check_one(flag, path, NULL, err, errlen);
}

/* The identity of a target: its directory's device and inode, and its name there
 * (two spellings of one directory, or links to one file, compare equal). */
static bool same_file(const char *a, const char *b) {
  const char *sa = strrchr(a, '/'), *sb = strrchr(b, '/');
  if (strcmp(sa ? sa + 1 : a, sb ? sb + 1 : b) != 0) return false;
  char *da = output_dir_of(a), *db = output_dir_of(b);
  struct stat x, y;
  bool same = stat(da, &x) == 0 && stat(db, &y) == 0 && x.st_dev == y.st_dev && x.st_ino == y.st_ino;
  free(da);
  free(db);
  return same;
}

bool output_paths_check(const OutputFlag *flags, int n, char *err, size_t errlen) {
  char **targets = pd_calloc((size_t)(n > 0 ? n : 1), sizeof *targets);
  bool ok = true;
  for (int i = 0; ok && i < n; i++) {
    if (!flags[i].path) continue;
    ok = check_one(flags[i].flag, flags[i].path, &targets[i], err, errlen);
    for (int j = 0; ok && j < i; j++)
      if (targets[j] && same_file(targets[i], targets[j])) {
        snprintf(err, errlen, "%s %s and %s %s name the same file: each output needs its own", flags[j].flag,
                 flags[j].path, flags[i].flag, flags[i].path);
        ok = false;
      }
  }
  for (int i = 0; i < n; i++) free(targets[i]);
  free(targets);
  return ok;
}
