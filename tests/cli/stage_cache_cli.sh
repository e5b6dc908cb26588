#!/usr/bin/env bash
# The stage-program cache verifies itself (issue 12, items 7 and 12): a cached .so
# carries a checksum of its bytes, checked before dlopen; a truncated or byte-flipped
# entry is never loaded but rebuilt with a one-line note. A dead process's temporary
# *.so.tmp.PID.N, unchanged for 10 minutes, is removed by the next compile, a live
# one's kept. $PD2BW_CACHE longer than the runtime's limit is an error naming it, not
# a silent truncation.
#   stage_cache_cli.sh PD2BWC PD2BWRUN   (from the source root)
set -u
pd2bwc=$1 run=$2
src=$(pwd)
w=$(mktemp -d /tmp/pd2bw-cache-cli-XXXXXX)
trap 'rm -rf "$w"' EXIT
pass=0 fail=0
ok() { pass=$((pass + 1)); }
bad() { echo "FAIL: $*"; fail=$((fail + 1)); }
python3 - "$w/train.bin" <<'PY' || exit 1
import struct, sys
text = b"a cache that checks itself; " * 64
open(sys.argv[1], "wb").write(struct.pack("<%dH" % len(text), *text))
PY
"$pd2bwc" "$src/tests/pipeline/mlp.model" -q --backend cpu -o "$w/plan" || { echo "pd2bwc failed"; exit 1; }
export PD2BW_CACHE=$w/cache
train() { "$run" "$w/plan" --data "$w/train.bin" --steps 2 --threads 1 2>&1; }
# expect_run NAME WANT-PATTERN [NOTE]: trains, prints WANT-PATTERN, and the damage note iff NOTE
expect_run() {
  local name=$1 pat=$2 note=${3:-} out rc
  out=$(train)
  rc=$?
  if [ $rc -ne 0 ] || ! grep -q '^step 2/2 | loss ' <<<"$out" || ! grep -q -- "$pat" <<<"$out"; then
    bad "$name: exit $rc, output: $out"
  elif [ -n "$note" ] && [ "$(grep -c 'is damaged' <<<"$out")" -ne 1 ]; then
    bad "$name: no one-line note about the damaged entry: $out"
  elif [ -z "$note" ] && grep -q 'is damaged' <<<"$out"; then
    bad "$name: a note about damage on a good entry: $out"
  else
    ok
  fi
}

expect_run "first run compiles" "(compiled now)"
so=$(ls "$w/cache"/*.so)
[ "$(wc -w <<<"$so")" -eq 1 ] && ok || bad "expected one .so in the cache, got: $so"
expect_run "second run uses the cache" "(cached)"
good=$(cksum <"$so")

# stale temporaries: a dead process's, unchanged for 20 minutes, go when the next
# compile writes into the cache (the rebuild of the truncated entry below); a live
# one's, a recent one (its writer may be on another host sharing the cache) and other
# names stay
sh -c 'exit 0' &
dead=$!
wait $dead
sleep 300 &
live=$!
key=$(basename "$so")
for f in "$key.tmp.$dead.1" "$key.tmp.$live.1" "$key.tmp.x$dead.1" "notes.tmp.$dead.1" "$key.tmp.$dead.2"; do
  echo x >"$w/cache/$f"
  [ "$f" = "$key.tmp.$dead.2" ] || touch -d '20 minutes ago' "$w/cache/$f"
done

# truncated: half the file
truncate -s $(($(stat -c %s "$so") / 2)) "$so"
expect_run "truncated entry" "(compiled now)" note
[ "$(cksum <"$so")" = "$good" ] && ok || bad "the truncated entry was not rebuilt"
[ ! -e "$w/cache/$key.tmp.$dead.1" ] && ok || bad "a dead process's temporary stage program was kept"
for f in "$key.tmp.$live.1" "$key.tmp.x$dead.1" "notes.tmp.$dead.1" "$key.tmp.$dead.2"; do
  [ -e "$w/cache/$f" ] && ok || bad "$f was removed"
done
kill "$live"
wait "$live" 2>/dev/null
# one byte flipped in the middle (in the code)
python3 - "$so" <<'PY'
import sys
p = sys.argv[1]
b = bytearray(open(p, "rb").read())
b[len(b) // 2] ^= 0xFF
open(p, "r+b").write(b)
PY
expect_run "byte-flipped entry" "(compiled now)" note
[ "$(cksum <"$so")" = "$good" ] && ok || bad "the byte-flipped entry was not rebuilt"
expect_run "rebuilt entry is used" "(cached)"

# a long PD2BW_CACHE: 1,100 characters works, in full; 5,000 is a clear error
seg=$(printf 'c%.0s' $(seq 99))
long=$w
while [ ${#long} -lt 1100 ]; do long=$long/$seg; done
mkdir -p "$long" && cp "$so" "$long/" # found only if the whole path is used
out=$(PD2BW_CACHE=$long train)
[ $? -eq 0 ] && grep -q "(cached)" <<<"$out" && ok || bad "a ${#long}-character PD2BW_CACHE: $out"
while [ ${#long} -lt 5000 ]; do long=$long/$seg; done
out=$(PD2BW_CACHE=$long train)
rc=$?
[ $rc -eq 1 ] && grep -q "PD2BW_CACHE is ${#long} characters" <<<"$out" && ok ||
  bad "a ${#long}-character PD2BW_CACHE: exit $rc, output: $out"

# A C compiler that never returns is killed after PD2BW_CC_TIMEOUT seconds (default
# 600), with it what it started, and the run ends with a message (issue 24): a fake
# compiler that answers --version and then sleeps. Before, the run waited forever.
cat >"$w/slowcc" <<'SH'
#!/bin/sh
[ "$1" = --version ] && { echo "slowcc 1.0"; exit 0; }
sleep 300 &
echo $! >"$(dirname "$0")/sleep.pid"
wait
SH
chmod +x "$w/slowcc"
t0=$(date +%s)
out=$(PD2BW_CC=$w/slowcc PD2BW_CC_TIMEOUT=2 PD2BW_CACHE=$w/slowcache timeout 60 "$run" "$w/plan" --data "$w/train.bin" \
  --steps 2 --threads 1 2>&1)
rc=$? dt=$(($(date +%s) - t0))
if [ $rc -eq 1 ] && [ $dt -le 20 ] && grep -q "the C compiler '$w/slowcc' did not finish compiling it within 2 s (PD2BW_CC_TIMEOUT); it was killed" <<<"$out"; then
  ok
else
  bad "a compiler that never returns: exit $rc after $dt s: $out"
fi
sleep 0.5 # (killed already; a zombie not yet reaped by its new parent counts as gone)
if [ -s "$w/sleep.pid" ] && ps -o stat= -p "$(cat "$w/sleep.pid")" 2>/dev/null | grep -qv '^Z'; then
  bad "what the compiler started (sleep, pid $(cat "$w/sleep.pid")) outlived the run"
  kill "$(cat "$w/sleep.pid")"
else
  ok
fi

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
