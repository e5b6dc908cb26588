/* runtime/pipeline/pipeline_plan.c — the parts of plan.json the pipeline executor needs beyond
 * the stage programs: the configuration, the rank map, the tied groups, the memory
 * plan (every buffer's kind, index, offset and size) and each stage's boundary
 * tensors ("program.pipeline", written by codegen_boundary_stages). Every missing or
 * mistyped key is a message naming the file and the key, never a crash. The rates the
 * console prints (tokens, FLOPs, peak per step) are read off the plan here too. A
 * one-stage plan without a memory section gets the arena pd2bwc would write. */
#include "runtime/pipeline/pipeline_rank.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/core/json_read.h"

static int cls_of(const char *s) {
  for (int c = 0; c < BUF_CLASS_COUNT; c++)
    if (strcmp(buf_class_name((BufClass)c), s) == 0) return c;
  return -1;
}

/* stages[i].memory: the arena's size and every buffer in it, each inside the arena. */
static void read_memory(JsonRd *r, const cJSON *mem, int i, PipeStage *ps) {
  char path[128];
  snprintf(path, sizeof path, "stages[%d].memory", i);
  ps->planned_bytes = (uint64_t)jr_int(r, mem, path, "total_bytes", 0, (int64_t)1 << 48, 0, true);
  const cJSON *arr = mem ? cJSON_GetObjectItemCaseSensitive(mem, "buffers") : NULL;
  if (!r->failed && !cJSON_IsArray(arr)) jr_fail(r, path, "buffers: missing");
  if (r->failed) return;
  ps->bufs = pd_calloc((size_t)cJSON_GetArraySize(arr) + 1, sizeof *ps->bufs);
  const cJSON *e;
  cJSON_ArrayForEach(e, arr) {
    char ep[160];
    snprintf(ep, sizeof ep, "%s.buffers[%d]", path, ps->nbufs);
    PipeBuf *b = &ps->bufs[ps->nbufs++];
    const cJSON *kind = cJSON_GetObjectItemCaseSensitive(e, "kind");
    int k = -1;
    for (int j = 0; j < PB_COUNT && cJSON_IsString(kind); j++)
      if (strcmp(kind->valuestring, plan_buf_kind_name((PlanBufKind)j)) == 0) k = j;
    if (k < 0) jr_fail_value(r, ep, "kind", kind ? kind : e, "not a buffer kind (docs/plan-format.md)");
    b->kind = (PlanBufKind)(k < 0 ? 0 : k);
    b->index = (int)jr_int(r, e, ep, "index", 0, PIPE_MAX_SLOTS - 1, 0, true);
    b->offset = (uint64_t)jr_int(r, e, ep, "offset", 0, (int64_t)ps->planned_bytes, 0, true);
    b->size = (uint64_t)jr_int(r, e, ep, "size", 0, (int64_t)ps->planned_bytes, 0, true);
    if (!r->failed && (b->offset % 256 != 0 || b->offset + b->size > ps->planned_bytes))
      jr_fail(r, ep, "must be 256-byte aligned and inside total_bytes");
    if (r->failed) return;
  }
  /* Buffers share no byte: two weight versions at one offset would make 2bw's W(t)
   * and W(t-1) one buffer, and every update would silently corrupt the other. */
  for (int a = 0; a < ps->nbufs; a++)
    for (int c = 0; c < a; c++) {
      const PipeBuf *x = &ps->bufs[a], *y = &ps->bufs[c];
      if (x->size && y->size && x->offset < y->offset + y->size && y->offset < x->offset + x->size) {
        char ep[160], m[256];
        snprintf(ep, sizeof ep, "%s.buffers[%d]", path, a);
        snprintf(m, sizeof m, "%s %d at bytes %llu..%llu overlaps buffers[%d] (%s %d at %llu..%llu)",
                 plan_buf_kind_name(x->kind), x->index, (unsigned long long)x->offset,
                 (unsigned long long)(x->offset + x->size), c, plan_buf_kind_name(y->kind), y->index,
                 (unsigned long long)y->offset, (unsigned long long)(y->offset + y->size));
        jr_fail(r, ep, m);
        return;
      }
    }
}

static void read_boundary(JsonRd *r, const cJSON *prog, int i, int d, const RtStage *rs, PipeStage *ps) {
  char path[256];
  snprintf(path, sizeof path, "stages[%d].program.pipeline.boundary", i);
  const cJSON *pipe = cJSON_GetObjectItemCaseSensitive(prog, "pipeline");
  const cJSON *arr = pipe ? cJSON_GetObjectItemCaseSensitive(pipe, "boundary") : NULL;
  if (!pipe && d == 1) return; /* one stage has no boundary: a plan without the section (test plans) is one */
  if (!cJSON_IsArray(arr)) {
    jr_fail(r, path, "missing (a plan from an older pd2bwc: recompile it)");
    return;
  }
  ps->nbnd = cJSON_GetArraySize(arr);
  ps->bnd = pd_calloc((size_t)ps->nbnd + 1, sizeof *ps->bnd);
  static const char *const roles[] = {"act_in", "act_out", "grad_in", "grad_out"};
  int k = 0;
  const cJSON *e;
  cJSON_ArrayForEach(e, arr) {
    PipeBoundary *b = &ps->bnd[k];
    char ep[300];
    snprintf(ep, sizeof ep, "%s[%d]", path, k++);
    const cJSON *role = cJSON_GetObjectItemCaseSensitive(e, "role");
    const cJSON *block = cJSON_GetObjectItemCaseSensitive(e, "block");
    b->role = (PipeRole)-1;
    for (int j = 0; j < 4 && cJSON_IsString(role); j++)
      if (strcmp(role->valuestring, roles[j]) == 0) b->role = (PipeRole)j;
    if ((int)b->role < 0 && cJSON_IsString(role) && strncmp(role->valuestring, "tied_", 5) == 0)
      jr_fail(r, ep, "a tied-gradient role from an older pd2bwc (the programs now accumulate tied gradients "
                  "in place): recompile the plan");
    if ((int)b->role < 0) jr_fail(r, ep, "role must be act_in, act_out, grad_in or grad_out");
    b->cls = cJSON_IsString(block) ? cls_of(block->valuestring) : -1;
    if (b->cls < 0) jr_fail(r, ep, "block must name a program block");
    b->offset = jr_int(r, e, ep, "offset", 0, (int64_t)1 << 48, 0, true);
    b->bytes = jr_int(r, e, ep, "bytes", 0, (int64_t)1 << 48, 0, true);
    b->peer = (int)jr_int(r, e, ep, "peer", 0, d - 1, 0, true);
    if (!r->failed && b->offset + b->bytes > rs->blocks[b->cls]) jr_fail(r, ep, "leaves its block");
  }
}

/* A one-stage plan without stages[0].memory (test plans, PLAN/reference): the slots of
 * its d = 1 stream (one batch tells) and the arena as plan_apply_layouts lays it out
 * (weights x versions, grads, adam_m, adam_v, stash x slots, inputs, boundary, workspace). */
bool pipe_stage_layout_one(PipePlan *pp, char *err, size_t errlen) {
  PlanStreamSpec spec = {.stages = 1, .microbatches = pp->m, .schedule = pp->schedule, .nbatches = 2, .replicas = 1,
                         .predict = pp->schedule == PS_2BW && pp->rt->train.predict > 0}; /* its master copy */
  PlanStreams s = {0};
  if (!plan_streams_build(&spec, &s, err, errlen)) return false;
  PipeStage *ps = &pp->st[0];
  ps->nversions = s.nversions[0];
  ps->nstash = s.nstash[0];
  plan_streams_free(&s);
  const RtStage *st = &pp->rt->stages[0];
  uint64_t pb = (uint64_t)st->blocks[BUF_PARAMS];
  const PlanBufKind kind[] = {PB_WEIGHTS, PB_GRADS, PB_OPT_M, PB_OPT_V, PB_STASH, PB_INPUTS, PB_BOUNDARY, PB_WORKSPACE};
  const int count[] = {ps->nversions, 1, 1, 1, ps->nstash, 1, 1, 1};
  const int64_t *bl = st->blocks;
  const uint64_t size[] = {pb, (uint64_t)bl[BUF_GRADS], pb, pb, (uint64_t)bl[BUF_STASH], (uint64_t)bl[BUF_INPUTS],
                           (uint64_t)bl[BUF_BOUNDARY], (uint64_t)bl[BUF_WORK]};
  int n = (int)(sizeof kind / sizeof kind[0]);
  ps->bufs = pd_calloc((size_t)(ps->nversions + ps->nstash + n), sizeof *ps->bufs);
  uint64_t at = 0;
  for (int k = 0; k < n; k++)
    for (int i = 0; i < count[k] && size[k] > 0; i++) {
      ps->bufs[ps->nbufs++] = (PipeBuf){.kind = kind[k], .index = i, .offset = at, .size = size[k]};
      at += rt_align256(size[k]);
    }
  ps->planned_bytes = at;
  return true;
}

PipePlan *pipe_plan_load(const char *dir, char *err, size_t errlen) {
  cJSON *root;
  RtPlan *rt = rt_plan_load_json(dir, &root, err, errlen);
  if (!rt) return NULL;
  char *file = io_join(dir, "plan.json");
  JsonRd r = {.file = file, .err = err, .errlen = errlen};
  PipePlan *p = pd_calloc(1, sizeof *p);
  p->rt = rt;
  const cJSON *cfg = jr_get(&r, root, "", "config");
  /* ranges checked by rt_plan_load (config.stages 1..16384, d·w <= 65536) */
  p->d = (int)jr_count(&r, cfg, "config", "stages", 1, true);
  p->w = (int)jr_count(&r, cfg, "config", "replicas", 1, false);
  p->b = rt->b;
  p->m = rt->m;
  const cJSON *rc = cfg ? cJSON_GetObjectItemCaseSensitive(cfg, "recompute") : NULL;
  p->recompute = rc && cJSON_IsTrue(rc);
  int sched = 0;
  if (!plan_schedule_parse(rt->schedule, (PlanSchedule *)&sched)) jr_fail(&r, "config.schedule", "unknown schedule");
  p->schedule = (PlanSchedule)sched;
  if (!r.failed && (p->d < 1 || p->w < 1 || p->d != rt->nstages))
    jr_fail(&r, "config.stages", "must be >= 1 and match the \"stages\" array");
  const cJSON *stages = jr_get(&r, root, "", "stages");
  if (!r.failed) {
    p->nranks = p->d * p->w;
    p->st = pd_calloc((size_t)p->d, sizeof *p->st);
    p->rank_stage = pd_malloc((size_t)p->nranks * sizeof(int));
    p->rank_replica = pd_malloc((size_t)p->nranks * sizeof(int));
    for (int k = 0; k < p->nranks; k++) p->rank_stage[k] = p->rank_replica[k] = -1;
  }
  for (int i = 0; !r.failed && i < p->d; i++) {
    const cJSON *so = cJSON_GetArrayItem(stages, i);
    PipeStage *ps = &p->st[i];
    char path[128];
    snprintf(path, sizeof path, "stages[%d]", i);
    ps->nversions = (int)jr_int(&r, so, path, "weight_versions", 1, PIPE_MAX_SLOTS, 1, p->d > 1);
    ps->nstash = (int)jr_int(&r, so, path, "stash_slots", 1, PIPE_MAX_SLOTS, 1, p->d > 1);
    const cJSON *mem = so ? cJSON_GetObjectItemCaseSensitive(so, "memory") : NULL;
    if (!mem && p->nranks == 1) r.failed = r.failed || !pipe_stage_layout_one(p, r.err, r.errlen); /* its slots too */
    else read_memory(&r, mem, i, ps);
    ps->rank_of_replica = pd_malloc((size_t)p->w * sizeof(int));
    const cJSON *ranks = so ? cJSON_GetObjectItemCaseSensitive(so, "ranks") : NULL;
    for (int rep = 0; rep < p->w; rep++) {
      const cJSON *re = ranks ? cJSON_GetArrayItem(ranks, rep) : NULL;
      char rp[160];
      snprintf(rp, sizeof rp, "%s.ranks[%d]", path, rep);
      int rk = re ? (int)jr_int(&r, re, rp, "rank", 0, p->nranks - 1, 0, true) : i * p->w + rep;
      int rr = re ? (int)jr_int(&r, re, rp, "replica", 0, p->w - 1, rep, false) : rep;
      if (!r.failed && (rk >= p->nranks || rr != rep || p->rank_stage[rk] >= 0)) {
        jr_fail(&r, path, "ranks: every rank 0..d·w-1 exactly once, replicas in order");
        break;
      }
      if (r.failed) break;
      ps->rank_of_replica[rep] = rk;
      p->rank_stage[rk] = i;
      p->rank_replica[rk] = rep;
    }
    if (ps->nversions < 1 || ps->nstash < 1) jr_fail(&r, path, "weight_versions and stash_slots must be >= 1");
    const cJSON *segs = so ? cJSON_GetObjectItemCaseSensitive(so, "segments") : NULL;
    if (cJSON_IsArray(segs)) {
      ps->seg_names = pd_calloc((size_t)cJSON_GetArraySize(segs) + 1, sizeof(char *));
      const cJSON *sn;
      cJSON_ArrayForEach(sn, segs) if (cJSON_IsString(sn)) ps->seg_names[ps->nsegs++] = pd_strdup(sn->valuestring);
    }
    const cJSON *prog = so ? cJSON_GetObjectItemCaseSensitive(so, "program") : NULL;
    if (!r.failed) read_boundary(&r, prog ? prog : so, i, p->d, &rt->stages[i], ps);
  }
  const cJSON *tied = cJSON_GetObjectItemCaseSensitive(root, "tied");
  if (!r.failed && cJSON_IsArray(tied)) {
    int n = cJSON_GetArraySize(tied);
    p->groups = pd_calloc((size_t)n + 1, sizeof *p->groups);
    p->group_names = pd_calloc((size_t)n + 1, sizeof *p->group_names);
    const cJSON *e;
    cJSON_ArrayForEach(e, tied) {
      const cJSON *sts = cJSON_GetObjectItemCaseSensitive(e, "stages");
      const cJSON *nm = cJSON_GetObjectItemCaseSensitive(e, "name");
      if (!cJSON_IsArray(sts) || !cJSON_IsString(nm) || cJSON_GetArraySize(sts) > PLAN_MAX_TIED_SEGS) {
        jr_fail(&r, "tied", "each entry needs \"name\" and \"stages\"");
        break;
      }
      /* The stream generator needs only groups held by more than one stage, in the
       * plan's group order (its TIED_SYNC `group` numbers index this list). */
      PlanTiedGroup *g = &p->groups[p->ngroups];
      char tp[64];
      snprintf(tp, sizeof tp, "tied[%d]", p->ngroups);
      g->tied = (int)jr_int(&r, e, tp, "group", 0, 65535, (int64_t)p->ngroups, false);
      const cJSON *sv;
      int si = 0;
      cJSON_ArrayForEach(sv, sts) {
        int s = cJSON_IsNumber(sv) && sv->valuedouble >= 0 && sv->valuedouble < p->d ? (int)sv->valuedouble : -1;
        if (s < 0 || s != sv->valuedouble) {
          char b[96];
          snprintf(b, sizeof b, "%s.stages[%d]", tp, si);
          jr_fail_value(&r, b, "", sv, "a stage out of range");
        } else {
          g->stages[g->nstages++] = s;
        }
        si++;
      }
      p->group_names[p->ngroups++] = pd_strdup(nm->valuestring);
    }
  }
  cJSON_Delete(root);
  free(file);
  if (r.failed) {
    pipe_plan_free(p);
    return NULL;
  }
  return p;
}

void pipe_plan_free(PipePlan *p) {
  if (!p) return;
  for (int i = 0; p->st && i < p->d; i++) {
    free(p->st[i].rank_of_replica);
    free(p->st[i].bnd);
    free(p->st[i].bufs);
    for (int k = 0; k < p->st[i].nsegs; k++) free(p->st[i].seg_names[k]);
    free(p->st[i].seg_names);
  }
  free(p->st);
  for (int g = 0; g < p->ngroups; g++) free(p->group_names[g]);
  free(p->group_names);
  free(p->groups);
  free(p->rank_stage);
  free(p->rank_replica);
  rt_plan_free(p->rt);
  free(p);
}

int pipe_plan_ranks(const char *dir) {
  char *file = io_join(dir, "plan.json");
  char ierr[IO_ERR_LEN]; /* unread: pipeline.h */
  cJSON *root = io_read_json_object(file, "", ierr, sizeof ierr);
  free(file);
  const cJSON *cfg = root ? cJSON_GetObjectItemCaseSensitive(root, "config") : NULL;
  const cJSON *d = cfg ? cJSON_GetObjectItemCaseSensitive(cfg, "stages") : NULL;
  const cJSON *w = cfg ? cJSON_GetObjectItemCaseSensitive(cfg, "replicas") : NULL;
  double dv = cJSON_IsNumber(d) ? d->valuedouble : 1, wv = cJSON_IsNumber(w) ? w->valuedouble : 1;
  /* out of range: "more than one", so that the pipeline's plan reader says why */
  int r = dv >= 1 && dv <= 65536 && wv >= 1 && wv <= 65536 && dv * wv <= 65536 ? (int)dv * (int)wv : 2;
  cJSON_Delete(root);
  return r;
}

