/* ir/dump.c — the stable text form of the IR (golden tests diff it) and the
 * structural verifier run after every pass.
 *
 * Format, one item per line, in id order:
 *   const NAME = VALUE
 *   region ID KIND NAME
 *   input %ID NAME : DTYPE SHAPE
 *   param %ID NAME : f32 SHAPE init=... decay=0|1 region=NAME [tied]
 *   %OUT[, %OUT] = OPNAME(%IN, ...) {attr=value, ...} @REGION [bwd of #OP]
 * Numbers print with %.17g so a dump round-trips exactly. */
#include "ir/ir.h"

#include <stdlib.h>
#include <string.h>

void ir_dump(const Graph *g, FILE *out) {
  char buf[64];
  fprintf(out, "model %s\n", g->name);
  for (int i = 0; i < g->nconsts; i++) {
    const ModelConst *c = &g->consts[i];
    fprintf(out, "const %s = %.17g\n", c->name, c->value);
  }
  for (int i = 0; i < g->nregions; i++)
    fprintf(out, "region %d %s %s\n", i, region_kind_name(g->regions[i].kind), g->regions[i].name);
  for (int t = 0; t < g->ntensors; t++) {
    const Tensor *x = &g->tensors[t];
    if (x->kind == TK_INPUT)
      fprintf(out, "input %%%d %s : %s %s\n", t, x->name, dtype_name(x->dtype),
              shape_str(&x->shape, buf, sizeof buf));
    if (x->kind == TK_PARAM) {
      const Param *p = &g->params[x->param];
      fprintf(out, "param %%%d %s : f32 %s init=%s", t, x->name, shape_str(&x->shape, buf, sizeof buf),
              init_kind_name(p->init));
      if (p->init == INIT_NORMAL) fprintf(out, "(%.17g)", p->std);
      fprintf(out, " decay=%d region=%s%s\n", p->decay ? 1 : 0, g->regions[p->region].name,
              p->nuses_regions > 1 ? " tied" : "");
    }
  }
  for (int o = 0; o < g->nops; o++) {
    const Op *op = &g->ops[o];
    const OpInfo *info = &op_info[op->kind];
    for (int i = 0; i < op->nout; i++) {
      const Tensor *x = &g->tensors[op->out[i]];
      fprintf(out, "%s%%%d", i ? ", " : "", op->out[i]);
      fprintf(out, ":%s", shape_str(&x->shape, buf, sizeof buf));
    }
    fprintf(out, " = %s(", info->name);
    for (int i = 0; i < op->nin; i++) fprintf(out, "%s%%%d", i ? ", " : "", op->in[i]);
    fprintf(out, ")");
    if (info->nattrs) {
      fprintf(out, " {");
      for (int i = 0; i < info->nattrs; i++)
        fprintf(out, "%s%s=%.17g", i ? ", " : "", info->attr_names[i], op->attr[i]);
      fprintf(out, "}");
    }
    fprintf(out, " @%s", op->region >= 0 && op->region < g->nregions ? g->regions[op->region].name : "?");
    if (op->fwd_op >= 0) fprintf(out, " bwd #%d", op->fwd_op);
    fprintf(out, "  # #%d %s\n", o, g->tensors[op->out[0]].name);
  }
  if (g->loss >= 0) fprintf(out, "minimize %%%d\n", g->loss);
}

bool ir_verify(const Graph *g, FILE *err) {
  bool ok = true;
#define FAIL(...) (fprintf(err, "ir_verify: " __VA_ARGS__), fputc('\n', err), ok = false)
  int *writer = pd_malloc(((size_t)g->ntensors + 1) * sizeof *writer);
  for (int t = 0; t < g->ntensors; t++) {
    writer[t] = -1;
    if (g->tensors[t].id != t) FAIL("tensor %d has id %d", t, g->tensors[t].id);
  }
  for (int o = 0; o < g->nops && ok; o++) {
    const Op *op = &g->ops[o];
    if (op->id != o) FAIL("op %d has id %d", o, op->id);
    if (op->kind < 0 || op->kind >= OP_COUNT) { FAIL("op %d has kind %d", o, (int)op->kind); break; }
    const OpInfo *info = &op_info[op->kind];
    if (op->nin < info->min_inputs || op->nin > info->max_inputs)
      FAIL("op #%d %s has %d inputs", o, info->name, op->nin);
    if (op->region < 0 || op->region >= g->nregions) FAIL("op #%d has region %d", o, op->region);
    for (int i = 0; i < op->nin; i++) {
      int t = op->in[i];
      if (t < 0 || t >= g->ntensors) { FAIL("op #%d input %d is %d", o, i, t); continue; }
      const Tensor *x = &g->tensors[t];
      if (x->kind != TK_INPUT && x->kind != TK_PARAM && (x->producer < 0 || x->producer >= o))
        FAIL("op #%d %s reads %%%d before it is written", o, info->name, t);
    }
    for (int i = 0; i < op->nout; i++) {
      int t = op->out[i];
      if (t < 0 || t >= g->ntensors) { FAIL("op #%d output %d is %d", o, i, t); continue; }
      if (writer[t] >= 0) FAIL("%%%d written by #%d and #%d", t, writer[t], o);
      writer[t] = o;
      if (g->tensors[t].producer != o) FAIL("%%%d says producer #%d, written by #%d", t, g->tensors[t].producer, o);
    }
    /* Re-run the shape rule: a pass that rewired an op must keep it well typed. */
    Shape shapes[IR_MAX_OUT];
    DType dts[IR_MAX_OUT];
    char msg[256] = "";
    memset(shapes, 0, sizeof shapes);
    if (!info->shape(g, op, shapes, dts, msg, sizeof msg)) {
      FAIL("op #%d %s no longer type-checks: %s", o, info->name, msg);
    } else {
      for (int i = 0; i < op->nout; i++)
        if (!shape_equal(&shapes[i], &g->tensors[op->out[i]].shape) || dts[i] != g->tensors[op->out[i]].dtype)
          FAIL("op #%d %s output %d has a stale shape", o, info->name, i);
    }
  }
  if (g->loss >= 0 && (g->loss >= g->ntensors || g->tensors[g->loss].shape.rank != 0))
    FAIL("loss %%%d is not a scalar", g->loss);
  free(writer);
#undef FAIL
  return ok;
}
