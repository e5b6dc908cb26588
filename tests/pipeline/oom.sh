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
# run LIMIT_KIB COMMAND...: the command under ulimit -v; rc in $rc, seconds in $dt
run() {
  local v=$1 t0
  shift
  rm -rf "$T/out.plan"
  t0=$(date +%s)
  (ulimit -v "$v" && exec timeout -s KILL $MAX_S "$@") >"$T/out" 2>&1
  rc=$?
  dt=$(($(date +%s) - t0))
}
# The limits come from the process itself, not from one machine's sizes (issue 24,
# item 8: on an AMD EPYC without AVX-512 the BLAS buffers are smaller and a one-stage
# run fit under every fixed limit of 100-2,000 MB). First the smallest limit the
# command succeeds under, found by bisection (within 3%) between 1 MiB and 64 GiB;
# then limits below it (95% .. 5%) must each end cleanly: exit 1 with "out of memory"
# within MAX_S, or the loader's exit 127 where libc itself does not fit. At least one
# must reach the out-of-memory path, so the test cannot pass without exercising it.
ladder() { # NAME COMMAND...
  local name=$1 lo=1024 hi=$((64 * 1024 * 1024)) v f hits=0 out
  shift
  run $hi "$@"
  [ $rc -eq 0 ] || { bad "$name: exit $rc under a limit of $hi KiB:"; cat "$T/out"; return; }
  while [ $((hi * 100)) -gt $((lo * 103)) ]; do
    v=$(python3 -c "print(int(($lo * $hi) ** 0.5))")
    run $v "$@"
    if [ $rc -eq 0 ]; then hi=$v; else lo=$v; fi
  done
  echo "  $name: needs $hi KiB of address space (fails at $lo KiB)"
  for f in 95 90 80 60 40 20 5; do
    v=$((hi * f / 100))
    run $v "$@"
    # (any case: a library that fails as it loads, libgomp for one, says "Out of memory")
    out=$(grep -m1 -i 'out of memory' "$T/out")
    if [ $rc -eq 1 ] && [ -n "$out" ] && [ $dt -lt $MAX_S ]; then
      hits=$((hits + 1))
      echo "  $name at $v KiB ($f%): exit 1 after $dt s: $out"
    elif [ $rc -eq 127 ] && grep -q 'error while loading shared libraries' "$T/out"; then
      echo "  $name at $v KiB ($f%): the loader's exit 127"
    else
      bad "$name at $v KiB ($f% of what it needs): exit $rc after $dt s (wanted 1 with 'out of memory', or 127):"
      cat "$T/out"
      return
    fi
  done
  [ $hits -gt 0 ] && ok "$name: out of memory at $hits limits below its need of $hi KiB, clean everywhere" ||
    bad "$name: no limit below its need of $hi KiB ran out of memory"
}
ladder "pd2bwc (100 layers)" \
  "$PD2BWC" "$SRC/tinygpt.model" -q -D layers=100 -D dim=16 -D seq=8 -D heads=2 --cluster "$SRC/cpu8.cluster" \
  -o "$T/out.plan"
ladder "pd2bwrun one-stage" "$RUN" "$T/p/reference" --data "$T/train.bin" --steps 1 --threads 2 -q
ladder "pd2bwrun 2 stages, threads" "$RUN" "$T/p" --data "$T/train.bin" --steps 1 --threads 2 --timeout 5 -q
finish
