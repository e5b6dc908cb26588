/* tests/exec/interp_record.c — the interpreter (runtime/exec/exec_interp.c) over a
 * device and a link that record every call, checked against the instruction streams
 * the planner verifies (contract/plan_streams.c).
 *
 *   interp_record PLAN_DIR DATA STEPS
 *
 * Each rank runs the CPU device and the transport link wrapped by recorders
 * (PipeOptions.rank_device/rank_link), so the run computes what it always does. What
 * a rank did is projected onto the events a stream names, in order: F/B (a pass: its
 * microbatch, weight slot and stash slot), SA/SG and RA/RG (sends and receives of
 * activations and gradients, with the peer rank), AR (the replicas' all-reduce) and
 * O (an optimizer step: the slot it writes and the slot it reads). Slots are device
 * pointers to the recorder; each must stand for one slot of the stream, and one slot
 * for one pointer, throughout the run (a plan that recomputes passes over one full
 * activation block, its stash slots holding only the inputs: no stash check there). Tied-weight sums, the norm and the loss line
 * travel on their own tags and are not projected.
 * Prints the first difference per rank and "N passed, N failed"; exit 0 when every
 * rank did exactly its stream. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/exec/exec.h"
#include "runtime/pipeline/pipeline_rank.h"

enum { REC_MAX_PTRS = 64 };

typedef struct Rec {
  char *text;        /* one event per line */
  size_t len, cap;
  int64_t mref;      /* microbatches per batch of the reference (ExecPass.mb's unit) */
} Rec;

static void rec_add(Rec *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void rec_add(Rec *r, const char *fmt, ...) {
  char line[160];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(line, sizeof line, fmt, ap);
  va_end(ap);
  if (r->len + (size_t)n + 2 > r->cap) {
    r->cap = (r->cap + (size_t)n + 2) * 2;
    r->text = realloc(r->text, r->cap);
    if (!r->text) abort();
  }
  memcpy(r->text + r->len, line, (size_t)n);
  r->len += (size_t)n;
  r->text[r->len++] = '\n';
  r->text[r->len] = 0;
}

/* ---- the recording device -------------------------------------------------------- */

typedef struct RecDevice {
  ExecDevice base;
  ExecDevice *in;
  Rec *rec;
} RecDevice;

static RecDevice *rd(ExecDevice *d) { return (RecDevice *)(void *)d; }

/* A pointer as the recorder prints it: an address, which the checker maps to slots. */
static void pass_event(ExecDevice *d, const char *what, const ExecPass *p) {
  if (p->training)
    rec_add(rd(d)->rec, "%s mb=%lld w=%p s=%p", what, (long long)p->mb, (void *)p->block[BUF_PARAMS],
            (void *)p->block[BUF_STASH]);
}
static char *r_arena_alloc(ExecDevice *d, uint64_t b, const char *w) { return rd(d)->in->ops->arena_alloc(rd(d)->in, b, w); }
static void r_arena_free(ExecDevice *d, char *a) { rd(d)->in->ops->arena_free(rd(d)->in, a); }
static void r_forward(ExecDevice *d, ExecPass *p) {
  pass_event(d, "F", p);
  rd(d)->in->ops->forward(rd(d)->in, p);
}
static void r_backward(ExecDevice *d, ExecPass *p) {
  pass_event(d, "B", p);
  rd(d)->in->ops->backward(rd(d)->in, p);
}
static void r_load_samples(ExecDevice *d, char *inputs, DataLoader *dl, int64_t first, int64_t b) {
  rd(d)->in->ops->load_samples(rd(d)->in, inputs, dl, first, b);
}
static void r_copy(ExecDevice *d, void *dst, const void *src, uint64_t n) { rd(d)->in->ops->copy(rd(d)->in, dst, src, n); }
static void r_zero(ExecDevice *d, void *dst, uint64_t n) { rd(d)->in->ops->zero(rd(d)->in, dst, n); }
static void r_upload(ExecDevice *d, void *dst, const void *h, uint64_t n) { rd(d)->in->ops->upload(rd(d)->in, dst, h, n); }
static void r_download(ExecDevice *d, void *h, const void *src, uint64_t n) {
  rd(d)->in->ops->download(rd(d)->in, h, src, n);
}
static void r_sum_ordered(ExecDevice *d, float *dst, const float *const *src, int n, int64_t numel) {
  rd(d)->in->ops->sum_ordered(rd(d)->in, dst, src, n, numel);
}
static double r_sumsq(ExecDevice *d, const float *const *x, const int64_t *numel, int n) {
  return rd(d)->in->ops->sumsq(rd(d)->in, x, numel, n);
}
/* The slot bases a step writes and reads: its first parameter's pointers less that
 * parameter's offset in the weight block. */
static void r_opt_step(ExecDevice *d, const ExecOptStep *s, int n) {
  const char *out = (const char *)s[0].wout - s[0].param->offset, *from = (const char *)s[0].win - s[0].param->offset;
  rec_add(rd(d)->rec, "O w=%p from=%p", (const void *)out, (const void *)from);
  rd(d)->in->ops->opt_step(rd(d)->in, s, n);
}
static void r_flush(ExecDevice *d) { rd(d)->in->ops->flush(rd(d)->in); }
static int64_t r_late_bad_ids(ExecDevice *d) { return rd(d)->in->ops->late_bad_ids(rd(d)->in); }
static void r_destroy(ExecDevice *d) {
  exec_device_destroy(rd(d)->in);
  free(d);
}

static const ExecDeviceOps rec_device_ops = {
    .name = "recording", .arena_alloc = r_arena_alloc, .arena_free = r_arena_free, .forward = r_forward,
    .backward = r_backward, .load_samples = r_load_samples, .copy = r_copy, .zero = r_zero, .upload = r_upload,
    .download = r_download, .sum_ordered = r_sum_ordered, .sumsq = r_sumsq, .opt_step = r_opt_step,
    .flush = r_flush, .late_bad_ids = r_late_bad_ids, .destroy = r_destroy,
};

/* ---- the recording link ------------------------------------------------------------ */

typedef struct RecLink {
  ExecLink base;
  ExecLink *in;
  Rec *rec;
} RecLink;

typedef struct RecGroup {
  ExecGroup *in;
  ExecLink *link;
  Rec *rec;
} RecGroup;

static RecLink *rl(ExecLink *l) { return (RecLink *)(void *)l; }

static const char *tag_name(int tag) { return tag == PIPE_TAG_ACT ? "A" : tag == PIPE_TAG_GRAD ? "G" : NULL; }

static TransportStatus k_post(ExecLink *l, bool is_send, int peer, int tag, void *buf, size_t bytes,
                              const char *what, ExecReq **req) {
  if (tag_name(tag)) rec_add(rl(l)->rec, "%c%s peer=%d", is_send ? 'S' : 'R', tag_name(tag), peer);
  return rl(l)->in->ops->post(rl(l)->in, is_send, peer, tag, buf, bytes, what, req);
}
static TransportStatus k_waitall(ExecLink *l, ExecReq **reqs, int n) { return rl(l)->in->ops->waitall(rl(l)->in, reqs, n); }
static TransportStatus k_group_create(ExecLink *l, const int *ranks, int n, ExecGroup **g) {
  RecGroup *rg = calloc(1, sizeof *rg);
  if (!rg) abort();
  rg->link = rl(l)->in, rg->rec = rl(l)->rec;
  TransportStatus s = rl(l)->in->ops->group_create(rl(l)->in, ranks, n, &rg->in);
  *g = (ExecGroup *)(void *)rg;
  return s;
}
static void k_group_destroy(ExecGroup *g) {
  RecGroup *rg = (RecGroup *)(void *)g;
  if (rg->in) rg->link->ops->group_destroy(rg->in);
  free(rg);
}
static TransportStatus k_allreduce(ExecGroup *g, float *buf, size_t n, const char *what) {
  RecGroup *rg = (RecGroup *)(void *)g;
  rec_add(rg->rec, "AR");
  return rg->link->ops->allreduce_sum_f32(rg->in, buf, n, what);
}
static void k_destroy(ExecLink *l) {
  exec_link_destroy(rl(l)->in);
  free(l);
}

static const ExecLinkOps rec_link_ops = {
    .name = "recording", .post = k_post, .waitall = k_waitall, .send = exec_host_send,
    .recv = exec_host_recv, .group_create = k_group_create, .group_destroy = k_group_destroy,
    .allreduce_sum_f32 = k_allreduce, .progress = exec_host_progress, .error = exec_host_error,
    .abort = exec_host_abort, .timeout = exec_host_timeout, .destroy = k_destroy,
};

typedef struct Ctx {
  const PipePlan *p;
  Rec *rec; /* [ranks] */
} Ctx;

static ExecDevice *make_device(void *ctx, int rank, int stage, char *err, size_t errlen) {
  Ctx *c = ctx;
  ExecDevice *in = exec_cpu_device(&c->p->rt->stages[stage], err, errlen);
  if (!in) return NULL;
  RecDevice *d = calloc(1, sizeof *d);
  if (!d) abort();
  d->base.ops = &rec_device_ops, d->in = in, d->rec = &c->rec[rank];
  return &d->base;
}

static ExecLink *make_link(void *ctx, Transport *t, ExecDevice *dev, char *err, size_t errlen) {
  (void)ctx, (void)err, (void)errlen;
  RecLink *l = calloc(1, sizeof *l);
  if (!l) abort();
  l->in = exec_transport_link(t);
  l->base.ops = &rec_link_ops, l->base.process_per_rank = l->in->process_per_rank;
  l->base.host = l->in; /* exec_host_*: the transport's */
  l->rec = rd(dev)->rec;
  return &l->base;
}

/* ---- the check -------------------------------------------------------------------- */

/* A bijection between recorded pointers and stream slots, kept over the whole run. */
typedef struct SlotMap {
  const void *ptr[REC_MAX_PTRS];
  int slot[REC_MAX_PTRS], n;
} SlotMap;

static bool same_slot(SlotMap *m, const void *p, int slot) {
  for (int i = 0; i < m->n; i++)
    if (m->ptr[i] == p || m->slot[i] == slot) return m->ptr[i] == p && m->slot[i] == slot;
  if (m->n == REC_MAX_PTRS) return false;
  m->ptr[m->n] = p, m->slot[m->n++] = slot;
  return true;
}

/* The stream's event for instruction `in`, or "" when the recorder sees none. */
static void expected(const PipePlan *p, int replica, const PlanInstr *in, char *buf, size_t n) {
  int peer = in->peer >= 0 ? p->st[in->peer].rank_of_replica[replica] : -1;
  switch (in->op) {
  case PI_FWD: snprintf(buf, n, "F mb=%lld", (long long)in->mb); break;
  case PI_BWD: snprintf(buf, n, "B mb=%lld", (long long)in->mb); break;
  case PI_SEND_ACT: snprintf(buf, n, "SA peer=%d", peer); break;
  case PI_SEND_GRAD: snprintf(buf, n, "SG peer=%d", peer); break;
  case PI_RECV_ACT: snprintf(buf, n, "RA peer=%d", peer); break;
  case PI_RECV_GRAD: snprintf(buf, n, "RG peer=%d", peer); break;
  case PI_ALLREDUCE: snprintf(buf, n, "AR"); break;
  case PI_OPT_STEP: snprintf(buf, n, "O"); break;
  case PI_TIED_SYNC: /* its own tag, completed at the step that needs it */
  case PI_COUNT: buf[0] = 0; break;
  }
}

/* Rank r's record against its stream: the events in order, each pass's microbatch
 * (w = 1: the reference's index is the stream's less one) and slots. */
static bool check_rank(const PipePlan *p, const PlanStreams *S, int rank, const Rec *rec) {
  int stage = p->rank_stage[rank], replica = p->rank_replica[rank];
  const PlanStream *st = &S->st[stage];
  SlotMap wmap = {0}, smap = {0};
  const char *at = rec->text ? rec->text : "";
  int k = 0;
  for (int i = 0; i < st->n; i++) {
    const PlanInstr *in = &st->ins[i];
    /* a plan that recomputes runs the forward again, same slots, before a backward */
    for (int again = p->recompute && in->op == PI_BWD ? 1 : 0; again >= 0; again--) {
      char want[96], got[160] = "(nothing)";
      expected(p, replica, in, want, sizeof want);
      if (!want[0]) continue;
      if (again) want[0] = 'F';
      size_t len = strcspn(at, "\n");
      if (len) snprintf(got, sizeof got, "%.*s", (int)len, at);
      bool ok = len > 0;
      long long mb = -1;
      void *w = NULL, *s = NULL, *from = NULL;
      if (ok && (in->op == PI_FWD || in->op == PI_BWD)) {
        char kind;
        ok = sscanf(got, "%c mb=%lld w=%p s=%p", &kind, &mb, &w, &s) == 4 && kind == want[0] &&
             (p->w > 1 || mb == in->mb - 1) && same_slot(&wmap, w, in->vslot) &&
             (p->recompute || same_slot(&smap, s, in->sslot)); /* (recomputing: one full block) */
      } else if (ok && in->op == PI_OPT_STEP) {
        ok = sscanf(got, "O w=%p from=%p", &w, &from) == 2 && same_slot(&wmap, w, in->vslot) &&
             same_slot(&wmap, from, in->src_vslot);
      } else if (ok) {
        ok = strcmp(got, want) == 0;
      }
      if (!ok) {
        char ib[128];
        printf("FAIL rank %d (stage %d): event %d is \"%s\"; the stream's instruction %d is %s%s\n", rank, stage, k,
               got, i, plan_instr_str(in, ib, sizeof ib), again ? " (its forward again, first)" : "");
        return false;
      }
      at += len + 1;
      k++;
    }
  }
  if (*at) {
    printf("FAIL rank %d (stage %d): %d events as the stream says, then \"%.*s\"\n", rank, stage, k, (int)strcspn(at, "\n"),
           at);
    return false;
  }
  printf("ok   rank %d (stage %d, replica %d): %d events as the stream says\n", rank, stage, replica, k);
  return true;
}

int main(int argc, char **argv) {
  if (argc != 4) {
    fprintf(stderr, "usage: interp_record PLAN_DIR DATA STEPS\n");
    return 2;
  }
  char err[4096];
  PipePlan *p = pipe_plan_load(argv[1], err, sizeof err);
  if (!p) {
    fprintf(stderr, "interp_record: %s\n", err);
    return 1;
  }
  int64_t steps = atoll(argv[3]);
  if (p->rt->train.steps == 0) p->rt->train.steps = steps;
  setenv("OMP_NUM_THREADS", "1", 1);
  pd_blas_init(1);
  Ctx c = {.p = p, .rec = calloc((size_t)p->nranks, sizeof(Rec))};
  if (!c.rec) abort();
  PipeOptions o = {.data_path = argv[2], .steps = steps, .quiet = true, .rank_device = make_device,
                   .rank_link = make_link, .rank_ctx = &c};
  PipeOutcome r = {0};
  int rc = pipeline_run_local(p, &o, &r, err, sizeof err);
  int pass = 0, fail = 0;
  if (rc != 0) {
    fprintf(stderr, "interp_record: %s\n", err);
    fail++;
  } else {
    PlanStreamSpec spec = pipe_stream_spec(p, (int)steps);
    PlanStreams S = {0};
    if (!plan_streams_build(&spec, &S, err, sizeof err)) {
      fprintf(stderr, "interp_record: %s\n", err);
      fail++;
    } else {
      for (int rank = 0; rank < p->nranks; rank++) check_rank(p, &S, rank, &c.rec[rank]) ? pass++ : fail++;
      plan_streams_free(&S);
    }
  }
  for (int i = 0; i < p->nranks; i++) free(c.rec[i].text);
  free(c.rec);
  pipe_outcome_free(&r);
  pipe_plan_free(p);
  printf("%d passed, %d failed\n", pass, fail);
  return fail ? 1 : 0;
}
