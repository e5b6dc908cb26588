#!/usr/bin/env bash
# pd2bwrun --init on pipelined plans: every stage takes its own parameters from a
# whole-model checkpoint (pd2bw, Hugging Face or llm.c GPT-2), optimizer state fresh,
# step 0; the run then equals the one-stage trainer started from the same --init.
#   init.sh PD2BWC PD2BWRUN
set -u
PD2BWC=$1
RUN=$2
. "$(dirname "$0")/common.sh"
. "$(dirname "$0")/logs.sh"
convert() { # FORMAT IN OUT: a pd2bw checkpoint of the tiny GPT (3 layers, C 16, T 8, V 256,
  # 2 heads) rewritten as a Hugging Face model.safetensors (hf) or an llm.c model file (llmc)
  python3 - "$@" <<'PY'
import array, json, struct, sys
fmt, src, dst = sys.argv[1:]
b = open(src, "rb").read()
n = struct.unpack("<Q", b[:8])[0]
hdr = json.loads(b[8:8 + n]); hdr.pop("__metadata__", None)
t = {k: (v["shape"], array.array("f", b[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]]))
     for k, v in hdr.items() if not k.startswith(("opt.", "prev."))}
L, C, T, V = 3, 16, 8, 256
hf = {"ln1_w": "ln_1.weight", "ln1_b": "ln_1.bias", "attn_w": "attn.c_attn.weight",
      "attn_b": "attn.c_attn.bias", "attnproj_w": "attn.c_proj.weight", "attnproj_b": "attn.c_proj.bias",
      "ln2_w": "ln_2.weight", "ln2_b": "ln_2.bias", "fc_w": "mlp.c_fc.weight", "fc_b": "mlp.c_fc.bias",
      "fcproj_w": "mlp.c_proj.weight", "fcproj_b": "mlp.c_proj.bias"}
if fmt == "hf":  # GPT2LMHeadModel names; Conv1D weights are [in, out] as pd2bw's
    names = {"wte": "transformer.wte.weight", "wpe": "transformer.wpe.weight", "lnf_w": "transformer.ln_f.weight",
             "lnf_b": "transformer.ln_f.bias"}
    for i in range(L):
        for k, v in hf.items():
            names["h.%d.%s" % (i, k)] = "transformer.h.%d.%s" % (i, v)
    head, body = {}, b""
    for k, (shape, data) in t.items():
        raw = data.tobytes()
        head[names[k]] = {"dtype": "F32", "shape": shape, "data_offsets": [len(body), len(body) + len(raw)]}
        body += raw
    h = json.dumps(head).encode()
    h += b" " * (-len(h) % 8)
    open(dst, "wb").write(struct.pack("<Q", len(h)) + h + body)
else:  # llm.c version 3 (float32): header, then 16 tensors of all layers, linears [out, in]
    def tr(x, rows, cols):
        return array.array("f", [x[r * cols + c] for c in range(cols) for r in range(rows)])
    out = struct.pack("<256i", *([20240326, 3, T, V, L, 2, C, V] + [0] * 248))
    out += t["wte"][1].tobytes() + t["wpe"][1].tobytes()
    for k in ["ln1_w", "ln1_b", "attn_w", "attn_b", "attnproj_w", "attnproj_b", "ln2_w", "ln2_b", "fc_w", "fc_b",
              "fcproj_w", "fcproj_b"]:
        for i in range(L):
            shape, x = t["h.%d.%s" % (i, k)]
            out += (tr(x, shape[0], shape[1]) if len(shape) == 2 else x).tobytes()
    out += t["lnf_w"][1].tobytes() + t["lnf_b"][1].tobytes()
    open(dst, "wb").write(out)
PY
}
seq1() { # DIR BSZ: the one-stage 2bw plan with the pipeline's global batch
  plan "$1" -D bsz="$2" -D mbs=1 --stages 1 --replicas 1 --microbatches "$2" --schedule 2bw --recompute off
}
plan "$T/one" -D bsz=2 -D mbs=1 --stages 1 --replicas 1 --microbatches 2 --schedule gpipe --recompute off || exit 1
plan "$T/f" -D bsz=4 -D mbs=1 --stages 2 --replicas 2 --microbatches 2 --schedule 1f1b --recompute off || exit 1
plan "$T/c" -D bsz=3 -D mbs=1 --stages 3 --replicas 1 --microbatches 3 --schedule 2bw --recompute off || exit 1
seq1 "$T/c1" 3 || exit 1
# the d=1 run's checkpoint, trained away from the plans' initial weights (another seed)
check "d=1 trains 3 steps (seed 7) and saves" \
  "$RUN" "$T/one" --data "$T/train.bin" --steps 3 --threads 1 -q --seed 7 --save "$T/one.st"

train "$T/f" 3 --init "$T/one.st" --log-json "$T/f.json" >/dev/null
"$RUN" "$T/f/reference" --data "$T/train.bin" --steps 3 --threads 1 -q --init "$T/one.st" --log-json "$T/f.ref.json" >/dev/null
train "$T/f" 1 --log-json "$T/f.fresh.json" >/dev/null
check "1f1b d=2 w=2 --init: every step's loss = the one-stage trainer's with the same --init" \
  same_log loss 1e-5 "$T/f.json" "$T/f.ref.json"
check "  ... the first loss is the checkpoint's, not the plan's initial weights'" \
  python3 -c 'import sys; a, b = map(float, sys.argv[1:]); sys.exit(abs(a - b) < 1e-3)' \
  "$(log_value loss 1 "$T/f.json")" "$(log_value loss 1 "$T/f.fresh.json")"

train "$T/c" 4 --init "$T/one.st" --log-json "$T/c.json" >/dev/null
"$RUN" "$T/c1" --data "$T/train.bin" --steps 4 --threads 1 -q --init "$T/one.st" --log-json "$T/c1.json" >/dev/null
check "2bw d=3 (one layer a stage) --init: every loss = the one-stage 2bw trainer's with the same --init" \
  same_log loss 1e-5 "$T/c.json" "$T/c1.json"

convert hf "$T/one.st" "$T/hf.safetensors" && convert llmc "$T/one.st" "$T/llmc.bin" || exit 1
train "$T/c" 4 --init "$T/hf.safetensors" --log-json "$T/c.hf.json" >/dev/null
train "$T/c" 4 --init "$T/llmc.bin" --log-json "$T/c.llmc.json" >/dev/null
check "  ... from the Hugging Face file: the same losses, bit for bit" same_log loss 0 "$T/c.hf.json" "$T/c.json"
check "  ... from the llm.c file: the same losses, bit for bit" same_log loss 0 "$T/c.llmc.json" "$T/c.json"

plan "$T/two" -D layers=2 -D bsz=2 -D mbs=1 --stages 1 --replicas 1 --microbatches 2 --schedule gpipe \
  --recompute off || exit 1
"$RUN" "$T/two" --data "$T/train.bin" --steps 1 --threads 1 -q --save "$T/two.st" >/dev/null || exit 1
if out=$(train "$T/c" 1 --init "$T/two.st" 2>&1); then
  bad "--init with a checkpoint of a 2-layer model fails"
else
  grep -q "two.st.*no tensor \"h.2" <<<"$out" && ok "a 2-layer checkpoint: $(head -1 <<<"$out")" ||
    { bad "2-layer checkpoint message"; echo "$out"; }
fi
# --reference from the same --init: the one-stage trainer (1f1b, 2bw) and the sequential
# multi-stage executor (pipedream: the tied embedding in stages 0 and 2) both start there
plan "$T/pd" -D bsz=3 -D mbs=1 --stages 3 --replicas 1 --microbatches 3 --schedule pipedream --recompute off || exit 1
for case in "f 1f1b d=2 w=2" "c 2bw d=3" "pd pipedream d=3"; do
  set -- $case
  out=$(train "$T/$1" 3 --init "$T/one.st" --reference 2>&1)
  grep -q "reference: worst .*: MATCH" <<<"$out" && ok "${*:2} --init --reference: MATCH" ||
    { bad "${*:2} --init --reference"; echo "$out"; }
done
finish
