#!/usr/bin/env bash
# The memory plan is the arena (DESIGN.md §4): for several (d, schedule, recompute,
# w) plans of the tiny GPT and the MLP, plan.json's stages[i].memory.total_bytes
#   - equals the arena the stage programs need, recomputed here independently from
#     stages[i].program.blocks, the boundary list and the tied groups (weights ×
#     versions, grads, tied_grads × 2 under 2bw, adam m/v, stash × slots — only the
#     received input when recomputing, plus one activation block —, inputs, boundary,
#     workspace, TIED_SYNC's receive buffers × 2; each rounded to 256 bytes);
#   - equals what pd2bwrun allocated, as it reports per stage ("memory X bytes (plan Y)");
# and no stage's boundary block carries a tied-gradient contribution any more.
#   memory.sh PD2BWC PD2BWRUN
set -u
PD2BWC=$1
RUN=$2
. "$(dirname "$0")/common.sh"
case_() { # NAME MAKER STEPS PD2BWC-ARGS...
  local name=$1 mk=$2 steps=$3
  shift 3
  if ! $mk "$T/p" "$@" >"$T/out" 2>&1; then bad "$name: pd2bwc: $(cat "$T/out")"; return; fi
  if ! train "$T/p" "$steps" >"$T/run.out" 2>&1; then bad "$name: pd2bwrun:"; cat "$T/run.out"; return; fi
  if python3 - "$T/p/plan.json" "$T/run.out" >"$T/check.out" 2>&1 <<'PY'; then
import json, re, sys
plan = json.load(open(sys.argv[1]))
run = open(sys.argv[2]).read()
up = lambda n: (n + 255) // 256 * 256
cfg = plan["config"]
rec = cfg.get("recompute", False)
measured = {int(s): (int(a), int(p)) for s, a, p in re.findall(r"stage (\d+): .*memory (\d+) bytes \(plan (\d+)\)", run)}
assert len(measured) == cfg["stages"], run
for i, st in enumerate(plan["stages"]):
    prog = st["program"]
    blk = prog["blocks"]
    bnd = prog["pipeline"]["boundary"]
    assert all(e["role"] in ("act_in", "act_out", "grad_in", "grad_out") for e in bnd), bnd
    act_in = sum(up(e["bytes"]) for e in bnd if e["role"] == "act_in")
    deferred = recv = 0
    for g in plan.get("tied", []):
        if i in g["stages"] and len(g["stages"]) > 1:
            b = up(4 * g["parameters"])
            deferred += b if cfg["schedule"] == "2bw" else 0
            recv += (len(g["stages"]) - 1) * b
    v, s = st["weight_versions"], st["stash_slots"]
    want = (v + 2) * up(blk["params"]) + up(blk["grads"]) + 2 * deferred
    want += s * up(act_in if rec else blk["stash"]) + (up(blk["stash"]) if rec else 0)
    want += up(blk["inputs"]) + up(blk["boundary"]) + up(blk["work"]) + 2 * recv
    mem = st["memory"]
    assert mem["total_bytes"] == want, (i, mem["total_bytes"], want)
    assert measured[i] == (want, want), (i, measured[i], want)
    end = 0
    for b in mem["buffers"]:
        assert b["offset"] % 256 == 0 and b["offset"] >= end, b
        end = b["offset"] + b["size"]
    assert end <= want, (end, want)
    print("stage %d: %d bytes planned = allocated = program need" % (i, want))
PY
    ok "$name: $(tr '\n' ' ' <"$T/check.out")"
  else
    bad "$name:"
    cat "$T/check.out"
  fi
}
G=(-D mbs=1 --recompute off)
case_ "2bw d=4 w=1 m=4" plan 2 -D bsz=4 "${G[@]}" --stages 4 --replicas 1 --microbatches 4 --schedule 2bw
case_ "1f1b d=2 w=2 m=2" plan 2 -D bsz=4 "${G[@]}" --stages 2 --replicas 2 --microbatches 2 --schedule 1f1b
case_ "gpipe d=3 w=1 m=3" plan 2 -D bsz=3 "${G[@]}" --stages 3 --replicas 1 --microbatches 3 --schedule gpipe
case_ "pipedream d=3 w=1 m=3" plan 3 -D bsz=3 "${G[@]}" --stages 3 --replicas 1 --microbatches 3 --schedule pipedream
case_ "2bw recompute d=3 w=1 m=3" plan 2 -D bsz=6 -D mbs=2 --stages 3 --replicas 1 --microbatches 3 \
  --schedule 2bw --recompute on
case_ "mlp 1f1b recompute d=2 w=1 m=2" plan_mlp 2 -D bsz=2 -D mbs=1 --stages 2 --replicas 1 --microbatches 2 \
  --schedule 1f1b --recompute on
# A plan whose memory plan is smaller than its programs need is refused at load time.
plan "$T/p" -D bsz=4 "${G[@]}" --stages 2 --replicas 1 --microbatches 2 --schedule 2bw >/dev/null 2>&1
python3 - "$T/p/plan.json" <<'PY'
import json, sys
p = json.load(open(sys.argv[1]))
for b in p["stages"][1]["memory"]["buffers"]:
    if b["kind"] == "workspace":
        b["size"] -= 64
json.dump(p, open(sys.argv[1], "w"))
PY
if out=$(train "$T/p" 1 2>&1); then
  bad "a workspace smaller than the program needs should be refused"
elif grep -q "workspace 0 .* where the stage program needs" <<<"$out"; then
  ok "a too-small planned buffer is refused: $(grep -o 'stage 1: the plan.*needs [0-9]* bytes' <<<"$out")"
else
  bad "message for a too-small planned buffer:"
  echo "$out"
fi
finish
