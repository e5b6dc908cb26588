/* ir/diag.c — user diagnostics: "file:line:col: error: ..." plus the source line
 * and a caret under the column, in the form gcc and clang users read every day.
 * The sink only prints and counts; it never exits, so a caller can report many
 * errors and still guarantee that nothing is written when any occurred. */
#include "ir/ir.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

void diag_init(Diag *d, FILE *out) {
  memset(d, 0, sizeof *d);
  d->out = out ? out : stderr;
  d->max_errors = 20;
}

void diag_add_source(Diag *d, const Source *s) {
  if (d->nsources < (int)(sizeof d->sources / sizeof d->sources[0]))
    d->sources[d->nsources++] = s;
}

static const Source *find_source(const Diag *d, const char *file) {
  for (int i = d->nsources - 1; i >= 0; i--)
    if (d->sources[i]->path == file || strcmp(d->sources[i]->path, file) == 0)
      return d->sources[i];
  return NULL;
}

/* The length of the printable UTF-8 character at p[0 .. n) (1 for printable ASCII),
 * or 0 for anything a terminal could act on or choke on: control bytes (C0, DEL,
 * and the C1 range U+0080..U+009F, whose CSI starts escape sequences), bytes that
 * are not well-formed UTF-8 (overlong, surrogates, past U+10FFFF, cut short). */
static int printable_char(const unsigned char *p, size_t n) {
  unsigned c = p[0];
  if (c < 0x80) return c >= 0x20 && c != 0x7f ? 1 : 0;
  int len = c >= 0xc2 && c <= 0xdf ? 2 : c >= 0xe0 && c <= 0xef ? 3 : c >= 0xf0 && c <= 0xf4 ? 4 : 0;
  if (len == 0 || (size_t)len > n) return 0;
  unsigned cp = c & (0x7fu >> len);
  for (int i = 1; i < len; i++) {
    if ((p[i] & 0xc0) != 0x80) return 0;
    cp = cp << 6 | (p[i] & 0x3fu);
  }
  bool shortest = (len == 2 && cp >= 0x80) || (len == 3 && cp >= 0x800) || (len == 4 && cp >= 0x10000);
  if (!shortest || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff) || (cp >= 0x80 && cp <= 0x9f)) return 0;
  return len;
}

/* Prints the source line of loc and a caret under its column. Tabs are kept in
 * the padding so the caret lines up in a terminal; printable UTF-8 is echoed as it
 * is, every other byte (binary junk, escape sequences) as '?', one column each. */
static void show_line(const Diag *d, Loc loc) {
  const Source *s = find_source(d, loc.file);
  if (!s || loc.line < 1) return;
  const char *p = s->text, *end = s->text + s->len;
  for (int line = 1; line < loc.line && p < end; p++)
    if (*p == '\n') line++;
  if (p >= end && loc.line > 1) return;
  const char *eol = p;
  while (eol < end && *eol != '\n') eol++;
  int width = (int)(eol - p);
  if (width > 200) width = 200; /* a minified or binary line is not worth printing */
  const unsigned char *u = (const unsigned char *)p;
  fputs("  ", d->out);
  for (int i = 0; i < width;) {
    int n = u[i] == '\t' ? 1 : printable_char(u + i, (size_t)(width - i));
    if (n == 0) fputc('?', d->out);
    else fwrite(u + i, 1, (size_t)n, d->out);
    i += n ? n : 1;
  }
  fputs("\n  ", d->out);
  /* the caret under byte column loc.col: one pad per character echoed before it */
  for (int i = 0; i < loc.col - 1 && i < width;) {
    int n = u[i] == '\t' ? 1 : printable_char(u + i, (size_t)(width - i));
    fputc(u[i] == '\t' ? '\t' : ' ', d->out);
    i += n ? n : 1;
  }
  fputs("^\n", d->out);
}

static void report(Diag *d, Loc loc, const char *kind, const char *fmt, va_list ap)
    __attribute__((format(printf, 4, 0)));
static void report(Diag *d, Loc loc, const char *kind, const char *fmt, va_list ap) {
  if (loc.file && loc.line > 0)
    fprintf(d->out, "%s:%d:%d: %s: ", loc.file, loc.line, loc.col, kind);
  else if (loc.file)
    fprintf(d->out, "%s: %s: ", loc.file, kind);
  else
    fprintf(d->out, "pd2bw: %s: ", kind);
  vfprintf(d->out, fmt, ap);
  fputc('\n', d->out);
  if (loc.file && loc.line > 0) show_line(d, loc);
}

void diag_verror(Diag *d, Loc loc, const char *fmt, va_list ap) {
  d->nerrors++;
  int max = d->max_errors > 0 ? d->max_errors : 20;
  if (d->nerrors > max) return;
  report(d, loc, "error", fmt, ap);
  if (d->nerrors == max) fprintf(d->out, "pd2bw: too many errors, stopping here\n");
}

void diag_error(Diag *d, Loc loc, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  diag_verror(d, loc, fmt, ap);
  va_end(ap);
}

void diag_note(Diag *d, Loc loc, const char *fmt, ...) {
  int max = d->max_errors > 0 ? d->max_errors : 20;
  if (d->nerrors > max) return;
  va_list ap;
  va_start(ap, fmt);
  report(d, loc, "note", fmt, ap);
  va_end(ap);
}

bool source_read(Arena *a, Diag *d, const char *path, Source *out) {
  /* O_NONBLOCK, then fstat: a FIFO is refused, not waited on in open() (runtime/io's
   * io_open_regular does the same for every runtime input) */
  int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  Loc where = {path, 0, 0};
  struct stat st;
  if (fd >= 0 && fstat(fd, &st) == 0 && !S_ISREG(st.st_mode)) {
    diag_error(d, where, "cannot open: %s, not a regular file",
               S_ISFIFO(st.st_mode) ? "a FIFO" : S_ISDIR(st.st_mode) ? "a directory" : "a device or special file");
    close(fd);
    return false;
  }
  int flags = fd >= 0 ? fcntl(fd, F_GETFL) : -1;
  FILE *f = flags >= 0 && fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) == 0 ? fdopen(fd, "rb") : NULL;
  if (!f) {
    diag_error(d, where, "cannot open: %s", strerror(errno));
    if (fd >= 0) close(fd);
    return false;
  }
  size_t cap = 4096, len = 0;
  char *buf = pd_malloc(cap);
  for (;;) {
    if (len + 1 >= cap) buf = pd_realloc(buf, cap *= 2);
    size_t n = fread(buf + len, 1, cap - len - 1, f);
    len += n;
    if (n == 0) break;
  }
  bool failed = ferror(f);
  fclose(f);
  if (failed) {
    free(buf);
    diag_error(d, where, "read failed");
    return false;
  }
  char *text = arena_alloc(a, len + 1);
  memcpy(text, buf, len);
  free(buf);
  out->path = arena_strdup(a, path);
  out->text = text;
  out->len = len;
  return true;
}
