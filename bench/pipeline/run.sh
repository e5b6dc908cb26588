#!/usr/bin/env bash
# bench/pipeline/run.sh — measured against planned, for the bundled tiny GPT with
# d = 4 stages on local threads (2bw): step time and bubble fraction beside the
# simulator's prediction (analytic, then re-planned with the measured --profile),
# and the memory each rank allocated beside the plan's figure.
#
#   bench/pipeline/run.sh [BUILD_DIR] [OUT_DIR]      (STEPS=30, STAGES=4 by default)
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD=${1:-build}
OUT=${2:-/tmp/pd2bw-bench-pipeline}
STEPS=${STEPS:-30}
mkdir -p "$OUT"
export PD2BW_CACHE=${PD2BW_CACHE:-$BUILD/pd2bw-cache}
python3 - "$OUT/train.bin" <<'PY'
import struct, sys
text = open("docs/language.md", "rb").read() * 4   # byte-level tokens (vocab 256)
open(sys.argv[1], "wb").write(struct.pack("<%dH" % len(text), *text))
PY
PIN=(--cluster tests/pipeline/cpu8.cluster --stages ${STAGES:-4} --replicas 1 --schedule 2bw --recompute off)
predicted() { python3 -c "import json,sys; p=json.load(open(sys.argv[1]))['predicted']; print('%.2f ms, bubble %.1f%%' % (p['step_time_s']*1e3, 100*p['bubble_fraction']))" "$1/plan.json"; }
set -x
"$BUILD"/tools/pd2bwc models/tinygpt.model "${PIN[@]}" -q -o "$OUT/plan"
"$BUILD"/tools/pd2bwrun "$OUT/plan" --data "$OUT/train.bin" --steps "$STEPS" -q \
  --trace "$OUT/trace.json" --profile-out "$OUT/profile.json" | tee "$OUT/run.txt"
"$BUILD"/tools/pd2bwc models/tinygpt.model "${PIN[@]}" -q --profile "$OUT/profile.json" -o "$OUT/plan_profiled"
set +x
echo "uptime: $(uptime)"
echo "predicted (analytic cost model): $(predicted "$OUT/plan")"
echo "predicted (with --profile):      $(predicted "$OUT/plan_profiled")"
echo "measured:                        $(grep -o '[0-9.]* ms/step' "$OUT/run.txt")"
grep 'stage [0-9]:' "$OUT/run.txt"
