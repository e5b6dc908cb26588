#!/usr/bin/env bash
# The runtime's limits on a plan (contract/plan_limits.h) are compile errors in pd2bwc,
# each with exit status 1, a message naming the limit (at the weight's declaration
# where one causes it) and no plan directory: tied weights, stages holding one tied
# weight, weight versions / stash slots per stage, tensors crossing a stage boundary,
# microbatches per batch
# (issue 12 item 10: pd2bwc accepted 9 tied groups that pd2bwrun then refused).
#   limits.sh PD2BWC
set -u
PD2BWC=$1
SRC=$(cd "$(dirname "$0")" && pwd)
T=$(mktemp -d /tmp/pd2bw-limits-XXXXXX)
trap 'rm -rf "$T"' EXIT
pass=0 fail=0
# expect NAME PATTERN MODEL ARGS...: pd2bwc fails with status 1, prints PATTERN, writes no plan
expect() {
  local name=$1 pattern=$2 model=$3
  shift 3
  "$PD2BWC" "$model" -q "$@" -o "$T/plan" >"$T/out" 2>&1
  local rc=$?
  if [ $rc -ne 1 ] || ! grep -qE "$pattern" "$T/out" || [ -e "$T/plan" ]; then
    echo "FAIL $name: status $rc, plan dir $([ -e "$T/plan" ] && echo present || echo absent), output:"
    cat "$T/out"
    fail=$((fail + 1))
  else
    echo "ok   $name: $(grep -E "$pattern" "$T/out" | head -1)"
    pass=$((pass + 1))
  fi
  rm -rf "$T/plan"
}
# model NAME NTIED NCARRIED: a 2-layer MLP-like model with NTIED weights declared outside
# the repeat and used by every copy, and NCARRIED prologue tensors read by every copy
model() {
  local f=$T/$1.model ntied=$2 ncarry=$3
  {
    echo "model m {"
    echo "  param layers = 2;"
    echo "  input x : f32[B, 8];"
    echo "  input y : i32[B];"
    for i in $(seq 1 "$ntied"); do echo "  weight t$i : f32[8, 8] = normal(0.1);"; done
    echo "  weight w0 : f32[8, 8] = normal(0.1);"
    echo "  h = linear(x, w0);"
    for i in $(seq 1 "$ncarry"); do echo "  c$i = scale(h, s = $i);"; done
    echo "  repeat blk[layers] {"
    echo "    weight w : f32[8, 8] = normal(0.1);"
    echo "    h = linear(h, w);"
    for i in $(seq 1 "$ntied"); do echo "    h = linear(h, t$i);"; done
    for i in $(seq 1 "$ncarry"); do echo "    h = add(h, c$i);"; done
    echo "  }"
    echo "  weight wo : f32[8, 4] = normal(0.1);"
    echo "  loss = cross_entropy(linear(h, wo), y);"
    echo "  minimize loss;"
    echo "  train { batch = 4; microbatch = 1; optimizer = sgd(lr = 0.1); }"
    echo "}"
  } >"$f"
  echo "$f"
}
ok8=$(model ok8 8 0)
if "$PD2BWC" "$ok8" -q -o "$T/ok" >"$T/out" 2>&1 && [ -f "$T/ok/plan.json" ]; then
  echo "ok   8 tied weights compile"
  pass=$((pass + 1))
else
  echo "FAIL 8 tied weights:"
  cat "$T/out"
  fail=$((fail + 1))
fi
expect "9 tied weights" "tied9.model:13:10: error: 't9' is the model's tied weight number 9 \(of 9\): the runtime syncs at most 8" \
  "$(model tied9 9 0)"
expect "a tied weight on 10 stages" "tied_layernorm.model:20:10: error: tied weight 'ln1_w' is used on 10 of the plan's 10 stages: the runtime keeps a tied weight on at most 8" \
  "$SRC/tied_layernorm.model" -D layers=12 --cluster "$SRC/cpu16.cluster" --stages 10 --backend cpu
expect "129 stash slots" "pd2bw: error: gpipe with 1 stages and 129 microbatches needs 1 weight versions and 129 stash slots on stage 0; the runtime keeps at most 128" \
  "$SRC/tied_layernorm.model" -D bsz=129 --schedule gpipe --microbatches 129 --backend cpu
expect "65 boundary tensors" "pd2bw: error: cannot run this partition as a pipeline: stage 0 exchanges [0-9]+ tensors with its neighbouring stages; the runtime handles at most 64" \
  "$(model carry65 0 65)" --cluster "$SRC/../pipeline/cpu8.cluster" --stages 2 --backend cpu
# found by tests/frontend/mutants.py (seed 1): batch 2^31 of microbatch 1 generated
# streams of 2^31 microbatches until memory ran out (a batch over 2^30 is now a
# front-end error, the runtime's train.batch range: issue 24, item 9)
expect "2^30 microbatches" "pd2bw: error: 1073741824 microbatches of 1 per batch: a plan has at most 4096" \
  "$SRC/../pipeline/mlp.model" -D bsz=1073741824 -D mbs=1 --backend cpu
expect "a batch of 2^31-1" "batch is 2147483647 \(expected an integer in \[1, 1073741824\]\)" \
  "$SRC/../pipeline/mlp.model" -D bsz=2147483647 -D mbs=1 --backend cpu
echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
