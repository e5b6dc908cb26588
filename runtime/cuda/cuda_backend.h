/* runtime/cuda/cuda_backend.h — the CUDA backend (pd2bw_cuda): NVRTC (nvrtc_compile.c:
 * source to cubin, cached on disk), one GPU through the driver API (cuda_device.c: arena,
 * modules, launches, copies, streams, events, graphs; GEMMs through cuBLAS, with
 * epilogues through cuBLASLt, cuda_lt.c), behind the table every device fills,
 * CudaDeviceOps, and NCCL (nccl_transport.c), in contract/contract.h's GPU vocabulary.
 * Promise: NOTHING here links a CUDA library: libcuda, libnvrtc, libcublas(Lt) and
 * libnccl are dlopen()ed on first use ($PD2BW_LIBCUDA, ...; else the soname; else the
 * configured toolkit's lib64), so a binary starts without a GPU driver and asking for
 * the backend there says "cuda backend: no CUDA driver found (...); use --backend cpu"
 * (DESIGN.md §5); NVRTC needs no driver, so CI compiles every stageN.cu.
 * Errors: what the user or machine got wrong (no driver or device, a source that does
 * not compile, too little memory) is false/NULL with a message; a failed call in normal
 * operation stops through pd_fatal naming the call, file, line and the library's error. */
#ifndef PD2BW_CUDA_BACKEND_H
#define PD2BW_CUDA_BACKEND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "contract/contract.h" /* GpuPtr, GemmType, GpuEpilogue: the GPU's vocabulary */

/* ===== NVRTC: source -> cubin ================================================= */

typedef struct CudaCompileOptions {
  int arch;                 /* SM version, major·10 + minor: 90 (H100/H200), 80 (A100) */
  const char *name;         /* program name in diagnostics ("stage0.cu"); NULL: "pd2bw.cu" */
  const char *cache_dir;    /* NULL: $PD2BW_CACHE, else ~/.cache/pd2bw; "" disables the cache.
                               Cubins go in <cache_dir>/cuda/<key>.cubin when both are
                               this user's alone, else in a private directory for the
                               run (runtime/io/io.h cache_dir_for_run) */
  const char *const *extra; /* more NVRTC options (e.g. "-DPKC_ATT_HS_MAX=64"), or NULL */
  int nextra;
} CudaCompileOptions;

typedef struct CudaBinary {
  void *data; /* the cubin (an ELF image), pd_malloc'd */
  size_t size;
  bool cache_hit; /* true when it came from the on-disk cache, not from NVRTC */
  char key[33];   /* the cache key: 128-bit hash of source, options, NVRTC version, arch */
} CudaBinary;

/* Compiles src for o->arch with the options
 *     --gpu-architecture=sm_<arch> -default-device --std=c++17 -I<toolkit include>
 * plus o->extra, or returns the cached cubin for the same key. On failure returns
 * false and sets *err (pd_malloc'd, caller frees) to a message that includes NVRTC's
 * log, whose lines read "<name>(<line>): error: ...". */
bool cuda_nvrtc_compile(const char *src, const CudaCompileOptions *o, CudaBinary *out, char **err);
void cuda_binary_free(CudaBinary *b);

/* NVRTC's version (loads NVRTC if needed). false with a message when NVRTC cannot
 * be loaded. */
bool cuda_nvrtc_version(int *major, int *minor, char *err, size_t errlen);

/* True when the cubin's bytes contain the NUL-terminated kernel name (as the symbol
 * table of an ELF cubin does for every extern "C" kernel). */
bool cuda_cubin_has_symbol(const CudaBinary *b, const char *name);

/* ===== the device ============================================================== */

/* Streams, by index (one order of work each): a GPU opens with CUDA_NSTREAMS, stream 0,
 * where the executor issues everything: passes, optimizer, and the links' copies and
 * collectives. The table's streams entry makes more, up to CUDA_MAX_STREAMS, for
 * single-GPU pipeline mode (its rank r issues on 1 + r). */
enum { CUDA_STREAM_COMPUTE = 0, CUDA_NSTREAMS = 1, CUDA_MAX_STREAMS = 64 };

/* The GPU's primitives, the one way anything drives a device: the backend's table of a
 * real GPU (cuda_dev_open), the host emulator's (tests/cudaexec), and the executor's
 * --kernel-profile wrapper and per-rank share views (runtime/cuda/exec/cuda_exec.h).
 * Every call is on one device; `stream` is a stream's index (0: compute). Launches,
 * GEMMs and zeroing are asynchronous on their stream; htod/dtoh first wait for all the
 * device's work, so the host may reuse or read its buffer when they return. */
typedef struct CudaDeviceOps {
  void *dev;
  /* The one arena (called once per device). false with a message (too little memory). */
  bool (*alloc)(void *dev, size_t bytes, GpuPtr *base, char *err, size_t errlen);
  /* Compiles/loads module source `src` (a stage's stageN.cu or the plan's kernels.cu;
   * name for diagnostics); NULL with a message. May return the module it already
   * loaded for the same text (stages on one device then share the library). */
  void *(*load)(void *dev, const char *src, const char *name, char *err, size_t errlen);
  /* Kernel `name` of a loaded module, or NULL when it has none. */
  void *(*kernel)(void *dev, void *module, const char *name);
  /* args: one pointer per kernel parameter, to a value of exactly its type. */
  void (*launch)(void *dev, int stream, void *kernel, unsigned grid, unsigned block, void **args);
  /* One GEMM (contract/contract.h GpuGemm; a GPU runs an epilogue as cuBLASLt's, the
   * emulator as the kernels it stands for). */
  void (*gemm)(void *dev, int stream, const GpuGemm *g);
  void (*htod)(void *dev, GpuPtr dst, const void *src, size_t bytes);
  void (*dtoh)(void *dev, void *dst, GpuPtr src, size_t bytes);
  void (*memset0)(void *dev, int stream, GpuPtr p, size_t bytes);
  void (*sync)(void *dev); /* waits for all streams */
  /* Several streams, events, device copies: single-GPU pipeline mode (cuda_pipe.h)
   * needs them; the one-stage trainer calls only dtod (on stream 0). */
  /* Makes streams 0 .. n-1 usable; false with a message past the device's limit. */
  bool (*streams)(void *dev, int n, char *err, size_t errlen);
  void *(*event_create)(void *dev);
  void (*event_destroy)(void *dev, void *ev);
  /* ev now marks the work issued on `stream` so far (CUDA's cuEventRecord). */
  void (*event_record)(void *dev, void *ev, int stream);
  /* Work issued on `stream` after this call starts after the work ev marked when this
   * was called (cuStreamWaitEvent: a later record of ev does not matter). */
  void (*stream_wait)(void *dev, int stream, void *ev);
  /* Milliseconds from start to end, both recorded and complete (a host wait since
   * their records: cuEventElapsedTime); the traces of single-GPU pipeline mode. */
  float (*event_ms)(void *dev, void *start, void *end);
  /* Copies bytes from src to dst (no overlap) on `stream`, asynchronously. */
  void (*dtod)(void *dev, int stream, GpuPtr dst, GpuPtr src, size_t bytes);
  /* Multi-GPU pipeline mode (cuda_pipe.h, --transport nccl) only: the driver's handle
   * of `stream` (a CUstream) for NCCL calls. NULL: the device cannot take part. */
  void *(*native_stream)(void *dev, int stream);
  /* Makes the device usable from the calling thread (a GPU: its context current in
   * it); NULL: nothing to do (the emulator). Single-GPU pipeline mode's views
   * (cx_share_view) call it before every use from a rank's thread. */
  void (*thread_enter)(void *dev);
  /* CUDA graphs. All four NULL: the device has none (or --cuda-graphs off:
   * cx_ops_no_graphs), and cx_program_run replays every pass launch by launch. Between
   * capture_begin and capture_end, work issued on `stream` is recorded, NOT run (kernel
   * arguments by value as at the call); capture_end returns the executable graph, or
   * NULL with a message. graph_launch issues a copy of the recorded work on `stream`,
   * asynchronously, ordered like any work on it. */
  bool (*capture_begin)(void *dev, int stream, char *err, size_t errlen);
  void *(*capture_end)(void *dev, int stream, char *err, size_t errlen);
  void (*graph_launch)(void *dev, void *graph, int stream);
  void (*graph_destroy)(void *dev, void *graph);
} CudaDeviceOps;

/* True when cuBLAS can be loaded and has every function pd2bw calls (needs no GPU);
 * false with a message. cuda_dev_open checks this itself. */
bool cuda_cublas_available(char *err, size_t errlen);
/* True when cuBLASLt can be loaded with every function an epilogue's GEMM calls (no
 * GPU needed); false with a message. */
bool cuda_lt_available(char *err, size_t errlen);

/* Opens GPU `ordinal` as a CudaDeviceOps (cuda_device.c): its primary context, made
 * current on this thread; its stream 0, non-blocking (so htod/dtoh first wait
 * for the whole device); cuBLAS for GEMMs, one cuBLASLt matmul for a GEMM with an
 * epilogue (cuda_lt.c: a shape cuBLASLt has no algorithm for stops with a message
 * naming pd2bwc --gemm-epilogues off); load compiles with cuda_nvrtc_compile for the
 * device's architecture (cached on disk) and loads the same text once; graphs are
 * captured in THREAD_LOCAL mode (only this thread's unsafe calls are refused), with
 * cuBLAS on a workspace of each stream's own, so it never allocates while capturing.
 * NULL with a message when there is no driver ("cuda backend: no CUDA driver found
 * (...); use --backend cpu"), no such device, or no cuBLAS. cuda_exec_dev_none.c
 * (runtime/cuda/exec/) stands in for these four without the toolkit. */
CudaDeviceOps *cuda_dev_open(int ordinal, char *err, size_t errlen);
/* Waits for the device, then frees its modules, arena, streams, cuBLAS; NULL: no-op. */
void cuda_dev_close(CudaDeviceOps *ops);
const char *cuda_dev_name(const CudaDeviceOps *ops); /* "NVIDIA H200"; "" for NULL */
int cuda_dev_arch(const CudaDeviceOps *ops);         /* 90 for sm_90 */
size_t cuda_dev_total_mem(const CudaDeviceOps *ops); /* bytes */
/* Times M×N×K GEMMs of `type` (fp32, tf32, or bf16: bfloat16 A and B, float32 C) on
 * GPU `device` (opened for this, in its own arena: call with no trainer alive).
 * TFLOP/s, or -1 with a message. */
double cuda_gemm_tflops(int device, GemmType type, int M, int N, int K, char *err, size_t errlen);

/* ===== NCCL ===================================================================== */
/* UNTESTED on a GPU: compiled and linked in CI, never run there (no GPU). The
 * bootstrap and the call sequence follow NCCL's documented examples. */

typedef struct NcclComm NcclComm;

/* True when libnccl can be loaded and has every function used here (needs no GPU:
 * lets `--transport nccl` fail early and clearly); false with a message. */
bool nccl_available(char *err, size_t errlen);

/* The caller's broadcast of `bytes` bytes from group rank `root` to every rank of
 * the group (through MPI: MPI_Bcast on the group's communicator). */
typedef void (*NcclBcastFn)(void *buf, size_t bytes, int root, void *user);

typedef enum NcclDtype {
  NCCL_DT_F32,  /* float32 */
  NCCL_DT_BF16, /* bfloat16 */
  NCCL_DT_F64,  /* float64 (the clip norm's Σg² parts) */
  NCCL_DT_U8    /* bytes (pipeline messages: activations and gradients as they lie) */
} NcclDtype;

/* One communicator over a group of nranks ranks (a stage's replicas, the tied-
 * parameter group, or the whole pipeline for point-to-point traffic): rank 0 makes
 * the unique id, `bcast` hands it to the others, every rank calls ncclCommInitRank.
 * Collective: every rank of the group must call it, with its device's context current
 * (NCCL binds the communicator to the current device). NULL with a message on failure
 * (no libnccl, init failed). */
NcclComm *nccl_comm_create(int nranks, int rank, NcclBcastFn bcast, void *user, char *err,
                           size_t errlen);
void nccl_comm_destroy(NcclComm *c);
/* Point-to-point calls between nccl_group_start and nccl_group_end are issued as one
 * group (a send and the matching receive of a neighbour must be, or they deadlock). */
void nccl_group_start(NcclComm *c);
void nccl_group_end(NcclComm *c);
/* `stream` is the CUstream/cudaStream_t to issue on (CudaDeviceOps.native_stream). */
void nccl_send(NcclComm *c, void *stream, GpuPtr buf, size_t count, NcclDtype t, int peer);
void nccl_recv(NcclComm *c, void *stream, GpuPtr buf, size_t count, NcclDtype t, int peer);
/* In-place sum over the group (send == recv allowed). */
void nccl_allreduce_sum(NcclComm *c, void *stream, GpuPtr send, GpuPtr recv, size_t count,
                        NcclDtype t);
/* Non-blocking health check for the bounded-time failure rule: false (with a
 * message) when NCCL reports an asynchronous error on the communicator. */
bool nccl_comm_ok(NcclComm *c, char *err, size_t errlen);

#endif /* PD2BW_CUDA_BACKEND_H */
