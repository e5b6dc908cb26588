#!/bin/sh
# End-to-end test of tools/pd2bw-data: byte-level and BPE outputs checked token by
# token, the train/validation split, --fortune, and user errors (message, exit
# status 1, no output file touched, no temp file left).
#   usage: pd2bw_data_tool.sh PATH/TO/pd2bw-data tests/data/fixtures
set -u
BIN=$1
FIX=$2
DIR=$(mktemp -d "${TMPDIR:-/tmp}/pd2bw-tool-XXXXXX")
FAILED=0
fail() { echo "FAIL: $*" >&2; FAILED=$((FAILED + 1)); }
# tokens FILE [SKIP]: the uint16 tokens of FILE after SKIP bytes, one line.
tokens() { od -An -v -tu2 -j "${2:-1024}" "$1" | tr -s ' \n' ' ' | sed 's/^ //; s/ $//'; }
# tokens32 FILE: the uint32 tokens of an llm.c Llama 3 file (after its 1024-byte header).
tokens32() { od -An -v -tu4 -j 1024 "$1" | tr -s ' \n' ' ' | sed 's/^ //; s/ $//'; }
bytes_as_tokens() { od -An -v -tu1 "$1" | tr -s ' \n' ' ' | sed 's/^ //; s/ $//'; }

# ---- byte level, paragraphs: 10 documents, the 10th goes to validation ------
: > "$DIR/a.txt"
for i in 0 1 2 3 4 5 6 7 8; do printf 'Paragraph %s,\nline two.\n\n' "$i" >> "$DIR/a.txt"; done
printf 'Last one.\n' > "$DIR/last.txt"
cat "$DIR/last.txt" >> "$DIR/a.txt"
"$BIN" --input "$DIR/a.txt" --out-prefix "$DIR/p" > "$DIR/out.txt" 2>&1 || fail "byte-level run: $(cat "$DIR/out.txt")"
grep -q "1 files, $(wc -c < "$DIR/a.txt") bytes, 10 documents (1 validation)" "$DIR/out.txt" ||
  fail "summary: $(cat "$DIR/out.txt")"
head -c $(( $(wc -c < "$DIR/a.txt") - 10 )) "$DIR/a.txt" > "$DIR/train.txt"
[ "$(tokens "$DIR/p_train.bin")" = "$(bytes_as_tokens "$DIR/train.txt")" ] || fail "train tokens are not the text's bytes"
[ "$(tokens "$DIR/p_val.bin")" = "$(bytes_as_tokens "$DIR/last.txt")" ] || fail "val tokens are not the last paragraph"
# The llm.c header: magic 20240520, version 1, token count.
[ "$(od -An -td4 -N12 "$DIR/p_val.bin" | tr -s ' ' ' ' | sed 's/^ //')" = "20240520 1 10" ] ||
  fail "llm.c header: $(od -An -td4 -N12 "$DIR/p_val.bin")"
"$BIN" --info "$DIR/p_val.bin" | grep -q "llm.c format, 10 tokens, largest id 116" || fail "--info"

# ---- raw format, no validation ------------------------------------------------
"$BIN" --input "$DIR/a.txt" --out-prefix "$DIR/r" --format raw --val-fraction 0 > /dev/null || fail "raw run"
[ "$(tokens "$DIR/r_train.bin" 0)" = "$(bytes_as_tokens "$DIR/a.txt")" ] || fail "raw tokens"
[ ! -e "$DIR/r_val.bin" ] || fail "--val-fraction 0 still wrote a val file"

# ---- GPT-2 BPE on the hand-made vocabulary (ids derived in tests/data/test_bpe.c)
printf "hello world's 42 hello!\n" > "$DIR/h.txt"
"$BIN" --input "$DIR/h.txt" --out-prefix "$DIR/b" --vocab "$FIX/vocab.json" --merges "$FIX/merges.txt" \
  --val-fraction 0 > "$DIR/out.txt" || fail "bpe run"
[ "$(tokens "$DIR/b_train.bin")" = "17 22 23 9 24 26 12 13" ] || fail "bpe tokens: $(tokens "$DIR/b_train.bin")"
grep -q "vocab 27" "$DIR/out.txt" || fail "bpe summary: $(cat "$DIR/out.txt")"
# --eot: the fixture has no "<|endoftext|>"; a copy with it (id 27) puts 27 before each document.
sed 's/}$/, "<|endoftext|>": 27}/' "$FIX/vocab.json" > "$DIR/veot.json"
printf "hello\n\n42\n" > "$DIR/two.txt"
"$BIN" --input "$DIR/two.txt" --out-prefix "$DIR/t" --vocab "$DIR/veot.json" --merges "$FIX/merges.txt" \
  --val-fraction 0 --eot > /dev/null || fail "eot run"
[ "$(tokens "$DIR/t_train.bin")" = "27 17 13 13 27 24 13" ] || fail "eot tokens: $(tokens "$DIR/t_train.bin")"

# ---- a Hugging Face tokenizer.json (Llama 3's split pattern, special tokens): the
# ids the tokenizers library gave the whole file (tests/data/gen_hf_tokenizer_ref.py)
HF=$FIX/../hf_tokenizer
"$BIN" --input "$HF/sample.txt" --out-prefix "$DIR/hf" --tokenizer "$HF/tokenizer.json" --format raw \
  --val-fraction 0 > "$DIR/out.txt" || fail "tokenizer.json run: $(cat "$DIR/out.txt")"
[ "$(tokens "$DIR/hf_train.bin" 0)" = "$(cat "$HF/sample.ids")" ] || fail "tokenizer.json tokens: $(tokens "$DIR/hf_train.bin" 0)"
grep -q "tokenizer.json BPE from .*, vocab 1203" "$DIR/out.txt" || fail "tokenizer.json summary: $(cat "$DIR/out.txt")"
"$BIN" --input "$DIR/two.txt" --out-prefix "$DIR/he" --tokenizer "$HF/tokenizer.json" --format raw \
  --val-fraction 0 --eot > /dev/null || fail "tokenizer.json eot run"
[ "$(tokens "$DIR/he_train.bin" 0 | cut -d' ' -f1)" = "1" ] || fail "--eot with tokenizer.json: <|end_of_text|> (1) first: $(tokens "$DIR/he_train.bin" 0)"
# post_processor: Llama 3's template puts <|begin_of_text|> (0) before every text, so --eot
# puts it before each document where the template-less file put <|end_of_text|> (1)
# (tests/data/hf_tokenizer/post_cases.json: the library's own objects)
post() { # post CASE OUT: the tokenizer with post_cases.json's CASE as its post_processor
  python3 -c 'import json, sys
t = json.load(open(sys.argv[1] + "/tokenizer.json"))
t["post_processor"] = next(c for c in json.load(open(sys.argv[1] + "/post_cases.json"))["cases"] if c["name"] == sys.argv[2])["post_processor"]
json.dump(t, open(sys.argv[3], "w"))' "$HF" "$1" "$2"
}
post llama3 "$DIR/tok_llama3.json" && post suffix "$DIR/tok_suffix.json" || fail "splicing post_cases.json"
"$BIN" --input "$DIR/two.txt" --out-prefix "$DIR/hl" --tokenizer "$DIR/tok_llama3.json" --format raw \
  --val-fraction 0 --eot > /dev/null || fail "tokenizer.json with a template, eot run"
[ "$(tokens "$DIR/hl_train.bin" 0)" = "$(tokens "$DIR/he_train.bin" 0 | awk '{ for (i = 1; i <= NF; i++) if ($i == 1) $i = 0; print }')" ] ||
  fail "--eot with Llama 3's template: <|begin_of_text|> (0) before each document: $(tokens "$DIR/hl_train.bin" 0)"

# ---- ids above 65535 (tests/data/gen_hf_tokenizer_big.py: the same tokenizer renumbered
# as Llama 3's, specials 128000 and 128001): llm.c's uint32 layout, the library's ids
HB=$FIX/../hf_tokenizer_big
"$BIN" --input "$HF/sample.txt" --out-prefix "$DIR/hb" --tokenizer "$HB/tokenizer.json" \
  --val-fraction 0 > "$DIR/out.txt" || fail "big tokenizer.json run: $(cat "$DIR/out.txt")"
[ "$(od -An -td4 -N12 "$DIR/hb_train.bin" | tr -s ' ' ' ' | sed 's/^ //')" = "20240801 7 $(wc -w < "$HB/sample.ids")" ] ||
  fail "uint32 llm.c header: $(od -An -td4 -N12 "$DIR/hb_train.bin")"
[ "$(tokens32 "$DIR/hb_train.bin")" = "$(cat "$HB/sample.ids")" ] || fail "big tokenizer.json tokens: $(tokens32 "$DIR/hb_train.bin")"
grep -q "vocab 128002" "$DIR/out.txt" && grep -q "uint32 tokens: the vocabulary exceeds 65536 ids" "$DIR/out.txt" ||
  fail "big tokenizer.json summary: $(cat "$DIR/out.txt")"
"$BIN" --info "$DIR/hb_train.bin" | grep -q "llm.c format (uint32 tokens), $(wc -w < "$HB/sample.ids") tokens, largest id 128001" ||
  fail "--info uint32: $("$BIN" --info "$DIR/hb_train.bin")"
"$BIN" --input "$DIR/two.txt" --out-prefix "$DIR/hbe" --tokenizer "$HB/tokenizer.json" --val-fraction 0 --eot > /dev/null ||
  fail "big tokenizer.json eot run"
[ "$(tokens32 "$DIR/hbe_train.bin" | cut -d' ' -f1)" = "128001" ] || fail "--eot: <|end_of_text|> is 128001: $(tokens32 "$DIR/hbe_train.bin")"
# raw files are uint16: refused, nothing written
"$BIN" --input "$HF/sample.txt" --out-prefix "$DIR/hbr" --tokenizer "$HB/tokenizer.json" --format raw \
  --val-fraction 0 > "$DIR/out.txt" 2>&1 && fail "--format raw with ids above 65535 was accepted"
grep -q "error: --format raw holds uint16 ids, but .*tokenizer.json has ids up to 128001: use --format llmc" "$DIR/out.txt" ||
  fail "--format raw refusal: $(cat "$DIR/out.txt")"
[ ! -e "$DIR/hbr_train.bin" ] || fail "a refused --format raw wrote a file"

# ---- --fortune: '%' lines separate entries and are dropped ------------------------
printf 'one\n%%\ntwo\n%%\nthree\n%%\nfour\n%%\n' > "$DIR/f"
"$BIN" --fortune --input "$DIR/f" --out-prefix "$DIR/f" --val-fraction 0.25 > "$DIR/out.txt" || fail "fortune run"
grep -q "4 documents (1 validation)" "$DIR/out.txt" || fail "fortune summary: $(cat "$DIR/out.txt")"
printf 'one\ntwo\nthree\n' > "$DIR/ft.txt"
printf 'four\n' > "$DIR/fv.txt"
[ "$(tokens "$DIR/f_train.bin")" = "$(bytes_as_tokens "$DIR/ft.txt")" ] || fail "fortune train tokens"
[ "$(tokens "$DIR/f_val.bin")" = "$(bytes_as_tokens "$DIR/fv.txt")" ] || fail "fortune val tokens"

# ---- a file given twice (the fortunes directory's NAME.u8 links) is read once --
ln -s f "$DIR/f.u8"
"$BIN" --fortune --input "$DIR/f" "$DIR/f.u8" --out-prefix "$DIR/g" --val-fraction 0.25 > "$DIR/out.txt" 2>&1 || fail "dup run"
grep -q "skipped 1 input naming a file already read" "$DIR/out.txt" || fail "dup note: $(cat "$DIR/out.txt")"
grep -q "1 files, .* 4 documents (1 validation)" "$DIR/out.txt" || fail "dup summary: $(cat "$DIR/out.txt")"
cmp -s "$DIR/f_train.bin" "$DIR/g_train.bin" || fail "dup changed the tokens"

# ---- non-text inputs are skipped with one note each (NUL byte or invalid UTF-8
# in the first 4096 bytes), the text is tokenised as if they were not given ---
printf '\000\000\000\002\000\000\000\004\000\000\000\006\000\000\000\004\000\000\000\000%%\000\000\000' > "$DIR/f.dat"
printf 'ok\n\377\376 latin-1\n' > "$DIR/l1.txt"
printf 'bin\000ary' > "$DIR/nul.bin"
"$BIN" --fortune --input "$DIR/f.dat" "$DIR/f" "$DIR/l1.txt" "$DIR/nul.bin" --out-prefix "$DIR/s" --val-fraction 0.25 \
  > "$DIR/out.txt" 2>&1 || fail "non-text inputs stopped the run: $(cat "$DIR/out.txt")"
grep -qxF "pd2bw-data: note: skipped $DIR/f.dat: not text (NUL byte at offset 0; a strfile(1) index)" "$DIR/out.txt" ||
  fail "f.dat note: $(cat "$DIR/out.txt")"
grep -qxF "pd2bw-data: note: skipped $DIR/l1.txt: not text (invalid UTF-8 at offset 3)" "$DIR/out.txt" ||
  fail "l1.txt note: $(cat "$DIR/out.txt")"
grep -qxF "pd2bw-data: note: skipped $DIR/nul.bin: not text (NUL byte at offset 3)" "$DIR/out.txt" ||
  fail "nul.bin note: $(cat "$DIR/out.txt")"
grep -q "1 files, .* 4 documents (1 validation)" "$DIR/out.txt" || fail "skip summary: $(cat "$DIR/out.txt")"
cmp -s "$DIR/f_train.bin" "$DIR/s_train.bin" || fail "skipping changed the tokens"
# Only the first 4096 bytes are looked at; a UTF-8 sequence cut at byte 4096 is text.
head -c 4095 /dev/zero | tr '\000' 'a' > "$DIR/long.txt"
printf '\303\251 then\000 a NUL later\n' >> "$DIR/long.txt"
"$BIN" --input "$DIR/long.txt" --out-prefix "$DIR/lg" --val-fraction 0 > "$DIR/out.txt" 2>&1 || fail "long run"
grep -q "note: skipped" "$DIR/out.txt" && fail "long.txt was skipped: $(cat "$DIR/out.txt")"
[ "$(tokens "$DIR/lg_train.bin" | wc -w)" -eq "$(wc -c < "$DIR/long.txt")" ] || fail "long.txt tokens"
"$BIN" --input "$DIR/nul.bin" --out-prefix "$DIR/nt" > "$DIR/out.txt" 2>&1 && fail "only non-text input: exit 0"
grep -q "no text to train on" "$DIR/out.txt" || fail "only non-text input: $(cat "$DIR/out.txt")"
[ ! -e "$DIR/nt_train.bin" ] || fail "only non-text input wrote a file"

# ---- --info reports every file, in order, and says how many failed -----------
printf 'xyz' > "$DIR/three.bin"
"$BIN" --info "$DIR/p_val.bin" "$DIR/three.bin" "$DIR/nope.bin" "$DIR/p_train.bin" > "$DIR/info.txt" 2>&1
rc=$?
[ $rc -eq 1 ] || fail "--info with bad files exited $rc, expected 1"
sed -e 's/^pd2bw-data: error: //' -e 's/:.*//' "$DIR/info.txt" > "$DIR/info_order.txt"
printf '%s\n' "$DIR/p_val.bin" "$DIR/three.bin" "$DIR/nope.bin" "$DIR/p_train.bin" "pd2bw-data" > "$DIR/want_order.txt"
cmp -s "$DIR/info_order.txt" "$DIR/want_order.txt" || fail "--info order/lines: $(cat "$DIR/info.txt")"
grep -qxF "pd2bw-data: 2 of 4 files could not be read as token files" "$DIR/info.txt" || fail "--info summary: $(cat "$DIR/info.txt")"

# The real corpus (Debian's fortunes) and the documented command: fortunes_corpus.sh.

# ---- user errors: message, status 1, previous outputs untouched, no temp files ----
printf 'old' > "$DIR/e_train.bin"
expect_error() { # expect_error "message part" args...
  want=$1
  shift
  "$BIN" "$@" > "$DIR/err.txt" 2>&1
  rc=$?
  [ $rc -eq 1 ] || fail "'$*' exited $rc, expected 1"
  grep -qF -- "$want" "$DIR/err.txt" || fail "'$*' said: $(cat "$DIR/err.txt"); expected: $want"
  [ "$(cat "$DIR/e_train.bin")" = "old" ] || fail "'$*' clobbered an existing output"
  [ ! -e "$DIR/e_val.bin" ] || fail "'$*' wrote a val file"
}
expect_error "$DIR/missing.txt: cannot open" --input "$DIR/missing.txt" --out-prefix "$DIR/e"
expect_error "--eot: $DIR/tok_suffix.json: post_processor: a template other than" --input "$DIR/two.txt" \
  --out-prefix "$DIR/e" --tokenizer "$DIR/tok_suffix.json" --eot
printf 'hello x\n' > "$DIR/x.txt"
expect_error "x.txt: offset 6: byte 0x78 has no token" --input "$DIR/h.txt" "$DIR/x.txt" --out-prefix "$DIR/e" \
  --vocab "$FIX/vocab.json" --merges "$FIX/merges.txt" --val-fraction 0
expect_error "less than one document" --input "$DIR/h.txt" --out-prefix "$DIR/e"
expect_error "--val-fraction 1.5: expected a number in [0, 1)" --input "$DIR/h.txt" --out-prefix "$DIR/e" --val-fraction 1.5
expect_error "--vocab and --merges go together" --input "$DIR/h.txt" --out-prefix "$DIR/e" --vocab "$FIX/vocab.json"
expect_error "--format bin: expected llmc or raw" --input "$DIR/h.txt" --out-prefix "$DIR/e" --format bin
expect_error "no --out-prefix" --input "$DIR/h.txt"
expect_error "has no \"<|endoftext|>\" token" --input "$DIR/h.txt" --out-prefix "$DIR/e" --vocab "$FIX/vocab.json" \
  --merges "$FIX/merges.txt" --eot
expect_error "--eot needs --vocab" --input "$DIR/h.txt" --out-prefix "$DIR/e" --eot
# malformed tokenizer.json: each error names the file and the key
expect_error "--tokenizer replaces --vocab" --input "$DIR/h.txt" --out-prefix "$DIR/e" --tokenizer "$HF/tokenizer.json" \
  --vocab "$FIX/vocab.json" --merges "$FIX/merges.txt"
printf '{"model": {' > "$DIR/broken.json"
expect_error "broken.json: offset" --input "$DIR/h.txt" --out-prefix "$DIR/e" --tokenizer "$DIR/broken.json"
sed 's/p{N}{1,3}/p{N}{1,4}/' "$HF/tokenizer.json" > "$DIR/pat.json"
expect_error "pat.json: pre_tokenizer.pretokenizers[0].pattern.Regex: the split pattern" --input "$DIR/h.txt" \
  --out-prefix "$DIR/e" --tokenizer "$DIR/pat.json"
sed 's/"type": "BPE"/"type": "Unigram"/' "$HF/tokenizer.json" > "$DIR/uni.json"
expect_error "uni.json: model.type: a \"Unigram\" model" --input "$DIR/h.txt" --out-prefix "$DIR/e" --tokenizer "$DIR/uni.json"
sed 's/"normalizer": null/"normalizer": {"type": "NFC"}/' "$HF/tokenizer.json" > "$DIR/nfc.json"
expect_error "nfc.json: normalizer: a normalizer is not supported" --input "$DIR/h.txt" --out-prefix "$DIR/e" \
  --tokenizer "$DIR/nfc.json"
sed '0,/"add_prefix_space": false/s//"add_prefix_space": 1/' "$HF/tokenizer.json" > "$DIR/aps.json"
expect_error "aps.json: pre_tokenizer.pretokenizers[1].add_prefix_space: expected true or false" --input "$DIR/h.txt" \
  --out-prefix "$DIR/e" --tokenizer "$DIR/aps.json"
sed '/"merges": \[/{n;n;s/"[^"]*"/"nosuch"/}' "$HF/tokenizer.json" > "$DIR/merge.json"
expect_error "merge.json: model.merges[0]: token \"nosuch\" is not in the vocabulary" --input "$DIR/h.txt" --out-prefix "$DIR/e" --tokenizer "$DIR/merge.json"
expect_error "unknown or incomplete option --bogus" --bogus
expect_error "cannot create" --input "$DIR/a.txt" --out-prefix "$DIR/no/such/dir/p"
printf 'abc' > "$DIR/odd.bin"
expect_error "odd size (3 bytes)" --info "$DIR/odd.bin"
ls "$DIR" | grep -q '\.tmp\.' && fail "temp files left: $(ls "$DIR")"

if [ $FAILED -eq 0 ]; then
  rm -rf "$DIR"
  echo "1 passed, 0 failed"
else
  echo "scratch files kept in $DIR" >&2
  echo "0 passed, 1 failed"
  exit 1
fi
