#!/bin/sh
# tools/pd2bw-data on the real corpus, Debian's fortunes (scripts/deps.sh installs it):
# every byte but the '%' separator lines ("%\n", 2 bytes each) becomes a token, and the
# command that README.md and docs/data.md show, run as written (its glob also names the
# *.dat indexes and the *.u8 links, which are skipped with a note), gives the same
# tokens. Without the corpus the test is a CTest skip (exit 77), not a pass.
#   usage: fortunes_corpus.sh PATH/TO/pd2bw-data SOURCE_DIR
set -u
BIN=$1
SRC=$2
FORT=/usr/share/games/fortunes
if [ ! -f "$FORT/fortunes" ]; then
  echo "skipped: no $FORT/fortunes (the 'fortunes' package: scripts/deps.sh)"
  exit 77
fi
DIR=$(mktemp -d "${TMPDIR:-/tmp}/pd2bw-fort-XXXXXX")
FAILED=0
fail() { echo "FAIL: $*" >&2; FAILED=$((FAILED + 1)); }

# the documents show this very command (the part before the output name)
for doc in README.md docs/data.md; do
  grep -qF -- "pd2bw-data --fortune --input $FORT/* --out-prefix" "$SRC/$doc" ||
    fail "$doc no longer shows the fortunes command this test runs"
done

files=$(ls "$FORT"/* | grep -v '\.dat$' | grep -v '\.u8$')
# shellcheck disable=SC2086
"$BIN" --fortune --input $files --out-prefix "$DIR/fort" > "$DIR/out.txt" 2>&1 || fail "fortunes run: $(cat "$DIR/out.txt")"
# shellcheck disable=SC2086
want=$(( $(cat $files | wc -c) - 2 * $(cat $files | grep -c '^%$') ))
got=$(( ($(wc -c < "$DIR/fort_train.bin") - 1024 + $(wc -c < "$DIR/fort_val.bin") - 1024) / 2 ))
[ "$got" -eq "$want" ] || fail "fortunes: $got tokens, expected $want"
# The documented command, as written.
"$BIN" --fortune --input "$FORT"/* --out-prefix "$DIR/fortall" > "$DIR/out.txt" 2>&1 ||
  fail "documented command: $(cat "$DIR/out.txt")"
[ "$(grep -c '^pd2bw-data: note: skipped .*\.dat: not text' "$DIR/out.txt")" -eq "$(ls "$FORT"/*.dat | wc -l)" ] ||
  fail "documented command's notes: $(cat "$DIR/out.txt")"
cmp -s "$DIR/fort_train.bin" "$DIR/fortall_train.bin" && cmp -s "$DIR/fort_val.bin" "$DIR/fortall_val.bin" ||
  fail "documented command: tokens differ from the text files alone"

if [ $FAILED -eq 0 ]; then
  rm -rf "$DIR"
  echo "1 passed, 0 failed"
else
  echo "scratch files kept in $DIR" >&2
  echo "0 passed, 1 failed"
  exit 1
fi
