/* runtime/transport/transport_coll.c — groups and the collectives, written once over the
 * transports' point-to-point layer (TRANSPORT_CH_COLL), so that both transports
 * give the same bits and the same failure handling (every wait has the timeout,
 * notices aborts and exited peers, and names the member it waited for). The
 * all-reduce sums each element exactly once, in a fixed order that depends neither on
 * the transport nor on timing, so every member ends with the same bits. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/ir.h"
#include "runtime/transport/transport_impl.h"

enum {
  PHASE_REDUCE_SCATTER = 0,
  PHASE_ALL_GATHER = 1,
  PHASE_BARRIER_ARRIVE = 2,
  PHASE_BARRIER_RELEASE = 3,
  NPHASES = 4,
};

struct TransportGroup {
  Transport *t;
  int n;                    /* members */
  int me;                   /* the caller's index in ranks[] */
  int *ranks;               /* world ranks, ascending */
  int tag_base;             /* multiple of NPHASES: (hash of the member list) * NPHASES +
                               phase, so two groups sharing members never match each
                               other's messages; members call collectives on a group in
                               the same order, and per-(sender, tag) FIFO order keeps
                               consecutive calls apart */
  TransportRequest **reqs;  /* 2(n-1) slots for one phase's posted requests */
};

static int cmp_int(const void *a, const void *b) {
  int x = *(const int *)a, y = *(const int *)b;
  return (x > y) - (x < y);
}

TransportStatus transport_group_create(Transport *t, const int *ranks, int n,
                                       TransportGroup **out) {
  *out = NULL;
  if (t->status != TRANSPORT_OK) return t->status;
  if (n < 1 || n > t->size || !ranks)
    return transport_fail(t, TRANSPORT_BAD_ARG, "rank %d: a group of %d ranks in a world of %d",
                          t->rank, n, t->size);
  int *sorted = pd_malloc((size_t)n * sizeof *sorted);
  memcpy(sorted, ranks, (size_t)n * sizeof *sorted);
  qsort(sorted, (size_t)n, sizeof *sorted, cmp_int);
  int me = -1;
  for (int i = 0; i < n; i++) {
    if (sorted[i] < 0 || sorted[i] >= t->size || (i > 0 && sorted[i] == sorted[i - 1])) {
      int bad = sorted[i];
      free(sorted);
      return transport_fail(t, TRANSPORT_BAD_ARG,
                            "rank %d: group member %d is %s (world of %d)", t->rank, bad,
                            bad < 0 || bad >= t->size ? "no rank" : "listed twice", t->size);
    }
    if (sorted[i] == t->rank) me = i;
  }
  if (me < 0) {
    free(sorted);
    return transport_fail(t, TRANSPORT_BAD_ARG, "rank %d: creating a group it is not in",
                          t->rank);
  }
  uint32_t h = 2166136261u; /* FNV-1a over the sorted member list */
  for (int i = 0; i < n; i++) {
    h ^= (uint32_t)sorted[i];
    h *= 16777619u;
  }
  TransportGroup *g = pd_calloc(1, sizeof *g);
  g->t = t;
  g->n = n;
  g->me = me;
  g->ranks = sorted;
  g->tag_base = (int)(h % ((TRANSPORT_TAG_MAX + 1) / NPHASES)) * NPHASES;
  g->reqs = pd_calloc(2 * (size_t)n, sizeof *g->reqs);
  *out = g;
  return TRANSPORT_OK;
}

void transport_group_destroy(TransportGroup *g) {
  if (!g) return;
  free(g->ranks);
  free(g->reqs);
  free(g);
}

int transport_group_size(const TransportGroup *g) { return g->n; }
int transport_group_rank(const TransportGroup *g) { return g->me; }
const int *transport_group_ranks(const TransportGroup *g) { return g->ranks; }

/* "WHAT (OP over ranks 0,1,2)", cut to TRANSPORT_WHAT_LEN. */
static void describe(const TransportGroup *g, const char *op, const char *what,
                     char out[TRANSPORT_WHAT_LEN]) {
  int len = snprintf(out, TRANSPORT_WHAT_LEN, "%s (%s over ranks ", what ? what : "data", op);
  for (int i = 0; i < g->n && len > 0 && len < TRANSPORT_WHAT_LEN; i++)
    len += snprintf(out + len, (size_t)(TRANSPORT_WHAT_LEN - len), "%s%d", i ? "," : "",
                    g->ranks[i]);
  if (len > 0 && len < TRANSPORT_WHAT_LEN)
    snprintf(out + len, (size_t)(TRANSPORT_WHAT_LEN - len), ")");
}

/* Chunk k of n elements split w ways: the first n % w chunks get one more. */
static size_t chunk_lo(size_t n, int w, int k) {
  size_t q = n / (size_t)w, r = n % (size_t)w, kk = (size_t)k;
  return kk * q + (kk < r ? kk : r);
}
static size_t chunk_len(size_t n, int w, int k) {
  return n / (size_t)w + ((size_t)k < n % (size_t)w ? 1 : 0);
}

/* Posts this member's message of `phase` to (is_send) or from member k, as the next
 * of the phase's requests, g->reqs[(*nreq)++]; the phase waits for them all at once
 * (transport_waitall: one timeout for all). */
static TransportStatus coll_post(TransportGroup *g, bool is_send, int k, int phase, void *buf, size_t bytes,
                                 const char *desc, int *nreq) {
  return g->t->ops->post(g->t, TRANSPORT_CH_COLL, is_send, g->ranks[k], g->tag_base + phase, buf, bytes, desc,
                         &g->reqs[(*nreq)++]);
}

/* A reduce-scatter, then an all-gather. The n elements are cut into w contiguous
 * chunks, chunk k owned by member k (members in ascending world-rank order). Member k
 * receives chunk k of every other member's buffer and computes, for each element i,
 *     s = b_0[i]; s += b_1[i]; ...; s += b_{w-1}[i]
 * in that order and in float32 (never starting from 0.0f, which would turn -0.0 into
 * +0.0), then sends its summed chunk to every other member. Traffic per member is
 * 2·n·(w−1)/w floats, like a ring, in two steps instead of 2(w−1). */
TransportStatus transport_allreduce_sum_f32(TransportGroup *g, float *buf, size_t n,
                                            const char *what) {
  Transport *t = g->t;
  if (t->status != TRANSPORT_OK) return t->status;
  if (!buf && n > 0)
    return transport_fail(t, TRANSPORT_BAD_ARG, "rank %d: all-reduce of a NULL buffer", t->rank);
  int w = g->n, me = g->me;
  if (w == 1) return TRANSPORT_OK;

  size_t lo = chunk_lo(n, w, me), len = chunk_len(n, w, me);
  size_t need = (size_t)(w - 1) * len;
  if (need > t->scratch_cap) { /* grows to the largest all-reduce, then stays */
    t->scratch = pd_realloc(t->scratch, need * sizeof(float));
    t->scratch_cap = need;
  }
  /* Member k's contribution to my chunk lands in scratch slot k (k < me) or
   * k-1 (k > me); mine stays in buf. */
  char desc[TRANSPORT_WHAT_LEN];

  /* Reduce-scatter: send chunk k to member k, receive my chunk from everyone. */
  describe(g, "all-reduce", what, desc);
  int nreq = 0;
  TransportStatus s = TRANSPORT_OK;
  for (int k = 0; k < w && s == TRANSPORT_OK; k++) {
    if (k == me) continue;
    float *slot = t->scratch + (size_t)(k < me ? k : k - 1) * len;
    s = coll_post(g, false, k, PHASE_REDUCE_SCATTER, slot, len * sizeof(float), desc, &nreq);
    if (s == TRANSPORT_OK)
      s = coll_post(g, true, k, PHASE_REDUCE_SCATTER, buf + chunk_lo(n, w, k), chunk_len(n, w, k) * sizeof(float),
                    desc, &nreq);
  }
  if (s == TRANSPORT_OK) s = transport_waitall(t, g->reqs, nreq);
  if (s != TRANSPORT_OK) return s;

  /* Sum my chunk in member order, a block at a time so the running sums stay in
   * registers/L1 and my own contribution (in buf) is read before it is
   * overwritten. */
  enum { BLOCK = 512 };
  float acc[BLOCK];
  for (size_t b0 = 0; b0 < len; b0 += BLOCK) {
    size_t bn = len - b0 < BLOCK ? len - b0 : BLOCK;
    for (int k = 0; k < w; k++) {
      const float *x = k == me ? buf + lo + b0
                               : t->scratch + (size_t)(k < me ? k : k - 1) * len + b0;
      if (k == 0)
        memcpy(acc, x, bn * sizeof(float));
      else
        for (size_t i = 0; i < bn; i++) acc[i] += x[i];
    }
    memcpy(buf + lo + b0, acc, bn * sizeof(float));
  }

  /* All-gather: my summed chunk to everyone, everyone's chunk into place. */
  nreq = 0;
  for (int k = 0; k < w && s == TRANSPORT_OK; k++) {
    if (k == me) continue;
    s = coll_post(g, false, k, PHASE_ALL_GATHER, buf + chunk_lo(n, w, k), chunk_len(n, w, k) * sizeof(float),
                  desc, &nreq);
    if (s == TRANSPORT_OK) s = coll_post(g, true, k, PHASE_ALL_GATHER, buf + lo, len * sizeof(float), desc, &nreq);
  }
  return s == TRANSPORT_OK ? transport_waitall(t, g->reqs, nreq) : s;
}

/* Every member sends an empty message to the first member, which answers each once
 * all have arrived. */
TransportStatus transport_barrier(TransportGroup *g, const char *what) {
  Transport *t = g->t;
  if (t->status != TRANSPORT_OK) return t->status;
  if (g->n == 1) return TRANSPORT_OK;
  char desc[TRANSPORT_WHAT_LEN];
  describe(g, "barrier", what, desc);
  TransportStatus s = TRANSPORT_OK;
  int nreq = 0;
  if (g->me != 0) {
    s = coll_post(g, true, 0, PHASE_BARRIER_ARRIVE, NULL, 0, desc, &nreq);
    if (s == TRANSPORT_OK) s = coll_post(g, false, 0, PHASE_BARRIER_RELEASE, NULL, 0, desc, &nreq);
    return s == TRANSPORT_OK ? transport_waitall(t, g->reqs, nreq) : s;
  }
  for (int k = 1; k < g->n && s == TRANSPORT_OK; k++)
    s = coll_post(g, false, k, PHASE_BARRIER_ARRIVE, NULL, 0, desc, &nreq);
  if (s == TRANSPORT_OK) s = transport_waitall(t, g->reqs, nreq);
  nreq = 0;
  for (int k = 1; k < g->n && s == TRANSPORT_OK; k++)
    s = coll_post(g, true, k, PHASE_BARRIER_RELEASE, NULL, 0, desc, &nreq);
  return s == TRANSPORT_OK ? transport_waitall(t, g->reqs, nreq) : s;
}

/* One message of the agreement on the world group's barrier tags, waited for. */
static TransportStatus agree_msg(TransportGroup *g, bool send, int k, int phase, char *buf) {
  const char *what = send ? "the job's outcome of a step every rank takes" : "the outcome of a step every rank takes";
  int nreq = 0;
  TransportStatus s = coll_post(g, send, k, phase, buf, TRANSPORT_ERR_LEN, what, &nreq);
  return s == TRANSPORT_OK ? transport_waitall(g->t, g->reqs, nreq) : s;
}

/* A barrier of the whole world whose messages carry each rank's error message and
 * rank 0's verdict. */
bool transport_agree(Transport *t, bool ok, char *err, size_t errlen, bool *together) {
  char *msg = pd_calloc(TRANSPORT_ERR_LEN, 1), *got = pd_calloc(TRANSPORT_ERR_LEN, 1);
  if (!ok) snprintf(msg, TRANSPORT_ERR_LEN, "%s", err[0] ? err : "failed");
  int *all = pd_malloc((size_t)t->size * sizeof *all);
  for (int i = 0; i < t->size; i++) all[i] = i;
  TransportGroup *g = NULL;
  TransportStatus s = transport_group_create(t, all, t->size, &g);
  if (s == TRANSPORT_OK && g->me != 0) {
    s = agree_msg(g, true, 0, PHASE_BARRIER_ARRIVE, msg);
    if (s == TRANSPORT_OK) s = agree_msg(g, false, 0, PHASE_BARRIER_RELEASE, msg);
  } else if (s == TRANSPORT_OK) {
    for (int k = 1; k < g->n && s == TRANSPORT_OK; k++) {
      s = agree_msg(g, false, k, PHASE_BARRIER_ARRIVE, got);
      if (s == TRANSPORT_OK && !msg[0] && got[0]) memcpy(msg, got, TRANSPORT_ERR_LEN);
    }
    for (int k = 1; k < g->n && s == TRANSPORT_OK; k++) s = agree_msg(g, true, k, PHASE_BARRIER_RELEASE, msg);
  }
  msg[TRANSPORT_ERR_LEN - 1] = 0;
  *together = s == TRANSPORT_OK;
  bool yes = *together && !msg[0];
  if (!*together) snprintf(err, errlen, "%s", transport_error(t));
  else if (!yes) snprintf(err, errlen, "%s", t->rank == 0 ? msg : "");
  transport_group_destroy(g);
  free(all);
  free(msg);
  free(got);
  return yes;
}
