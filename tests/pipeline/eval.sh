#!/usr/bin/env bash
# Validation through the pipeline (pd2bwrun --val-data --eval-every, runtime/pipeline/pipeline_eval.h):
# the pipelined validation loss equals the one-stage trainer's on the same weights
# (gpipe: PLAN/reference; 2bw: a one-stage 2bw plan of the same global batch, whose
# trainer evaluates the newest version W(t+1) as the pipeline does), and evaluating
# changes nothing in training.
#   eval.sh PD2BWC PD2BWRUN
set -u
PD2BWC=$1
RUN=$2
. "$(dirname "$0")/common.sh"
. "$(dirname "$0")/logs.sh"
python3 - "$T/val.bin" "$T/short.bin" <<'PY' || exit 1
import struct, sys
v = b"Held-out text, not the training text: it gives the validation loss. " * 40
open(sys.argv[1], "wb").write(struct.pack("<%dH" % len(v), *v))
s = v[:70]  # 8 windows of 8 tokens: 2 batches of 4 samples, fewer than the default 8
open(sys.argv[2], "wb").write(struct.pack("<%dH" % len(s), *s))
PY
V=(--val-data "$T/val.bin" --eval-batches 3)
seq1() { # DIR BSZ: the one-stage 2bw plan with the pipeline's global batch
  plan "$1" -D bsz="$2" -D mbs=1 --stages 1 --replicas 1 --microbatches "$2" --schedule 2bw --recompute off
}
plan "$T/g" -D bsz=4 -D mbs=1 --stages 2 --replicas 2 --microbatches 2 --schedule gpipe --recompute off || exit 1
plan "$T/a" -D bsz=8 -D mbs=1 --stages 2 --replicas 2 --microbatches 4 --schedule 2bw --recompute off || exit 1
plan "$T/c" -D bsz=3 -D mbs=1 --stages 3 --replicas 1 --microbatches 3 --schedule 2bw --recompute on || exit 1
seq1 "$T/a1" 8 || exit 1
seq1 "$T/c1" 3 || exit 1

train "$T/g" 4 "${V[@]}" --eval-every 2 --log-json "$T/g.json" >/dev/null
"$RUN" "$T/g/reference" --data "$T/train.bin" --steps 4 --threads 1 -q "${V[@]}" --eval-every 2 \
  --log-json "$T/g.ref.json" >/dev/null
check "gpipe d=2 w=2: val loss after steps 2 and 4 = the one-stage trainer's on PLAN/reference" \
  same_log val_loss 1e-5 "$T/g.json" "$T/g.ref.json"
check "  ... and the training losses too" same_log loss 1e-5 "$T/g.json" "$T/g.ref.json"

train "$T/a" 5 "${V[@]}" --eval-every 2 --log-json "$T/a.json" --save "$T/a.st" >"$T/a.out"
"$RUN" "$T/a1" --data "$T/train.bin" --steps 5 --threads 1 -q "${V[@]}" --eval-every 2 --log-json "$T/a1.json" >/dev/null
check "2bw d=2 w=2: val loss of the newest version W(t+1) after steps 2, 4, 5 = the one-stage 2bw trainer's" \
  same_log val_loss 1e-5 "$T/a.json" "$T/a1.json"
train "$T/a" 5 --log-json "$T/a.noeval.json" --save "$T/a.noeval.st" >/dev/null
check "evaluating does not change training: the same losses as a run without --val-data" \
  same_log loss 0 "$T/a.json" "$T/a.noeval.json"
check "  ... and the same checkpoint, byte for byte" cmp "$T/a.st" "$T/a.noeval.st"
want=$(python3 -c 'import sys; print("%.4f" % float(sys.argv[1]))' "$(log_value val_loss 5 "$T/a.json")")
check "the final validation loss is printed ($want)" grep -q "^pd2bwrun: validation loss $want\$" "$T/a.out"
check "resumed at --steps: nothing to train, the weights are evaluated ($want)" \
  bash -c "'$RUN' '$T/a' --data '$T/train.bin' --steps 5 --threads 1 -q --resume '$T/a.st' --val-data '$T/val.bin' \
    --eval-batches 3 | grep -q '^pd2bwrun: validation loss $want\$'"

train "$T/a" 3 --save "$T/a3.st" >/dev/null
train "$T/a" 5 "${V[@]}" --eval-every 2 --resume "$T/a3.st" --log-json "$T/ar.json" >/dev/null
check "resumed at step 3: the val losses after steps 4 and 5 are the uninterrupted run's" \
  test "$(log_value val_loss 4 "$T/ar.json") $(log_value val_loss 5 "$T/ar.json")" = \
  "$(log_value val_loss 4 "$T/a.json") $(log_value val_loss 5 "$T/a.json")"

train "$T/c" 4 --val-data "$T/short.bin" --eval-every 3 --log-json "$T/c.json" >/dev/null
"$RUN" "$T/c1" --data "$T/train.bin" --steps 4 --threads 1 -q --val-data "$T/short.bin" --eval-every 3 \
  --log-json "$T/c1.json" >/dev/null
check "2bw d=3 with recomputation, a short file (2 batches < the default 8): = the one-stage trainer's" \
  same_log val_loss 1e-5 "$T/c.json" "$T/c1.json"

plan "$T/p" -D bsz=3 -D mbs=1 --stages 3 --replicas 1 --microbatches 3 --schedule pipedream --recompute off || exit 1
train "$T/p" 5 "${V[@]}" --eval-every 2 --save "$T/p.st" >/dev/null
train "$T/p" 5 --save "$T/p.noeval.st" >/dev/null
check "pipedream d=3 (weight stashing, versions in any slot): evaluating leaves the checkpoint unchanged" \
  cmp "$T/p.st" "$T/p.noeval.st"

if out=$(train "$T/a" 2 --val-data "$T/missing.bin" 2>&1); then
  bad "a missing validation file fails"
else
  grep -q "missing.bin" <<<"$out" && ok "a missing validation file: $(head -1 <<<"$out")" ||
    { bad "missing-file message"; echo "$out"; }
fi
finish
