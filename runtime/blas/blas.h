/* runtime/blas/blas.h — the one small BLAS interface of pd2bw (pd2bw_blas: blas.c).
 * Every GEMM of the CPU backend goes through pd_sgemm: the kernels of
 * kernels/cpu_kernels.h call it through their pk_sgemm_fn hook (the runtime passes
 * &pd_sgemm to each stage .so), and nothing else in pd2bw includes a BLAS header.
 * Behind it (bench/sgemm/RESULTS.md has the measurements): BLIS when the build finds
 * it, OpenBLAS otherwise. BLIS picks its kernels for the CPU it runs on (cpuid), so a
 * binary built on one machine runs the right kernels on another; where BLIS 0.9.0
 * cannot (an AVX-512 CPU it files under 'haswell'), pd_sgemm switches to OpenBLAS
 * loaded with dlopen. PD2BW_BLAS=openblas|blis overrides the choice, made once per
 * process at pd_blas_init or the first GEMM (pd_blas_name says which). */
#ifndef PD2BW_BLAS_H
#define PD2BW_BLAS_H

/* Row-major C[M,N] = alpha·op(A)·op(B) + beta·C, exactly cblas_sgemm(CblasRowMajor,
 * ...): transa == 0: A stored M×K, lda >= K; transa != 0: A stored K×M, lda >= M;
 * transb == 0: B stored K×N, ldb >= N; transb != 0: B stored N×K, ldb >= K;
 * C stored M×N, ldc >= N; beta == 0: C is not read. Same signature as
 * pk_sgemm_fn in kernels/cpu_kernels.h. Bad dimensions are a bug in the
 * caller: PD_CHECK. May be called from many threads at once (each rank of the local
 * transport is a thread); both libraries allow concurrent calls. Works without
 * pd_blas_init (the library's default threads). */
void pd_sgemm(int transa, int transb, int M, int N, int K, float alpha, const float *A,
              int lda, const float *B, int ldb, float beta, float *C, int ldc);

/* Sets the library's thread count (>= 1; values < 1 mean 1) and initialises it.
 * Call once per process, before the first GEMM and before the process starts other
 * threads (it may setenv OPENBLAS_CORETYPE), with the host's cores divided by the
 * ranks it runs (so ranks never oversubscribe); later calls change the count. Without
 * it pd_sgemm works on the library's default threads. pd_sgemm may be called from
 * many threads at once (each rank of the local transport is one). */
void pd_blas_init(int nthreads);
/* quiet (pd2bwrun -q): no note on which library was chosen; warnings still print.
 * Before pd_blas_init. */
void pd_blas_set_quiet(int quiet);

/* Whether the library runs GEMMs on a thread pool of its own, beside OpenMP's
 * (OpenBLAS's pthread build; BLIS here is its OpenMP build, which shares OpenMP's).
 * Two pools on the same cores spin against each other: a rank then gives the stage
 * program's OpenMP loops one thread (pipeline_run.c pipe_rank_threads). */
int pd_blas_own_pool(void);

/* What was picked (at pd_blas_init or the first GEMM):
 * "blis 0.9.0 (zen3, openmp, 2 threads)", "openblas 0.3.21 (Zen, pthread, 2
 * threads)": library, version, kernel configuration, threading (and a note when an
 * AVX-512 CPU runs 256-bit BLIS kernels). Static storage, rewritten by each call. */
const char *pd_blas_name(void);

/* Measures this machine's SGEMM rate now: 1024×1024×1024 through pd_sgemm for about
 * 0.3 s after one warm-up call; returns the GFLOP/s of the best call (2·M·N·K flops
 * per call). Training benchmarks print it beside their own rate. Allocates 12 MiB
 * for the duration of the call. */
double pd_sgemm_peak_gflops(void);

#endif /* PD2BW_BLAS_H */
