/* tests/cudaexec/test_cudapipe_bf16.c — single-GPU pipeline mode with pd2bwc
 * --precision bf16: the optimizer writes the bf16 weight copies, no GEMM casts a weight,
 * one multi-tensor AdamW launch per stage replica and update, and the bf16 copies the
 * runtime allocates are the plan's memory.weights_bf16.
 *
 * The emulated device (emu_device.h), streams reordered (lowest first), CUDA graphs
 * off so that every launch is counted. The tiny GPT of tests/pipeline (tied wte/LM
 * head on both stages), d = 2, m = 4, clip 1, 3 steps:
 *   - 2bw: the tied parameter is stepped apart (deferred) on each stage: a per-tensor
 *     AdamW and a cast of the version it wrote into its bf16 copy, per stage and step;
 *   - 1f1b: the tied parameter is summed before the update and is in the table.
 * Checks per run:
 *   - the launch lists (static): no pkc_cast_f32_to_bf16 reads the params block, and
 *     GEMMs read params_bf16 (before the bf16 weight copies every weight operand was
 *     cast here, once per GEMM per microbatch);
 *   - what ran: AdamW launches = one pkc_adamw_multi_dev_f32 per stage replica per step,
 *     per-tensor AdamW only for deferred tied steps; casts = the lists' (activation
 *     operands) x microbatches + one per stage replica at load (the version its first
 *     pass reads) + the deferred tied steps' casts: nothing else casts a weight;
 *   - memory: the bf16 copies allocated == Σ over stage replicas of plan.json's
 *     memory.weights_bf16 (2 bytes a parameter per version, 256-aligned);
 *   - the losses and weights against the CPU sequential reference within BF16_TOL (the
 *     bound of test_cudaexec_bf16: bf16 keeps 8 significant bits).
 *
 * And (resume) a resumed bf16 run makes its copies from the checkpoint: bit for bit the
 * uninterrupted run, with and without delay compensation (the plans predict, so their
 * versions hold the copies: the checkpoint's prev./next. of a GEMM weight are bf16 values).
 *
 * And (fold) weight prediction at no memory cost (docs/update-rules.md, "Memory"):
 * predict=1 needs no more device bytes than predict=0 per stage (estimate and exact), no
 * copy is allocated beside the versions, and the plan trains bit for bit like its lists
 * rewritten with the copies beside (losses, weights, each step's validation loss).
 *
 * And (sgd) 1f1b with SGD: no AdamW; the copy is one cast of the version written per
 * stage replica and step, and the run stays within the bound of the reference.
 *
 * And (memory) the bf16 activations' sizes, computed here from the model's shapes,
 * not by the layout: with b = 2, T = 8, C = 16 every tensor sent between the stages
 * (act_out/act_in h.0.x, grad_in/grad_out dh.0.x) is b·T·C·2 = 512 bytes in the bf16
 * plan (1024 in its fp32 twin); a stage's stash slot is its fp32 twin's with every
 * stashed float tensor halved but attention's lse (fp32 statistics, b·heads·T·4 = 128
 * bytes, one attention per h.* segment): (stash32 + n·128) / 2, all sizes being
 * multiples of 128 bytes here; and the arena the emulated runtime allocates for each
 * stage is plan.json's memory.total_bytes (256-aligned), the launch lists' blocks the
 * C programs' (checked at load).
 *
 * And (recompute) 1f1b with --recompute on: the backward re-runs the forward from the
 * stashed bf16 input (its working place cast up again), within BF16_TOL of the CPU
 * reference.
 *
 *   test_cudapipe_bf16 PD2BWC [2bw|1f1b|resume|sgd|memory|recompute|fold]   (in the source tree)
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "emu_train.h"
#include "runtime/cuda/pipe/cuda_pipe.h"
#include "runtime/reference/reference.h"
#include "test.h"

#define STEPS 3
#define BF16_TOL 5e-3

static char tmp[64] = "/tmp/pd2bw-test-cudapipe-bf16-XXXXXX";

/* sgd: the plan trains with SGD (per-parameter steps, then one cast of the version
 * written into its bf16 copy per stage replica and step). */
/* The GPU run r of plan p matches the sequential CPU reference within BF16_TOL; frees r. */
static void expect_reference(const PipePlan *p, const char *data, PipeOutcome *r) {
  char err[RT_ERR_LEN] = "";
  PipeOptions po = {.data_path = data, .steps = STEPS};
  bool match = pipeline_check_reference(p, &po, r, BF16_TOL, stdout, err, sizeof err);
  if (!match) fprintf(stderr, "  %s\n", err);
  EXPECT(match);
  pipe_outcome_free(r);
}

/* Whether stage s's launch list of plan dir keeps the bf16 copies in the weight versions
 * (weight prediction: "bf16_in_versions"). */
static bool list_folds(const char *dir, int s) {
  char path[300];
  snprintf(path, sizeof path, "%s/stage%d.launch.json", dir, s);
  cJSON *l = emu_read_json(path);
  bool f = cJSON_IsArray(cJSON_GetObjectItemCaseSensitive(l, "bf16_in_versions"));
  cJSON_Delete(l);
  return f;
}

static void run(const char *name, const char *args, int deferred_per_step, bool sgd) {
  EXPECT(emu_pipe_make_plan(name, args));
  char dir[256], data[256], err[RT_ERR_LEN] = "";
  emu_path(dir, sizeof dir, name);
  emu_path(data, sizeof data, "train.bin");
  PipePlan *p = emu_pipe_load(name, 0);
  EXPECT(p != NULL);
  if (!p) return;
  /* the lists, and the plan's figure of the bf16 copies */
  int64_t list_casts = 0;
  bool fold = list_folds(dir, 0); /* weight prediction: the versions hold the copies */
  for (int s = 0; s < p->d; s++) {
    EXPECT(list_folds(dir, s) == fold);
    int c, wc, g16;
    EXPECT(emu_list_casts(dir, s, &c, &wc, &g16));
    printf("  %s stage %d: %d casts in its list (%d of a weight), %d GEMM operands read params_bf16\n", name, s, c, wc,
           g16);
    EXPECT_EQ_INT(wc, 0);
    EXPECT(g16 > 0);
    list_casts += c;
  }
  char path[300];
  snprintf(path, sizeof path, "%s/plan.json", dir);
  cJSON *plan = emu_read_json(path);
  uint64_t planned_w16 = 0, loads = 0;
  const cJSON *st;
  cJSON_ArrayForEach(st, cJSON_GetObjectItemCaseSensitive(plan, "stages")) {
    const cJSON *w = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(st, "memory"), "weights_bf16");
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(st, "weight_versions");
    EXPECT(fold ? !w && cJSON_IsNumber(v) && v->valuedouble == 3 : cJSON_IsNumber(w) && cJSON_IsNumber(v));
    if (cJSON_IsNumber(w)) planned_w16 += (uint64_t)w->valuedouble * (uint64_t)p->w;
    /* one cast at load per stage replica: the version the first pass reads (2bw's
     * second version gets its copy from the first update, which writes it whole); none
     * where the versions hold the copies (made on the host at upload) */
    if (cJSON_IsNumber(v) && !fold) loads += (uint64_t)p->w;
  }
  cJSON_Delete(plan);
  /* the run, launch by launch */
  emu_device_set_graphs(false);
  CudaDeviceOps ops = emu_device_ops(tmp, EMU_LOWEST_FIRST);
  emu_device_set_graphs(true);
  CxOptions o = {.data_path = data, .steps = STEPS, .quiet = true, .gemm = GEMM_PLAN};
  PipeOutcome r = {0};
  CxPipeStats stats = {0};
  int rc = cx_pipe_train(p, &ops, &o, &r, &stats, err, sizeof err);
  if (rc) fprintf(stderr, "  %s\n", err);
  EXPECT(rc == 0);
  EmuCounts n = emu_device_counts();
  int nsr = p->d * p->w;
  int64_t passes = (int64_t)STEPS * p->m * p->w; /* each stage: a forward and a backward per microbatch */
  /* folded: a deferred tied step is a multi-tensor launch of its own, and casts nothing */
  int64_t deferred_casts = fold ? 0 : (int64_t)deferred_per_step * STEPS;
  int64_t want_casts = list_casts * passes + (int64_t)loads + deferred_casts + (sgd ? STEPS * nsr : 0);
  printf("  %s: %d launches, %d casts (want %lld: lists %lld x %lld microbatches + %llu at load + %d deferred tied), "
         "AdamW: %d multi-tensor, %d per tensor; bf16 copies %llu bytes (plan %llu)\n", name, n.launches, n.casts,
         (long long)want_casts, (long long)list_casts, (long long)passes, (unsigned long long)loads,
         deferred_per_step * STEPS, n.adamw_multi, n.adamw_one, (unsigned long long)stats.weights_bf16,
         (unsigned long long)planned_w16);
  EXPECT_EQ_INT(n.adamw_multi, sgd ? 0 : STEPS * nsr + (fold ? deferred_per_step * STEPS : 0));
  EXPECT_EQ_INT(n.adamw_one, sgd || fold ? 0 : deferred_per_step * STEPS);
  EXPECT_EQ_INT(n.casts, want_casts);
  EXPECT(fold ? planned_w16 == 0 : planned_w16 > 0);
  EXPECT_EQ_INT(stats.weights_bf16, planned_w16);
  if (!rc) expect_reference(p, data, &r);
  pipe_plan_free(p);
}

/* No flushed start (pd2bwc's default K, a tenth of train.steps, would make every step of
 * this short run vanilla): 2bw with weight prediction (k = 1 by default), whose
 * multi-tensor AdamW writes the bf16 copies of the predicted weights, into the versions
 * themselves (no copy beside them: part fold). */
static void test_2bw(void) {
  run("p2bw",
      "--precision bf16 -D clipv=1.0 --stages 2 --replicas 1 --microbatches 4 --schedule 2bw --recompute off "
      "-D train.flush_steps=0",
      2, false);
}

static void test_1f1b(void) {
  run("p1f1b", "--precision bf16 -D clipv=1.0 --stages 2 --replicas 1 --microbatches 4 --schedule 1f1b --recompute off",
      0, false);
}

static void test_sgd(void) {
  run("psgd", "--precision bf16 -D clipv=1.0 -D train.optimizer=sgd -D train.momentum=0.9 -D train.lr=0.05 "
              "--stages 2 --replicas 1 --microbatches 4 --schedule 1f1b --recompute off", 0, true);
}

/* Checkpoint ck of a plan whose versions hold the bf16 copies: weight `name` (a GEMM's)
 * has its master W and the weights batches `step` and `step` + 1 run on, prev.name and
 * next.name, and those are bf16 copies widened (no low bits), the master float32. */
static void expect_folded_ckpt(const char *ck, const char *name) {
  char err[RT_ERR_LEN] = "", nm[128];
  SafeTensors *f = st_open(ck, err, sizeof err);
  EXPECT(f != NULL);
  if (!f) return;
  for (int q = 0; q < 3; q++) {
    snprintf(nm, sizeof nm, "%s%s", q == 0 ? "" : q == 1 ? "prev." : "next.", name);
    const StTensor *t = st_find(f, nm);
    EXPECT(t != NULL);
    float *x = t ? malloc((size_t)t->numel * 4) : NULL;
    int64_t low = 0;
    if (x && st_read_f32(f, t, x, err, sizeof err))
      for (int64_t i = 0; i < t->numel; i++) {
        uint32_t u;
        memcpy(&u, &x[i], 4);
        low += (u & 0xffffu) != 0;
      }
    printf("  %s: %lld of %lld elements with bits below bf16's\n", nm, (long long)low, t ? (long long)t->numel : 0LL);
    EXPECT(q == 0 ? low > 0 : low == 0);
    free(x);
  }
  st_close(f);
}

/* A resumed run makes its bf16 copies from the checkpoint's weights: 2 steps, --save,
 * then resumed to 4 steps gives the losses of steps 3-4 and the final weights of 4
 * uninterrupted steps bit for bit (the emulated device is deterministic). The plan
 * predicts (pd2bwc's default), so its versions hold the copies: they are rounded into
 * the versions at upload, the checkpoint's prev./next. are them widened (and the
 * master float32); the same with delay compensation, which reads W(t-1) from the copy. */
static void test_resume(void) {
  const char *args[2] = {"-D train.flush_steps=1", "-D train.delay_comp=1000 -D train.flush_steps=1"};
  for (int a = 0; a < 2; a++) {
    char pa[512], name[16], dir[256], data[256], ck[256], err[RT_ERR_LEN] = "";
    snprintf(name, sizeof name, "pres%d", a);
    snprintf(pa, sizeof pa, "--precision bf16 -D clipv=1.0 --stages 2 --replicas 1 --microbatches 4 --schedule 2bw "
             "--recompute off %s", args[a]);
    EXPECT(emu_pipe_make_plan(name, pa));
    emu_path(dir, sizeof dir, name);
    emu_path(data, sizeof data, "train.bin");
    emu_path(ck, sizeof ck, "pres2.safetensors");
    EXPECT(list_folds(dir, 0) && list_folds(dir, 1)); /* the versions hold the copies: checkpoints convert */
    PipePlan *p = pipe_plan_load(dir, err, sizeof err);
    EXPECT(p != NULL);
    if (!p) return;
    p->rt->train.steps = 4; /* the lr schedule's length, the same in every run */
    PipeOutcome full = {0}, half = {0}, rest = {0};
    CudaDeviceOps ops = emu_device_ops(tmp, EMU_IN_ORDER);
    CxOptions o = {.data_path = data, .steps = 4, .quiet = true, .gemm = GEMM_PLAN};
    int rc = cx_pipe_train(p, &ops, &o, &full, NULL, err, sizeof err);
    ops = emu_device_ops(tmp, EMU_IN_ORDER);
    o.steps = 2, o.save_path = ck;
    rc = rc || cx_pipe_train(p, &ops, &o, &half, NULL, err, sizeof err);
    if (!rc) expect_folded_ckpt(ck, "h.0.fc_w");
    ops = emu_device_ops(tmp, EMU_IN_ORDER);
    o.steps = 4, o.save_path = NULL, o.resume_path = ck;
    rc = rc || cx_pipe_train(p, &ops, &o, &rest, NULL, err, sizeof err);
    if (rc) fprintf(stderr, "  %s\n", err);
    EXPECT(rc == 0);
    if (!rc) {
      int mb = full.mb_per_step;
      bool same = rest.first_step == 2 && memcmp(rest.mb_loss, full.mb_loss + 2 * mb, (size_t)(2 * mb) * 8) == 0;
      for (int k = 0; same && k < full.nparams; k++)
        same = memcmp(rest.weights[k], full.weights[k], (size_t)full.numel[k] * 4) == 0;
      printf("  2bw bf16%s, 2 steps + --save + --resume to 4 vs 4 steps: losses of steps 3-4 and final weights %s\n",
             a ? " with delay compensation" : "", same ? "bit for bit the same" : "DIFFER");
      EXPECT(same);
    }
    pipe_outcome_free(&full);
    pipe_outcome_free(&half);
    pipe_outcome_free(&rest);
    pipe_plan_free(p);
  }
}

/* program.blocks[name] of stage s of plan dir's plan.json; -1 when missing. */
static double plan_stage_num(const char *name, int s, const char *obj, const char *key) {
  char dir[256], path[300];
  emu_path(dir, sizeof dir, name);
  snprintf(path, sizeof path, "%s/plan.json", dir);
  cJSON *plan = emu_read_json(path);
  const cJSON *st = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(plan, "stages"), s);
  const cJSON *o = cJSON_GetObjectItemCaseSensitive(st, obj);
  if (strcmp(obj, "program") == 0) o = cJSON_GetObjectItemCaseSensitive(o, "blocks");
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
  double r = cJSON_IsNumber(v) ? v->valuedouble : -1;
  cJSON_Delete(plan);
  return r;
}

static void test_memory(void) {
  const char *args = "-D clipv=1.0 --stages 2 --replicas 1 --microbatches 4 --schedule 2bw --recompute off";
  char a16[256], a32[256];
  snprintf(a16, sizeof a16, "--precision bf16 %s", args);
  snprintf(a32, sizeof a32, "--precision fp32 %s", args);
  EXPECT(emu_pipe_make_plan("m16", a16) && emu_pipe_make_plan("m32", a32));
  const int64_t act = 2 * 8 * 16, lse = 2 * 2 * 8 * 4; /* b·T·C elements; b·heads·T floats */
  char dir[256], data[256], err[RT_ERR_LEN] = "";
  emu_path(dir, sizeof dir, "m16");
  emu_path(data, sizeof data, "train.bin");
  PipePlan *p = pipe_plan_load(dir, err, sizeof err);
  EXPECT(p != NULL);
  if (!p) return;
  for (int s = 0; s < p->d; s++) {
    const PipeStage *st = &p->st[s];
    EXPECT(st->nbnd > 0);
    for (int k = 0; k < st->nbnd; k++) {
      printf("  stage %d boundary entry %d (role %d): %lld bytes (want %lld)\n", s, k, (int)st->bnd[k].role,
             (long long)st->bnd[k].bytes, (long long)(2 * act));
      EXPECT_EQ_INT(st->bnd[k].bytes, 2 * act);
    }
    double s16 = plan_stage_num("m16", s, "program", "stash"), s32 = plan_stage_num("m32", s, "program", "stash");
    printf("  stage %d stash slot %.0f bytes, fp32 twin %.0f: want (%.0f + %lld) / 2\n", s, s16, s32, s32, (long long)lse);
    EXPECT(s32 > 0);
    EXPECT_EQ_INT((int64_t)s16, ((int64_t)s32 + lse) / 2);
  }
  CudaDeviceOps ops = emu_device_ops(tmp, EMU_IN_ORDER);
  CxOptions o = {.data_path = data, .steps = 1, .quiet = true, .gemm = GEMM_PLAN};
  PipeOutcome r = {0};
  int rc = cx_pipe_train(p, &ops, &o, &r, NULL, err, sizeof err);
  if (rc) fprintf(stderr, "  %s\n", err);
  EXPECT(rc == 0);
  for (int s = 0; !rc && s < p->d; s++) {
    uint64_t planned = (uint64_t)plan_stage_num("m16", s, "memory", "total_bytes");
    printf("  stage %d arena %llu bytes, plan.json memory.total_bytes %llu\n", s, (unsigned long long)r.arena_bytes[s],
           (unsigned long long)planned);
    EXPECT_EQ_INT(r.arena_bytes[s], (planned + 255) / 256 * 256);
  }
  if (!rc) pipe_outcome_free(&r);
  pipe_plan_free(p);
}

/* Plan dir's launch lists rewritten with the bf16 copies beside the versions (the layout
 * of a plan without prediction, which the runtime runs for any plan): params_bf16 =
 * params / 2, each weight operand's offset halved, no bf16_in_versions. */
static bool lists_beside(const char *dir, int d) {
  bool ok = true;
  for (int s = 0; ok && s < d; s++) {
    char path[300];
    snprintf(path, sizeof path, "%s/stage%d.launch.json", dir, s);
    cJSON *l = emu_read_json(path), *blocks = cJSON_GetObjectItemCaseSensitive(l, "blocks");
    const cJSON *pb = cJSON_GetObjectItemCaseSensitive(blocks, "params");
    ok = cJSON_IsNumber(pb) && cJSON_IsArray(cJSON_GetObjectItemCaseSensitive(l, "bf16_in_versions"));
    if (!ok) break;
    cJSON_DeleteItemFromObjectCaseSensitive(l, "bf16_in_versions");
    cJSON_ReplaceItemInObjectCaseSensitive(blocks, "params_bf16", cJSON_CreateNumber(pb->valuedouble / 2));
    cJSON *stack[4096]; /* every object of the list, depth first */
    int n = 0, halved = 0;
    stack[n++] = l;
    while (n > 0) {
      cJSON *o = stack[--n], *c;
      const cJSON *buf = cJSON_GetObjectItemCaseSensitive(o, "buf");
      cJSON *off = cJSON_GetObjectItemCaseSensitive(o, "offset");
      if (cJSON_IsString(buf) && strcmp(buf->valuestring, "params_bf16") == 0 && cJSON_IsNumber(off)) {
        cJSON_SetNumberValue(off, off->valuedouble / 2);
        halved++;
      }
      cJSON_ArrayForEach(c, o) if ((cJSON_IsObject(c) || cJSON_IsArray(c)) && n < 4096) stack[n++] = c;
    }
    char *text = cJSON_Print(l);
    FILE *f = fopen(path, "w");
    ok = f && text && fputs(text, f) >= 0 && halved > 0;
    if (f) ok = fclose(f) == 0 && ok;
    free(text);
    cJSON_Delete(l);
  }
  return ok;
}

/* The total of memory.KEY over plan `name`'s stages. */
static double plan_sum(const char *name, int d, const char *key) {
  double t = 0;
  for (int s = 0; s < d; s++) {
    double x = plan_stage_num(name, s, "memory", key);
    t += x > 0 ? x : 0;
  }
  return t;
}

/* Weight prediction in a bf16 plan costs no memory (docs/update-rules.md, "Memory"): the
 * versions hold the bf16 copies, so the plan with predict = 1 needs per stage no more
 * device memory than with predict = 0, by the search's estimate and by the exact layout,
 * and its runtime allocates no copy beside the arena. The same plan with its lists
 * rewritten to keep the copies beside the versions (lists_beside: three copies, the
 * layout before) trains bit for bit the same, losses, final weights and the validation
 * loss of every step (a pass on the master borrows a version), and validating changes
 * no training bit. */
#define FSTEPS 5 /* batches 2..4 run on predicted weights */
static void test_fold(void) {
  const char *args = "--precision bf16 -D clipv=1.0 --stages 2 --replicas 1 --microbatches 4 --schedule 2bw "
                     "--recompute off -D train.flush_steps=1";
  char a1[512], a0[512];
  snprintf(a1, sizeof a1, "%s -D train.predict=1", args);
  snprintf(a0, sizeof a0, "%s -D train.predict=0", args);
  EXPECT(emu_pipe_make_plan("pk1", a1) && emu_pipe_make_plan("pk0", a0) && emu_pipe_make_plan("pk1b", a1));
  char dir[256], dirb[256], data[256], err[RT_ERR_LEN] = "";
  emu_path(dir, sizeof dir, "pk1");
  emu_path(dirb, sizeof dirb, "pk1b");
  emu_path(data, sizeof data, "train.bin");
  for (int s = 0; s < 2; s++) {
    double e1 = plan_stage_num("pk1", s, "memory", "estimated_bytes"), e0 = plan_stage_num("pk0", s, "memory", "estimated_bytes");
    double x1 = plan_stage_num("pk1", s, "memory", "device_bytes"), x0 = plan_stage_num("pk0", s, "memory", "device_bytes");
    printf("  stage %d device bytes, predict 1 vs 0: estimated %.0f vs %.0f, exact %.0f vs %.0f\n", s, e1, e0, x1, x0);
    EXPECT(e1 > 0 && x1 > 0 && e1 <= e0 && x1 <= x0);
    EXPECT(list_folds(dir, s) && plan_stage_num("pk0", s, "memory", "weights_bf16") > 0);
  }
  EXPECT(plan_sum("pk1", 2, "weights_bf16") == 0);
  EXPECT(lists_beside(dirb, 2));
  PipePlan *p = pipe_plan_load(dir, err, sizeof err), *pb = pipe_plan_load(dirb, err, sizeof err);
  EXPECT(p != NULL && pb != NULL);
  if (!p || !pb) return;
  PipeOutcome r[3] = {{0}};
  CxPipeStats st[3] = {{0}};
  CxOptions o = {.data_path = data, .steps = FSTEPS, .quiet = true, .gemm = GEMM_PLAN, .val_path = data,
                       .eval_every = 1, .eval_batches = 2};
  int rc = 0;
  for (int i = 0; i < 3 && !rc; i++) { /* folded, beside, folded without validation */
    CudaDeviceOps ops = emu_device_ops(tmp, EMU_LOWEST_FIRST);
    CxOptions oi = o;
    if (i == 2) oi.val_path = NULL, oi.eval_every = 0;
    rc = cx_pipe_train(i == 1 ? pb : p, &ops, &oi, &r[i], &st[i], err, sizeof err);
  }
  if (rc) fprintf(stderr, "  %s\n", err);
  EXPECT(rc == 0);
  if (!rc) {
    printf("  bf16 copies allocated: %llu bytes in the versions' plan, %llu with the lists rewritten beside\n",
           (unsigned long long)st[0].weights_bf16, (unsigned long long)st[1].weights_bf16);
    EXPECT(st[0].weights_bf16 == 0 && st[1].weights_bf16 > 0);
    int mb = r[0].mb_per_step;
    for (int q = 1; q < 3; q++) {
      bool same = memcmp(r[0].mb_loss, r[q].mb_loss, (size_t)(FSTEPS * mb) * 8) == 0;
      for (int k = 0; same && k < r[0].nparams; k++)
        same = memcmp(r[0].weights[k], r[q].weights[k], (size_t)r[0].numel[k] * 4) == 0;
      printf("  versions holding the copies vs %s: losses and final weights %s\n",
             q == 1 ? "copies beside them" : "the same without validation", same ? "bit for bit the same" : "DIFFER");
      EXPECT(same);
    }
    for (int t = 0; t < FSTEPS; t++) {
      printf("  step %d: validation loss %.9f (copies beside: %.9f)\n", t + 1, r[0].val_loss[t], r[1].val_loss[t]);
      EXPECT(memcmp(&r[0].val_loss[t], &r[1].val_loss[t], 8) == 0 && isfinite(r[0].val_loss[t]));
    }
  }
  pipe_outcome_free(&r[0]);
  pipe_outcome_free(&r[1]);
  pipe_outcome_free(&r[2]);
  pipe_plan_free(p);
  pipe_plan_free(pb);
}

static void test_recompute(void) {
  EXPECT(emu_pipe_make_plan("prc", "--precision bf16 -D clipv=1.0 --stages 2 --replicas 1 --microbatches 4 "
                                   "--schedule 1f1b --recompute on"));
  char dir[256], data[256], err[RT_ERR_LEN] = "";
  emu_path(dir, sizeof dir, "prc");
  emu_path(data, sizeof data, "train.bin");
  PipePlan *p = pipe_plan_load(dir, err, sizeof err);
  EXPECT(p != NULL && p->recompute);
  if (!p) return;
  CudaDeviceOps ops = emu_device_ops(tmp, EMU_LOWEST_FIRST);
  CxOptions o = {.data_path = data, .steps = STEPS, .quiet = true, .gemm = GEMM_PLAN};
  PipeOutcome r = {0};
  int rc = cx_pipe_train(p, &ops, &o, &r, NULL, err, sizeof err);
  if (rc) fprintf(stderr, "  %s\n", err);
  EXPECT(rc == 0);
  if (!rc) expect_reference(p, data, &r);
  pipe_plan_free(p);
}

int main(int argc, char **argv) {
  const char *part = emu_test_begin(argc, argv, true, "usage: test_cudapipe_bf16 PD2BWC [2bw|1f1b|resume|sgd|memory|recompute|fold]", tmp);
  if (!part) return 2;
  EXPECT(emu_pipe_files());
  if (emu_test_part(part, "2bw")) RUN(test_2bw);
  if (emu_test_part(part, "1f1b")) RUN(test_1f1b);
  if (emu_test_part(part, "resume")) RUN(test_resume);
  if (emu_test_part(part, "sgd")) RUN(test_sgd);
  if (emu_test_part(part, "memory")) RUN(test_memory);
  if (emu_test_part(part, "recompute")) RUN(test_recompute);
  if (emu_test_part(part, "fold")) RUN(test_fold);
  emu_test_end();
  return TEST_REPORT();
}
