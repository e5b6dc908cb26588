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

/* The one op reading tensor t, when it is one of L's ops; -1 when t has no reader, or
 * several (a fusion may only swallow a tensor nobody else reads). */
int cgen_sole_consumer(const Graph *g, const StageLayout *L, int t);

/* stages[i] of plan.json's "stages" array, created ({"index": i}) when missing: the C
 * and CUDA generators each add their part to the same element. */
cJSON *cgen_stage_element(cJSON *stages, int i);

#endif
