#!/usr/bin/env bash
# scripts/main-job.sh — the main job: build pd2bw, turn the fortunes corpus into
# byte-level train/validation token files, compile models/tinygpt.model (vocab 256,
# seq 64, 4 layers, width 64, 4 heads) for this host as pd2bwc --calibrate measured it
# (one device per core; calibrated on the first run, docs/calibration.md; CLUSTER=FILE
# plans for a cluster file instead) as a 2-stage PipeDream-2BW pipeline, and
# train it (one rank per stage, threads of one process), printing one line per step
# and, at the end, the measured step time, bubble fraction and memory per stage, with
# the validation loss every EVAL_EVERY steps and at the end (computed through the
# pipeline: runtime/pipeline/pipeline_eval.h).
#
#   scripts/main-job.sh                 # 300 steps, output in out/main-job
#   STAGES= SCHEDULE= OUT=/tmp/mj scripts/main-job.sh    # the planner's own choice
#   MODEL=models/llama.model scripts/main-job.sh         # the Llama-family model instead
#
# The stages are pinned because left to itself the planner gives this small model
# 1 stage x 2 replicas with the vanilla 1f1b rule: there 2bw buys no speed, and its
# one-step weight delay costs accuracy (docs/update-rules.md), so it would not pick it.
#
# Everything it writes goes under $OUT: the token files, the plan, the log
# (log.jsonl, one JSON object per step), the trace of what every rank did
# (trace.json, chrome://tracing) and the trained weights (safetensors).
set -euo pipefail
cd "$(dirname "$0")/.."

BUILD=${BUILD:-build}
OUT=${OUT:-out/main-job}
STEPS=${STEPS:-300}
THREADS=${THREADS:-2}
STAGES=${STAGES-2}            # empty: the planner chooses
SCHEDULE=${SCHEDULE-2bw}        # empty: the planner chooses
CLUSTER=${CLUSTER-}               # empty: this host, calibrated (docs/calibration.md)
EVAL_EVERY=${EVAL_EVERY:-50}
MODEL=${MODEL:-models/tinygpt.model} # any model over the byte-level vocabulary (vocab 256)
name=$(basename "$MODEL" .model)
FORTUNES=${FORTUNES:-/usr/share/games/fortunes}

echo "== dependencies"
bash scripts/deps.sh
echo "== build ($BUILD)"
BUILD_DIR=$BUILD bash scripts/build.sh >/dev/null
mkdir -p "$OUT"

echo "== data: fortunes -> byte-level tokens"
# The fortune files proper (no .dat index, no .u8 copies), in a fixed order.
mapfile -t inputs < <(find "$FORTUNES" -maxdepth 1 -type f ! -name '*.*' | LC_ALL=C sort)
if [ ${#inputs[@]} -eq 0 ]; then
  echo "main-job: no fortune files under $FORTUNES (install the 'fortunes' package: scripts/deps.sh)" >&2
  exit 1
fi
"$BUILD"/tools/pd2bw-data --fortune --val-fraction 0.05 --input "${inputs[@]}" --out-prefix "$OUT/fortunes"
"$BUILD"/tools/pd2bw-data --info "$OUT/fortunes_train.bin" "$OUT/fortunes_val.bin"

echo "== compile $MODEL (${SCHEDULE:-the schedule the planner picks} on ${CLUSTER:-this host, calibrated}${STAGES:+, $STAGES stages})"
# (pd2bwc replaces a plan directory it wrote and refuses any other: nothing to remove)
"$BUILD"/tools/pd2bwc "$MODEL" ${CLUSTER:+--cluster "$CLUSTER"} ${SCHEDULE:+--schedule "$SCHEDULE"} \
  ${STAGES:+--stages "$STAGES"} -o "$OUT/plan"

echo "== train $STEPS steps on $THREADS threads (validation loss every $EVAL_EVERY steps)"
"$BUILD"/tools/pd2bwrun "$OUT/plan" --data "$OUT/fortunes_train.bin" --steps "$STEPS" --threads "$THREADS" \
  --val-data "$OUT/fortunes_val.bin" --eval-every "$EVAL_EVERY" --eval-batches 8 \
  --log-json "$OUT/log.jsonl" --trace "$OUT/trace.json" --save "$OUT/$name.safetensors"
