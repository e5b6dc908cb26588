#!/usr/bin/env bash
# MPI ranks agree before the first step (issue 24, item 4): ranks started with another
# plan (another schedule, another lr in plan.json), another --data or --val-data,
# --seed or --steps stop together with exit 1 and one message naming the rank and what
# differs, within seconds. Before, the first three trained silently to another loss
# (exit 0) and the others ended in "timed out waiting for rank 1".
#   mpi_agree.sh PD2BWC PD2BWRUN MPI_BUILT (exit 77, a CTest skip, without MPI)
set -u
PD2BWC=$1
RUN=$2
. "$(dirname "$0")/../need_mpi.sh"
need_mpi "${3:-0}"
. "$(dirname "$0")/common.sh"
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0" # Open MPI's own leaks (mpi.sh)
plan "$T/a" -D bsz=8 -D mbs=1 --stages 2 --replicas 1 --microbatches 4 --schedule 2bw --recompute off || exit 1
plan "$T/f" -D bsz=8 -D mbs=1 --stages 2 --replicas 1 --microbatches 4 --schedule 1f1b --recompute off || exit 1
cp -r "$T/a" "$T/lr"
python3 - "$T/lr/plan.json" <<'PY' || exit 1
import json, sys
j = json.load(open(sys.argv[1]))
j["train"]["lr"] = j["train"]["lr"] * 2
json.dump(j, open(sys.argv[1], "w"), indent=1)
PY
python3 - "$T/train.bin" "$T/other.bin" <<'PY' || exit 1
import sys
b = bytearray(open(sys.argv[1], "rb").read())
b[len(b) // 2] ^= 1  # the same size, one token changed in the middle
open(sys.argv[2], "wb").write(b)
PY
COMMON=(--transport mpi --threads 1 -q --timeout 20 --steps 4)
two() { # NAME PATTERN RANK0-ARGS... -- RANK1-ARGS...: one process each (mpirun's MPMD form)
  local name=$1 pat=$2 a=() b=()
  shift 2
  while [ $# -gt 0 ] && [ "$1" != -- ]; do a+=("$1"); shift; done
  shift
  b=("$@")
  local t0=$(date +%s)
  timeout 120 "${MPIRUN[@]}" -np 1 "$RUN" "${a[@]}" "${COMMON[@]}" : -np 1 "$RUN" "${b[@]}" "${COMMON[@]}" \
    >"$T/out" 2>&1
  local rc=$? dt=$(($(date +%s) - t0))
  local want=1
  [ "$pat" = "final loss" ] && want=0
  # (mpirun's own exit status is 1 when a rank exits 1; its banners are Open MPI's)
  if [ $rc -eq $want ] && [ $dt -le 15 ] && grep -q -- "$pat" "$T/out" &&
    { [ $want -eq 0 ] || [ "$(grep -c 'pd2bwrun: error' "$T/out")" -eq 1 ]; }; then
    ok "$name (exit $rc after $dt s): $(grep -m1 -- "$pat" "$T/out")"
  else
    bad "$name: exit $rc (wanted $want) after $dt s (limit 15), wanted one /$pat/:"
    cat "$T/out"
  fi
}
D=(--data "$T/train.bin")
two "the same run trains" "final loss" "$T/a" "${D[@]}" -- "$T/a" "${D[@]}"
two "another --seed" "rank 1 does not agree with rank 0 on the seed.*rank 0 has 1337, rank 1 7" \
  "$T/a" "${D[@]}" -- "$T/a" "${D[@]}" --seed 7
two "another --data (same size)" "rank 1 does not agree with rank 0 on --data: rank 0 has .*train.bin" \
  "$T/a" "${D[@]}" -- "$T/a" --data "$T/other.bin"
two "another --val-data" "rank 1 does not agree with rank 0 on --val-data" \
  "$T/a" "${D[@]}" --val-data "$T/train.bin" -- "$T/a" "${D[@]}" --val-data "$T/other.bin"
two "another plan.json (lr)" "rank 1 does not agree with rank 0 on the plan (plan.json)" \
  "$T/a" "${D[@]}" -- "$T/lr" "${D[@]}"
two "another schedule" "rank 1 does not agree with rank 0 on the plan's schedule: rank 0 has 2bw.*rank 1 1f1b" \
  "$T/a" "${D[@]}" -- "$T/f" "${D[@]}"
COMMON=(--transport mpi --threads 1 -q --timeout 20)
two "another --steps" "rank 1 does not agree with rank 0 on --steps: rank 0 has 4, rank 1 6" \
  "$T/a" "${D[@]}" --steps 4 -- "$T/a" "${D[@]}" --steps 6
finish
