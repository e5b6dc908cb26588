#!/usr/bin/env python3
"""Generates tests/data/unicode/: reference GPT-2 token ids on Unicode text.

    pip install tiktoken regex   # versions used: see the header of cases.tsv
    python3 tests/data/gen_bpe_unicode_ref.py tests/data/unicode

The real GPT-2 vocabulary is a download (not reachable from the test machines),
so the script makes a GPT-2-shaped one: the 256 byte symbols with the ids GPT-2
gives them (the byte-to-unicode order, as tiktoken's data_gym loader expects),
then merges trained on the cases themselves, merge i getting id 256 + i - as in
GPT-2, where a token's id is its merge rank. Those files are written as
vocab.json / merges.txt (what pd2bw-data reads), and the same ranks are handed
to tiktoken.Encoding with tiktoken's own GPT-2 pattern (r50k_pat_str, run by
the Rust regex crate, whose \\s is Unicode White_Space and whose \\p{L},
\\p{N} are the Unicode general categories). tiktoken's ids are the reference;
GPT-2's original encoder.py algorithm (the Python `regex` module and merge
ranks) is run too and must agree on every case, so the reference does not rest
on one implementation.

Cases whose bytes are not valid UTF-8 cannot be given to tiktoken (it takes
str). For those the reference is encoder.py's algorithm on the text decoded
with errors="surrogateescape": each byte that is not part of a valid UTF-8
sequence becomes one lone surrogate (category Cs: neither letter, number nor
space), and BPE runs on the original bytes. That is the behaviour pd2bw
documents for invalid UTF-8 (tokenizer/bpe.c).

Output cases.tsv: one case a line, "name<TAB>text as hex<TAB>ids".
"""
import collections, json, os, random, sys, unicodedata

import regex
import tiktoken
import tiktoken_ext.openai_public as openai_public

GPT2_PAT = regex.compile(r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+""")
NMERGES = 600


def byte_order():
    """Bytes in GPT-2's id order (ids 0..255) and their byte-to-unicode symbols."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + \
        list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return bs, {b: chr(c) for b, c in zip(bs, cs)}


BYTES, B2U = byte_order()
WHITE_SPACE = [c for c in range(0x110000) if regex.match(r"\s", chr(c))]


def pretokens(raw):
    """GPT-2's pre-tokens of raw bytes, as byte strings (surrogateescape for invalid UTF-8)."""
    text = raw.decode("utf-8", "surrogateescape")
    return [m.encode("utf-8", "surrogateescape") for m in GPT2_PAT.findall(text)]


def train(corpus, nmerges):
    words = collections.Counter(p for raw in corpus for p in pretokens(raw))
    split = {w: [bytes([b]) for b in w] for w in words}
    merges, have = [], {bytes([b]) for b in range(256)}
    while len(merges) < nmerges:
        pairs = collections.Counter()
        for w, c in words.items():
            s = split[w]
            for a, b in zip(s, s[1:]):
                if a + b not in have:  # one merge per token: ranks stay GPT-2's
                    pairs[(a, b)] += c
        if not pairs:
            break
        (a, b), _ = max(pairs.items(), key=lambda kv: (kv[1], kv[0]))
        merges.append((a, b))
        have.add(a + b)
        for w in words:
            s, out, i = split[w], [], 0
            while i < len(s):
                if i + 1 < len(s) and s[i] == a and s[i + 1] == b:
                    out.append(a + b)
                    i += 2
                else:
                    out.append(s[i])
                    i += 1
            split[w] = out
    return merges


def encoder_py(raw, ranks, merge_rank):
    """GPT-2's encoder.py: pre-tokenise, then merge the lowest-ranked pair, repeatedly."""
    ids = []
    for p in pretokens(raw):
        word = [bytes([b]) for b in p]
        while len(word) > 1:
            pairs = {(word[i], word[i + 1]) for i in range(len(word) - 1)}
            best = min(pairs, key=lambda pr: merge_rank.get(pr, float("inf")))
            if best not in merge_rank:
                break
            out, i = [], 0
            while i < len(word):
                if i + 1 < len(word) and (word[i], word[i + 1]) == best:
                    out.append(word[i] + word[i + 1])
                    i += 2
                else:
                    out.append(word[i])
                    i += 1
            word = out
        ids += [ranks[t] for t in word]
    return ids


def cases():
    c = []
    add = lambda name, s: c.append((name, s.encode("utf-8") if isinstance(s, str) else s))
    # Unicode-heavy prose: curly quotes and apostrophes, dashes, NBSP, BOM, ZWJ/ZWNJ,
    # soft hyphen, combining accents, numbers of every kind (Nd, Nl, No).
    add("prose_quotes", "\u201cIt\u2019s fine,\u201d she said \u2014 \u2018really\u2019 \u2026 don\u2019t you\u2019ll we\u2019ve I\u2019m.")
    add("prose_nbsp", "Prix\u00a0: 10\u00a0000\u00a0\u20ac, soit 1\u202f234,50\u00a0$ \u00ab\u00a0citation\u00a0\u00bb")
    add("prose_bom", "\ufeffHello, world!\ufeff second \ufeff")
    add("prose_zw", "a\u200db c\u200cd e\u200bf \u2060g\u00adh soft\u00adhyphen")
    add("prose_dashes", "1990\u20132000 \u2012 a\u2010b a\u2011b \u2015 \u2212 5 \u00b1 3 \u00d7 2 \u2192 \u21d2")
    add("prose_combining", "Cafe\u0301 na\u0308ive e\u0301\u0300\u0302 \u0301lone co\u00f6perate re\u0301sume\u0301")
    add("prose_numbers", "\u0661\u0662\u0663 \u0967\u0968 \u2160\u2161\u216b \u00bd \u00b2\u00b3 \u2460\u2461 \u3007\u4e00 \U0001d7ce\U0001d7cf 12\u00bd x\u00b2")
    add("prose_french", "L\u2019\u00e9t\u00e9 o\u00f9 l\u2019on s\u2019est aim\u00e9s \u2014 \u00e0 l\u2019\u00e2ge de 20\u00a0ans.")
    add("prose_german", "Stra\u00dfe, \u00c4pfel, \u00fcber M\u00fcller\u2019s \u201eZitat\u201c \u1e9e")
    add("prose_contractions", "it's IT'S it\u2019s we'll we'VE 'd 'm 's' ''s don't 're'")
    add("prose_symbols", "\u00a9 2024 \u2122 \u00ae \u00a7 \u00b6 \u2020 \u00b0C \u00b5m \u2103 \u2030 \u00a3\u00a5\u20ac$ @#%&*")
    add("prose_letterlike", "\u02b0\u02c6 \u02bc\u02bcx \u3005 \u16ee\u16ef \u1d2c \u2071 \u2c7d \ua770")
    # Mixed scripts, including scripts with spacing and non-spacing vowel signs (Mc, Mn).
    add("mixed_cjk", "\u6771\u4eac\u3068\u5927\u962a\u306fJapan\u306e\u90fd\u5e02\u3067\u3059\u3002\u300c\u5f15\u7528\u300d\uff01\uff1f")
    add("mixed_cyrillic_greek", "\u041f\u0440\u0438\u0432\u0435\u0442, \u043c\u0438\u0440! \u039a\u03b1\u03bb\u03b7\u03bc\u03ad\u03c1\u03b1 \u03ba\u03cc\u03c3\u03bc\u03b5 Hello")
    add("mixed_arabic_hebrew", "\u0645\u0631\u062d\u0628\u0627 \u0628\u0627\u0644\u0639\u0627\u0644\u0645\u060c \u05e9\u05dc\u05d5\u05dd \u05e2\u05d5\u05dc\u05dd! \u0661\u0662 abc")
    add("mixed_indic", "\u0928\u092e\u0938\u094d\u0924\u0947 \u0926\u0941\u0928\u093f\u092f\u093e \u0bb5\u0ba3\u0b95\u0bcd\u0b95\u0bae\u0bcd \u0e2a\u0e27\u0e31\u0e2a\u0e14\u0e35")
    add("mixed_hangul", "\ud55c\uad6d\uc5b4 \ud14d\uc2a4\ud2b8\uc640 English\uac00 \uc11e\uc778 \ubb38\uc7a5\uc785\ub2c8\ub2e4.")
    add("mixed_fullwidth", "\uff21\uff22\uff23\uff11\uff12\uff13\u3000\uff08\u5168\u89d2\uff09\uff0c\uff0e")
    add("mixed_supplementary", "\U00010330\U00010331 \U0001d400\U0001d401 \U00020000\U00020001 \U000e0041 \U0001f130")
    # Emoji: modifiers (Sk), ZWJ sequences, flags, keycaps, variation selectors.
    add("emoji_basic", "I \u2764\ufe0f pd2bw \U0001f600\U0001f680\U0001f525 ok\U0001f44d")
    add("emoji_skin", "\U0001f44d\U0001f3fd \U0001f44b\U0001f3ff\U0001f44b hi\U0001f3fb")
    add("emoji_zwj", "\U0001f468\u200d\U0001f469\u200d\U0001f467\u200d\U0001f466 \U0001f3f3\ufe0f\u200d\U0001f308")
    add("emoji_flags_keycaps", "\U0001f1eb\U0001f1f7\U0001f1ef\U0001f1f5 1\ufe0f\u20e3#\ufe0f\u20e3 \u00a9\ufe0f 9\u20e3")
    add("emoji_text", "Great job!!! \U0001f389\U0001f389 see you at 5pm \U0001f642 \u2014 \u263a \u2600\ufe0f")
    # Whitespace: runs of every Unicode White_Space character, alone, doubled, tripled,
    # before a word and at the end, and mixed runs; and look-alikes that are not \s.
    for cp in WHITE_SPACE:
        ch = chr(cp)
        add("ws_%04X" % cp, "a%sb%s%sc%s%s%sd %s\u00e9%s1%s" % ((ch,) * 9))
    add("ws_all_run", "x" + "".join(map(chr, WHITE_SPACE)) + "y" + "".join(map(chr, WHITE_SPACE)))
    add("ws_all_run_end", "".join(map(chr, reversed(WHITE_SPACE))) + " z " + "".join(map(chr, WHITE_SPACE)))
    add("ws_mixed", "a \u00a0 b\u3000\u3000c \n\u2028d\t\u00a0\u2003e\r\n\u0085 f")
    add("ws_not_space", "a\u200bb \u180ec \u2060d \ufeffe \u001cf\u001d\u001e\u001fg \u00adh \u2800i")
    # Random strings heavy in non-ASCII (seeded): ASCII, the interesting code points above,
    # and code points drawn from every character assigned in this Python's Unicode.
    rnd = random.Random(16)
    assigned = [cp for cp in range(0x110000)
                if unicodedata.category(chr(cp)) not in ("Cn", "Cs", "Co")]
    pool = list("abcXYZ019 '.,-!?\n\t") + [chr(c) for c in WHITE_SPACE] + list(
        "\u00e9\u00df\u4e2d\u0416\u03a9\u0301\u0308\u200d\u200c\u200b\ufeff\u00ad\u2019\u2018\u201c\u201d"
        "\u2014\u2013\u2026\u00bd\u00b2\u0661\u2160\u20ac\u00a9\U0001f600\U0001f3fd\ufe0f\u20e3\u093f\u094d") + [
        "'s", "'ll", "'re", "'t"]
    for i in range(400):
        n = rnd.randint(1, 24)
        s = "".join(rnd.choice(pool) if rnd.random() < 0.7 else chr(rnd.choice(assigned)) for _ in range(n))
        add("random_%03d" % i, s)
    # Not UTF-8 (see the module comment): stray continuation bytes, truncated and
    # overlong sequences, surrogates encoded in UTF-8, bytes 0xF5-0xFF.
    add("invalid_stray", b"ab\x80cd \x80\x81 e\xbf")
    add("invalid_truncated", b"x\xe2\x82 y\xf0\x9f\x98 z\xc3")
    add("invalid_overlong", b"\xc0\xaf \xe0\x80\xaf a\xc1\xbf")
    add("invalid_surrogate", b"a\xed\xa0\x80b \xed\xbf\xbf")
    add("invalid_high", b"\xf5\xf6 \xff\xfe a\xf4\x90\x80\x80b")
    add("invalid_mixed", "caf\u00e9 ".encode() + b"\xe9t\xe9 " + "na\u00efve".encode() + b" 1\xa02")
    return c


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    cs = cases()
    merges = train([raw for _, raw in cs], NMERGES)
    ranks = {bytes([b]): i for i, b in enumerate(BYTES)}
    for i, (a, b) in enumerate(merges):
        ranks[a + b] = 256 + i
    merge_rank = {m: i for i, m in enumerate(merges)}
    spell = lambda t: "".join(B2U[b] for b in t)
    enc = tiktoken.Encoding(name="gpt2-unicode-test", pat_str=openai_public.r50k_pat_str,
                            mergeable_ranks=ranks, special_tokens={})
    with open(os.path.join(out, "vocab.json"), "w", encoding="utf-8") as f:
        json.dump({spell(t): i for t, i in ranks.items()}, f, ensure_ascii=True, indent=0)
        f.write("\n")
    with open(os.path.join(out, "merges.txt"), "w", encoding="utf-8") as f:
        f.write("#version: 0.2 (tests/data/gen_bpe_unicode_ref.py)\n")
        for a, b in merges:
            f.write("%s %s\n" % (spell(a), spell(b)))
    lines, disagree = [], []
    for name, raw in cs:
        ref = encoder_py(raw, ranks, merge_rank)
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            text = None
        if text is not None:
            tk = enc.encode_ordinary(text)
            if tk != ref:
                disagree.append(name)
            ref = tk
        assert b"".join(enc.decode_single_token_bytes(t) for t in ref) == raw, name
        lines.append("%s\t%s\t%s\n" % (name, raw.hex(), " ".join(map(str, ref))))
    if disagree:
        sys.exit("tiktoken and encoder.py disagree on: " + ", ".join(disagree))
    with open(os.path.join(out, "cases.tsv"), "w") as f:
        f.write("# generated by tests/data/gen_bpe_unicode_ref.py: tiktoken %s, regex %s, Python %s "
                "(unicodedata %s); %d merges; name, UTF-8 text as hex, GPT-2 token ids\n" % (
                    tiktoken.__version__, regex.__version__, sys.version.split()[0],
                    unicodedata.unidata_version, len(merges)))
        f.writelines(lines)
    print("%d cases, %d merges, tiktoken and encoder.py agree on all %d valid UTF-8 cases" % (
        len(lines), len(merges), sum(1 for _, r in cs if _valid(r))))


def _valid(raw):
    try:
        raw.decode("utf-8")
        return True
    except UnicodeDecodeError:
        return False


if __name__ == "__main__":
    main()
