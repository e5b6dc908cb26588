#!/usr/bin/env bash
# bench/convergence/run.sh — what the update rule costs in accuracy: the same model
# on the same tokens (the main job's fortunes, byte-level) trained with 1f1b
# (vanilla), pipedream, 2bw and 2bw with delay compensation (train.delay_comp,
# docs/update-rules.md), over a grid of peak learning rates, global batch sizes
# and model sizes. Every run: the model's cosine schedule stretched to STEPS, 2
# pipeline stages on models/clusters/cpu2.cluster (2 threads), the validation loss
# every EVAL_EVERY steps on EVAL_BATCHES batches (STAGES=1: one stage, for the
# one-stage baseline; put it in its own OUT). Output under $OUT:
#   SETTING/RULE-sSEED.jsonl  pd2bwrun --log-json of each run (a finished log is kept:
#                          rerunning the script only runs what is missing)
#   SETTING.svg            loss against step, every rule, the first seed (pd2bw-curves)
#   table.md               validation loss at the last step per setting and rule: the
#                          mean over SEEDS, then each seed's
#
#   bench/convergence/run.sh                           # the whole grid (hours here)
#   MODELS=tiny LRS=3e-3 BATCHES=16 bench/convergence/run.sh   # one setting
#   TRAIN=0 RULES="1f1b 2bw 2bw-dc1000" bench/convergence/run.sh  # plots and table of the logs there
#
# MODELS: tiny (models/tinygpt.model, 0.2M weights), big (the same text with
# -D layers=8 -D dim=160: 2.5M weights, about 11x) and llama (models/llama.model's
# defaults: 4 layers of width 128, 4 heads over 2 key/value heads, SwiGLU 384, 0.9M). RULES: 1f1b, pipedream, 2bw
# (with pd2bwc's defaults for a 2bw plan, docs/update-rules.md), and 2bw followed by
# any of -f<K> (-D train.flush_steps=K), -p<k> (-D train.predict=k) and -dc<L>
# (-D train.delay_comp=L): 2bw-f0-p0 is plain 2bw. SEEDS: train.seed values (1337 is
# the model's own).
set -euo pipefail
cd "$(dirname "$0")/../.."

BUILD=${BUILD:-build}
OUT=${OUT:-out/convergence}
STEPS=${STEPS:-2000}
EVAL_EVERY=${EVAL_EVERY:-250}
EVAL_BATCHES=${EVAL_BATCHES:-16}
LRS=${LRS:-1e-3 3e-3}
BATCHES=${BATCHES:-16 32}
MODELS=${MODELS:-tiny big}
RULES=${RULES:-1f1b 2bw}
STAGES=${STAGES:-2}
SEEDS=${SEEDS:-1337 2}
FORTUNES=${FORTUNES:-/usr/share/games/fortunes}
TRAIN=${TRAIN:-1} # 0: train nothing, draw what OUT holds
export PD2BW_CACHE=${PD2BW_CACHE:-$OUT/cache}

mkdir -p "$OUT"
if [ ! -f "$OUT/fortunes_val.bin" ]; then # the main job's tokens (scripts/main-job.sh)
  mapfile -t inputs < <(find "$FORTUNES" -maxdepth 1 -type f ! -name '*.*' | LC_ALL=C sort)
  [ ${#inputs[@]} -gt 0 ] || { echo "run.sh: no fortune files under $FORTUNES (scripts/deps.sh)" >&2; exit 1; }
  "$BUILD"/tools/pd2bw-data --fortune --val-fraction 0.05 --input "${inputs[@]}" --out-prefix "$OUT/fortunes"
fi

model_args() { # the model file and its -D params
  case $1 in
  tiny) echo "models/tinygpt.model" ;;
  big) echo "models/tinygpt.model -D layers=8 -D dim=160" ;;
  llama) echo "models/llama.model" ;;
  *) echo "run.sh: MODELS: '$1' is not tiny, big or llama" >&2; exit 1 ;;
  esac
}

rule_args() { # the schedule and the 2bw settings of a rule name
  case $1 in
  1f1b | pipedream | 2bw) echo "--schedule $1"; return ;;
  2bw-*) ;;
  *) echo "run.sh: RULES: '$1' is not 1f1b, pipedream or 2bw[-f<K>][-p<k>][-dc<lambda>]" >&2; exit 1 ;;
  esac
  local args="--schedule 2bw" part
  IFS=- read -r -a parts <<<"${1#2bw-}"
  for part in "${parts[@]}"; do
    case $part in
    f[0-9]*) args+=" -D train.flush_steps=${part#f}" ;;
    p[0-9]*) args+=" -D train.predict=${part#p}" ;;
    dc[0-9]*) args+=" -D train.delay_comp=${part#dc}" ;;
    *) echo "run.sh: RULES: '$1': '$part' is not f<K>, p<k> or dc<lambda>" >&2; exit 1 ;;
    esac
  done
  echo "$args"
}

echo "| model | batch | peak lr | $(echo $RULES | sed 's/ / | /g') |" >"$OUT/table.md.tmp.$$"
echo "|---|---|---|$(for r in $RULES; do printf -- '---|'; done)" >>"$OUT/table.md.tmp.$$"
for model in $MODELS; do
  for batch in $BATCHES; do
    for lr in $LRS; do
      set_name="$model-b$batch-lr$lr"
      mkdir -p "$OUT/$set_name"
      curves=()
      for rule in $RULES; do
        for seed in $SEEDS; do
          log="$OUT/$set_name/$rule-s$seed.jsonl"
          # several copies of the script may share OUT (one per core): a run is taken by
          # creating RUN.lock, which a copy killed meanwhile leaves behind (remove it)
          if [ "$TRAIN" = 1 ] && ! grep -q "\"step\": $STEPS,.*val_loss" "$log" 2>/dev/null && mkdir "$log.lock" 2>/dev/null; then
            echo "== $set_name $rule seed $seed"
            rm -f "$log" # (pd2bwc replaces the plan directory it wrote before)
            # shellcheck disable=SC2046 # the argument lists are words
            "$BUILD"/tools/pd2bwc $(model_args "$model") --cluster models/clusters/cpu2.cluster \
              --stages "$STAGES" $(rule_args "$rule") -D train.lr="$lr" -D train.batch="$batch" -D train.steps="$STEPS" \
              -D train.seed="$seed" -o "$OUT/$set_name/$rule-s$seed.plan" >/dev/null
            "$BUILD"/tools/pd2bwrun "$OUT/$set_name/$rule-s$seed.plan" --data "$OUT/fortunes_train.bin" --steps "$STEPS" \
              --threads 2 --val-data "$OUT/fortunes_val.bin" --eval-every "$EVAL_EVERY" \
              --eval-batches "$EVAL_BATCHES" --log-json "$log.tmp" >/dev/null
            mv "$log.tmp" "$log"
            rmdir "$log.lock"
          fi
        done
      done
      first_seed=${SEEDS%% *}
      for rule in $RULES; do # the plot: every rule's first seed
        log="$OUT/$set_name/$rule-s$first_seed.jsonl"
        [ -f "$log" ] && curves+=("$rule=$log") # (another copy may still be running it)
      done
      : >"$OUT/$set_name.tsv"
      [ ${#curves[@]} -eq 0 ] || "$BUILD"/bench/convergence/pd2bw-curves --svg "$OUT/$set_name.svg" \
        --title "$set_name: $STEPS steps, 2 stages, seed $first_seed (thin: training loss, thick: validation)" \
        "${curves[@]}" >/dev/null
      for rule in $RULES; do # every seed's last validation loss, by pd2bw-curves' summary
        for seed in $SEEDS; do
          log="$OUT/$set_name/$rule-s$seed.jsonl"
          [ -f "$log" ] && "$BUILD"/bench/convergence/pd2bw-curves --svg "$OUT/$set_name.one.svg" \
            --title - "$rule/$seed=$log" >>"$OUT/$set_name.tsv"
        done
      done
      rm -f "$OUT/$set_name.one.svg"
      printf '| %s | %s | %s |' "$model" "$batch" "$lr" >>"$OUT/table.md.tmp.$$"
      for rule in $RULES; do # mean (seed, seed, ...), "-" where a seed's run is missing
        printf ' %s |' "$(awk -F'\t' -v r="$rule" -v want="$(echo $SEEDS | wc -w)" '
          { split($1, a, "/") } a[1] == r && $2 != "nan" { sum += $2; n++; each = each (n > 1 ? ", " : "") $2 }
          END { if (n < want) print n ? "- (" each ")" : "-"; else printf "%.4f (%s)\n", sum / n, each }' "$OUT/$set_name.tsv")"
      done >>"$OUT/table.md.tmp.$$"
      echo >>"$OUT/table.md.tmp.$$"
    done
  done
done
mv "$OUT/table.md.tmp.$$" "$OUT/table.md"
cat "$OUT/table.md"
