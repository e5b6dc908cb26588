/* tests/cudaexec/emu_train.h — the one-stage GPU trainer (runtime/cuda/exec/cuda_exec.h) on the
 * emulated device (emu_device.h) beside the CPU trainer (runtime/core/trainer.c), shared
 * by test_cudaexec_emu.c and test_cudaexec_bf16.c; and the start and end of the
 * emulator tests' main (test_cudapipe_emu.c too).
 *
 * The model is a small GPT with dropout (the tinygpt text with its own train section:
 * a large constant learning rate, so that the update rule shows in the losses within
 * a few steps); the data a repeating token pattern with noise. A run trains
 * EMU_STEPS steps of EMU_MB microbatches from the plan's initial weights
 * (rt_init_param by name and seed) and keeps every microbatch loss, the step norms,
 * the final weights and what the device was asked to do. The checks stay in the
 * tests (test.h counts per file): these helpers print what went wrong and return
 * false, and the tests EXPECT that.
 */
#ifndef PD2BW_TESTS_CUDAEXEC_EMU_TRAIN_H
#define PD2BW_TESTS_CUDAEXEC_EMU_TRAIN_H

#include <cjson/cJSON.h>

#include "emu_device.h"
#include "runtime/pipeline/pipeline.h"

#define EMU_STEPS 3
#define EMU_MB 2

/* One training run. */
typedef struct EmuRun {
  double mb[EMU_STEPS * EMU_MB]; /* microbatch losses, step-major */
  double norm[EMU_STEPS];        /* global gradient norm of each step */
  float *w;                      /* the final parameters (malloc'd; the caller frees) */
  int64_t nw;
  int64_t steps;    /* the trainer's step index at the end (emulated runs) */
  int64_t bad_ids;  /* out-of-range token ids the device saw (emulated runs) */
  EmuCounts counts; /* the device's work (emulated runs) */
} EmuRun;

/* main's start: `PROG PD2BWC [PART]` (PART only when `parts`). Sets the CPU
 * trainer's stage cache and one BLAS thread; makes the work directory from the
 * template `tmp` (mkdtemp: rewritten in place; it must outlive the test). Returns the
 * part ("all" when none); NULL after printing `usage`. */
const char *emu_test_begin(int argc, char **argv, bool parts, const char *usage, char *tmp);
const char *emu_pd2bwc(void);
/* Whether PART `name` runs when `part` was asked for. */
bool emu_test_part(const char *part, const char *name);
/* main's end: frees the device, removes the work directory. */
void emu_test_end(void);

/* Writes the model (cx.model) and the tokens (train.bin) into the work directory. */
bool emu_train_files(void);
double emu_now_s(void);
/* pd2bwc on the model: one stage, one replica, EMU_MB microbatches of 2, plus `extra`
 * flags, into WORKDIR/name. */
bool emu_make_plan(const char *name, const char *extra);
/* The same for another model file (a path from the source root), e.g. models/llama.model. */
bool emu_make_plan_of(const char *name, const char *model, const char *extra);
/* WORKDIR/name, for the tests' own calls. */
void emu_path(char *out, size_t n, const char *name);
/* EMU_STEPS steps of plan WORKDIR/plan on the CPU trainer / the emulated device (in
 * order, GEMM types as the plan says). false, with a message, when the plan, the
 * trainer or the data cannot be opened. */
bool emu_run_cpu(const char *plan, EmuRun *r);
bool emu_run_gpu(const char *plan, EmuRun *r);

/* The pipeline tests' plans and data (test_cudapipe_emu.c; tests/nccl can use them
 * too): pd2bwc on tests/pipeline/tinygpt.model (2 layers, dim 16, seq 8, 2 heads,
 * batch 8, cluster cpu8, microbatches of 2) plus `args`, into WORKDIR/name; and
 * tests/pipeline/common.sh's token file (a sentence repeated) as WORKDIR/train.bin. */
bool emu_pipe_make_plan(const char *name, const char *args);
bool emu_pipe_files(void);
/* Plan WORKDIR/name (NULL after printing why); one without a step count (train.steps 0)
 * gets `steps`. */
PipePlan *emu_pipe_load(const char *name, int64_t steps);

/* A JSON file, parsed (NULL after printing why). */
cJSON *emu_read_json(const char *path);
/* Stage `stage`'s launch list in plan directory dir: its pkc_cast_f32_to_bf16 launches
 * (forward and backward), those of them that read the params block (a weight), and
 * the GEMM operands read from params_bf16 (the bf16 weight copy). false: no list. */
bool emu_list_casts(const char *dir, int stage, int *casts, int *weight_casts, int *w16_operands);
/* Of those casts, the ones into a stash slot or the boundary block (a bf16 plan's
 * stored activations, passes/layout.h), not into cuda_scratch's GEMM staging. */
int emu_list_store_casts(const char *dir, int stage);

/* Largest relative difference of the microbatch losses from step from_step on. */
double emu_losses_diff(const EmuRun *a, const EmuRun *b, int from_step);
/* Largest |a - b| over the parameters, relative to the largest |a|. */
double emu_weights_diff(const EmuRun *a, const EmuRun *b);

#endif
