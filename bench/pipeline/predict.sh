#!/usr/bin/env bash
# bench/pipeline/predict.sh — predicted against measured (issue 14): the bundled tiny
# GPT on models/clusters/cpu2.cluster, d = 2, gpipe and 2bw. For each schedule, one
# training run with --profile-out; the plan re-made with that profile; its predicted
# step beside the same run's measured median step, and whether the re-plan kept the
# run's stage cuts (the profile gives each segment its own measured time).
#
#   bench/pipeline/predict.sh [BUILD_DIR] [OUT_DIR]      (STEPS=40 by default)
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD=${1:-build}
OUT=${2:-/tmp/pd2bw-bench-predict}
STEPS=${STEPS:-40}
mkdir -p "$OUT"
export PD2BW_CACHE=${PD2BW_CACHE:-$BUILD/pd2bw-cache}
python3 - "$OUT/train.bin" <<'PY'
import struct, sys
text = open("docs/language.md", "rb").read() * 4   # byte-level tokens (vocab 256)
open(sys.argv[1], "wb").write(struct.pack("<%dH" % len(text), *text))
PY
echo "uptime: $(uptime)"
for sched in gpipe 2bw; do
  PIN=(--cluster models/clusters/cpu2.cluster --stages 2 --replicas 1 --schedule $sched --recompute off)
  "$BUILD"/tools/pd2bwc models/tinygpt.model "${PIN[@]}" -q -o "$OUT/$sched"
  "$BUILD"/tools/pd2bwrun "$OUT/$sched" --data "$OUT/train.bin" --steps "$STEPS" -q \
    --profile-out "$OUT/$sched.profile.json" >"$OUT/$sched.run.txt"
  "$BUILD"/tools/pd2bwc models/tinygpt.model "${PIN[@]}" -q --profile "$OUT/$sched.profile.json" \
    -o "$OUT/$sched.profiled"
  python3 - "$OUT/$sched.profiled/plan.json" "$OUT/$sched.run.txt" "$sched" "$OUT/$sched/plan.json" <<'PY'
import json, re, sys
plan = json.load(open(sys.argv[1]))
pred = plan["predicted"]["step_time_s"] * 1e3
cfg = plan["config"]
run = open(sys.argv[2]).read()
meas = float(re.search(r"([0-9.]+) ms/step", run).group(1))
cut = lambda p: [s["last_segment"] for s in p["stages"][:-1]]
ran = cut(json.load(open(sys.argv[4])))
print("%-5s b=%d m=%d  predicted (profiled) %7.2f ms  measured median %7.2f ms  ratio %.3f  cut %s"
      % (sys.argv[3], cfg["microbatch_size"], cfg["microbatches"], pred, meas, pred / meas,
         "kept %s" % ran if cut(plan) == ran else "moved %s -> %s" % (ran, cut(plan))))
for line in run.splitlines():
    if line.startswith("  stage "): print("       " + line.strip())
PY
done
echo "uptime: $(uptime)"
