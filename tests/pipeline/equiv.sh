#!/usr/bin/env bash
# Pipelined training vs the sequential reference (DESIGN.md §3), on local threads:
# every schedule with a reference rule (gpipe, 1f1b: vanilla; 2bw: one-step delayed)
# over d in {1,2,3,4}, w in {1,2}, m in {d, 2d}, on a tiny GPT with tied embeddings,
# AdamW and dropout 0.1; the MLP (tests/pipeline/mlp.model) over d in {2,3}, w in
# {1,2}; plus recomputation and global-norm clipping cases.
# Losses of every step within 1e-5 relative and all weights after 4 updates within
# 1e-4 (runtime/pipeline_ref.c says why the weights' bound is looser).
#   equiv.sh PD2BWC PD2BWRUN [quick]
set -u
PD2BWC=$1
RUN=$2
MODE=${3:-full}
. "$(dirname "$0")/common.sh"
run() { # NAME STEPS PD2BWC-ARGS...
  local name=$1 steps=$2 mk=plan
  shift 2
  case $name in mlp*) mk=plan_mlp ;; esac
  if ! $mk "$T/plan" "$@" >"$T/out" 2>&1; then bad "$name: pd2bwc: $(cat "$T/out")"; return; fi
  if train "$T/plan" "$steps" --reference --reference-tol 1e-5 >"$T/out" 2>&1; then
    ok "$name: $(grep "^reference: worst" "$T/out")"
  else
    bad "$name:"
    cat "$T/out"
  fi
}
for s in gpipe 1f1b 2bw; do
  for d in 1 2 3 4; do
    for w in 1 2; do
      for m in $d $((2 * d)); do
        [ "$MODE" = quick ] && [ $m != $d ] && continue
        run "$s d=$d w=$w m=$m" 4 -D bsz=$((w * m)) -D mbs=1 --stages $d --replicas $w \
          --microbatches $m --schedule $s --recompute off
      done
    done
  done
done
for s in gpipe 1f1b 2bw; do
  for d in 2 3; do
    for w in 1 2; do
      run "mlp $s d=$d w=$w m=$d" 4 -D bsz=$((w * d)) -D mbs=1 --stages $d --replicas $w --microbatches $d \
        --schedule $s --recompute off
    done
  done
done
run "mlp 2bw recompute d=3 w=2 m=6" 4 -D bsz=12 -D mbs=1 --stages 3 --replicas 2 --microbatches 6 --schedule 2bw --recompute on
run "2bw recompute d=3 w=1 m=3" 4 -D bsz=6 -D mbs=2 --stages 3 --replicas 1 --microbatches 3 --schedule 2bw --recompute on
run "1f1b recompute d=2 w=2 m=2" 4 -D bsz=4 -D mbs=1 --stages 2 --replicas 2 --microbatches 2 --schedule 1f1b --recompute on
run "2bw clip d=4 w=1 m=4" 5 -D clipv=0.05 -D bsz=4 -D mbs=1 --stages 4 --replicas 1 --microbatches 4 --schedule 2bw --recompute off
run "gpipe clip d=2 w=2 m=2" 4 -D clipv=0.05 -D bsz=4 -D mbs=1 --stages 2 --replicas 2 --microbatches 2 --schedule gpipe --recompute off
# The check itself can fail: replicas sum their gradients in another order than the
# reference, so the weights differ in the last bits, which a 1e-12 bound must catch.
plan "$T/plan" -D bsz=4 -D mbs=1 --stages 2 --replicas 2 --microbatches 2 --schedule 2bw >/dev/null 2>&1
if out=$(train "$T/plan" 3 --reference --reference-tol 1e-12 2>&1); then
  bad "--reference with a 1e-12 bound should report a difference"
elif grep -q "differs from the sequential reference" <<<"$out"; then
  ok "--reference reports a difference beyond its bound: $(grep -o 'the pipeline differs.*' <<<"$out")"
else
  bad "--reference failure message:"
  echo "$out"
fi
# pipedream (weight stashing) has no sequential rule to match: it must run its
# streams (up to d-i versions per stage) to the end.
for cfg in "3 1 3" "4 2 4"; do
  set -- $cfg
  if plan "$T/plan" -D bsz=$(($2 * $3)) -D mbs=1 --stages $1 --replicas $2 --microbatches $3 \
      --schedule pipedream --recompute off >"$T/out" 2>&1 &&
    train "$T/plan" 6 >"$T/out" 2>&1; then
    ok "pipedream d=$1 w=$2 m=$3 runs"
  else
    bad "pipedream d=$1 w=$2 m=$3:"
    cat "$T/out"
  fi
done
finish
