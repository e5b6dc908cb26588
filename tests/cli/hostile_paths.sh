#!/usr/bin/env bash
# No shell ever sees a path (issue 12, item 1): the whole flow, pd2bwc then pd2bwrun,
# with a plan directory, a token file, $PD2BW_CACHE and $HOME whose names hold a
# quote, a double quote, $(...), backquotes, ';', a newline and a space. It must
# train, and none of the embedded commands may run. PD2BW_CC with arguments is
# split on spaces (runtime/core/stage_cc.c). The model is tests/pipeline/mlp.model
# (its stage program compiles in about a second).
#   hostile_paths.sh PD2BWC PD2BWRUN   (from the source root)
set -u
pd2bwc=$1 run=$2
src=$(pwd)
work=$(mktemp -d /tmp/pd2bw-hostile-XXXXXX)
trap 'rm -rf "$work"' EXIT
pass=0 fail=0
ok() { pass=$((pass + 1)); }
bad() { echo "FAIL: $*"; fail=$((fail + 1)); }

# Every injected command would create a PWNED* file in the working directory.
weird=$'q\';touch PWNED_q;\' "dq;touch PWNED_dq" $(touch PWNED_sub) `touch PWNED_bq` ;touch PWNED_semi\nline two'
base="$work/$weird"
mkdir -p "$base" || { echo "cannot create the test directory"; exit 1; }
cd "$work" || exit 1
python3 - "$base/train.bin" <<'PY' || exit 1
import struct, sys
text = b"no shell ever sees a path; " * 64
open(sys.argv[1], "wb").write(struct.pack("<%dH" % len(text), *text))
PY

out=$("$pd2bwc" "$src/tests/pipeline/mlp.model" -q --backend cpu -o "$base/plan" 2>&1)
[ $? -eq 0 ] && [ -f "$base/plan/plan.json" ] && ok || bad "pd2bwc into a hostile directory name: $out"

# 1. the plan, the data and the cache under the hostile name
out=$(PD2BW_CACHE="$base/cache" "$run" "$base/plan" --data "$base/train.bin" --steps 2 --threads 1 2>&1)
rc=$?
[ $rc -eq 0 ] && grep -q '^step 2/2 | loss ' <<<"$out" && ok || bad "training with PD2BW_CACHE under a hostile name (exit $rc): $out"
ls "$base/cache"/*.so >/dev/null 2>&1 && ok || bad "no stage program in the hostile PD2BW_CACHE"

# 2. no PD2BW_CACHE: the cache under a hostile $HOME; PD2BW_CC is a program with arguments
cat >"$work/cc-wrapper" <<'SH'
#!/bin/sh
# records that pd2bw passed the extra argument as its own word, then compiles
[ "$1" = "--pd2bw-extra-arg" ] || { echo "cc-wrapper: expected --pd2bw-extra-arg first, got '$1'" >&2; exit 1; }
shift
echo called >>"$(dirname "$0")/cc-wrapper.log"
exec cc "$@"
SH
chmod +x "$work/cc-wrapper"
out=$(env -u PD2BW_CACHE HOME="$base/home" PD2BW_CC="$work/cc-wrapper  --pd2bw-extra-arg" \
  "$run" "$base/plan" --data "$base/train.bin" --steps 2 --threads 1 2>&1)
rc=$?
[ $rc -eq 0 ] && grep -q '^step 2/2 | loss ' <<<"$out" && ok || bad "training with a hostile HOME (exit $rc): $out"
ls "$base/home/.cache/pd2bw"/*.so >/dev/null 2>&1 && ok || bad "no stage program in the hostile HOME's cache"
grep -q called "$work/cc-wrapper.log" 2>/dev/null && ok || bad "PD2BW_CC with an argument was not used"

# a compiler that does not exist: a clear error, exit 1
out=$(PD2BW_CACHE="$base/cache2" PD2BW_CC="$work/no-such-cc" "$run" "$base/plan" --data "$base/train.bin" --steps 1 2>&1)
rc=$?
[ $rc -eq 1 ] && grep -q "cannot run the C compiler" <<<"$out" && ok || bad "a missing PD2BW_CC (exit $rc): $out"

# a compiler killed by a signal: the message names the signal (it printed nothing)
cat >"$work/cc-killed" <<'SH'
#!/bin/sh
[ "$1" = "--version" ] && { echo "cc-killed 1.0"; exit 0; }
kill -KILL $$
SH
chmod +x "$work/cc-killed"
out=$(PD2BW_CACHE="$base/cache3" PD2BW_CC="$work/cc-killed" "$run" "$base/plan" --data "$base/train.bin" --steps 1 2>&1)
rc=$?
[ $rc -eq 1 ] && grep -q "the C compiler was killed by signal 9" <<<"$out" && ok || bad "a compiler killed by SIGKILL (exit $rc): $out"

found=$(find "$work" -name 'PWNED*')
[ -z "$found" ] && ok || bad "an embedded command ran: $found"

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
