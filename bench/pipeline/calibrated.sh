#!/usr/bin/env bash
# bench/pipeline/calibrated.sh — the planner's prediction on this machine against the
# run, without --profile (issue 26): pd2bwc --calibrate once (into OUT's own cache),
# then for each case the plan made for this host (no --cluster) and its
# predicted.step_time_s beside pd2bwrun's measured median step (its summary line:
# the median of stage 0's update-to-update times after step 1).
#   tinygpt, d = 2, gpipe / 1f1b / 2bw (one rank per core)
#   the GPT-2 124M shape (12 x 768, 12 heads, vocab 50257) at seq 256, batch 4, one stage
#
#   bench/pipeline/calibrated.sh [BUILD_DIR] [OUT_DIR]     (STEPS=40, BIG_STEPS=5; a 2bw
#   plan runs at least 2 x train.flush_steps + 10 steps, so its median is past the flushed start)
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD=${1:-build}
OUT=${2:-/tmp/pd2bw-bench-calibrated}
STEPS=${STEPS:-40}
BIG_STEPS=${BIG_STEPS:-5}
mkdir -p "$OUT" && chmod 700 "$OUT"
export PD2BW_CACHE=$OUT/cache
unset PD2BW_CLUSTER
mkdir -p "$PD2BW_CACHE" && chmod 700 "$PD2BW_CACHE"
python3 - "$OUT/train.bin" <<'PY'
import struct, sys
text = open("docs/language.md", "rb").read() * 8   # byte-level tokens (vocab 256 and up)
open(sys.argv[1], "wb").write(struct.pack("<%dH" % len(text), *text))
PY
cpuinfo() { grep -m1 "^$1[[:space:]]*:" /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'; }
echo "cpu: $(cpuinfo 'model name') (family $(cpuinfo 'cpu family') model $(cpuinfo model)," \
  "$(grep -qw avx512f /proc/cpuinfo && echo with || echo without) AVX-512), $(nproc) cores; uptime: $(uptime)"
"$BUILD"/tools/pd2bwc --calibrate
grep -E "^  [a-z_]+ = " "$PD2BW_CACHE"/host-*.cluster | tr -d '\n' && echo
row() { # NAME PLAN STEPS THREADS-ARGS...
  local name=$1 plan=$2 steps=$3
  shift 3
  local pred meas
  pred=$(python3 -c "import json,sys; print('%.2f' % (json.load(open(sys.argv[1]))['predicted']['step_time_s'] * 1e3))" "$plan/plan.json")
  # predicted.step_time_s is 2bw's steady state; its first train.flush_steps steps are
  # flushed (1f1b's step), so run enough steps that the median is a steady one
  local flush
  flush=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['update_rule'].get('flush_steps', 0))" "$plan/plan.json")
  if ((steps < 2 * flush + 10)); then steps=$((2 * flush + 10)); fi
  meas=$("$BUILD"/tools/pd2bwrun "$plan" --data "$OUT/train.bin" --steps "$steps" -q "$@" | grep -o '[0-9.]* ms/step' | cut -d' ' -f1)
  python3 -c "import sys; p, m = float(sys.argv[2]), float(sys.argv[3]); print('| %s | %.2f ms | %.2f ms | %.3f |' % (sys.argv[1], p, m, p / m))" \
    "$name" "$pred" "$meas"
}
echo "| case | predicted | measured median | predicted / measured |"
echo "|---|---|---|---|"
for s in gpipe 1f1b 2bw; do
  "$BUILD"/tools/pd2bwc models/tinygpt.model --stages 2 --replicas 1 --schedule "$s" --recompute off -q -o "$OUT/tiny-$s"
  row "tinygpt d=2 $s" "$OUT/tiny-$s" "$STEPS"
done
"$BUILD"/tools/pd2bwc models/gpt.model -D layers=12 -D dim=768 -D heads=12 -D seq=256 -D train.batch=4 \
  -D train.microbatch=4 --stages 1 --replicas 1 --recompute off -q -o "$OUT/gpt124m"
row "GPT-2 124M shape, seq 256, b=4, 1 stage" "$OUT/gpt124m" "$BIG_STEPS"
echo "uptime: $(uptime)"
