#!/usr/bin/env bash
# 2bw's delay compensation (train.delay_comp, docs/update-rules.md) on every executor
# against the references: pipelined on threads and on MPI against the one-stage
# trainer (pd2bwrun --reference), the sequential multi-stage executor against the
# one-stage trainer and against the pipeline (seq_check); each within the bounds of
# equiv.sh. The checks can fail: compensation must change the run (its losses differ
# from plain 2bw's), and a reference without it must differ beyond the bound. And
# pd2bwc / pd2bwrun: compensation only under 2bw (dropped with a note under another
# schedule; a plan.json that asks for it elsewhere is refused by name), plan.json's
# update_rule.
#   delay_comp.sh PD2BWC PD2BWRUN SEQ_CHECK HAVE_MPI(1/0)
set -u
PD2BWC=$1
RUN=$2
SEQ=$3
HAVE_MPI=$4
. "$(dirname "$0")/common.sh"
# λ large enough that the correction is a good part of the first moment in 4 steps
dc="-D train.delay_comp=1e4"
# plain 2bw (no flushed start, no prediction: refine_2bw.sh combines them)
args="-D bsz=6 -D mbs=1 --stages 3 --replicas 2 --microbatches 3 --schedule 2bw --recompute off -D train.flush_steps=0 -D train.predict=0"
# shellcheck disable=SC2086 # the argument lists are words
plan "$T/plan" $args $dc >"$T/out" 2>&1 || { bad "pd2bwc: $(cat "$T/out")"; finish; exit; }
if train "$T/plan" 4 --reference --reference-tol 1e-5 --log-json "$T/dc.jsonl" >"$T/out" 2>&1; then
  ok "threads: 2bw + delay_comp d=3 w=2 m=3 = one-stage 2bw + delay_comp: $(grep "^reference: worst" "$T/out")"
else
  bad "threads: 2bw + delay_comp vs the one-stage reference:"
  cat "$T/out"
fi
if [ "$HAVE_MPI" = 1 ]; then
  export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0" # Open MPI's own leaks (mpi.sh)
  if mpitrain 6 "$T/plan" 4 --reference --reference-tol 1e-5 >"$T/out" 2>&1; then
    ok "mpi: 2bw + delay_comp d=3 w=2 m=3 = one-stage 2bw + delay_comp: $(grep -m1 "^reference: worst" "$T/out")"
  else
    bad "mpi: 2bw + delay_comp vs the one-stage reference:"
    tail -20 "$T/out"
  fi
fi
if "$SEQ" "$T/plan" "$T/train.bin" 4 delayed trainer 1e-5 >"$T/out" 2>&1; then
  ok "multi-stage 2bw rule + delay_comp = one-stage: $(grep "^reference: worst" "$T/out")"
else
  bad "multi-stage 2bw rule + delay_comp vs one-stage:"
  cat "$T/out"
fi
if "$SEQ" "$T/plan" "$T/train.bin" 4 delayed pipeline 1e-5 >"$T/out" 2>&1; then
  ok "multi-stage 2bw rule + delay_comp = the pipeline: $(grep "^reference: worst" "$T/out")"
else
  bad "multi-stage 2bw rule + delay_comp vs the pipeline:"
  cat "$T/out"
fi
# The compensation changes the run: plain 2bw's losses differ from step 3 on (steps
# 1, 2 read W(0), the same in both; W(1) - W(0) is compensated at step 2's update).
plan "$T/plain" $args >/dev/null 2>&1
train "$T/plain" 4 --log-json "$T/plain.jsonl" >/dev/null 2>&1
if cmp -s <(grep -o '"loss": [^,]*' "$T/plain.jsonl" | tail -1) <(grep -o '"loss": [^,]*' "$T/dc.jsonl" | tail -1); then
  bad "2bw with and without delay_comp end on the same loss: $(grep -o '"loss": [^,]*' "$T/dc.jsonl" | tail -1)"
else
  ok "delay_comp changes the losses: $(grep -o '"loss": [^,]*' "$T/plain.jsonl" | tail -1) vs $(grep -o '"loss": [^,]*' "$T/dc.jsonl" | tail -1)"
fi
python3 - "$T/plan/reference/plan.json" <<'PY' && ok "PLAN/reference (gpipe) holds delay_comp 0" || bad "reference plan: train.delay_comp is not 0"
import json, sys
assert json.load(open(sys.argv[1]))["train"]["delay_comp"] == 0
PY
# pd2bwc: update_rule and the compensation in force
python3 - "$T/plan/plan.json" <<'PY' && ok "plan.json: update_rule 2bw, delay_comp 1e4" || bad "plan.json update_rule"
import json, sys
u = json.load(open(sys.argv[1]))["update_rule"]
assert u == {"rule": "2bw", "changes_update": True, "delay_comp": 1e4, "flush_steps": 0, "predict": 0}, u
PY
"$PD2BWC" "$SRC/tinygpt.model" -D layers=3 -D dim=16 -D seq=8 -D heads=2 -D bsz=4 -D mbs=1 --cluster "$SRC/cpu8.cluster" \
  --stages 2 --replicas 1 --microbatches 4 --schedule 1f1b $dc -o "$T/v" >"$T/out" 2>&1
if grep -q "^update rule: vanilla (schedule 1f1b changes no update)" "$T/out" &&
  grep -q "^delay compensation: off, train.delay_comp=10000 compensates the 2bw rule only" "$T/out" &&
  python3 -c 'import json,sys; p=json.load(open(sys.argv[1])); assert p["train"]["delay_comp"] == 0 and p["update_rule"] == {"rule": "vanilla", "changes_update": False, "delay_comp": 0, "flush_steps": 0, "predict": 0}' "$T/v/plan.json"; then
  ok "pd2bwc --schedule 1f1b with delay_comp: vanilla rule, compensation dropped with a note"
else
  bad "pd2bwc --schedule 1f1b with delay_comp:"
  cat "$T/out"
fi
"$PD2BWC" "$SRC/tinygpt.model" -D layers=3 -D dim=16 -D seq=8 -D heads=2 -D bsz=4 -D mbs=1 --cluster "$SRC/cpu8.cluster" \
  --stages 2 --replicas 1 --microbatches 4 --schedule pipedream -o "$T/pd" >"$T/out" 2>&1
check "pd2bwc --schedule pipedream: the update rule is named" grep -q "^update rule: pipedream, stage i's gradients are d-1-i steps stale" "$T/out"
# pd2bwrun refuses a plan that asks for compensation under another rule, by name
python3 - "$T/v/plan.json" <<'PY'
import json, sys
p = json.load(open(sys.argv[1])); p["train"]["delay_comp"] = 5
json.dump(p, open(sys.argv[1], "w"))
PY
if out=$(train "$T/v" 1 2>&1); then
  bad "a 1f1b plan with train.delay_comp 5 runs"
elif grep -q "train.delay_comp: must be 0 unless config.schedule is 2bw" <<<"$out"; then
  ok "pd2bwrun refuses delay_comp under 1f1b: $(head -1 <<<"$out")"
else
  bad "pd2bwrun on a 1f1b plan with delay_comp: $out"
fi
# sgd has no second moment to scale it by: refused by the override and the train block
if out=$("$PD2BWC" "$SRC/tinygpt.model" -D bsz=4 -D mbs=1 -D train.optimizer=sgd $dc --cluster "$SRC/cpu8.cluster" -o "$T/s" 2>&1); then
  bad "pd2bwc takes delay_comp with sgd"
else
  check "pd2bwc: delay_comp with sgd is an error" grep -q "delay_comp' is a setting of adamw" <<<"$out"
fi
finish
