#!/usr/bin/env bash
# Checkpoints across partitions: a checkpoint written by one (d, w, schedule) loads
# into a plan with another partition and into the sequential executor with identical
# weights, and training continues with the same semantics (2bw: both versions).
#   ckpt.sh PD2BWC PD2BWRUN
set -u
PD2BWC=$1
RUN=$2
. "$(dirname "$0")/common.sh"
same_tensors() { # A B: every tensor of A is in B with the same bytes (metadata aside)
  python3 - "$1" "$2" <<'PY'
import json, struct, sys
def load(p):
    b = open(p, "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    h = json.loads(b[8:8 + n]); h.pop("__metadata__", None)
    return {k: b[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]] for k, v in h.items()}
a, b = load(sys.argv[1]), load(sys.argv[2])
bad = [k for k in a if a[k] != b.get(k)]
print("%d tensors, %d differ %s" % (len(a), len(bad), bad[:5]))
sys.exit(1 if bad or not a else 0)
PY
}
plan "$T/a" -D bsz=2 -D mbs=1 --stages 2 --replicas 1 --microbatches 2 --schedule 2bw --recompute off || exit 1
plan "$T/b" -D bsz=6 -D mbs=1 --stages 3 --replicas 2 --microbatches 3 --schedule 2bw --recompute off || exit 1
plan "$T/c" -D bsz=4 -D mbs=1 --stages 4 --replicas 1 --microbatches 4 --schedule 1f1b --recompute off || exit 1
plan "$T/g" -D bsz=2 -D mbs=1 --stages 2 --replicas 1 --microbatches 2 --schedule gpipe --recompute off || exit 1
# note: a, b and c have different global batches; the checkpoint holds weights and
# optimizer state, which do not depend on it.
check "2bw d=2 saves after 3 steps" train "$T/a" 3 --reference --save "$T/a.st"
check "2bw d=3 w=2 loads it and re-saves identical tensors" train "$T/b" 3 --resume "$T/a.st" --save "$T/b.st"
check "  ... identical (weights, both versions, AdamW moments)" same_tensors "$T/a.st" "$T/b.st"
check "2bw d=3 w=2 continues to step 6 and matches the reference resumed from it" \
  train "$T/b" 6 --reference --resume "$T/a.st"
check "1f1b d=4 continues a 2bw checkpoint (newest version) and matches the reference" \
  train "$T/c" 6 --reference --resume "$T/a.st"
check "gpipe d=2 saves after 3 steps" train "$T/g" 3 --save "$T/g.st"
check "the one-stage trainer resumes the 2bw pipeline's checkpoint" \
  "$RUN" "$T/a/reference" --data "$T/train.bin" --steps 4 --threads 1 -q --resume "$T/a.st"
if out=$(train "$T/a" 5 --resume "$T/g.st" 2>&1); then
  bad "2bw refuses a one-version checkpoint at step 3"
  echo "$out"
elif grep -q "prev.wte\|prev\.[a-z]" <<<"$out" && grep -q "W(t-1)" <<<"$out"; then
  ok "2bw refuses a one-version checkpoint at step 3: $(grep -o 'no tensor.*' <<<"$out" | head -1)"
else
  bad "2bw refusal message"
  echo "$out"
fi
finish
