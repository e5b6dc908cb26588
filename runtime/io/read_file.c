/* runtime/io/read_file.c — opening a file the user named, and reading a whole (small)
 * one into memory.
 *
 * Every input is opened by io_open_regular: O_NONBLOCK, so that a FIFO (or a terminal)
 * named as an input cannot block open() waiting for a writer, where no signal ends
 * the wait when the program handles SIGTERM itself; then fstat, and anything but a
 * regular file is refused before a byte is read. io_read_all is for the text-sized
 * inputs (plans, stage programs, vocab.json, merges.txt, corpus files); large binary
 * inputs (token files, checkpoints) are mapped instead (io_map_file).
 */
#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "runtime/io/io.h"

int io_open_regular(const char *path, struct stat *st_out, char *why, size_t whylen) {
  int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    snprintf(why, whylen, "%s", strerror(errno));
    return IO_CANNOT_OPEN;
  }
  struct stat st;
  int flags = -1;
  if (fstat(fd, &st) != 0 || (S_ISREG(st.st_mode) && ((flags = fcntl(fd, F_GETFL)) < 0 ||
                                                      fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) != 0))) {
    snprintf(why, whylen, "%s", strerror(errno));
    close(fd);
    return IO_CANNOT_OPEN;
  }
  if (!S_ISREG(st.st_mode)) {
    snprintf(why, whylen, "%s, not a regular file", io_file_kind(st.st_mode));
    close(fd);
    return IO_NOT_REGULAR;
  }
  if (st_out) *st_out = st;
  return fd;
}

char *io_read_all(const char *path, size_t *len, char *err, size_t errlen) {
  char why[IO_ERR_LEN];
  struct stat sb;
  int fd = io_open_regular(path, &sb, why, sizeof why);
  FILE *f = fd >= 0 ? fdopen(fd, "rb") : NULL;
  if (!f) {
    snprintf(err, errlen, "%s: cannot open: %s", path, fd >= 0 ? strerror(errno) : why);
    if (fd >= 0) close(fd);
    return NULL;
  }
  /* Read to EOF rather than trusting st_size: a file may grow or shrink meanwhile. */
  size_t cap = sb.st_size > 0 ? (size_t)sb.st_size + 1 : 4096, n = 0;
  char *buf = pd_malloc(cap);
  for (;;) {
    if (n + 1 >= cap) buf = pd_realloc(buf, cap *= 2);
    size_t got = fread(buf + n, 1, cap - n - 1, f);
    n += got;
    if (got == 0) break;
  }
  if (ferror(f)) {
    snprintf(err, errlen, "%s: read error: %s", path, strerror(errno));
    free(buf);
    fclose(f);
    return NULL;
  }
  fclose(f);
  buf[n] = '\0';
  *len = n;
  return buf;
}

void *io_map_file(const char *path, const char *what, size_t min_size, size_t *size, char *err, size_t errlen) {
  char why[IO_ERR_LEN];
  struct stat sb;
  int fd = io_open_regular(path, &sb, why, sizeof why);
  if (fd < 0) {
    *size = SIZE_MAX;
    snprintf(err, errlen, "%s: cannot open %s: %s", path, what, why);
    return NULL;
  }
  *size = (size_t)sb.st_size;
  void *map = *size < min_size ? NULL : mmap(NULL, *size, PROT_READ, MAP_PRIVATE, fd, 0);
  if (map == MAP_FAILED) {
    *size = SIZE_MAX;
    snprintf(err, errlen, "%s: cannot map %s: %s", path, what, strerror(errno));
    map = NULL;
  }
  close(fd);
  return map;
}

char *io_join(const char *dir, const char *name) {
  size_t n = strlen(dir) + strlen(name) + 2;
  char *p = pd_malloc(n);
  snprintf(p, n, "%s/%s", dir, name);
  return p;
}

cJSON *io_read_json_object(const char *path, const char *what, char *err, size_t errlen) {
  size_t len;
  char *text = io_read_all(path, &len, err, errlen);
  if (!text) return NULL;
  const char *end = NULL;
  cJSON *root = cJSON_ParseWithLengthOpts(text, len, &end, false);
  if (!root || !cJSON_IsObject(root)) {
    snprintf(err, errlen, "%s: offset %zu: %s%s", path, end && end >= text ? (size_t)(end - text) : (size_t)0,
             root ? "expected a JSON object" : "malformed JSON", root ? what : "");
    cJSON_Delete(root);
    root = NULL;
  }
  free(text);
  return root;
}
