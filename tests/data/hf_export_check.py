#!/usr/bin/env python3
"""Manual check that pd2bw-export's Hugging Face directory is the model pd2bw trained:
transformers' GPT2LMHeadModel, loaded from it, must give pd2bw's validation loss.

    build/tools/pd2bwrun PLAN --data train.bin --val-data val.bin --steps N \\
        --eval-every N --save ckpt.safetensors        # prints "validation loss L"
    build/tools/pd2bw-export ckpt.safetensors --heads H --hf hf
    python3 tests/data/hf_export_check.py hf val.bin WINDOWS L

WINDOWS is the number of validation sequences pd2bwrun averaged over: eval
batches (8 unless --eval-batches) times the global batch (plan.json's
train.batch). Window i is tokens [i*T, i*T + T] (llm.c's DataLoader, unshuffled),
T is the model's context. Needs torch and transformers, so it is not in CTest.
"""
import sys

import numpy as np
import torch
from transformers import GPT2LMHeadModel


def main():
    hf, val, nwin, want = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
    tol = float(sys.argv[5]) if len(sys.argv) > 5 else 1e-4
    model = GPT2LMHeadModel.from_pretrained(hf).eval()
    T = model.config.n_positions
    data = np.fromfile(val, dtype=np.uint16)
    hdr = data[:512].view(np.int32)
    tokens = data[512:].astype(np.int64) if hdr[0] == 20240520 else data.astype(np.int64)
    need = nwin * T + 1
    if len(tokens) < need:
        sys.exit("%s: %d tokens, fewer than the %d the windows need" % (val, len(tokens), need))
    x = torch.tensor(np.stack([tokens[i * T:i * T + T] for i in range(nwin)]))
    y = torch.tensor(np.stack([tokens[i * T + 1:i * T + T + 1] for i in range(nwin)]))
    with torch.no_grad():
        logits = model(x).logits.double()
    loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1)).item()
    print("transformers %s: loss %.6f over %d windows of %d tokens; pd2bw %.6f; difference %.2e" % (
        __import__("transformers").__version__, loss, nwin, T, want, abs(loss - want)))
    print("first logits of window 0:", logits[0, 0, :4].tolist())
    sys.exit(0 if abs(loss - want) <= tol else 1)


if __name__ == "__main__":
    main()
