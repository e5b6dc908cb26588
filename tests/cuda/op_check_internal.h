/* tests/cuda/op_check_internal.h — what the op-check files share (op_check.c: the
 * helpers and most checks; op_check_flash.c: the tensor-core attention; op_check_gqa.c:
 * grouped-query attention; op_check_vec.c:
 * the elementwise kernels' 128-bit and scalar paths; op_check_sum.c: the ordered sum). */
#ifndef PD2BW_TESTS_OP_CHECK_INTERNAL_H
#define PD2BW_TESTS_OP_CHECK_INTERNAL_H

#include <stdbool.h>

#include "op_check.h"

typedef struct Ctx {
  const OpDev *d;
  const char *only;
  int verbose;
  int nfail, nrun;
  uint64_t rng;
} Ctx;

uint64_t oc_next_u64(Ctx *c);
float oc_frand(Ctx *c);                       /* uniform in [-1, 1) */
float *oc_rvec(Ctx *c, size_t n, float scale); /* n uniform values in [-scale, scale) */
float *oc_zvec(size_t n);                      /* n zeros */
DevPtr oc_up(Ctx *c, const void *h, size_t bytes);
void oc_down(Ctx *c, void *h, DevPtr p, size_t bytes);
/* The grid the code generator would use (pkc_grid), capped by the device's max_grid. */
unsigned oc_grid_for(Ctx *c, const char *kernel, int64_t items);
/* Whether the family runs; resets the device's arena when it does. */
bool oc_want(Ctx *c, const char *family);
double oc_rel_err(const float *g, const float *r, size_t n);
void oc_report(Ctx *c, const char *name, double err, double bound);
void oc_check_vec(Ctx *c, const char *name, DevPtr g, const float *ref, size_t n, double bound);
void oc_report_exact(Ctx *c, const char *name, bool ok, const char *detail);

/* items: work items, rows or columns, by the kernel's launch kind. */
#define LAUNCH(c, kernel, items, ...)                                                              \
  (c)->d->launch((c)->d->ctx, kernel, oc_grid_for((c), kernel, (items)), (c)->d->block,               \
                 (void *[]){__VA_ARGS__})
/* The same with an explicit block size (kernels that need one). */
#define LAUNCH_BLOCK(c, kernel, items, block, ...)                                                 \
  (c)->d->launch((c)->d->ctx, kernel, oc_grid_for((c), kernel, (items)), (block),               \
                 (void *[]){__VA_ARGS__})

void op_check_flash(Ctx *c); /* op_check_flash.c */
void op_check_gqa(Ctx *c);   /* op_check_gqa.c */
void op_check_vec(Ctx *c);   /* op_check_vec.c */
void op_check_sum(Ctx *c);   /* op_check_sum.c */

#endif /* PD2BW_TESTS_OP_CHECK_INTERNAL_H */
