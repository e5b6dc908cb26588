#!/usr/bin/env bash
# pd2bwrun from the command line: a short run with validation, JSON log and a
# checkpoint; resuming it reproduces the uninterrupted log; user mistakes end with
# one clear line and exit status 1.
#   pd2bwrun_cli.sh PD2BWRUN MAKE_TEST_PLAN
set -u
RUN=$1
MK=$2
T=$(mktemp -d /tmp/pd2bw-cli-XXXXXX)
trap 'rm -rf "$T"' EXIT
export PD2BW_CACHE=${PD2BW_CACHE:-/tmp/pd2bw-test-cache-$(id -u)}
pass=0
fail=0
check() { # NAME COMMAND...
  local name=$1
  shift
  if "$@"; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL $name" >&2; fi
}
expect_error() { # NAME PATTERN ARGS...
  local name=$1 pat=$2
  shift 2
  local out rc
  out=$("$RUN" "$@" 2>&1)
  rc=$?
  if [ $rc -eq 1 ] && grep -q -- "$pat" <<<"$out"; then
    pass=$((pass + 1))
  else
    fail=$((fail + 1))
    echo "FAIL $name: exit $rc, output: $out" >&2
  fi
}

"$MK" "$T/plan" "$T/train.bin" || { echo "make_test_plan failed"; echo "0 passed, 1 failed"; exit 1; }
cp "$T/train.bin" "$T/val.bin"

# 8 steps straight, with validation every 4 and a JSON log
out=$("$RUN" "$T/plan" --data "$T/train.bin" --val-data "$T/val.bin" --steps 8 --eval-every 4 \
  --threads 1 --log-json "$T/a.jsonl" --save "$T/a.safetensors" 2>&1)
echo "$out"
check "straight run succeeds" test -s "$T/a.safetensors"
check "one line per step" test "$(grep -c '^step [0-9]*/8 | loss ' <<<"$out")" -eq 8
check "step line fields" grep -q 'lr .* | grad norm .* ms | .* tok/s | .* GFLOP/s' <<<"$out"
check "val loss reported" grep -q 'val loss' <<<"$out"
# the one-stage report's words (scripts/main-job.sh, docs/data.md), whichever driver runs it
check "one-stage banner" grep -q '^pd2bwrun: plan .* (model [a-z0-9]*), microbatch [0-9]* x [0-9]* per step, 1 thread, BLAS ' <<<"$out"
check "one-stage summary" grep -q '^pd2bwrun: 8 steps, final loss [0-9.]*, [0-9.]* ms/step, [0-9]* tok/s, [0-9.]* GFLOP/s, saved .*/a.safetensors$' <<<"$out"
check "no separate saved line" test "$(grep -c 'saved' <<<"$out")" -eq 1
check "validation loss line" grep -q '^pd2bwrun: validation loss [0-9.]*$' <<<"$out"
check "json log has 8 lines" test "$(wc -l <"$T/a.jsonl")" -eq 8
check "json has val_loss twice" test "$(grep -c val_loss "$T/a.jsonl")" -eq 2
check "json keys" grep -q '"step": 8, "loss": .*"lr": .*"grad_norm": .*"ms": .*"tokens_per_s": .*"gflops"' "$T/a.jsonl"

# 4 steps, save, resume to 8: the same losses, bit for bit in the log's %.9g
# A run that must succeed: exit 0 (its output shown otherwise), so that the
# comparisons below never compare two empty logs of failed runs.
run_ok() { # NAME ARGS...
  local name=$1 out rc
  shift
  out=$("$RUN" "$@" 2>&1)
  rc=$?
  check "$name exits 0" test $rc -eq 0
  [ $rc -eq 0 ] || echo "$out" >&2
}
run_ok "4 steps + save" "$T/plan" --data "$T/train.bin" --steps 4 --threads 1 --log-json "$T/b1.jsonl" --save "$T/b.safetensors" -q
run_ok "resume to 8" "$T/plan" --data "$T/train.bin" --steps 8 --threads 1 --log-json "$T/b2.jsonl" --resume "$T/b.safetensors" -q
out=$("$RUN" "$T/plan" --data "$T/train.bin" --steps 4 --threads 1 --resume "$T/b.safetensors" 2>&1)
check "resumed line" grep -q "^pd2bwrun: resumed from $T/b.safetensors at step 4\$" <<<"$out"
check "nothing to train note" grep -q "b.safetensors is at step 4 already, --steps 4: nothing to train" <<<"$out"
check "nothing trained: no summary" test "$(grep -c 'final loss' <<<"$out")" -eq 0
losses() { sed 's/.*"loss": \([^,]*\),.*/\1/' "$@"; }
check "resume reproduces losses" test "$(losses "$T/a.jsonl")" = "$(losses "$T/b1.jsonl" "$T/b2.jsonl")"
# the same with --shuffle (the sample order is a function of the seed and the position)
run_ok "shuffled 8 steps" "$T/plan" --data "$T/train.bin" --steps 8 --threads 1 --shuffle --log-json "$T/c.jsonl" -q
run_ok "shuffled 3 steps + save" "$T/plan" --data "$T/train.bin" --steps 3 --threads 1 --shuffle --log-json "$T/c1.jsonl" --save "$T/c.safetensors" -q
run_ok "shuffled resume to 8" "$T/plan" --data "$T/train.bin" --steps 8 --threads 1 --shuffle --log-json "$T/c2.jsonl" --resume "$T/c.safetensors" -q
check "shuffled run logs 8 steps" test "$(losses "$T/c.jsonl" | wc -l)" -eq 8
check "shuffled resume reproduces losses" test "$(losses "$T/c.jsonl")" = "$(losses "$T/c1.jsonl" "$T/c2.jsonl")"
check "shuffle changes the order" test "$(losses "$T/c.jsonl")" != "$(losses "$T/a.jsonl")"
# the same plan (no stages[0].memory section, as every test plan) through the pipelines'
# driver: its reader lays the arena out as pd2bwc would, and the run is the same bits
run_ok "pipelines' driver" "$T/plan" --data "$T/train.bin" --val-data "$T/val.bin" --steps 8 --eval-every 4 \
  --threads 1 --transport local --log-json "$T/p.jsonl" -q
fields() { sed 's/"ms": .*"mfu": [^,}]*//' "$@"; }
check "pipelines' driver: same losses, norms, val" test "$(fields "$T/a.jsonl")" = "$(fields "$T/p.jsonl")"
# every schedule of a one-stage plan computes what the one-stage trainer does (its rule:
# 2bw's delayed update, else 1f1b): with one stage no schedule leaves a weight version
# stale but 2bw's, and the plan's schedule reaches the pipelines' driver as written
for s in 1f1b pipedream 2bw; do
  rm -rf "$T/plan-$s" && cp -r "$T/plan" "$T/plan-$s"
  sed -i "s/\"schedule\":[[:space:]]*\"gpipe\"/\"schedule\": \"$s\"/" "$T/plan-$s/plan.json"
  run_ok "$s: one-stage driver" "$T/plan-$s" --data "$T/train.bin" --steps 4 --threads 1 --log-json "$T/s1-$s.jsonl" -q
  run_ok "$s: pipelines' driver" "$T/plan-$s" --data "$T/train.bin" --steps 4 --threads 1 --transport local \
    --log-json "$T/s2-$s.jsonl" -q
  check "$s: same losses and norms in both drivers" test "$(fields "$T/s1-$s.jsonl")" = "$(fields "$T/s2-$s.jsonl")"
done
check "2bw's delayed update changes the losses" test "$(fields "$T/s1-2bw.jsonl")" != "$(fields "$T/s1-1f1b.jsonl")"

# user mistakes
expect_error "no plan" "plan.json" "$T/nope" --data "$T/train.bin" --steps 1
expect_error "no data flag" "--data FILE is required" "$T/plan" --steps 1
expect_error "no steps" "--steps N is required" "$T/plan" --data "$T/train.bin"
expect_error "bad steps" "--steps needs an integer from 0 to 4611686018427387903, got 'x'" "$T/plan" --data "$T/train.bin" --steps x
# every numeric flag's message names its range (issue 24, item 7)
expect_error "threads 0" "--threads needs an integer from 1 to 4096, got '0'" "$T/plan" --data "$T/train.bin" --steps 1 --threads 0
expect_error "threads=0" "--threads needs an integer from 1 to 4096, got '0'" "$T/plan" --data "$T/train.bin" --steps 1 --threads=0
expect_error "eval-batches 0" "--eval-batches needs an integer from 1 to 1073741824" "$T/plan" --data "$T/train.bin" --steps 1 --eval-batches 0
expect_error "seed -1" "--seed needs an integer from 0 to 18446744073709551615" "$T/plan" --data "$T/train.bin" --steps 1 --seed -1
expect_error "timeout 0" "--timeout needs a number above 0 and at most 1e6, got '0'" "$T/plan" --data "$T/train.bin" --steps 1 --timeout 0
expect_error "missing data file" "missing.bin" "$T/plan" --data "$T/missing.bin" --steps 1
expect_error "unknown option" "unknown or incomplete option" "$T/plan" --data "$T/train.bin" --steps 1 --frobnicate
printf '\x01\x00' >"$T/tiny.bin"
expect_error "data too short" "too few" "$T/plan" --data "$T/tiny.bin" --steps 1
expect_error "bad checkpoint" "bad.safetensors" "$T/plan" --data "$T/train.bin" --steps 1 --resume "$T/bad.safetensors"
printf '\xff\xff%.0s' $(seq 1 400) >"$T/oov.bin"
expect_error "token outside vocab" "oov.bin" "$T/plan" --data "$T/oov.bin" --steps 1
expect_error "bad backend" "--backend takes cpu or cuda" "$T/plan" --data "$T/train.bin" --steps 1 --backend tpu
# --backend cuda where no driver can be loaded (PD2BW_LIBCUDA points at nothing, so
# this holds on a GPU machine too): a clear message, exit 1, no crash
PD2BW_LIBCUDA=/nonexistent/libcuda.so.1 expect_error "cuda without a driver" "use --backend cpu" \
  "$T/plan" --data "$T/train.bin" --steps 1 --backend cuda

echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
