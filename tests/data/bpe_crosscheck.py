#!/usr/bin/env python3
"""Manual cross-check of pd2bw-data's GPT-2 BPE against GPT-2's own algorithm.

    python3 tests/data/bpe_crosscheck.py build/tools/pd2bw-data

Needs python3 with the `regex` module (for \\p{L}); not part of CTest because of
that dependency and its run time (~40 s on 2 cores). It trains a small merge list on the
ASCII-only fortune files, permutes the ids (so ids differ from ranks), writes
vocab.json/merges.txt, encodes the same files with GPT-2's encoder.py algorithm
(the real pre-tokenisation regex, bpe() verbatim in spirit) and with pd2bw-data,
and requires identical token streams. ASCII-only input (tests/data/
test_bpe_unicode.c checks Unicode text against tiktoken).
Documents are cut into paragraphs exactly as pd2bw-data does.
"""
import collections, glob, json, os, struct, subprocess, sys, tempfile

import regex

PAT = regex.compile(r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+""")


def bytes_to_unicode():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + \
        list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, [chr(c) for c in cs]))


B2U = bytes_to_unicode()


def spell(s):
    return ''.join(B2U[b] for b in s.encode())


def train(text, nmerges):
    words = collections.Counter(spell(w) for w in PAT.findall(text))
    split = {w: list(w) for w in words}
    merges = []
    for _ in range(nmerges):
        pairs = collections.Counter()
        for w, c in words.items():
            s = split[w]
            for a, b in zip(s, s[1:]):
                pairs[(a, b)] += c
        if not pairs:
            break
        (a, b), _ = max(pairs.items(), key=lambda kv: (kv[1], kv[0]))
        merges.append((a, b))
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


def gpt2_bpe(token, ranks):
    word = tuple(token)
    pairs = set(zip(word, word[1:]))
    if not pairs:
        return word
    while True:
        bigram = min(pairs, key=lambda p: ranks.get(p, float('inf')))
        if bigram not in ranks:
            break
        first, second = bigram
        new, i = [], 0
        while i < len(word):
            try:
                j = word.index(first, i)
            except ValueError:
                new.extend(word[i:])
                break
            new.extend(word[i:j])
            i = j
            if word[i] == first and i < len(word) - 1 and word[i + 1] == second:
                new.append(first + second)
                i += 2
            else:
                new.append(word[i])
                i += 1
        word = tuple(new)
        if len(word) == 1:
            break
        pairs = set(zip(word, word[1:]))
    return word


def paragraphs(t):
    docs, cur, prev_blank = [], '', False
    for line in t.splitlines(keepends=True):
        blank = line.rstrip('\r\n') == ''
        if prev_blank and not blank and cur:
            docs.append(cur)
            cur = ''
        cur += line
        prev_blank = blank
    if cur:
        docs.append(cur)
    return docs


def main():
    tool = sys.argv[1]
    files = [f for f in sorted(glob.glob('/usr/share/games/fortunes/*'))
             if os.path.isfile(f) and not f.endswith(('.dat', '.u8'))
             and all(b < 128 for b in open(f, 'rb').read())]
    text = ''.join(open(f).read() for f in files)
    merges = train(text[:200000], 200)
    vocab = [B2U[b] for b in range(256)] + [a + b for a, b in merges]
    ids = {t: (i * 7919) % len(vocab) for i, t in enumerate(vocab)}
    assert len(set(ids.values())) == len(vocab)
    ranks = dict(zip(merges, range(len(merges))))
    ref = []
    for f in files:
        for d in paragraphs(open(f).read()):
            for tok in PAT.findall(d):
                ref.extend(ids[s] for s in gpt2_bpe(spell(tok), ranks))
    with tempfile.TemporaryDirectory() as tmp:
        json.dump(ids, open(f'{tmp}/vocab.json', 'w'), ensure_ascii=False)
        open(f'{tmp}/merges.txt', 'w').write(
            '#version: 0.2\n' + ''.join(f'{a} {b}\n' for a, b in merges))
        subprocess.run([tool, '--input', *files, '--out-prefix', f'{tmp}/x', '--vocab',
                        f'{tmp}/vocab.json', '--merges', f'{tmp}/merges.txt',
                        '--val-fraction', '0', '--format', 'raw'], check=True)
        data = open(f'{tmp}/x_train.bin', 'rb').read()
        got = list(struct.unpack(f'<{len(data) // 2}H', data))
    print(f'{len(files)} files, {len(merges)} merges: reference {len(ref)} tokens, '
          f'pd2bw-data {len(got)} tokens, identical: {ref == got}')
    sys.exit(0 if ref == got else 1)


if __name__ == '__main__':
    main()
