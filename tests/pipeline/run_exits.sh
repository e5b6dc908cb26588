#!/usr/bin/env bash
# tests/pipeline/run_exits.sh PD2BWC RUN_EXITS — the ways out of a rank's run on a plan
# of 2 stages x 2 replicas (run_exits.c).
set -u
PD2BWC=$1 EXITS=$2
SRC=$(cd "$(dirname "$0")" && pwd)
T=$(mktemp -d /tmp/pd2bw-exits-XXXXXX)
trap 'rm -rf "$T"' EXIT
export PD2BW_CACHE=${PD2BW_CACHE:-/tmp/pd2bw-test-cache-$(id -u)}
python3 - "$T/train.bin" <<'PY' || exit 1
import struct, sys
text = b"Every way out of a rank's run undoes what the run made, in one place. " * 40
open(sys.argv[1], "wb").write(struct.pack("<%dH" % len(text), *text))
PY
"$PD2BWC" "$SRC/tinygpt.model" -q -D layers=2 -D dim=16 -D seq=8 -D heads=2 --cluster "$SRC/cpu8.cluster" \
  --stages 2 --replicas 2 --schedule 1f1b -D train.batch=8 --microbatch-size 2 -o "$T/plan" || exit 1
"$EXITS" "$T/plan" "$T/train.bin" "$T"
