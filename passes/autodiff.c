/* passes/autodiff.c — reverse-mode differentiation of the forward graph, in the
 * same IR.
 *
 * Walk the forward ops from last to first. When an op is reached every consumer
 * of its outputs has already been visited (the list is topologically ordered), so
 * its output gradients are complete; the op's table entry emits its backward ops,
 * which return one gradient contribution per input. A tensor that fans out gets
 * several contributions; they are summed as they arrive (one `add` each), in the
 * region of the consumer that produced them, so no contribution waits longer than
 * it must. The seed is the loss: cross_entropy's backward already divides by the
 * number of counted positions (the loss is a mean), so d(loss)/d(loss) = 1 needs
 * no tensor. A parameter's final sum becomes its TK_GRAD tensor "d<name>"; a tied
 * parameter (used in two regions) thus receives the sum of both uses. Inputs that
 * are not trainable (ids, targets) get no gradient. */
#include "passes/passes.h"

#include <stdlib.h>
#include <string.h>

bool pass_autodiff(Graph *g, Diag *d) {
  PD_CHECK(g->nfwd_ops == 0 || g->nfwd_ops == g->nops, "(autodiff ran twice)");
  if (g->loss < 0) {
    diag_error(d, (Loc){0}, "model '%s' has no 'minimize' statement: nothing to differentiate", g->name);
    return false;
  }
  const Tensor *loss = &g->tensors[g->loss];
  if (loss->producer < 0 || g->ops[loss->producer].kind != OP_CROSS_ENTROPY) {
    diag_error(d, loss->loc, "the minimised value '%s' must be the output of cross_entropy", loss->name);
    return false;
  }
  graph_finalize(g);
  int nfwd = g->nops;
  g->nfwd_ops = nfwd;
  /* grad[t]: running sum of t's gradient contributions, -1 while none. */
  int *grad = pd_malloc((size_t)g->ntensors * sizeof *grad);
  for (int t = 0; t < g->ntensors; t++) grad[t] = -1;
  grad[g->loss] = g->loss; /* the seed: cross_entropy's backward reads only "some gradient flows" */

  for (int o = nfwd - 1; o >= 0; o--) {
    /* Copy: emitting ops may grow (and move) g->ops. */
    Op op = g->ops[o];
    const OpInfo *info = &op_info[op.kind];
    int dout[IR_MAX_OUT], din[IR_MAX_IN];
    bool any = false;
    for (int i = 0; i < op.nout; i++) {
      dout[i] = grad[op.out[i]];
      any |= dout[i] >= 0;
    }
    if (!any) continue;
    PD_CHECK(info->grad != NULL, "(no gradient rule for %s)", info->name);
    for (int i = 0; i < IR_MAX_IN; i++) din[i] = -1;
    int before = g->ntensors;
    info->grad(g, &op, dout, din);
    if (g->ntensors > before) {
      grad = pd_realloc(grad, (size_t)g->ntensors * sizeof *grad);
      for (int t = before; t < g->ntensors; t++) grad[t] = -1;
    }
    for (int i = 0; i < op.nin; i++) {
      int x = op.in[i], c = din[i];
      if (c < 0) continue;
      if (grad[x] < 0) {
        grad[x] = c;
        continue;
      }
      int in[] = {grad[x], c};
      int id = graph_emit(g, OP_ADD, in, 2, NULL, op.region, op.id, TK_ACT_GRAD,
                          arena_printf(g->arena, "d%s", g->tensors[x].name));
      int sum = g->ops[id].out[0];
      grad = pd_realloc(grad, (size_t)g->ntensors * sizeof *grad);
      grad[sum] = -1;
      grad[x] = sum;
    }
  }

  /* owners[t]: how many tensors have t as their gradient */
  int *owners = pd_calloc((size_t)g->ntensors, sizeof *owners);
  for (int x = 0; x < g->ntensors; x++)
    if (grad[x] >= 0) owners[grad[x]]++;
  for (int p = 0; p < g->nparams; p++) {
    int w = g->params[p].tensor, gw = grad[w];
    if (gw < 0) continue; /* unused parameter: its gradient is zero */
    Tensor *t = &g->tensors[gw];
    /* add passes dy through unchanged, so the sum may also be another tensor's
     * gradient; give the parameter its own copy then, so the runtime may
     * accumulate into it. */
    if (owners[gw] > 1) {
      double one[] = {1};
      int fwd = g->ops[t->producer].fwd_op;
      int id = graph_emit(g, OP_SCALE, &gw, 1, one, g->params[p].region, fwd, TK_GRAD, NULL);
      gw = g->ops[id].out[0];
      grad = pd_realloc(grad, (size_t)g->ntensors * sizeof *grad);
      grad[gw] = -1;
      t = &g->tensors[gw];
    }
    t->kind = TK_GRAD;
    t->param = p;
    t->name = arena_printf(g->arena, "d%s", g->tensors[w].name);
    g->tensors[w].grad = gw;
  }
  free(owners);
  for (int t = 0; t < g->ntensors; t++)
    if (g->tensors[t].kind == TK_ACT && grad[t] >= 0 && grad[t] != t && t != g->loss)
      g->tensors[t].grad = grad[t];
  free(grad);
  return true;
}
