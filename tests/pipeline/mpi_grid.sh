#!/usr/bin/env bash
# The equivalence grid of equiv.sh on the MPI transport: gpipe, 1f1b, 2bw and
# pipedream over d in {1,2,3,4}, w in {1,2}, m in {d, 2d} on the tiny tied GPT (AdamW,
# dropout 0.1), each run as d·w MPI processes (oversubscribed, as root, as CI runs)
# and checked against the sequential reference of its schedule (pipedream: the
# multi-stage executor's per-stage delay rule) with the same bounds as on threads.
#   mpi_grid.sh PD2BWC PD2BWRUN
set -u
PD2BWC=$1
RUN=$2
. "$(dirname "$0")/common.sh"
# Under sanitizers every leak reported under mpirun is Open MPI's own.
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
for s in gpipe 1f1b 2bw pipedream; do
  for d in 1 2 3 4; do
    for w in 1 2; do
      for m in $d $((2 * d)); do
        name="mpi $s d=$d w=$w m=$m"
        if ! plan "$T/plan" -D bsz=$((w * m)) -D mbs=1 --stages $d --replicas $w --microbatches $m \
            --schedule $s --recompute off >"$T/out" 2>&1; then
          bad "$name: pd2bwc: $(cat "$T/out")"
          continue
        fi
        if mpitrain $((d * w)) "$T/plan" 4 --reference --reference-tol 1e-5 >"$T/out" 2>&1; then
          ok "$name: $(grep -m1 "^reference: worst" "$T/out")"
        else
          bad "$name:"
          tail -20 "$T/out"
        fi
      done
    done
  done
done
finish
