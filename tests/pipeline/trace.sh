#!/usr/bin/env bash
# Measured against planned: --trace writes a Chrome trace with every rank's forwards,
# backwards, messages and steps; --profile-out writes measured times that pd2bwc
# --profile accepts; the run reports bubble and memory per stage.
#   trace.sh PD2BWC PD2BWRUN
set -u
PD2BWC=$1
RUN=$2
. "$(dirname "$0")/common.sh"
PIN=(-D bsz=8 -D mbs=1 --stages 2 --replicas 2 --microbatches 4 --schedule 2bw --recompute off)
plan "$T/a" "${PIN[@]}" || exit 1
check "run with --trace and --profile-out" train "$T/a" 6 --trace "$T/trace.json" --profile-out "$T/prof.json"
cp "$T/check.out" "$T/run.out"
grep 'stage [0-9]:' "$T/run.out"
check "the trace has every rank's work, as the simulator's timeline has" python3 - "$T/trace.json" "$T/a/timeline.json" <<'PY'
import json, sys
t = json.load(open(sys.argv[1]))["traceEvents"]
sim = json.load(open(sys.argv[2]))["traceEvents"]
x = [e for e in t if e["ph"] == "X"]
for rank in range(4):
    mine = [e for e in x if e["pid"] == rank]
    f = sum(1 for e in mine if e["name"].startswith("F"))
    b = sum(1 for e in mine if e["name"].startswith("B"))
    steps = sum(1 for e in mine if e["name"].startswith("step"))
    assert f == 6 * 4 and b == 6 * 4, (rank, f, b)   # 6 batches of m = 4
    assert steps >= 6, (rank, steps)
    assert all(e["dur"] >= 0 and e["ts"] >= 0 for e in mine)
    assert any(e["tid"] == 1 for e in mine)            # communication track
keys = {"name", "ph", "pid", "tid", "ts", "dur", "args", "cat"}
assert keys <= set(x[0]) and set(sim[-1]) <= keys | {"cat"}, (set(x[0]), set(sim[-1]))
print("ok", len(x), "events")
PY
check "pd2bwc --profile accepts the measured times" plan "$T/b" "${PIN[@]}" --profile "$T/prof.json"
check "bubble and memory are reported per stage" grep -q "stage 1: bubble [0-9.]*%, memory [0-9]* bytes (plan [0-9]*)" "$T/run.out"
finish
