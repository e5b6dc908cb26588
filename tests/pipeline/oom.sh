#!/usr/bin/env bash
# Out of memory (issue 12, item 5): under ulimit -v (RLIMIT_AS) at a ladder of limits,
# pd2bwc, pd2bwrun on a one-stage plan and pd2bwrun on a 2-stage plan (threads) each
# either succeed or exit 1 with "out of memory" within a bounded time: never an
# internal-error abort, a crash, or a hang (OpenBLAS used to retry its buffer
# allocation forever, and --timeout never fired). At least one limit of each ladder
# must hit the out-of-memory path, so the test cannot pass without exercising it.
# A limit too low for the dynamic loader to map libc (exit 127) says nothing and is
# allowed. AddressSanitizer reserves terabytes of address space, so a sanitized
# build skips the test (exit 77, CTest's SKIP_RETURN_CODE).
#   oom.sh PD2BWC PD2BWRUN SANITIZED(0|1)
set -u
PD2BWC=$1
RUN=$2
[ "${3:-0}" = 1 ] && { echo "skipped: ulimit -v does not work under AddressSanitizer"; exit 77; }
. "$(dirname "$0")/common.sh"
plan "$T/p" -D bsz=4 -D mbs=1 --stages 2 --replicas 1 --microbatches 4 --schedule 1f1b --recompute off || exit 1
train "$T/p" 1 >/dev/null 2>&1 || { bad "the 2-stage plan trains without a limit"; finish; exit 1; }
MAX_S=20
ladder() { # NAME LIMITS(KiB, space-separated) COMMAND...
  local name=$1 limits=$2
  shift 2
  local v rc t0 dt hits=0 out
  for v in $limits; do
    rm -rf "$T/out.plan"
    t0=$(date +%s)
    (ulimit -v "$v" && exec timeout -s KILL $MAX_S "$@") >"$T/out" 2>&1
    rc=$?
    dt=$(($(date +%s) - t0))
    out=$(grep -m1 'out of memory' "$T/out")
    if [ $rc -eq 1 ] && [ -n "$out" ] && [ $dt -lt $MAX_S ]; then
      hits=$((hits + 1))
      echo "  $name at $v KiB: exit 1 after $dt s: $out"
    elif [ $rc -eq 0 ] || { [ $rc -eq 127 ] && grep -q 'error while loading shared libraries' "$T/out"; }; then
      echo "  $name at $v KiB: exit $rc after $dt s"
    else
      bad "$name at $v KiB: exit $rc after $dt s (wanted 0, or 1 with 'out of memory'):"
      cat "$T/out"
      return
    fi
  done
  [ $hits -gt 0 ] && ok "$name: out of memory at $hits of the limits, clean everywhere" ||
    bad "$name: no limit of '$limits' ran out of memory"
}
ladder "pd2bwc (100 layers)" "5000 7000 9000 11000 40000" \
  "$PD2BWC" "$SRC/tinygpt.model" -q -D layers=100 -D dim=16 -D seq=8 -D heads=2 --cluster "$SRC/cpu8.cluster" \
  -o "$T/out.plan"
ladder "pd2bwrun one-stage" "100000 200000 300000 2000000" \
  "$RUN" "$T/p/reference" --data "$T/train.bin" --steps 1 --threads 2 -q
ladder "pd2bwrun 2 stages, threads" "100000 200000 300000 2000000" \
  "$RUN" "$T/p" --data "$T/train.bin" --steps 1 --threads 2 --timeout 5 -q
finish
