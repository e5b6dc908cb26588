/* tools/plan_dir.c — see plan_dir.h. */
#define _XOPEN_SOURCE 700
#include "tools/plan_dir.h"
#include "passes/passes.h"

#include <dirent.h>
#include <errno.h>
#include <ftw.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char *path_join(const char *a, const char *b) {
  size_t n = strlen(a) + strlen(b) + 2;
  char *p = pd_malloc(n);
  snprintf(p, n, "%s/%s", a, b);
  return p;
}

char *plan_dir_begin(const char *dir, Diag *d) {
  size_t n = strlen(dir) + 32;
  char *tmp = pd_malloc(n);
  snprintf(tmp, n, "%s.tmp.%ld", dir, (long)getpid());
  plan_dir_abort(tmp); /* a leftover from a crashed run with the same pid */
  if (mkdir(tmp, 0777) != 0) {
    diag_error(d, (Loc){dir, 0, 0}, "cannot create the plan directory: %s", strerror(errno));
    free(tmp);
    return NULL;
  }
  return tmp;
}

bool plan_dir_write_json(const char *tmp, const char *name, cJSON *root, Diag *d) {
  plan_json_sort(root);
  char *text = cJSON_Print(root);
  PD_CHECK(text != NULL, "(cJSON_Print)");
  char *path = path_join(tmp, name);
  FILE *f = fopen(path, "wb");
  bool ok = f && fputs(text, f) >= 0 && fputc('\n', f) != EOF;
  if (f && fclose(f) != 0) ok = false;
  if (!ok) diag_error(d, (Loc){path, 0, 0}, "cannot write: %s", strerror(errno));
  free(path);
  free(text);
  return ok;
}

static int remove_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
  (void)sb, (void)flag, (void)ftw;
  return remove(path);
}

void plan_dir_abort(const char *tmp) { nftw(tmp, remove_entry, 16, FTW_DEPTH | FTW_PHYS); }

bool plan_dir_commit(const char *tmp, const char *dir, Diag *d) {
  struct stat st;
  char *old = NULL;
  if (lstat(dir, &st) == 0) {
    if (!S_ISDIR(st.st_mode)) {
      diag_error(d, (Loc){dir, 0, 0}, "exists and is not a directory; not replacing it");
      return false;
    }
    size_t n = strlen(dir) + 32;
    old = pd_malloc(n);
    snprintf(old, n, "%s.old.%ld", dir, (long)getpid());
    plan_dir_abort(old);
    if (rename(dir, old) != 0) {
      diag_error(d, (Loc){dir, 0, 0}, "cannot move the previous plan aside: %s", strerror(errno));
      free(old);
      return false;
    }
  }
  if (rename(tmp, dir) != 0) {
    diag_error(d, (Loc){dir, 0, 0}, "cannot move the new plan into place: %s", strerror(errno));
    if (old && rename(old, dir) != 0) { /* put the old plan back; nothing else to do */ }
    free(old);
    return false;
  }
  if (old) plan_dir_abort(old);
  free(old);
  return true;
}
