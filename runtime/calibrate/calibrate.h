/* runtime/calibrate/calibrate.h — what this machine's CPU does, measured for the
 * planner (pd2bwc --calibrate, docs/calibration.md).
 *
 * What this folder (runtime/calibrate/, library pd2bw_calibrate) owns: the
 * measurements of one host that a CPU cluster file's rates stand for, each taken the
 * way the runtime works: the GEMM through pd_sgemm on one thread (a pipeline rank of
 * a CPU plan gets cores / ranks threads; the cluster file's device is one core), the
 * copy a transfer between two ranks makes, the optimizer kernel the stage programs
 * run. Fitting the ops that are not GEMMs needs the compiler's cost terms and a
 * stage program, so that part lives with pd2bwc (tools/calibrate.c).
 */
#ifndef PD2BW_CALIBRATE_H
#define PD2BW_CALIBRATE_H

#include <stdbool.h>
#include <stddef.h>

enum { CAL_GEMM_POINTS = 12 };

typedef struct HostRates {
  int cores;                 /* online CPUs */
  char cpu[96];              /* /proc/cpuinfo's model name, family and model */
  char blas[160];            /* pd_blas_name() */
  /* GEMM on one thread: t = latency + flops / rate, least squares in relative error
   * over the sweep's points (M x N x K below), and the worst point's error */
  int ngemm;
  int gemm_m[CAL_GEMM_POINTS], gemm_n[CAL_GEMM_POINTS], gemm_k[CAL_GEMM_POINTS];
  double gemm_s[CAL_GEMM_POINTS]; /* best time of each point */
  double gemm_flops, gemm_latency_s, gemm_worst_err;
  double gemm_flops_all;     /* 1024^3 on every core (pd_sgemm_peak_gflops) */
  double gemm_program_factor;/* set by pd2bwc's fit: the stage programs' GEMMs run this
                                many times slower than the sweep's (1: as fast) */
  double copy_bytes_s;       /* memcpy of 64 MiB on one thread, bytes copied per second */
  double optimizer_ns;       /* AdamW + the gradient norm's sum of squares, per parameter */
} HostRates;

/* /proc/cpuinfo's first model name, cpu family and model (name "" and "?" when the
 * file or the line is missing): the calibration file's comments and its name. */
typedef struct CpuIdent {
  char name[96], family[16], model[16];
} CpuIdent;
CpuIdent calibrate_cpu_ident(void);

/* Measures them all (about 3 s on 2 cores). Sets pd_blas_init(1) for the process. */
bool calibrate_host(HostRates *r, char *err, size_t errlen);

#endif /* PD2BW_CALIBRATE_H */
