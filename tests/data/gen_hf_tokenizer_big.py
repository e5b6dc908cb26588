#!/usr/bin/env python3
"""Generates tests/data/hf_tokenizer_big/: a tokenizer.json whose ids go above 65535, laid
out as Meta's Llama 3 one is, and the ids the tokenizers library gives a text with it —
for token files of uint32 ids (pd2bw-data, runtime/io/data.c).

    python3 -m venv /tmp/tokenv && /tmp/tokenv/bin/pip install tokenizers
    /tmp/tokenv/bin/python tests/data/gen_hf_tokenizer_big.py tests/data/hf_tokenizer_big

Offline, from tests/data/hf_tokenizer/tokenizer.json (gen_hf_tokenizer_ref.py: Llama 3's
split pattern, ignore_merges, vocabulary 1203) by renumbering only, so the merges and the
pre-tokenizer are the ones already checked:
  - the special tokens become 128000 (<|begin_of_text|>) and 128001 (<|end_of_text|>),
    Llama 3's ids, in model.vocab and added_tokens alike (the library numbers an added
    token that model.vocab lacks after the vocabulary's length, whatever its "id");
  - the other tokens keep their order: the first 500 take ids 0..499, the rest 65536 and
    up, so a text's tokens mix ids below and above 65535, and the vocabulary (1 + the
    largest id, 128002) is a sparse one beyond uint16.
Output: tokenizer.json, and sample.ids: the library's ids for tests/data/hf_tokenizer/
sample.txt (its specials included) with encode(add_special_tokens=False).
"""
import json
import os
import sys

from tokenizers import Tokenizer

HERE = os.path.dirname(os.path.abspath(__file__))
SPECIAL_BASE = 128000  # Llama 3's first special id
LOW = 500              # tokens kept below 65536
HIGH_BASE = 65536


def main(outdir):
    os.makedirs(outdir, exist_ok=True)
    src = os.path.join(HERE, "hf_tokenizer")
    with open(os.path.join(src, "tokenizer.json"), encoding="utf-8") as f:
        j = json.load(f)
    specials = [t["content"] for t in j["added_tokens"]]
    vocab = j["model"]["vocab"]
    rest = sorted((i, tok) for tok, i in vocab.items() if tok not in specials)
    new_vocab = {}
    for k, (_, tok) in enumerate(rest):
        new_vocab[tok] = k if k < LOW else HIGH_BASE + (k - LOW)
    j["model"]["vocab"] = new_vocab
    for k, t in enumerate(j["added_tokens"]):
        t["id"] = SPECIAL_BASE + k
        new_vocab[t["content"]] = t["id"]
    path = os.path.join(outdir, "tokenizer.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(j, f, ensure_ascii=False, indent=2)
    tok = Tokenizer.from_file(path)  # the saved file is what is tested
    with open(os.path.join(src, "sample.txt"), encoding="utf-8", newline="") as f:
        sample = f.read()
    ids = tok.encode(sample, add_special_tokens=False).ids
    assert max(ids) > 65535 and min(ids) < 65536, "the sample should use ids on both sides of 65536"
    assert SPECIAL_BASE + 1 in ids, "the sample's <|end_of_text|> should be 128001"
    with open(os.path.join(outdir, "sample.ids"), "w", encoding="ascii") as f:
        f.write(" ".join(map(str, ids)) + "\n")
    print(f"vocab {len(new_vocab)} entries, largest id {max(new_vocab.values())}; "
          f"sample: {len(ids)} ids, {sum(i > 65535 for i in ids)} above 65535, into {outdir}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else os.path.join(HERE, "hf_tokenizer_big"))
