/* runtime/io/output_path.c — where an output file goes, decided before any work is done
 * (output_path_check, output_paths_check; what users see: docs/output-files.md).
 *
 * Every file pd2bw writes for the user is a regular file that we create or replace
 * whole. A symlink is written through, as `>` in a shell does (output_target); a device,
 * FIFO, socket or directory is refused and never opened: a FIFO opened for writing
 * blocks until a reader comes, /dev/full fails every write, and as root a temporary
 * renamed over /dev/null would replace the device node. The check also probes the
 * target's directory, so a missing or read-only one is reported when the run starts,
 * not after the training. And an output never names an input (apart, holds_not): a
 * --log-json over the --data file truncated it under its memory map (SIGBUS), --save
 * replaced the checkpoint being resumed, --trace PLAN/stage0.c the plan's program.
 *
 * Temporaries (TARGET.tmp.<pid>, atomic_file.c) that SIGKILL left behind are removed by
 * the next check or write of the same target (output_remove_stale_temps). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "runtime/io/io.h"

#define OUTPUT_MAX_LINKS 40 /* as the kernel's own limit on a path's symlinks */

const char *io_file_kind(mode_t m) {
  if (S_ISREG(m)) return "a regular file";
  if (S_ISDIR(m)) return "a directory";
  if (S_ISCHR(m)) return "a character device";
  if (S_ISBLK(m)) return "a block device";
  if (S_ISFIFO(m)) return "a FIFO";
  if (S_ISSOCK(m)) return "a socket";
  if (S_ISLNK(m)) return "a symbolic link";
  return "a special file";
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
        snprintf(err, errlen, "%s, not a regular file: pd2bw writes only regular files", io_file_kind(st.st_mode));
      else
        snprintf(err, errlen, "leads to %s, %s, not a regular file: pd2bw writes only regular files", cur,
                 io_file_kind(st.st_mode));
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
      next = io_join(dir, link);
      free(dir);
    }
    free(cur);
    cur = next;
  }
  free(cur);
  return NULL;
}

/* Removes only regular files named exactly TARGET.tmp.<decimal pid> whose process is gone
 * (kill(pid, 0) fails with ESRCH): not another name, not a live process's, not a
 * directory or link. A pid is only meaningful on this host: a directory shared with
 * another host could hold a live process's temporary that looks stale here, so two
 * hosts' concurrent runs must not write the same output file (docs/output-files.md). */
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
      long pid = strncmp(e->d_name, base, blen) == 0 ? stale_tmp_pid(e->d_name, blen, ".tmp.", false) : -1;
      if (pid < 0 || pid == (long)getpid() || !stale_tmp_pid_dead(pid)) continue; /* alive, or not ours to judge */
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

/* ---- outputs against inputs --------------------------------------------------- */

#define NEVER "(an output never replaces an input)"
#define TREE_DEPTH 8          /* how deep a hard link to an input directory's file is looked for */
#define TREE_ENTRIES 100000L /* and among how many entries */

/* An input as messages name it: "the --data file", "the plan directory". */
static void input_name(const PathFlag *in, char *buf, size_t n) {
  if (in->flag[0] == '-') snprintf(buf, n, "the %s %s", in->flag, in->tree ? "directory" : "file");
  else snprintf(buf, n, "%s", in->flag);
}

/* A file's identity: device and inode where it exists; for a file not there yet, its
 * directory's device and inode and its name, symlinks followed (state 2); state 0:
 * neither can be found. */
typedef struct FileId {
  int state;
  dev_t dev;
  ino_t ino;
  char *name;
} FileId;

static FileId file_id(const char *path) {
  FileId id = {0};
  struct stat st;
  if (stat(path, &st) == 0) return (FileId){1, st.st_dev, st.st_ino, NULL};
  char msg[IO_ERR_LEN];
  char *target = errno == ENOENT ? output_target(path, msg, sizeof msg) : NULL;
  if (!target) return id;
  char *dir = output_dir_of(target);
  const char *slash = strrchr(target, '/');
  if (stat(dir, &st) == 0) id = (FileId){2, st.st_dev, st.st_ino, pd_strdup(slash ? slash + 1 : target)};
  free(dir);
  free(target);
  return id;
}

static bool same_id(FileId a, FileId b) {
  return a.state && a.state == b.state && a.dev == b.dev && a.ino == b.ino && (a.state == 1 || !strcmp(a.name, b.name));
}

static bool same_file(const char *a, const char *b) {
  FileId x = file_id(a), y = file_id(b);
  bool same = same_id(x, y);
  free(x.name);
  free(y.name);
  return same;
}

/* True when the directory holding path, or one above it, is the directory st. */
static bool under_dir(const char *path, const struct stat *st) {
  char *dir = output_dir_of(path);
  char *real = realpath(dir, NULL);
  free(dir);
  bool in = false;
  while (real && !in) {
    struct stat s;
    in = stat(real, &s) == 0 && s.st_dev == st->st_dev && s.st_ino == st->st_ino;
    char *slash = strrchr(real, '/');
    if (!slash || !strcmp(real, "/")) break;
    slash[slash == real] = '\0'; /* "/a" -> "/" */
  }
  free(real);
  return in;
}

/* The regular file under dir (symlinks not followed, TREE_DEPTH levels, *budget
 * entries at most: a plan is a few files, a mistaken "/" is not) that is the file st,
 * as a new path; NULL when there is none. */
static char *tree_find(const char *dir, const struct stat *st, int depth, long *budget) {
  DIR *d = opendir(dir);
  char *found = NULL;
  struct dirent *e;
  while (d && !found && (*budget)-- > 0 && (e = readdir(d)) != NULL) {
    struct stat s;
    if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..") ||
        fstatat(dirfd(d), e->d_name, &s, AT_SYMLINK_NOFOLLOW) != 0)
      continue;
    char *p = io_join(dir, e->d_name);
    if (S_ISREG(s.st_mode) && s.st_dev == st->st_dev && s.st_ino == st->st_ino) found = p;
    else if (S_ISDIR(s.st_mode) && depth > 0) found = tree_find(p, st, depth - 1, budget);
    if (found != p) free(p);
  }
  if (d) closedir(d);
  return found;
}

/* A hard link to file under the directory tree: its path there, or NULL. */
static char *linked_in(const char *file, const char *tree) {
  struct stat st;
  long budget = TREE_ENTRIES;
  if (stat(file, &st) != 0 || !S_ISREG(st.st_mode) || st.st_nlink < 2) return NULL;
  return tree_find(tree, &st, TREE_DEPTH, &budget);
}

/* Output o, written at target, against input in: true when they are apart. An input
 * directory (a plan) counts with everything in it: an output whose directory is it or
 * lies below it (after symlinks: realpath), or a hard link to one of its files, is not. */
static bool apart(const PathFlag *o, const char *target, const PathFlag *in, char *err, size_t errlen) {
  char what[160];
  input_name(in, what, sizeof what);
  struct stat ist;
  if (!in->tree) {
    if (!same_file(target, in->path)) return true;
    snprintf(err, errlen, "%s %s is %s %s " NEVER, o->flag, o->path, what, in->path);
    return false;
  }
  if (stat(in->path, &ist) != 0 || !S_ISDIR(ist.st_mode)) return true;
  if (under_dir(target, &ist)) {
    snprintf(err, errlen, "%s %s is inside %s %s " NEVER, o->flag, o->path, what, in->path);
    return false;
  }
  char *hit = linked_in(target, in->path);
  if (hit) snprintf(err, errlen, "%s %s is %s in %s %s " NEVER, o->flag, o->path, hit, what, in->path);
  free(hit);
  return !hit;
}

/* A directory output replaced whole (pd2bwc -o) against input in. */
static bool holds_not(const PathFlag *o, const PathFlag *in, char *err, size_t errlen) {
  struct stat ost;
  if (in->tree || stat(o->path, &ost) != 0 || !S_ISDIR(ost.st_mode)) return true;
  char msg[IO_ERR_LEN], what[160];
  char *target = output_target(in->path, msg, sizeof msg);
  char *hit = NULL;
  bool inside = under_dir(in->path, &ost) || (target && under_dir(target, &ost));
  if (!inside) hit = linked_in(in->path, o->path);
  free(target);
  input_name(in, what, sizeof what);
  if (inside) snprintf(err, errlen, "%s %s holds %s %s " NEVER, o->flag, o->path, what, in->path);
  else if (hit) snprintf(err, errlen, "%s %s holds %s %s (as %s) " NEVER, o->flag, o->path, what, in->path, hit);
  free(hit);
  return !inside && !hit;
}

/* An input that is there must be a regular file: a FIFO blocked its reader in open()
 * (io_open_regular: O_NONBLOCK, never read). One that cannot be opened is left to the
 * reader to report. */
static bool readable(const PathFlag *in, char *err, size_t errlen) {
  char why[IO_ERR_LEN];
  if (in->tree) return true;
  int fd = io_open_regular(in->path, NULL, why, sizeof why);
  if (fd >= 0) close(fd);
  if (fd != IO_NOT_REGULAR) return true;
  snprintf(err, errlen, "%s %s: %s", in->flag, in->path, why);
  return false;
}

bool output_paths_check(const PathFlag *outs, int nout, const PathFlag *ins, int nin, char *err, size_t errlen) {
  char **targets = pd_calloc((size_t)(nout > 0 ? nout : 1), sizeof *targets);
  bool ok = true;
  for (int k = 0; ok && k < nin; k++)
    if (ins[k].path) ok = readable(&ins[k], err, errlen);
  for (int i = 0; ok && i < nout; i++) {
    const PathFlag *o = &outs[i];
    if (!o->path) continue;
    if (o->tree) {
      for (int k = 0; ok && k < nin; k++)
        if (ins[k].path) ok = holds_not(o, &ins[k], err, errlen);
      continue;
    }
    ok = check_one(o->flag, o->path, &targets[i], err, errlen);
    for (int j = 0; ok && j < i; j++)
      if (targets[j] && same_file(targets[i], targets[j])) {
        snprintf(err, errlen, "%s %s and %s %s name the same file: each output needs its own", outs[j].flag,
                 outs[j].path, o->flag, o->path);
        ok = false;
      }
    for (int k = 0; ok && k < nin; k++)
      if (ins[k].path) ok = apart(o, targets[i], &ins[k], err, errlen);
  }
  for (int i = 0; i < nout; i++) free(targets[i]);
  free(targets);
  return ok;
}
