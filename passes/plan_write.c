/* passes/plan_write.c — plan.json sections and the readable plan files.
 *
 * Every file is produced in memory, written to a temporary name in the target
 * directory and renamed into place, so a failure never leaves a partial file. JSON
 * objects get their keys sorted (plan_json_sort) and numbers are printed by cJSON
 * from deterministic doubles, so the same plan gives the same bytes.
 */
#include "passes/planner.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <inttypes.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int key_cmp(const void *a, const void *b) {
  const cJSON *x = *(const cJSON *const *)a, *y = *(const cJSON *const *)b;
  return strcmp(x->string ? x->string : "", y->string ? y->string : "");
}

void plan_json_sort(cJSON *node) {
  if (!node) return;
  for (cJSON *c = node->child; c; c = c->next) plan_json_sort(c);
  if (!cJSON_IsObject(node) || !node->child) return;
  int n = 0;
  for (cJSON *c = node->child; c; c = c->next) n++;
  cJSON **v = pd_malloc((size_t)n * sizeof *v);
  n = 0;
  for (cJSON *c = node->child; c; c = c->next) v[n++] = c;
  qsort(v, (size_t)n, sizeof *v, key_cmp); /* keys are unique: stability is moot */
  for (int i = 0; i < n; i++) {
    v[i]->prev = i ? v[i - 1] : v[n - 1]; /* cJSON: child->prev is the last element */
    v[i]->next = i + 1 < n ? v[i + 1] : NULL;
  }
  node->child = v[0];
  free(v);
}

/* ---- atomic file output ------------------------------------------------------ */

static bool write_atomic(const char *dir, const char *name, const char *data, size_t len,
                         Diag *d) {
  size_t n = strlen(dir) + strlen(name) + 64;
  char *path = pd_malloc(n), *tmp = pd_malloc(n);
  snprintf(path, n, "%s/%s", dir, name);
  snprintf(tmp, n, "%s/.%s.tmp.%ld", dir, name, (long)getpid());
  Loc none = {0};
  bool ok = false;
  FILE *f = fopen(tmp, "wb");
  if (!f) {
    diag_error(d, none, "cannot write '%s': %s", tmp, strerror(errno));
  } else {
    size_t w = fwrite(data, 1, len, f);
    int e1 = ferror(f);
    if (fclose(f) != 0 || w != len || e1) {
      diag_error(d, none, "cannot write '%s': %s", tmp, strerror(errno));
      remove(tmp);
    } else if (rename(tmp, path) != 0) {
      diag_error(d, none, "cannot rename '%s' to '%s': %s", tmp, path, strerror(errno));
      remove(tmp);
    } else {
      ok = true;
    }
  }
  free(path), free(tmp);
  return ok;
}

typedef struct MemFile {
  char *buf;
  size_t len;
  FILE *f;
} MemFile;

static FILE *mem_open(MemFile *m) {
  m->buf = NULL, m->len = 0;
  m->f = open_memstream(&m->buf, &m->len);
  PD_CHECK(m->f != NULL, "open_memstream: %s", strerror(errno));
  return m->f;
}

static bool mem_write(MemFile *m, const char *dir, const char *name, Diag *d) {
  PD_CHECK(fclose(m->f) == 0, "fclose(memstream)");
  bool ok = write_atomic(dir, name, m->buf, m->len, d);
  free(m->buf);
  return ok;
}

static bool json_write(cJSON *j, const char *dir, const char *name, bool pretty, Diag *d) {
  plan_json_sort(j);
  char *s = pretty ? cJSON_Print(j) : cJSON_PrintUnformatted(j);
  PD_CHECK(s != NULL, "cJSON_Print");
  size_t n = strlen(s);
  char *t = pd_malloc(n + 2);
  memcpy(t, s, n);
  t[n] = '\n', t[n + 1] = 0;
  cJSON_free(s);
  bool ok = write_atomic(dir, name, t, n + 1, d);
  free(t);
  return ok;
}

/* ---- plan.json sections ------------------------------------------------------- */

static void num(cJSON *o, const char *k, double v) { cJSON_AddNumberToObject(o, k, v); }

static cJSON *config_json(const PlanConfig *c) {
  cJSON *o = cJSON_CreateObject();
  num(o, "stages", c->stages);
  num(o, "replicas", c->replicas);
  num(o, "microbatch_size", (double)c->microbatch_size);
  num(o, "microbatches", (double)c->microbatches);
  cJSON_AddStringToObject(o, "schedule", plan_schedule_name(c->schedule));
  cJSON_AddBoolToObject(o, "recompute", c->recompute);
  return o;
}

/* A send/receive's peer as an offset from the stage that runs it (-1 or +1): with it
 * the middle stages of a pipeline run the same stream, which plan.json stores once. */
static cJSON *instr_json(const PlanInstr *in, int stage) {
  cJSON *o = cJSON_CreateObject();
  cJSON_AddStringToObject(o, "op", plan_op_name(in->op));
  switch (in->op) {
  case PI_RECV_ACT:
  case PI_SEND_ACT:
  case PI_RECV_GRAD:
  case PI_SEND_GRAD:
    num(o, "mb", (double)in->mb), num(o, "batch", in->batch), num(o, "peer_delta", in->peer - stage);
    cJSON_AddBoolToObject(o, "with_next", in->with_next);
    break;
  case PI_FWD:
  case PI_BWD:
    num(o, "mb", (double)in->mb), num(o, "batch", in->batch);
    num(o, "version", in->version), num(o, "vslot", in->vslot), num(o, "stash", in->sslot);
    break;
  case PI_ALLREDUCE: num(o, "batch", in->batch); break;
  case PI_TIED_SYNC: num(o, "batch", in->batch), num(o, "group", in->group); break;
  case PI_OPT_STEP:
    num(o, "batch", in->batch), num(o, "version", in->version);
    num(o, "vslot", in->vslot), num(o, "src_vslot", in->src_vslot), num(o, "group", in->group);
    break;
  case PI_COUNT: PD_CHECK(0, "op"); break;
  }
  return o;
}

static cJSON *stage_json(const Plan *p, int i, int stream) {
  const PlanStage *s = &p->stages[i];
  cJSON *o = cJSON_CreateObject();
  num(o, "index", i);
  cJSON *segs = cJSON_AddArrayToObject(o, "segments");
  for (int k = s->first_seg; k < s->last_seg; k++)
    cJSON_AddItemToArray(segs, cJSON_CreateString(p->in.segs[k].name));
  num(o, "first_segment", s->first_seg);
  num(o, "last_segment", s->last_seg);
  num(o, "parameters", (double)s->params);
  num(o, "fwd_time_s", s->fwd_s);
  num(o, "bwd_time_s", s->bwd_s);
  num(o, "in_bytes", s->in_bytes);
  num(o, "out_bytes", s->out_bytes);
  num(o, "weight_versions", s->nversions);
  num(o, "stash_slots", s->nstash);
  cJSON *mem = cJSON_AddObjectToObject(o, "memory");
  num(mem, "total_bytes", (double)s->total_bytes);
  num(mem, "estimated_bytes", (double)s->estimated_bytes);
  num(mem, "cuda_scratch", (double)s->cuda_scratch);
  if (s->weights_bf16) num(mem, "weights_bf16", (double)s->weights_bf16);
  num(mem, "device_bytes", (double)plan_stage_device_bytes(s));
  cJSON *bufs = cJSON_AddArrayToObject(mem, "buffers");
  for (int b = 0; b < s->nbufs; b++) {
    cJSON *x = cJSON_CreateObject();
    cJSON_AddStringToObject(x, "kind", plan_buf_kind_name(s->bufs[b].kind));
    num(x, "index", s->bufs[b].index);
    num(x, "offset", (double)s->bufs[b].offset);
    num(x, "size", (double)s->bufs[b].size);
    cJSON_AddItemToArray(bufs, x);
  }
  cJSON *ranks = cJSON_AddArrayToObject(o, "ranks");
  for (int r = 0; r < p->cfg.replicas; r++) {
    cJSON *x = cJSON_CreateObject();
    num(x, "replica", s->ranks[r].replica);
    num(x, "rank", s->ranks[r].rank);
    num(x, "node", s->ranks[r].node);
    num(x, "device", s->ranks[r].device);
    cJSON_AddItemToArray(ranks, x);
  }
  num(o, "stream", stream);
  cJSON *sim = cJSON_AddObjectToObject(o, "simulated");
  num(sim, "busy_s", p->sim.busy_s[i]);
  num(sim, "idle_s", p->sim.idle_s[i]);
  num(sim, "max_stash_slots", p->sim.max_stash[i]);
  num(sim, "max_weight_versions", p->sim.max_versions[i]);
  num(sim, "peak_bytes", (double)plan_stage_device_bytes(s) -
                             (double)(s->nstash - p->sim.max_stash[i]) * s->stash_slot_bytes);
  return o;
}

static bool same_relative(const PlanStream *a, int sa, const PlanStream *b, int sb) {
  if (a->n != b->n) return false;
  for (int k = 0; k < a->n; k++) {
    const PlanInstr *x = &a->ins[k], *y = &b->ins[k];
    if (x->op != y->op || x->mb != y->mb || x->batch != y->batch || x->version != y->version ||
        x->vslot != y->vslot || x->src_vslot != y->src_vslot || x->sslot != y->sslot ||
        x->group != y->group || x->with_next != y->with_next)
      return false;
    if (x->peer - sa != y->peer - sb && x->peer >= 0) return false; /* -1: no peer */
  }
  return true;
}

/* "streams": each distinct instruction stream once (peers relative); returns each
 * stage's index into it. A 98-stage plan has about m + 3 distinct streams. */
static int *stream_table(const Plan *p, cJSON *root) {
  int d = p->cfg.stages, n = 0;
  int *of = pd_malloc((size_t)d * sizeof *of), *first = pd_malloc((size_t)d * sizeof *first);
  cJSON *streams = cJSON_AddArrayToObject(root, "streams");
  for (int i = 0; i < d; i++) {
    const PlanStream *st = &p->streams.st[i];
    of[i] = -1;
    for (int k = 0; k < n && of[i] < 0; k++)
      if (same_relative(&p->streams.st[first[k]], first[k], st, i)) of[i] = k;
    if (of[i] >= 0) continue;
    of[i] = n, first[n++] = i;
    cJSON *ins = cJSON_CreateArray();
    for (int k = 0; k < st->n; k++) cJSON_AddItemToArray(ins, instr_json(&st->ins[k], i));
    cJSON_AddItemToArray(streams, ins);
  }
  free(first);
  return of;
}

static void add_sections(const Plan *p, cJSON *root) {
  cJSON_AddItemToObject(root, "config", config_json(&p->cfg));
  cJSON_AddStringToObject(root, "placement",
                          p->placement == PP_STAGE_MAJOR ? "stage-major" : "replica-major");
  num(root, "schedule_batches", p->streams.spec.nbatches);
  cJSON_AddStringToObject(root, "precision", gemm_type_name(plan_precision(&p->in)));
  num(root, "peak_flops", plan_peak_flops(&p->cluster, plan_precision(&p->in)));
  cJSON *cl = cJSON_AddObjectToObject(root, "cluster"); /* what the plan was fitted to */
  cJSON_AddStringToObject(cl, "name", p->cluster.name ? p->cluster.name : "");
  cJSON_AddStringToObject(cl, "device", p->cluster.device ? p->cluster.device : "");
  num(cl, "nodes", p->cluster.nodes);
  num(cl, "devices_per_node", p->cluster.devices_per_node);
  num(cl, "memory_bytes", p->cluster.memory_bytes);
  int *stream = stream_table(p, root);
  cJSON *stages = cJSON_AddArrayToObject(root, "stages");
  for (int i = 0; i < p->cfg.stages; i++) cJSON_AddItemToArray(stages, stage_json(p, i, stream[i]));
  free(stream);
  cJSON *tied = cJSON_AddArrayToObject(root, "tied");
  for (int g = 0; g < p->ngroups; g++) {
    const PlanTiedGroup *G = &p->groups[g];
    cJSON *x = cJSON_CreateObject();
    num(x, "group", g);
    cJSON_AddStringToObject(x, "name", p->in.tied[G->tied].name);
    num(x, "parameters", (double)p->in.tied[G->tied].count);
    cJSON *ss = cJSON_AddArrayToObject(x, "stages");
    for (int j = 0; j < G->nstages; j++) cJSON_AddItemToArray(ss, cJSON_CreateNumber(G->stages[j]));
    cJSON_AddItemToArray(tied, x);
  }
  cJSON *pr = cJSON_AddObjectToObject(root, "predicted");
  num(pr, "step_time_s", p->sim.step_time_s);
  num(pr, "samples_per_s", p->sim.step_time_s > 0 ? (double)p->in.batch / p->sim.step_time_s : 0);
  num(pr, "bubble_fraction", p->sim.bubble_fraction);
  double peak = 0;
  for (int i = 0; i < p->cfg.stages; i++)
    if ((double)plan_stage_device_bytes(&p->stages[i]) > peak)
      peak = (double)plan_stage_device_bytes(&p->stages[i]);
  num(pr, "peak_bytes", peak);
  cJSON *cands = cJSON_AddArrayToObject(root, "candidates");
  for (int k = 0; k < p->ncands; k++) {
    const PlanCandidate *c = &p->cands[k];
    cJSON *x = config_json(&c->cfg);
    cJSON_AddBoolToObject(x, "fits", c->fits);
    cJSON_AddBoolToObject(x, "chosen", c->chosen);
    if (c->fits) {
      num(x, "step_time_s", c->step_time_s);
      num(x, "samples_per_s", c->samples_per_s);
      num(x, "peak_bytes", c->peak_bytes);
    }
    cJSON_AddStringToObject(x, "why", c->why);
    cJSON_AddItemToArray(cands, x);
  }
}

/* ---- readable files ----------------------------------------------------------- */

static void schedule_txt(const Plan *p, FILE *f) {
  fprintf(f, "# %s: schedule %s, %d stages, %" PRId64 " microbatches per batch, %d batches\n",
          p->in.name, plan_schedule_name(p->cfg.schedule), p->cfg.stages, p->cfg.microbatches,
          p->streams.spec.nbatches);
  fprintf(f, "# '+' = posted together with the next instruction\n");
  for (int i = 0; i < p->cfg.stages; i++) {
    fprintf(f, "\nstage %d:\n", i);
    const PlanStream *st = &p->streams.st[i];
    for (int k = 0; k < st->n; k++) {
      char b[160];
      fprintf(f, "  %4d  %s\n", k, plan_instr_str(&st->ins[k], b, sizeof b));
    }
  }
}

static void memory_txt(const Plan *p, FILE *f) {
  fprintf(f, "# %s: per-stage arenas (offsets 256-byte aligned), device memory %.0f bytes, "
          "precision %s\n", p->in.name, p->cluster.memory_bytes, gemm_type_name(plan_precision(&p->in)));
  for (int i = 0; i < p->cfg.stages; i++) {
    const PlanStage *s = &p->stages[i];
    fprintf(f, "\nstage %d: %" PRIu64 " bytes (%.3f GiB), %" PRId64
            " parameters, %d weight version(s), %d stash slot(s)\n",
            i, s->total_bytes, (double)s->total_bytes / (1024.0 * 1024 * 1024), s->params,
            s->nversions, s->nstash);
    for (int b = 0; b < s->nbufs; b++)
      fprintf(f, "  %-12s %3d  offset %14" PRIu64 "  size %14" PRIu64 "\n",
              plan_buf_kind_name(s->bufs[b].kind), s->bufs[b].index, s->bufs[b].offset,
              s->bufs[b].size);
    fprintf(f, "  %-12s %3d  (beside the arena)    size %14" PRIu64 "\n", "cuda_scratch", 0,
            s->cuda_scratch);
    if (s->weights_bf16)
      fprintf(f, "  %-12s %3d  (beside the arena)    size %14" PRIu64 "\n", "weights_bf16", s->nversions,
              s->weights_bf16);
    fprintf(f, "  device: %" PRIu64 " bytes (%.3f GiB) = arena + cuda_scratch rounded to 256%s\n",
            plan_stage_device_bytes(s), (double)plan_stage_device_bytes(s) / (1024.0 * 1024 * 1024),
            s->weights_bf16 ? " + weights_bf16" : "");
  }
}

bool plan_write(const Plan *p, const char *dir, cJSON *root, Diag *d) {
  if (mkdir(dir, 0777) != 0 && errno != EEXIST) {
    Loc none = {0};
    diag_error(d, none, "cannot create directory '%s': %s", dir, strerror(errno));
    return false;
  }
  MemFile m;
  schedule_txt(p, mem_open(&m));
  if (!mem_write(&m, dir, "schedule.txt", d)) return false;
  memory_txt(p, mem_open(&m));
  if (!mem_write(&m, dir, "memory.txt", d)) return false;
  plan_timeline_svg(p, mem_open(&m));
  if (!mem_write(&m, dir, "timeline.svg", d)) return false;
  cJSON *tl = plan_timeline_json(p);
  bool ok = json_write(tl, dir, "timeline.json", false, d);
  cJSON_Delete(tl);
  if (!ok) return false;
  if (root) {
    add_sections(p, root);
    plan_json_sort(root);
    return true;
  }
  cJSON *own = cJSON_CreateObject();
  num(own, "version", 1);
  add_sections(p, own);
  ok = json_write(own, dir, "plan.json", true, d);
  cJSON_Delete(own);
  return ok;
}
