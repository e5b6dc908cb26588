#!/usr/bin/env bash
# pd2bw-cuda-train from the command line (one-stage and pipeline plans): user mistakes
# end with one clear line and exit status 1 (the parser is pd2bwrun's, tools/run_args.c:
# pd2bwrun's own flags are unknown here, the flags both take reach the device); without a CUDA driver (forced: PD2BW_LIBCUDA names a file that does
# not exist, so this holds on a GPU machine too) the message is the backend's
# "no CUDA driver found ... use --backend cpu", status 1, nothing else printed.
#   cuda_train_cli.sh PD2BW_CUDA_TRAIN PD2BWC
set -u
RUN=$1
PC=$2
T=$(mktemp -d /tmp/pd2bw-cxcli-XXXXXX)
trap 'rm -rf "$T"' EXIT
pass=0
fail=0
expect_error() { # NAME PATTERN ARGS...
  local name=$1 pat=$2
  shift 2
  local out rc
  out=$(PD2BW_LIBCUDA=/nonexistent/libcuda.so.1 "$RUN" "$@" 2>&1)
  rc=$?
  if [ $rc -eq 1 ] && grep -q -- "$pat" <<<"$out" && [ "$(wc -l <<<"$out")" -eq 1 ]; then
    pass=$((pass + 1))
  else
    fail=$((fail + 1))
    echo "FAIL $name: exit $rc, output: $out" >&2
  fi
}

"$PC" models/tinygpt.model -D layers=1 -D dim=32 -D seq=16 -D heads=2 -D vocab=64 --stages 1 --replicas 1 \
  -o "$T/plan" -q || { echo "pd2bwc failed"; echo "0 passed, 1 failed"; exit 1; }
printf '\x01\x00%.0s' $(seq 1 4000) >"$T/train.bin"

out=$(PD2BW_LIBCUDA=/nonexistent/libcuda.so.1 "$RUN" "$T/plan" --data "$T/train.bin" --steps 2 2>&1)
echo "$out"
# with the toolkit: the driver is missing; without it: this build has no CUDA at all
expect_error "no driver" "use --backend cpu" "$T/plan" --data "$T/train.bin" --steps 2
if grep -q "without the CUDA toolkit" <<<"$out"; then
  pass=$((pass + 1))
elif grep -q "^pd2bw-cuda-train: error: cuda backend: no CUDA driver found (.*/nonexistent/libcuda.so.1" <<<"$out"; then
  pass=$((pass + 1))
else
  fail=$((fail + 1))
  echo "FAIL: the no-driver message names neither the library nor the missing toolkit: $out" >&2
fi
expect_error "no data flag" "--data FILE is required" "$T/plan" --steps 1
expect_error "no steps" "--steps N is required" "$T/plan" --data "$T/train.bin"
expect_error "bad steps" "--steps needs an integer from 1 to" "$T/plan" --data "$T/train.bin" --steps 0
expect_error "bad gemm" "fp32 or tf32" "$T/plan" --data "$T/train.bin" --steps 1 --gemm bf17
expect_error "unknown option" "unknown or incomplete option" "$T/plan" --data "$T/train.bin" --steps 1 --frobnicate
expect_error "two plans" "one plan directory" "$T/plan" "$T/plan" --data "$T/train.bin" --steps 1
expect_error "bad reference tol" "reference-tol needs a number above 0 and at most 1e6" "$T/plan" --data "$T/train.bin" --steps 1 \
  --reference --reference-tol 0
expect_error "pd2bwrun's flag" "unknown option '--threads'" "$T/plan" --data "$T/train.bin" --steps 1 --threads 2
expect_error "shared flags reach the device" "use --backend cpu\|without the CUDA toolkit" "$T/plan" \
  --data "$T/train.bin" --steps 1 --trace "$T/t.json" --profile-out "$T/p.json" --seed 3 --eval-batches 2 --timeout 5
# a pipeline plan (single-GPU pipeline mode) meets the same clean message without a driver
"$PC" models/tinygpt.model -D layers=2 -D dim=32 -D seq=16 -D heads=2 -D vocab=64 --stages 2 --replicas 1 \
  --cluster tests/pipeline/cpu8.cluster -o "$T/pipe" -q || { echo "pd2bwc (2 stages) failed"; fail=$((fail + 1)); }
expect_error "pipeline plan, no driver" "use --backend cpu" "$T/pipe" --data "$T/train.bin" --steps 2 --reference
check_help() { "$RUN" --help | grep -q "usage: pd2bw-cuda-train"; }
if check_help; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL help" >&2; fi

echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
