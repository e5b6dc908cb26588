/* runtime/core/runtime.h — the runtime's core (pd2bw_runtime, the lowest layer of the
 * executors: runtime/CMakeLists.txt): plan.json read back into the structs below
 * (plan_read.c, with json_read.c's errors naming the file, key and value), a stage's
 * generated C compiled with the system compiler, cached on disk and dlopen()ed
 * (stage_cc.c, run_capture.c), what every executor shares about parameters (trainer.c:
 * initial values, the learning rate of a step, the checkpoint format) and what a run
 * prints (log.c, console.c). Promises: nothing in a training loop allocates; a user's
 * mistake (a missing or corrupt plan, a stage that does not compile, an ABI mismatch,
 * a data or checkpoint file that does not match) is a one-line message naming the
 * file, never a crash; files we write appear whole or not at all. */
#ifndef PD2BW_RUNTIME_H
#define PD2BW_RUNTIME_H

#include <stdbool.h>
#include <stdint.h>

#include "ir/ir.h"
#include "contract/contract.h"
#include "runtime/blas/blas.h"
#include "runtime/io/io.h"

/* n rounded up to a multiple of 256 bytes: the alignment of every region the runtime
 * carves out of an arena beyond the plan's buffers (device extras, receive slots) and
 * of an arena itself (cuBLAS and 128-bit loads want it). */
static inline uint64_t rt_align256(uint64_t n) { return (n + 255) / 256 * 256; }

#define RT_ERR_LEN 2048

/* ---- stage programs: cc + on-disk cache + dlopen (stage_cc.c) ------------------
 * The .so is cached as $PD2BW_CACHE/<key>.so (default ~/.cache/pd2bw), key = FNV-1a
 * of the source text, the compile command and `cc --version`; built to a temporary
 * name and renamed, so concurrent runs never load a half-written file. Each entry ends
 * in a checksum of its bytes, checked before dlopen: a damaged one is rebuilt. The
 * compiler is $PD2BW_CC or "cc", split into words at spaces (no quoting: a compiler
 * with arguments, "ccache cc", works; a path with a space does not), run without a
 * shell; flags RT_CC_FLAGS. */
#define RT_CC_FLAGS "-O3 -march=native -fopenmp -fPIC -shared"
#define RT_PATH_MAX 4096 /* Linux's PATH_MAX: the longest path a system call takes */

typedef struct StageProgram {
  void *handle;
  int real_bytes; /* 4 or 8 (pd2bw_stage_real_bytes) */
  void (*forward)(StageCtx *);
  void (*backward)(StageCtx *);
  /* segment k's pass alone (ABI 3): pd2bwrun --profile-out times them one by one */
  int nsegs;
  void (*forward_segment)(StageCtx *, int k);
  void (*backward_segment)(StageCtx *, int k);
  bool cache_hit; /* the .so came from the cache */
  char so_path[RT_PATH_MAX];
} StageProgram;

/* The cache directory in use (runtime/io/io.h cache_dir_for_run: $PD2BW_CACHE or
 * ~/.cache/pd2bw, created 0700 if missing, when this user's and writable by no one
 * else; otherwise a private directory for this run, after a note); false with a
 * message if its path (with room for an entry's name) does not fit in n. */
bool rt_cache_dir(char *buf, size_t n, char *err, size_t errlen);
/* Runs argv[0] (searched in PATH) with argv and no shell, stdin /dev/null; returns
 * its stdout and stderr together (pd_malloc'd) and its exit status in *status (-1
 * when it could not be waited for; -1 - N when signal N killed it: RT_RUN_SIGNAL;
 * RT_RUN_TIMED_OUT when it ran past timeout_s > 0 seconds, and it and its process
 * group were killed), or NULL with errno when it cannot start. (run_capture.c) */
char *rt_run_capture(char *const argv[], double timeout_s, int *status);
#define RT_RUN_TIMED_OUT (-100000)
/* How long the stage programs' C compiler may run, in seconds: $PD2BW_CC_TIMEOUT if
 * set (a number > 0), else RT_CC_TIMEOUT_S; the compiler is killed past it with a
 * message (issue 24: a compiler that never returned was waited on forever). */
#define RT_CC_TIMEOUT_S 600
/* The signal that killed a program run by rt_run_capture, from its *status; 0 if none. */
#define RT_RUN_SIGNAL(status) ((status) < -1 && (status) != RT_RUN_TIMED_OUT ? -1 - (status) : 0)
/* Splits s at runs of spaces and tabs into *words (pd_malloc'd, each word too);
 * returns the count. (run_capture.c) */
int rt_split_words(const char *s, char ***words);
/* Compiles (or finds in the cache) and loads c_path; checks the ABI version and
 * that the program's real type has `real_bytes` (0: either). */
bool stage_program_load(const char *c_path, int real_bytes, StageProgram *out, char *err,
                        size_t errlen);
void stage_program_unload(StageProgram *p);

/* ---- the plan (plan_read.c) ------------------------------------------------------ */
typedef enum RtStream {
  STREAM_TOKENS,  /* a window's first T tokens */
  STREAM_TARGETS, /* the same window shifted by one */
  STREAM_OTHER,   /* fed by the caller (tests) */
} RtStream;

typedef struct RtParam {
  char *name;
  int rank;
  int64_t shape[IR_MAX_RANK];
  int64_t numel, offset, bytes; /* offset/bytes in the params (= grads) block */
  InitKind init;
  double std;
  bool decay, has_grad;
} RtParam;

typedef struct RtInput {
  char *name;
  DType dtype;
  int rank;
  int64_t shape[IR_MAX_RANK];
  int64_t offset, bytes;
  RtStream stream;
} RtInput;

typedef struct RtStage {
  char *source;  /* path of stageN.c (plan dir joined) */
  char hash[17]; /* FNV-1a of its text, as recorded by the compiler */
  int real_bytes;
  int64_t b;
  int64_t blocks[BUF_CLASS_COUNT]; /* bytes, indexed by BufClass */
  RtParam *params;
  int nparams;
  RtInput *inputs;
  int ninputs;
  bool has_loss;
  double flops_fwd, flops_bwd; /* per microbatch */
  int att_head_size; /* program.cuda.att_head_size: every attention op's; 0 unknown */
  uint32_t rng_base; /* StageCtx.rng_base: the program's dropout op ids are relative to it */
} RtStage;

typedef struct RtPlan {
  char *dir;
  char *model;
  char *model_consts; /* plan.json model.consts as compact JSON ("{}" without): the model's
                       * shape attributes (heads, kv_heads, rope theta, eps, ...), recorded in
                       * checkpoints' "consts" metadata so that pd2bw-export needs no flags */
  TrainConfig train;
  int64_t b, m; /* microbatch size and microbatches per update */
  char schedule[16]; /* config.schedule: gpipe, 1f1b, 2bw, pipedream */
  bool delayed;      /* the update rule is 2bw's: W(t+1) = W(t) - ν·∇f(W(t-1)) */
  double peak_flops; /* "peak_flops": one device's peak FLOP/s for the plan's precision (0: not given) */
  int nstages;
  RtStage *stages;
} RtPlan;

/* Reads and validates dir/plan.json and checks each stage file exists and matches
 * its recorded hash. NULL with a message naming the file and the key. */
RtPlan *rt_plan_load(const char *dir, char *err, size_t errlen);
/* The same, handing the parsed plan.json to *json (the caller's to cJSON_Delete; NULL
 * when it fails) for readers of its other sections (pipe_plan_load): one read of it. */
struct cJSON;
RtPlan *rt_plan_load_json(const char *dir, struct cJSON **json, char *err, size_t errlen);
void rt_plan_free(RtPlan *p);

/* ---- parameters ------------------------------------------------------------------ */
/* Deterministic initialisation of one parameter from (seed, name): element e of a
 * normal parameter is a Box-Muller draw from Philox keyed by the seed with the
 * counter holding FNV-1a(name) and e/2, so any partition draws identical weights. */
void rt_init_param(float *w, const RtParam *p, uint64_t seed);

typedef struct StepStats {
  double loss;      /* mean over the step's microbatches */
  const double *mb_loss; /* each microbatch's loss, in order (m of them; the trainer's
                            storage, valid until the next step) */
  double lr;        /* the rate used for this step */
  double grad_norm; /* global norm of the averaged gradient, before clipping */
  double ms;        /* wall time of the step */
  int64_t bad_ids;  /* out-of-range token ids / targets seen */
  const char *error; /* NULL; else the per-step check that stopped the step (a
                        non-finite loss, token ids outside the vocabulary: one
                        message in every mode, runtime/exec/exec_interp.c). The
                        trainer's storage; the trainer is then spent. */
} StepStats;

/* Learning rate of step s (0-based) under the plan's schedule. */
double rt_lr_at(const TrainConfig *c, int64_t s);
/* The divergence check of every mode: false with its one message ("the loss is nan at
 * step S: training diverged ...") in msg when the global loss of step s (0-based) is
 * not finite. */
bool rt_loss_ok(double loss, int64_t s, char *msg, size_t n);


/* The largest step a checkpoint may record: --steps' own limit. */
#define RT_STEP_MAX ((uint64_t)INT64_MAX / 2)
/* A training checkpoint's metadata: step (0..RT_STEP_MAX, required) and, when seed is
 * not NULL and the file has one, seed (a uint64); false with a message naming the key
 * and its value. */
bool rt_ckpt_meta(const SafeTensors *s, const char *path, int64_t *step, uint64_t *seed, char *err, size_t errlen);
/* The seed of a run (weights, dropout, the --shuffle order), one rule for every mode
 * (docs/data.md, "Seeds"): --seed when given (seed_set), else the checkpoint's when
 * resuming (so a resumed run continues the one that wrote it), else the plan's.
 * false with a message when the checkpoint cannot be read. */
bool rt_run_seed(const char *resume_path, bool seed_set, uint64_t seed, uint64_t plan_seed, uint64_t *out, char *err,
                 size_t errlen);

/* ---- logs (log.c) ------------------------------------------------------------------ */
/* The one way a user's mistake ends a run: "prog: error: msg" on stderr; returns 1,
 * the exit status (runtime/core/console.c). */
int rt_fail(const char *prog, const char *msg);

/* One training step as every executor reports it (runtime/core/console.c): the step line
 * and the JSON log line have one format each, whatever the mode. */
typedef struct ConsoleStep {
  int64_t step, nsteps;
  double loss;          /* global: the mean over every microbatch of every replica */
  double lr, grad_norm; /* grad_norm: of the averaged gradient, before clipping */
  double ms, tokens_per_s, gflops;
  double mfu;      /* achieved / peak FLOP/s; NAN when the plan knows no peak */
  double eta_s;    /* NAN: unknown (the JSON line leaves it out) */
  double val_loss; /* NAN: none taken at this step */
} ConsoleStep;
/* The rates from one step's tokens and FLOPs (all devices together) and the peak
 * FLOP/s of the devices the step ran on (0: unknown); eta_s NAN. */
ConsoleStep console_step(int64_t step, int64_t nsteps, double loss, double lr, double grad_norm, double ms,
                         double tokens, double flops, double peak_flops, double val_loss);
/* The step line (no newline) and the JSON log line (with its newline) into buf;
 * snprintf's return value. */
int console_step_line(const ConsoleStep *s, char *buf, size_t n);
int console_json_line(const ConsoleStep *s, char *buf, size_t n);

typedef struct RtLog RtLog;
/* Step lines go to out (quiet: none); json_path (or NULL) gets one
 * JSON object per step in any case, streamed: the file holds whole lines only, the
 * steps done so far (log.c says why it is not written to a temporary). */
RtLog *rt_log_open(const char *json_path, FILE *out, bool quiet, char *err, size_t errlen);
/* Step `step` (1-based) of nsteps; tokens and FLOPs done in the step; val_loss NAN
 * when not evaluated. false when the JSON line could not be written: the message
 * (path, step and cause) is in rt_log_error, the file ends at the previous line. */
bool rt_log_step(RtLog *l, int64_t step, int64_t nsteps, const StepStats *s, double tokens,
                 double flops, double val_loss);
/* The peak FLOP/s of the devices the run's steps use (0: unknown, no MFU). */
void rt_log_set_peak(RtLog *l, double peak_flops);
/* Plain lines even on a terminal: an MPI rank's stdout is the launcher's pty
 * whether or not the user's is a terminal, so a rank never draws the bar. */
void rt_log_set_plain(RtLog *l);
/* Flushes the JSON log to disk and closes it; false (why in err) on failure. */
bool rt_log_finish(RtLog *l, char *err, size_t errlen);
const char *rt_log_error(const RtLog *l);
void rt_log_close(RtLog *l); /* frees l (NULL is fine); after rt_log_finish, or on a failed run */

#endif
