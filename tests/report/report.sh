#!/usr/bin/env bash
# plan/report.html in a real browser (runtime/report/plan_report.h): pd2bwc writes it with
# every plan, pd2bwrun --trace rewrites it with the run; headless Chromium (Debian's
# `chromium`, scripts/deps.sh) loads the page once, and the dumped DOM must hold
# every figure, no script error, and the screenshot must be a real picture.
#   report.sh PD2BWC PD2BWRUN [SCREENSHOT.png]   (the screenshot is kept there if given)
set -u
PD2BWC=$1
RUN=$2
KEEP=${3:-}
. "$(dirname "$0")/../pipeline/common.sh"
BROWSER=$(command -v chromium || command -v chromium-browser || true)
if [ -z "$BROWSER" ]; then
  echo "FAIL no chromium on PATH: scripts/deps.sh installs it (only this test needs it)"
  exit 1
fi

STEPS=3
check "pd2bwc writes report.html" plan "$T/plan" -D bsz=8 -D mbs=1 --stages 2 --replicas 2 --microbatches 4 \
  --schedule 2bw  # recomputation left to the search: a second candidate, "slower by"
check "the compile-time page: the plan's data, no run, nothing fetched" python3 - "$T/plan" <<'PY'
import json, re, sys
page = open(sys.argv[1] + "/report.html").read()
assert "@PD2BW_REPORT_DATA@" not in page
data = json.loads(re.search(r'<script type="application/json" id="pd2bw-data">(.*?)</script>', page, re.S).group(1))
assert data["run"] is None and data["plan"]["config"]["stages"] == 2, data["plan"]["config"]
assert data["plan"]["cluster"]["memory_bytes"] == 24 * 2**30, data["plan"]["cluster"]
assert data["sim"]["events"], "no simulated events"
# self-contained: no src/href attribute, no URL but the SVG namespace name
assert not re.search(r"\b(src|href)\s*=", page), re.search(r"\b(src|href)\s*=.{0,60}", page).group(0)
urls = set(re.findall(r"https?://[^\s\"')]+", page)) - {"http://www.w3.org/2000/svg"}
assert not urls, urls
print("ok")
PY
check "pd2bwrun --trace runs $STEPS steps" train "$T/plan" $STEPS --trace "$T/trace.json" --log-json "$T/log.json"
check "no temporary left in the plan directory" bash -c '! ls "$1" | grep -q "\.tmp\."' _ "$T/plan"

# One page load: the DOM after the scripts ran, and a screenshot.
cd "$T"
timeout 90 "$BROWSER" --headless --disable-gpu --no-sandbox --no-first-run --hide-scrollbars \
  --user-data-dir="$T/browser-profile" --enable-logging=stderr --v=0 --window-size=1280,2300 --screenshot="$T/shot.png" \
  --dump-dom "file://$T/plan/report.html" >"$T/dom.html" 2>"$T/browser.err"
rc=$?
if [ $rc -eq 0 ]; then ok "chromium loaded the page"; else bad "chromium exited with $rc"; tail -20 "$T/browser.err"; fi
check "no console error" bash -c '! grep -E "Uncaught|ERROR:CONSOLE|CONSOLE.*Error" "$1"' _ "$T/browser.err"
[ -s "$T/browser.err" ] && grep -E "Uncaught|CONSOLE" "$T/browser.err" | head -5

check "the figures are in the DOM" python3 - "$T/dom.html" "$T/plan/plan.json" "$T/log.json" $STEPS <<'PY'
import json, re, sys
from html.parser import HTMLParser
dom, plan, steps = open(sys.argv[1]).read(), json.load(open(sys.argv[2])), int(sys.argv[4])
losses = [json.loads(l)["loss"] for l in open(sys.argv[3]) if l.strip()]

class Tree(HTMLParser):  # elements with their attributes, text and the element stack
    def __init__(self):
        super().__init__()
        self.stack, self.els = [], []
    def handle_starttag(self, tag, attrs):
        e = {"tag": tag, "a": dict(attrs), "text": "", "up": list(self.stack)}
        self.els.append(e)
        if tag not in ("meta", "br", "img", "input", "link"):  # HTML void elements
            self.stack.append(e)
    def handle_startendtag(self, tag, attrs):
        self.els.append({"tag": tag, "a": dict(attrs), "text": "", "up": list(self.stack)})
    def handle_endtag(self, tag):
        while self.stack and self.stack.pop()["tag"] != tag:
            pass
    def handle_data(self, d):
        for e in self.stack:
            e["text"] += d

t = Tree()
t.feed(dom)
def cls(e):
    return e["a"].get("class", "").split()
def inside(e, pred):
    return any(pred(u) for u in e["up"])
body = [e for e in t.els if e["tag"] == "body"][0]
assert body["a"].get("data-rendered") == "ok", "the page's script did not finish"
errs = [e for e in t.els if e["a"].get("id") == "report-error"]
assert not errs, errs[0]["text"]

cfg = plan["config"]
d, w = cfg["stages"], cfg["replicas"]
rows = {e["a"]["data-key"]: e["text"][len(e["a"]["data-key"]):] for e in t.els if e["tag"] == "tr" and "data-key" in e["a"]}
for key, want in [("schedule", cfg["schedule"]), ("stages (d)", str(d)), ("replicas per stage (w)", str(w)),
                  ("microbatches per step (m)", str(cfg["microbatches"])),
                  ("microbatch size (b)", str(cfg["microbatch_size"])), ("recomputation", "off"),
                  ("precision", plan["precision"]), ("cluster", "cpu8")]:
    assert key in rows and (rows[key] == want or rows[key].startswith(want + " ") or key == "cluster" and rows[key].startswith(want + ":")), (key, rows.get(key), want)
cands = [e for e in t.els if e["tag"] == "tr" and "candidate" in cls(e)]
assert len(cands) == len(plan["candidates"]), (len(cands), len(plan["candidates"]))
verdicts = [e["text"] for e in t.els if e["tag"] == "td" and "verdict" in cls(e)]
assert verdicts.count("chosen") == 1 and all(v for v in verdicts), verdicts
assert any(v.startswith("slower by") for v in verdicts), verdicts
assert all(v == "chosen" or v.startswith(("slower by", "over memory by", "as fast: lost the tie", "2bw needs")) for v in verdicts), verdicts

bars = [e for e in t.els if "stage-bar" in cls(e)]
assert sorted(int(b["a"]["data-stage"]) for b in bars) == list(range(d)), [b["a"] for b in bars]
for b in bars:
    segs = [e for e in t.els if "seg" in cls(e) and b in e["up"]]
    assert len(segs) >= 4, ("stage", b["a"]["data-stage"], "has", len(segs), "memory segments")
    kinds = {s["a"]["data-group"] for s in segs}
    assert {"weight versions", "gradients", "optimizer state", "stash", "workspace"} <= kinds, kinds

spans = {}
for kind in ("simulated", "simulated-step", "measured"):  # the whole simulation; one step of each, one axis
    svg = [e for e in t.els if e["tag"] == "svg" and e["a"].get("data-kind") == kind]
    assert len(svg) == 1, (kind, len(svg))
    spans[kind] = float(svg[0]["a"]["data-span-us"])
    lanes = [e for e in t.els if "lane" in cls(e) and svg[0] in e["up"]]
    assert len(lanes) == d * w, (kind, len(lanes), "lanes, want", d * w)
    for l in lanes:
        ev = [e for e in t.els if "ev" in cls(e) and l in e["up"]]
        fwd = [e for e in ev if re.match(r"F\d", e["text"])]
        # The measured step is rank 0's update-to-update time. Another replica's ranks
        # are tied to it only by the all-reduce: on a loaded host replica 1 can run its
        # next forwards before rank 0's step ends, so its lanes must show the step's
        # work (the all-reduce, the update), not necessarily a forward.
        assert fwd or (kind == "measured" and not l["a"]["data-lane"].endswith("/0") and ev), \
            (kind, l["a"]["data-lane"], "has no forward" if ev else "has no event")

assert spans["simulated-step"] == spans["measured"] > 0, spans  # one time axis for the two steps
busy = [(e["text"], cls(e)) for e in t.els if e["tag"] == "td" and ("busy-sim" in cls(e) or "busy-run" in cls(e))]
assert len(busy) == 2 * d and all(re.match(r"[0-9.]+ (s|ms|µs|us)", b[0]) for b in busy), busy

points = [e for e in t.els if e["tag"] == "circle" and "loss-point" in cls(e)]
assert len(points) == steps == len(losses), (len(points), steps, len(losses))
for p, want in zip(points, losses):   # each point's title: "step k: loss", as --log-json says
    k, v = re.match(r"step (\d+): ([0-9.]+)", p["text"]).groups()
    assert abs(float(v) - want) < 1e-4, (k, v, want)
print("ok: %d candidates, %d stage bars, %d+%d+%d lanes, %d loss points" % (len(cands), len(bars), d * w, d * w, d * w, len(points)))
PY
cat "$T/check.out"

check "the screenshot is a real picture" python3 - "$T/shot.png" <<'PY'
import struct, sys, zlib
b = open(sys.argv[1], "rb").read()
assert b[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
w, h = struct.unpack(">II", b[16:24])
assert (w, h) == (1280, 2300), (w, h)
assert len(b) > 50000, ("only", len(b), "bytes: an empty page?")
print("ok", w, "x", h, len(b), "bytes")
PY
cat "$T/check.out"
[ -n "$KEEP" ] && cp "$T/shot.png" "$KEEP"

# A plan directory that takes no report (here report.html is a directory): the run
# still succeeds with its trace written, and says the report was not updated.
rm "$T/plan/report.html" && mkdir "$T/plan/report.html"
if train "$T/plan" 1 --trace "$T/trace2.json" 2>"$T/warn.err" >/dev/null && [ -s "$T/trace2.json" ] &&
  grep -q "warning: the plan's report.html was not updated: .*report.html" "$T/warn.err"; then
  ok "an unwritable report is a warning, not a failed run"
else
  bad "an unwritable report is a warning, not a failed run"
fi
grep warning "$T/warn.err"
finish
