#!/usr/bin/env bash
# replay_selfcheck: scripts/replay.sh --quick records one case of every training-step
# path into a scratch directory and checks the same build against it: every path
# must reproduce itself bit for bit (a nondeterministic one fails here). Then the
# checker itself: a changed weight hash is named (case, line, tensor) with exit 1; a
# recording from another machine is refused, and compared under --force; record
# refuses an existing directory.
#   selfcheck.sh BUILD
set -u
BUILD=$1
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
REPLAY=$ROOT/scripts/replay.sh
S=$(mktemp -d /tmp/pd2bw-replay-self-XXXXXX)
trap 'rm -rf "$S"' EXIT
pass=0
fail=0
ok() { pass=$((pass + 1)); echo "ok   $*"; }
bad() { fail=$((fail + 1)); echo "FAIL $*"; }
if "$REPLAY" record "$S/set" --quick --build "$BUILD" >"$S/out" 2>&1; then
  ok "record --quick: $(tail -n 1 "$S/out")"
else
  bad "record --quick:"
  cat "$S/out"
  exit 1
fi
if "$REPLAY" check "$S/set" --build "$BUILD" >"$S/out" 2>&1; then
  ok "check: $(tail -n 1 "$S/out")"
else
  bad "check: the same build does not reproduce its own recording:"
  cat "$S/out"
fi
one=trainer-1f1b-d1-w1-m2-clip
# a weight that moved: the case, the line and the tensor are named
sed -i 's/^\(tensor 3 [^ ]* [0-9]* \)./\10/; s/^\(tensor 3 [^ ]* [0-9]* \)00/\11/' "$S/set/$one.txt"
if "$REPLAY" check "$S/set" --only "^$one\$" --build "$BUILD" >"$S/out" 2>&1; then
  bad "check passed a changed weight hash"
  cat "$S/out"
elif grep -q "^DIFFER $one: line [0-9]*: recorded 'tensor 3 h.0.ln1_b" "$S/out"; then
  ok "changed hash: $(grep ^DIFFER "$S/out" | cut -c1-90)..."
else
  bad "changed hash message:"
  cat "$S/out"
fi
# another machine: refused, then compared under --force (and the difference still found)
sed -i 's/^cpu: .*/cpu: Some Other CPU/' "$S/set/machine.txt"
if "$REPLAY" check "$S/set" --only "^$one\$" --build "$BUILD" >"$S/out" 2>&1; then
  bad "check accepted another machine's recording"
elif grep -q "recorded on another machine" "$S/out" && ! grep -q "^MATCH\|^DIFFER" "$S/out"; then
  ok "another machine: $(grep -m1 'only comparable' "$S/out")"
else
  bad "another machine's message:"
  cat "$S/out"
fi
if ! "$REPLAY" check "$S/set" --only "^$one\$" --force --build "$BUILD" >"$S/out" 2>&1 && grep -q "^DIFFER $one" "$S/out"; then
  ok "--force compares anyway"
else
  bad "--force:"
  cat "$S/out"
fi
if "$REPLAY" record "$S/set" --quick --build "$BUILD" >"$S/out" 2>&1; then
  bad "record over an existing directory"
elif grep -q "it exists" "$S/out" && [ -f "$S/set/$one.txt" ]; then
  ok "record refuses an existing directory: $(cat "$S/out")"
else
  bad "record over an existing directory:"
  cat "$S/out"
fi
echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
