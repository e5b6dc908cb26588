#!/bin/sh
# Token ids above 65535 from text to training (issue 25): a tokenizer.json with Llama 3's
# layout (tests/data/hf_tokenizer_big: specials 128000 and 128001, vocabulary 128002)
# -> pd2bw-data (llm.c's uint32 layout) -> models/llama.model planned with
# -D vocab=128002 trains, on one stage and on a 2-stage 2bw pipeline, with validation;
# a plan whose vocabulary is too small for the ids, and a truncated file, are refused at
# open with the file and where (exit 1).
#   usage: llama3_tokens.sh PD2BW-DATA PD2BWC PD2BWRUN   (from the source root)
set -u
DATA=$1 PD2BWC=$2 RUN=$3
DIR=$(mktemp -d "${TMPDIR:-/tmp}/pd2bw-llama3tok-XXXXXX")
FAILED=0
fail() { echo "FAIL: $*" >&2; FAILED=$((FAILED + 1)); }
# plan NAME VOCAB ARGS...: a tiny Llama (seq 16, 4 x 2 tokens a step) into $DIR/NAME
plan() {
  name=$1 vocab=$2
  shift 2
  "$PD2BWC" models/llama.model -D vocab="$vocab" -D layers=2 -D dim=16 -D heads=2 -D kv_heads=1 -D ffn=32 \
    -D seq=16 -D train.batch=4 -D train.microbatch=2 --cluster models/clusters/cpu2.cluster --replicas 1 -q \
    -o "$DIR/$name" "$@" > "$DIR/$name.out" 2>&1 || fail "pd2bwc $name: $(cat "$DIR/$name.out")"
}

# 20 copies of the sample: 160 paragraphs, 16 of them validation; --eot: 128001 first
i=0
while [ $i -lt 20 ]; do cat tests/data/hf_tokenizer/sample.txt; echo; i=$((i + 1)); done > "$DIR/text.txt"
"$DATA" --input "$DIR/text.txt" --tokenizer tests/data/hf_tokenizer_big/tokenizer.json --eot \
  --out-prefix "$DIR/d" > "$DIR/data.out" 2>&1 || fail "pd2bw-data: $(cat "$DIR/data.out")"
"$DATA" --info "$DIR/d_train.bin" "$DIR/d_val.bin" > "$DIR/info.out" 2>&1 || fail "--info: $(cat "$DIR/info.out")"
[ "$(grep -c 'llm.c format (uint32 tokens), .* largest id 128001$' "$DIR/info.out")" = 2 ] ||
  fail "train and val should be uint32 files holding id 128001: $(cat "$DIR/info.out")"
# ids on both sides of 65536 really are there (not only the specials)
above=$(od -An -v -tu4 -j 1024 "$DIR/d_train.bin" | tr -s ' ' '\n' | awk '$1 > 65535 && $1 < 128000' | wc -l)
[ "$above" -gt 100 ] || fail "only $above BPE ids above 65535 in the train file"

# one stage, 4 steps, validation every 2: the loss starts at ln(128002) = 11.76
plan s1 128002 --stages 1
"$RUN" "$DIR/s1" --data "$DIR/d_train.bin" --val-data "$DIR/d_val.bin" --steps 4 --eval-every 2 --threads 1 -q \
  --log-json "$DIR/s1.jsonl" > "$DIR/s1.run" 2>&1 || fail "one stage: $(cat "$DIR/s1.run")"
awk -F'"loss": ' 'NF > 1 { split($2, a, ","); n++; if (n == 1 && (a[1] < 11.66 || a[1] > 11.86)) bad = 1 }
  /"val_loss"/ { v++ } END { exit !(n == 4 && v == 2 && !bad) }' "$DIR/s1.jsonl" ||
  fail "one stage: want 4 steps from loss ~11.76, 2 validations: $(cat "$DIR/s1.jsonl")"
# a 2-stage 2bw pipeline (its ranks open the files themselves)
plan p2 128002 --stages 2 --schedule 2bw
"$RUN" "$DIR/p2" --data "$DIR/d_train.bin" --val-data "$DIR/d_val.bin" --steps 2 --eval-every 2 -q \
  > "$DIR/p2.run" 2>&1 || fail "2 stages: $(cat "$DIR/p2.run")"
grep -q "validation loss 11\." "$DIR/p2.run" || fail "2 stages: no validation loss: $(cat "$DIR/p2.run")"

# a vocabulary too small for the ids: refused at open, naming the file, offset, index,
# id and vocabulary (a reader that kept 16 bits would see 128001 as 62465 < 66000)
plan v66 66000 --stages 1
"$RUN" "$DIR/v66" --data "$DIR/d_train.bin" --steps 1 -q > "$DIR/v66.run" 2>&1 && fail "vocab 66000 trained on ids up to 128001"
grep -q "d_train.bin: offset 1024: token 128001 (token #0) is outside the model's vocabulary of 66000 ids" "$DIR/v66.run" ||
  fail "vocab 66000: $(cat "$DIR/v66.run")"
# a truncated uint32 file: its size against the header's count
size=$(wc -c < "$DIR/d_train.bin")
head -c $((size - 2)) "$DIR/d_train.bin" > "$DIR/cut.bin"
"$RUN" "$DIR/s1" --data "$DIR/cut.bin" --steps 1 -q > "$DIR/cut.run" 2>&1 && fail "a truncated file was accepted"
grep -q "cut.bin: truncated: header (offset 8) says .* tokens (.* bytes of uint32) but only" "$DIR/cut.run" ||
  fail "truncated: $(cat "$DIR/cut.run")"

if [ $FAILED -eq 0 ]; then
  rm -rf "$DIR"
  echo "1 passed, 0 failed"
else
  echo "scratch files kept in $DIR" >&2
  echo "0 passed, 1 failed"
  exit 1
fi
