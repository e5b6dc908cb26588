/* codegen/cgen_boundary.c — what crosses each stage's boundaries, for the pipeline
 * executor (compile side; pd2bwc calls it after codegen_c_stages).
 *
 * A stage program reads and writes tensors at fixed offsets of its blocks, but the
 * stage JSON says nothing about the tensors another stage produces or consumes. This
 * pass walks the graph once per stage and lists each such tensor with its role
 * (act_in, act_out, grad_in, grad_out: docs/plan-format.md, "The stage program"), its
 * block and offset, under the stage program's "pipeline": {"boundary": [...]}.
 * Invariants: offsets come from the same layout_stage() call codegen used, so they
 * agree with the program; a TIED parameter's gradient share summed on another stage is
 * not listed (layout_stage() accumulates it into the producing stage's gradient and
 * TIED_SYNC sums the stages'); a tensor that skips a stage (made on i, read on i+2)
 * has no channel in the instruction streams and is an error naming the tensor. */
#include "codegen/codegen.h"
#include "contract/plan_limits.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Per region: the stage that runs it (-1: none). */
static int *stage_of_regions(const Graph *g, const int *first, const int *last, int n) {
  int *of = pd_malloc((size_t)(g->nregions ? g->nregions : 1) * sizeof *of);
  for (int r = 0; r < g->nregions; r++) of[r] = -1;
  for (int i = 0; i < n; i++)
    for (int r = first[i]; r <= last[i] && r < g->nregions; r++)
      if (r >= 0) of[r] = i;
  return of;
}

/* Per tensor: the stage of the first op (in op order) that reads it on a stage
 * other than its producer's, else -1. One pass over the ops, so that listing the
 * boundary is linear in the graph, not a scan of every op per tensor. */
static int *reader_elsewhere(const Graph *g, const int *stage_of) {
  int *cs = pd_malloc((size_t)(g->ntensors ? g->ntensors : 1) * sizeof *cs);
  for (int t = 0; t < g->ntensors; t++) cs[t] = -1;
  for (int o = 0; o < g->nops; o++) {
    int os = stage_of[g->ops[o].region];
    for (int i = 0; i < g->ops[o].nin; i++) {
      int t = g->ops[o].in[i], p = g->tensors[t].producer;
      if (cs[t] < 0 && p >= 0 && os != stage_of[g->ops[p].region]) cs[t] = os;
    }
  }
  return cs;
}

static void add_entry(cJSON *arr, const char *role, const Tensor *x, const TensorPlace *pl,
                      int peer) {
  cJSON *e = cJSON_CreateObject();
  cJSON_AddStringToObject(e, "role", role);
  cJSON_AddStringToObject(e, "name", x->name ? x->name : "");
  cJSON_AddNumberToObject(e, "tensor", x->id);
  cJSON_AddStringToObject(e, "block", buf_class_name(pl->cls));
  cJSON_AddNumberToObject(e, "offset", (double)pl->offset);
  cJSON_AddNumberToObject(e, "bytes", (double)pl->bytes);
  cJSON_AddNumberToObject(e, "peer", peer);
  cJSON_AddItemToArray(arr, e);
}

/* True when t, crossing a stage boundary, is a tied parameter's gradient
 * contribution: the layout accumulated it in place (TIED_SYNC sums the stages), so
 * nothing is exchanged; anything else placed for it is a layout bug. */
static bool tied_contribution(const Graph *g, int t, const TensorPlace *pl, int s, char *err,
                              size_t errlen, bool *ok) {
  if (g->tensors[t].kind == TK_ACT || layout_contribution_param(g, t) < 0) return false;
  if (pl->cls != BUF_GRADS) {
    snprintf(err, errlen, "stage %d: tied-gradient contribution %d (%s) is not accumulated into a "
             "gradient", s, t, g->tensors[t].name ? g->tensors[t].name : "?");
    *ok = false;
  }
  return true;
}

bool codegen_boundary_stages(const Graph *g, const int *first_region, const int *last_region,
                             int nstages, int64_t b, bool bf16, cJSON *stages, char *err, size_t errlen) {
  int *stage_of = stage_of_regions(g, first_region, last_region, nstages);
  int *elsewhere = reader_elsewhere(g, stage_of);
  bool ok = true;
  for (int s = 0; ok && s < nstages; s++) {
    cJSON *st = cJSON_GetArrayItem(stages, s);
    cJSON *prog = st ? cJSON_GetObjectItemCaseSensitive(st, "program") : NULL;
    if (!prog) {
      snprintf(err, errlen, "stage %d has no program to describe", s);
      ok = false;
      break;
    }
    StageLayout *L = layout_stage_bf16(g, first_region[s], last_region[s], b, bf16);
    cJSON_DeleteItemFromObjectCaseSensitive(prog, "pipeline");
    cJSON *pipe = cJSON_AddObjectToObject(prog, "pipeline");
    cJSON *arr = cJSON_AddArrayToObject(pipe, "boundary");
    for (int t = 0; ok && t < g->ntensors; t++) {
      const TensorPlace *pl = &L->place[t];
      const Tensor *x = &g->tensors[t];
      if (pl->cls == BUF_NONE || x->kind == TK_PARAM || x->kind == TK_INPUT || x->producer < 0)
        continue;
      int ps = stage_of[g->ops[x->producer].region];
      bool fwd = x->kind == TK_ACT;
      if (ps != s) {
        if (tied_contribution(g, t, pl, s, err, errlen, &ok)) continue;
        if (fwd && ps == s - 1) {
          add_entry(arr, "act_in", x, pl, ps);
        } else if (!fwd && ps == s + 1) {
          add_entry(arr, "grad_in", x, pl, ps);
        } else {
          snprintf(err, errlen, "stage %d reads tensor %d (%s) made on stage %d: only neighbouring "
                   "stages exchange tensors", s, t, x->name ? x->name : "?", ps);
          ok = false;
        }
        continue;
      }
      /* made here: is it read by another stage? */
      int cs = elsewhere[t];
      if (cs < 0 || tied_contribution(g, t, pl, s, err, errlen, &ok)) continue;
      if (fwd && cs == s + 1) {
        add_entry(arr, "act_out", x, pl, cs);
      } else if (!fwd && cs == s - 1) {
        add_entry(arr, "grad_out", x, pl, cs);
      } else {
        snprintf(err, errlen, "tensor %d (%s) made on stage %d is read on stage %d: only "
                 "neighbouring stages exchange tensors", t, x->name ? x->name : "?", s, cs);
        ok = false;
      }
    }
    if (ok && cJSON_GetArraySize(arr) > PLAN_MAX_BOUNDARY) {
      snprintf(err, errlen, "stage %d exchanges %d tensors with its neighbouring stages; the runtime handles at "
               "most %d (pin fewer stages, or a model whose blocks pass fewer tensors on)",
               s, cJSON_GetArraySize(arr), PLAN_MAX_BOUNDARY);
      ok = false;
    }
    layout_destroy(L);
  }
  free(stage_of);
  free(elsewhere);
  return ok;
}
