/* codegen/cgen_lower.c — the lowering both generators share (cgen_lower.h). */
#include "codegen/cgen_lower.h"

#include <string.h>

#include "kernels/cuda_kernel_list.h"

static int64_t numel(const Graph *g, int t, int64_t b) { return shape_numel(&g->tensors[t].shape, b); }

static int64_t last_dim(const Graph *g, int t) {
  const Shape *s = &g->tensors[t].shape;
  return s->rank ? s->dim[s->rank - 1] : 1;
}

/* T of a [B,T,C] operand (the shape rule of a SEQ op requires rank 3). */
static int64_t seq_len(const Graph *g, int t) {
  const Shape *s = &g->tensors[t].shape;
  PD_CHECK(s->rank == 3, "(a SEQ op's operand has rank %d, not 3)", s->rank);
  return s->dim[1];
}

static void add(KernelCall *c, KArgKind kind, int tensor, double value) {
  PD_CHECK(c->nargs < KCALL_MAX_ARGS, "(kernel %s: too many arguments)", c->kernel);
  c->arg[c->nargs++] = (KArg){kind, tensor, value};
}

KernelCall cgen_lower_call(const Graph *g, const Op *op, int64_t b, bool accumulate) {
  const OpInfo *info = &op_info[op->kind];
  int x = op->in[0];
  KernelCall c = {.kernel = info->kernel, .n = numel(g, op->out[0], b), .cols = last_dim(g, x)};
  c.rows = numel(g, x, b) / c.cols;
  PD_CHECK(info->kernel && op->nout == 1, "(op %s has no generic lowering)", info->name);
  add(&c, KARG_DEST, op->out[0], 0);
  for (int i = 0; i < op->nin; i++) add(&c, KARG_TENSOR, op->in[i], 0);
  switch (info->family) {
  case OPFAM_MAP:
    add(&c, KARG_I64, -1, (double)c.n);
    break;
  case OPFAM_ROWS:
  case OPFAM_SEQ:
    add(&c, KARG_I64, -1, (double)c.rows);
    if (info->family == OPFAM_SEQ) add(&c, KARG_I32, -1, (double)seq_len(g, x));
    add(&c, KARG_I32, -1, (double)c.cols);
    for (int a = 0; a < info->nattrs; a++) add(&c, KARG_REAL, -1, op->attr[a]);
    if (op_has(op->kind, OPF_ACCUMULATES)) add(&c, KARG_FLAG, -1, accumulate);
    break;
  case OPFAM_LOOKUP:
  case OPFAM_DENSE:
  case OPFAM_ELEMENTWISE:
  case OPFAM_NORM:
  case OPFAM_ATTENTION:
  case OPFAM_LOSS:
  case OPFAM_COUNT:
    PD_CHECK(false, "(op %s is not of a generic family)", info->name);
  }
  return c;
}

int64_t cgen_kcall_items(const KernelCall *c, int launch_kind) {
  switch ((PkcLaunchKind)launch_kind) {
  case PKC_ROW: return c->rows;
  case PKC_COL: return c->cols;
  case PKC_ELEM:
  case PKC_ELEM4:
  case PKC_ELEM8:
  case PKC_ONE: break;
  }
  return c->n;
}

bool cgen_fusible(const Graph *g, const Op *op) {
  return op_info[op->kind].elem_c && g->tensors[op->in[0]].dtype == DT_F32;
}

void cgen_elem_print(Str *s, CgenBackend backend, const Op *op, const char *x, const char *y) {
  const OpInfo *info = &op_info[op->kind];
  const char *t = backend == CGEN_C ? info->elem_c : info->elem_cuda;
  PD_CHECK(t, "(op %s in a fused chain)", info->name);
  for (; *t; t++) {
    if (*t != '$') {
      str_printf(s, "%c", *t);
      continue;
    }
    switch (*++t) {
    case 'x': str_printf(s, "%s", x); break;
    case 'y':
      PD_CHECK(y, "(op %s: no other operand)", info->name);
      str_printf(s, "%s", y);
      break;
    case 's': str_printf(s, "%.17g", op->attr[0]); break;
    case 'R': str_printf(s, "%s", backend == CGEN_C ? "(R)" : "(float)"); break;
    case '0': str_printf(s, "%s", backend == CGEN_C ? "(R)0" : "0.0f"); break;
    default: PD_CHECK(false, "(op %s: unknown '$%c' in its element expression)", info->name, *t);
    }
  }
}
