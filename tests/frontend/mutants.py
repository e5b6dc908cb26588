#!/usr/bin/env python3
"""tests/frontend/mutants.py — the mutation generator: pd2bwc on random mutants of the
bundled models and clusters, with the hostile-input rules of issue 12.

Each mutant is a model (models/, tests/) or a cluster (models/clusters/) with one to
five random mutations: a token or a line deleted, duplicated or swapped with its
neighbour, a number replaced by an extreme (0, -1, 2^31, 2^40, 2^63, 1e308, 1e-320,
99999999999999999999, ...), or junk bytes inserted (NUL, 0xff, escape sequences,
invalid UTF-8). pd2bwc compiles it (-q; one in four also emits the CUDA programs,
--backend both, the rest only the C ones) into a fresh directory under a time limit,
and these must hold:

  - no crash: the exit status is 0 or 1, never a signal (an internal error aborts);
  - no hang: each compile ends within --timeout seconds;
  - exit 1 prints an error with a location ("FILE:LINE:COL: error: ...") or a clear
    whole-file or tool message ("FILE: error: ...", "pd2bw: error: ...",
    "pd2bwc: error: ...", "command line: error: ..."), and never "internal error";
  - exit 0 leaves a complete plan directory (plan.json that parses, names the
    compiler and lists stages whose programs exist; schedule.txt, memory.txt);
    exit 1 leaves no directory and no DIR.tmp.* sibling.

The run's seed is printed; --seed (or PD2BW_FUZZ_SEED) replays a run exactly, and
--keep DIR copies every failing mutant there with its output, for tests/errors.
    mutants.py --pd2bwc build/tools/pd2bwc [--count 300] [--seed N] [--jobs 2]
"""
import argparse
import concurrent.futures
import json
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

EXTREMES = [b"0", b"-1", b"1", b"2147483648", b"1099511627776", b"9223372036854775807",
            b"18446744073709551616", b"99999999999999999999", b"1e308", b"-1e308", b"1e-320",
            b"0.5", b"-0", b"1e999", b"10001", b"65536"]
JUNK = [b"\x00", b"\xff", b"\xfe\xff", b"\x1b[2J", b"\xc2\x9b", b"\xe9", b"\x7f", b"\r",
        b"\t", b"\xf0\x9f\x98\x80", b"\xed\xa0\x80", b"'", b"\"", b"{", b"}", b"(", b";",
        b"[", b"]", b"B", b"repeat", b"#", b"/*", b"=", b","]
TOKEN = re.compile(rb"[A-Za-z_][A-Za-z_0-9.]*|[0-9][0-9.eE+-]*|\s+|.", re.S)
NUMBER = re.compile(rb"(?<![A-Za-z_.0-9])[0-9]+(\.[0-9]+)?([eE][+-]?[0-9]+)?")
LOCATED = re.compile(r"^(\S[^\n]*?:\d+:\d+: error: |[^\n:]+: error: |pd2bwc?: error: |command line: error: )",
                     re.M)


def seeds():
    """(kind, path) of every bundled model and cluster."""
    out = []
    for d in ("models", "tests/pipeline", "tests/planner"):
        for f in sorted(os.listdir(os.path.join(ROOT, d))):
            if f.endswith(".model"):
                out.append(("model", os.path.join(ROOT, d, f)))
    for d in ("models/clusters", "tests/pipeline", "tests/planner"):
        for f in sorted(os.listdir(os.path.join(ROOT, d))):
            if f.endswith(".cluster"):
                out.append(("cluster", os.path.join(ROOT, d, f)))
    return out


def mutate(rng, text):
    """One random mutation of text (bytes); returns (new text, description)."""
    kind = rng.choice(["token-del", "token-dup", "token-swap", "line-del", "line-dup",
                       "line-swap", "number", "number", "number", "junk"])
    if kind.startswith("token"):
        toks = [m.group(0) for m in TOKEN.finditer(text)]
        idx = [i for i, t in enumerate(toks) if not t.isspace()]
        if len(idx) < 2:
            return text, "nothing"
        k = rng.randrange(len(idx) - 1)
        i, j = idx[k], idx[k + 1]
        if kind == "token-del":
            toks[i] = b""
        elif kind == "token-dup":
            toks[i] = toks[i] + b" " + toks[i]
        else:
            toks[i], toks[j] = toks[j], toks[i]
        return b"".join(toks), "%s %r" % (kind, toks[i][:20])
    if kind.startswith("line"):
        lines = text.split(b"\n")
        if len(lines) < 2:
            return text, "nothing"
        i = rng.randrange(len(lines) - 1)
        if kind == "line-del":
            del lines[i]
        elif kind == "line-dup":
            lines.insert(i, lines[i])
        else:
            lines[i], lines[i + 1] = lines[i + 1], lines[i]
        return b"\n".join(lines), "%s %d" % (kind, i + 1)
    if kind == "number":
        nums = list(NUMBER.finditer(text))
        if not nums:
            return text, "nothing"
        m = rng.choice(nums)
        v = rng.choice(EXTREMES)
        return text[:m.start()] + v + text[m.end():], "number %s -> %s" % (m.group(0).decode(), v.decode())
    at = rng.randrange(len(text) + 1)
    j = rng.choice(JUNK) if rng.random() < 0.7 else bytes(rng.randrange(256) for _ in range(rng.randint(1, 8)))
    return text[:at] + j + text[at:], "junk %r at byte %d" % (j, at)


def complete_plan(d):
    """'' when d is a complete plan directory, else what is missing."""
    try:
        with open(os.path.join(d, "plan.json"), encoding="utf-8") as f:
            plan = json.load(f)
    except (OSError, ValueError) as e:
        return "plan.json: %s" % e
    if not str(plan.get("compiler", "")).startswith("pd2bwc"):
        return "plan.json does not name pd2bwc"
    stages = plan.get("stages")
    if not isinstance(stages, list) or not stages:
        return "plan.json has no stages"
    for i, st in enumerate(stages):
        src = (st.get("program") or {}).get("source")
        if not src or not os.path.isfile(os.path.join(d, os.path.basename(src))):
            return "stage %d's program %r is missing" % (i, src)
    for f in ("schedule.txt", "memory.txt"):
        if not os.path.isfile(os.path.join(d, f)):
            return "%s is missing" % f
    return ""


def run_one(args, n, kind, seed_path, text, how, backend, work):
    """Compiles one mutant; returns its exit status and None or (what broke, details)."""
    d = os.path.join(work, "m%d" % n)
    os.mkdir(d)
    src = os.path.join(d, "mutant." + kind)
    with open(src, "wb") as f:
        f.write(text)
    out = os.path.join(d, "plan")
    if kind == "model":
        cmd = [args.pd2bwc, src, "-q", "--backend", backend, "-o", out]
    else:
        cmd = [args.pd2bwc, os.path.join(ROOT, "models/tinygpt.model"), "--cluster", src, "-q",
               "--backend", backend, "-o", out]
    t0 = time.monotonic()
    try:
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=args.timeout)
    except subprocess.TimeoutExpired:
        return None, ("hang (over %gs)" % args.timeout, d, src, how, "")
    dt = time.monotonic() - t0
    err = p.stderr.decode("utf-8", "replace")
    problem = None
    leftovers = [f for f in os.listdir(d) if f.startswith("plan.tmp") or f.startswith("plan.old")]
    if p.returncode < 0:
        problem = "killed by signal %d" % -p.returncode
    elif p.returncode not in (0, 1):
        problem = "exit status %d" % p.returncode
    elif "internal error" in err:
        problem = "internal error"
    elif p.returncode == 1:
        if not LOCATED.search(err):
            problem = "exit 1 without a located error"
        elif os.path.exists(out):
            problem = "exit 1 left the output directory"
    else:
        missing = complete_plan(out)
        if missing:
            problem = "exit 0 with an incomplete plan: " + missing
    if not problem and leftovers:
        problem = "left %s behind" % ", ".join(leftovers)
    if problem:
        return p.returncode, (problem, d, src, how, err[-2000:])
    shutil.rmtree(d, ignore_errors=True)
    return p.returncode, None if dt < args.timeout else ("slow", d, src, how, "")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--pd2bwc", required=True)
    ap.add_argument("--count", type=int, default=300)
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--timeout", type=float, default=10.0, help="seconds per compile: longer is a hang")
    ap.add_argument("--keep", help="copy failing mutants (and their output) into this directory")
    args = ap.parse_args()
    seed = args.seed
    if seed is None and os.environ.get("PD2BW_FUZZ_SEED"):
        seed = int(os.environ["PD2BW_FUZZ_SEED"])
    if seed is None:
        seed = int.from_bytes(os.urandom(4), "little")
    print("mutants.py: seed %d (replay with --seed %d or PD2BW_FUZZ_SEED=%d)" % (seed, seed, seed), flush=True)
    rng = random.Random(seed)
    pool = seeds()
    cases = []
    for n in range(args.count):
        kind, path = rng.choice(pool)
        with open(path, "rb") as f:
            text = f.read()
        hows = []
        for _ in range(rng.choice([1, 1, 2, 3, 5])):
            text, how = mutate(rng, text)
            hows.append(how)
        backend = "both" if rng.random() < 0.25 else "cpu"
        cases.append((n, kind, path, text, "%s: %s (--backend %s)" % (os.path.relpath(path, ROOT), "; ".join(hows),
                                                                      backend), backend))
    os.environ.setdefault("PD2BW_CACHE", tempfile.gettempdir() + "/pd2bw-fuzz-cache-%d" % os.getuid())
    work = tempfile.mkdtemp(prefix="pd2bw-mutants-")
    failures = []
    status = {}
    t0 = time.monotonic()
    try:
        with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, args.jobs)) as ex:
            futs = [ex.submit(run_one, args, *c, work) for c in cases]
            for f in futs:
                rc, r = f.result()
                status[rc] = status.get(rc, 0) + 1
                if r:
                    failures.append(r)
        for r in failures:
            problem, d, src, how, err = r
            print("FAIL %s\n  mutant: %s\n  %s" % (problem, how, err.strip().replace("\n", "\n  ")))
            if args.keep:
                os.makedirs(args.keep, exist_ok=True)
                dst = os.path.join(args.keep, "seed%d-%s" % (seed, os.path.basename(d)))
                shutil.copytree(d, dst, dirs_exist_ok=True)
                print("  kept in %s" % dst)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print("mutants.py: %d mutants in %.1fs (%d compiled, %d refused), %d failed (seed %d)" % (
        len(cases), time.monotonic() - t0, status.get(0, 0), status.get(1, 0), len(failures), seed))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
