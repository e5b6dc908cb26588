#!/usr/bin/env bash
# Pipelined training vs the sequential reference (DESIGN.md §3), on local threads:
# every schedule against its rule (gpipe, 1f1b: vanilla; 2bw: one-step delayed;
# pipedream: per-stage delay, checked by the sequential multi-stage executor)
# over d in {1,2,3,4}, w in {1,2}, m in {d, 2d}, on a tiny GPT with tied embeddings,
# AdamW and dropout 0.1; the MLP (tests/pipeline/mlp.model) over d in {2,3}, w in
# {1,2}; plus recomputation, global-norm clipping and pipedream m < d cases.
# Losses of every step within 1e-5 relative and all weights after 4 updates within
# 1e-4 (runtime/reference/pipeline_ref.c says why the weights' bound is looser).
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
for s in gpipe 1f1b 2bw pipedream; do
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
for s in gpipe 1f1b 2bw pipedream; do
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
run "pipedream clip d=4 w=1 m=4" 5 -D clipv=0.05 -D bsz=4 -D mbs=1 --stages 4 --replicas 1 --microbatches 4 --schedule pipedream --recompute off
run "pipedream recompute d=3 w=2 m=3" 4 -D bsz=6 -D mbs=1 --stages 3 --replicas 2 --microbatches 3 --schedule pipedream --recompute on
# pipedream allows m < d (stage 0 then lags more than a batch behind the last stage)
run "pipedream d=4 w=2 m=2" 6 -D bsz=4 -D mbs=1 --stages 4 --replicas 2 --microbatches 2 --schedule pipedream --recompute off
run "pipedream d=4 w=1 m=3" 6 -D bsz=3 -D mbs=1 --stages 4 --replicas 1 --microbatches 3 --schedule pipedream --recompute off
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
# The same through the multi-stage executor (pipedream); seqref.sh shows that a
# wrong rule differs by far more.
plan "$T/plan" -D bsz=4 -D mbs=1 --stages 2 --replicas 2 --microbatches 2 --schedule pipedream >/dev/null 2>&1
if out=$(train "$T/plan" 3 --reference --reference-tol 1e-12 2>&1); then
  bad "pipedream --reference with a 1e-12 bound should report a difference"
elif grep -q "differs from the sequential reference" <<<"$out"; then
  ok "pipedream --reference reports a difference beyond its bound: $(grep -o 'the pipeline differs.*' <<<"$out")"
else
  bad "pipedream --reference failure message:"
  echo "$out"
fi
# A resumed pipedream run cannot be checked (its checkpoint lacks the stashed
# versions): a clear refusal, not a false verdict.
plan "$T/plan" -D bsz=3 -D mbs=1 --stages 3 --replicas 1 --microbatches 3 --schedule pipedream >/dev/null 2>&1
if ! train "$T/plan" 2 --save "$T/pd.ckpt" >"$T/out" 2>&1; then
  bad "pipedream --save:"
  cat "$T/out"
elif out=$(train "$T/plan" 3 --resume "$T/pd.ckpt" --reference 2>&1); then
  bad "pipedream --resume --reference should be refused"
elif grep -q "pipedream" <<<"$out"; then
  ok "pipedream --resume --reference refused: $(grep -o 'error: .*' <<<"$out")"
else
  bad "pipedream --resume --reference failure message:"
  echo "$out"
fi
finish
