/* ir/ir.h — the graph every part of pd2bw speaks.
 *
 * The IR is a flat, topologically ordered list of ops over named tensors with static
 * shapes (dim 0 of a "batched" tensor is the symbolic microbatch dimension B, fixed
 * only when the planner picks b). Every op kind comes from the one op table, ir/ops.def.
 * Ops carry the region they came from (the prologue, one copy of the repeated block,
 * or the epilogue), which is what the planner cuts between. Parameters carry their
 * initialiser; one used by ops in two regions (GPT's token embedding reused as the LM
 * head) is tied. Also here, what every folder shares: the arena allocator, source
 * locations, the diagnostic sink (`file:line:col: error: ...` with the source line and
 * a caret), PD_CHECK, and the cluster and training descriptions the front end makes.
 *
 * Promises: ids are dense and deterministic (same input, same ids); ir_dump() output
 * is stable and diffed by golden tests; nothing here does I/O except ir_dump and
 * the diagnostic printer. */
#ifndef PD2BW_IR_H
#define PD2BW_IR_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define PD2BW_VERSION "0.1.0"
/* plan.json "version": bumped on any incompatible change (docs/plan-format.md). */
#define PD2BW_PLAN_FORMAT_VERSION 1

/* ---- internal invariants -------------------------------------------------
 * A failed check is a bug in pd2bw (or a failed library call), never a user
 * error: it names the expression, file and line, and aborts. */
void pd_fatal(const char *file, int line, const char *fmt, ...)
    __attribute__((noreturn, format(printf, 3, 4)));
#define PD_CHECK(cond, ...)                                                    \
  do {                                                                         \
    if (!(cond)) pd_fatal(__FILE__, __LINE__, "check failed: " #cond " " __VA_ARGS__); \
  } while (0)

/* malloc/realloc/calloc that never return NULL. All of pd2bw allocates through
 * these, so tests can count or fail allocations. Out of memory is not a bug but a
 * limit of the machine (or of ulimit -v): pd_out_of_memory says so, with the size
 * and the call site, and exits 1. */
void *pd_malloc_at(size_t n, const char *file, int line);
void *pd_calloc_at(size_t n, size_t size, const char *file, int line);
void *pd_realloc_at(void *p, size_t n, const char *file, int line);
#define pd_malloc(n) pd_malloc_at((n), __FILE__, __LINE__)
#define pd_calloc(n, size) pd_calloc_at((n), (size), __FILE__, __LINE__)
#define pd_realloc(p, n) pd_realloc_at((p), (n), __FILE__, __LINE__)
char *pd_strdup(const char *s);
/* "<program>: error: out of memory allocating N bytes (X MiB) for WHAT (at
 * file:line)" on stderr, then _exit(1): no atexit handler or library destructor
 * runs (OpenBLAS's would join threads stuck retrying an allocation); an MPI job
 * sees the process exit, a temporary file left behind is removed as stale by the
 * next run. `what` may be NULL; bytes 0: unknown. For any allocation that fails
 * outside pd_malloc too: posix_memalign, pthread_create, a library's parser. */
void pd_out_of_memory(size_t bytes, const char *what, const char *file, int line) __attribute__((noreturn));

/* ---- arena: one per compilation, for AST and IR ------------------------- */
typedef struct Arena Arena;
Arena *arena_create(void);
void arena_destroy(Arena *a);
void *arena_alloc(Arena *a, size_t n); /* zeroed, 16-byte aligned */
char *arena_strdup(Arena *a, const char *s);
char *arena_printf(Arena *a, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* ---- source locations and user diagnostics ------------------------------ */
typedef struct Loc {
  const char *file; /* path as the user gave it; NULL for "no location" */
  int line, col;    /* 1-based; col counts bytes */
} Loc;

typedef struct Source {
  const char *path;
  const char *text; /* whole file, NUL-terminated (NULs inside are errors) */
  size_t len;
} Source;

/* The diagnostic sink. Errors are printed as they come (to `out`, stderr by
 * default) in the form
 *     file:line:col: error: message
 *       <the source line>
 *       ^
 * and counted; callers check nerrors and stop before writing any output. */
typedef struct Diag {
  FILE *out;
  int nerrors;
  int max_errors;     /* stop printing after this many (0 = 20) */
  const Source *sources[16];
  int nsources;
} Diag;

void diag_init(Diag *d, FILE *out);
void diag_add_source(Diag *d, const Source *s);
void diag_error(Diag *d, Loc loc, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
void diag_verror(Diag *d, Loc loc, const char *fmt, va_list ap) __attribute__((format(printf, 3, 0)));
void diag_note(Diag *d, Loc loc, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* Reads a whole file into an arena-owned Source. Returns false (with an error on
 * d, no location) when it cannot be read. */
bool source_read(Arena *a, Diag *d, const char *path, Source *out);

/* ---- types and shapes ---------------------------------------------------- */
typedef enum DType {
  DT_F32, /* float32: activations, weights, gradients */
  DT_I32, /* int32: token ids, targets, positions */
} DType;
const char *dtype_name(DType t);
size_t dtype_size(DType t);

#define IR_MAX_RANK 4
typedef struct Shape {
  int rank;     /* 0 = scalar */
  bool batched; /* dim[0] is the microbatch dimension B; its stored value is 1 */
  int64_t dim[IR_MAX_RANK];
} Shape;

/* Elements per tensor for microbatch size b (b ignored when not batched). */
int64_t shape_numel(const Shape *s, int64_t b);
bool shape_equal(const Shape *a, const Shape *b);
/* "[B,1024,768]" into buf; returns buf. */
const char *shape_str(const Shape *s, char *buf, size_t n);

/* ---- op table ------------------------------------------------------------ */
typedef enum OpKind {
#define OP(id, name, mini, maxi, nout, attrs, flags, lowering, elem) OP_##id,
#include "ops.def"
#undef OP
  OP_COUNT
} OpKind;

enum {
  OPF_FWD = 1 << 0,         /* may appear in model text */
  OPF_BWD = 1 << 1,         /* produced by autodiff (and the optimizer) only; model
                               text cannot name it */
  OPF_RNG = 1 << 2,         /* draws from the counter-based RNG: attribute p, the
                               stream of its forward op (op_rng_stream), keyed by
                               (seed, op id, microbatch, element), so CPU and GPU
                               draw identical masks */
  OPF_GEMM = 1 << 3,        /* a GEMM: in[0] and in[1] are its A and B operands */
  OPF_ACCUMULATES = 1 << 4, /* its kernel (or generated loop) can add into its output */
};

/* How the code generators lower an op (ops.def's lowering column). The generic
 * families need no generator code per op: their kernel's arguments follow from the
 * table (codegen/cgen_lower.h). The others have one hand-written emitter per family
 * in each generator. */
typedef enum OpFamily {
  OPFAM_MAP,         /* generic: kernel(y, in..., n), n = elements of y */
  OPFAM_ROWS,        /* generic: kernel(y, in..., rows, C, attrs... [, accumulate]) over
                        in[0]'s rows of its last dim C */
  OPFAM_SEQ,         /* generic: kernel(y, in..., rows, T, C, attrs... [, accumulate]) as
                        ROWS over in[0] [B,T,C], row r at position r mod T */
  OPFAM_LOOKUP,      /* ids select rows: embedding, positions, gather (and gradients) */
  OPFAM_DENSE,       /* GEMMs */
  OPFAM_ELEMENTWISE, /* add, scale, dropout, reshape: element ops with special lowering */
  OPFAM_NORM,        /* layernorm and its gradient */
  OPFAM_ATTENTION,   /* attention, attention_gqa and their gradients */
  OPFAM_LOSS,        /* cross-entropy and its gradient */
  OPFAM_COUNT
} OpFamily;

#define IR_MAX_IN 6 /* attention_gqa_bwd: dy, q, k, v, out, lse */
#define IR_MAX_OUT 3
#define IR_MAX_ATTR 4

typedef struct Graph Graph;
typedef struct Op Op;

/* FLOPs and bytes moved by one op for microbatch size b. */
typedef struct OpCost {
  double flops;
  double bytes;
} OpCost;

/* One row of ops.def: OP(ID, "name", min_inputs, max_inputs, outputs, attributes,
 * flags, lowering, element), a field each below. */
typedef struct OpInfo {
  const char *name;
  int min_inputs, max_inputs, noutputs;
  /* ops.def's A0, or An("name", default, ...) for n = 1..4 named attributes. Values
   * are doubles; integer-valued ones (heads, causal, flags) hold exact integers. */
  int nattrs;
  const char *attr_names[IR_MAX_ATTR];
  double attr_defaults[IR_MAX_ATTR];
  unsigned flags; /* OPF_FWD or OPF_BWD, and any of OPF_RNG, OPF_GEMM, OPF_ACCUMULATES:
                     the planner, layout and generators read these, never a list of kinds */
  OpFamily family; /* ops.def's LOWER(FAMILY, "kernel") */
  /* The kernel's base name ("gelu_fwd": C's K(gelu_fwd), that is pk_gelu_fwd_f32/_f64
   * in kernels/cpu_kernels*.h, and CUDA's pkc_gelu_fwd_f32 in kernels/cuda_kernels*.cuh,
   * with its row in cuda_kernel_list.h, whose launch kind sizes the grid: elements,
   * rows or columns); NULL for a family that names its own kernels. */
  const char *kernel;
  /* The value of one element in a fused elementwise chain, as C and as CUDA print it
   * (ops.def's ELEM("expr") for both, ELEM2("C expr", "CUDA expr"), or NO_ELEM;
   * codegen/cgen_lower.h: $x the chained value, $y the other operand of a binary op,
   * $s attribute 0, $R a cast to the real type, $0 zero); NULL: the op does not fuse.
   * It must give the bits of the op's kernel, so it calls the kernel's own element
   * function (C: K(name_)($x), CUDA: a __device__ function of the kernel library); an
   * OPF_RNG op's element is multiplied by its keep mask, so it must be one term. */
  const char *elem_c, *elem_cuda;
  /* shape, cost and grad are the functions op_shape_<ID>, op_cost_<ID> and op_grad_<ID>
   * (ir/ops.c, or ir/ops_backward.c for a backward op), which the linker demands of
   * every row (ir/ops_rules.h); an OPF_BWD row has no gradient rule.
   * Computes output shapes/dtypes from the op's inputs and attributes. On a
   * mismatch returns false and writes a user-facing message ("expected ...") to
   * err. */
  bool (*shape)(const Graph *g, const Op *op, Shape *out, DType *out_dtype, char *err,
                size_t errlen);
  OpCost (*cost)(const Graph *g, const Op *op, int64_t b);
  /* Emits the backward ops of `op` into g. dout[i] is the gradient tensor of
   * output i (or -1: no gradient flows); sets din[j] to the gradient tensor of
   * input j, or -1 when input j needs none (g->tensors[in].needs_grad false).
   * NULL for ops that are not differentiated (backward ops). */
  void (*grad)(Graph *g, const Op *op, const int *dout, int *din);
} OpInfo;

extern const OpInfo op_info[OP_COUNT];
/* Looks an op up by its model-text name; -1 if none. */
int op_lookup(const char *name);
/* Index of attribute `name` for kind, or -1. */
int op_attr_index(OpKind kind, const char *name);
/* Whether kind's row has all of flags (OPF_*). */
static inline bool op_has(OpKind kind, unsigned flags) { return (op_info[kind].flags & flags) == flags; }

/* ---- graph --------------------------------------------------------------- */
typedef enum TensorKind {
  TK_INPUT,    /* fed per microbatch from the data (tokens, targets, positions) */
  TK_PARAM,    /* trainable weight; param index in Tensor.param */
  TK_ACT,      /* forward activation */
  TK_GRAD,     /* gradient of a parameter (the sum of all its uses) */
  TK_ACT_GRAD, /* gradient with respect to an activation */
} TensorKind;

typedef struct Tensor {
  int id;
  const char *name; /* params and inputs: unique (checkpoint names, e.g. "h.3.attn_w");
                       activations: the model-text variable, so not unique */
  DType dtype;
  Shape shape;
  TensorKind kind;
  int producer;    /* op id that writes it, -1 for inputs and params */
  int param;       /* index into Graph.params for TK_PARAM and TK_GRAD, else -1 */
  int grad;        /* tensor id of this tensor's gradient, -1 if none (yet) */
  bool needs_grad; /* a parameter, or computed from one */
  Loc loc;
} Tensor;

struct Op {
  int id;
  OpKind kind;
  int nin, nout;
  int in[IR_MAX_IN];
  int out[IR_MAX_OUT];
  double attr[IR_MAX_ATTR]; /* indexed as op_info[kind].attr_names */
  int region;               /* index into Graph.regions */
  int fwd_op;               /* backward ops: the forward op they differentiate; else -1 */
  Loc loc;
};

/* OPF_RNG ops: the op whose stream it draws (a backward op replays its forward's),
 * and its probability p (attribute "p"). masks_elements: an OPF_RNG op with p > 0. */
int op_rng_stream(const Op *op);
double op_rng_p(const Op *op);
bool op_masks_elements(const Op *op);

/* The geometry of an attention-family op (OPFAM_ATTENTION), forward or backward, packed
 * (attention: q|k|v in one [B,T,3C] input) or separate (attention_gqa): q is the input
 * holding the queries (its dim 0 the batch, dim 1 the sequence), hs the head size,
 * kv_heads = heads when not grouped. The passes size scratch and pick kernels from this,
 * never from a list of kinds. */
typedef struct AttnGeom {
  int q;          /* tensor id of q (or of packed qkv) */
  bool fwd;       /* the forward op (else its gradient) */
  bool packed;    /* q, k, v packed in one input (attention), else three (attention_gqa) */
  int64_t T, hs;  /* sequence length, head size */
  int heads, kv_heads;
  int causal;
  double p;
} AttnGeom;
/* Fills a for an attention-family op; false for any other op. */
bool op_attention_geom(const Graph *g, const Op *op, AttnGeom *a);

typedef enum InitKind {
  INIT_ZEROS,  /* all 0 */
  INIT_ONES,   /* all 1 */
  INIT_NORMAL, /* N(0, std^2), std in Param.std */
} InitKind;

typedef struct Param {
  int tensor;   /* the weight tensor */
  InitKind init;
  double std;   /* INIT_NORMAL only */
  bool decay;   /* AdamW weight decay applies (default: rank >= 2) */
  int region;   /* region of the declaration */
  int nuses_regions; /* number of distinct regions using it; > 1 means tied */
} Param;

typedef enum RegionKind {
  RG_PROLOGUE, /* before the repeated block: embeddings */
  RG_BLOCK,    /* one copy of the repeated block; Region.index says which */
  RG_EPILOGUE, /* after it: final norm, head, loss */
} RegionKind;

typedef struct Region {
  RegionKind kind;
  int index;        /* copy number for RG_BLOCK, else 0 */
  const char *name; /* "prologue", "h.3", "epilogue" */
} Region;

typedef enum OptimizerKind {
  OPT_ADAMW, /* lr, beta1, beta2, eps, weight_decay (decoupled) */
  OPT_SGD,   /* lr, momentum (beta1), weight_decay */
} OptimizerKind;

typedef enum LrScheduleKind {
  LR_CONSTANT, /* lr */
  LR_COSINE,   /* linear warm-up over `warmup` steps, cosine to min_lr at `steps` */
  LR_LINEAR,   /* linear warm-up, then linear decay to min_lr at `steps` */
} LrScheduleKind;

/* The model's training section. Zero fields mean "not given". */
typedef struct TrainConfig {
  int64_t batch;      /* global batch B = b·w·m, in samples */
  int64_t microbatch; /* b; 0 lets the planner choose */
  OptimizerKind optimizer;
  double lr, beta1, beta2, eps, weight_decay;
  LrScheduleKind schedule;
  int64_t warmup, steps;
  double min_lr;
  double clip; /* global-norm gradient clipping; 0 = off */
  /* λ of 2bw's delay compensation (adamw only; 0 = off): the first moment takes
   * g + λ·sqrt(v̂)·(W(t) - W(t-1)) (kernels/cpu_kernels_optim.h pk_adamw_step,
   * docs/update-rules.md). Zero under every other update rule. */
  double delay_comp;
  /* 2bw's flushed start and weight prediction (docs/update-rules.md); -1: not given
   * (pd2bwc writes its default for a 2bw plan, 0 for any other). */
  int64_t flush_steps; /* K: batches t < K read W(t), the pipeline drained (vanilla) */
  double predict;      /* k: batch t reads W(t-1) + k·(W(t-1) - W(t-2)); 0: off */
  uint64_t seed;
  Loc loc;
  /* pd2bwc's -D train.KEY=VALUE overrides as given, "KEY=VALUE" separated by
   * spaces (frontend/train_override.c); NULL when none. plan.json: train.overrides */
  const char *overrides;
} TrainConfig;

/* The spellings of these enums in the IR dump and plan.json (ir/names.c); "?" for
 * a value out of range. The parsers return false on an unknown name. */
const char *init_kind_name(InitKind k);
const char *optimizer_name(OptimizerKind k);
const char *lr_schedule_name(LrScheduleKind k);
const char *region_kind_name(RegionKind k);
bool init_kind_parse(const char *s, InitKind *out);
bool optimizer_parse(const char *s, OptimizerKind *out);
bool lr_schedule_parse(const char *s, LrScheduleKind *out);

/* A model parameter ("param dim = 768;") after -D overrides. */
typedef struct ModelConst {
  const char *name;
  double value;
  bool is_int;
} ModelConst;

struct Graph {
  Arena *arena;
  const char *name;
  Tensor *tensors;
  int ntensors, cap_tensors;
  Op *ops;
  int nops, cap_ops;
  int nfwd_ops; /* ops [0, nfwd_ops) are the forward graph; set by autodiff */
  Param *params;
  int nparams, cap_params;
  Region *regions;
  int nregions, cap_regions;
  ModelConst *consts;
  int nconsts, cap_consts;
  int loss;            /* tensor id of the scalar being minimised, -1 until set */
  int nblocks;         /* copies of the repeated block */
  const char *block_name;
  TrainConfig train;
};

Graph *graph_create(Arena *a, const char *name);
void graph_destroy(Graph *g); /* frees the arrays; the arena is the caller's */

int graph_add_region(Graph *g, RegionKind kind, int index, const char *name);
int graph_add_input(Graph *g, const char *name, DType dt, Shape s, Loc loc);
/* Adds a parameter and its tensor; returns the tensor id. */
int graph_add_param(Graph *g, const char *name, Shape s, InitKind init, double std,
                    int region, Loc loc);
void graph_add_const(Graph *g, const char *name, double value, bool is_int);

/* Adds an op with the given inputs and attributes (NULL = defaults), runs its
 * shape rule and creates its outputs (named from `name`, or "%<id>" when NULL).
 * On a shape error reports it on d at loc and returns -1; else the op id. The
 * op's output tensor ids are in g->ops[id].out. */
int graph_add_op(Graph *g, Diag *d, OpKind kind, const int *in, int nin, const double *attr,
                 int region, const char *name, Loc loc);
/* Same, for internal use (autodiff): a shape error is a bug, so it PD_CHECKs. */
int graph_emit(Graph *g, OpKind kind, const int *in, int nin, const double *attr, int region,
               int fwd_op, TensorKind out_kind, const char *name);

/* Recomputes derived facts: needs_grad, Param.nuses_regions. Returns the number
 * of tied parameters. */
int graph_finalize(Graph *g);

/* Total trainable scalars. */
int64_t graph_param_count(const Graph *g);
/* Total cost of ops [first, last) for microbatch size b. */
OpCost graph_cost(const Graph *g, int first, int last, int64_t b);

/* Stable text dump (golden-tested): consts, inputs, params, then ops in order. */
void ir_dump(const Graph *g, FILE *out);
/* Structural verifier: ids, shapes re-inferred, topological order, one producer
 * per tensor. Returns false and prints what broke (internal error). */
bool ir_verify(const Graph *g, FILE *err);

/* ---- cluster description ------------------------------------------------- */
typedef struct Cluster {
  const char *name;
  int nodes;
  int devices_per_node;
  const char *device;        /* "V100-16GB", "H200", "cpu" */
  double memory_bytes;       /* per device */
  double flops;              /* peak FLOP/s per device for every precision ("tflops");
                                0 when the file gives per-precision peaks instead */
  double flops_fp32;         /* per-precision peaks ("tflops_fp32", "tflops_tf32",       */
  double flops_tf32;         /* "tflops_bf16"); 0 = not given: tf32 then runs at the    */
  double flops_bf16;         /* fp32 rate, and the device has no bf16 (planner.h) */
  double mem_bandwidth;      /* bytes/s per device */
  double intra_bandwidth;    /* bytes/s between devices in a node (per link) */
  double inter_bandwidth;    /* bytes/s between nodes (per device) */
  /* Compute efficiency (planner cost model, docs/cluster.md "Compute"); 0 = not
   * given: GEMMs at the peak, no per-kernel overhead. */
  double gemm_efficiency;    /* fraction of the peak a large GEMM reaches */
  double gemm_latency_s;     /* fixed time of one GEMM beyond the launch */
  double launch_s;           /* per kernel (op) launch overhead */
  double all_cores_gemm_speedup; /* a CPU node: the GEMM rate of one rank with all the
                                node's cores (devices) over one core's ("all_cores_gemm_speedup";
                                0 = not given: ranks are not faster with spare cores) */
  double gemm_thread_scale;  /* not a key: plan_cluster_for_config's factor for a
                                configuration's ranks (0 = 1) */
  double nongemm_flops;      /* FLOP/s of the ops that are not GEMMs ("nongemm_tflops"; 0 =
                                not given: the peak). On a CPU they are loops of the stage
                                program, far slower than the BLAS (pd2bwc --calibrate) */
  double optimizer_bandwidth;/* bytes/s the optimizer step moves ("optimizer_gbs"; 0 = not
                                given: mem_bandwidth); PLAN_STEP_BYTES per parameter */
  double cublas_workspace;   /* bytes cuBLAS gets per compute stream on this device
                                ("cublas_workspace_mib"; 0 = not given: the planner
                                charges 32 MiB, Hopper's size, to CUDA plans) */
  Loc loc;
} Cluster;

#endif /* PD2BW_IR_H */
