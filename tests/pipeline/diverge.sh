#!/usr/bin/env bash
# The per-step checks are one check with one message in every CPU mode (issue 13):
# a loss that is not finite stops the run at the step it appears in, with
# "the loss is nan at step S: training diverged", exit status 1 and no checkpoint;
# the one-stage trainer (PLAN/reference), threads with 2 stages x 2 replicas and
# (where mpirun exists) MPI. A learning rate of 1e30 makes the loss NaN within a few
# steps; a gpipe plan computes the reference's losses in every mode, so the step is the same.
#   diverge.sh PD2BWC PD2BWRUN [mpi MPI_BUILT]
set -u
PD2BWC=$1
RUN=$2
. "$(dirname "$0")/common.sh"
. "$(dirname "$0")/../need_mpi.sh"
modes=(one threads)
if [ "${3:-}" = mpi ]; then
  need_mpi "${4:-0}"
  modes=(one mpi)
fi
sed 's/lr = 1e-3/lr = 1e30/' "$SRC/tinygpt.model" >"$T/nan.model"
grep -q 'lr = 1e30' "$T/nan.model" || { echo "FAIL tinygpt.model's learning rate not found"; exit 1; }
rm -rf "$T/p"
"$PD2BWC" "$T/nan.model" -q -D layers=3 -D dim=16 -D seq=8 -D heads=2 -D bsz=4 -D mbs=1 --cluster "$SRC/cpu8.cluster" \
  --stages 2 --replicas 2 --microbatches 2 --schedule gpipe --recompute off -o "$T/p" || exit 1
for m in "${modes[@]}"; do
  case $m in
  one) cmd=("$RUN" "$T/p/reference" --data "$T/train.bin" --steps 20 --threads 1) ;;
  threads) cmd=("$RUN" "$T/p" --data "$T/train.bin" --steps 20 --threads 1) ;;
  mpi) cmd=(timeout 120 "${MPIRUN[@]}" -np 4 "$RUN" "$T/p" --transport mpi --data "$T/train.bin" --steps 20 --threads 1) ;;
  esac
  for q in "" -q; do
    rm -f "$T/ck.st"
    ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0" "${cmd[@]}" $q --save "$T/ck.st" >"$T/$m$q.out" 2>&1
    rc=$?
    msg=$(grep -m1 -o 'error: the loss is [^ ]* at step [0-9]*: training diverged (lower the learning rate?)$' "$T/$m$q.out")
    if [ $rc -eq 1 ] && [ -n "$msg" ] && [ ! -e "$T/ck.st" ]; then
      ok "$m $q: exit $rc, $msg"
      echo "$msg" >"$T/$m$q.msg"
    else
      bad "$m $q: exit $rc, wanted 1 and the diverged message, no checkpoint:"
      cat "$T/$m$q.out"
    fi
  done
done
# one message: the same text, the same step, in every mode (and with -q)
n=$(cat "$T"/*.msg 2>/dev/null | sort -u | wc -l)
if [ "$n" -eq 1 ]; then ok "every mode stops with: $(cat "$T"/*.msg | head -1)"
else bad "the modes' messages differ:"; cat "$T"/*.msg; fi
finish
