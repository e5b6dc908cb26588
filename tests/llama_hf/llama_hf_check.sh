#!/usr/bin/env bash
# pd2bw's Llama against an implementation nobody here wrote: for each fixture of
# tests/llama_hf/ (a transformers LlamaForCausalLM saved with save_pretrained, and the
# step-0 loss and 20-step torch.optim.AdamW trajectory transformers gave on its tokens;
# gen_fixtures.py wrote them), pd2bwc plans models/llama.model with the fixture's shape,
# head (tied=1 or 0) and train settings (ref.json's defines) and pd2bwrun trains it from
# the fixture (--init DIR):
#   - one stage, 1f1b: the step-0 loss within 1e-5 (relative) of transformers', every
#     step's loss within 1e-4 of the PyTorch trajectory;
#   - 4 stages, 1f1b (8-device cluster, on threads): the PyTorch trajectory within 1e-4,
#     and its sequential reference (pd2bwrun on PLAN/reference, the same --init) within 1e-5;
#   - 2 stages, 2bw (flushed start 2, prediction 1): the one-stage trainer on a 2bw plan
#     with the same rule within 1e-5 (the stale rule is not PyTorch's AdamW);
# and the tied fixture into a plan with its own head is refused (tie_word_embeddings).
# No torch needed. Every data.bin holds exactly one batch, so each step trains on it.
#   usage: llama_hf_check.sh PD2BWC PD2BWRUN   (from the source root)
set -u
PD2BWC=$1 RUN=$2
T=$(mktemp -d "${TMPDIR:-/tmp}/pd2bw-llamahf-XXXXXX")
FAILED=0
fail() { echo "FAIL: $*" >&2; FAILED=$((FAILED + 1)); }

# defines FIXTURE: ref.json's pd2bwc -D settings
defines() { python3 -c 'import json,sys; r=json.load(open(sys.argv[1]+"/ref.json"))
print(" ".join("-D %s=%s" % kv for kv in r["defines"].items()))' "$1"; }
# compare NAME LOG WANT TOL [STEP0_REL]: WANT is ref.json (its losses) or another log
compare() {
  python3 - "$@" <<'EOF'
import json, sys
name, log, want, tol = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
step0 = float(sys.argv[5]) if len(sys.argv) > 5 else None
losses = lambda f: [json.loads(l)["loss"] for l in open(f) if l.strip()]
got = losses(log)
if want.endswith("ref.json"):
    ref = json.load(open(want))
    exp, s0 = ref["losses"], ref["step0_loss"]
else:
    exp, s0 = losses(want), None
if len(got) != len(exp):
    sys.exit(f"{name}: {len(got)} steps logged, {len(exp)} expected")
worst = max(range(len(got)), key=lambda i: abs(got[i] - exp[i]) / max(1.0, abs(exp[i])))
err = abs(got[worst] - exp[worst]) / max(1.0, abs(exp[worst]))
msg = f"{name}: worst step {worst}: {got[worst]:.8f} vs {exp[worst]:.8f} ({err:.2e}, tolerance {tol:g})"
bad = err > tol
if step0 is not None:
    rel = abs(got[0] - s0) / abs(s0)
    msg += f"; step 0 {got[0]:.8f} vs transformers {s0:.8f} ({rel:.2e} relative, tolerance {step0:g})"
    bad = bad or rel > step0
print(msg)
sys.exit(1 if bad else 0)
EOF
}
# plan NAME MODEL FIXTURE ARGS...: pd2bwc into $T/NAME
plan() {
  local name=$1 model=$2 fix=$3
  shift 3
  # shellcheck disable=SC2046
  "$PD2BWC" "$model" $(defines "$fix") -q -o "$T/$name" "$@" >"$T/$name.out" 2>&1 ||
    { fail "pd2bwc $name: $(cat "$T/$name.out")"; return 1; }
}
# train PLAN FIXTURE LOG: 20 steps from the fixture
train() {
  timeout -k 5 300 "$RUN" "$1" --init "$2" --data "$2/data.bin" --steps 20 --threads 1 -q \
    --log-json "$3" >"$3.out" 2>&1 || { fail "pd2bwrun $1: $(cat "$3.out")"; return 1; }
}

for fix in tests/llama_hf/gqa_untied tests/llama_hf/mha_odd_tied; do
  s=$(basename "$fix")
  model=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]+"/ref.json"))["model"])' "$fix")
  # one stage against transformers and PyTorch
  plan "$s.s1" "$model" "$fix" --cluster models/clusters/cpu2.cluster --stages 1 --replicas 1 --schedule 1f1b &&
    train "$T/$s.s1" "$fix" "$T/$s.s1.jsonl" &&
    { compare "$s, 1 stage 1f1b vs PyTorch" "$T/$s.s1.jsonl" "$fix/ref.json" 1e-4 1e-5 || fail "$s one stage"; }
  # 4 stages, 1f1b: PyTorch and the sequential reference
  plan "$s.p4" "$model" "$fix" --cluster models/clusters/v100x8.cluster --stages 4 --replicas 1 --schedule 1f1b &&
    train "$T/$s.p4" "$fix" "$T/$s.p4.jsonl" && train "$T/$s.p4/reference" "$fix" "$T/$s.p4ref.jsonl" &&
    { compare "$s, 4 stages 1f1b vs PyTorch" "$T/$s.p4.jsonl" "$fix/ref.json" 1e-4 || fail "$s 4 stages vs PyTorch"; } &&
    { compare "$s, 4 stages 1f1b vs its reference" "$T/$s.p4.jsonl" "$T/$s.p4ref.jsonl" 1e-5 ||
      fail "$s 4 stages vs reference"; }
  # 2 stages, 2bw, against the one-stage trainer under the same rule
  rule=(-D train.flush_steps=2 -D train.predict=1)
  plan "$s.p2" "$model" "$fix" --cluster models/clusters/cpu2.cluster --stages 2 --replicas 1 --schedule 2bw "${rule[@]}" &&
    plan "$s.s2bw" "$model" "$fix" --cluster models/clusters/cpu2.cluster --stages 1 --replicas 1 --schedule 2bw "${rule[@]}" &&
    train "$T/$s.p2" "$fix" "$T/$s.p2.jsonl" && train "$T/$s.s2bw" "$fix" "$T/$s.s2bw.jsonl" &&
    { compare "$s, 2 stages 2bw vs 1 stage 2bw" "$T/$s.p2.jsonl" "$T/$s.s2bw.jsonl" 1e-5 || fail "$s 2bw"; }
  # the cuts: 2bw's two stages and 1f1b's four each hold a part of the layers
  python3 -c 'import json,sys; p=json.load(open(sys.argv[1]+"/plan.json")); sys.exit(len(p["stages"]) != int(sys.argv[2]))' \
    "$T/$s.p4" 4 || fail "$s: the 4-stage plan does not have 4 stages"
done

# config.json's tie_word_embeddings against the plan's tied param: the tied fixture into a
# plan with its own head (-D tied=0 after ref.json's tied=1) is refused, both values named
fix=tests/llama_hf/mha_odd_tied
plan tiemix models/llama.model "$fix" -D tied=0 --cluster models/clusters/cpu2.cluster --stages 1 --replicas 1 \
  --schedule 1f1b && {
  if out=$(timeout -k 5 60 "$RUN" "$T/tiemix" --init "$fix" --data "$fix/data.bin" --steps 1 --threads 1 -q 2>&1); then
    fail "tied checkpoint into a tied=0 plan: accepted"
  elif ! grep -q "config.json: tie_word_embeddings is true, but the model's param tied is 0 (plan it with -D tied=1)" \
      <<<"$out"; then
    fail "tied checkpoint into a tied=0 plan: $out"
  else
    echo "tied checkpoint into a tied=0 plan: refused ($(grep -o 'tie_word_embeddings.*' <<<"$out"))"
  fi
}

if [ $FAILED -eq 0 ]; then
  rm -rf "$T"
  echo "1 passed, 0 failed"
else
  echo "scratch files kept in $T" >&2
  echo "0 passed, 1 failed"
  exit 1
fi
