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

/* cgen_c_entry.c: a C stage program's region functions are named by place,
 * "<dir>_region<k>" (dir "fwd" or "bwd", k the region's position in the stage), so
 * stages running the same code get the same text; cgen_c_entries appends the
 * exported entry points (codegen.h, "The ABI") for nseg segments, has_fwd[k] /
 * has_bwd[k] saying which region functions exist. */
void cgen_c_region_fn(char *b, size_t n, const char *dir, int k);
void cgen_c_entries(Str *s, int nseg, const bool *has_fwd, const bool *has_bwd, bool f64);

/* Writes n bytes to path through path.tmp.<pid> + fsync + rename: the file appears
 * whole or not at all. False after reporting on d. */
bool cgen_write_file(const char *path, const void *p, size_t n, Diag *d);

/* The one op reading tensor t, when it is one of L's ops; -1 when t has no reader, or
 * several (a fusion may only swallow a tensor nobody else reads). */
int cgen_sole_consumer(const Graph *g, const StageLayout *L, int t);

/* cgen_bf16.c, bf16 layouts (L->bf16): L as pass `pass` (0 forward, 1 backward) computes,
 * every bf16 tensor's cls/offset/bytes being its float32 working place of the pass
 * (BUF_NONE when the pass has none; its bf16, work and up kept); *place is the view's
 * array (free it; NULL, and L itself, without bf16). And whether op must be preceded
 * by an upcast (it is the first reader of a stored value in its pass; L or a view): a
 * fused unit may start with such an op, never take one in, since the upcast is emitted
 * before the unit and the working place it writes is only reserved from that op on. */
StageLayout cgen_pass_view(const StageLayout *L, int pass, TensorPlace **place);
bool cgen_needs_upcast(const StageLayout *L, const Op *op);

/* stages[i] of plan.json's "stages" array, created ({"index": i}) when missing: the C
 * and CUDA generators each add their part to the same element. */
cJSON *cgen_stage_element(cJSON *stages, int i);

/* Shared stage files (a deep pipeline's middle stages run the same program):
 * cgen_code_only: the text without its block comments (pd_malloc'd), since comments
 * name each stage's own ops and tensors; cgen_share_owners: owner[i] = the first stage
 * whose text equals text[i] (i itself when none), compared by hash, then in full;
 * cgen_with_sharers: the first stage's file (src, a block comment first) with a line
 * naming the other stages whose owner is `self` (pd_malloc'd). */
char *cgen_code_only(const char *src);
void cgen_share_owners(char *const *text, int n, int *owner);
char *cgen_with_sharers(const char *src, const int *owner, int n, int self);

#endif
