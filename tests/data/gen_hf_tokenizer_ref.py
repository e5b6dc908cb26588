#!/usr/bin/env python3
"""Generates tests/data/hf_tokenizer/: a Hugging Face tokenizer.json and the ids that
library gives Unicode-heavy text, for tokenizer/bpe_hf.c and bpe_pretok.c.

    python3 -m venv /tmp/tokenv && /tmp/tokenv/bin/pip install tokenizers
    /tmp/tokenv/bin/python tests/data/gen_hf_tokenizer_ref.py tests/data/hf_tokenizer

Offline: a byte-level BPE is trained with `tokenizers` on a local corpus — the valid
UTF-8 texts of tests/data/unicode/cases.tsv (prose with curly quotes, NBSP, every
kind of number, CJK, Arabic, emoji with ZWJ, ...) and the Llama-3-specific cases
below — set up as Meta's Llama 3 tokenizer.json is: Split on Llama 3's pattern
(behavior Isolated) then ByteLevel without its regex, ignore_merges, special
tokens <|begin_of_text|> and <|end_of_text|>. Vocabulary 1200, so merges stop
early and most text is cut into several tokens per word; then three words that
no merges build are added to the vocabulary (1203), which only ignore_merges
makes single tokens.

Output: tokenizer.json as the library saves it, and cases.tsv, one case a line
"name<TAB>UTF-8 text as hex<TAB>ids" from tokenizer.encode(text,
add_special_tokens=False) (no post-processor template: pd2bw-data applies none);
sample.txt with sample.ids, the tool-level case (pd2bw-data on a file).
"""
import json
import os
import sys

import tokenizers
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
                  r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
HERE = os.path.dirname(os.path.abspath(__file__))


def unicode_cases():
    """The valid UTF-8 cases of the GPT-2 fixture (tests/data/unicode/cases.tsv)."""
    out = []
    with open(os.path.join(HERE, "unicode", "cases.tsv"), encoding="ascii") as f:
        for line in f:
            if line.startswith("#"):
                continue
            name, hexed, _ = line.rstrip("\n").split("\t")
            try:
                out.append(("u_" + name, bytes.fromhex(hexed).decode("utf-8")))
            except UnicodeDecodeError:
                pass  # the library takes str; bytes that are not UTF-8 cannot reach it
    return out


def llama3_cases():
    """What Llama 3's pattern does differently from GPT-2's."""
    return [
        ("contractions_case", "IT'S DON'T WE'RE THEY'VE I'M YOU'LL HE'D it's It'S 'Sx 'rE"),
        ("digits_groups", "1 12 123 1234 12345 1234567 ١٢٣٤٥ ⅷⅸ ½¼ 2024-12-07 3.14159"),
        ("space_before_digits", "a 1, b  22, c   333 x\t4444"),
        ("punct_letters", "(hello) [world] {foo}bar !!baz ¿qué? «mot» —dash ...end"),
        ("crlf_runs", "line one\r\nline two\r\n\r\n  indented\n\n\n\tTabbed\r\rend\n"),
        ("punct_newlines", "wow!\n\nsuch?\r\n  ok;\n"),
        ("trailing_spaces", "end with spaces   "),
        ("nel_and_nbsp", "a\u0085b c\u00a0d e\u3000f\u2028g\u2029h"),
        ("space_runs", "a  b   c    d\t\te \u00a0 f"),
        ("specials", "<|begin_of_text|>Hello<|end_of_text|> x<|end_of_text|><|end_of_text|>y <|begin_of_text"),
        ("mixed_scripts", "Привет, мир! 你好，世界。 こんにちは 안녕하세요 مرحبا שלום नमस्ते Γειά σου"),
        ("emoji", "family 👨‍👩‍👧‍👦 flags 🇫🇷🇯🇵 skin 👍🏽 keycap 1️⃣ ok"),
        ("combining", "e\u0301 n\u0303 a\u030a Zalgo z\u0351\u0352o"),
        ("code", "def f(x):\n    return x**2  # square\n\nif __name__ == '__main__':\n\tprint(f(3))\n"),
        ("apostrophes_unicode", "it\u2019s don\u2019t l'été l’été rock'n'roll"),
    ]


def main(outdir):
    os.makedirs(outdir, exist_ok=True)
    cases = unicode_cases() + llama3_cases()
    corpus = [text for _, text in cases] * 3
    tok = Tokenizer(models.BPE(ignore_merges=True))
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(LLAMA3_PATTERN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=1200, min_frequency=2, show_progress=False,
                                  special_tokens=["<|begin_of_text|>", "<|end_of_text|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(corpus, trainer)
    path = os.path.join(outdir, "tokenizer.json")
    tok.save(path)
    # Words in the vocabulary that no merge sequence builds (Llama 3's has such): only
    # ignore_merges makes them one token, so the cases show whether it is honoured.
    with open(path, encoding="utf-8") as f:
        j = json.load(f)
    for word in ["\u0120Zalgo", "\u0120indented", "Tabbed"]:
        if word not in j["model"]["vocab"]:
            j["model"]["vocab"][word] = len(j["model"]["vocab"])
    with open(path, "w", encoding="utf-8") as f:
        json.dump(j, f, ensure_ascii=False, indent=2)
    tok = Tokenizer.from_file(path)  # the saved file is what is tested
    with open(os.path.join(outdir, "cases.tsv"), "w", encoding="ascii") as f:
        f.write(f"# generated by tests/data/gen_hf_tokenizer_ref.py: tokenizers {tokenizers.__version__}; "
                f"vocab {tok.get_vocab_size()}; name, UTF-8 text as hex, token ids\n")
        for name, text in cases:
            ids = tok.encode(text, add_special_tokens=False).ids
            f.write(f"{name}\t{text.encode('utf-8').hex()}\t{' '.join(map(str, ids))}\n")
    sample = "".join(text + "\n" for _, text in llama3_cases())
    with open(os.path.join(outdir, "sample.txt"), "w", encoding="utf-8", newline="") as f:
        f.write(sample)
    with open(os.path.join(outdir, "sample.ids"), "w", encoding="ascii") as f:
        f.write(" ".join(map(str, tok.encode(sample, add_special_tokens=False).ids)) + "\n")
    print(f"{len(cases)} cases, vocab {tok.get_vocab_size()}, into {outdir}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else os.path.join(HERE, "hf_tokenizer"))
