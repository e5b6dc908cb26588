/* codegen/cgen_internal.h — what the files of codegen/ share (private). */
#ifndef PD2BW_CGEN_INTERNAL_H
#define PD2BW_CGEN_INTERNAL_H

#include <stdarg.h>

#include "codegen/codegen.h"

/* A growable, NUL-terminated string (pd_realloc'd; free(p) when done). */
typedef struct Str {
  char *p;
  size_t n, cap;
} Str;

void str_printf(Str *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Writes n bytes to path through path.tmp.<pid> + fsync + rename: the file appears
 * whole or not at all. False after reporting on d. */
bool cgen_write_file(const char *path, const void *p, size_t n, Diag *d);

#endif
