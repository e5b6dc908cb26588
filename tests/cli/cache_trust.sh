#!/usr/bin/env bash
# The caches trust only their owner (issue 24, item 2): a cache directory is used only
# when it is owned by the user running pd2bw and not writable by group or others
# (runtime/io/cache_dir.c, one rule for the stage-program and the cubin cache). pd2bw
# creates it 0700. Otherwise one note names the directory and why, and the run compiles
# into a private temporary directory, removed at exit; a stage program planted there,
# with a valid seal, is never loaded. No HOME and no PD2BW_CACHE: the private directory
# too (no shared /tmp/.cache/pd2bw). PD2BW_CACHE naming a regular file: the same, with a
# note that says so (not an error from the linker). The untrusted cases are modes 0777
# and 0775, not another user, so the test runs as any user; as root, a directory
# chown'ed to another uid is refused too (skipped, with a line saying so, otherwise).
#   cache_trust.sh PD2BWC PD2BWRUN   (from the source root)
set -u
pd2bwc=$1 run=$2
src=$(pwd)
w=$(mktemp -d /tmp/pd2bw-cache-trust-XXXXXX)
trap 'chmod -R u+w "$w" 2>/dev/null; rm -rf "$w"' EXIT
pass=0 fail=0
ok() { pass=$((pass + 1)); }
bad() { echo "FAIL: $*"; fail=$((fail + 1)); }
python3 - "$w/train.bin" <<'PY' || exit 1
import struct, sys
text = b"a cache trusts only its owner; " * 64
open(sys.argv[1], "wb").write(struct.pack("<%dH" % len(text), *text))
PY
"$pd2bwc" "$src/tests/pipeline/mlp.model" -q --backend cpu -o "$w/plan" || { echo "pd2bwc failed"; exit 1; }
train() { "$run" "$w/plan" --data "$w/train.bin" --steps 2 --threads 1 2>&1; }
trained() { grep -q '^step 2/2 | loss ' <<<"$1"; }
notes() { grep -c '^pd2bw: note: .*compiling into the private directory' <<<"$1"; }
# the private directory a note names; gone after the run
private_of() { sed -n 's/.*compiling into the private directory \(.*\) for this run.*/\1/p' <<<"$1" | head -1; }

# ---- a cache pd2bw creates: 0700, its missing parents as mkdir -p makes them ----
out=$(PD2BW_CACHE="$w/made/deep/cache" train)
rc=$?
[ $rc -eq 0 ] && trained "$out" && [ "$(notes "$out")" -eq 0 ] && ok || bad "a new cache directory (exit $rc): $out"
[ "$(stat -c %a "$w/made/deep/cache" 2>/dev/null)" = 700 ] && ok ||
  bad "the new cache directory is mode $(stat -c %a "$w/made/deep/cache" 2>/dev/null), not 700"
so=$(ls "$w/made/deep/cache"/*.so 2>/dev/null)
[ "$(wc -w <<<"$so")" -eq 1 ] && ok || bad "expected one .so in the new cache, got: $so"
out=$(PD2BW_CACHE="$w/made/deep/cache" train)
grep -q "(cached)" <<<"$out" && [ "$(notes "$out")" -eq 0 ] && ok || bad "the own cache is used: $out"

# ---- a planted program: the good entry's name, a valid seal, code in a constructor ----
key=$(basename "$so")
cat >"$w/evil.c" <<'C'
#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>
__attribute__((constructor)) static void planted(void) {
  const char *p = getenv("PD2BW_TEST_PLANTED");
  if (p) close(open(p, O_WRONLY | O_CREAT, 0644));
}
C
cc -shared -fPIC -o "$w/evil.so" "$w/evil.c" || { echo "cannot build the planted program"; exit 1; }
python3 - "$w/evil.so" <<'PY' || exit 1
import sys
b = open(sys.argv[1], "rb").read()
h = 1469598103934665603
for c in b:
    h = ((h ^ c) * 1099511628211) & 0xFFFFFFFFFFFFFFFF
open(sys.argv[1], "ab").write(b"PD2BWSUM%016x%016x" % (h, len(b)))
PY
export PD2BW_TEST_PLANTED=$w/PLANTED_RAN
# untrusted NAME DIR WHY: the planted entry is not loaded, the run trains with one note
# naming DIR and WHY, and the private directory is gone afterwards
untrusted() {
  local name=$1 dir=$2 why=$3 out rc priv
  [ -d "$dir" ] && cp "$w/evil.so" "$dir/$key"
  out=$(PD2BW_CACHE="$dir" train)
  rc=$?
  priv=$(private_of "$out")
  if [ -e "$w/PLANTED_RAN" ]; then
    bad "$name: the planted program ran: $out"
  elif [ $rc -ne 0 ] || ! trained "$out" || ! grep -q "(compiled now)" <<<"$out"; then
    bad "$name: did not train from a fresh compile (exit $rc): $out"
  elif [ "$(notes "$out")" -ne 1 ] || ! grep -qF "not using the cache directory $dir: $why" <<<"$out"; then
    bad "$name: expected one note naming $dir and '$why': $out"
  elif [ -z "$priv" ] || [ -e "$priv" ]; then
    bad "$name: the private directory '$priv' is not named, or is left behind: $out"
  else
    ok
  fi
  rm -f "$w/PLANTED_RAN"
}
mkdir -m 0777 "$w/c777" && chmod 0777 "$w/c777"
untrusted "mode 0777" "$w/c777" "writable by group and others (mode 0777)"
[ "$(ls "$w/c777")" = "$key" ] && ok || bad "the run wrote into the untrusted 0777 directory: $(ls "$w/c777")"
mkdir "$w/c775" && chmod 0775 "$w/c775"
untrusted "mode 0775" "$w/c775" "writable by group (mode 0775)"
mkdir "$w/c757" && chmod 0757 "$w/c757"
untrusted "mode 0757" "$w/c757" "writable by others (mode 0757)"
: >"$w/file"
untrusted "PD2BW_CACHE names a regular file" "$w/file" "a regular file, not a directory"
if [ "$(id -u)" = 0 ]; then
  mkdir -m 0700 "$w/theirs" && cp "$w/evil.so" "$w/theirs/$key" && chown -R 65534 "$w/theirs"
  untrusted "owned by another user" "$w/theirs" "owned by uid 65534, not by this user (uid 0)"
else
  echo "SKIP: the cache owned by another user (needs root to chown)"
fi

# ---- no HOME, no PD2BW_CACHE: a private directory, never /tmp/.cache/pd2bw ----
out=$(env -u HOME -u PD2BW_CACHE "$run" "$w/plan" --data "$w/train.bin" --steps 2 --threads 1 2>&1)
rc=$?
priv=$(private_of "$out")
[ $rc -eq 0 ] && trained "$out" && [ "$(notes "$out")" -eq 1 ] &&
  grep -q "no cache directory: neither PD2BW_CACHE nor HOME is set" <<<"$out" &&
  [ -n "$priv" ] && [ ! -e "$priv" ] && ok || bad "no HOME (exit $rc): $out"
! grep -q "/tmp/.cache" <<<"$out" && ok || bad "no HOME: a shared /tmp/.cache named: $out"

echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
