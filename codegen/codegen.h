/* codegen/codegen.h — per-stage programs: the C of the CPU backend, the CUDA of the GPU.
 *
 * codegen/ owns turning one laid-out stage (passes/layout.h) into a self-contained
 * C file, stageN.c, that the runtime compiles on the machine that trains (cc -O3
 * -march=native -fopenmp -fPIC -shared) and loads with dlopen. The file begins with
 * the verbatim text of kernels/philox.h and cpu_kernels.h (embedded into the compiler
 * at build time), then one static function per region and direction with every shape
 * and buffer offset a constant, then the entry points (codegen_c_stage). It also
 * describes the program in a cJSON object (parameters with their initialisers, data
 * inputs, block sizes, the loss, FLOPs, the source's hash) so the runtime can run it
 * without the IR; the CUDA twin is stageN.cu with its launch list (below).
 *
 * Promises: the same graph, layout and options give the same bytes (golden tests
 * diff stage0.c); a stage file appears whole or not at all; codegen decides nothing
 * the layout did not decide. */
#ifndef PD2BW_CODEGEN_H
#define PD2BW_CODEGEN_H

#include <stdint.h>

#include "ir/ir.h"
#include "passes/layout.h"
#include "contract/contract.h" /* the stage ABI (StageCtx), the launch list format and
                                  codegen_hash_hex: shared with the runtime */

typedef struct cJSON cJSON;

typedef struct CodegenOptions {
  bool f64;  /* emit the float64 program (finite-difference tests) */
  bool fuse; /* fuse elementwise chains into single loops */
  bool bf16; /* the layout of a --precision bf16 plan (layout_stage_bf16): stashed and
                sent activations stored as bfloat16, cast down after their producer
                and up (exactly) before the first reader of a pass into float32 working
                places; the arithmetic stays float32. Not with f64. Used by the
                functions that lay stages out themselves (codegen_c_stages,
                codegen_single_stage_plan); codegen_c_stage follows L->bf16. */
} CodegenOptions;

/* The entry points every stageN.c exports, its ABI with the runtime (version
 * PD2BW_STAGE_ABI, contract/contract.h; a float64 program uses the same layout with
 * every offset and block size doubled):
 *   int  pd2bw_stage_abi(void);           returns PD2BW_STAGE_ABI
 *   int  pd2bw_stage_real_bytes(void);    4: float32 program, 8: float64
 *   void pd2bw_stage_forward(StageCtx *); forward of one microbatch; writes the
 *                                         loss to *loss when the stage has it
 *   void pd2bw_stage_backward(StageCtx *);backward of the same microbatch (the stash
 *                                         slot it filled); ADDS parameter gradients
 *                                         into the grads block, so the m microbatches
 *                                         of a batch sum in place (the runtime zeroes
 *                                         it once per batch)
 *   int  pd2bw_stage_segments(void);      the stage's segments (its regions, in order)
 *   void pd2bw_stage_forward_segment(StageCtx *, int k);
 *   void pd2bw_stage_backward_segment(StageCtx *, int k);
 *                                         the forward / backward of segment k alone:
 *                                         k = 0 .. n-1 forward, then n-1 .. 0 backward,
 *                                         is exactly the two calls above (ABI 3; how
 *                                         pd2bwrun --profile-out times each segment)
 *
 * Writes dir/stage<stage>.c (atomically) for layout L of g and fills stage_json
 * (an object the caller owns) with what the runtime needs: "source", "hash", "abi",
 * "real_bytes", "microbatch_size", "blocks" {params, grads, stash, work, inputs,
 * boundary: bytes}, "params" [{name, shape, numel, offset, bytes, init, std, decay}],
 * "inputs" [{name, dtype, shape, offset, bytes, stream: tokens|targets|other}],
 * "loss" (true when the stage computes it; forward then writes it through
 * StageCtx.loss) and "loss_tensor" (its name), "flops" {forward, backward} per
 * microbatch. Returns false after reporting on d (the directory cannot be written). */
bool codegen_c_stage(const Graph *g, const StageLayout *L, int stage, const CodegenOptions *o,
                     const char *dir, cJSON *stage_json, Diag *d);

/* For the compiler driver: stage i covers regions [first_region[i], last_region[i]]
 * (the planner's segments [first_seg, last_seg) are regions, so last = last_seg - 1).
 * Writes dir/stage<i>.c for each and puts its description under "program" in
 * element i of the plan.json "stages" array (elements created when missing). */
bool codegen_c_stages(const Graph *g, const int *first_region, const int *last_region, int nstages,
                      int64_t b, const CodegenOptions *o, const char *dir, cJSON *stages, Diag *d);

/* The generated program as a string (pd_malloc'd; free it); what codegen_c_stage
 * writes. */
char *codegen_c_source(const Graph *g, const StageLayout *L, int stage, const CodegenOptions *o);
/* The op id the stage's dropout ids are relative to (its smallest forward op id). */
int codegen_rng_base(const StageLayout *L);

/* The plan.json "train" section of a training configuration (same keys pd2bwc
 * writes: batch, microbatch, optimizer, lr, beta1, beta2, eps, weight_decay,
 * lr_schedule, warmup, steps, min_lr, clip, seed — the seed as a decimal string). */
cJSON *codegen_train_json(const TrainConfig *t);

/* Writes a complete one-stage plan directory for g (differentiated): dir/plan.json
 * {"version", "model" {name, parameters}, "train", "config" {stages 1, replicas 1,
 * microbatch_size b, microbatches m, schedule "gpipe"}, "stages" [{"index" 0,
 * "program": <stage json>}]} and dir/stage0.c. The directory is created if needed;
 * files are replaced atomically. What tests and pd2bwc's one-stage path use. */
bool codegen_single_stage_plan(const Graph *g, int64_t b, int64_t m, const CodegenOptions *o,
                               const char *dir, Diag *d);

/* ---- stage boundaries (cgen_boundary.c) -------------------------------------------
 * For the pipeline executor: adds "pipeline": {"boundary": [...]} to each stage's
 * "program" in `stages` (the plan.json array codegen_c_stages filled): every tensor
 * another stage produces or consumes, with its role (act_in, act_out, grad_in,
 * grad_out), name, tensor id, block, offset, bytes and peer stage (docs/plan-format.md),
 * from the layout codegen_c_stages used (bf16: CodegenOptions.bf16's, bfloat16 bytes).
 * false with a message in err when a tensor crosses more than one stage boundary. */
bool codegen_boundary_stages(const Graph *g, const int *first_region, const int *last_region,
                             int nstages, int64_t b, bool bf16, cJSON *stages, char *err, size_t errlen);

/* ---- the manifest (cgen_manifest.c) ----------------------------------------------
 * Appends to every program named by a stage of `stages` (plan.json's array, complete:
 * programs, boundaries, CUDA) the description of each stage running it, as data it
 * compiles (pd2bw_stage_manifest), with `tied` (plan.json's "tied"; NULL: none) the
 * groups holding the stage, and rewrites those stages' "hash". The runtime refuses a
 * plan.json that differs from it (runtime/core/plan_manifest.c). */
bool codegen_manifest_stages(const char *dir, cJSON *stages, const cJSON *tied, Diag *d);

/* ---- CUDA (cgen_cuda.c) ----------------------------------------------------------
 * A plan's GPU program is two NVRTC modules. kernels.cu, the kernel library, one per
 * plan: the verbatim text of kernels/philox.h, cuda_helpers.cuh
 * and cuda_kernels.cuh (embedded at build time), preceded by "#define PKC_ATT_HS
 * <head size>" when the model has attention; the same bytes for every plan with the
 * same head size, so NVRTC's disk cache compiles it once. stageN.cu, the GPU twin of
 * stageN.c: philox.h and cuda_helpers.cuh (device helpers, no kernels), then the
 * stage's own fused elementwise kernels (bias epilogue + gelu, residual add, dropout,
 * scale ...) with every shape and buffer offset a literal. Beside it,
 * stageN.launch.json: the ordered launch list the runtime replays for forward and
 * backward — kernel launches (name, the module that defines it: "library" or
 * "stage", grid, block, shared bytes, typed arguments: (buffer, offset) pointers,
 * literals, or values the runtime supplies: seed, dropout p, training; the
 * microbatch's index is not an argument but a u32 in cuda_scratch the runtime writes
 * before each pass, so a pass's launches are the same for every microbatch)
 * and GEMM descriptors (row-major, cuda_gemm's semantics: transa, transb, M, N, K,
 * lda, ldb, ldc, alpha, beta, A/B/C as (buffer, offset), dtype). Offsets come from
 * the same StageLayout as stageN.c; the one GPU-only block, "cuda_scratch" (bad-id
 * counter, microbatch key, cross-entropy row losses and count; with bf16 GEMMs also
 * their operands' bfloat16 copies), is sized in the launch list, by
 * layout_cuda_scratch_bytes (passes/layout.h: the planner counts the same bytes).
 * contract/contract.h specifies the launch-list format. */

typedef struct CodegenCudaOptions {
  bool fuse;           /* generate fused elementwise kernels (else one library kernel per op) */
  GemmType gemm;       /* dtype recorded on every GEMM descriptor: fp32, tf32 or bf16
                          (contract/contract.h GemmType) */
  bool gemm_epilogues; /* bias, GELU and bias gradients as GEMM epilogues (cuBLASLt on a
                          GPU: codegen/cgen_cuda_epilogue.c), else kernels of their own */
  bool bf16_in_versions; /* bf16 lists under 2bw's weight prediction: a stage whose layout
                            allows it (layout_cuda_fold_params) reads each GEMM weight's bf16
                            copy from the weight version itself, at the weight's own offset
                            (params_bf16 is then the version's params block), and lists those
                            weights' offsets as "bf16_in_versions" */
} CodegenCudaOptions;

/* The kernel library of g's plans (pd_malloc'd; free it): what codegen_cuda_stage
 * writes as kernels.cu. Depends only on the model's attention head size. */
char *codegen_cuda_library_source(const Graph *g);

/* The stage's CUDA source (pd_malloc'd; free it) and, when launch_list != NULL, its
 * launch list (a cJSON object the caller deletes). What codegen_cuda_stage writes. */
char *codegen_cuda_source(const Graph *g, const StageLayout *L, int stage,
                          const CodegenCudaOptions *o, cJSON **launch_list);

/* Writes dir/kernels.cu (the library, identical for every stage of a plan),
 * dir/stage<stage>.cu and dir/stage<stage>.launch.json (each atomically) and sets
 * stage_json["cuda"] = {"source": "stageN.cu", "hash", "launch_list":
 * "stageN.launch.json", "launch_hash", "library": "kernels.cu", "library_hash",
 * "kernels": [names the list launches],
 * "att_head_size", "gemm_dtype", "cuda_scratch" bytes, "rng_base"}. false after
 * reporting on d. */
bool codegen_cuda_stage(const Graph *g, const StageLayout *L, int stage,
                        const CodegenCudaOptions *o, const char *dir, cJSON *stage_json, Diag *d);

/* The twin of codegen_c_stages: writes each distinct stage program once (stages whose
 * .cu code, comments aside, is the same share the first one's stage<i>.cu; those whose
 * launch lists are the same text share its stage<i>.launch.json) and puts the
 * description, naming the files the stage runs, under "cuda" in element i's "program"
 * object (elements and
 * "program" created when missing; call it AFTER codegen_c_stages, which replaces
 * "program"). */
bool codegen_cuda_stages(const Graph *g, const int *first_region, const int *last_region,
                         int nstages, int64_t b, const CodegenCudaOptions *o, const char *dir,
                         cJSON *stages, Diag *d);
/* ---- end of CUDA (cgen_cuda.c) ---- */

#endif
