/* runtime/pipeline/seg_times.h — measured compute time per segment of one stage
 * (pd2bwrun --profile-out): what the CPU device (runtime/exec/exec_cpu.c, one
 * segment function of the stage program at a time) and the CUDA replay
 * (runtime/cuda/exec/cuda_profile.c, device events at the launch list's segment boundaries)
 * sum, and pipe_profile_write (runtime/pipeline_trace.c) writes in the profile format
 * pd2bwc --profile reads: one writer for both backends. */
#ifndef PD2BW_RUNTIME_PIPELINE_SEG_TIMES_H
#define PD2BW_RUNTIME_PIPELINE_SEG_TIMES_H

#include <stdint.h>

typedef struct SegTimes {
  int nsegs;             /* the stage's segments (its program's regions, in order) */
  double *fwd_s, *bwd_s; /* [nsegs] seconds, summed over the timed passes */
  int64_t nfwd, nbwd;    /* forward and backward passes summed (a recomputing
                            backward's forward counts as a forward) */
  int64_t from_mb;       /* passes of a microbatch whose reference index is below this
                            are not timed: the run's first step (cold caches,
                            compilation, the first cuBLAS calls) */
} SegTimes;

/* Zeroed sums of n segments. */
void seg_times_init(SegTimes *t, int n, int64_t from_mb);
void seg_times_free(SegTimes *t);
/* dst += src (the replicas of one stage); dst must have src's segments. */
void seg_times_add(SegTimes *dst, const SegTimes *src);

#endif /* PD2BW_RUNTIME_PIPELINE_SEG_TIMES_H */
