#!/usr/bin/env python3
"""Generates tests/data/hf_tokenizer/post_cases.json: what the tokenizers library puts
around every text for each post-processor pd2bw-data may meet, for tokenizer/bpe_hf.c's
bpe_doc_start (the token pd2bw-data --eot writes before each document).

    /tmp/tokenv/bin/python tests/data/gen_hf_post_ref.py   (tokenizers: see gen_hf_tokenizer_ref.py)

Offline. Each case is tests/data/hf_tokenizer/tokenizer.json with its "post_processor"
replaced by the case's object, written by the library itself (Tokenizer.to_str), and the
ids encode(text) adds before and after encode(text, add_special_tokens=False)'s.
test_bpe_unicode.c makes the same splice and checks bpe_doc_start against them: one
token before and none after is the document start, none is no start, anything else is
refused with --eot.
"""
import json
import os

import tokenizers
from tokenizers import Tokenizer, processors

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "hf_tokenizer")
BOS, EOS = "<|begin_of_text|>", "<|end_of_text|>"


def main():
    with open(os.path.join(HERE, "tokenizer.json"), encoding="utf-8") as f:
        base = json.load(f)
    tok = Tokenizer.from_str(json.dumps(base))
    bos, eos = tok.token_to_id(BOS), tok.token_to_id(EOS)
    specials = [(BOS, bos), (EOS, eos)]
    template = lambda single: processors.TemplateProcessing(single=single, special_tokens=specials)
    cases = {
        # Llama 3's: a ByteLevel (offsets only) then "<|begin_of_text|> $A"
        "llama3": processors.Sequence([processors.ByteLevel(trim_offsets=False),
                                       processors.TemplateProcessing(
                                           single=f"{BOS} $A", pair=f"{BOS} $A {BOS} $B:1",
                                           special_tokens=[(BOS, bos)])]),
        "template": template(f"{BOS} $A"),
        "bytelevel": processors.ByteLevel(trim_offsets=False),  # GPT-2's, Qwen2's
        "none": None,
        "suffix": template(f"$A {EOS}"),
        "both": template(f"{BOS} $A {EOS}"),
        "two_before": template(f"{BOS} {EOS} $A"),
        "roberta": processors.RobertaProcessing((EOS, eos), (BOS, bos)),
    }
    text = "Hello world"
    plain = tok.encode(text, add_special_tokens=False).ids
    out = []
    for name, post in cases.items():
        tok.post_processor = post
        obj = json.loads(tok.to_str())["post_processor"]
        ids = tok.encode(text).ids
        k = next(i for i in range(len(ids)) if ids[i:i + len(plain)] == plain)
        out.append({"name": name, "post_processor": obj, "before": ids[:k], "after": ids[k + len(plain):]})
    with open(os.path.join(HERE, "post_cases.json"), "w", encoding="utf-8") as f:
        json.dump({"generated_by": f"tests/data/gen_hf_post_ref.py: tokenizers {tokenizers.__version__}",
                   "cases": out}, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
