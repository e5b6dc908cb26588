#!/usr/bin/env python3
"""tests/kernels/rope_hf.py — writes tests/kernels/rope_hf_fixture.h, the values
test_rope_hf.c checks pk_rope_fwd_f32 against: Hugging Face's rotary position
embedding for Llama, computed with numpy in float32 step for step as transformers'
LlamaRotaryEmbedding (default rope_type) and apply_rotary_pos_emb compute it:

    inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim))
    freqs    = (inv_freq[None, :, None] @ position_ids[:, None, :].float()).transpose(1, 2)
    emb      = torch.cat((freqs, freqs), dim=-1);  cos, sin = emb.cos(), emb.sin()
    q_embed  = (q * cos) + (rotate_half(q) * sin),  rotate_half(x) = cat(-x2, x1)

with q = x.view(B, T, H, D).transpose(1, 2) (LlamaAttention's q_proj output) and
position_ids = arange(T). Every operation is float32, as in transformers (the matmul
has an inner dimension of 1: one float32 product). No torch needed: run offline with
numpy, `python3 tests/kernels/rope_hf.py > tests/kernels/rope_hf_fixture.h`.

The inputs are x[k] = ((k·7919) mod 251 - 125) / 64, exact in float32, which the C
test computes itself; the fixture holds the outputs only.
"""
import numpy as np

# (name, B, T, H, D, theta): Llama 2's theta, Llama 3's, and a head of D/2 = 80 pairs
# (more than the C kernel's chunk of 64 angles)
CASES = [
    ("llama2", 1, 33, 2, 16, 10000.0),
    ("llama3", 2, 5, 3, 8, 500000.0),
    ("wide", 1, 3, 1, 160, 10000.0),
]

f32 = np.float32


def x_of(B, T, H, D):
    k = np.arange(B * T * H * D, dtype=np.int64)
    return (((k * 7919) % 251 - 125).astype(f32) / f32(64)).reshape(B, T, H * D)


def rotate_half(x):
    half = x.shape[-1] // 2
    return np.concatenate((-x[..., half:], x[..., :half]), axis=-1)


def hf_rope(x, H, theta):
    B, T, C = x.shape
    D = C // H
    inv_freq = f32(1.0) / (f32(theta) ** (np.arange(0, D, 2, dtype=np.int64).astype(f32) / f32(D)))
    pos = np.arange(T, dtype=np.int64).astype(f32)
    freqs = pos[:, None] * inv_freq[None, :]  # [T, D/2], one float32 product each
    emb = np.concatenate((freqs, freqs), axis=-1)
    cos, sin = np.cos(emb), np.sin(emb)  # float32, attention_scaling 1.0
    q = x.reshape(B, T, H, D).transpose(0, 2, 1, 3)  # [B, H, T, D]
    y = q * cos + rotate_half(q) * sin
    assert y.dtype == f32
    return y.transpose(0, 2, 1, 3).reshape(B, T, C)


def main():
    print("/* tests/kernels/rope_hf_fixture.h — written by tests/kernels/rope_hf.py (numpy %s):"
          % np.__version__)
    print(" * Hugging Face's Llama rotary embedding of x[k] = ((k*7919) mod 251 - 125) / 64, float32. */")
    print("typedef struct RopeHfCase {\n  const char *name;\n  int B, T, H, D;\n  double theta;\n"
          "  const float *y;\n} RopeHfCase;")
    for name, B, T, H, D, theta in CASES:
        y = hf_rope(x_of(B, T, H, D), H, theta).reshape(-1)
        print("static const float rope_hf_%s[%d] = {" % (name, y.size))
        vals = ["%.8ef" % float(v) for v in y]
        for i in range(0, len(vals), 8):
            print("  " + ", ".join(vals[i:i + 8]) + ",")
        print("};")
    print("static const RopeHfCase rope_hf_cases[] = {")
    for name, B, T, H, D, theta in CASES:
        print('  {"%s", %d, %d, %d, %d, %.17g, rope_hf_%s},' % (name, B, T, H, D, theta, name))
    print("};")


if __name__ == "__main__":
    main()
