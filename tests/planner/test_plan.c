/* plan_create end to end on synthetic GPTs: partition shape, memory accounting per
 * schedule, pins and their errors, the written files, the 175B-on-1024-devices
 * search, profiles. */
#include <cjson/cJSON.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gpt_input.h"
#include "passes/planner.h"
#include "test.h"

static char diag_buf[4096];

/* Runs plan_create with diagnostics captured in diag_buf. */
static Plan *make(const PlanInput *in, const Cluster *c, const PlanPins *pins) {
  FILE *f = tmpfile();
  Diag d;
  diag_init(&d, f);
  Plan *p = plan_create(in, c, pins, &d);
  rewind(f);
  size_t n = fread(diag_buf, 1, sizeof diag_buf - 1, f);
  diag_buf[n] = 0;
  fclose(f);
  EXPECT((p == NULL) == (d.nerrors > 0));
  return p;
}

static int blocks(const Plan *p, int i) {
  int n = 0;
  for (int s = p->stages[i].first_seg; s < p->stages[i].last_seg; s++)
    n += strncmp(p->in.segs[s].name, "h.", 2) == 0;
  return n;
}

/* The embedding and especially the LM head make the end stages heavier: the DP
 * gives them fewer blocks than the middle stages get. */
static void test_partition_light_ends(void) {
  PlanInput in;
  gpt_input(&in, 24, 768, 1024, 50257, 12, 64);
  Cluster c = test_cluster(1, 4, 80);
  PlanPins pins;
  plan_pins_init(&pins);
  pins.stages = 4, pins.replicas = 1, pins.microbatch_size = 1;
  Plan *p = make(&in, &c, &pins);
  EXPECT(p != NULL);
  if (!p) return;
  int b0 = blocks(p, 0), b1 = blocks(p, 1), b2 = blocks(p, 2), b3 = blocks(p, 3);
  EXPECT_EQ_INT(b0 + b1 + b2 + b3, 24);
  EXPECT(b3 < b1 && b3 < b2);
  EXPECT(b0 <= b1 && b0 <= b2);
  EXPECT(b3 < 6); /* not a uniform split */
  /* the tied embedding lives on the first and last stage, with a sync group */
  EXPECT_EQ_INT(p->ngroups, 1);
  EXPECT_EQ_INT(p->groups[0].nstages, 2);
  EXPECT_EQ_INT(p->groups[0].stages[0], 0);
  EXPECT_EQ_INT(p->groups[0].stages[1], 3);
  EXPECT(p->stages[3].params > (int64_t)(50257.0 * 768));
  plan_destroy(p);
  plan_input_free(&in);
}

static const PlanBuffer *buf(const PlanStage *s, PlanBufKind k, int idx) {
  for (int i = 0; i < s->nbufs; i++)
    if (s->bufs[i].kind == k && s->bufs[i].index == idx) return &s->bufs[i];
  return NULL;
}

static int count(const PlanStage *s, PlanBufKind k) {
  int n = 0;
  for (int i = 0; i < s->nbufs; i++) n += s->bufs[i].kind == k;
  return n;
}

static void check_arena(const PlanStage *s) {
  uint64_t end = 0;
  for (int i = 0; i < s->nbufs; i++) {
    EXPECT_EQ_INT(s->bufs[i].offset % 256, 0);
    EXPECT(s->bufs[i].offset >= end); /* laid out in order, no overlap */
    end = s->bufs[i].offset + s->bufs[i].size;
  }
  EXPECT(s->total_bytes >= end);
  EXPECT(s->total_bytes < end + 256);
}

static void test_memory_per_schedule(void) {
  PlanInput in;
  gpt_input(&in, 8, 256, 128, 1000, 4, 64);
  Cluster c = test_cluster(1, 4, 80);
  for (int sc = 0; sc < PS_COUNT; sc++) {
    PlanPins pins;
    plan_pins_init(&pins);
    pins.stages = 4, pins.replicas = 1, pins.microbatches = 8, pins.schedule = sc;
    pins.recompute = PR_OFF;
    Plan *p = make(&in, &c, &pins);
    EXPECT(p != NULL);
    if (!p) continue;
    for (int i = 0; i < 4; i++) {
      const PlanStage *s = &p->stages[i];
      check_arena(s);
      EXPECT_EQ_INT(count(s, PB_WEIGHTS), s->nversions);
      EXPECT_EQ_INT(count(s, PB_STASH), s->nstash);
      EXPECT_EQ_INT(count(s, PB_GRADS), 1);
      EXPECT_EQ_INT(count(s, PB_OPT_M), 1);
      EXPECT_EQ_INT(count(s, PB_OPT_V), 1);
      const PlanBuffer *w0 = buf(s, PB_WEIGHTS, 0), *g = buf(s, PB_GRADS, 0);
      EXPECT(w0 && g && w0->size == (uint64_t)s->params * 4);
      /* 2bw keeps the tied embedding's gradient (first and last stage) apart, twice */
      bool split = sc == PS_2BW && (i == 0 || i == 3);
      EXPECT_EQ_INT(count(s, PB_TIED_GRADS), split ? 2 : 0);
      uint64_t tied = split ? (uint64_t)(1000 * 256) * 4 : 0;
      /* PB_GRADS is every parameter's, as in the exact plan (the program's GRADS block) */
      EXPECT(g && g->size == w0->size);
      if (split) EXPECT_EQ_INT(buf(s, PB_TIED_GRADS, 1)->size, tied);
      /* every schedule: TIED_SYNC receives the other member's gradient, twice */
      bool member = i == 0 || i == 3;
      EXPECT_EQ_INT(count(s, PB_TIED_RECV), member ? 2 : 0);
      if (member) EXPECT_EQ_INT(buf(s, PB_TIED_RECV, 1)->size, (uint64_t)(1000 * 256) * 4);
      switch ((PlanSchedule)sc) {
      case PS_GPIPE:
        EXPECT_EQ_INT(s->nversions, 1);
        EXPECT_EQ_INT(s->nstash, 8);
        break;
      case PS_1F1B:
        EXPECT_EQ_INT(s->nversions, 1);
        EXPECT_EQ_INT(s->nstash, 4 - i);
        break;
      case PS_2BW:
        EXPECT_EQ_INT(s->nversions, 2);
        EXPECT(s->nstash <= 4 - i);
        break;
      case PS_PIPEDREAM:
        EXPECT(s->nversions <= 4 - i);
        EXPECT(s->nstash <= 4 - i);
        break;
      case PS_COUNT: break;
      }
      /* the simulation never held more than planned */
      EXPECT(p->sim.max_stash[i] <= s->nstash);
      EXPECT(p->sim.max_versions[i] <= s->nversions);
      EXPECT_EQ_INT(p->sim.max_stash[i], s->nstash);
    }
    plan_destroy(p);
  }
  plan_input_free(&in);
}

/* Recomputation stashes only the stage input per slot. */
/* plan_apply_layouts: the exact arena, from the programs' block sizes, buffer for
 * buffer what the pipeline runtime allocates (runtime/pipeline/pipeline.c). */
static void test_apply_layouts(void) {
  PlanInput in;
  gpt_input(&in, 8, 256, 128, 1000, 4, 64);
  Cluster c = test_cluster(1, 4, 80);
  for (int rc = 0; rc < 2; rc++)
    for (int sc = PS_1F1B; sc <= PS_2BW; sc++) {
      PlanPins pins;
      plan_pins_init(&pins);
      pins.stages = 4, pins.replicas = 1, pins.microbatches = 8, pins.schedule = sc;
      pins.recompute = rc ? PR_ON : PR_OFF;
      Plan *p = make(&in, &c, &pins);
      EXPECT(p != NULL);
      if (!p) continue;
      PlanStageBlocks B[4];
      for (int i = 0; i < 4; i++)
        B[i] = (PlanStageBlocks){.params = 1000 + 100 * (uint64_t)i, .grads = 1000 + 100 * (uint64_t)i,
                                 .stash = 5000, .work = 3000, .inputs = i == 0 || i == 3 ? 64 : 0,
                                 .boundary = i == 0 ? 0 : 700, .act_in = i ? 512 : 0};
      plan_apply_layouts(p, B);
      uint64_t tied = 1000 * 256 * 4; /* wte, held by stages 0 and 3 */
      for (int i = 0; i < 4; i++) {
        const PlanStage *s = &p->stages[i];
        check_arena(s);
        EXPECT_EQ_INT(count(s, PB_WEIGHTS), s->nversions);
        EXPECT_EQ_INT(buf(s, PB_WEIGHTS, s->nversions - 1)->size, B[i].params);
        EXPECT_EQ_INT(buf(s, PB_GRADS, 0)->size, B[i].grads);
        EXPECT_EQ_INT(buf(s, PB_OPT_V, 0)->size, B[i].params);
        EXPECT_EQ_INT(count(s, PB_STASH), s->nstash);
        EXPECT_EQ_INT(buf(s, PB_STASH, 0)->size, rc ? B[i].act_in : B[i].stash);
        EXPECT_EQ_INT(count(s, PB_ACTIVATIONS), rc);
        EXPECT_EQ_INT(count(s, PB_INPUTS), B[i].inputs ? 1 : 0);
        EXPECT_EQ_INT(count(s, PB_BOUNDARY), B[i].boundary ? 1 : 0);
        EXPECT_EQ_INT(buf(s, PB_WORKSPACE, 0)->size, B[i].work);
        EXPECT_EQ_INT(count(s, PB_RECV_ACT) + count(s, PB_SEND_ACT) + count(s, PB_RECV_GRAD) +
                          count(s, PB_SEND_GRAD), 0);
        bool member = i == 0 || i == 3;
        EXPECT_EQ_INT(count(s, PB_TIED_RECV), member ? 2 : 0);
        if (member) EXPECT_EQ_INT(buf(s, PB_TIED_RECV, 1)->size, tied);
        bool split = sc == PS_2BW && member;
        EXPECT_EQ_INT(count(s, PB_TIED_GRADS), split ? 2 : 0);
        /* the arena is exactly the buffers, each rounded up to 256 bytes */
        uint64_t sum = 0;
        for (int k = 0; k < s->nbufs; k++) sum += (s->bufs[k].size + 255) / 256 * 256;
        EXPECT_EQ_INT(s->total_bytes, sum);
      }
      plan_destroy(p);
    }
  plan_input_free(&in);
}

static void test_recompute_shrinks_stash(void) {
  PlanInput in;
  gpt_input(&in, 8, 256, 128, 1000, 4, 64);
  Cluster c = test_cluster(1, 4, 80);
  PlanPins pins;
  plan_pins_init(&pins);
  pins.stages = 4, pins.replicas = 1, pins.microbatches = 8, pins.schedule = PS_2BW;
  pins.recompute = PR_OFF;
  Plan *off = make(&in, &c, &pins);
  pins.recompute = PR_ON;
  Plan *on = make(&in, &c, &pins);
  EXPECT(off && on);
  if (off && on) {
    EXPECT(on->cfg.recompute && !off->cfg.recompute);
    const PlanStage *s = &on->stages[1];
    EXPECT_NEAR(s->stash_slot_bytes, s->in_bytes, 0, 0.5);
    EXPECT(on->stages[1].stash_slot_bytes < off->stages[1].stash_slot_bytes);
    EXPECT(on->stages[1].bwd_s > off->stages[1].bwd_s); /* the forward runs again */
  }
  plan_destroy(off), plan_destroy(on);
  plan_input_free(&in);
}

static void test_2bw_m_less_than_d_rejected(void) {
  PlanInput in;
  gpt_input(&in, 8, 256, 128, 1000, 4, 16);
  Cluster c = test_cluster(1, 8, 80);
  PlanPins pins;
  plan_pins_init(&pins);
  pins.stages = 8, pins.replicas = 1, pins.microbatches = 4, pins.schedule = PS_2BW;
  Plan *p = make(&in, &c, &pins);
  EXPECT(p == NULL);
  EXPECT(strstr(diag_buf, "2bw") != NULL);
  EXPECT(strstr(diag_buf, "m = 4 < d = 8") != NULL);
  plan_destroy(p);
  plan_input_free(&in);
}

static void test_parse_names(void) {
  PlanSchedule s;
  PlanRecompute r;
  EXPECT(plan_schedule_parse("2bw", &s) && s == PS_2BW);
  EXPECT(plan_schedule_parse("1f1b", &s) && s == PS_1F1B);
  EXPECT(plan_schedule_parse("pipedream", &s) && s == PS_PIPEDREAM);
  EXPECT(!plan_schedule_parse("2BW", &s));
  EXPECT(plan_recompute_parse("on", &r) && r == PR_ON);
  EXPECT(plan_recompute_parse("auto", &r) && r == PR_AUTO);
  EXPECT(!plan_recompute_parse("yes", &r));
}

static void test_bad_pins(void) {
  PlanInput in;
  gpt_input(&in, 4, 256, 128, 1000, 4, 16);
  Cluster c = test_cluster(1, 4, 80);
  PlanPins pins;
  plan_pins_init(&pins);
  pins.stages = 9;
  EXPECT(make(&in, &c, &pins) == NULL);
  EXPECT(strstr(diag_buf, "--stages 9") != NULL);
  plan_pins_init(&pins);
  pins.stages = 2, pins.replicas = 4;
  EXPECT(make(&in, &c, &pins) == NULL);
  EXPECT(strstr(diag_buf, "exceed") != NULL);
  plan_pins_init(&pins);
  pins.replicas = 1, pins.microbatches = 5; /* 16 not divisible by 5 */
  EXPECT(make(&in, &c, &pins) == NULL);
  EXPECT(strstr(diag_buf, "no configuration") != NULL);
  plan_input_free(&in);
}

static void test_nothing_fits(void) {
  PlanInput in;
  gpt_input(&in, 4, 4096, 1024, 50257, 32, 16);
  Cluster c = test_cluster(1, 2, 1);
  Plan *p = make(&in, &c, NULL);
  EXPECT(p == NULL);
  EXPECT(strstr(diag_buf, "over memory by") != NULL);
  plan_input_free(&in);
}

/* Unpinned: 2bw is preferred; every losing candidate says why. */
static void test_search_and_candidates(void) {
  PlanInput in;
  gpt_input(&in, 16, 1024, 512, 50257, 16, 256);
  Cluster c = test_cluster(2, 4, 16);
  Plan *p = make(&in, &c, NULL);
  EXPECT(p != NULL);
  if (!p) return;
  EXPECT(p->cfg.stages * p->cfg.replicas <= 8);
  EXPECT_EQ_INT(p->cfg.microbatch_size * p->cfg.microbatches * p->cfg.replicas, 256);
  int chosen = 0, over = 0, slower = 0;
  for (int i = 0; i < p->ncands; i++) {
    const PlanCandidate *k = &p->cands[i];
    chosen += k->chosen;
    if (!k->fits) EXPECT(strstr(k->why, "over memory by") || strstr(k->why, "2bw needs") ||
                         strstr(k->why, "stash slots on stage 0 (the runtime keeps"));
    if (!k->fits && strstr(k->why, "over memory")) over++;
    if (k->fits && !k->chosen) {
      EXPECT(strstr(k->why, "slower: ") == k->why || strstr(k->why, "as fast") == k->why ||
             (!k->simulated && strstr(k->why, "not simulated: ") == k->why));
      slower++;
    }
    if (k->fits && k->peak_bytes > c.memory_bytes) EXPECT(0);
  }
  EXPECT_EQ_INT(chosen, 1);
  EXPECT(slower > 0);
  EXPECT(p->sim.step_time_s > 0);
  for (int i = 0; i < p->cfg.stages; i++) EXPECT(p->stages[i].total_bytes <= c.memory_bytes);
  plan_destroy(p);
  plan_input_free(&in);
}

/* GPT 96 layers x 12288 wide on 128 nodes of 8 (80 GiB each) plans. */
static void test_gpt175b_on_1024_devices(void) {
  PlanInput in;
  gpt_input(&in, 96, 12288, 2048, 50257, 96, 1024);
  Cluster c = test_cluster(128, 8, 80);
  Plan *p = make(&in, &c, NULL);
  EXPECT(p != NULL);
  if (!p) {
    fprintf(stderr, "%s", diag_buf);
    return;
  }
  EXPECT(p->cfg.stages * p->cfg.replicas <= 1024);
  EXPECT(p->cfg.stages > 8);
  for (int i = 0; i < p->cfg.stages; i++) EXPECT(p->stages[i].total_bytes <= c.memory_bytes);
  plan_print_summary(p, stdout);
  plan_destroy(p);
  plan_input_free(&in);
}

static bool exists(const char *dir, const char *name) {
  char path[512];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  struct stat st;
  return stat(path, &st) == 0 && st.st_size > 0;
}

static char *slurp(const char *dir, const char *name) {
  char path[512];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  rewind(f);
  char *s = malloc((size_t)n + 1);
  size_t got = fread(s, 1, (size_t)n, f);
  s[got] = 0;
  fclose(f);
  return s;
}

static bool keys_sorted(const cJSON *j) {
  if (!j) return true;
  const char *prev = NULL;
  for (const cJSON *c = j->child; c; c = c->next) {
    if (cJSON_IsObject(j) && prev && strcmp(prev, c->string) >= 0) return false;
    if (cJSON_IsObject(j)) prev = c->string;
    if (!keys_sorted(c)) return false;
  }
  return true;
}

static bool same_instr(const PlanInstr *a, const PlanInstr *b) {
  return a->op == b->op && a->mb == b->mb && a->batch == b->batch && a->version == b->version &&
         a->vslot == b->vslot && a->src_vslot == b->src_vslot && a->sslot == b->sslot &&
         a->peer == b->peer && a->group == b->group && a->with_next == b->with_next;
}

static void test_write_outputs(void) {
  PlanInput in;
  gpt_input(&in, 6, 256, 128, 1000, 4, 32);
  Cluster c = test_cluster(1, 8, 80);
  PlanPins pins;
  plan_pins_init(&pins);
  pins.stages = 4, pins.replicas = 2, pins.microbatch_size = 2;
  Plan *p = make(&in, &c, &pins);
  EXPECT(p != NULL);
  if (!p) return;
  char dir[] = "/tmp/planner_test_XXXXXX";
  EXPECT(mkdtemp(dir) != NULL);
  Diag d;
  diag_init(&d, stderr);
  EXPECT(plan_write(p, dir, NULL, &d));
  EXPECT(exists(dir, "plan.json") && exists(dir, "schedule.txt") && exists(dir, "memory.txt"));
  EXPECT(exists(dir, "timeline.json") && exists(dir, "timeline.svg"));
  char *a = slurp(dir, "plan.json");
  cJSON *j = cJSON_Parse(a);
  EXPECT(j != NULL);
  EXPECT(keys_sorted(j));
  const cJSON *cfg = cJSON_GetObjectItem(j, "config");
  EXPECT_STREQ(cJSON_GetStringValue(cJSON_GetObjectItem(cfg, "schedule")), "2bw");
  EXPECT_EQ_INT(cJSON_GetObjectItem(cfg, "stages")->valueint, 4);
  EXPECT_EQ_INT(cJSON_GetObjectItem(cfg, "microbatches")->valueint, 8);
  const cJSON *stages = cJSON_GetObjectItem(j, "stages");
  EXPECT_EQ_INT(cJSON_GetArraySize(stages), 4);
  const cJSON *s0 = cJSON_GetArrayItem(stages, 0);
  EXPECT_EQ_INT(cJSON_GetArraySize(cJSON_GetObjectItem(s0, "ranks")), 2);
  /* stage i's instructions: streams[stages[i].stream], peers relative (peer_delta) */
  const cJSON *streams = cJSON_GetObjectItem(j, "streams");
  EXPECT(cJSON_IsArray(streams) && cJSON_GetObjectItem(s0, "instructions") == NULL);
  EXPECT_EQ_INT(cJSON_GetArraySize(cJSON_GetArrayItem(streams, cJSON_GetObjectItem(s0, "stream")->valueint)),
                p->streams.st[0].n);
  EXPECT(cJSON_GetObjectItem(cJSON_GetObjectItem(s0, "memory"), "total_bytes") != NULL);
  EXPECT(cJSON_GetObjectItem(j, "predicted") && cJSON_GetObjectItem(j, "candidates"));
  /* the runtime reads the streams back: they must round-trip and verify */
  PlanStreams back;
  memset(&back, 0, sizeof back);
  back.spec = p->streams.spec;
  back.st = calloc(4, sizeof *back.st);
  back.nversions = calloc(4, sizeof(int));
  back.nstash = calloc(4, sizeof(int));
  for (int i = 0; i < 4; i++) {
    const cJSON *si = cJSON_GetArrayItem(stages, i), *x;
    back.nversions[i] = cJSON_GetObjectItem(si, "weight_versions")->valueint;
    back.nstash[i] = cJSON_GetObjectItem(si, "stash_slots")->valueint;
    cJSON_ArrayForEach(x, cJSON_GetArrayItem(streams, cJSON_GetObjectItem(si, "stream")->valueint)) {
      PlanInstr r = {PI_COUNT, 0, -1, -1, -1, -1, -1, -1, -1, false};
      for (int op = 0; op < PI_COUNT; op++)
        if (strcmp(plan_op_name((PlanOp)op), cJSON_GetStringValue(cJSON_GetObjectItem(x, "op"))) == 0)
          r.op = (PlanOp)op;
      const cJSON *f;
      if ((f = cJSON_GetObjectItem(x, "mb"))) r.mb = (int64_t)f->valuedouble;
      if ((f = cJSON_GetObjectItem(x, "batch"))) r.batch = f->valueint;
      if ((f = cJSON_GetObjectItem(x, "version"))) r.version = f->valueint;
      if ((f = cJSON_GetObjectItem(x, "vslot"))) r.vslot = f->valueint;
      if ((f = cJSON_GetObjectItem(x, "src_vslot"))) r.src_vslot = f->valueint;
      if ((f = cJSON_GetObjectItem(x, "stash"))) r.sslot = f->valueint;
      if ((f = cJSON_GetObjectItem(x, "peer_delta"))) r.peer = i + f->valueint;
      if ((f = cJSON_GetObjectItem(x, "group"))) r.group = f->valueint;
      if ((f = cJSON_GetObjectItem(x, "with_next"))) r.with_next = cJSON_IsTrue(f);
      plan_stream_push(&back.st[i], r);
    }
    EXPECT_EQ_INT(back.st[i].n, p->streams.st[i].n);
    for (int k = 0; k < back.st[i].n && k < p->streams.st[i].n; k++)
      EXPECT(same_instr(&back.st[i].ins[k], &p->streams.st[i].ins[k]));
  }
  char verr[512];
  EXPECT(plan_verify(&back, NULL, NULL, verr, sizeof verr));
  plan_streams_free(&back);
  cJSON_Delete(j);
  /* deterministic: a second plan writes the same bytes */
  Plan *q = make(&in, &c, &pins);
  EXPECT(plan_write(q, dir, NULL, &d));
  char *b = slurp(dir, "plan.json");
  EXPECT(a && b && strcmp(a, b) == 0);
  char *sv = slurp(dir, "timeline.svg");
  EXPECT(sv && strncmp(sv, "<svg", 4) == 0 && strstr(sv, "</svg>"));
  free(a), free(b), free(sv);
  /* into a caller's root: sections added, nothing else written */
  cJSON *root = cJSON_CreateObject();
  cJSON_AddNumberToObject(root, "version", 1);
  EXPECT(plan_write(q, dir, root, &d));
  EXPECT(cJSON_GetObjectItem(root, "stages") && keys_sorted(root));
  cJSON_Delete(root);
  /* no temporary left behind */
  char cmd[600];
  snprintf(cmd, sizeof cmd, "ls -a %s | grep -q tmp", dir);
  EXPECT(system(cmd) != 0);
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  EXPECT(system(cmd) == 0);
  plan_destroy(p), plan_destroy(q);
  plan_input_free(&in);
}

/* plan.json stores each distinct instruction stream once (issue 14: 8.8 MB at 1024
 * devices): a gpipe pipeline's middle stages run the same stream, peers relative. */
static void test_streams_shared(void) {
  PlanInput in;
  gpt_input(&in, 30, 256, 128, 1000, 4, 4);
  Cluster c = test_cluster(2, 8, 80);
  PlanPins pins;
  plan_pins_init(&pins);
  pins.stages = 16, pins.replicas = 1, pins.microbatch_size = 1, pins.schedule = PS_GPIPE;
  Plan *p = make(&in, &c, &pins);
  EXPECT(p != NULL);
  if (!p) return;
  char dir[] = "/tmp/planner_streams_XXXXXX";
  EXPECT(mkdtemp(dir) != NULL);
  Diag d;
  diag_init(&d, stderr);
  EXPECT(plan_write(p, dir, NULL, &d));
  char *a = slurp(dir, "plan.json");
  cJSON *j = cJSON_Parse(a);
  const cJSON *streams = cJSON_GetObjectItem(j, "streams"), *st;
  EXPECT(cJSON_IsArray(streams) && cJSON_GetArraySize(streams) <= 4);
  int k = 0;
  cJSON_ArrayForEach(st, cJSON_GetObjectItem(j, "stages")) {
    const cJSON *x = cJSON_GetObjectItem(st, "stream");
    EXPECT(cJSON_IsNumber(x) && x->valueint >= 0 && x->valueint < cJSON_GetArraySize(streams));
    EXPECT_EQ_INT(cJSON_GetArraySize(cJSON_GetArrayItem(streams, x ? x->valueint : 0)), p->streams.st[k].n);
    k++;
  }
  cJSON_Delete(j);
  free(a);
  char cmd[600];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  EXPECT(system(cmd) == 0);
  plan_destroy(p);
  plan_input_free(&in);
}

static void test_profile_replaces_roofline(void) {
  PlanInput in;
  gpt_input(&in, 4, 256, 128, 1000, 4, 16);
  char path[] = "/tmp/planner_profile_XXXXXX";
  int fd = mkstemp(path);
  EXPECT(fd >= 0);
  FILE *f = fdopen(fd, "w");
  fprintf(f, "{\"version\": 1, \"microbatch_size\": 2, \"segments\": ["
             "{\"name\": \"h.1\", \"forward_s\": 0.5, \"backward_s\": 1.0}],"
             "\"ops\": [{\"segment\": \"h.2\", \"forward_s\": 0.25, \"backward_s\": 0.5},"
             "{\"segment\": \"h.2\", \"forward_s\": 0.25, \"backward_s\": 0.5}]}");
  fclose(f);
  Diag d;
  diag_init(&d, stderr);
  EXPECT(plan_profile_load(&in, path, &d));
  Cluster c = test_cluster(1, 4, 80);
  EXPECT_NEAR(plan_cost_fwd(&in, &c, 2, 3, 4), 1.0, 1e-12, 0);   /* 0.25 s/sample x 4 */
  EXPECT_NEAR(plan_cost_bwd(&in, &c, 3, 4, 2), 1.0, 1e-12, 0);   /* (0.5+0.5)/2 x 2 */
  /* a bad profile is a user error */
  f = fopen(path, "w");
  fprintf(f, "{\"version\": 1, \"segments\": [{\"name\": \"nope\", \"forward_s\": 1, \"backward_s\": 1}]}");
  fclose(f);
  FILE *out = tmpfile();
  diag_init(&d, out);
  EXPECT(!plan_profile_load(&in, path, &d));
  EXPECT(d.nerrors == 1);
  fclose(out);
  remove(path);
  plan_input_free(&in);
}

/* Profile values are checked where they stand: a time that is not finite, negative
 * or over 1e6 s, a microbatch size that is not a whole number >= 1, an unknown
 * segment, each an error at the entry's file:line:col (issue 12: 1e308 s made the
 * search report "over memory by -24.00 GiB"). */
static void expect_profile_error(const char *text, const char *want) {
  PlanInput in;
  gpt_input(&in, 4, 256, 128, 1000, 4, 16);
  char path[] = "/tmp/planner_profile_XXXXXX";
  int fd = mkstemp(path);
  EXPECT(fd >= 0);
  FILE *f = fdopen(fd, "w");
  fputs(text, f);
  fclose(f);
  char *got = NULL;
  size_t len = 0;
  FILE *out = open_memstream(&got, &len);
  Diag d;
  diag_init(&d, out);
  EXPECT(!plan_profile_load(&in, path, &d));
  fclose(out);
  char full[512];
  snprintf(full, sizeof full, "%s:%s", path, want);
  EXPECT(strncmp(got, full, strlen(full)) == 0);
  if (strncmp(got, full, strlen(full)) != 0) fprintf(stderr, "  expected: %s\n  got:      %s\n", full, got);
  EXPECT_EQ_INT(d.nerrors, 1);
  free(got);
  remove(path);
  plan_input_free(&in);
}

static void test_profile_values_checked(void) {
  expect_profile_error("{\"version\": 1,\n \"segments\": [\n  {\"name\": \"h.0\", \"forward_s\": 0.5, \"backward_s\": 1},\n"
                       "  {\"name\": \"h.1\", \"forward_s\": 1e308, \"backward_s\": 1}]}\n",
                       "4:3: error: bad profile: forward_s of 'h.1' is 1e+308 (expected seconds per microbatch, from 0 "
                       "to 1e+06)\n");
  expect_profile_error("{\"version\": 1, \"ops\": [\n {\"segment\": \"h.0\", \"forward_s\": 0, \"backward_s\": -2}]}",
                       "2:2: error: bad profile: backward_s of 'h.0' is -2 (expected seconds per microbatch");
  expect_profile_error("{\"version\": 1, \"segments\": [{\"name\": \"h.0\", \"forward_s\": 1e999, \"backward_s\": 1}]}",
                       "1:29: error: bad profile: forward_s of 'h.0' is inf");
  expect_profile_error("{\"version\": 1, \"segments\": [{\"name\": \"h.0\", \"forward_s\": 1, \"backward_s\": 1,\n"
                       "  \"microbatch_size\": 0.5}]}",
                       "1:29: error: bad profile: microbatch_size of 'h.0' must be an integer from 1 to 2147483647\n");
  expect_profile_error("{\"version\": 1,\n  \"microbatch_size\": 1e300, \"segments\": []}",
                       "2:22: error: bad profile: microbatch_size must be an integer from 1 to 2147483647\n");
  expect_profile_error("{\"version\": 1, \"segments\": [{\"name\": \"h.0\", \"forward_s\": 1, \"backward_s\": 1},\n"
                       "   {\"name\": \"h.99\", \"forward_s\": 1, \"backward_s\": 1}]}",
                       "2:4: error: bad profile: unknown segment 'h.99'\n");
}

/* Placement: with heavy gradients and light activations the all-reduce wins the
 * node; with light weights and heavy activations the pipeline does. */
static void test_placement(void) {
  Cluster c = test_cluster(4, 4, 80);
  int d = 4, w = 4;
  /* stage-major: replicas of stage 1 are ranks 4..7, one node */
  EXPECT_EQ_INT(plan_place_rank(PP_STAGE_MAJOR, d, w, 1, 3), 7);
  EXPECT_NEAR(plan_place_ar_bw(&c, PP_STAGE_MAJOR, d, w, 1), c.intra_bandwidth, 0, 0);
  EXPECT_NEAR(plan_place_p2p_bw(&c, PP_STAGE_MAJOR, d, w, 1), c.inter_bandwidth, 0, 0);
  EXPECT_NEAR(plan_place_ar_bw(&c, PP_REPLICA_MAJOR, d, w, 1), c.inter_bandwidth, 0, 0);
  EXPECT_NEAR(plan_place_p2p_bw(&c, PP_REPLICA_MAJOR, d, w, 1), c.intra_bandwidth, 0, 0);
  EXPECT_NEAR(plan_cost_allreduce(100, 4, 10), 2.0 * 3 / 4 * 10, 1e-12, 0);

  PlanInput in;
  gpt_input(&in, 8, 1024, 64, 1000, 8, 64); /* big weights, short sequences */
  PlanPins pins;
  plan_pins_init(&pins);
  pins.stages = 4, pins.replicas = 4, pins.microbatch_size = 1;
  Plan *p = make(&in, &c, &pins);
  EXPECT(p && p->placement == PP_STAGE_MAJOR);
  plan_destroy(p);
  plan_input_free(&in);
  gpt_input(&in, 8, 64, 4096, 100, 1, 64); /* tiny weights, long sequences */
  p = make(&in, &c, &pins);
  EXPECT(p && p->placement == PP_REPLICA_MAJOR);
  if (p) {
    EXPECT_EQ_INT(p->stages[1].ranks[0].rank, 1);
    EXPECT_EQ_INT(p->stages[1].ranks[2].node, 2);
  }
  plan_destroy(p);
  plan_input_free(&in);
}

int main(void) {
  RUN(test_partition_light_ends);
  RUN(test_memory_per_schedule);
  RUN(test_apply_layouts);
  RUN(test_recompute_shrinks_stash);
  RUN(test_2bw_m_less_than_d_rejected);
  RUN(test_parse_names);
  RUN(test_bad_pins);
  RUN(test_nothing_fits);
  RUN(test_search_and_candidates);
  RUN(test_gpt175b_on_1024_devices);
  RUN(test_write_outputs);
  RUN(test_streams_shared);
  RUN(test_profile_replaces_roofline);
  RUN(test_profile_values_checked);
  RUN(test_placement);
  return TEST_REPORT();
}
