#!/usr/bin/env bash
# 2bw's flushed start (train.flush_steps K) and weight prediction (train.predict k),
# docs/update-rules.md, on every CPU executor against the references: pipelined on
# threads (and MPI) against the one-stage trainer (pd2bwrun --reference), the
# sequential multi-stage executor (which reads both settings from their definition,
# not from the instruction streams) against the one-stage trainer and against the
# pipeline; each within the bounds of equiv.sh. A checkpoint saved during and after
# the flushed steps resumes bit for bit. The checks can fail: each setting changes the
# losses of plain 2bw. And pd2bwc / pd2bwrun: the settings only under 2bw (dropped with
# a note, refused by name in plan.json), the defaults, plan.json's update_rule, the
# master copy's memory.
#   refine_2bw.sh PD2BWC PD2BWRUN SEQ_CHECK HAVE_MPI(1/0)
set -u
PD2BWC=$1
RUN=$2
SEQ=$3
HAVE_MPI=$4
. "$(dirname "$0")/common.sh"
args="-D bsz=6 -D mbs=1 --stages 3 --replicas 2 --microbatches 3 --schedule 2bw --recompute off"
steps=7
last_loss() { grep -o '"loss": [^,]*' "$1" | tail -1; }
# shellcheck disable=SC2086 # the argument lists are words
plan "$T/plain" $args -D train.flush_steps=0 -D train.predict=0 >/dev/null 2>&1
train "$T/plain" $steps --log-json "$T/plain.jsonl" >/dev/null 2>&1
for c in "flush:-D train.flush_steps=3 -D train.predict=0" "predict:-D train.flush_steps=0 -D train.predict=1" \
  "both+dc:-D train.flush_steps=2 -D train.predict=1 -D train.delay_comp=1e4"; do
  name=${c%%:*} set=${c#*:}
  # shellcheck disable=SC2086
  plan "$T/$name" $args $set >"$T/out" 2>&1 || { bad "pd2bwc $name: $(cat "$T/out")"; continue; }
  if train "$T/$name" $steps --reference --reference-tol 1e-5 --log-json "$T/$name.jsonl" >"$T/out" 2>&1; then
    ok "threads: 2bw $name d=3 w=2 m=3 = one-stage: $(grep "^reference: worst" "$T/out")"
  else
    bad "threads: 2bw $name vs the one-stage reference:"
    cat "$T/out"
  fi
  for against in trainer pipeline; do
    if "$SEQ" "$T/$name" "$T/train.bin" $steps delayed $against 1e-5 >"$T/out" 2>&1; then
      ok "multi-stage 2bw $name = the $against: $(grep "^reference: worst" "$T/out")"
    else
      bad "multi-stage 2bw $name vs the $against:"
      cat "$T/out"
    fi
  done
  if [ "$(last_loss "$T/plain.jsonl")" = "$(last_loss "$T/$name.jsonl")" ]; then
    bad "2bw $name ends on plain 2bw's loss: $(last_loss "$T/$name.jsonl")"
  else
    ok "2bw $name changes the losses: $(last_loss "$T/plain.jsonl") (plain) vs $(last_loss "$T/$name.jsonl")"
  fi
done
if [ "$HAVE_MPI" = 1 ]; then
  export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0" # Open MPI's own leaks (mpi.sh)
  if mpitrain 6 "$T/both+dc" $steps --reference --reference-tol 1e-5 >"$T/out" 2>&1; then
    ok "mpi: 2bw flushed start + prediction + delay_comp = one-stage: $(grep -m1 "^reference: worst" "$T/out")"
  else
    bad "mpi: 2bw flushed start + prediction + delay_comp vs the one-stage reference:"
    tail -20 "$T/out"
  fi
fi
# A checkpoint during (after step 1 of K = 3) and after the flushed steps resumes bit for
# bit: the same final checkpoint as the run without a stop, next.* (prediction) included.
plan "$T/ck" $args -D train.flush_steps=3 -D train.predict=1 -D train.delay_comp=1e4 >/dev/null 2>&1
train "$T/ck" $steps --save "$T/full.st" >/dev/null 2>&1
for cut in 1 4; do
  train "$T/ck" $cut --save "$T/part.st" >/dev/null 2>&1
  train "$T/ck" $steps --resume "$T/part.st" --save "$T/res.st" >"$T/out" 2>&1
  if python3 - "$T/full.st" "$T/res.st" <<'PY'; then
import json, struct, sys
def tensors(p):
    b = open(p, "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    h = json.loads(b[8:8 + n])
    h.pop("__metadata__", None)
    return {k: b[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]] for k, v in h.items()}
a, r = tensors(sys.argv[1]), tensors(sys.argv[2])
assert any(k.startswith("next.") for k in a), "no next.* tensors"
assert a == r, [k for k in a if a[k] != r.get(k)][:4]
PY
    ok "resumed after step $cut of $steps (K = 3, k = 1): the same checkpoint bit for bit"
  else
    bad "resumed after step $cut: the checkpoint differs from the run without a stop"
    cat "$T/out"
  fi
done
# pd2bwc: the defaults (K = train.steps / 10 = 30 for tests/pipeline/tinygpt.model, k = 1),
# update_rule and the master copy: a third weight version, the memory of one more
# parameter block
plan "$T/def" $args >"$T/out" 2>&1
python3 - "$T/def/plan.json" "$T/plain/plan.json" <<'PY' && ok "defaults: flush_steps 30, predict 1, 3 weight versions" || bad "defaults in plan.json"
import json, sys
d, p = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
assert d["update_rule"] == {"rule": "2bw", "changes_update": True, "delay_comp": 0, "flush_steps": 30, "predict": 1}, d["update_rule"]
assert d["train"]["flush_steps"] == 30 and d["train"]["predict"] == 1
for sd, sp in zip(d["stages"], p["stages"]):
    assert sd["weight_versions"] == 3 and sp["weight_versions"] == 2, (sd["weight_versions"], sp["weight_versions"])
    assert sd["memory"]["total_bytes"] > sp["memory"]["total_bytes"]
assert json.load(open(sys.argv[1].replace("plan.json", "reference/plan.json")))["train"]["predict"] == 0
PY
"$PD2BWC" "$SRC/tinygpt.model" -D layers=3 -D dim=16 -D seq=8 -D heads=2 -D bsz=4 -D mbs=1 --cluster "$SRC/cpu8.cluster" \
  --stages 2 --replicas 1 --microbatches 4 --schedule 1f1b -D train.flush_steps=5 -D train.predict=1 -o "$T/v" >"$T/out" 2>&1
if grep -q "^flushed start: off, train.flush_steps=5 is a setting of the 2bw rule only" "$T/out" &&
  grep -q "^weight prediction: off, train.predict=1 is a setting of the 2bw rule only" "$T/out" &&
  python3 -c 'import json,sys; p=json.load(open(sys.argv[1])); assert p["train"]["flush_steps"] == 0 and p["train"]["predict"] == 0' "$T/v/plan.json"; then
  ok "pd2bwc --schedule 1f1b with flush_steps and predict: dropped with a note each"
else
  bad "pd2bwc --schedule 1f1b with flush_steps and predict:"
  cat "$T/out"
fi
python3 - "$T/v/plan.json" <<'PY'
import json, sys
p = json.load(open(sys.argv[1])); p["train"]["predict"] = 1
json.dump(p, open(sys.argv[1], "w"))
PY
if out=$(train "$T/v" 1 2>&1); then
  bad "a 1f1b plan with train.predict 1 runs"
else
  check "pd2bwrun refuses predict under 1f1b by name" grep -q "train.predict: must be 0 unless config.schedule is 2bw" <<<"$out"
fi
for bad_set in "train.predict=11" "train.predict=-1" "train.flush_steps=-2" "train.flush_steps=1.5"; do
  if out=$("$PD2BWC" "$SRC/tinygpt.model" -D bsz=4 -D mbs=1 -D "$bad_set" --cluster "$SRC/cpu8.cluster" -o "$T/e" 2>&1); then
    bad "pd2bwc takes -D $bad_set"
  else
    check "pd2bwc -D $bad_set: an error with the range" grep -q "expected .*in \[0, \(10\]\|9007199254740992\]\)" <<<"$out"
  fi
done
finish
