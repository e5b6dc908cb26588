/* tests/data/test_util.h — scratch files for the runtime I/O tests.
 *
 * Each test binary works in its own fresh directory under $TMPDIR (or /tmp),
 * removed at the end when everything passed (kept for a post-mortem otherwise).
 */
#ifndef PD2BW_TESTS_DATA_UTIL_H
#define PD2BW_TESTS_DATA_UTIL_H

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char tmp_dir_[512];

static inline void tmp_init(const char *name) {
  const char *base = getenv("TMPDIR");
  snprintf(tmp_dir_, sizeof tmp_dir_, "%s/pd2bw-%s-XXXXXX", base && *base ? base : "/tmp", name);
  if (!mkdtemp(tmp_dir_)) {
    perror("mkdtemp");
    exit(2);
  }
}

/* "<tmpdir>/name" in a rotating static buffer (8 live at a time). */
static inline const char *tmp_path(const char *name) {
  static char bufs[8][1024];
  static int k;
  char *b = bufs[k++ % 8];
  snprintf(b, sizeof bufs[0], "%s/%s", tmp_dir_, name);
  return b;
}

static inline void write_bytes(const char *path, const void *p, size_t n) {
  FILE *f = fopen(path, "wb");
  if (!f || fwrite(p, 1, n, f) != n || fclose(f) != 0) {
    perror(path);
    exit(2);
  }
}

/* Number of entries in the scratch directory (to prove no temp file is left). */
static inline int tmp_count(void) {
  DIR *d = opendir(tmp_dir_);
  int n = 0;
  for (struct dirent *e; d && (e = readdir(d));) n += e->d_name[0] != '.';
  if (d) closedir(d);
  return n;
}

static inline void tmp_cleanup(int failed) {
  if (failed) {
    fprintf(stderr, "scratch files kept in %s\n", tmp_dir_);
    return;
  }
  DIR *d = opendir(tmp_dir_);
  for (struct dirent *e; d && (e = readdir(d));)
    if (e->d_name[0] != '.') unlink(tmp_path(e->d_name));
  if (d) closedir(d);
  rmdir(tmp_dir_);
}

/* err contains every one of the NULL-terminated substrings. */
static inline int contains_all(const char *err, const char *const *subs) {
  for (; *subs; subs++)
    if (!strstr(err, *subs)) {
      fprintf(stderr, "  message \"%s\" lacks \"%s\"\n", err, *subs);
      return 0;
    }
  return 1;
}
#define EXPECT_MSG(err, ...) EXPECT(contains_all((err), (const char *const[]){__VA_ARGS__, NULL}))

#endif
