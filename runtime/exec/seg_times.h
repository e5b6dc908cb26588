/* runtime/exec/seg_times.h — measured compute time per segment of one stage
 * (pd2bwrun --profile-out): what the CPU device (runtime/exec/exec_cpu.c, one segment
 * function of the stage program at a time) and the CUDA replay
 * (runtime/cuda/exec/cuda_profile.c, device events at the launch list's segment
 * boundaries) record per pass, and pipe_profile_write (runtime/pipeline/pipeline_trace.c)
 * writes, each segment's median over the passes, in the profile format pd2bwc --profile
 * reads: one writer for both backends. */
#ifndef PD2BW_RUNTIME_EXEC_SEG_TIMES_H
#define PD2BW_RUNTIME_EXEC_SEG_TIMES_H

#include <stdbool.h>
#include <stdint.h>

typedef struct SegTimes {
  int nsegs;          /* the stage's segments (its program's regions, in order) */
  double *fwd, *bwd;  /* [passes][nsegs] seconds: timed pass i's segment k at i·nsegs + k */
  int64_t nfwd, nbwd; /* passes kept (a recomputing backward's forward is a forward) */
  int64_t cap[2];     /* rows allocated, forward and backward */
  int64_t from_mb;    /* passes of a microbatch whose reference index is below this
                         are not timed: the run's first step (cold caches,
                         compilation, the first cuBLAS calls) */
} SegTimes;

/* Passes a device times per direction; later ones run untimed (a profile needs no more,
 * and the samples stay bounded however long the run). */
#define SEG_TIMES_MAX_PASSES 4096

/* No passes yet, n segments. */
void seg_times_init(SegTimes *t, int n, int64_t from_mb);
void seg_times_free(SegTimes *t);
/* The next pass's row (nsegs seconds to fill) of the forward or backward, or NULL once
 * SEG_TIMES_MAX_PASSES are kept: that pass is not to be timed. */
double *seg_times_row(SegTimes *t, bool bwd);
/* dst gets src's passes as well (the replicas of one stage; no cap); src must have
 * dst's segments. */
void seg_times_add(SegTimes *dst, const SegTimes *src);

#endif /* PD2BW_RUNTIME_EXEC_SEG_TIMES_H */
