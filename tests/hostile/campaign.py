#!/usr/bin/env python3
"""tests/hostile/campaign.py — issue 24's hostile-input campaign, run again.

Every probe is one command a careless or hostile user (or another local user) could
run, and what pd2bw must do with it. Each outcome is classed:

  ok          what the probe expects: a refusal (exit 1 with a message that names
              what and where: the probe's pattern), or a run that trains as the
              same run without the probe's edit does, or a prompt stop on a signal
  crash       killed by a signal it was not sent, exit >= 128, a sanitizer report
  hang        still running at the probe's time limit (the process group is killed)
  data-loss   a file the command read as input was changed
  code-exec   a program planted in a cache directory ran
  silent      exit 0 where a refusal was due, or trained to another loss
  unlocated   refused, but the message does not say what and where (the pattern)
  wrong       any other exit status

Usage: campaign.py BUILD_DIR [--report FILE] [--only SUBSTRING] [--keep]
Exit 0 when every probe is ok. Run from the source root. Takes a few minutes on 2 cores.
"""
import argparse
import json
import os
import re
import shutil
import signal
import stat
import struct
import subprocess
import sys
import tempfile
import time

SRC = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MODEL = os.path.join(SRC, "tests", "pipeline", "tinygpt.model")
CLUSTER = os.path.join(SRC, "tests", "pipeline", "cpu8.cluster")
GPT = os.path.join(SRC, "models", "gpt.model")
SIZE = ["-D", "layers=2", "-D", "dim=16", "-D", "seq=8", "-D", "heads=2"]


class Probe:
    def __init__(self, kind, name, argv, expect="refuse", pattern=None, env=None, inputs=(), timeout=60,
                 setup=None, send=None, compare=None):
        self.kind, self.name, self.argv, self.expect = kind, name, argv, expect
        self.pattern, self.env, self.inputs, self.timeout = pattern, env or {}, list(inputs), timeout
        self.setup, self.send, self.compare = setup, send, compare


class Campaign:
    def __init__(self, build, work):
        self.build, self.w = build, work
        self.tool = {t: os.path.join(build, "tools", t) for t in ("pd2bwc", "pd2bwrun", "pd2bw-data", "pd2bw-export")}
        self.probes, self.results = [], []
        self.cache = os.path.join(work, "cache")
        self.mpirun = shutil.which("mpirun")

    def p(self, *a):
        return os.path.join(self.w, *a)

    # ---- fixtures -------------------------------------------------------------------
    def tokens(self, name, text):
        with open(self.p(name), "wb") as f:
            f.write(struct.pack("<%dH" % len(text), *text))

    def compile(self, name, *args, model=MODEL, stages=1):
        argv = [self.tool["pd2bwc"], model, "-q", *SIZE, "--cluster", CLUSTER, "--stages", str(stages),
                "--replicas", "1", *args, "-o", self.p(name)]
        subprocess.run(argv, check=True)

    def run_ok(self, argv, env=None):
        e = dict(os.environ, PD2BW_CACHE=self.cache, **(env or {}))
        r = subprocess.run(argv, env=e, capture_output=True, text=True, timeout=120)
        if r.returncode != 0:
            sys.exit("campaign: fixture failed: %s\n%s" % (" ".join(argv), r.stderr))
        return r.stdout + r.stderr

    def train(self, plan, *args, steps=2):
        return [self.tool["pd2bwrun"], self.p(plan), "--data", self.p("d.bin"), "--steps", str(steps),
                "--threads", "1", *args]

    def fixtures(self):
        self.tokens("d.bin", b"A hostile user is a careful user with other goals. " * 40)
        self.tokens("v.bin", b"Held-out tokens for the validation loss, not trained on. " * 40)
        self.tokens("d2.bin", b"Other training tokens, for a rank that was given another file. " * 40)
        self.compile("plan1", "--schedule", "2bw")
        self.compile("plan2", "--schedule", "2bw", stages=2)
        self.compile("plan2-1f1b", "--schedule", "1f1b", stages=2)
        self.compile("plan2-lr", "--schedule", "2bw", "-D", "train.lr=3e-3", stages=2)
        self.compile("big1", "--schedule", "2bw", "-D", "layers=3")
        self.compile("gpt", "-D", "vocab=256", "-D", "train.batch=2", "-D", "train.microbatch=1", model=GPT)
        self.run_ok(self.train("plan1", "--save", self.p("c.st")))
        self.run_ok(self.train("big1", "--save", self.p("big.st")))
        self.run_ok(self.train("gpt", "--save", self.p("g.st"), steps=0))
        self.base = {}
        for plan in ("plan1", "plan2"):
            self.base[plan] = final_loss(self.run_ok(self.train(plan, "-q", steps=3)))

    # ---- running one probe ----------------------------------------------------------
    def snapshot(self, paths):
        snap = {}
        for path in paths:
            for root, _, files in os.walk(path) if os.path.isdir(path) else [(None, None, [path])]:
                for f in files:
                    full = os.path.join(root, f) if root else f
                    try:
                        st = os.lstat(full)
                        if stat.S_ISREG(st.st_mode):
                            with open(full, "rb") as fh:
                                snap[full] = hash(fh.read())
                        else:
                            snap[full] = ("not a file", stat.S_IFMT(st.st_mode))
                    except OSError as e:
                        snap[full] = ("missing", e.errno)
        return snap

    def execute(self, pr):
        if pr.setup:
            pr.setup()
        before = self.snapshot(pr.inputs)
        marker = self.p("PLANTED_RAN")
        env = dict(os.environ, PD2BW_CACHE=self.cache, PD2BW_TEST_PLANTED=marker, ASAN_OPTIONS="detect_leaks=0")
        env.update(pr.env)
        for k, v in pr.env.items():
            if v is None:
                env.pop(k)
        t0 = time.time()
        proc = subprocess.Popen(pr.argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True, text=True, errors="replace")
        sent_at = None
        if pr.send:
            delay, sig = pr.send
            try:
                proc.wait(timeout=delay)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, sig) if pr.argv[0] == self.mpirun else proc.send_signal(sig)
                sent_at = time.time()
        try:
            out, _ = proc.communicate(timeout=pr.timeout)
            rc = proc.returncode
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            out, _ = proc.communicate()
            return self.record(pr, "hang", "still running after %d s: %s" % (pr.timeout, tail(out)))
        took = time.time() - t0
        if os.path.exists(marker):
            os.unlink(marker)
            return self.record(pr, "code-exec", "the planted program ran")
        after = self.snapshot(pr.inputs)
        changed = [k for k in before if after.get(k) != before[k]]
        if changed:
            return self.record(pr, "data-loss", "changed: %s (exit %d)" % (", ".join(changed), rc))
        if re.search(r"AddressSanitizer|runtime error:|LeakSanitizer|Segmentation|core dumped|Assertion", out):
            return self.record(pr, "crash", tail(out))
        if pr.expect == "signal":
            want = 128 + pr.send[1]
            if rc == 1 and pr.pattern and re.search(pr.pattern, out):  # refused before the signal came
                return self.record(pr, "ok", first_error(out))
            if rc == want and sent_at and time.time() - sent_at < 15:
                return self.record(pr, "ok", "exit %d %.1f s after the signal" % (rc, time.time() - sent_at))
            if rc < 0 or (rc >= 128 and rc != want):
                return self.record(pr, "crash", "exit %d: %s" % (rc, tail(out)))
            return self.record(pr, "wrong", "exit %d (want %d), %s" % (
                rc, want, "signal sent" if sent_at else "it ended before the signal") + ": " + tail(out))
        if rc < 0 or rc >= 128:
            return self.record(pr, "crash", "exit %d: %s" % (rc, tail(out)))
        if pr.expect == "refuse":
            if rc == 0:
                return self.record(pr, "silent", "exit 0: " + tail(out))
            if rc != 1:
                return self.record(pr, "wrong", "exit %d: %s" % (rc, tail(out)))
            if pr.pattern and not re.search(pr.pattern, out):
                return self.record(pr, "unlocated", "no /%s/ in: %s" % (pr.pattern, tail(out)))
            return self.record(pr, "ok", first_error(out))
        # accept, or accept-or-refuse ("either": exit 0 training the same, or a located refusal)
        if rc == 1 and pr.expect == "either":
            if pr.pattern and not re.search(pr.pattern, out):
                return self.record(pr, "unlocated", "no /%s/ in: %s" % (pr.pattern, tail(out)))
            return self.record(pr, "ok", first_error(out))
        if rc != 0:
            return self.record(pr, "wrong", "exit %d: %s" % (rc, tail(out)))
        if pr.compare is not None:
            loss = final_loss(out)
            if loss is None or abs(loss - pr.compare) > 1e-6 * max(1, abs(pr.compare)):
                return self.record(pr, "silent", "trained to %s, the unedited plan to %.6f" % (loss, pr.compare))
        return self.record(pr, "ok", "exit 0 in %.1f s" % took)

    def record(self, pr, outcome, detail):
        self.results.append((pr, outcome, detail))
        return outcome


def tail(out, n=300):
    out = " ".join(out.split())
    return out if len(out) <= n else "..." + out[-n:]


def first_error(out):
    for line in out.splitlines():
        if "error" in line:
            return line.strip()[:240]
    return tail(out, 160)


def final_loss(out):
    m = re.findall(r"final loss ([0-9.naninf]+)", out)
    return float(m[-1]) if m else None


# ---- the probes -------------------------------------------------------------------------
def outputs_naming_inputs(c):
    """Item 1: every output flag against every input the run reads."""
    never = r"(is|names) (the|a file of the|an input)|never replaces|a directory, not a regular file"
    for plan in ("plan1", "plan2"):
        inputs = {"--data": c.p("d.bin"), "--val-data": c.p("v.bin"), "--init": c.p("g.st"),
                  "plan.json": c.p(plan, "plan.json"), "stage0.c": c.p(plan, "stage0.c"),
                  "report.html": c.p(plan, "report.html"), "the plan directory": c.p(plan)}
        for out_flag in ("--log-json", "--save", "--trace", "--profile-out"):
            for what, path in inputs.items():
                args = ["--val-data", c.p("v.bin")] if what == "--val-data" else []
                argv = c.train(plan, *args, out_flag, path)
                if what == "--init":
                    if plan == "plan2" or out_flag == "--save":
                        continue  # --init needs the GPT plan; --save may replace its own --init (kept current)
                    argv = c.train("gpt", "--init", path, out_flag, path)
                c.probes.append(Probe("outputs", "%s %s = %s" % (plan, out_flag, what), argv, pattern=never,
                                      inputs=[c.p("d.bin"), c.p("v.bin"), c.p("g.st"), c.p(plan)]))
        # --resume: every output but --save (one checkpoint kept current is normal use)
        for out_flag in ("--log-json", "--trace", "--profile-out"):
            c.probes.append(Probe("outputs", "plan1 %s = --resume" % out_flag,
                                  c.train("plan1", "--resume", c.p("c.st"), out_flag, c.p("c.st"), steps=3),
                                  pattern=never, inputs=[c.p("c.st")]))
        link = c.p("link-%s.bin" % plan)
        c.probes.append(Probe("outputs", "%s --log-json = a symlink to --data" % plan,
                              c.train(plan, "--log-json", link), pattern=never, inputs=[c.p("d.bin")],
                              setup=lambda link=link: (os.path.lexists(link) or os.symlink(c.p("d.bin"), link))))
        hard = c.p("hard-%s.bin" % plan)
        c.probes.append(Probe("outputs", "%s --save = a hard link to --data" % plan,
                              c.train(plan, "--save", hard), pattern=never, inputs=[c.p("d.bin")],
                              setup=lambda hard=hard: (os.path.exists(hard) or os.link(c.p("d.bin"), hard))))
    c.probes.append(Probe("outputs", "pd2bw-data --out-prefix over its input",
                          [c.tool["pd2bw-data"], "--input", c.p("text_train.bin"), "--out-prefix", c.p("text")],
                          pattern=never, inputs=[c.p("text_train.bin")],
                          setup=lambda: open(c.p("text_train.bin"), "w").write("words to tokenise\n" * 50)))
    c.probes.append(Probe("outputs", "pd2bw-export --llmc over its checkpoint",
                          [c.tool["pd2bw-export"], c.p("g.st"), "--heads", "2", "--llmc", c.p("g.st"), "--force"], pattern=never,
                          inputs=[c.p("g.st")]))
    c.probes.append(Probe("outputs", "pd2bwc -o over the directory of its model",
                          [c.tool["pd2bwc"], c.p("m", "tiny.model"), "-q", *SIZE, "--cluster", CLUSTER, "-o", c.p("m")],
                          pattern=r"-o|model", inputs=[c.p("m")],
                          setup=lambda: (os.makedirs(c.p("m"), exist_ok=True), shutil.copy(MODEL, c.p("m", "tiny.model")))))


def cache_trust(c):
    """Item 2: a cache directory used only when it is the user's own and private."""
    evil = c.p("evil.so")

    def plant(d, mode, owner=None):
        def setup():
            os.makedirs(d, exist_ok=True)
            os.chmod(d, mode)
            for f in os.listdir(c.cache):
                if f.endswith(".so"):
                    shutil.copy(evil, os.path.join(d, f))
            if owner is not None:
                for f in [d] + [os.path.join(d, x) for x in os.listdir(d)]:
                    os.chown(f, owner, -1)
        return setup
    src = c.p("evil.c")
    open(src, "w").write("#include <fcntl.h>\n#include <stdlib.h>\n#include <unistd.h>\n"
                         "__attribute__((constructor)) static void planted(void) {\n"
                         "  const char *p = getenv(\"PD2BW_TEST_PLANTED\");\n"
                         "  if (p) close(open(p, O_WRONLY | O_CREAT, 0644));\n}\n")
    subprocess.run(["cc", "-shared", "-fPIC", "-o", evil, src], check=True)
    b = open(evil, "rb").read()
    h = 1469598103934665603
    for ch in b:
        h = ((h ^ ch) * 1099511628211) & 0xFFFFFFFFFFFFFFFF
    open(evil, "ab").write(b"PD2BWSUM%016x%016x" % (h, len(b)))
    cases = [("mode 0777", 0o777, None), ("mode 0775", 0o775, None), ("mode 0757", 0o757, None),
             ("mode 0770", 0o770, None)]
    if os.getuid() == 0:
        cases.append(("owned by uid 65534", 0o700, 65534))
    for name, mode, owner in cases:
        d = c.p("cache-" + name.replace(" ", "-"))
        c.probes.append(Probe("cache", "PD2BW_CACHE " + name, c.train("plan1"), expect="accept",
                              env={"PD2BW_CACHE": d}, setup=plant(d, mode, owner)))
    c.probes.append(Probe("cache", "PD2BW_CACHE names a file", c.train("plan1"), expect="accept",
                          env={"PD2BW_CACHE": c.p("d.bin")}, inputs=[c.p("d.bin")]))
    c.probes.append(Probe("cache", "no HOME, no PD2BW_CACHE", c.train("plan1"), expect="accept",
                          env={"PD2BW_CACHE": None, "HOME": None}))
    link = c.p("cache-link")
    c.probes.append(Probe("cache", "PD2BW_CACHE a symlink to a 0777 directory", c.train("plan1"), expect="accept",
                          env={"PD2BW_CACHE": link},
                          setup=lambda: (plant(c.p("cache-open"), 0o777)(),
                                         os.path.lexists(link) or os.symlink(c.p("cache-open"), link))))


def plan_edits(c):
    """Item 3: plan.json against the compiled program. An edit is refused naming the
    field, or it changes nothing the program computes and trains to the same loss."""
    def edit(plan, name, fn, field):
        dst = c.p("edit-%s-%s" % (plan, re.sub(r"[^a-z0-9]+", "-", name.lower())))

        def setup():
            shutil.rmtree(dst, ignore_errors=True)
            shutil.copytree(c.p(plan), dst, symlinks=True)
            with open(os.path.join(dst, "plan.json")) as f:
                p = json.load(f)
            fn(p)
            with open(os.path.join(dst, "plan.json"), "w") as f:
                json.dump(p, f)
        argv = [c.tool["pd2bwrun"], dst, "--data", c.p("d.bin"), "--steps", "3", "--threads", "1", "-q"]
        c.probes.append(Probe("plan.json", "%s: %s" % (plan, name), argv, expect="either", pattern=field,
                              setup=setup, compare=c.base[plan], inputs=[c.p("d.bin")]))

    def stage(p, i=0):
        return p["stages"][i]

    def params(p, i=0):
        return stage(p, i)["program"]["params"]

    def first_param(p, i=0):
        return params(p, i)[0]

    def blocks(p, i=0):
        return stage(p, i)["program"]["blocks"]
    for plan in ("plan1", "plan2"):
        edit(plan, "work block shrunk to 256", lambda p: blocks(p).__setitem__("work", 256), r"work|block")
        edit(plan, "work block grown 4x", lambda p: blocks(p).__setitem__("work", blocks(p)["work"] * 4), r"work")
        edit(plan, "params block halved", lambda p: blocks(p).__setitem__("params", blocks(p)["params"] // 2),
             r"params|block")
        edit(plan, "stash block shrunk", lambda p: blocks(p).__setitem__("stash", 0), r"stash|block")
        edit(plan, "first parameter's offset moved",
             lambda p: first_param(p).__setitem__("offset", first_param(p)["offset"] + 64), r"offset|param")
        edit(plan, "first parameter's shape changed",
             lambda p: first_param(p).__setitem__("shape", [1] * len(first_param(p)["shape"])), r"shape|param")
        edit(plan, "first parameter renamed", lambda p: first_param(p).__setitem__("name", "h.9.zz"), r"name|param")
        edit(plan, "a parameter dropped", lambda p: params(p).pop(), r"param")
        edit(plan, "two parameters' offsets swapped", lambda p: swap_offsets(params(p)), r"offset|param")
        edit(plan, "tied groups emptied", lambda p: p.__setitem__("tied", []), r"tied")
        edit(plan, "stage source hash changed", lambda p: stage(p)["program"].__setitem__("hash", "0" * 16),
             r"hash|program|source")
        edit(plan, "memory total_bytes halved",
             lambda p: stage(p)["memory"].__setitem__("total_bytes", stage(p)["memory"]["total_bytes"] // 2),
             r"memory|bytes")
        edit(plan, "weight_versions 1", lambda p: stage(p).__setitem__("weight_versions", 1), r"version")
        edit(plan, "the stage's parameter count changed",
             lambda p: stage(p).__setitem__("parameters", stage(p)["parameters"] + 1), r"param")
        edit(plan, "the program's microbatch_size doubled",
             lambda p: stage(p)["program"].__setitem__("microbatch_size", stage(p)["program"]["microbatch_size"] * 2),
             r"microbatch")
        edit(plan, "the first input's bytes halved",
             lambda p: stage(p)["program"]["inputs"][0].__setitem__("bytes", 8), r"input|bytes")
        edit(plan, "the loss flag cleared", lambda p: stage(p, -1)["program"].__setitem__("loss", False), r"loss")
        edit(plan, "microbatch_size doubled",
             lambda p: p["config"].__setitem__("microbatch_size", p["config"]["microbatch_size"] * 2),
             r"microbatch")
    edit("plan2", "two stages' programs swapped", lambda p: swap_programs(p), r"stage|program|source|hash")
    edit("plan2", "stage 1's boundary list emptied", lambda p: empty_boundary(p, 1), r"boundar")
    edit("plan2", "stage 0's boundary list emptied", lambda p: empty_boundary(p, 0), r"boundar")
    edit("plan2", "schedule changed to gpipe", lambda p: p["config"].__setitem__("schedule", "gpipe"), r"schedule|stream")
    edit("plan2", "stage 1's first/last segment moved",
         lambda p: stage(p, 1).__setitem__("first_segment", stage(p, 1)["first_segment"] + 1), r"segment")


def swap_offsets(params):  # the two largest, so that both hold other shapes' bytes
    params.sort(key=lambda q: -q["numel"])
    if len(params) > 1:
        params[0]["offset"], params[1]["offset"] = params[1]["offset"], params[0]["offset"]


def swap_programs(p):
    a, b = p["stages"][0]["program"], p["stages"][1]["program"]
    for k in ("source", "hash"):
        if k in a and k in b:
            a[k], b[k] = b[k], a[k]


def empty_boundary(p, i):
    p["stages"][i]["program"]["pipeline"]["boundary"] = []


def ranks_disagree(c):
    """Item 4: MPI ranks started with different things stop before the first step."""
    if not c.mpirun:
        return
    mpi = [c.mpirun, "--oversubscribe", "--allow-run-as-root", "-x", "PD2BW_CACHE"]

    def rank(plan, *args, data="d.bin", steps=3):
        return ["-np", "1", c.tool["pd2bwrun"], c.p(plan), "--transport", "mpi", "--data", c.p(data),
                "--steps", str(steps), "--threads", "1", "-q", "--timeout", "20", *args]
    same = rank("plan2")
    cases = [("another --seed", rank("plan2", "--seed", "7")), ("another --data", rank("plan2", data="d2.bin")),
             ("another --steps", rank("plan2", steps=5)), ("another plan's lr", rank("plan2-lr")),
             ("another schedule", rank("plan2-1f1b")), ("--shuffle on one rank", rank("plan2", "--shuffle"))]
    for name, other in cases:
        c.probes.append(Probe("ranks", name, mpi + same + [":"] + other, pattern=r"rank 1", timeout=90))
    c.probes.append(Probe("ranks", "the same on both ranks", mpi + same + [":"] + same, expect="accept", timeout=90,
                          compare=c.base["plan2"]))


def safetensors_edit(src, dst, fn):
    b = open(src, "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    head = json.loads(b[8:8 + n])
    data = bytearray(b[8 + n:])
    head, data = fn(head, data)
    hb = json.dumps(head).encode()
    hb += b" " * (-len(hb) % 8)
    open(dst, "wb").write(struct.pack("<Q", len(hb)) + hb + bytes(data))


def checkpoints(c):
    """Items 5 and 7: a checkpoint that does not match the plan exactly, or holds NaN."""
    def mk(name, fn, src="c.st"):
        dst = c.p("ck-" + re.sub(r"[^a-z0-9]+", "-", name.lower()) + ".st")
        return dst, (lambda: safetensors_edit(c.p(src), dst, fn))

    def names(h):
        return [k for k in h if k != "__metadata__"]

    def drop(h, d):
        h.pop([k for k in names(h) if not k.startswith(("prev.", "next.", "opt.", "adam"))][-1])
        return h, d

    def extra(h, d):
        k = names(h)[0]
        h["h.99.extra"] = dict(h[k])
        return h, d

    def poison(value):
        def fn(h, d):
            k = [k for k in names(h) if not k.startswith(("prev.", "next."))][0]
            a = h[k]["data_offsets"][0]
            d[a:a + 4] = struct.pack("<f", value)
            return h, d
        return fn

    def reshape(h, d):
        k = names(h)[0]
        h[k]["shape"] = list(reversed(h[k]["shape"])) + [1]
        return h, d

    def dtype(h, d):
        h[names(h)[0]]["dtype"] = "F16"
        return h, d

    def overlap(h, d):
        ks = names(h)
        h[ks[1]]["data_offsets"] = h[ks[0]]["data_offsets"]
        return h, d
    cases = [("a tensor missing", drop, r"missing|not in"), ("an extra tensor", extra, r"h\.99\.extra"),
             ("NaN in a weight", poison(float("nan")), r"NaN|not finite"),
             ("Inf in a weight", poison(float("inf")), r"(?i)\binf\b|not finite"),
             ("a shape changed", reshape, r"shape"), ("dtype F16", dtype, r"F16|dtype"),
             ("two tensors' bytes overlap", overlap, r"overlap|offset")]
    for name, fn, pat in cases:
        path, setup = mk(name, fn)
        c.probes.append(Probe("checkpoints", "--resume: " + name, c.train("plan1", "--resume", path, steps=3),
                              pattern=pat, setup=setup, inputs=[path]))
    path, setup = mk("gpt-nan", poison(float("nan")), src="g.st")
    c.probes.append(Probe("checkpoints", "--init: NaN in a weight", c.train("gpt", "--init", path), pattern=r"NaN|finite",
                          setup=setup, inputs=[path]))
    c.probes.append(Probe("checkpoints", "pd2bw-export: NaN in a weight",
                          [c.tool["pd2bw-export"], path, "--heads", "2", "--llmc", c.p("nan-export.bin")], pattern=r"NaN|finite",
                          setup=setup, inputs=[path]))
    c.probes.append(Probe("checkpoints", "--resume: a 3-layer model into a 2-layer plan",
                          c.train("plan1", "--resume", c.p("big.st"), steps=3), pattern=r"h\.2|extra|layer",
                          inputs=[c.p("big.st")]))
    c.probes.append(Probe("checkpoints", "--resume: a 2-layer model into a 3-layer plan",
                          c.train("big1", "--resume", c.p("c.st"), steps=3), pattern=r"h\.2|missing",
                          inputs=[c.p("c.st")]))
    trunc = c.p("ck-truncated.st")
    c.probes.append(Probe("checkpoints", "--resume: truncated to half", c.train("plan1", "--resume", trunc, steps=3),
                          pattern=r"ck-truncated\.st", inputs=[trunc],
                          setup=lambda: open(trunc, "wb").write(open(c.p("c.st"), "rb").read()[:os.path.getsize(c.p("c.st")) // 2])))
    garbage = c.p("ck-garbage.st")
    c.probes.append(Probe("checkpoints", "--resume: a header length of 2^60", c.train("plan1", "--resume", garbage),
                          pattern=r"ck-garbage\.st", inputs=[garbage],
                          setup=lambda: open(garbage, "wb").write(struct.pack("<Q", 1 << 60) + b"{}")))


def hangs(c):
    """Item 6: FIFOs, signals, a compiler that never returns, a stuck rank."""
    fifo = c.p("fifo")

    def mkfifo():
        if not os.path.exists(fifo):
            os.mkfifo(fifo)
    for flag in ("--data", "--val-data", "--resume", "--init"):
        argv = c.train("gpt" if flag == "--init" else "plan1")
        if flag == "--data":
            argv[argv.index("--data") + 1] = fifo
        else:
            argv += [flag, fifo]
        c.probes.append(Probe("hangs", "%s names a FIFO" % flag, argv, pattern=r"fifo|FIFO|regular", setup=mkfifo,
                              timeout=20))
    c.probes.append(Probe("hangs", "pd2bwc's model is a FIFO", [c.tool["pd2bwc"], fifo, "-o", c.p("fifo-plan")],
                          pattern=r"fifo|regular", setup=mkfifo, timeout=20))
    c.probes.append(Probe("hangs", "pd2bw-data --input a FIFO",
                          [c.tool["pd2bw-data"], "--input", fifo, "--out-prefix", c.p("fifo-data")],
                          pattern=r"fifo|regular", setup=mkfifo, timeout=20))
    for plan in ("plan1", "plan2"):
        for sig, name in ((signal.SIGINT, "SIGINT"), (signal.SIGTERM, "SIGTERM")):
            c.probes.append(Probe("hangs", "%s: %s during training" % (plan, name),
                                  c.train(plan, "-q", steps=100000), expect="signal", send=(2.0, sig), timeout=30))
    save = c.p("sig-save.st")
    c.probes.append(Probe("hangs", "plan2: SIGTERM with --save", c.train("plan2", "-q", "--save", save, steps=100000),
                          expect="signal", send=(2.0, signal.SIGTERM), timeout=30))
    c.probes.append(Probe("hangs", "the checkpoint a signal left resumes",
                          c.train("plan2", "--resume", save, steps=1000000), expect="signal",
                          pattern=r"sig-save\.st", send=(3.0, signal.SIGINT)))
    sleeper = c.p("slow-cc")
    open(sleeper, "w").write("#!/bin/sh\nsleep 600\n")
    os.chmod(sleeper, 0o755)
    for plan in ("plan1", "plan2"):
        c.probes.append(Probe("hangs", "%s: a C compiler that never returns, PD2BW_CC_TIMEOUT=5" % plan,
                              c.train(plan), pattern=r"compil", timeout=40,
                              env={"PD2BW_CC": sleeper, "PD2BW_CC_TIMEOUT": "5",
                                   "PD2BW_CACHE": c.p("cache-slow-" + plan)}))
    c.probes.append(Probe("hangs", "plan2: rank 1 stuck in a library, --timeout 5",
                          c.train("plan2", "--timeout", "5", steps=5), pattern=r"rank|timed out|timeout", timeout=40,
                          env={"PD2BW_FAULT_INJECT": "1:2:stuck"}))


def errors(c):
    """Item 7 and 9: every numeric flag's range, token files, cluster and model values."""
    rng = r"(from|between|in|at least|at most|range|expected|>=|<=)[^\n]*[0-9]"
    flags = [("--steps", "-1"), ("--steps", "abc"), ("--threads", "0"), ("--threads", "100000"),
             ("--eval-every", "-5"), ("--eval-batches", "0"), ("--timeout", "0"), ("--timeout", "-3"),
             ("--seed", "-1"), ("--seed", "1e99"), ("--reference-tol", "-1"), ("--reference-tol", "nan"),
             ("--device", "-1"), ("--steps", "99999999999999999999")]
    for flag, value in flags:
        argv = c.train("plan1")
        if flag == "--steps":
            argv[argv.index("--steps") + 1] = value
        elif flag == "--threads":
            argv[argv.index("--threads") + 1] = value
        else:
            argv += [flag, value]
        c.probes.append(Probe("errors", "pd2bwrun %s %s" % (flag, value), argv, pattern=re.escape(flag) + ".*" + rng))

    def llmc(name, magic, version, n, body, have=None):  # have: tokens after the header (n)
        def setup():
            hdr = struct.pack("<256i", magic, version, n, *([0] * 253))
            k = n if have is None else have
            open(c.p(name), "wb").write(hdr[:body] if body < 1024 else hdr + struct.pack("<%dH" % k, *([65] * k)))
        return setup
    for name, args, pat in (("short.bin", (20240520, 1, 1000, 600), r"short.bin.*(header|short|bytes)"),
                            ("magic.bin", (20240521, 1, 1000, 4096), r"magic.bin.*(magic|header)"),
                            ("version.bin", (20240520, 9, 1000, 4096), r"version.bin.*version"),
                            ("count.bin", (20240520, 1, 5000, 4096, 1000), r"count.bin.*(tokens|count|bytes|short|truncated)")):
        c.probes.append(Probe("errors", "token file: " + name, c.train("plan1", "--data", c.p(name)), pattern=pat,
                              setup=llmc(name, *args)))
    odd = c.p("odd.bin")
    c.probes.append(Probe("errors", "token file of an odd byte count", c.train("plan1", "--data", odd),
                          pattern=r"odd\.bin", setup=lambda: open(odd, "wb").write(b"abc")))
    empty = c.p("empty.bin")
    c.probes.append(Probe("errors", "an empty token file", c.train("plan1", "--data", empty), pattern=r"empty\.bin",
                          setup=lambda: open(empty, "wb").close()))

    def pd2bwc(name, *args, model=MODEL, pattern, cluster=CLUSTER):
        c.probes.append(Probe("errors", "pd2bwc " + name, [c.tool["pd2bwc"], model, *SIZE, "--cluster", cluster, *args,
                                                           "-o", c.p("err-plan")], pattern=pattern))
    c.probes.append(Probe("errors", "pd2bwc -D train.lr=1e300 (diverges at once; a refusal is fine too)",
                          [c.tool["pd2bwc"], MODEL, *SIZE, "--cluster", CLUSTER, "-D", "train.lr=1e300", "-q",
                           "-o", c.p("err-plan-lr")], expect="either", pattern=r"train\.lr"))
    for key, value in (("batch", "0"), ("batch", "-4"), ("lr", "-1"), ("lr", "nan"), ("steps", "-5"),
                       ("microbatch", "0"), ("warmup", "-1"), ("flush_steps", "-1"), ("predict", "11"),
                       ("delay_comp", "-1"), ("weight_decay", "-0.1"), ("beta1", "1.5"), ("seed", "-2"),
                       ("grad_clip", "-1")):
        pd2bwc("-D train.%s=%s" % (key, value), "-D", "train.%s=%s" % (key, value),
               pattern=r"train\.%s.*[0-9]" % key)
    terms = c.p("terms.model")

    def write_terms():
        text = open(MODEL).read()
        open(terms, "w").write(text.replace("param layers", "param many = " + "+".join(["1"] * 300) + ";\n  param layers", 1))
    c.probes.append(Probe("errors", "pd2bwc: a 300-term sum", [c.tool["pd2bwc"], terms, *SIZE, "--cluster", CLUSTER,
                                                              "-o", c.p("terms-plan")],
                          expect="accept", setup=write_terms))
    for key, value in (("tflops", "1e-300"), ("tflops", "0"), ("tflops", "-1"), ("memory_gib", "0"),
                       ("memory_gbs", "1e-300"), ("intra_node_gbs", "-2"), ("launch_us", "-1"),
                       ("gemm_efficiency", "0"), ("devices_per_node", "0")):
        path = c.p("bad-%s-%s.cluster" % (key, value))
        text = open(CLUSTER).read()
        new = re.sub(r"(\n\s*%s\s*=\s*)[^;]*;" % key, r"\g<1>%s;" % value, text)
        if new == text:
            new = text.replace("{", "{\n  %s = %s;" % (key, value), 1)
        open(path, "w").write(new)
        pd2bwc("cluster %s = %s" % (key, value), cluster=path, pattern=r"%s.*:[0-9]+.*%s" % (re.escape(os.path.basename(path)), key))
    c.probes.append(Probe("errors", "PD2BW_CACHE names a file (a note, then trains)", c.train("plan1"),
                          expect="accept", env={"PD2BW_CACHE": c.p("v.bin")}, inputs=[c.p("v.bin")]))
    userdir = c.p("userdir")

    def mkuser():  # a plan directory pd2bwc wrote, and a file of the user's put in it since
        if not os.path.exists(userdir):
            shutil.copytree(c.p("plan1"), userdir)
        open(os.path.join(userdir, "notes.txt"), "w").write("my notes, not pd2bwc's\n")
    c.probes.append(Probe("errors", "pd2bwc -o a plan directory holding a file of the user's",
                          [c.tool["pd2bwc"], MODEL, *SIZE, "--cluster", CLUSTER, "-q", "-o", userdir],
                          pattern=r"notes\.txt", setup=mkuser, inputs=[userdir]))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build")
    ap.add_argument("--report")
    ap.add_argument("--only")
    ap.add_argument("--keep", action="store_true")
    a = ap.parse_args()
    work = tempfile.mkdtemp(prefix="pd2bw-hostile-")
    os.chmod(work, 0o700)
    c = Campaign(os.path.abspath(a.build), work)
    os.makedirs(c.cache, mode=0o700)
    try:
        c.fixtures()
        for gen in (outputs_naming_inputs, cache_trust, plan_edits, ranks_disagree, checkpoints, hangs, errors):
            gen(c)
        probes = [p for p in c.probes if not a.only or a.only in p.kind + ": " + p.name]
        for pr in probes:
            outcome = c.execute(pr)
            print("%-10s %-12s %s" % (outcome, pr.kind, pr.name), flush=True)
        bad = [r for r in c.results if r[1] != "ok"]
        lines = ["| outcome | area | probe | what happened |", "|---|---|---|---|"]
        for pr, outcome, detail in c.results:
            lines.append("| %s | %s | %s | %s |" % (outcome, pr.kind, pr.name, detail.replace("|", "\\|")))
        counts = {}
        for _, o, _ in c.results:
            counts[o] = counts.get(o, 0) + 1
        summary = "%d probes: %s" % (len(c.results), ", ".join("%s %d" % kv for kv in sorted(counts.items())))
        print(summary)
        for pr, outcome, detail in bad:
            print("  %s: %s: %s: %s" % (outcome, pr.kind, pr.name, detail))
        if a.report:
            open(a.report, "w").write(summary + "\n\n" + "\n".join(lines) + "\n")
        return 1 if bad else 0
    finally:
        if a.keep:
            print("work: " + work)
        else:
            subprocess.run(["chmod", "-R", "u+rwx", work])
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
