#!/usr/bin/env bash
# Stages with the same code share one program file (issue 14: a 98-stage GPT wrote 98
# identical programs): the tiny GPT with 6 blocks on 8 stages, one block per middle
# stage, names one stageN.c for stages 1-6; the dropout streams stay each stage's own
# (the program adds the stage's rng_base), so the run still matches the reference.
#   shared_programs.sh PD2BWC PD2BWRUN
set -u
PD2BWC=$1
RUN=$2
. "$(dirname "$0")/common.sh"
train() { "$RUN" "$1" --data "$T/train.bin" --steps "$2" -q "${@:3}"; }
if ! "$PD2BWC" "$SRC/tinygpt.model" -q -D layers=6 -D dim=16 -D seq=8 -D heads=2 -D bsz=8 -D mbs=1 \
    --cluster "$SRC/cpu8.cluster" --stages 8 --replicas 1 --microbatches 8 --schedule 1f1b \
    --recompute off --backend cpu -o "$T/plan" >"$T/out" 2>&1; then
  bad "pd2bwc: $(cat "$T/out")"
  finish
  exit
fi
check "stages 1-6 name one program, stages 0 and 7 their own" python3 - "$T/plan/plan.json" <<'PY'
import json, sys
st = json.load(open(sys.argv[1]))["stages"]
src = [s["program"]["source"] for s in st]
hs = [s["program"]["hash"] for s in st]
print(src)
assert len(set(src[1:7])) == 1 and len(set(hs[1:7])) == 1, src
assert src[0] != src[1] and src[7] != src[1], src
bases = [s["program"]["rng_base"] for s in st]
assert len(set(bases)) == 8, bases   # each stage keys its own dropout streams
PY
check "three stage programs written" test "$(ls "$T/plan" | grep -c '^stage[0-9]*\.c$')" = 3
if train "$T/plan" 3 --reference --reference-tol 1e-5 >"$T/out" 2>&1; then
  ok "shared programs train like the reference: $(grep "^reference: worst" "$T/out")"
else
  bad "shared programs against the reference:"
  cat "$T/out"
fi
finish
