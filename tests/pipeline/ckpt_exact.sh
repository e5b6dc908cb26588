#!/usr/bin/env bash
# A checkpoint must match the plan's model exactly (issue 24, item 5): a tensor the
# model does not have is refused as a missing one is, by --resume (every mode) and by
# --init of a pd2bw checkpoint, naming the file, the count and the first tensors. Before,
# resuming a 3-layer run into a 2-layer plan dropped h.2.* and its optimizer state and
# trained on (exit 0). What belongs to the model's parameters is not extra: opt.m.*,
# opt.v.*, and 2bw's prev.* and next.* (weight prediction), whatever the plan's schedule.
#   ckpt_exact.sh PD2BWC PD2BWRUN
set -u
PD2BWC=$1
RUN=$2
. "$(dirname "$0")/common.sh"
plan "$T/big" -D bsz=8 -D mbs=1 --stages 2 --replicas 1 --microbatches 8 --schedule 2bw --recompute off || exit 1
plan "$T/small" -D layers=2 -D bsz=8 -D mbs=1 --stages 2 --replicas 1 --microbatches 8 --schedule 2bw \
  --recompute off || exit 1
plan "$T/gpipe" -D bsz=8 -D mbs=1 --stages 2 --replicas 1 --microbatches 8 --schedule gpipe --recompute off || exit 1
train "$T/big" 2 --save "$T/big.st" >/dev/null 2>&1 || { bad "training the 3-layer plan"; finish; exit 1; }
python3 - "$T/big.st" "$T/junk.st" <<'PY' || exit 1
import json, struct, sys
src, dst = sys.argv[1:]
b = open(src, "rb").read()
n = struct.unpack("<Q", b[:8])[0]
hdr, body = json.loads(b[8:8 + n]), b[8 + n:]
hdr["junk"] = {"dtype": "F32", "shape": [1], "data_offsets": [len(body), len(body) + 4]}
body += struct.pack("<f", 1.0)
h = json.dumps(hdr).encode()
h += b" " * (-len(h) % 8)
open(dst, "wb").write(struct.pack("<Q", len(h)) + h + body)
PY
refused() { # NAME WANT RUN-ARGS...: exit 1, one error line holding WANT
  local name=$1 want=$2
  shift 2
  timeout -s KILL 60 "$RUN" "$@" --data "$T/train.bin" --steps 4 --threads 1 -q >"$T/out" 2>&1
  local rc=$?
  if [ $rc -eq 1 ] && grep -qF -- "$want" "$T/out" && [ "$(grep -c error "$T/out")" -eq 1 ]; then
    ok "$name: $(grep -m1 error "$T/out")"
  else
    bad "$name: exit $rc, wanted exit 1 with: $want"
    tail -3 "$T/out"
  fi
}
many="60 tensors of no parameter of this plan's model"
refused "--resume of 3 layers into 2, pipeline" "$T/big.st: $many" "$T/small" --resume "$T/big.st"
grep -q "h.2." "$T/out" && grep -q "Refusing rather than dropping them" "$T/out" && ok "it names h.2.*" ||
  bad "the message names no h.2.* tensor"
refused "--resume of 3 layers into 2, one stage" "$many" "$T/small/reference" --resume "$T/big.st"
refused "--init of 3 layers into 2" "60 tensors of no parameter of the model" "$T/small" --init "$T/big.st"
refused "--init of 3 layers into 2, one stage" "60 tensors of no parameter of the model" "$T/small/reference" \
  --init "$T/big.st"
refused "--resume with a foreign tensor" "1 tensor of no parameter of this plan's model (\"junk\")" "$T/big" \
  --resume "$T/junk.st"
refused "--init with a foreign tensor" "(\"junk\")" "$T/big" --init "$T/junk.st"
# what is the model's loads: 2bw's own checkpoint (prev.*, next.*) on 2bw, gpipe, one stage
check "--resume into the same plan" train "$T/big" 4 --resume "$T/big.st"
check "--resume of a 2bw checkpoint into gpipe" train "$T/gpipe" 4 --resume "$T/big.st"
check "--resume into the one-stage reference" train "$T/big/reference" 4 --resume "$T/big.st"
check "--init from a whole pd2bw checkpoint" train "$T/big" 2 --init "$T/big.st"
finish
