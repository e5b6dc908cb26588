/* runtime/io/read_file.c — reading a whole (small) file into memory.
 *
 * For the text-sized inputs (vocab.json, merges.txt, corpus files); large
 * binary inputs (token files, checkpoints) are mapped instead.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "runtime/io/io.h"

char *io_read_all(const char *path, size_t *len, char *err, size_t errlen) {
  FILE *f = fopen(path, "rb");
  if (!f) {
    snprintf(err, errlen, "%s: cannot open: %s", path, strerror(errno));
    return NULL;
  }
  struct stat sb;
  if (fstat(fileno(f), &sb) != 0 || S_ISDIR(sb.st_mode)) {
    snprintf(err, errlen, "%s: cannot read: %s", path,
             S_ISDIR(sb.st_mode) ? "is a directory" : strerror(errno));
    fclose(f);
    return NULL;
  }
  /* Read to EOF rather than trusting st_size: pipes and /proc files lie. */
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
