#!/usr/bin/env bash
# pd2bwc as a user meets it: flags, exit statuses, messages, and the promise that
# a failed compile writes nothing. usage: pd2bwc_cli.sh PD2BWC (from the source root)
set -u
pd2bwc=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
pass=0 fail=0
ok() { pass=$((pass + 1)); }
bad() { echo "FAIL: $*"; fail=$((fail + 1)); }

# expect STATUS PATTERN -- command...: runs it, checks exit status and that
# stdout+stderr contains PATTERN (grep -E).
expect() {
  local want=$1 pattern=$2; shift 3
  local out rc
  out=$("$@" 2>&1); rc=$?
  if [ "$rc" != "$want" ]; then bad "$* exited $rc, expected $want: $out"; return; fi
  if ! grep -qE -- "$pattern" <<<"$out"; then bad "$*: output lacks /$pattern/: $out"; return; fi
  ok
}

expect 0 'usage: pd2bwc MODEL' -- "$pd2bwc" --help
expect 0 '^pd2bwc [0-9]+\.[0-9]+' -- "$pd2bwc" --version
expect 1 "unknown option '--bogus'" -- "$pd2bwc" models/mlp.model --bogus -o "$work/x"
expect 1 'no output directory' -- "$pd2bwc" models/mlp.model
expect 1 'no model file' -- "$pd2bwc" -o "$work/x"
expect 1 "--schedule takes gpipe, 1f1b, 2bw or pipedream, got 'zerobubble'" -- "$pd2bwc" models/mlp.model --schedule zerobubble -o "$work/x"
expect 1 "--stages needs an integer from 1 to 1048576, got '0'" -- "$pd2bwc" models/mlp.model --stages 0 -o "$work/x"
expect 1 "--microbatches needs an integer from 1 to 2147483647, got '-2'" -- "$pd2bwc" models/mlp.model --microbatches -2 -o "$work/x"
expect 1 "--emit takes 'ast' or 'ir'" -- "$pd2bwc" models/mlp.model --emit=llvm
expect 1 "no pass named 'nope'" -- "$pd2bwc" models/mlp.model --print-ir-after=nope -o "$work/x"
expect 1 'cannot open' -- "$pd2bwc" models/does-not-exist.model -o "$work/x"
[ ! -e "$work/x" ] && ok || bad "a failed compile left $work/x behind"

# A successful compile writes a plan; the GPT-2 medium count is exact.
expect 0 'model gpt: 354,823,168 parameters' -- "$pd2bwc" models/gpt.model -o "$work/gpt"
grep -q '"parameters":[[:space:]]*354823168' "$work/gpt/plan.json" && ok || bad "plan.json lacks the parameter count"
grep -q '"version":[[:space:]]*1' "$work/gpt/plan.json" && ok || bad "plan.json lacks its version"
# The paper's larger shapes: 12·L·h² + 13·L·h + (V + T)·h + 2·h with V=50257, T=1024.
for shape in "24 2048 16" "32 2304 32" "32 3072 32"; do
  set -- $shape
  L=$1 h=$2 heads=$3
  want=$((12 * L * h * h + 13 * L * h + (50257 + 1024) * h + 2 * h))
  "$pd2bwc" models/gpt.model -D layers=$L -D dim=$h -D heads=$heads --emit=ir >/dev/null 2>&1 || { bad "gpt $shape does not compile"; continue; }
  "$pd2bwc" models/gpt.model -D layers=$L -D dim=$h -D heads=$heads -q \
      --cluster models/clusters/v100x64.cluster -o "$work/g$L$h" >/dev/null 2>&1
  grep -q "\"parameters\":[[:space:]]*$want\$\|\"parameters\":[[:space:]]*$want," "$work/g$L$h/plan.json" 2>/dev/null && ok ||
    bad "gpt $shape: expected $want parameters in plan.json"
done

# A bad model over an existing plan: the old plan stays as it was.
cp "$work/gpt/plan.json" "$work/before.json"
printf 'model broken {\n  param x = ;\n}\n' >"$work/broken.model"
expect 1 'broken.model:2:[0-9]+: error:' -- "$pd2bwc" "$work/broken.model" -o "$work/gpt"
cmp -s "$work/gpt/plan.json" "$work/before.json" && ok || bad "a failed compile changed the existing plan"
ls "$work" | grep -q '\.tmp\.' && bad "a temporary plan directory was left behind" || ok

# -D of something that is not a param; --emit=ir; --print-ir-after.
expect 1 'nosuch' -- "$pd2bwc" models/mlp.model -D nosuch=3 -o "$work/m"
expect 0 'cross_entropy' -- "$pd2bwc" models/mlp.model --emit=ir
expect 0 'IR after autodiff' -- "$pd2bwc" models/mlp.model --print-ir-after=autodiff -o "$work/m"
expect 0 'linear_dw' -- "$pd2bwc" models/mlp.model --print-ir-after=autodiff -o "$work/m"

# --gemm-epilogues: on|off only, CUDA programs only; plan.json and the list record it
expect 1 "--gemm-epilogues takes on or off, got 'yes'" -- "$pd2bwc" models/mlp.model --gemm-epilogues yes -o "$work/x"
expect 1 "--gemm-epilogues on applies to the CUDA programs" -- \
  "$pd2bwc" models/mlp.model --backend cpu --gemm-epilogues on -o "$work/x"
expect 0 '' -- "$pd2bwc" models/mlp.model --gemm-epilogues on -q -o "$work/epi"
grep -q '"gemm_epilogues":[[:space:]]*"on"' "$work/epi/plan.json" && ok || bad "plan.json lacks gemm_epilogues on"
grep -q '"epilogue":[[:space:]]*"bias"' "$work/epi/stage0.launch.json" && ok || bad "the MLP's launch list has no bias epilogue"

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
