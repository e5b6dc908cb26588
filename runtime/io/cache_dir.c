/* runtime/io/cache_dir.c — the directory a compile cache may use (io.h cache_dir_for_run).
 *
 * Both caches hold code: the stage-program cache (runtime/core/stage_cc.c) dlopens the
 * .so it finds, whose constructors run before any check, and the cubin cache
 * (runtime/cuda/nvrtc_compile.c) hands its cubins to the GPU. An entry's seal
 * (cache_seal.c) guards against damage, not against someone who can write the
 * directory: they can write a valid seal too. So a cache directory is used only when it
 * is owned by the user running pd2bw and writable by nobody else (trusted); anything
 * else gets one note and a private temporary directory (private_cache), never a shared
 * /tmp/.cache/pd2bw. The rule is this one function's, for both caches (the cubins: <dir>/cuda).
 * Users: docs/data.md ("The stage-program cache"). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "runtime/io/io.h"

#define NOTED_MAX 16 /* distinct directories noted per process (more: noted again) */

/* Ranks that are threads of one process call cache_dir_for_run at once: the private
 * directory and the notes already given are behind this lock, so a process notes each
 * directory once. */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static char *private_dir; /* this process's, once made; removed at exit */
static char *noted[NOTED_MAX];
static int nnoted;

/* mkdir -p path: the missing parents as mkdir -p makes them (0777 less the umask), the
 * last one 0700. True when path exists afterwards (as anything: trusted() says what). */
static bool make_dirs(const char *path) {
  char *buf = pd_strdup(path);
  bool ok = true;
  for (char *p = buf + 1; *p && ok; p++) {
    if (*p != '/') continue;
    *p = 0;
    ok = mkdir(buf, 0777) == 0 || errno == EEXIST;
    *p = '/';
  }
  ok = ok && (mkdir(buf, 0700) == 0 || errno == EEXIST);
  free(buf);
  return ok;
}

/* True when dir may hold a cache: a directory owned by this user (geteuid) with no
 * group or other write bit; else false with why. */
static bool trusted(const char *dir, char *why, size_t n) {
  struct stat st;
  if (stat(dir, &st) != 0) return snprintf(why, n, "%s", strerror(errno)), false;
  if (!S_ISDIR(st.st_mode)) return snprintf(why, n, "%s, not a directory", io_file_kind(st.st_mode)), false;
  if (st.st_uid != geteuid())
    return snprintf(why, n, "owned by uid %lu, not by this user (uid %lu)", (unsigned long)st.st_uid,
                    (unsigned long)geteuid()),
           false;
  mode_t w = st.st_mode & (S_IWGRP | S_IWOTH);
  if (w)
    return snprintf(why, n, "writable by %s (mode %04o)",
                    w == (S_IWGRP | S_IWOTH) ? "group and others" : w == S_IWGRP ? "group" : "others",
                    (unsigned)(st.st_mode & 07777)),
           false;
  return true;
}

/* Removes dir and what the caches put in it (files, and the cuda/ directory's). */
static void remove_tree(const char *dir, int depth) {
  DIR *d = opendir(dir);
  struct dirent *e;
  while (d && (e = readdir(d)) != NULL) {
    struct stat st;
    if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..") ||
        fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0)
      continue;
    if (S_ISDIR(st.st_mode) && depth > 0) {
      char *sub = io_join(dir, e->d_name);
      remove_tree(sub, depth - 1);
      free(sub);
    } else {
      unlinkat(dirfd(d), e->d_name, 0);
    }
  }
  if (d) closedir(d);
  rmdir(dir);
}

static void remove_private(void) {
  if (private_dir) remove_tree(private_dir, 2);
}

/* This process's private directory (under the lock): mkdtemp (0700) under $TMPDIR or
 * /tmp, made once per process and removed at exit; NULL with err. */
static const char *private_cache(char *err, size_t errlen) {
  if (private_dir) return private_dir;
  const char *tmp = getenv("TMPDIR");
  char *p = io_join(tmp && *tmp ? tmp : "/tmp", "pd2bw-cache-XXXXXX");
  if (!mkdtemp(p)) {
    snprintf(err, errlen, "cannot create a private cache directory %s: %s", p, strerror(errno));
    free(p);
    return NULL;
  }
  private_dir = p;
  atexit(remove_private);
  return p;
}

/* Whether `dir` was noted already; records it (under the lock). */
static bool noted_before(const char *dir) {
  for (int i = 0; i < nnoted; i++)
    if (!strcmp(noted[i], dir)) return true;
  if (nnoted < NOTED_MAX) noted[nnoted++] = pd_strdup(dir);
  return false;
}

char *cache_dir_for_run(const char *given, const char *sub, char *err, size_t errlen) {
  const char *env = getenv("PD2BW_CACHE"), *home = getenv("HOME");
  char *base = given && *given ? pd_strdup(given)
               : env && *env   ? pd_strdup(env)
               : home && *home ? io_join(home, ".cache/pd2bw")
                               : NULL;
  char *dir = base && sub && *sub ? io_join(base, sub) : base ? pd_strdup(base) : NULL;
  char why[IO_ERR_LEN] = "";
  const char *bad = NULL; /* the directory the note names */
  if (!base) snprintf(why, sizeof why, "neither PD2BW_CACHE nor HOME is set");
  for (int i = 0; base && i < 2 && !why[0] && (i == 0 || strcmp(dir, base) != 0); i++) {
    bad = i == 0 ? base : dir; /* the base, then its cuda/ */
    if (!make_dirs(bad)) snprintf(why, sizeof why, "cannot create it: %s", strerror(errno));
    else trusted(bad, why, sizeof why);
  }
  if (!why[0]) {
    free(base);
    return dir;
  }
  pthread_mutex_lock(&lock);
  const char *priv = private_cache(err, errlen);
  char *out = priv ? (sub && *sub ? io_join(priv, sub) : pd_strdup(priv)) : NULL;
  if (out && strcmp(out, priv) != 0 && mkdir(out, 0700) != 0 && errno != EEXIST) {
    snprintf(err, errlen, "cannot create %s: %s", out, strerror(errno));
    free(out);
    out = NULL;
  }
  if (out && !noted_before(bad ? bad : "")) {
    if (bad)
      fprintf(stderr, "pd2bw: note: not using the cache directory %s: %s; compiling into the private directory %s "
              "for this run (removed at exit)\n", bad, why, priv);
    else
      fprintf(stderr, "pd2bw: note: no cache directory: %s; compiling into the private directory %s for this run "
              "(removed at exit)\n", why, priv);
  }
  pthread_mutex_unlock(&lock);
  free(base);
  free(dir);
  return out;
}
