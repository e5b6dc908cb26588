/* tests/replay/replay_case.c — one case of the bit-for-bit replay set (scripts/replay.sh,
 * docs/replay.md): trains a plan through ONE of today's training-step code paths and
 * writes what came out as exact text, so that a refactor of those paths can be held to
 * the same bits.
 *
 *   replay_case MODE PLAN DATA STEPS OUT      write the case file OUT (atomically)
 *   replay_case machine                       what the bits depend on, one line each
 *   replay_case selftest                      the SHA-256 against known digests
 *
 * MODE, the code path:
 *   pipe         runtime/pipeline/pipeline.c on local threads (pipeline_run_local)
 *   pipe-mpi     runtime/pipeline/pipeline.c as this MPI rank (mpirun -np d·w; rank 0 writes)
 *   ref          the sequential reference pd2bwrun --reference runs for this plan:
 *                runtime/core/trainer.c on PLAN/reference with the schedule's rule, or for
 *                pipedream runtime/reference/pipeline_seq.c (the plan's stages one after another)
 *   trainer      the one-stage CPU trainer (runtime/core/trainer.c) on a one-stage PLAN
 *   emu-trainer  the one-stage GPU path on the emulated device (tests/cudaexec/emu_device.h), in
 *                order: pd2bwrun --backend cuda's, single-GPU pipeline mode on one rank
 *                (cx_pipe_train; recorded: the one-stage trainer, runtime/pipeline/pipeline_one.c, on
 *                runtime/cuda/exec/cuda_exec_device.c)
 *   emu-pipe     single-GPU pipeline mode (runtime/cuda/pipe/cuda_pipe_threads.c) on the emulated
 *                device, streams queued and run lowest first (deterministic)
 *   nccl         multi-GPU mode (cx_pipe_train_nccl: runtime/exec/ on cuda_exec_device.c, the
 *                NCCL link runtime/cuda/exec/cuda_link_nccl.c) as this MPI rank, one
 *                emulated device per rank, PD2BW_LIBNCCL = tests/nccl's fake libnccl
 *
 * The case file: every step's loss (the mean) and every microbatch's loss as C99 hex
 * floats (%a: the double's exact bits), the step's global gradient norm where the path
 * reports one (the one-stage paths; the pipelined executors keep theirs inside, so
 * their clipping shows only through the weights), then every weight tensor of the
 * final (newest) version: index, name, element count and the SHA-256 of its float32
 * bytes. A diff of two case files names the first step or tensor that moved.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "replay/sha256.h"
#include "runtime/cuda/pipe/cuda_pipe.h"
#if REPLAY_HAVE_EMU
#include "cudaexec/emu_train.h"
#endif
#if REPLAY_HAVE_NCCL
#include "nccl/nccl_emu_ops.h"
#endif
#include "runtime/io/io.h"
#include "runtime/reference/reference.h"

/* ---- the case file --------------------------------------------------------------------- */

typedef struct Text {
  char *s;
  size_t n, cap;
} Text;

static void put(Text *t, const char *fmt, ...) {
  va_list ap, aq;
  va_start(ap, fmt);
  va_copy(aq, ap);
  int k = vsnprintf(NULL, 0, fmt, ap);
  va_end(ap);
  if (t->n + (size_t)k + 1 > t->cap) {
    t->cap = 2 * (t->n + (size_t)k + 1);
    t->s = realloc(t->s, t->cap);
    if (!t->s) abort();
  }
  vsnprintf(t->s + t->n, (size_t)k + 1, fmt, aq);
  va_end(aq);
  t->n += (size_t)k;
}

/* The outcome (losses, weights) plus norms[steps - first] (NULL: the path has none). */
static bool write_case(const char *path, const char *mode, const PipeOutcome *r, const double *norms) {
  Text t = {0};
  int64_t nb = r->steps - r->first_step, m = r->mb_per_step;
  put(&t, "path %s\nsteps %lld..%lld, %lld microbatches per step\n", mode, (long long)r->first_step,
      (long long)r->steps, (long long)m);
  for (int64_t s = 0; s < nb; s++) {
    long long step = (long long)(r->first_step + s);
    put(&t, "step %lld loss %a\n", step, r->step_loss[s]);
    for (int64_t j = 0; j < m; j++) put(&t, "step %lld mb %lld loss %a\n", step, (long long)j, r->mb_loss[s * m + j]);
    if (norms) put(&t, "step %lld grad_norm %a\n", step, norms[s]);
  }
  put(&t, "weights %d tensors\n", r->nparams);
  for (int k = 0; k < r->nparams; k++) {
    char hex[SHA256_HEX_LEN + 1];
    sha256_hex(r->weights[k], (size_t)r->numel[k] * sizeof(float), hex);
    put(&t, "tensor %d %s %lld %s\n", k, r->names[k], (long long)r->numel[k], hex);
  }
  char err[IO_ERR_LEN];
  bool ok = atomic_write_text(path, t.s, err, sizeof err);
  if (!ok) fprintf(stderr, "replay_case: %s\n", err);
  free(t.s);
  return ok;
}

/* ---- the paths --------------------------------------------------------------------------- */

static char workdir[64] = "/tmp/pd2bw-replay-XXXXXX";
static bool emu_started;

#if REPLAY_HAVE_EMU
/* The emulated device's work directory (its modules are compiled there). */
static bool emu_start(void) {
  char *argv[] = {"replay_case", "-", NULL};
  emu_started = emu_test_begin(2, argv, false, "replay_case: emulator", workdir) != NULL;
  return emu_started;
}
#else
/* Built without tests/cudaexec's emulator (no C++ compiler): the GPU paths are not
 * here, and a case that needs them fails (replay.sh reports it), not skips. */
static bool emu_start(void) {
  fprintf(stderr, "replay_case: built without the CUDA emulator (tests/cudaexec needs a C++ compiler)\n");
  return false;
}
static CudaDeviceOps emu_device_ops(const char *dir, int order) {
  (void)dir, (void)order;
  return (CudaDeviceOps){0};
}
static void emu_test_end(void) {}
#define EMU_IN_ORDER 0
#define EMU_LOWEST_FIRST 1
#endif
#if !REPLAY_HAVE_NCCL
static CudaDeviceOps nccl_emu_ops(const char *dir, int order) {
  (void)dir, (void)order;
  return (CudaDeviceOps){0};
}
#endif

/* The one-stage CPU trainer (runtime/pipeline/pipeline_one.c): the same data setup as the
 * reference (pipe_trainer_run). */
static bool run_one_stage(const PipePlan *p, const PipeOptions *o, PipeOutcome *out, double *norms, char *err,
                          size_t errlen) {
  memset(out, 0, sizeof *out);
  if (p->d != 1 || p->w != 1) return snprintf(err, errlen, "the one-stage trainers need d = w = 1"), false;
  RtPlan *rp = p->rt;
  Trainer *ct = trainer_create(rp, NULL, err, errlen);
  const RtStage *st = &rp->stages[0];
  int T = 0;
  for (int k = 0; k < st->ninputs; k++)
    if (st->inputs[k].stream != STREAM_OTHER) T = (int)st->inputs[k].shape[1];
  DataFile *df = NULL;
  DataLoader *dl = NULL;
  bool ok = ct && pipe_data_open(o, pipe_vocab(rp), rp->b * rp->m, T, rp->train.seed, &df, &dl, err, errlen);
  if (ok) {
    out->steps = o->steps;
    out->mb_per_step = rp->m;
    out->mb_loss = calloc((size_t)(o->steps * rp->m), sizeof(double));
    out->step_loss = calloc((size_t)o->steps, sizeof(double));
    for (int64_t s = 0; s < o->steps; s++) {
      StepStats ss;
      trainer_step(ct, dl, &ss);
      memcpy(out->mb_loss + s * rp->m, ss.mb_loss, (size_t)rp->m * sizeof(double));
      out->step_loss[s] = ss.loss;
      norms[s] = ss.grad_norm;
    }
    float *w = malloc((size_t)st->blocks[BUF_PARAMS]);
    trainer_read_params(ct, w);
    out->nparams = st->nparams;
    out->names = calloc((size_t)st->nparams, sizeof(char *));
    out->numel = calloc((size_t)st->nparams, sizeof(int64_t));
    out->weights = calloc((size_t)st->nparams, sizeof(float *));
    for (int k = 0; k < st->nparams; k++) {
      const RtParam *q = &st->params[k];
      out->names[k] = strdup(q->name);
      out->numel[k] = q->numel;
      out->weights[k] = malloc((size_t)q->bytes);
      memcpy(out->weights[k], (const char *)w + q->offset, (size_t)q->bytes);
    }
    free(w);
  }
  data_loader_destroy(dl);
  if (df) data_close(df);
  trainer_destroy(ct);
  return ok;
}

/* Runs MODE; rank 0 (or the only process) writes OUT. */
static int run_case(const char *mode, const char *plan, const char *data, int64_t steps, const char *out_path, int *argc,
                    char ***argv) {
  char err[RT_ERR_LEN + TRANSPORT_ERR_LEN];
  bool mpi = strcmp(mode, "pipe-mpi") == 0 || strcmp(mode, "nccl") == 0;
  Transport *t = NULL;
  if (mpi && !(t = transport_mpi_create(argc, argv, 120, err, sizeof err))) {
    fprintf(stderr, "replay_case: %s\n", err);
    return 1;
  }
  setenv("OMP_NUM_THREADS", "1", 1);
  pd_blas_init(1);
  PipePlan *p = pipe_plan_load(plan, err, sizeof err);
  PipeOutcome r = {0};
  double *norms = NULL;
  bool ok = p != NULL;
  if (ok) {
    if (p->rt->train.steps == 0) p->rt->train.steps = steps;
    PipeOptions po = {.data_path = data, .steps = steps, .quiet = true, .threads = 1};
    CxOptions co = {.data_path = data, .steps = steps, .quiet = true, .gemm = GEMM_PLAN};
    if (strcmp(mode, "pipe") == 0) {
      ok = pipeline_run_local(p, &po, &r, err, sizeof err) == 0;
    } else if (strcmp(mode, "pipe-mpi") == 0) {
      ok = pipeline_run_rank(p, &po, t, &r, err, sizeof err) == 0;
    } else if (strcmp(mode, "ref") == 0) {
      PipeRule rule = pipe_rule_of(p->schedule);
      ok = rule == PIPE_RULE_STAGE_DELAY ? pipe_seq_run(p, &po, rule, &r, err, sizeof err)
                                         : pipe_trainer_run(p, &po, rule, 0, &r, err, sizeof err);
    } else if (strcmp(mode, "trainer") == 0) {
      norms = calloc((size_t)steps, sizeof(double));
      ok = run_one_stage(p, &po, &r, norms, err, sizeof err);
    } else if (strcmp(mode, "emu-pipe") == 0 || strcmp(mode, "emu-trainer") == 0) {
      bool one = mode[4] == 't';
      ok = emu_start();
      CudaDeviceOps ops = emu_device_ops(workdir, one ? EMU_IN_ORDER : EMU_LOWEST_FIRST);
      if (one && (p->d != 1 || p->w != 1)) ok = !snprintf(err, sizeof err, "emu-trainer needs d = w = 1");
      ok = ok && cx_pipe_train(p, &ops, &co, &r, NULL, err, sizeof err) == 0;
      if (ok && one) { /* its grad norms, as the one-stage trainer's were recorded */
        norms = calloc((size_t)steps, sizeof(double));
        memcpy(norms, r.grad_norm, (size_t)(r.steps - r.first_step) * sizeof(double));
      }
    } else if (strcmp(mode, "nccl") == 0) {
      ok = REPLAY_HAVE_NCCL ? emu_start() : (snprintf(err, sizeof err, "built without the stand-in NCCL"), false);
      CudaDeviceOps ops = nccl_emu_ops(workdir, EMU_LOWEST_FIRST);
      ok = ok && cx_pipe_train_nccl(p, &ops, &co, t, &r, err, sizeof err) == 0;
    } else {
      snprintf(err, sizeof err, "unknown mode '%s'", mode);
      ok = false;
    }
  }
  if (!ok && err[0]) fprintf(stderr, "replay_case: %s: %s\n", plan, err);
  bool writer = !t || transport_rank(t) == 0;
  if (ok && writer) ok = write_case(out_path, mode, &r, norms);
  free(norms);
  pipe_outcome_free(&r);
  pipe_plan_free(p);
  if (emu_started) emu_test_end();
  if (t) {
    if (!ok) transport_abort(t, "replay_case failed");
    transport_destroy(t);
  }
  return ok ? 0 : 1;
}

/* ---- machine and selftest ---------------------------------------------------------------- */

/* What the bits depend on: the CPU (BLAS kernels differ by model), the BLAS picked at
 * run time, this driver's compiler and the stage programs' (PD2BW_CC, else cc). */
static int machine(void) {
  pd_blas_init(1);
  char line[512];
  const char *keys[] = {"model name", "cpu family", "model\t", "stepping", "flags"};
  const char *labels[] = {"cpu", "cpu family", "cpu model", "cpu stepping", "cpu flags"};
  FILE *f = fopen("/proc/cpuinfo", "r");
  for (int k = 0; f && k < 5; k++) {
    rewind(f);
    while (fgets(line, sizeof line, f))
      if (strncmp(line, keys[k], strlen(keys[k])) == 0) {
        char *v = strchr(line, ':');
        v = v ? v + 1 + strspn(v + 1, " ") : line;
        if (k == 4) { /* the vector extensions the kernels may use, not every flag */
          printf("%s:", labels[k]);
          const char *want[] = {"avx", "avx2", "fma", "avx512f", "avx512_bf16", "amx_tile"};
          char pat[32];
          for (int i = 0; i < 6; i++)
            if (snprintf(pat, sizeof pat, " %s ", want[i]), strstr(v - 1, pat)) printf(" %s", want[i]);
          printf("\n");
        } else {
          printf("%s: %s", labels[k], v);
        }
        break;
      }
  }
  if (f) fclose(f);
  printf("blas: %s\n", pd_blas_name());
  printf("driver compiler: %s\n", __VERSION__);
  const char *cc = getenv("PD2BW_CC");
  printf("stage compiler: %s\n", cc && *cc ? cc : "cc");
  return 0;
}

static int selftest(void) {
  static const struct {
    const char *in, *hex;
  } known[] = {
      {"", "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"},
      {"abc", "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"},
      {"abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq",
       "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"},
  };
  int bad = 0;
  for (size_t i = 0; i < sizeof known / sizeof known[0]; i++) {
    char hex[SHA256_HEX_LEN + 1];
    sha256_hex(known[i].in, strlen(known[i].in), hex);
    if (strcmp(hex, known[i].hex) != 0) bad++, fprintf(stderr, "sha256(\"%s\") = %s, not %s\n", known[i].in, hex, known[i].hex);
  }
  printf("sha256 selftest: %s\n", bad ? "FAIL" : "ok");
  return bad ? 1 : 0;
}

int main(int argc, char **argv) {
  if (argc == 2 && strcmp(argv[1], "machine") == 0) return machine();
  if (argc == 2 && strcmp(argv[1], "selftest") == 0) return selftest();
  if (argc != 6) {
    fprintf(stderr, "usage: replay_case pipe|pipe-mpi|ref|trainer|emu-trainer|emu-pipe|nccl PLAN DATA STEPS OUT\n"
                    "       replay_case machine|selftest\n");
    return 2;
  }
  char *end;
  long long steps = strtoll(argv[4], &end, 10);
  if (*end || steps < 1 || steps > 1000) {
    fprintf(stderr, "replay_case: STEPS: '%s' is not a number of steps (1..1000)\n", argv[4]);
    return 2;
  }
  return run_case(argv[1], argv[2], argv[3], steps, argv[5], &argc, &argv);
}
