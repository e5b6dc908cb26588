#!/usr/bin/env python3
"""Writes tests/llama_hf/<shape>/: small random Hugging Face LlamaForCausalLM models and
what transformers and PyTorch compute with them, the reference pd2bw's Llama is checked
against (tests/llama_hf/llama_hf_check.sh, tests/data/test_ckpt_llama.c). Nobody here
wrote that implementation: the numbers are transformers' and torch.optim.AdamW's.

    python3 -m venv /tmp/torchenv
    /tmp/torchenv/bin/pip install torch transformers safetensors   # ~5 GB; not the README's set-up
    nice -n 19 /tmp/torchenv/bin/python tests/llama_hf/gen_fixtures.py tests/llama_hf

Per shape (SHAPES below):
  config.json, model.safetensors     save_pretrained's output (the odd-layer shape is
    (or model-0000N-of-0000M.safetensors  saved in shards with its index, so --init's
     + model.safetensors.index.json)      sharded reader is exercised)
  data.bin     B·T + 1 tokens in llm.c's format: exactly B windows of T, so every
               step of pd2bwrun (unshuffled) trains on the same batch, as here
  ref.json     the shape, pd2bwc's -D settings for models/llama.model, transformers'
               step-0 loss and the 20-step AdamW trajectory (the loss of each step's
               batch before its update), with the versions used

The weights are drawn wider than transformers' initializer (std 0.3, norm weights
1 + 0.3·N(0,1)) so that the loss is far from log(vocab): a transposed, misnamed or
mis-rotated tensor shows in the step-0 loss. Training: AdamW with a constant lr, betas,
eps, weight decay on the matrices only (pd2bw decays rank-2 parameters, not the norms:
plan.json model.params[].decay), no clipping, the mean cross-entropy over all B·T
tokens — what a pd2bw train block expresses (-D train.* below).
"""
import json
import os
import sys

import numpy as np
import torch
import transformers
from transformers import LlamaConfig, LlamaForCausalLM

T, B, STEPS = 16, 4, 20
TRAIN = {"lr": 3e-3, "beta1": 0.9, "beta2": 0.95, "eps": 1e-8, "weight_decay": 0.1}
SHAPES = {
    # kv_heads < heads (grouped-query), untied head
    "gqa_untied": dict(layers=2, dim=32, heads=4, kv_heads=2, ffn=64, vocab=256, tied=False,
                       rope_theta=10000.0, rms_eps=1e-5, shards=False),
    # kv_heads = heads (multi-head), an odd number of layers (a 2-stage cut falls mid-model),
    # tied head, Llama 3's rope theta, saved in shards
    "mha_odd_tied": dict(layers=3, dim=32, heads=4, kv_heads=4, ffn=48, vocab=256, tied=True,
                         rope_theta=500000.0, rms_eps=1e-6, shards=True),
}


def build(s, seed):
    cfg = LlamaConfig(vocab_size=s["vocab"], hidden_size=s["dim"], intermediate_size=s["ffn"],
                      num_hidden_layers=s["layers"], num_attention_heads=s["heads"],
                      num_key_value_heads=s["kv_heads"], max_position_embeddings=T,
                      rms_norm_eps=s["rms_eps"], rope_theta=s["rope_theta"], tie_word_embeddings=s["tied"],
                      hidden_act="silu", attention_bias=False, mlp_bias=False, bos_token_id=None,
                      eos_token_id=None, pad_token_id=None, torch_dtype="float32")
    cfg._attn_implementation = "eager"
    torch.manual_seed(seed)
    model = LlamaForCausalLM(cfg).float()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 1:
                p.copy_(1 + 0.3 * torch.randn_like(p))
            else:
                p.copy_(0.3 * torch.randn_like(p))
    return model


def loss_of(model, x, y):
    logits = model(input_ids=x).logits
    return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))


def write_tokens(path, tokens):
    hdr = np.zeros(256, dtype=np.int32)
    hdr[:3] = [20240520, 1, len(tokens)]
    with open(path, "wb") as f:
        f.write(hdr.tobytes())
        f.write(np.asarray(tokens, dtype=np.uint16).tobytes())


def main(outdir):
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)
    for i, (name, s) in enumerate(SHAPES.items()):
        d = os.path.join(outdir, name)
        os.makedirs(d, exist_ok=True)
        model = build(s, 1000 + i)
        if s["shards"]:
            model.save_pretrained(d, safe_serialization=True, max_shard_size="60KB")
        else:
            model.save_pretrained(d, safe_serialization=True)
        g = torch.Generator().manual_seed(2000 + i)
        tokens = torch.randint(0, s["vocab"], (B * T + 1,), generator=g)
        write_tokens(os.path.join(d, "data.bin"), tokens.tolist())
        x = torch.stack([tokens[w * T:w * T + T] for w in range(B)])
        y = torch.stack([tokens[w * T + 1:w * T + T + 1] for w in range(B)])
        # the model as saved, read back: what pd2bw's --init reads
        model = LlamaForCausalLM.from_pretrained(d, attn_implementation="eager", torch_dtype=torch.float32)
        model.train()  # no dropout in Llama (attention_dropout 0): train and eval agree
        with torch.no_grad():
            step0 = loss_of(model, x, y).item()
        decay = [p for p in model.parameters() if p.dim() >= 2]
        no_decay = [p for p in model.parameters() if p.dim() < 2]
        opt = torch.optim.AdamW([{"params": decay, "weight_decay": TRAIN["weight_decay"]},
                                 {"params": no_decay, "weight_decay": 0.0}],
                                lr=TRAIN["lr"], betas=(TRAIN["beta1"], TRAIN["beta2"]), eps=TRAIN["eps"],
                                foreach=False)
        losses = []
        for _ in range(STEPS):
            opt.zero_grad()
            loss = loss_of(model, x, y)
            loss.backward()
            opt.step()
            losses.append(loss.item())
        defines = {"layers": s["layers"], "dim": s["dim"], "heads": s["heads"], "kv_heads": s["kv_heads"],
                   "ffn": s["ffn"], "vocab": s["vocab"], "seq": T, "rope_theta": s["rope_theta"],
                   "rms_eps": s["rms_eps"], "tied": int(s["tied"]), "train.batch": B, "train.microbatch": B // 2,
                   "train.lr": TRAIN["lr"], "train.beta1": TRAIN["beta1"], "train.beta2": TRAIN["beta2"],
                   "train.eps": TRAIN["eps"], "train.weight_decay": TRAIN["weight_decay"],
                   "train.lr_schedule": "constant", "train.clip": 0, "train.steps": STEPS}
        ref = {"shape": name, "model": "models/llama.model", "T": T, "B": B, "steps": STEPS, "defines": defines,
               "step0_loss": step0, "losses": losses, "train": TRAIN,
               "versions": {"torch": torch.__version__, "transformers": transformers.__version__},
               "note": "losses[t]: transformers' float32 cross-entropy of the batch at step t, before "
                       "torch.optim.AdamW's update t (decay on rank >= 2 parameters only, no clipping)"}
        with open(os.path.join(d, "ref.json"), "w") as f:
            json.dump(ref, f, indent=1)
            f.write("\n")
        print(f"{name}: step-0 loss {step0:.6f}, step {STEPS - 1} {losses[-1]:.6f}; files {sorted(os.listdir(d))}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__)))
