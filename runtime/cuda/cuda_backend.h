/* runtime/cuda/cuda_backend.h — the CUDA backend (pd2bw_cuda): NVRTC (nvrtc_compile.c:
 * source to cubin, cached on disk), one GPU through the driver API (cuda_device.c: arena,
 * modules, launches, copies, streams, events, graphs; GEMMs through cuBLAS, with
 * epilogues through cuBLASLt, cuda_lt.c) and NCCL (nccl_transport.c). Its types are
 * contract/contract.h's GPU vocabulary; runtime/cuda/exec/ reaches it only through a
 * table (cuda_exec_dev.c). Promise: NOTHING here links a CUDA library: libcuda, libnvrtc,
 * libcublas(Lt) and libnccl are dlopen()ed on first use ($PD2BW_LIBCUDA, ...; else the
 * soname; else the configured toolkit's lib64), so a binary starts without a GPU driver
 * and asking for the backend there says "cuda backend: no CUDA driver found (...); use
 * --backend cpu" (DESIGN.md §5); NVRTC needs no driver, so CI compiles every stageN.cu.
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

typedef struct CudaDev CudaDev;
typedef struct CudaModule CudaModule;
typedef struct CudaEvent CudaEvent;
/* Opaque kernel handle (a CUfunction). */
typedef struct CudaKernel CudaKernel;

/* Streams every device has, by index (one order of work each). */
typedef enum CudaStreamId {
  CUDA_STREAM_COMPUTE = 0, /* forward, backward, optimizer */
  CUDA_STREAM_SEND = 1,    /* activations/gradients to the neighbour stages */
  CUDA_STREAM_RECV = 2,    /* and from them */
  CUDA_STREAM_REDUCE = 3,  /* the replica all-reduce */
  CUDA_NSTREAMS = 4
} CudaStreamId;

/* More streams than the four above, for single-GPU pipeline mode (one per stage
 * replica): ids CUDA_NSTREAMS .. n-1 are created by cuda_streams_ensure and used like
 * the named ones. */
#define CUDA_MAX_STREAMS 64

/* True when cuBLAS can be loaded and has every function pd2bw calls (needs no GPU);
 * false with a message. cuda_dev_create checks this itself. */
bool cuda_cublas_available(char *err, size_t errlen);

/* Opens device `ordinal` (its primary context, made current on this thread), the
 * CUDA_NSTREAMS streams, and cuBLAS. NULL with a message in err when there is no
 * driver, no such device, or cuBLAS is missing. */
CudaDev *cuda_dev_create(int ordinal, char *err, size_t errlen);
/* Frees the arena, modules' context reference, streams, cuBLAS; NULL is a no-op. */
void cuda_dev_destroy(CudaDev *d);
int cuda_dev_arch(const CudaDev *d);         /* 90 for sm_90 */
const char *cuda_dev_name(const CudaDev *d); /* "NVIDIA H200" */
size_t cuda_dev_total_mem(const CudaDev *d); /* bytes */
/* Makes the device's context current on the calling thread (each rank thread that
 * drives the device calls it once). */
void cuda_dev_make_current(const CudaDev *d);

/* The stage's arena: allocated ONCE per device (the memory plan says how big); a
 * second call is a bug. false with a message when the GPU has too little memory. */
bool cuda_arena_create(CudaDev *d, size_t bytes, GpuPtr *base, char *err, size_t errlen);

/* Loads a cubin (from cuda_nvrtc_compile). NULL with a message on failure (a cubin
 * for another architecture, a corrupt image). */
CudaModule *cuda_module_load(CudaDev *d, const void *cubin, size_t size, char *err, size_t errlen);
/* The kernel named `name`, or NULL when the module has none. */
CudaKernel *cuda_module_kernel(CudaModule *m, const char *name);
void cuda_module_unload(CudaModule *m);

/* Launches k with a 1-D grid on stream s. args: one pointer per kernel parameter, to
 * a value of exactly the parameter's type (GpuPtr for a pointer). Asynchronous. */
void cuda_launch(CudaDev *d, CudaStreamId s, const CudaKernel *k, unsigned grid, unsigned block,
                 void **args);

/* GEMM g on stream s (contract/contract.h GpuGemm), asynchronously: cuBLAS, or with an
 * epilogue ONE cuBLASLt matmul (runtime/cuda/cuda_lt.c: the same types and operand swap,
 * the stream's cuBLAS workspace; a shape or layout cuBLASLt has no algorithm for stops
 * with a message naming pd2bwc --gemm-epilogues off). */
void cuda_gemm(CudaDev *d, CudaStreamId s, const GpuGemm *g);

/* True when cuBLASLt can be loaded with every function an epilogue's GEMM calls (no
 * GPU needed); false with a message. */
bool cuda_lt_available(char *err, size_t errlen);

/* Copies (synchronous with respect to the host; they order after all earlier work
 * on the default stream, so synchronise the streams first). */
void cuda_memcpy_htod(CudaDev *d, GpuPtr dst, const void *src, size_t bytes);
void cuda_memcpy_dtoh(CudaDev *d, void *dst, GpuPtr src, size_t bytes);
/* Zeroes bytes at p on stream s (asynchronous). */
void cuda_memset0(CudaDev *d, CudaStreamId s, GpuPtr p, size_t bytes);
/* Copies bytes from src to dst (device memory, no overlap) on stream s (asynchronous). */
void cuda_memcpy_dtod_async(CudaDev *d, CudaStreamId s, GpuPtr dst, GpuPtr src, size_t bytes);
/* Makes streams 0 .. n-1 exist (non-blocking, like the named ones). false with a
 * message when n > CUDA_MAX_STREAMS. */
bool cuda_streams_ensure(CudaDev *d, int n, char *err, size_t errlen);
void cuda_stream_sync(CudaDev *d, CudaStreamId s);
/* Waits for all streams (the device's context). */
void cuda_dev_sync(CudaDev *d);

/* CUDA graphs: the work issued on stream s between cuda_capture_begin and
 * cuda_capture_end (THREAD_LOCAL capture mode: only this thread's unsafe calls are
 * refused meanwhile) is recorded, not run, and instantiated into an executable graph
 * that cuda_graph_launch replays on any stream, its kernel arguments as they were at
 * capture. cuBLAS GEMMs may be captured: each stream has its own cuBLAS workspace, set
 * with every GEMM, so cuBLAS never allocates during a capture. begin/end: false/NULL
 * with the driver's message (a capture that broke, e.g. an unsupported call in it). */
typedef struct CudaGraph CudaGraph;
bool cuda_capture_begin(CudaDev *d, CudaStreamId s, char *err, size_t errlen);
CudaGraph *cuda_capture_end(CudaDev *d, CudaStreamId s, char *err, size_t errlen);
void cuda_graph_launch(CudaDev *d, CudaGraph *g, CudaStreamId s);
void cuda_graph_destroy(CudaDev *d, CudaGraph *g);

/* Events order work across streams and time it. */
CudaEvent *cuda_event_create(CudaDev *d);
void cuda_event_destroy(CudaEvent *e);
void cuda_event_record(CudaEvent *e, CudaStreamId s);
void cuda_stream_wait(CudaDev *d, CudaStreamId s, CudaEvent *e); /* s waits for e */
void cuda_event_sync(CudaEvent *e);
float cuda_event_ms(CudaEvent *start, CudaEvent *end); /* both recorded and complete */

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
/* `stream` is the CUstream/cudaStream_t to issue on (CxDeviceOps.native_stream). */
void nccl_send(NcclComm *c, void *stream, GpuPtr buf, size_t count, NcclDtype t, int peer);
void nccl_recv(NcclComm *c, void *stream, GpuPtr buf, size_t count, NcclDtype t, int peer);
/* In-place sum over the group (send == recv allowed). */
void nccl_allreduce_sum(NcclComm *c, void *stream, GpuPtr send, GpuPtr recv, size_t count,
                        NcclDtype t);
/* Non-blocking health check for the bounded-time failure rule: false (with a
 * message) when NCCL reports an asynchronous error on the communicator. */
bool nccl_comm_ok(NcclComm *c, char *err, size_t errlen);

#endif /* PD2BW_CUDA_BACKEND_H */
