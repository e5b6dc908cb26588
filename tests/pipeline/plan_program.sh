#!/usr/bin/env bash
# The compiled stage programs are the authority for what plan.json describes (issue
# 24, item 3): each stageN.c carries a manifest of its blocks, parameters (name, shape,
# offset), data inputs, boundary tensors and tied groups, and pd2bwrun checks plan.json
# against it at load. Each edit below used to misbehave on a real plan (2 stages, 2bw,
# tied embedding): a shrunk work block wrote out of bounds (SIGSEGV), swapped programs
# trained to "final loss 0.0000" with exit 0, an emptied tied list, swapped parameter
# offsets or a transposed shape trained silently to other losses, an emptied boundary
# list failed by timeout. Now each is exit 1 at once, with one line naming the field,
# plan.json's value and the program's.
#   plan_program.sh PD2BWC PD2BWRUN
set -u
PD2BWC=$1
RUN=$2
. "$(dirname "$0")/common.sh"
plan "$T/p" -D bsz=8 -D mbs=1 --stages 2 --replicas 1 --microbatches 8 --schedule 2bw --recompute off || exit 1
P=$T/p

# NAME|PYTHON (edits `plan`, a dict; base = "reference": the one-stage plan instead)|MESSAGE
cat >"$T/table" <<'TABLE'
shrink work|s = plan["stages"][0]; w = s["program"]["blocks"]["work"]; s["program"]["blocks"]["work"] = 256; [b.update(size=256) for b in s["memory"]["buffers"] if b["kind"] == "workspace"]|stages[0].program.blocks.work = 256: the program stage0.c was compiled with
swap programs|a, b = plan["stages"][0]["program"], plan["stages"][1]["program"]; a["source"], b["source"] = b["source"], a["source"]; a["hash"], b["hash"] = b["hash"], a["hash"]|stages[0].program.source = "stage1.c": the program of stage 1, not of stage 0
empty tied|plan["tied"] = []|tied: the program stage0.c holds "wte" tied over stages [0,1]; plan.json has no such group
swap offsets|ps = plan["stages"][1]["program"]["params"]; i, j = [k for k in range(len(ps)) if ps[k]["bytes"] == 64][:2]; ps[i]["offset"], ps[j]["offset"] = ps[j]["offset"], ps[i]["offset"]|.offset = 
change shape|ps = plan["stages"][0]["program"]["params"]; p = [q for q in ps if len(q["shape"]) == 2 and q["shape"][0] != q["shape"][1]][0]; p["shape"] = p["shape"][::-1]|.shape[0] = 
empty boundary|plan["stages"][0]["program"]["pipeline"]["boundary"] = []|stages[0].program.pipeline.boundary: 0 entries; the program stage0.c was compiled with 2
one-stage tied|plan["tied"][0]["stages"] = [1]|tied[0].stages = [1]: the program stage0.c ties "wte" over stages [0,1]
reference work|base = "reference"; plan = json.load(open(os.path.join(src, base, "plan.json"))); plan["stages"][0]["program"]["blocks"]["work"] //= 2|stages[0].program.blocks.work = 
cuda rng_base|plan["stages"][1]["program"]["cuda"]["rng_base"] += 1|stages[1].program.cuda.rng_base = 
swap launch lists|a, b = plan["stages"][0]["program"]["cuda"], plan["stages"][1]["program"]["cuda"]; a["launch_list"], b["launch_list"] = b["launch_list"], a["launch_list"]; a["launch_hash"], b["launch_hash"] = b["launch_hash"], a["launch_hash"]|stages[0].program.cuda.launch_list = "stage1.launch.json": the program stage0.c was compiled with "stage0.launch.json"
rename param|ps = plan["stages"][0]["program"]["params"]; ps[1]["name"] = "h.9.x"|.name = "h.9.x": the program stage0.c was compiled with
TABLE

python3 - "$T/table" "$P" "$T" <<'PY' || { bad "mutating plan.json"; finish; exit 1; }
import json, os, sys
table, src, tmp = sys.argv[1:]
for n, line in enumerate(open(table).read().splitlines(), 1):
    _, code, _ = line.split("|", 2)
    base = ""
    plan = json.load(open(os.path.join(src, "plan.json")))
    exec(code)  # may set base = "reference": the one-stage plan
    dst, d = os.path.join(tmp, "m%d" % n), os.path.join(src, base)
    os.mkdir(dst)
    for f in os.listdir(d):
        if f != "plan.json":
            os.symlink(os.path.join(d, f), os.path.join(dst, f))
    open(os.path.join(dst, "plan.json"), "w").write(json.dumps(plan, indent=1))
PY

n=0
while IFS='|' read -r name code want; do
  n=$((n + 1))
  timeout -s KILL 60 "$RUN" "$T/m$n" --data "$T/train.bin" --steps 4 --threads 1 >"$T/out" 2>&1
  rc=$?
  if [ $rc -eq 1 ] && grep -qF -- "$want" "$T/out" && grep -qF "$T/m$n/plan.json" "$T/out" &&
    [ "$(grep -c 'error' "$T/out")" -eq 1 ]; then
    ok "$name: $(grep -m1 error "$T/out")"
  else
    bad "$name: exit $rc, wanted exit 1 and one line with: $want"
    tail -5 "$T/out"
  fi
done <"$T/table"

check "the untouched plan trains" train "$P" 2
check "the untouched reference trains" train "$P/reference" 2
finish
