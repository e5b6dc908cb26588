#!/usr/bin/env bash
# pd2bwrun --backend cuda with the checkpoint and validation flags, from the command
# line, on a machine without a CUDA driver (forced: PD2BW_LIBCUDA names a file that
# does not exist, so this holds on a GPU machine too):
#  - a one-stage plan with --save/--resume/--init/--val-data/--eval-every gets as far
#    as opening the device (the flags are accepted): the "no CUDA driver" line, exit 1,
#    and no --save file;
#  - --transport nccl takes every checkpoint/validation flag too (the same: as far as
#    the device, no --save file; tests/nccl/test_nccl_ckpt is what they do there), and
#    --profile-out with nccl is refused (single-GPU mode and one-stage plans take it:
#    accepted as far as the device, no file), and pd2bw-cuda-train's --gemm, each with
#    one line and exit 1; --timeout, and --trace on a one-stage plan (single-GPU
#    pipeline mode on one rank), are accepted;
#  - --help says what the cuda backend takes.
# What the flags do on a device is tests/cudaexec/test_cudaexec_ckpt (emulated GPU).
#   cuda_ckpt_cli.sh PD2BWRUN PD2BWC
set -u
RUN=$1
PC=$2
T=$(mktemp -d /tmp/pd2bw-cxckcli-XXXXXX)
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
"$RUN" "$T/plan" --data "$T/train.bin" --steps 1 --save "$T/ck.safetensors" -q >/dev/null ||
  { echo "CPU run failed"; fail=$((fail + 1)); }

# accepted: the run reaches the device (either message: no driver, or no toolkit in this build)
expect_error "one-stage, every flag" "use --backend cpu\|without the CUDA toolkit" "$T/plan" --backend cuda \
  --data "$T/train.bin" --steps 2 --resume "$T/ck.safetensors" --init "$T/ck.safetensors" --val-data "$T/train.bin" \
  --eval-every 1 --eval-batches 2 --save "$T/gpu.safetensors"
if [ -e "$T/gpu.safetensors" ]; then
  fail=$((fail + 1))
  echo "FAIL: a --save file after a failed run" >&2
else
  pass=$((pass + 1))
fi
for flag in "--save $T/x.safetensors" "--resume $T/ck.safetensors" "--init $T/ck.safetensors" \
  "--val-data $T/train.bin" "--eval-every 1"; do
  # accepted: it reaches the device (under MPI the no-driver line is followed by MPI_Abort's)
  # shellcheck disable=SC2086
  out=$(PD2BW_LIBCUDA=/nonexistent/libcuda.so.1 "$RUN" "$T/plan" --backend cuda --transport nccl \
    --data "$T/train.bin" --steps 1 $flag 2>&1)
  rc=$?
  if [ $rc -ne 0 ] && grep -q -- "use --backend cpu\|without the CUDA toolkit" <<<"$out"; then
    pass=$((pass + 1))
  else
    fail=$((fail + 1))
    echo "FAIL nccl $flag: exit $rc, output: $out" >&2
  fi
done
[ ! -e "$T/x.safetensors" ] && pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL: nccl left a --save file" >&2; }
expect_error "trace, one stage" "use --backend cpu\|without the CUDA toolkit" "$T/plan" --backend cuda \
  --data "$T/train.bin" --steps 1 --trace "$T/t.json"
[ ! -e "$T/t.json" ] && pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL: a --trace file" >&2; }
expect_error "pd2bw-cuda-train's flag" "unknown option '--gemm'" "$T/plan" --backend cuda --data "$T/train.bin" \
  --steps 1 --gemm tf32
# --timeout: taken (it reaches the device; test_cudapipe_timeout: it reaches the ranks)
expect_error "timeout" "use --backend cpu\|without the CUDA toolkit" "$T/plan" --backend cuda --data "$T/train.bin" \
  --steps 1 --timeout 5
# --profile-out: accepted (it reaches the device, and writes nothing there); not with nccl yet
expect_error "profile-out" "use --backend cpu\|without the CUDA toolkit" "$T/plan" --backend cuda \
  --data "$T/train.bin" --steps 1 --profile-out "$T/prof.json"
[ ! -e "$T/prof.json" ] && pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL: a --profile-out file" >&2; }
expect_error "profile-out, nccl" "--profile-out is not supported with --transport nccl" "$T/plan" --backend cuda \
  --transport nccl --data "$T/train.bin" --steps 1 --profile-out "$T/prof.json"
# --reference with --init: taken (it reaches the device; the reference starts from the same
# --init, tests/pipeline/init.sh)
expect_error "reference with init" "use --backend cpu\|without the CUDA toolkit" "$T/plan" --backend cuda \
  --data "$T/train.bin" --steps 1 --reference --init "$T/ck.safetensors"
if "$RUN" --help | grep -q "it takes every option above"; then
  pass=$((pass + 1))
else
  fail=$((fail + 1))
  echo "FAIL help" >&2
fi

echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
