/* ir/support.c — allocation, the arena, and the internal-error path.
 *
 * Everything in pd2bw allocates through pd_malloc & co., so a failed allocation is
 * one PD_CHECK with a location, never a NULL dereference somewhere later. The arena
 * is a list of 64 KiB chunks (larger requests get a chunk of their own); it is freed
 * all at once, which is how AST and IR memory lives: one arena per compilation. */
#include "ir/ir.h"

#include <stdlib.h>
#include <string.h>

void pd_fatal(const char *file, int line, const char *fmt, ...) {
  va_list ap;
  fflush(stdout);
  fprintf(stderr, "pd2bw: internal error at %s:%d: ", file, line);
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fputc('\n', stderr);
  abort();
}

void *pd_malloc(size_t n) {
  void *p = malloc(n ? n : 1);
  PD_CHECK(p != NULL, "(malloc of %zu bytes)", n);
  return p;
}

void *pd_calloc(size_t n, size_t size) {
  void *p = calloc(n ? n : 1, size ? size : 1);
  PD_CHECK(p != NULL, "(calloc of %zu x %zu bytes)", n, size);
  return p;
}

void *pd_realloc(void *p, size_t n) {
  void *q = realloc(p, n ? n : 1);
  PD_CHECK(q != NULL, "(realloc to %zu bytes)", n);
  return q;
}

char *pd_strdup(const char *s) {
  size_t n = strlen(s) + 1;
  char *p = pd_malloc(n);
  memcpy(p, s, n);
  return p;
}

/* ---- arena ---------------------------------------------------------------- */

typedef struct Chunk Chunk;
struct Chunk {
  Chunk *next;
  size_t used, cap;
  _Alignas(16) unsigned char data[];
};

struct Arena {
  Chunk *head;
};

enum { ARENA_CHUNK = 64 * 1024 };

Arena *arena_create(void) { return pd_calloc(1, sizeof(Arena)); }

void arena_destroy(Arena *a) {
  if (!a) return;
  for (Chunk *c = a->head, *next; c; c = next) {
    next = c->next;
    free(c);
  }
  free(a);
}

void *arena_alloc(Arena *a, size_t n) {
  n = (n + 15) & ~(size_t)15;
  Chunk *c = a->head;
  if (!c || c->cap - c->used < n) {
    size_t cap = n > ARENA_CHUNK ? n : ARENA_CHUNK;
    c = pd_malloc(sizeof(Chunk) + cap);
    c->used = 0;
    c->cap = cap;
    c->next = a->head;
    a->head = c;
  }
  void *p = c->data + c->used;
  c->used += n;
  memset(p, 0, n);
  return p;
}

char *arena_strdup(Arena *a, const char *s) {
  size_t n = strlen(s) + 1;
  char *p = arena_alloc(a, n);
  memcpy(p, s, n);
  return p;
}

char *arena_printf(Arena *a, const char *fmt, ...) {
  va_list ap, ap2;
  va_start(ap, fmt);
  va_copy(ap2, ap);
  int n = vsnprintf(NULL, 0, fmt, ap);
  va_end(ap);
  PD_CHECK(n >= 0);
  char *p = arena_alloc(a, (size_t)n + 1);
  vsnprintf(p, (size_t)n + 1, fmt, ap2);
  va_end(ap2);
  return p;
}
