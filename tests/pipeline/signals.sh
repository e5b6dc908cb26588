#!/usr/bin/env bash
# The first SIGINT or SIGTERM ends every mode promptly (issue 24, item 6): a one-stage
# run and a 2-stage pipeline on threads stop at the next step's end, exit 130 or 143
# (128 + the signal) with one "interrupted by" line, and write no --save checkpoint
# (the run did not reach the step it was asked for). Before the fix a one-stage run
# swallowed the signal and trained to the end with exit 0. A rank stuck in a library
# ends the run within --timeout.
#   signals.sh PD2BWC PD2BWRUN
set -u
PD2BWC=$1
RUN=$2
. "$(dirname "$0")/common.sh"
plan "$T/one" -D bsz=8 -D mbs=1 --stages 1 --replicas 1 --microbatches 4 || exit 1
plan "$T/two" -D bsz=8 -D mbs=1 --stages 2 --replicas 1 --microbatches 4 --schedule 2bw --recompute off || exit 1
interrupt() { # PLAN SIGNAL
  local dir=$1 sig=$2 name="$(basename "$1"): SIG$2"
  rm -f "$T/ck.st" "$T/log.jsonl"
  "$RUN" "$dir" --data "$T/train.bin" --steps 200000 --threads 1 -q --save "$T/ck.st" \
    --log-json "$T/log.jsonl" >"$T/out" 2>&1 &
  local pid=$! n=0
  # signal a run that trains (its handler is in place once the first step is logged)
  while [ ! -s "$T/log.jsonl" ] && kill -0 $pid 2>/dev/null && [ $n -lt 600 ]; do
    sleep 0.1
    n=$((n + 1))
  done
  local t0=$(date +%s%N)
  kill -s "$sig" $pid
  wait $pid
  local rc=$? ms=$((($(date +%s%N) - t0) / 1000000)) want=$((128 + $(kill -l "$sig")))
  if [ $rc -eq $want ] && [ $ms -le 5000 ] && [ ! -e "$T/ck.st" ] && grep -q "interrupted by SIG$sig" "$T/out"; then
    ok "$name: exit $rc after $ms ms: $(head -1 "$T/out")"
  else
    bad "$name: exit $rc (wanted $want) after $ms ms (limit 5000), checkpoint $([ -e "$T/ck.st" ] && echo written || echo none):"
    cat "$T/out"
  fi
}
# A rank stuck in a computation or a library call (PD2BW_FAULT_INJECT=RANK:STEP:stuck
# spins where nothing can be noticed) ends the run within --timeout of its last
# progress, whatever the other ranks do; before, only 2 s after another rank had
# timed out ("did not stop within 2 s of that failure").
stuck() { # NAME TIMEOUT
  local t0=$(date +%s%N)
  PD2BW_FAULT_INJECT=1:1:stuck "$RUN" "$T/two" --data "$T/train.bin" --steps 50 --threads 1 -q --timeout "$2" \
    >"$T/out" 2>&1
  local rc=$? ms=$((($(date +%s%N) - t0) / 1000000))
  if [ $rc -eq 1 ] && [ $ms -le $(($2 * 1000 + 3000)) ] &&
    grep -q "rank 1 is stuck inside a computation or a library call (no progress for .*more than --timeout $2 s)" "$T/out"; then
    ok "$1: exit 1 after $ms ms: $(grep -m1 'is stuck' "$T/out")"
  else
    bad "$1: exit $rc after $ms ms (limit $(($2 * 1000 + 3000))):"
    cat "$T/out"
  fi
}
stuck "two: rank 1 stuck, --timeout 5" 5
for sig in INT TERM; do
  interrupt "$T/one" $sig
  interrupt "$T/two" $sig
done
finish
