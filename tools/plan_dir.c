/* tools/plan_dir.c — see plan_dir.h. */
#define _GNU_SOURCE /* syscall(SYS_getdents64) for the signal-time removal */
#include "tools/plan_dir.h"
#include "passes/passes.h"
#include "runtime/io/io.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

char *plan_dir_normalize(const char *dir) {
  char *p = pd_strdup(dir);
  size_t n = strlen(p);
  while (n > 1 && p[n - 1] == '/') p[--n] = 0;
  return p;
}

/* ---- what may be replaced ------------------------------------------------------- */

/* plan.json names pd2bwc as its compiler (every plan has since the first driver). */
static bool is_pd2bw_plan(const char *dir) {
  char *path = io_join(dir, "plan.json"), ierr[IO_ERR_LEN];
  size_t n;
  char *text = io_read_all(path, &n, ierr, sizeof ierr);
  free(path);
  if (!text) return false;
  cJSON *root = cJSON_ParseWithLength(text, n);
  free(text);
  const cJSON *c = cJSON_GetObjectItemCaseSensitive(root, "compiler");
  bool ok = cJSON_IsObject(root) && cJSON_IsString(c) && strncmp(c->valuestring, "pd2bwc ", 7) == 0;
  cJSON_Delete(root);
  return ok;
}

/* A name pd2bwc writes into a plan directory (docs/plan-format.md, "Files"), or the
 * temporary name one is written under (codegen's NAME.tmp.PID). `ref`: inside
 * reference/, the one-stage plan (plan.json and stage0.c). */
static bool ours(const char *name, bool ref) {
  static const char *const fixed[] = {"plan.json", "schedule.txt", "memory.txt", "timeline.json",
                                      "timeline.svg", "report.html", "kernels.cu"};
  const char *t = strstr(name, ".tmp.");
  if (t && t > name && t[5] && strspn(t + 5, "0123456789") == strlen(t + 5)) return true;
  if (ref) return !strcmp(name, "plan.json") || !strcmp(name, "stage0.c");
  for (size_t k = 0; k < sizeof fixed / sizeof fixed[0]; k++)
    if (!strcmp(name, fixed[k])) return true;
  size_t digits = strncmp(name, "stage", 5) == 0 ? strspn(name + 5, "0123456789") : 0;
  const char *rest = name + 5 + digits;
  return digits > 0 && (!strcmp(rest, ".c") || !strcmp(rest, ".cu") || !strcmp(rest, ".launch.json"));
}

/* The entries of dir (a plan directory; `ref`: its reference/) that pd2bwc did not
 * write, appended to *list ("a, b, ..."); their count. A directory other than
 * reference/, or anything but a regular file, is not ours. */
static int foreign_entries(const char *dir, const char *prefix, bool ref, char *list, size_t n) {
  DIR *d = opendir(dir);
  if (!d) return 0;
  int count = 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
    char *path = io_join(dir, e->d_name);
    struct stat st;
    bool isdir = lstat(path, &st) == 0 && S_ISDIR(st.st_mode), isreg = !isdir && S_ISREG(st.st_mode);
    if (!ref && isdir && !strcmp(e->d_name, "reference")) {
      count += foreign_entries(path, "reference/", true, list, n);
    } else if (!isreg || !ours(e->d_name, ref)) {
      size_t at = strlen(list);
      if (count < 6 && at + 8 < n)
        snprintf(list + at, n - at, "%s%s%s%s", at ? ", " : "", prefix, e->d_name, isdir ? "/" : "");
      count++;
    }
    free(path);
  }
  closedir(d);
  return count;
}

static bool is_empty_dir(const char *dir) {
  DIR *d = opendir(dir);
  if (!d) return false;
  struct dirent *e;
  bool empty = true;
  while (empty && (e = readdir(d)) != NULL) empty = !strcmp(e->d_name, ".") || !strcmp(e->d_name, "..");
  closedir(d);
  return empty;
}

bool plan_dir_check_output(const char *given) {
  char *dir = plan_dir_normalize(given);
  struct stat st;
  const char *why = NULL;
  int lerr = lstat(dir, &st) == 0 ? 0 : errno;
  if (lerr == ENOENT) why = NULL;
  else if (lerr) why = strerror(lerr);
  else if (S_ISLNK(st.st_mode)) why = "is a symbolic link (not replacing it; give the directory it points to)";
  else if (!S_ISDIR(st.st_mode)) why = "exists and is not a directory (not replacing it)";
  else if (!is_empty_dir(dir) && !is_pd2bw_plan(dir)) why = "exists and is not a pd2bw plan directory (not replacing it)";
  char list[600] = "";
  int foreign = !lerr && !why && S_ISDIR(st.st_mode) ? foreign_entries(dir, "", false, list, sizeof list) : 0;
  free(dir);
  if (why) fprintf(stderr, "pd2bwc: -o %s: %s\n", given, why);
  if (foreign)
    fprintf(stderr, "pd2bwc: -o %s: holds %d file%s pd2bwc did not write (%s%s): not replacing it (move %s "
            "elsewhere, or give another directory)\n", given, foreign, foreign > 1 ? "s" : "", list,
            foreign > 6 ? ", ..." : "", foreign > 1 ? "them" : "it");
  return why == NULL && foreign == 0;
}

/* ---- removal ---------------------------------------------------------------------- */

static int remove_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
  (void)sb, (void)flag, (void)ftw;
  return remove(path);
}

void plan_dir_remove_tree(const char *path) { nftw(path, remove_entry, 16, FTW_DEPTH | FTW_PHYS); }

/* Removes `name` under parent, a directory tree or a file, with async-signal-safe
 * calls only (open, getdents64, unlinkat, close; no malloc, no stdio): it runs in
 * the signal handler below. A plan is two levels deep; depth stops runaway. */
static void remove_tree_at(int parent, const char *name, int depth) {
  int fd = openat(parent, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) {
    unlinkat(parent, name, 0);
    return;
  }
  /* Removing entries while reading the directory may make the reader skip some:
   * read again from the start until a pass removes nothing. */
  for (bool again = true; again;) {
    again = false;
    lseek(fd, 0, SEEK_SET);
    char buf[4096] __attribute__((aligned(8)));
    long n;
    while ((n = syscall(SYS_getdents64, fd, buf, sizeof buf)) > 0) {
      for (long off = 0; off < n;) {
        /* struct linux_dirent64: ino 8, off 8, reclen 2, type 1, name */
        unsigned short reclen;
        memcpy(&reclen, buf + off + 16, sizeof reclen);
        unsigned char type = (unsigned char)buf[off + 18];
        const char *e = buf + off + 19;
        off += reclen;
        if (e[0] == '.' && (e[1] == 0 || (e[1] == '.' && e[2] == 0))) continue;
        if (type == DT_DIR && depth < 8) remove_tree_at(fd, e, depth + 1);
        else if (unlinkat(fd, e, 0) != 0 && errno == EISDIR && depth < 8) remove_tree_at(fd, e, depth + 1);
        again = true;
      }
    }
  }
  close(fd);
  unlinkat(parent, name, AT_REMOVEDIR);
}

/* ---- signals while the plan is being written ---------------------------------------
 * A compile takes from milliseconds to minutes, most of it writing into DIR.tmp.PID;
 * blocking SIGINT for all of it would make Ctrl-C wait for the end. So the handler
 * removes the temporary directory itself, with the async-signal-safe calls of
 * remove_tree_at, then dies of the same signal (default action, re-raised) so the
 * parent sees what happened. The commit's two renames, where a signal could leave the
 * old plan moved aside and the new one not yet in place, run with the signals
 * blocked. SIGKILL cannot be caught: the next run's sweep (plan_dir_begin) removes
 * what it leaves. Signals ignored at start (nohup) stay ignored. */

static const int caught[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGABRT};
#define NCAUGHT ((int)(sizeof caught / sizeof caught[0]))
static struct sigaction previous[NCAUGHT];
static char armed_path[4096];
static volatile sig_atomic_t armed;

static void on_signal(int sig) {
  if (armed) remove_tree_at(AT_FDCWD, armed_path, 0);
  armed = 0;
  signal(sig, SIG_DFL);
  raise(sig); /* delivered when the handler returns, sig being blocked in it */
}

static void block_signals(bool block, sigset_t *old) {
  sigset_t s;
  sigemptyset(&s);
  for (int i = 0; i < NCAUGHT; i++) sigaddset(&s, caught[i]);
  sigprocmask(block ? SIG_BLOCK : SIG_SETMASK, block ? &s : old, block ? old : NULL);
}

static void arm(const char *tmp) {
  if (strlen(tmp) >= sizeof armed_path) return; /* left to the next run's sweep */
  memcpy(armed_path, tmp, strlen(tmp) + 1);
  armed = 1;
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  for (int i = 0; i < NCAUGHT; i++) sigaddset(&sa.sa_mask, caught[i]); /* one handler at a time */
  for (int i = 0; i < NCAUGHT; i++) {
    sigaction(caught[i], NULL, &previous[i]);
    if (previous[i].sa_handler != SIG_IGN) sigaction(caught[i], &sa, NULL);
  }
}

static void disarm(void) {
  if (!armed) return;
  sigset_t old;
  block_signals(true, &old);
  armed = 0;
  for (int i = 0; i < NCAUGHT; i++) sigaction(caught[i], &previous[i], NULL);
  block_signals(false, &old);
}

/* ---- stale siblings --------------------------------------------------------------- */

/* Removes DIR.tmp.PID and DIR.old.PID beside dir whose process is dead: a compile
 * killed by SIGKILL (or a crash) leaves them, 5-51 MB each. A DIR.old.PID is the
 * previous plan moved aside by a commit that never finished; with no DIR it is put
 * back instead. Only names of exactly that form, and only directories. */
static void sweep_stale(const char *dir) {
  const char *slash = strrchr(dir, '/');
  char *parent = slash ? pd_strdup(dir) : pd_strdup(".");
  if (slash) parent[slash == dir ? 1 : slash - dir] = 0;
  const char *base = slash ? slash + 1 : dir;
  size_t blen = strlen(base);
  DIR *d = opendir(parent);
  if (!d) {
    free(parent);
    return;
  }
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    if (strncmp(e->d_name, base, blen) != 0) continue;
    bool old = false;
    long pid = stale_tmp_pid(e->d_name, blen, ".tmp.", false);
    if (pid < 0) old = (pid = stale_tmp_pid(e->d_name, blen, ".old.", false)) >= 0;
    if (pid < 0 || pid == (long)getpid() || !stale_tmp_pid_dead(pid)) continue;
    char *path = io_join(parent, e->d_name);
    struct stat st;
    if (lstat(path, &st) == 0 && S_ISDIR(st.st_mode)) {
      if (!old || lstat(dir, &st) == 0 || rename(path, dir) != 0) plan_dir_remove_tree(path);
    }
    free(path);
  }
  closedir(d);
  free(parent);
}

/* ---- the plan directory ------------------------------------------------------------ */

char *plan_dir_begin(const char *given, Diag *d) {
  char *dir = plan_dir_normalize(given);
  sweep_stale(dir);
  size_t n = strlen(dir) + 32;
  char *tmp = pd_malloc(n);
  snprintf(tmp, n, "%s.tmp.%ld", dir, (long)getpid());
  plan_dir_remove_tree(tmp); /* a leftover from a crashed run with the same pid */
  arm(tmp);
  if (mkdir(tmp, 0777) != 0) {
    diag_error(d, (Loc){given, 0, 0}, "cannot create the plan directory: %s", strerror(errno));
    disarm();
    free(tmp);
    tmp = NULL;
  }
  free(dir);
  return tmp;
}

bool plan_dir_write_json(const char *tmp, const char *name, cJSON *root, Diag *d) {
  plan_json_sort(root);
  char *text = cJSON_Print(root);
  PD_CHECK(text != NULL, "(cJSON_Print)");
  char *path = io_join(tmp, name);
  FILE *f = fopen(path, "wb");
  bool ok = f && fputs(text, f) >= 0 && fputc('\n', f) != EOF;
  if (f && fclose(f) != 0) ok = false;
  if (!ok) diag_error(d, (Loc){path, 0, 0}, "cannot write: %s", strerror(errno));
  free(path);
  free(text);
  return ok;
}

void plan_dir_abort(const char *tmp) {
  plan_dir_remove_tree(tmp);
  disarm();
}

bool plan_dir_commit(const char *tmp, const char *given, Diag *d) {
  /* checked again: the directory may have changed during the compile */
  if (!plan_dir_check_output(given)) return false;
  char *dir = plan_dir_normalize(given), *old = NULL;
  sigset_t mask;
  block_signals(true, &mask);
  bool ok = true;
  struct stat st;
  if (lstat(dir, &st) == 0) {
    size_t n = strlen(dir) + 32;
    old = pd_malloc(n);
    snprintf(old, n, "%s.old.%ld", dir, (long)getpid());
    plan_dir_remove_tree(old);
    if (rename(dir, old) != 0) {
      diag_error(d, (Loc){given, 0, 0}, "cannot move the previous plan aside: %s", strerror(errno));
      ok = false;
    }
  }
  if (ok && rename(tmp, dir) != 0) {
    diag_error(d, (Loc){given, 0, 0}, "cannot move the new plan into place: %s", strerror(errno));
    if (old && rename(old, dir) != 0) { /* put the old plan back; nothing else to do */ }
    ok = false;
  }
  if (ok) armed = 0; /* tmp is the plan now: a signal must not remove it */
  block_signals(false, &mask);
  if (ok && old) plan_dir_remove_tree(old);
  if (ok) disarm();
  free(old);
  free(dir);
  return ok;
}
