#!/usr/bin/env python3
"""Manual check that pd2bw-export's Llama directory is one transformers loads as the
same model: a fixture (tests/llama_hf/<shape>) is written as a pd2bw checkpoint (pd2bw's
names, [in, out] Linear weights, the "consts" metadata pd2bwrun records), exported
with pd2bw-export, and loaded with LlamaForCausalLM.from_pretrained; every tensor must
equal the fixture's bit for bit and the logits on the fixture's tokens must be equal.
Needs torch and transformers (tests/llama_hf/gen_fixtures.py says how), so it is not
in CTest; test_ckpt_llama checks the same files without them.

    /tmp/torchenv/bin/python tests/llama_hf/export_check.py build/tools/pd2bw-export tests/llama_hf/gqa_untied
"""
import json
import os
import subprocess
import sys
import tempfile

import numpy as np
import torch
from safetensors.numpy import save_file
from transformers import LlamaForCausalLM

LINEAR = {"self_attn.q_proj": "wq", "self_attn.k_proj": "wk", "self_attn.v_proj": "wv", "self_attn.o_proj": "wo",
          "mlp.gate_proj": "w_gate", "mlp.up_proj": "w_up", "mlp.down_proj": "w_down"}
NORMS = {"input_layernorm": "attn_norm", "post_attention_layernorm": "mlp_norm"}


def pd2bw_name(hf):
    if hf == "model.embed_tokens.weight":
        return "embed", False
    if hf == "model.norm.weight":
        return "norm", False
    if hf == "lm_head.weight":
        return "head", False
    _, _, layer, rest = hf.split(".", 3)
    rest = rest[:-len(".weight")]
    if rest in LINEAR:
        return f"h.{layer}.{LINEAR[rest]}", True
    return f"h.{layer}.{NORMS[rest]}", False


def main():
    tool, fixture = sys.argv[1], sys.argv[2]
    ref = json.load(open(os.path.join(fixture, "ref.json")))
    model = LlamaForCausalLM.from_pretrained(fixture, attn_implementation="eager", torch_dtype=torch.float32)
    sd = {k: v for k, v in model.state_dict().items() if not (k == "lm_head.weight" and model.config.tie_word_embeddings)}
    tensors = {}
    for hf, v in sd.items():
        name, linear = pd2bw_name(hf)
        a = v.numpy()
        tensors[name] = np.ascontiguousarray(a.T if linear else a)
    d = ref["defines"]
    consts = json.dumps({k: d[k] for k in ("vocab", "seq", "layers", "dim", "heads", "kv_heads", "ffn", "rope_theta",
                                           "rms_eps")})
    with tempfile.TemporaryDirectory() as tmp:
        ckpt, out = os.path.join(tmp, "ckpt.safetensors"), os.path.join(tmp, "hf")
        save_file(tensors, ckpt, metadata={"format": "pd2bw", "model": "llama", "step": "0", "consts": consts})
        subprocess.run([tool, ckpt, "--hf", out], check=True)
        back = LlamaForCausalLM.from_pretrained(out, attn_implementation="eager", torch_dtype=torch.float32)
        bsd = back.state_dict()
        same = all(torch.equal(v, bsd[k]) for k, v in sd.items())
        data = np.fromfile(os.path.join(fixture, "data.bin"), dtype=np.uint16)[512:].astype(np.int64)
        T, B = ref["T"], ref["B"]
        x = torch.tensor(np.stack([data[w * T:w * T + T] for w in range(B)]))
        with torch.no_grad():
            a, b = model(input_ids=x).logits, back(input_ids=x).logits
        cfg = back.config
        print(f"{fixture}: tensors bit-equal {same}; logits equal {torch.equal(a, b)} (max diff "
              f"{(a - b).abs().max().item():.3g}); config heads {cfg.num_attention_heads} kv {cfg.num_key_value_heads} "
              f"theta {getattr(cfg, 'rope_theta', None) or cfg.rope_parameters['rope_theta']} eps {cfg.rms_norm_eps} "
              f"tied {cfg.tie_word_embeddings}")
        sys.exit(0 if same and torch.equal(a, b) else 1)


if __name__ == "__main__":
    main()
