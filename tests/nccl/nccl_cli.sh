#!/usr/bin/env bash
# pd2bwrun --backend cuda --transport nccl from the command line, under mpirun -np 2,
# without a CUDA driver (forced: PD2BW_LIBCUDA names a file that does not exist, so
# this holds on a GPU machine too): every rank ends with the backend's "no CUDA driver
# found ... use --backend cpu" and the job with a non-zero status, within the timeout
# (never a hang), --timeout taken (passed to the MPI transport, not refused); and a
# transport other than nccl with --backend cuda is refused.
#   nccl_cli.sh MPIEXEC PD2BWRUN
set -u
MPIEXEC=$1
RUN=$2
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl_vader_single_copy_mechanism=none
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
pass=0
fail=0
check() { # NAME CONDITION-STATUS OUTPUT
  if [ "$2" -eq 0 ]; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL $1: $3" >&2; fi
}

out=$(PD2BW_LIBCUDA=/nonexistent/libcuda.so.1 timeout 60 "$MPIEXEC" --oversubscribe --allow-run-as-root -np 2 \
  "$RUN" /nonexistent-plan --backend cuda --transport nccl --data x --steps 2 --timeout 5 2>&1)
rc=$?
echo "$out"
echo "nccl_cli: mpirun exit status $rc"
[ $rc -ne 0 ] && [ $rc -ne 124 ]
check "no driver: status" $? "exit $rc"
n=$(grep -c "^pd2bwrun: error: cuda backend: no CUDA driver found (.*/nonexistent/libcuda.so.1" <<<"$out")
[ "$n" -ge 1 ]
check "no driver: message" $? "$out"

out=$("$RUN" /nonexistent-plan --backend cuda --transport mpi --data x --steps 2 2>&1)
rc=$?
[ $rc -eq 1 ] && grep -q "^pd2bwrun: error: --backend cuda supports .*--transport nccl" <<<"$out"
check "cuda with --transport mpi" $? "exit $rc: $out"

echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
