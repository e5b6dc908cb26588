/* passes/layout_internal.h — what the layout's files share (private): layout.c (the
 * stage's ops and tensors, classes, accumulation, fixed offsets) and layout_work.c
 * (bf16 storage, the WORK linear scan and the aliases' places) work on one StageLocal.
 *
 * Everything is indexed by a local slot (ix->slot[t]: the tensors the stage touches,
 * in ascending id order), so one stage costs O(its ops and tensors); the whole-graph
 * facts come from the LayoutIndex. Aliases are tensor ids, as in StageLayout. */
#ifndef PD2BW_PASSES_LAYOUT_INTERNAL_H
#define PD2BW_PASSES_LAYOUT_INTERNAL_H

#include "passes/layout.h"

typedef struct StageLocal {
  const LayoutIndex *ix;
  int first, last;
  int64_t b;
  int *order, nfwd, nbwd;        /* the stage's forward op ids, then its backward ones */
  int n, *tens;                  /* touched tensor ids, ascending; slot k is tens[k] */
  TensorPlace *pl;               /* per slot */
  int64_t *scratch_off, *scratch_bytes; /* per position in order */
  int *params, nparams;          /* parameter indices held, in PARAMS order */
  int64_t total[BUF_CLASS_COUNT];
  int loss;
  int cls_grad;                  /* layout_classifier_grad's choice, -1: none */
} StageLocal;

static inline int64_t layout_align_up(int64_t x) { return (x + LAYOUT_ALIGN - 1) / LAYOUT_ALIGN * LAYOUT_ALIGN; }
static inline int slot_of(const StageLocal *S, int t) { return S->ix->slot[t]; }
static inline TensorPlace *place_of(const StageLocal *S, int t) { return &S->pl[S->ix->slot[t]]; }
static inline int alias_root(const StageLocal *S, int t) {
  while (place_of(S, t)->alias >= 0) t = place_of(S, t)->alias;
  return t;
}

/* layout_work.c. With ix->bf16: every float32 tensor of STASH or BOUNDARY but the
 * statistics (attention's lse, softmax's probabilities) and the loss is stored as
 * bfloat16 (TensorPlace.bf16, bytes halved). Run after the classes and accumulation
 * are final and before any offset. */
void layout_mark_bf16(StageLocal *S);
/* WORK by liveness (layout.h), the bf16 working places included; `last`: per slot,
 * the position in order of its last use. */
void layout_work_offsets(StageLocal *S, const int *last);
/* Aliases take their target's place (a bf16 target's: its backward working place;
 * the classifier's gradient, S->cls_grad: the logits' stored place itself). */
void layout_alias_places(StageLocal *S);
/* bf16 layouts, after the aliases are chosen and before any offset: sets S->cls_grad
 * (layout.h, "the classifier's gradient in the stash"). */
void layout_classifier_grad(StageLocal *S);

#endif
