#!/usr/bin/env bash
# run_mpi_case.sh MPIEXEC BINARY MODE zero|nonzero [PATTERN...]
# Runs BINARY MODE on 4 MPI ranks (as root and on 2 cores too: both flags are
# needed), bounded by `timeout 60`, then checks the exit status and that every
# extended-regex PATTERN occurs in the output. Open MPI's own noise is ignored:
# only our messages are matched.
set -u
mpiexec=$1 bin=$2 mode=$3 expect=$4
shift 4
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1
# Containers often forbid the cross-process reads (CMA) of Open MPI's shared-memory
# transport, which then fails outright; plain copies work everywhere.
export OMPI_MCA_btl_vader_single_copy_mechanism=none
# Sanitizer builds: Open MPI leaks by design at MPI_Finalize (every report lies
# in its libraries and plugins); leak checking of our code is the local test's.
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
start=$(date +%s%N)
out=$(timeout 60 "$mpiexec" --oversubscribe --allow-run-as-root -np 4 "$bin" "$mode" 2>&1)
rc=$?
took_ms=$(( ($(date +%s%N) - start) / 1000000 ))
printf '%s\n' "$out"
echo "run_mpi_case: $mode: exit status $rc after ${took_ms} ms"
fail=0
# `timeout` says 124; an mpirun whose rank died by SIGKILL says 137 itself.
if [ "$rc" -eq 124 ] || [ "$took_ms" -ge 59000 ]; then
  echo "run_mpi_case: FAIL: $mode did not finish within 60 s"
  fail=1
elif [ "$expect" = zero ] && [ "$rc" -ne 0 ]; then
  echo "run_mpi_case: FAIL: expected exit status 0"
  fail=1
elif [ "$expect" = nonzero ] && [ "$rc" -eq 0 ]; then
  echo "run_mpi_case: FAIL: expected a non-zero exit status"
  fail=1
fi
for pattern in "$@"; do
  if ! grep -qE -- "$pattern" <<<"$out"; then
    echo "run_mpi_case: FAIL: output lacks /$pattern/"
    fail=1
  fi
done
if [ "$fail" -eq 0 ]; then echo "1 passed, 0 failed"; else echo "0 passed, 1 failed"; fi
exit "$fail"
