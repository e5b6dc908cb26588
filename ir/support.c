/* ir/support.c — allocation, the arena, and the internal-error path.
 *
 * Everything in pd2bw allocates through pd_malloc & co., so a failed allocation is
 * one "out of memory" message with its size and location and exit status 1, never a
 * NULL dereference somewhere later. The arena
 * is a list of 64 KiB chunks (larger requests get a chunk of their own); it is freed
 * all at once, which is how AST and IR memory lives: one arena per compilation. */
#define _GNU_SOURCE /* program_invocation_short_name */
#include "ir/ir.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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

void pd_out_of_memory(size_t bytes, const char *what, const char *file, int line) {
  /* stderr is unbuffered and these conversions allocate nothing */
  fflush(stdout);
  const char *prog = program_invocation_short_name;
  char mib[32] = "";
  if (bytes >= (1 << 20)) snprintf(mib, sizeof mib, " (%.1f MiB)", (double)bytes / (1 << 20));
  if (bytes)
    fprintf(stderr, "%s: error: out of memory allocating %zu bytes%s%s%s (at %s:%d)\n", prog, bytes, mib,
            what ? " for " : "", what ? what : "", file, line);
  else
    fprintf(stderr, "%s: error: out of memory%s%s (at %s:%d)\n", prog, what ? " " : "", what ? what : "", file, line);
  /* _exit, not exit: exit runs library destructors, and OpenBLAS's joins its worker
   * threads, which may be the ones stuck retrying an allocation. */
  _exit(1);
}

void *pd_malloc_at(size_t n, const char *file, int line) {
  void *p = malloc(n ? n : 1);
  if (!p) pd_out_of_memory(n, NULL, file, line);
  return p;
}

/* cJSON (plan.json, launch lists, profiles, the compiler's outputs) returns NULL both
 * for bad input and when its malloc fails, and its callers take NULL for bad input
 * (or a bug). Routing its allocations here makes a failed one what every other is:
 * "out of memory", exit 1. Installed before main, so no cJSON call precedes it. */
static void *cjson_malloc(size_t n) {
  void *p = malloc(n ? n : 1);
  if (!p) pd_out_of_memory(n, "a JSON document (cJSON)", __FILE__, __LINE__);
  return p;
}

__attribute__((constructor)) static void route_cjson_allocations(void) {
  cJSON_Hooks h = {.malloc_fn = cjson_malloc, .free_fn = free};
  cJSON_InitHooks(&h);
}

void *pd_calloc_at(size_t n, size_t size, const char *file, int line) {
  void *p = calloc(n ? n : 1, size ? size : 1);
  if (!p) pd_out_of_memory(n > SIZE_MAX / (size ? size : 1) ? SIZE_MAX : n * size, NULL, file, line);
  return p;
}

void *pd_realloc_at(void *p, size_t n, const char *file, int line) {
  void *q = realloc(p, n ? n : 1);
  if (!q) pd_out_of_memory(n, NULL, file, line);
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
