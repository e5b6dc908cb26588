#!/usr/bin/env bash
# Checkpoint metadata and headers a user can damage (issue 12): a step beyond
# --steps' range is an error naming the key and value, never a clamped INT64_MAX;
# resuming a finished run says there is nothing to train and exits 0; an llm.c
# header whose head count differs from the model's is refused naming both. The
# one-stage trainer (PLAN/reference) and the pipeline executor (PLAN) alike. A NaN or
# Inf in a checkpoint is refused naming the tensor (issue 24).
#   ckpt_meta.sh PD2BWC PD2BWRUN
set -u
PD2BWC=$1
RUN=$2
. "$(dirname "$0")/common.sh"
plan "$T/p" -D bsz=4 -D mbs=1 --stages 2 --replicas 1 --microbatches 4 --schedule 1f1b --recompute off || exit 1
expect() { # NAME RC PATTERN COMMAND...
  local name=$1 want=$2 pat=$3
  shift 3
  "$@" >"$T/out" 2>&1
  local rc=$?
  if [ $rc -eq "$want" ] && grep -q -- "$pat" "$T/out"; then
    ok "$name (exit $rc): $(grep -m1 -- "$pat" "$T/out")"
  else
    bad "$name: exit $rc (wanted $want), wanted /$pat/:"
    cat "$T/out"
  fi
}
# set_meta IN OUT KEY VALUE: a copy of a safetensors file with one metadata value changed
set_meta() {
  python3 - "$@" <<'PY'
import json, struct, sys
src, dst, key, value = sys.argv[1:]
b = open(src, "rb").read()
n = struct.unpack("<Q", b[:8])[0]
h = json.loads(b[8:8 + n])
h["__metadata__"][key] = value
t = json.dumps(h).encode()
t += b" " * (-len(t) % 8)
open(dst, "wb").write(struct.pack("<Q", len(t)) + t + b[8 + n:])
PY
}
for kind in one-stage pipeline; do
  dir=$T/p
  [ $kind = one-stage ] && dir=$T/p/reference
  train "$dir" 2 --save "$T/ck.st" >/dev/null 2>&1 || { bad "$kind: 2 steps with --save"; continue; }
  set_meta "$T/ck.st" "$T/huge.st" step 99999999999999999999
  expect "$kind: step 99999999999999999999 is refused" 1 \
    'huge.st: metadata step = "99999999999999999999": must be an integer 0..4611686018427387903' \
    train "$dir" 4 --resume "$T/huge.st"
  set_meta "$T/ck.st" "$T/neg.st" step " -3"
  expect "$kind: step ' -3' is refused" 1 'neg.st: metadata step = " -3": must be an integer' \
    train "$dir" 4 --resume "$T/neg.st"
  set_meta "$T/ck.st" "$T/seed.st" seed 18446744073709551616
  expect "$kind: a seed beyond 2^64-1 is refused" 1 'seed.st: metadata seed = "18446744073709551616"' \
    train "$dir" 4 --resume "$T/seed.st"
  expect "$kind: resuming at step 2 with --steps 2 has nothing to do" 0 \
    'ck.st is at step 2 already, --steps 2: nothing to train' train "$dir" 2 --resume "$T/ck.st"
  expect "$kind: resuming at step 2 with --steps 1 has nothing to do" 0 \
    'ck.st is at step 2 already, --steps 1: nothing to train' train "$dir" 1 --resume "$T/ck.st"
  expect "$kind: resuming at step 2 with --steps 3 trains" 0 'final loss' \
    "$RUN" "$dir" --data "$T/train.bin" --steps 3 --threads 1 --resume "$T/ck.st"
done
# A one-stage pd2bwc plan (the reference/ plan carries no CUDA program, so no head
# size: see RtStage.att_head_size)
plan "$T/one" -D bsz=4 -D mbs=1 --stages 1 --replicas 1 || exit 1
# An llm.c GPT-2 file for this model (V 256, T 8, L 3, C 16, 2 heads of 8) but with
# NH = 4 in its header: the tensors fit, the attention would not.
python3 - "$T/gpt2_nh4.bin" <<'PY'
import struct, sys
V, T, L, C, NH = 256, 8, 3, 16, 4
per_layer = C + C + 3 * C * C + 3 * C + C * C + C + C + C + 4 * C * C + 4 * C + 4 * C * C + C
n = V * C + T * C + L * per_layer + 2 * C
hdr = [20240326, 3, T, V, L, NH, C, V] + [0] * 248
open(sys.argv[1], "wb").write(struct.pack("<256i", *hdr) + b"\0" * (4 * n))
PY
for kind in one-stage pipeline; do
  dir=$T/p
  [ $kind = one-stage ] && dir=$T/one
  expect "$kind: an llm.c header with 4 heads into a 2-head model" 1 \
    'gpt2_nh4.bin: offset 20: the llm.c header has NH=4 attention heads (head size 4), the model 2 (head size 8' \
    train "$dir" 1 --init "$T/gpt2_nh4.bin"
done
# A NaN or an infinity in a checkpoint is refused naming the file, the tensor and the
# element (issue 24): --resume and --init (pd2bw's and llm.c's formats) and pd2bw-export,
# which exported it with exit 0; training it said only "training diverged".
EXPORT=$(dirname "$RUN")/pd2bw-export
train "$T/one" 2 --save "$T/good.st" >/dev/null 2>&1 || bad "one-stage: 2 steps with --save"
"$EXPORT" "$T/good.st" --heads 2 --llmc "$T/good.llmc.bin" >/dev/null 2>&1 || bad "export of good.st"
python3 - "$T/good.st" "$T/nan.st" "$T/inf.st" "$T/good.llmc.bin" "$T/nan.llmc.bin" <<'PY'
import json, struct, sys
good, nan_st, inf_st, llmc, nan_llmc = sys.argv[1:]
b = bytearray(open(good, "rb").read())
n = struct.unpack("<Q", b[:8])[0]
h = json.loads(b[8:8 + n])
at = 8 + n + h["lnf_w"]["data_offsets"][0] + 4 * 3  # element 3 of the final layer norm's weight
for path, x in ((nan_st, float("nan")), (inf_st, float("-inf"))):
    c = bytearray(b)
    c[at:at + 4] = struct.pack("<f", x)
    open(path, "wb").write(c)
m = bytearray(open(llmc, "rb").read())
m[1024 + 4 * 5:1024 + 4 * 6] = struct.pack("<f", float("nan"))  # wte, element 5
open(nan_llmc, "wb").write(m)
PY
expect "--resume of a NaN checkpoint" 1 'nan.st: tensor "lnf_w": element 3 is NaN' train "$T/one" 4 --resume "$T/nan.st"
expect "--init of an Inf checkpoint" 1 'inf.st: tensor "lnf_w": element 3 is infinite' train "$T/one" 4 --init "$T/inf.st"
expect "pipeline --resume of a NaN checkpoint" 1 'nan.st: tensor "lnf_w": element 3 is NaN' \
  train "$T/p" 4 --resume "$T/nan.st"
expect "--init of a NaN llm.c file" 1 'nan.llmc.bin: parameter "wte" (llm.c tensor #0.*element 5 is NaN' \
  train "$T/one" 4 --init "$T/nan.llmc.bin"
expect "pd2bw-export of a NaN checkpoint" 1 'nan.st: tensor "lnf_w": element 3 is NaN' \
  "$EXPORT" "$T/nan.st" --heads 2 --llmc "$T/nan-out.bin"
[ ! -e "$T/nan-out.bin" ] || bad "pd2bw-export left nan-out.bin behind"
finish
