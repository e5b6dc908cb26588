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

With --plan (issue 24, item 10) the mutants are of plan.json instead: pd2bwc compiles a
2-stage x 2-replica 2bw tiny GPT with a tied embedding, and each mutant is its plan.json
(or its one-stage reference/'s) with one to three random mutations of the stages (slot
counts, ranks, segments), their memory buffers, their programs (source, hash, blocks,
params, inputs, boundary, rng_base, ...) or the tied groups: a value replaced by an
extreme or a wrong type, the same key swapped between two places (two parameters'
offsets, two stages' sources), a key deleted, an array emptied, an element duplicated
or two swapped. pd2bwrun trains it for 3 steps beside the plan's own programs; each
must end in exit 0 with exactly the base plan's losses and gradient norms (--log-json),
or exit 1 with an error message; never a signal, a hang or other training.
    mutants.py --plan --pd2bwc build/tools/pd2bwc --pd2bwrun build/tools/pd2bwrun

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
        b"[", b"]", b"B", b"repeat", b"if", b"else", b"#", b"/*", b"=", b","]
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


# ---- plan.json mutants (--plan) ----------------------------------------------------------

PLAN_VALUES = [0, -1, 1, 4, 255, 256, 2 ** 31, 2 ** 40, 2 ** 53, 1e308, -0.5, 0.5, "", "x", "stage0.c",
               "0000000000000000", True, False, None, [], {}]


def plan_nodes(o, path, out):
    """Every (path, value) under o, path a list of keys and indexes."""
    out.append((path, o))
    if isinstance(o, dict):
        for k, v in o.items():
            plan_nodes(v, path + [k], out)
    elif isinstance(o, list):
        for i, v in enumerate(o):
            plan_nodes(v, path + [i], out)


def plan_set(root, path, value):
    o = root
    for k in path[:-1]:
        o = o[k]
    o[path[-1]] = value


def plan_mutate(rng, plan):
    """One random mutation of the plan's stages (programs, buffers, ranks, slots) or tied
    groups, in place; returns its description."""
    nodes = []
    for top in ("stages", "tied"):
        plan_nodes(plan.get(top), [top], nodes)
    nodes = [(p, v) for p, v in nodes if len(p) > 1]

    def area(p):  # each area as likely as another, however many nodes it has
        if p[0] == "tied" or len(p) < 3:
            return p[0]
        if p[2] == "program" and len(p) > 3:
            return {"params": "params", "pipeline": "boundary", "inputs": "inputs"}.get(p[3], "program")
        return "memory" if p[2] == "memory" else "stage"
    if not nodes:
        return "nothing left to mutate"
    where = rng.choice(sorted({area(p) for p, _ in nodes}))
    there = [(p, w) for p, w in nodes if area(p) == where]
    leaves = [(p, w) for p, w in there if not isinstance(w, (dict, list))]
    path, v = rng.choice(leaves if leaves and rng.random() < 0.8 else there)  # mostly one value
    name = "".join("[%d]" % k if isinstance(k, int) else "." + k for k in path)[1:]
    kind = rng.choice(["value", "value", "swap", "swap", "swap", "delete", "dup", "empty", "reorder", "near"])
    if kind == "swap":  # the same key elsewhere: two params' offsets, two stages' sources, ...
        same = [(p, w) for p, w in nodes
                if p[-1] == path[-1] and w != v and p[:len(path)] != path and path[:len(p)] != p]
        if same:
            p2, w = rng.choice(same)
            plan_set(plan, path, w)
            plan_set(plan, p2, v)
            return "swap %s <-> %s" % (name, "".join("[%d]" % k if isinstance(k, int) else "." + k for k in p2)[1:])
        kind = "value"
    if kind == "near" and isinstance(v, (int, float)) and not isinstance(v, bool):
        w = rng.choice([v + 256, v - 256, v * 2, v // 2 if isinstance(v, int) else v / 2, v + 1])
        plan_set(plan, path, w)
        return "%s: %r -> %r" % (name, v, w)
    if kind in ("dup", "empty", "reorder") and isinstance(v, list) and v:
        if kind == "dup":
            v.insert(rng.randrange(len(v)), json.loads(json.dumps(rng.choice(v))))
        elif kind == "empty":
            v.clear()
        elif len(v) > 1:
            i = rng.randrange(len(v) - 1)
            v[i], v[i + 1] = v[i + 1], v[i]
        return "%s %s" % (kind, name)
    if kind == "delete":
        parent = plan
        for k in path[:-1]:
            parent = parent[k]
        del parent[path[-1]]
        return "delete %s" % name
    w = rng.choice(PLAN_VALUES)
    plan_set(plan, path, w)
    return "%s: %s -> %s" % (name, json.dumps(v)[:40], json.dumps(w))


def plan_losses(log):
    """The (loss, grad_norm) of every step of a --log-json file; None when unreadable."""
    try:
        with open(log, encoding="utf-8") as f:
            rows = [json.loads(line) for line in f if line.strip()]
        return [(r["loss"], r["grad_norm"]) for r in rows if "step" in r and "loss" in r]
    except (OSError, ValueError, KeyError):
        return None


def plan_run(args, plan_dir, data, log):
    """pd2bwrun on plan_dir, its log into log: (exit status or None on a hang, stderr, losses)."""
    cmd = [args.pd2bwrun, plan_dir, "--data", data, "--steps", "3", "--threads", "1", "-q", "--log-json", log]
    try:
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=args.timeout)
    except subprocess.TimeoutExpired:
        return None, "", None
    return p.returncode, p.stderr.decode("utf-8", "replace"), plan_losses(log) if p.returncode == 0 else None


def plan_one(args, n, base, baseline, text, how, data, work):
    """One mutated plan.json beside base's programs: exit 0 training exactly as the base
    plan, or exit 1 with one located message; never a crash, a hang or other losses."""
    d = os.path.join(work, "p%d" % n)
    os.mkdir(d)
    for f in os.listdir(base):
        if f != "plan.json":
            os.symlink(os.path.join(base, f), os.path.join(d, f))
    with open(os.path.join(d, "plan.json"), "w", encoding="utf-8") as f:
        f.write(text)
    rc, err, losses = plan_run(args, d, data, d + ".log.json")
    problem = None
    if rc is None:
        problem = "hang (over %gs)" % args.timeout
    elif rc < 0 or rc not in (0, 1):
        problem = "killed by signal %d" % -rc if rc < 0 else "exit status %d" % rc
    elif "internal error" in err:
        problem = "internal error"
    elif rc == 1 and not LOCATED.search(err):
        problem = "exit 1 without an error message"
    elif rc == 0 and losses != baseline:
        problem = "exit 0 with other training: %s, not %s" % (losses, baseline)
    if problem:
        return rc, (problem, d, os.path.join(d, "plan.json"), how, err[-2000:])
    shutil.rmtree(d, ignore_errors=True)
    if os.path.exists(d + ".log.json"):
        os.remove(d + ".log.json")
    return rc, None


def plan_cases(args, rng, work):
    """The base plans (a 2-stage x 2-replica 2bw tiny GPT with a tied embedding, and its
    one-stage reference), their baselines, and the mutants: [(n, base, baseline, text, how)]."""
    base = os.path.join(work, "base")
    model = os.path.join(ROOT, "tests/pipeline/tinygpt.model")
    cmd = [args.pd2bwc, model, "-q", "-D", "layers=3", "-D", "dim=16", "-D", "seq=8", "-D", "heads=2", "-D", "bsz=8",
           "-D", "mbs=1", "--cluster", os.path.join(ROOT, "tests/pipeline/cpu8.cluster"), "--stages", "2",
           "--replicas", "2", "--schedule", "2bw", "--recompute", "off", "--backend", "cpu", "-o", base]
    subprocess.run(cmd, check=True)
    data = os.path.join(work, "train.bin")
    text = (b"PipeDream-2BW keeps two weight versions per stage and updates them without flushing. ") * 200
    with open(data, "wb") as f:
        f.write(b"".join(bytes((c, 0)) for c in text))
    bases = []
    for b in (base, os.path.join(base, "reference")):
        rc, err, losses = plan_run(args, b, data, os.path.join(work, "base.log.json"))
        if rc != 0 or not losses:
            raise SystemExit("mutants.py: the base plan %s does not train: %s" % (b, err))
        with open(os.path.join(b, "plan.json"), encoding="utf-8") as f:
            bases.append((b, losses, json.load(f)))
    cases = []
    for n in range(args.count):
        b, losses, plan = rng.choice(bases)
        plan = json.loads(json.dumps(plan))
        hows = [plan_mutate(rng, plan) for _ in range(rng.choice([1, 1, 1, 2, 3]))]
        cases.append((n, b, losses, json.dumps(plan, indent=1),
                      "%s: %s" % (os.path.relpath(b, work), "; ".join(hows))))
    return cases, data


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--pd2bwc", required=True)
    ap.add_argument("--plan", action="store_true", help="mutate plan.json of a compiled plan and run pd2bwrun")
    ap.add_argument("--pd2bwrun", help="with --plan")
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
    if args.plan:
        return plan_main(args, rng, seed)
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


def report(failures, args, seed):
    for problem, d, src, how, err in failures:
        print("FAIL %s\n  mutant: %s\n  %s" % (problem, how, err.strip().replace("\n", "\n  ")))
        if args.keep:
            os.makedirs(args.keep, exist_ok=True)
            dst = os.path.join(args.keep, "seed%d-%s" % (seed, os.path.basename(d)))
            shutil.copytree(d, dst, symlinks=True, dirs_exist_ok=True)
            print("  kept in %s" % dst)


def plan_main(args, rng, seed):
    if not args.pd2bwrun:
        raise SystemExit("mutants.py: --plan needs --pd2bwrun")
    os.environ.setdefault("PD2BW_CACHE", tempfile.gettempdir() + "/pd2bw-fuzz-cache-%d" % os.getuid())
    work = tempfile.mkdtemp(prefix="pd2bw-plan-mutants-")
    t0 = time.monotonic()
    failures, status = [], {}
    try:
        cases, data = plan_cases(args, rng, work)
        with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, args.jobs)) as ex:
            futs = [ex.submit(plan_one, args, *c, data, work) for c in cases]
            for f in futs:
                rc, r = f.result()
                status[rc] = status.get(rc, 0) + 1
                if r:
                    failures.append(r)
        report(failures, args, seed)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print("mutants.py: %d plan.json mutants in %.1fs (%d trained as the plan, %d refused), %d failed (seed %d)" % (
        args.count, time.monotonic() - t0, status.get(0, 0), status.get(1, 0), len(failures), seed))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
