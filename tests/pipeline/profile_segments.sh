#!/usr/bin/env bash
# --profile-out gives each segment its own measured time (issue 14): the CPU device
# runs each timed pass segment by segment (the stage program's per-segment entry
# points, ABI 3). A one-stage plan of a GPT whose LM head (vocabulary 4096, width 32)
# costs far more than the embedding: the profile names every segment of the plan,
# the epilogue's times are several times the prologue's (an even split of the stage's
# time would make them equal), pd2bwc --profile accepts the file, and a two-stage
# re-plan charges each stage the sum of its own segments' measured times.
#   profile_segments.sh PD2BWC PD2BWRUN
set -u
PD2BWC=$1
RUN=$2
. "$(dirname "$0")/common.sh"
GPT=(-D layers=2 -D dim=32 -D seq=16 -D heads=2 -D vocab=4096 -D bsz=4 -D mbs=2 --cluster "$SRC/cpu8.cluster"
     --replicas 1 --schedule gpipe --recompute off)
"$PD2BWC" "$SRC/tinygpt.model" -q "${GPT[@]}" --stages 1 -o "$T/one" || exit 1
check "run with --profile-out" train "$T/one" 3 --profile-out "$T/prof.json"
check "every segment has its own time; the LM head's are several times the embedding's" \
  python3 - "$T/prof.json" "$T/one/plan.json" <<'PY'
import json, sys
prof = json.load(open(sys.argv[1]))
plan = json.load(open(sys.argv[2]))
names = [n for s in plan["stages"] for n in s["segments"]]
seg = {e["name"]: e for e in prof["segments"]}
assert [e["name"] for e in prof["segments"]] == names, (list(seg), names)
assert prof["microbatch_size"] == plan["config"]["microbatch_size"]
assert all(e["forward_s"] > 0 and e["backward_s"] > 0 for e in seg.values()), seg
pro, epi = seg["prologue"], seg["epilogue"]
for k in ("forward_s", "backward_s"):
    assert epi[k] > 3 * pro[k], (k, epi[k], pro[k])
print("ok", {n: round(e["forward_s"] * 1e6, 1) for n, e in seg.items()}, "us forward")
PY
check "pd2bwc --profile accepts it" "$PD2BWC" "$SRC/tinygpt.model" -q "${GPT[@]}" --stages 2 --profile "$T/prof.json" \
  -o "$T/two"
check "the re-plan charges each stage its own segments' measured times" \
  python3 - "$T/prof.json" "$T/two/plan.json" <<'PY'
import json, sys
seg = {e["name"]: e for e in json.load(open(sys.argv[1]))["segments"]}
plan = json.load(open(sys.argv[2]))
assert len(plan["stages"]) == 2
for s in plan["stages"]:
    for k, key in (("forward_s", "fwd_time_s"), ("backward_s", "bwd_time_s")):
        want = sum(seg[n][k] for n in s["segments"])
        assert abs(s[key] - want) <= 1e-9 + 1e-6 * want, (s["segments"], key, s[key], want)
print("ok", [(s["segments"], s["fwd_time_s"]) for s in plan["stages"]])
PY
finish
