#!/usr/bin/env bash
# pd2bw-curves (bench/convergence/curves.c): two logs make one SVG with a group and a
# validation line per run and a summary line each; a malformed log line is an error
# naming file:line:col, exit status 1, and no SVG.
#   test_curves.sh PD2BW_CURVES
set -u
CURVES=$1
T=$(mktemp -d /tmp/pd2bw-curves-XXXXXX)
trap 'rm -rf "$T"' EXIT
pass=0 fail=0
ok() { pass=$((pass + 1)); echo "ok   $*"; }
bad() { fail=$((fail + 1)); echo "FAIL $*"; }
for s in 1 2 3 4; do
  v=""; [ $((s % 2)) = 0 ] && v=", \"val_loss\": $(echo "3 - $s / 10" | bc -l)"
  echo "{\"step\": $s, \"loss\": $((5 - s)), \"lr\": 0.001$v}" >>"$T/a.jsonl"
  echo "{\"step\": $s, \"loss\": $((6 - s)), \"lr\": 0.001$v}" >>"$T/b.jsonl"
done
if out=$("$CURVES" --svg "$T/p.svg" --title "a & b" one="$T/a.jsonl" two="$T/b.jsonl" 2>&1); then
  [ "$(grep -c '<g class="run"' "$T/p.svg")" = 2 ] && [ "$(grep -c 'class="val"' "$T/p.svg")" = 2 ] &&
    grep -q '>a &amp; b</text>' "$T/p.svg" && ok "an SVG with two runs" || bad "SVG content: $(cat "$T/p.svg")"
  [ "$(printf '%s\n' "$out" | cut -f1,2,3)" = "$(printf 'one\t2.6000\t4\ntwo\t2.6000\t4')" ] &&
    ok "summary: last validation loss and its step per run" || bad "summary: $out"
else
  bad "pd2bw-curves on good logs: $out"
fi
echo '{"step": 5, "loss": }' >>"$T/b.jsonl"
if out=$("$CURVES" --svg "$T/q.svg" one="$T/a.jsonl" two="$T/b.jsonl" 2>&1); then
  bad "a malformed log line is accepted"
elif grep -q "^pd2bw-curves: $T/b.jsonl:5:1: error: expected a JSON object" <<<"$out" && [ ! -e "$T/q.svg" ]; then
  ok "malformed line: $out"
else
  bad "malformed line: $out (svg left: $(ls "$T"))"
fi
echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
