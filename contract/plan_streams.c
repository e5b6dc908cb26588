/* contract/plan_streams.c — per-stage instruction streams for the four schedules
 * (contract/plan_streams.h), in two steps: each stage's compute order (compute_order:
 * F(k), B(k), and S(t), the update after batch t), then its communication and weight
 * versions (build_stage, emit_step). The planner verifies the streams (deadlock,
 * versions, stash) and the runtime regenerates them for the batches it runs, so both
 * sides run exactly these. Version rules: DESIGN.md §3 and docs/update-rules.md. */
#include "contract/plan_streams.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/ir.h"

static const char *const sched_names[PS_COUNT] = {
    [PS_GPIPE] = "gpipe", [PS_1F1B] = "1f1b", [PS_2BW] = "2bw", [PS_PIPEDREAM] = "pipedream"};

const char *plan_schedule_name(PlanSchedule s) {
  PD_CHECK(s >= 0 && s < PS_COUNT, "schedule %d", (int)s);
  return sched_names[s];
}

bool plan_schedule_stale(PlanSchedule s) {
  PD_CHECK(s >= 0 && s < PS_COUNT, "schedule %d", (int)s);
  return s == PS_2BW || s == PS_PIPEDREAM;
}

bool plan_schedule_parse(const char *s, PlanSchedule *out) {
  for (int i = 0; i < PS_COUNT; i++)
    if (strcmp(s, sched_names[i]) == 0) {
      *out = (PlanSchedule)i;
      return true;
    }
  return false;
}

static const char *const op_names[PI_COUNT] = {
    [PI_RECV_ACT] = "RECV_ACT",   [PI_FWD] = "FWD", [PI_SEND_ACT] = "SEND_ACT",
    [PI_RECV_GRAD] = "RECV_GRAD", [PI_BWD] = "BWD", [PI_SEND_GRAD] = "SEND_GRAD",
    [PI_ALLREDUCE] = "ALLREDUCE", [PI_TIED_SYNC] = "TIED_SYNC", [PI_OPT_STEP] = "OPT_STEP",
};

const char *plan_op_name(PlanOp op) {
  PD_CHECK(op >= 0 && op < PI_COUNT, "op %d", (int)op);
  return op_names[op];
}

const char *plan_instr_str(const PlanInstr *in, char *buf, size_t n) {
  int o = snprintf(buf, n, "%s", plan_op_name(in->op));
  switch (in->op) {
  case PI_FWD:
  case PI_BWD:
    o += snprintf(buf + o, n - (size_t)o, " mb=%" PRId64 " v=%d vslot=%d stash=%d", in->mb,
                  in->version, in->vslot, in->sslot);
    break;
  case PI_RECV_ACT:
  case PI_SEND_ACT:
  case PI_RECV_GRAD:
  case PI_SEND_GRAD:
    o += snprintf(buf + o, n - (size_t)o, " mb=%" PRId64 " %s %d%s", in->mb,
                  in->op == PI_RECV_ACT || in->op == PI_RECV_GRAD ? "from" : "to", in->peer,
                  in->with_next ? " +" : "");
    break;
  case PI_ALLREDUCE: o += snprintf(buf + o, n - (size_t)o, " batch=%d", in->batch); break;
  case PI_TIED_SYNC:
    o += snprintf(buf + o, n - (size_t)o, " batch=%d group=%d", in->batch, in->group);
    break;
  case PI_OPT_STEP:
    o += snprintf(buf + o, n - (size_t)o, " batch=%d new_v=%d vslot=%d from_vslot=%d",
                  in->batch, in->version, in->vslot, in->src_vslot);
    if (in->group >= 0) o += snprintf(buf + o, n - (size_t)o, " tied_group=%d", in->group);
    break;
  case PI_COUNT: break;
  }
  (void)o;
  return buf;
}

void plan_stream_push(PlanStream *s, PlanInstr in) {
  if (s->n == s->cap) {
    s->cap = s->cap ? 2 * s->cap : 64;
    s->ins = pd_realloc(s->ins, (size_t)s->cap * sizeof *s->ins);
  }
  s->ins[s->n++] = in;
}

static PlanInstr instr(PlanOp op) {
  return (PlanInstr){op, 0, -1, -1, -1, -1, -1, -1, -1, false};
}

/* One compute item of a stage's order. */
typedef struct Item {
  char kind; /* 'F', 'B', 'S' (update), 'T' (deferred tied sync + step of group g) */
  int64_t k; /* microbatch, or batch for 'S' and 'T' */
  int g;
} Item;

typedef struct Order {
  Item *it;
  int n, cap;
} Order;

static void add(Order *o, char kind, int64_t k) {
  if (o->n == o->cap) {
    o->cap = o->cap ? 2 * o->cap : 64;
    o->it = pd_realloc(o->it, (size_t)o->cap * sizeof *o->it);
  }
  o->it[o->n++] = (Item){kind, k, -1};
}

int plan_2bw_version(const PlanStreamSpec *spec, int t) {
  int fresh = spec->flush_batches > 1 ? spec->flush_batches : 1; /* batches that read W(t) */
  return t < fresh ? t : t - 1;
}

bool plan_batch_fresh(const PlanStreamSpec *spec, int64_t t) {
  return spec->schedule != PS_2BW || plan_2bw_version(spec, (int)t) == t;
}

bool plan_batch_flushed(const PlanStreamSpec *spec, int t) {
  return spec->schedule == PS_GPIPE || spec->schedule == PS_1F1B ||
         (spec->schedule == PS_2BW && t < spec->flush_batches - 1);
}

/* The first batch of the flush-free 1F1B sequence (2bw, pipedream). */
static int first_unflushed(const PlanStreamSpec *sp) {
  return sp->schedule == PS_2BW && sp->flush_batches > 1 ? sp->flush_batches - 1 : 0;
}

bool plan_tied_deferred(const PlanStreamSpec *spec, int g) {
  return spec->schedule == PS_2BW && spec->groups[g].nstages > 1;
}

static bool holds(const PlanTiedGroup *G, int i) {
  for (int q = 0; q < G->nstages; q++)
    if (G->stages[q] == i) return true;
  return false;
}

/* Tied steps (deferred groups) of batch t at stage i: before the first forward of
 * batch t+2, the first microbatch that reads W(t+1). */
static void add_tied_steps(const PlanStreamSpec *sp, int i, int t, Order *o) {
  for (int g = 0; g < sp->ngroups; g++)
    if (plan_tied_deferred(sp, g) && holds(&sp->groups[g], i)) {
      add(o, 'T', t);
      o->it[o->n - 1].g = g;
    }
}

/* 1f1b's order of batches [t0, t1): per batch min(d-i-1, m) forwards (warm-up), F,B
 * pairs, the remaining backwards (cool-down), then the step. */
static void flushed_1f1b(const PlanStreamSpec *sp, int i, int t0, int t1, Order *o) {
  int d = sp->stages;
  int64_t m = sp->microbatches;
  for (int t = t0; t < t1; t++) {
    int64_t nw = d - i - 1 < m ? d - i - 1 : m, base = t * m;
    for (int64_t j = 1; j <= nw; j++) add(o, 'F', base + j);
    for (int64_t j = 1; j <= m - nw; j++) add(o, 'F', base + nw + j), add(o, 'B', base + j);
    for (int64_t j = m - nw + 1; j <= m; j++) add(o, 'B', base + j);
    add(o, 'S', t);
  }
}

/* Stage i's compute order:
 *   gpipe      per batch: F of all m, B of all m, S
 *   1f1b       per batch: min(d-i-1, m) F (warm-up), then F,B pairs, then the
 *              remaining B (cool-down), S (flush)
 *   2bw,       one 1F1B sequence over all batches without a flush; S(t) right after
 *   pipedream  B of batch t's last microbatch
 * 2bw's flushed start (K = flush_batches): batches t < K-1 run as 1f1b's (drained
 * before S(t)); batch K-1 starts the 1F1B sequence without a flush. */
static void compute_order(const PlanStreamSpec *sp, int i, Order *o) {
  int d = sp->stages;
  int64_t m = sp->microbatches, N = m * sp->nbatches;
  switch (sp->schedule) {
  case PS_GPIPE:
    for (int t = 0; t < sp->nbatches; t++) {
      for (int64_t j = 1; j <= m; j++) add(o, 'F', t * m + j);
      for (int64_t j = 1; j <= m; j++) add(o, 'B', t * m + j);
      add(o, 'S', t);
    }
    return;
  case PS_1F1B:
    flushed_1f1b(sp, i, 0, sp->nbatches, o);
    return;
  case PS_2BW:
  case PS_PIPEDREAM: {
    int t0 = first_unflushed(sp) < sp->nbatches ? first_unflushed(sp) : sp->nbatches;
    flushed_1f1b(sp, i, 0, t0, o); /* 2bw's flushed start */
    int64_t base = (int64_t)t0 * m, n = N - base;
    int64_t nw = d - i - 1 < n ? d - i - 1 : n;
    for (int64_t j = 1; j <= nw + n; j++) {
      int64_t f = base + j, b = base + j - nw; /* F(j), then B(j - nw) once the warm-up is done */
      if (j <= n) {
        if ((f - 1) % m == 0 && (f - 1) / m - 2 >= t0) add_tied_steps(sp, i, (int)((f - 1) / m) - 2, o);
        add(o, 'F', f);
      }
      if (j - nw >= 1) {
        add(o, 'B', b);
        if (b % m == 0) add(o, 'S', b / m - 1);
      }
    }
    for (int t = sp->nbatches - 2 < t0 ? t0 : sp->nbatches - 2; t < sp->nbatches; t++)
      add_tied_steps(sp, i, t, o);
    return;
  }
  case PS_COUNT: break;
  }
  PD_CHECK(0, "schedule %d", (int)sp->schedule);
}

/* Version bookkeeping while emitting one stage. */
typedef struct VState {
  int *slot_ver;  /* version held by each slot, -1 empty */
  int *slot_use;  /* microbatches in flight reading each slot */
  int nslots, cap;
  int latest, latest_slot;
  int *stash_used;
  int nstash, cap_stash;
  int64_t *mb_slot; /* per mb: vslot, stash slot packed */
} VState;

static int stash_take(VState *v) {
  for (int s = 0; s < v->nstash; s++)
    if (!v->stash_used[s]) return v->stash_used[s] = 1, s;
  if (v->nstash == v->cap_stash) {
    v->cap_stash = v->cap_stash ? 2 * v->cap_stash : 8;
    v->stash_used = pd_realloc(v->stash_used, (size_t)v->cap_stash * sizeof(int));
  }
  v->stash_used[v->nstash] = 1;
  return v->nstash++;
}

static int vslot_new(VState *v) {
  if (v->nslots == v->cap) {
    v->cap = v->cap ? 2 * v->cap : 4;
    v->slot_ver = pd_realloc(v->slot_ver, (size_t)v->cap * sizeof(int));
    v->slot_use = pd_realloc(v->slot_use, (size_t)v->cap * sizeof(int));
  }
  v->slot_ver[v->nslots] = -1;
  v->slot_use[v->nslots] = 0;
  return v->nslots++;
}

/* S(t) = [ALLREDUCE] [TIED_SYNC...] OPT_STEP, and the slot it writes. Flush schedules
 * use W(t) for batch t, one slot, stepped in place. 2bw: v(k) = max(floor((k-1)/m) - 1,
 * 0) in slot v % 2; S(t) writes W(t+1) into slot (t+1) % 2, which held W(t-1), the
 * oldest (with the flushed start, batches t < K-1 and K-1 read W(t), later ones
 * W(t-1): plan_2bw_version). With weight prediction S(t) reads and writes the master
 * slot and puts the weights of the next reader of slot (t+1) % 2 there (the
 * interpreter's rule). pipedream: a forward takes the newest version; S writes the
 * next one into the lowest slot no microbatch in flight uses (in place when none uses
 * the newest). Tied parameters (TIED_SYNC, a non-blocking sum over the stages holding
 * one, which the OPT_STEP that updates it waits for): flush schedules and pipedream
 * post it just before the OPT_STEP; 2bw posts it right after the stage's own step and
 * steps the tied parameter later (emit_tied), since stage 0 finishes batch t about
 * d-1 backwards after the last stage and waiting for it here would stall the whole
 * pipeline once per batch. */
static void emit_step(const PlanStreamSpec *sp, int i, int t, VState *v, PlanStream *s) {
  if (sp->replicas > 1) {
    PlanInstr a = instr(PI_ALLREDUCE);
    a.batch = t;
    plan_stream_push(s, a);
  }
  for (int g = 0; g < sp->ngroups; g++) {
    const PlanTiedGroup *G = &sp->groups[g];
    if (G->nstages < 2 || plan_tied_deferred(sp, g)) continue;
    for (int j = 0; j < G->nstages; j++)
      if (G->stages[j] == i) {
        PlanInstr a = instr(PI_TIED_SYNC);
        a.batch = t;
        a.group = g;
        plan_stream_push(s, a);
      }
  }
  PlanInstr a = instr(PI_OPT_STEP);
  a.batch = t;
  a.version = t + 1;
  a.src_vslot = v->latest_slot;
  switch (sp->schedule) {
  case PS_GPIPE:
  case PS_1F1B: a.vslot = 0; break;
  case PS_2BW:
    a.vslot = (t + 1) % 2;
    while (v->nslots <= a.vslot) vslot_new(v);
    if (sp->predict) a.src_vslot = PLAN_MASTER_VSLOT;
    break;
  case PS_PIPEDREAM:
    a.vslot = -1;
    for (int q = 0; q < v->nslots && a.vslot < 0; q++)
      if (v->slot_use[q] == 0) a.vslot = q;
    if (a.vslot < 0) a.vslot = vslot_new(v);
    break;
  case PS_COUNT: PD_CHECK(0, "schedule"); break;
  }
  v->slot_ver[a.vslot] = t + 1;
  v->latest = t + 1;
  v->latest_slot = a.vslot;
  plan_stream_push(s, a);
  /* deferred tied groups: post the sum now, step when batch t+2 needs it */
  for (int g = 0; g < sp->ngroups; g++)
    if (plan_tied_deferred(sp, g) && holds(&sp->groups[g], i)) {
      PlanInstr y = instr(PI_TIED_SYNC);
      y.batch = t, y.group = g;
      plan_stream_push(s, y);
    }
}

/* The deferred half of a 2bw update: once tied group g's gradient of batch t is
 * summed (TIED_SYNC posted at the end of batch t), write its W(t+1) into slot
 * (t+1) % 2. */
static void emit_tied(const PlanStreamSpec *sp, int t, int g, PlanStream *s) {
  PlanInstr a = instr(PI_OPT_STEP);
  a.batch = t, a.group = g, a.version = t + 1;
  a.vslot = (t + 1) % 2, a.src_vslot = sp->predict ? PLAN_MASTER_VSLOT : t % 2;
  plan_stream_push(s, a);
}

static void emit_deferred(const PlanStreamSpec *sp, int i, Item *defer, int *n, VState *v,
                          PlanStream *s) {
  for (int q = 0; q < *n; q++) {
    if (defer[q].kind == 'S') emit_step(sp, i, (int)defer[q].k, v, s);
    else emit_tied(sp, (int)defer[q].k, defer[q].g, s);
  }
  *n = 0;
}

/* Stage i's stream. Between two compute instructions the stage posts, as one group,
 * the sends of the previous one and the receives of the next (Megatron's
 * send_forward_recv_backward): under blocking send/receive the 1F1B exchange deadlocks
 * otherwise. S(t) goes after the group for flush-free schedules when a forward
 * follows (its receive must be posted first, or the last stage waits in TIED_SYNC for
 * stage 0 while stage d-2 waits to send to it), and before the next receive for flush
 * schedules and before a backward (that receive waits on later stages, which may wait
 * on this one's TIED_SYNC). */
static void build_stage(const PlanStreamSpec *sp, int i, PlanStream *s, int *nver,
                        int *nstash) {
  int d = sp->stages;
  int64_t m = sp->microbatches, N = m * sp->nbatches;
  Order o = {0};
  compute_order(sp, i, &o);
  VState v;
  memset(&v, 0, sizeof v);
  vslot_new(&v);
  v.slot_ver[0] = 0;
  v.mb_slot = pd_calloc((size_t)N + 1, sizeof(int64_t));
  int *sslot = pd_calloc((size_t)N + 1, sizeof(int));
  int *vers = pd_calloc((size_t)N + 1, sizeof(int));

  PlanInstr pend[2];
  int npend = 0;
  Item *defer = pd_malloc((size_t)(o.n + 1) * sizeof *defer);
  int ndefer = 0;
  for (int q = 0; q < o.n; q++) {
    Item it = o.it[q];
    if (it.kind == 'S' || it.kind == 'T') {
      if (plan_batch_flushed(sp, (int)it.k)) {
        for (int j = 0; j < npend; j++) {
          pend[j].with_next = j + 1 < npend;
          plan_stream_push(s, pend[j]);
        }
        npend = 0;
        emit_step(sp, i, (int)it.k, &v, s);
        /* a drained 2bw batch: its deferred tied steps now (batch t+1 reads W(t+1)) */
        for (int g = 0; g < sp->ngroups; g++)
          if (plan_tied_deferred(sp, g) && holds(&sp->groups[g], i)) emit_tied(sp, (int)it.k, g, s);
      } else {
        defer[ndefer++] = it;
      }
      continue;
    }
    int64_t k = it.k;
    int t = (int)((k - 1) / m);
    /* Before a backward (cool-down) the receive waits on later stages, which may wait
     * in TIED_SYNC for this one: step first. */
    if (ndefer > 0 && it.kind == 'B') {
      for (int j = 0; j < npend; j++) {
        pend[j].with_next = j + 1 < npend;
        plan_stream_push(s, pend[j]);
      }
      npend = 0;
      emit_deferred(sp, i, defer, &ndefer, &v, s);
    }
    /* the group: previous sends, this item's receive */
    PlanInstr grp[3];
    int ng = 0;
    for (int j = 0; j < npend; j++) grp[ng++] = pend[j];
    npend = 0;
    if (it.kind == 'F' && i > 0) {
      PlanInstr r = instr(PI_RECV_ACT);
      r.mb = k, r.batch = t, r.peer = i - 1;
      grp[ng++] = r;
    }
    if (it.kind == 'B' && i < d - 1) {
      PlanInstr r = instr(PI_RECV_GRAD);
      r.mb = k, r.batch = t, r.peer = i + 1;
      grp[ng++] = r;
    }
    for (int j = 0; j < ng; j++) {
      grp[j].with_next = j + 1 < ng;
      plan_stream_push(s, grp[j]);
    }
    emit_deferred(sp, i, defer, &ndefer, &v, s);

    PlanInstr c = instr(it.kind == 'F' ? PI_FWD : PI_BWD);
    c.mb = k, c.batch = t;
    if (it.kind == 'F') {
      int ver = 0, slot = 0;
      switch (sp->schedule) {
      case PS_GPIPE:
      case PS_1F1B: ver = v.latest, slot = 0; break;
      case PS_2BW: ver = plan_2bw_version(sp, t), slot = ver % 2; break;
      case PS_PIPEDREAM: ver = v.latest, slot = v.latest_slot; break;
      case PS_COUNT: PD_CHECK(0, "schedule"); break;
      }
      vers[k] = ver;
      v.mb_slot[k] = slot;
      v.slot_use[slot]++;
      sslot[k] = stash_take(&v);
      c.version = ver, c.vslot = slot, c.sslot = sslot[k];
      plan_stream_push(s, c);
      if (i < d - 1) {
        PlanInstr x = instr(PI_SEND_ACT);
        x.mb = k, x.batch = t, x.peer = i + 1;
        pend[npend++] = x;
      }
    } else {
      c.version = vers[k], c.vslot = (int)v.mb_slot[k], c.sslot = sslot[k];
      v.slot_use[c.vslot]--;
      v.stash_used[c.sslot] = 0;
      plan_stream_push(s, c);
      if (i > 0) {
        PlanInstr x = instr(PI_SEND_GRAD);
        x.mb = k, x.batch = t, x.peer = i - 1;
        pend[npend++] = x;
      }
    }
  }
  for (int j = 0; j < npend; j++) {
    pend[j].with_next = j + 1 < npend;
    plan_stream_push(s, pend[j]);
  }
  emit_deferred(sp, i, defer, &ndefer, &v, s);
  free(defer);
  *nver = sp->schedule == PS_2BW ? (sp->predict ? PLAN_MASTER_VSLOT + 1 : 2) : v.nslots;
  *nstash = v.nstash;
  free(o.it);
  free(v.slot_ver);
  free(v.slot_use);
  free(v.stash_used);
  free(v.mb_slot);
  free(sslot);
  free(vers);
}

bool plan_streams_build(const PlanStreamSpec *spec, PlanStreams *out, char *err,
                        size_t errlen) {
  memset(out, 0, sizeof *out);
  int d = spec->stages;
  int64_t m = spec->microbatches;
  if (d < 1 || m < 1 || spec->nbatches < 1) {
    snprintf(err, errlen, "need at least one stage, microbatch and batch (d = %d, m = %" PRId64
             ", batches = %d)", d, m, spec->nbatches);
    return false;
  }
  if (spec->schedule == PS_2BW && m < d) {
    snprintf(err, errlen,
             "schedule 2bw needs at least as many microbatches per batch as stages "
             "(m = %" PRId64 " < d = %d): batch t uses W(t-1), which stage 0 only has once "
             "it finished batch t-2, and that takes m >= d microbatches in flight",
             m, d);
    return false;
  }
  out->spec = *spec;
  out->st = pd_calloc((size_t)d, sizeof *out->st);
  out->nversions = pd_calloc((size_t)d, sizeof(int));
  out->nstash = pd_calloc((size_t)d, sizeof(int));
  for (int i = 0; i < d; i++) build_stage(spec, i, &out->st[i], &out->nversions[i], &out->nstash[i]);
  return true;
}

void plan_streams_free(PlanStreams *s) {
  if (s->st)
    for (int i = 0; i < s->spec.stages; i++) free(s->st[i].ins);
  free(s->st);
  free(s->nversions);
  free(s->nstash);
  memset(s, 0, sizeof *s);
}
