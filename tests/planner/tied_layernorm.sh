#!/usr/bin/env bash
# A layernorm gain shared by every repeat copy (tied_layernorm.model) compiles (the
# C and CUDA programs both) and trains, split over 3 stages, matching the one-stage
# sequential reference (pd2bwrun --reference); the gradients themselves are checked
# against finite differences in tests/codegen (test_tied_params_gradcheck_f64).
#   tied_layernorm.sh PD2BWC PD2BWRUN
set -u
PD2BWC=$1
RUN=$2
SRC=$(cd "$(dirname "$0")" && pwd)
T=$(mktemp -d /tmp/pd2bw-tiedln-XXXXXX)
trap 'rm -rf "$T"' EXIT
export PD2BW_CACHE=${PD2BW_CACHE:-/tmp/pd2bw-test-cache-$(id -u)}
python3 - "$T/train.bin" <<'PY' || exit 1
import struct, sys
text = b"PipeDream-2BW keeps two weight versions per stage. " * 100
open(sys.argv[1], "wb").write(struct.pack("<%dH" % len(text), *text))
PY
if ! "$PD2BWC" "$SRC/tied_layernorm.model" -q --cluster "$SRC/../pipeline/cpu8.cluster" --stages 3 \
  --replicas 1 --microbatches 4 --schedule 2bw -o "$T/plan"; then
  echo "FAIL pd2bwc on the tied-gain model"
  exit 1
fi
if ! "$RUN" "$T/plan" --data "$T/train.bin" --steps 3 --threads 1 -q --reference --reference-tol 1e-5 >"$T/out" 2>&1; then
  echo "FAIL training against the reference:"
  cat "$T/out"
  exit 1
fi
grep "^reference: worst" "$T/out"
