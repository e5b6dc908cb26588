#!/usr/bin/env bash
# The MPI transport: ranks as processes (mpirun, oversubscribed, as root the way CI
# runs), each matching the sequential reference, and bit-identical to the same plan
# on local threads (the checkpoints of both runs are the same bytes).
#   mpi.sh PD2BWC PD2BWRUN
set -u
PD2BWC=$1
RUN=$2
. "$(dirname "$0")/common.sh"
# In sanitizer builds: every leak LeakSanitizer reports under mpirun is inside Open
# MPI's own initialisation (ompi_op_base_op_select, ...), not ours.
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
plan "$T/a" -D bsz=8 -D mbs=1 --stages 2 --replicas 2 --microbatches 4 --schedule 2bw --recompute off || exit 1
plan "$T/b" -D bsz=3 -D mbs=1 --stages 3 --replicas 1 --microbatches 3 --schedule 1f1b --recompute on || exit 1
plan "$T/c" -D clipv=0.05 -D bsz=8 -D mbs=1 --stages 4 --replicas 1 --microbatches 8 --schedule gpipe --recompute off || exit 1
check "mpi 2bw d=2 w=2 m=4 matches the reference" mpitrain 4 "$T/a" 4 --reference --save "$T/a_mpi.st"
check "local 2bw d=2 w=2 m=4" train "$T/a" 4 --save "$T/a_local.st"
check "  ... mpi and local checkpoints are the same bytes" cmp "$T/a_mpi.st" "$T/a_local.st"
check "mpi 1f1b d=3 recompute matches the reference" mpitrain 3 "$T/b" 4 --reference
check "mpi gpipe d=4 m=8 with clipping matches the reference" mpitrain 4 "$T/c" 4 --reference
if out=$(mpitrain 3 "$T/a" 2 2>&1); then
  bad "mpi with the wrong number of ranks fails"
else
  grep -q "the plan has 4 ranks (2 stages x 2 replicas) but mpirun started 3" <<<"$out" &&
    ok "mpi with the wrong number of ranks: $(grep -m1 'plan has' <<<"$out")" || { bad "wrong-rank message"; echo "$out"; }
fi
finish
