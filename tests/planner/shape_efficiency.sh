#!/usr/bin/env bash
# Issue 14, "efficiency depends on shape": compute was exactly linear in the
# microbatch size b (GPT 2.2B's block forward 4.32 ms at b=1, 34.54 at b=8), so every
# free choice took b=1. With per-op costs (GEMM efficiency and latency, kernel
# launches: docs/cluster.md "Compute") a sample costs less at a larger b on the
# bundled GPU cluster, and the free choice for GPT 1.3B on h200x8 takes b > 1.
# usage: shape_efficiency.sh PD2BWC   (run from the source root)
set -u
pd2bwc=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# gpt.model with the microbatch size left to the planner
sed 's/^ *microbatch = .*$//' models/gpt.model >"$work/gpt.model"
G13="-D seq=512 -D layers=24 -D dim=2048 -D heads=16"
fail=0
fwd_per_sample() { # B: stage 0's forward time per sample, in ms, with b = B pinned
  "$pd2bwc" "$work/gpt.model" $G13 --cluster models/clusters/h200x8.cluster --stages 1 --replicas 1 \
    --microbatch-size "$1" --schedule 1f1b -q -o "$work/b$1" || return 1
  python3 -c 'import json,sys; p=json.load(open(sys.argv[1])); print(1e3*p["stages"][0]["fwd_time_s"]/int(sys.argv[2]))' \
    "$work/b$1/plan.json" "$1"
}
f1=$(fwd_per_sample 1) && f8=$(fwd_per_sample 8) || { echo "FAIL: pd2bwc failed"; exit 1; }
echo "forward per sample: b=1 $f1 ms, b=8 $f8 ms"
if ! python3 -c "import sys; sys.exit(0 if $f8 < 0.9 * $f1 else 1)"; then
  echo "FAIL: a sample's forward costs $f8 ms at b=8, not clearly less than $f1 ms at b=1"; fail=1
fi
"$pd2bwc" "$work/gpt.model" $G13 --cluster models/clusters/h200x8.cluster -q -o "$work/free" || exit 1
b=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["config"]["microbatch_size"])' "$work/free/plan.json")
echo "free choice, B=512: microbatch $b"
if [ "$b" -le 1 ]; then echo "FAIL: the free choice took microbatch $b"; fail=1; fi
[ "$fail" -eq 0 ] && echo "PASS"
exit "$fail"
