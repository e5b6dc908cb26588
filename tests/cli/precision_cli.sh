#!/usr/bin/env bash
# pd2bwc --precision and the planner (passes/planner.h, docs/plan-format.md):
#  - cluster-file peak errors (both forms, unknown key, per-precision peaks without
#    tflops_fp32, no peak at all, bf16 on the V100 clusters) name file:line, exit 1
#    and write nothing;
#  - plan.json records the precision and its peak; every stage's memory section has
#    cuda_scratch, equal to the launch list's blocks.cuda_scratch (what the CUDA
#    runtimes allocate for it: cx_program_block(CX_SCRATCH)) and device_bytes = the
#    arena's buffers + cuda_scratch, each rounded up to 256 bytes, + (bf16) the bf16
#    weight copies, weights_bf16 = versions x the launch list's params_bf16 (params/2)
#    rounded up to 256, + cuBLAS's
#    workspace (32 MiB, the default of cublas_workspace_mib); the LM head's stage
#    stages no copy of its dlogits (the stash holds it as bf16); --backend cpu plans:
#    cuda_scratch 0, fp32.
# usage: precision_cli.sh PD2BWC (from the source root)
set -u
pd2bwc=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
pass=0 fail=0
ok() { pass=$((pass + 1)); }
bad() { echo "FAIL: $*"; fail=$((fail + 1)); }

# expect STATUS PATTERN -- command...: exit status and a line matching PATTERN (grep -E)
expect() {
  local want=$1 pattern=$2; shift 3
  local out rc
  out=$("$@" 2>&1); rc=$?
  if [ "$rc" != "$want" ]; then bad "$* exited $rc, expected $want: $out"; return; fi
  if ! grep -qE -- "$pattern" <<<"$out"; then bad "$*: output lacks /$pattern/: $out"; return; fi
  ok
}

cluster() { # NAME LINES...: a one-device cluster file with the given peak lines
  local name=$1
  shift
  {
    echo "# test cluster"
    echo "cluster $name {"
    echo "  nodes = 1; devices_per_node = 2; memory_gib = 16;"
    for l in "$@"; do echo "  $l"; done
    echo "  memory_gbs = 900; intra_node_gbs = 10; inter_node_gbs = 1;"
    echo "}"
  } >"$work/$name.cluster"
}
small=(models/gpt.model -D layers=2 -D dim=64 -D heads=2 -D seq=32 -q)

cluster both "tflops = 100;" "tflops_bf16 = 200;"
expect 1 "both\.cluster:5:3: error: cluster 'both' sets both 'tflops' and 'tflops_bf16'" -- \
  "$pd2bwc" "${small[@]}" --cluster "$work/both.cluster" -o "$work/x"
cluster unknown "tflops_fp32 = 10;" "tflops_fp16 = 125;"
expect 1 "unknown\.cluster:5:3: error: unknown cluster key 'tflops_fp16'" -- \
  "$pd2bwc" "${small[@]}" --cluster "$work/unknown.cluster" -o "$work/x"
cluster nofp32 "tflops_tf32 = 100;" "tflops_bf16 = 200;"
expect 1 "nofp32\.cluster:4:3: error: cluster 'nofp32' sets 'tflops_tf32' but not 'tflops_fp32'" -- \
  "$pd2bwc" "${small[@]}" --cluster "$work/nofp32.cluster" -o "$work/x"
cluster nopeak
expect 1 "nopeak\.cluster:2:9: error: cluster 'nopeak' does not set its compute peak" -- \
  "$pd2bwc" "${small[@]}" --cluster "$work/nopeak.cluster" -o "$work/x"
for v in v100x8 v100x64; do
  expect 1 "models/clusters/$v\.cluster:[0-9]+:1: error: --precision bf16: cluster '$v' \(device V100-16GB\) gives no bf16 peak" -- \
    "$pd2bwc" "${small[@]}" --cluster "models/clusters/$v.cluster" --precision bf16 -o "$work/x"
  expect 0 "" -- "$pd2bwc" "${small[@]}" --cluster "models/clusters/$v.cluster" --precision tf32 -o "$work/v"
done
[ ! -e "$work/x" ] && ok || bad "a failed compile left $work/x behind"
# per-precision peaks parse and are charged: fp32-only clusters run tf32 at the fp32 rate
cluster perprec "tflops_fp32 = 10;"
expect 0 "precision tf32 \(10 TFLOP/s\)" -- "$pd2bwc" models/mlp.model --cluster "$work/perprec.cluster" -o "$work/pp"

# The memory section against the launch lists: bf16 on two stages of a GPT whose LM
# head (vocab 50257 x 64) dwarfs its blocks, tf32, and the CPU programs.
check_plan() { # DIR PRECISION
  python3 - "$1" "$2" <<'PY'
import json, sys
d, prec = sys.argv[1], sys.argv[2]
plan = json.load(open(d + "/plan.json"))
up = lambda n: (n + 255) // 256 * 256
assert plan["precision"] == prec.split("-")[0], plan["precision"]
assert plan["peak_flops"] > 0
cs = []
for i, st in enumerate(plan["stages"]):
    mem = st["memory"]
    arena = sum(up(b["size"]) for b in mem["buffers"])
    assert mem["total_bytes"] == arena, (i, mem["total_bytes"], arena)
    if prec == "fp32-cpu":
        assert mem["cuda_scratch"] == 0 and "cuda" not in st["program"], mem
    else:
        lst = json.load(open("%s/stage%d.launch.json" % (d, i)))
        assert mem["cuda_scratch"] == lst["blocks"]["cuda_scratch"], (i, mem["cuda_scratch"], lst["blocks"])
        assert mem["cuda_scratch"] == st["program"]["cuda"]["cuda_scratch"]
        assert lst["gemm_dtype"] == prec
    # plus cuBLAS's workspace for the compute stream: 32 MiB unless the cluster says
    cublas = 0 if prec == "fp32-cpu" else 32 << 20
    # and with bf16 the bf16 copy of each weight version (the launch list's params_bf16 block)
    w16 = 0
    if prec == "bf16":
        w16 = st["weight_versions"] * up(lst["blocks"]["params_bf16"])
        assert lst["blocks"]["params_bf16"] * 2 == lst["blocks"]["params"], lst["blocks"]
        assert mem["weights_bf16"] == w16, (i, mem, w16)
    else:
        assert "weights_bf16" not in mem, mem
    assert mem["device_bytes"] == arena + up(mem["cuda_scratch"]) + w16 + cublas, (i, mem)
    cs.append(mem["cuda_scratch"])
if prec == "bf16":  # the LM head's GEMMs stage nothing: its dlogits (b x 32 x 50257)
    # stays in the logits' stash slot (passes/layout.h, "the classifier's gradient in the stash")
    assert cs[-1] < plan["config"]["microbatch_size"] * 32 * 50257 * 2, cs
print(prec, cs)
PY
}
for prec in bf16 tf32; do
  if "$pd2bwc" "${small[@]}" --cluster models/clusters/cpu2.cluster --stages 2 --precision $prec -o "$work/p$prec" &&
    check_plan "$work/p$prec" $prec >"$work/check.out" 2>&1; then ok; else bad "$prec plan: $(cat "$work/check.out")"; fi
  grep -qE '^  cuda_scratch +0 +\(beside the arena\) +size +[1-9]' "$work/p$prec/memory.txt" && ok ||
    bad "$prec: memory.txt lacks the cuda_scratch line"
done
if "$pd2bwc" "${small[@]}" --cluster models/clusters/cpu2.cluster --stages 2 --backend cpu -o "$work/pcpu" &&
  check_plan "$work/pcpu" fp32-cpu >"$work/check.out" 2>&1; then ok; else bad "cpu plan: $(cat "$work/check.out")"; fi
grep -q '"precision":[[:space:]]*"fp32"' "$work/pcpu/plan.json" && ok || bad "a --backend cpu plan is not fp32"

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
