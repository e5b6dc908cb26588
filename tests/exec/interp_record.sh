#!/usr/bin/env bash
# tests/exec/interp_record.sh PD2BWC INTERP_RECORD — every schedule's rank streams, as
# the interpreter executed them on recording devices and links (interp_record.c):
# gpipe, 1f1b, 2bw (plain, and with a flushed start and weight prediction) and
# pipedream on 2 and 4 stages, 1f1b and 2bw with 2 replicas (the all-reduce), and a
# plan that recomputes.
set -u
PD2BWC=$1 REC=$2
SRC=$(cd "$(dirname "$0")/../pipeline" && pwd)
T=$(mktemp -d /tmp/pd2bw-interp-XXXXXX)
trap 'rm -rf "$T"' EXIT
export PD2BW_CACHE=${PD2BW_CACHE:-/tmp/pd2bw-test-cache-$(id -u)}
python3 - "$T/train.bin" <<'PY' || exit 1
import struct, sys
text = b"The interpreter runs each rank's stream in order, one instruction at a time. " * 40
open(sys.argv[1], "wb").write(struct.pack("<%dH" % len(text), *text))
PY
pass=0 fail=0
case_() { # NAME STEPS PD2BWC-ARGS...
  local name=$1 steps=$2
  shift 2
  if ! "$PD2BWC" "$SRC/tinygpt.model" -q -D layers=3 -D dim=16 -D seq=8 -D heads=2 --cluster "$SRC/cpu8.cluster" \
       "$@" -o "$T/$name" >"$T/$name.cc" 2>&1; then
    fail=$((fail + 1)); echo "FAIL $name: pd2bwc"; cat "$T/$name.cc"; return
  fi
  if "$REC" "$T/$name" "$T/train.bin" "$steps" >"$T/$name.out" 2>&1; then
    pass=$((pass + 1)); echo "ok   $name ($(tail -1 "$T/$name.out"))"
  else
    fail=$((fail + 1)); echo "FAIL $name"; cat "$T/$name.out"
  fi
}
case_ gpipe-d2 3 --stages 2 --replicas 1 --schedule gpipe -D train.batch=8 --microbatch-size 2
case_ 1f1b-d4 3 --stages 4 --replicas 1 --schedule 1f1b -D train.batch=16 --microbatch-size 2
case_ 2bw-d2 4 --stages 2 --replicas 1 --schedule 2bw -D train.batch=8 --microbatch-size 2 \
  -D train.flush_steps=0 -D train.predict=0
case_ 2bw-d4 4 --stages 4 --replicas 1 --schedule 2bw -D train.batch=16 --microbatch-size 2 \
  -D train.flush_steps=0 -D train.predict=0
case_ 2bw-refined-d4 5 --stages 4 --replicas 1 --schedule 2bw -D train.batch=16 --microbatch-size 2 \
  -D train.flush_steps=2 -D train.predict=1
case_ pipedream-d4 4 --stages 4 --replicas 1 --schedule pipedream -D train.batch=16 --microbatch-size 2
case_ 1f1b-d2w2 3 --stages 2 --replicas 2 --schedule 1f1b -D train.batch=8 --microbatch-size 2
case_ 2bw-d2w2 4 --stages 2 --replicas 2 --schedule 2bw -D train.batch=8 --microbatch-size 2
case_ 1f1b-d2-recompute 3 --stages 2 --replicas 1 --schedule 1f1b -D train.batch=8 --microbatch-size 2 --recompute on
echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
