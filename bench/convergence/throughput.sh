#!/usr/bin/env bash
# bench/convergence/throughput.sh — what 2bw's flushed start and weight prediction cost
# in speed (issue 23, docs/update-rules.md), predicted by the planner and measured, for
# the plans of the convergence grid (run.sh): 2 stages of models/clusters/cpu2.cluster,
# tinygpt and the larger model, batch 16 and 32. Per setting, the step time of
#   1f1b         vanilla (PipeDream-Flush)
#   2bw-plain    -D train.flush_steps=0 -D train.predict=0
#   2bw-pred     -D train.flush_steps=0 (prediction's extra pass, no flushed start)
#   2bw-flushed  -D train.flush_steps=STEPS+1 -D train.predict=1 (every step a flushed
#                one: the pace of the flushed start)
# measured as the median of the log's per-step "ms" after WARM steps, ROUNDS rounds
# taking the variants in turn (so a busy machine slows them alike), and the planner's
# prediction (pd2bwc's "predicted" line) beside it. The run-average of the defaults
# (K = steps/10 flushed) follows from the two: (K·flushed + (S-K)·pred)/S.
#   bench/convergence/throughput.sh            (OUT=/tmp/pd2bw-tput BUILD=build STEPS=60)
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD=${BUILD:-build}
OUT=${OUT:-/tmp/pd2bw-tput}
STEPS=${STEPS:-60}
WARM=${WARM:-10}
ROUNDS=${ROUNDS:-3}
MODELS=${MODELS:-tiny big}
BATCHES=${BATCHES:-16 32}
FORTUNES=${FORTUNES:-/usr/share/games/fortunes}
export PD2BW_CACHE=${PD2BW_CACHE:-$OUT/cache}
mkdir -p "$OUT"
if [ ! -f "$OUT/fortunes_train.bin" ]; then
  mapfile -t inputs < <(find "$FORTUNES" -maxdepth 1 -type f ! -name '*.*' | LC_ALL=C sort)
  "$BUILD"/tools/pd2bw-data --fortune --val-fraction 0.05 --input "${inputs[@]}" --out-prefix "$OUT/fortunes" >/dev/null
fi
variants="1f1b 2bw-plain 2bw-pred 2bw-flushed"
var_args() {
  case $1 in
  1f1b) echo "--schedule 1f1b" ;;
  2bw-plain) echo "--schedule 2bw -D train.flush_steps=0 -D train.predict=0" ;;
  2bw-pred) echo "--schedule 2bw -D train.flush_steps=0 -D train.predict=1" ;;
  2bw-flushed) echo "--schedule 2bw -D train.flush_steps=$((STEPS + 1)) -D train.predict=1" ;;
  esac
}
model_args() { [ "$1" = big ] && echo "-D layers=8 -D dim=160" || true; }
median() { sort -g | awk '{ a[NR] = $1 } END { print NR % 2 ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2 }'; }
echo "| model | batch | variant | predicted ms | measured ms (median) | measured / 2bw-plain |"
echo "|---|---|---|---|---|---|"
for model in $MODELS; do
  for batch in $BATCHES; do
    for v in $variants; do
      # shellcheck disable=SC2046 # the argument lists are words
      "$BUILD"/tools/pd2bwc models/tinygpt.model $(model_args $model) --cluster models/clusters/cpu2.cluster --stages 2 \
        $(var_args $v) -D train.batch="$batch" -D train.steps=2000 -o "$OUT/$model-$batch-$v" >"$OUT/$model-$batch-$v.pd2bwc"
      : >"$OUT/$model-$batch-$v.ms"
    done
    for r in $(seq "$ROUNDS"); do
      for v in $variants; do
        "$BUILD"/tools/pd2bwrun "$OUT/$model-$batch-$v" --data "$OUT/fortunes_train.bin" --steps "$STEPS" --threads 2 -q \
          --log-json "$OUT/$model-$batch-$v.r$r.jsonl" >/dev/null 2>&1
        awk -v w="$WARM" -F'"ms": ' 'NR > w { split($2, a, ","); print a[1] }' "$OUT/$model-$batch-$v.r$r.jsonl" \
          >>"$OUT/$model-$batch-$v.ms"
      done
    done
    base=$(median <"$OUT/$model-$batch-2bw-plain.ms")
    for v in $variants; do
      pred=$(awk '/^predicted:/ { printf "%.2f", $2 * 1000 }' "$OUT/$model-$batch-$v.pd2bwc")
      [ $v = 2bw-flushed ] && pred=$(awk '/^flushed start:/ { printf "%.2f", $6 * 1000 }' "$OUT/$model-$batch-$v.pd2bwc")
      meas=$(median <"$OUT/$model-$batch-$v.ms")
      echo "| $model | $batch | $v | $pred | $(printf %.2f "$meas") | $(awk -v a="$meas" -v b="$base" 'BEGIN { printf "%.3f", a / b }') |"
    done
  done
done
