#!/usr/bin/env bash
# models/llama.model pipelined vs the sequential reference (DESIGN.md §3), on local
# threads, as equiv.sh does for the tiny GPT: 3 layers (an odd count, so a cut falls
# mid-model) of width 32, 4 query heads over 2 key/value heads (grouped-query) and over
# 4 (multi-head), SwiGLU 48, T 8, the untied head and the tied one (-D tied=1: the
# embedding's gradient summed across the first and last stage). 2bw on 2 stages (one-step delayed rule), 1f1b on 4 (vanilla), gpipe with 2
# replicas. Losses of every step within 1e-5 relative and all weights within 1e-4.
#   llama_equiv.sh PD2BWC PD2BWRUN
set -u
PD2BWC=$1
RUN=$2
. "$(dirname "$0")/common.sh"
MODELS=$(cd "$SRC/../../models" && pwd)
mkplan() { # MODEL KV PD2BWC-ARGS...: the small Llama's plan in $T/plan
  local model=$1 kv=$2
  shift 2
  rm -rf "$T/plan"
  "$PD2BWC" "$MODELS/$model" -q -D layers=3 -D dim=32 -D heads=4 -D kv_heads="$kv" -D ffn=48 -D seq=8 \
    -D train.lr=3e-3 --cluster "$SRC/cpu8.cluster" "$@" -o "$T/plan"
}
run() { # NAME MODEL KV STEPS PD2BWC-ARGS...
  local name=$1 model=$2 kv=$3 steps=$4
  shift 4
  if ! mkplan "$model" "$kv" "$@" >"$T/out" 2>&1; then
    bad "$name: pd2bwc: $(cat "$T/out")"; return
  fi
  if train "$T/plan" "$steps" --reference --reference-tol 1e-5 >"$T/out" 2>&1; then
    ok "$name: $(grep "^reference: worst" "$T/out")"
  else
    bad "$name:"
    cat "$T/out"
  fi
}
for kv in 2 4; do
  run "llama kv=$kv 2bw d=2 w=1 m=2" llama.model $kv 4 -D train.batch=2 -D train.microbatch=1 --stages 2 \
    --replicas 1 --microbatches 2 --schedule 2bw --recompute off
  run "llama kv=$kv 1f1b d=4 w=1 m=4" llama.model $kv 4 -D train.batch=4 -D train.microbatch=1 --stages 4 \
    --replicas 1 --microbatches 4 --schedule 1f1b --recompute off
done
run "llama kv=2 gpipe d=2 w=2 m=2" llama.model 2 4 -D train.batch=4 -D train.microbatch=1 --stages 2 --replicas 2 \
  --microbatches 2 --schedule gpipe --recompute off
run "llama tied=1 kv=2 2bw d=2 w=1 m=2" llama.model 2 4 -D tied=1 -D train.batch=2 -D train.microbatch=1 --stages 2 \
  --replicas 1 --microbatches 2 --schedule 2bw --recompute off
run "llama kv=2 2bw recompute d=2 w=1 m=2" llama.model 2 4 -D train.batch=2 -D train.microbatch=1 --stages 2 \
  --replicas 1 --microbatches 2 --schedule 2bw --recompute on
# The check itself can fail: the replicas sum their gradients in another order than the
# reference, so the weights differ in the last bits, which a 1e-12 bound must catch.
mkplan llama.model 2 -D train.batch=4 -D train.microbatch=1 --stages 2 --replicas 2 --microbatches 2 \
  --schedule gpipe --recompute off >/dev/null 2>&1
if out=$(train "$T/plan" 3 --reference --reference-tol 1e-12 2>&1); then
  bad "--reference with a 1e-12 bound should report a difference"
elif grep -q "differs from the sequential reference" <<<"$out"; then
  ok "--reference reports a difference beyond its bound: $(grep -o 'the pipeline differs.*' <<<"$out")"
else
  bad "--reference failure message:"
  echo "$out"
fi
finish
