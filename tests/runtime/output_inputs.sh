#!/usr/bin/env bash
# No output ever names an input (issue 24, item 1). Every tool compares each output
# path, after symlinks and by device and inode where the file exists, with every input
# it reads, and refuses with one message naming both, exit 1, before anything is
# written (runtime/io/output_path.c output_paths_check):
#   - pd2bwrun (one stage and a 2-stage pipeline: one driver, pipeline_main_on, which
#     the CUDA modes share): --save/--log-json/--trace/--profile-out against --data,
#     --val-data, --resume, --init, and the plan directory with everything in it (an
#     output inside it, or a hard link to one of its files, is refused);
#   - pd2bw-data: PREFIX_train.bin / PREFIX_val.bin against --input, --vocab, --merges;
#   - pd2bw-export: --llmc and --hf's files against the checkpoint it reads;
#   - pd2bwc: -o DIR (replaced whole) against the model, --cluster and --profile files.
# Each refused input is checked to be byte for byte what it was.
#   output_inputs.sh PD2BWC PD2BWRUN PD2BW_DATA PD2BW_EXPORT
set -u
PD2BWC=$1 RUN=$2 DATA=$3 EXPORT=$4
SRC=$(cd "$(dirname "${BASH_SOURCE[0]}")/../pipeline" && pwd)
. "$SRC/../scratch.sh" outin
check() { # NAME COMMAND...
  local name=$1
  shift
  if "$@"; then ok; else bad "$name"; fi
}

python3 - "$T/d.bin" "$T/v.bin" <<'PY' || exit 1
import struct, sys
for path, text in zip(sys.argv[1:], [b"An output flag must never name an input of the run. " * 40,
                                     b"Validation tokens, held out from the training run. " * 40]):
    open(path, "wb").write(struct.pack("<%dH" % len(text), *text))
PY
for s in 1 2; do
  "$PD2BWC" "$SRC/tinygpt.model" -q -D layers=2 -D dim=16 -D seq=8 -D heads=2 --cluster "$SRC/cpu8.cluster" \
    --stages $s --replicas 1 --schedule 2bw -o "$T/plan$s" || { echo "pd2bwc failed"; exit 1; }
done
train() { # PLAN ARGS...
  local plan=$1
  shift
  timeout -k 5 60 "$RUN" "$T/$plan" --data "$T/d.bin" --steps 1 --threads 1 -q "$@"
}
train plan1 --save "$T/c.st" >/dev/null || { echo "the checkpoint run failed"; exit 1; }
# a GPT-2-shaped checkpoint for pd2bw-export
"$PD2BWC" "$SRC/../../models/gpt.model" -q -D vocab=256 -D seq=8 -D layers=1 -D dim=16 -D heads=2 -D train.batch=2 \
  -D train.microbatch=1 --stages 1 \
  -o "$T/gpt" && train gpt --steps 0 --save "$T/g.st" >/dev/null || { echo "the GPT-2 checkpoint failed"; exit 1; }
printf 'Paragraph %d of a text to tokenise, with a few words in it.\n\n' $(seq 20) >"$T/text"

# Every input, its sums, and a copy to put back after a case that destroyed one (so
# that each case fails for itself on a build without the check)
inputs=(d.bin v.bin c.st g.st text plan1 plan2)
sums() { (cd "$T" && find "${inputs[@]}" -type f | LC_ALL=C sort | xargs cksum); }
before=$(sums)
mkdir "$T/pristine" && (cd "$T" && cp -a "${inputs[@]}" pristine/)
restore() { (cd "$T" && rm -rf "${inputs[@]}" && cp -a "${inputs[@]/#/pristine/}" .); }

# refused NAME PATTERN COMMAND...: exit 1, the one message (PATTERN), no step run, and
# every input as it was
refused() {
  local name=$1 pat=$2 out rc
  shift 2
  out=$("$@" 2>&1)
  rc=$?
  if [ $rc -eq 1 ] && grep -q -- "$pat" <<<"$out" && [ "$(grep -c 'error' <<<"$out")" -eq 1 ] &&
    ! grep -q '^step' <<<"$out" && [ "$(sums)" = "$before" ]; then
    ok
  else
    [ "$(sums)" = "$before" ] || out="$out [an input was changed]"
    bad "$name: exit $rc, output: $out"
    restore
  fi
}
never="(an output never replaces an input)"

# ---- pd2bwrun: the token files and checkpoints ----
for plan in plan1 plan2; do
  refused "$plan --log-json = --data" "--log-json $T/d.bin is the --data file $T/d.bin $never" \
    train $plan --log-json "$T/d.bin"
  refused "$plan --save = --data" "--save $T/d.bin is the --data file $T/d.bin" train $plan --save "$T/d.bin"
  refused "$plan --log-json = --val-data" "--log-json $T/v.bin is the --val-data file $T/v.bin" \
    train $plan --val-data "$T/v.bin" --log-json "$T/v.bin"
  refused "$plan --log-json = --resume" "--log-json $T/c.st is the --resume file $T/c.st" \
    train $plan --resume "$T/c.st" --steps 2 --log-json "$T/c.st"
  refused "$plan --profile-out = --data" "--profile-out $T/d.bin is the --data file" \
    train $plan --profile-out "$T/d.bin"
done
refused "--trace = --data" "--trace $T/d.bin is the --data file" train plan2 --trace "$T/d.bin"
# other spellings of one file: a symlink, a hard link, a path through ..
ln -s d.bin "$T/d-link"
refused "--log-json through a symlink to --data" "--log-json $T/d-link is the --data file $T/d.bin" \
  train plan1 --log-json "$T/d-link"
ln "$T/d.bin" "$T/d-hard"
refused "--save to a hard link of --data" "--save $T/d-hard is the --data file $T/d.bin" \
  train plan2 --save "$T/d-hard"
refused "--log-json through .. to --resume" "--log-json $T/plan1/../c.st is the --resume file $T/c.st" \
  train plan1 --resume "$T/c.st" --steps 2 --log-json "$T/plan1/../c.st"
# the input given through a symlink, the output by its own name
refused "--data through a symlink, --log-json its target" "--log-json $T/d.bin is the --data file $T/d-link" \
  timeout -k 5 60 "$RUN" "$T/plan1" --data "$T/d-link" --steps 1 --threads 1 -q --log-json "$T/d.bin"

# ---- pd2bwrun: the plan directory and everything in it ----
for plan in plan1 plan2; do
  refused "$plan --log-json plan.json" "--log-json $T/$plan/plan.json is inside the plan directory $T/$plan $never" \
    train $plan --log-json "$T/$plan/plan.json"
  refused "$plan --trace stage0.c" "--trace $T/$plan/stage0.c is inside the plan directory $T/$plan" \
    train $plan --trace "$T/$plan/stage0.c"
  refused "$plan --trace report.html" "--trace $T/$plan/report.html is inside the plan directory" \
    train $plan --trace "$T/$plan/report.html"
  refused "$plan --save a new file in the plan" "--save $T/$plan/new.st is inside the plan directory" \
    train $plan --save "$T/$plan/new.st"
  refused "$plan --save in the plan's reference/" "--save $T/$plan/reference/x.st is inside the plan directory" \
    train $plan --save "$T/$plan/reference/x.st"
done
ln "$T/plan2/plan.json" "$T/plan-hard.json"
refused "--log-json a hard link to plan.json" \
  "--log-json $T/plan-hard.json is $T/plan2/plan.json in the plan directory $T/plan2 $never" \
  train plan2 --log-json "$T/plan-hard.json"
ln -s plan2 "$T/plan-link"
refused "--trace inside the plan through a symlinked plan" "--trace $T/plan2/x.json is inside the plan directory" \
  timeout -k 5 60 "$RUN" "$T/plan-link" --data "$T/d.bin" --steps 1 --threads 1 -q --trace "$T/plan2/x.json"
check "no file appeared in the plan directories" test ! -e "$T/plan1/new.st" -a ! -e "$T/plan2/x.json"
check "the inputs are as they were" test "$(sums)" = "$before"
# outputs beside the inputs are fine
check "outputs beside the inputs train" train plan2 --val-data "$T/v.bin" --log-json "$T/log.json" \
  --save "$T/c2.st" --resume "$T/c.st" --steps 2
check "the inputs are still as they were" test "$(sums)" = "$before"
# --save may replace the checkpoint it resumes from (read whole first, replaced whole at
# the end): one checkpoint kept current
cp "$T/c.st" "$T/keep.st"
check "--resume keep.st --save keep.st trains and replaces it" train plan2 --resume "$T/keep.st" --steps 3 --save "$T/keep.st"
check "keep.st is the 3-step checkpoint now" bash -c "! cmp -s '$T/c.st' '$T/keep.st'"

# ---- pd2bw-data ----
cp "$T/text" "$T/X_train.bin"
inputs+=(X_train.bin) && before=$(sums) && cp "$T/X_train.bin" "$T/pristine/"
refused "pd2bw-data replaces its --input" \
  "--out-prefix $T/X: $T/X_train.bin is the --input file $T/X_train.bin $never" \
  "$DATA" --input "$T/X_train.bin" --out-prefix "$T/X" --val-fraction 0.3
cp "$T/text" "$T/Y_val.bin"
inputs+=(Y_val.bin) && before=$(sums) && cp "$T/Y_val.bin" "$T/pristine/"
refused "pd2bw-data's val file is its --input" "--out-prefix $T/Y: $T/Y_val.bin is the --input file $T/Y_val.bin" \
  "$DATA" --input "$T/Y_val.bin" --out-prefix "$T/Y" --val-fraction 0.3
refused "pd2bw-data's output is its --vocab" "--out-prefix $T/X: $T/X_train.bin is the --vocab file $T/X_train.bin" \
  "$DATA" --input "$T/text" --out-prefix "$T/X" --vocab "$T/X_train.bin" --merges "$T/text"
"$DATA" --input "$T/text" --out-prefix "$T/Z" --val-fraction 0.3 >/dev/null
check "pd2bw-data writes beside its input" test -s "$T/Z_train.bin" -a -s "$T/Z_val.bin"

# ---- pd2bw-export ----
refused "pd2bw-export --llmc replaces its checkpoint" "--llmc $T/g.st is the checkpoint $T/g.st $never" \
  "$EXPORT" "$T/g.st" --heads 2 --llmc "$T/g.st" --force
mkdir "$T/hf" && cp "$T/g.st" "$T/hf/model.safetensors"
inputs+=(hf) && before=$(sums) && cp -a "$T/hf" "$T/pristine/"
refused "pd2bw-export --hf replaces its checkpoint" \
  "--hf $T/hf: $T/hf/model.safetensors is the checkpoint $T/hf/model.safetensors $never" \
  "$EXPORT" "$T/hf/model.safetensors" --heads 2 --hf "$T/hf" --force
"$EXPORT" "$T/g.st" --heads 2 --llmc "$T/g.bin" >/dev/null
check "pd2bw-export writes beside its checkpoint" test -s "$T/g.bin"
# pd2bwrun records the model's consts in the checkpoint: no --heads needed, the same file
"$EXPORT" "$T/g.st" --llmc "$T/g2.bin" >/dev/null
check "pd2bw-export takes heads from the checkpoint's consts" cmp -s "$T/g.bin" "$T/g2.bin"

# ---- pd2bwc -o ----
cp "$SRC/tinygpt.model" "$T/plan1/my.model"
cp "$SRC/cpu8.cluster" "$T/plan1/my.cluster"
before=$(sums) && cp "$T/plan1/my.model" "$T/plan1/my.cluster" "$T/pristine/plan1/"
refused "pd2bwc -o replaces the directory holding its model" "-o $T/plan1 holds the model file $T/plan1/my.model $never" \
  "$PD2BWC" "$T/plan1/my.model" -q -D layers=2 -D dim=16 -D seq=8 -D heads=2 --stages 1 -o "$T/plan1"
refused "pd2bwc -o replaces the directory holding its cluster" \
  "-o $T/plan1 holds the --cluster file $T/plan1/my.cluster $never" \
  "$PD2BWC" "$SRC/tinygpt.model" -q -D layers=2 -D dim=16 -D seq=8 -D heads=2 --cluster "$T/plan1/my.cluster" \
  --stages 1 -o "$T/plan1"
check "pd2bwc's model is still there" cmp -s "$T/plan1/my.model" "$SRC/tinygpt.model"
check "pd2bwc's cluster is still there" cmp -s "$T/plan1/my.cluster" "$SRC/cpu8.cluster"

echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
