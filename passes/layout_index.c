/* passes/layout_index.c — the whole-graph facts a stage's layout needs (layout.h,
 * LayoutIndex), computed once so that laying out one stage costs O(that stage).
 *
 * The planner lays out every segment on its own (passes/plan_input.c) at two
 * microbatch sizes: with these facts recomputed per call (row strides, op lists by a
 * scan of the graph, reader counts, arrays the size of the graph) that was
 * O(regions x graph), minutes for 5000 layers.
 */
#include "passes/layout.h"

#include <limits.h>
#include <stdlib.h>

/* Op ids per region, ascending, split into forward (o < nfwd) and backward:
 * start[r] .. start[r + 1] in ops. */
static void ops_by_region(const Graph *g, bool fwd, int **start, int **ops) {
  int R = g->nregions, nfwd = g->nfwd_ops ? g->nfwd_ops : g->nops;
  int lo = fwd ? 0 : nfwd, hi = fwd ? nfwd : g->nops;
  int *s = pd_calloc((size_t)R + 2, sizeof *s);
  for (int o = lo; o < hi; o++) s[g->ops[o].region + 2]++;
  for (int r = 0; r < R; r++) s[r + 2] += s[r + 1];
  int *v = pd_malloc((size_t)(hi > lo ? hi - lo : 1) * sizeof *v);
  for (int o = lo; o < hi; o++) v[s[g->ops[o].region + 1]++] = o; /* s[r + 1]: next free */
  *start = s, *ops = v; /* s[r] is now region r's first, s[r + 1] its end */
}

LayoutIndex *layout_index_create(const Graph *g) {
  LayoutIndex *ix = pd_calloc(1, sizeof *ix);
  int nt = g->ntensors, n = nt ? nt : 1;
  ix->g = g;
  ix->nfwd_all = g->nfwd_ops ? g->nfwd_ops : g->nops;
  ix->ld = layout_row_strides(g);
  ops_by_region(g, true, &ix->fwd_start, &ix->fwd_ops);
  ops_by_region(g, false, &ix->bwd_start, &ix->bwd_ops);
  ix->nuse = pd_calloc((size_t)n, sizeof(int));
  ix->sole_reader = pd_malloc((size_t)n * sizeof(int));
  ix->nconsumers = pd_calloc((size_t)n, sizeof(int));
  ix->consumer = pd_malloc((size_t)n * sizeof(int));
  ix->rmin = pd_malloc((size_t)n * sizeof(int));
  ix->rmax = pd_malloc((size_t)n * sizeof(int));
  ix->slot = pd_malloc((size_t)n * sizeof(int));
  for (int t = 0; t < nt; t++) {
    ix->sole_reader[t] = ix->consumer[t] = -1, ix->slot[t] = -1;
    ix->rmin[t] = INT_MAX, ix->rmax[t] = -1;
  }
  for (int o = 0; o < g->nops; o++) {
    const Op *op = &g->ops[o];
    for (int i = 0; i < op->nin; i++) {
      int t = op->in[i];
      ix->sole_reader[t] = ix->nuse[t]++ == 0 ? o : -1;
      bool again = false; /* an op reading it twice counts once */
      for (int j = 0; j < i; j++) again = again || op->in[j] == t;
      if (!again && ix->nconsumers[t]++ == 0) ix->consumer[t] = o;
      if (op->region < ix->rmin[t]) ix->rmin[t] = op->region;
      if (op->region > ix->rmax[t]) ix->rmax[t] = op->region;
    }
  }
  return ix;
}

void layout_index_destroy(LayoutIndex *ix) {
  if (!ix) return;
  free(ix->ld);
  free(ix->fwd_start), free(ix->fwd_ops), free(ix->bwd_start), free(ix->bwd_ops);
  free(ix->nuse), free(ix->sole_reader), free(ix->nconsumers), free(ix->consumer);
  free(ix->rmin), free(ix->rmax), free(ix->slot);
  free(ix);
}
