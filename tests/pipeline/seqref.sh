#!/usr/bin/env bash
# The sequential multi-stage executor (runtime/reference/pipeline_seq.c, pipedream's reference)
# checked by itself: with the vanilla or the 2bw rule it must agree with the one-stage
# reference (runtime/core/trainer.c, an independent implementation) on gpipe/2bw plans of
# the tiny tied GPT (AdamW, dropout 0.1) and the MLP, with clipping too. And the check
# must be able to fail: a pipedream run against the multi-stage executor WITHOUT the
# per-stage delay (vanilla or 2bw rule), and a 2bw run against the per-stage delay,
# must differ beyond the bounds.
# A --precision bf16 plan (stash and boundary in bfloat16, passes/layout.h): its threads
# pipeline runs the very stage programs the multi-stage executor runs, so with w = 1
# the two agree bit for bit (bound 0; w = 2 sums the replicas' gradients in another
# order); the one-stage trainer (PLAN/reference) has no boundary to round, so it agrees
# only within bf16's precision: losses 2.0e-5 apart seen, weights 6.2e-2 (the largest
# relative change of a tensor: a bias near zero, which AdamW's per-element scaling
# turns small gradient differences into), bound 1e-2 (weights 1e-1).
#   seqref.sh PD2BWC PD2BWRUN SEQ_CHECK
set -u
PD2BWC=$1
RUN=$2
SEQ=$3
. "$(dirname "$0")/common.sh"
seqcheck() { # NAME PLAN-MAKER RULE AGAINST [--expect-differ] -- PD2BWC-ARGS...
  local name=$1 mk=$2 rule=$3 against=$4 expect=
  shift 4
  [ "$1" = --expect-differ ] && expect=$1 && shift
  shift # --
  if ! $mk "$T/plan" "$@" >"$T/out" 2>&1; then bad "$name: pd2bwc: $(cat "$T/out")"; return; fi
  if "$SEQ" "$T/plan" "$T/train.bin" 4 "$rule" "$against" 1e-5 $expect >"$T/out" 2>&1; then
    ok "$name: $(grep "^reference: worst" "$T/out")"
  else
    bad "$name:"
    cat "$T/out"
  fi
}
gpt="-D mbs=1 --recompute off"
seqcheck "multi-stage 2bw rule = one-stage 2bw, d=3 w=2 m=3" plan delayed trainer -- \
  -D bsz=6 $gpt --stages 3 --replicas 2 --microbatches 3 --schedule 2bw
seqcheck "multi-stage vanilla rule = one-stage vanilla, d=4 w=1 m=4" plan vanilla trainer -- \
  -D bsz=4 $gpt --stages 4 --replicas 1 --microbatches 4 --schedule gpipe
seqcheck "multi-stage 2bw rule = one-stage 2bw, clip, d=4 w=1 m=8" plan delayed trainer -- \
  -D clipv=0.05 -D bsz=8 $gpt --stages 4 --replicas 1 --microbatches 8 --schedule 2bw
seqcheck "mlp: multi-stage 2bw rule = one-stage 2bw, d=3 w=2 m=3" plan_mlp delayed trainer -- \
  -D bsz=6 $gpt --stages 3 --replicas 2 --microbatches 3 --schedule 2bw
seqcheck "pipedream d=4 w=1 m=4 vs the multi-stage executor without per-stage delay (vanilla) differs" plan vanilla \
  pipeline --expect-differ -- -D bsz=4 $gpt --stages 4 --replicas 1 --microbatches 4 --schedule pipedream
seqcheck "pipedream d=3 w=2 m=3 vs the multi-stage executor with the 2bw rule differs" plan delayed \
  pipeline --expect-differ -- -D bsz=6 $gpt --stages 3 --replicas 2 --microbatches 3 --schedule pipedream
seqcheck "2bw d=3 w=1 m=3 vs the per-stage delay rule differs" plan stage-delay pipeline --expect-differ -- \
  -D bsz=3 $gpt --stages 3 --replicas 1 --microbatches 3 --schedule 2bw
for s in 2bw gpipe; do
  rule=delayed && [ $s = gpipe ] && rule=vanilla
  if ! plan "$T/plan" -D bsz=3 $gpt --stages 3 --replicas 1 --microbatches 3 --schedule $s --precision bf16 \
    >"$T/out" 2>&1; then bad "bf16 $s: pd2bwc: $(cat "$T/out")"; continue; fi
  for against in "pipeline 0 multi-stage-executor" "trainer 1e-2 one-stage-trainer"; do
    set -- $against
    if "$SEQ" "$T/plan" "$T/train.bin" 4 $rule $1 $2 >"$T/out" 2>&1; then
      ok "bf16 $s d=3 w=1 m=3: threads pipeline vs the $3 (bound $2): $(grep "^reference: worst" "$T/out")"
    else
      bad "bf16 $s d=3 w=1 m=3 vs $1:"
      cat "$T/out"
    fi
  done
done
finish
