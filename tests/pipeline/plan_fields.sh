#!/usr/bin/env bash
# plan.json validation (issue 12, item 8): each field of a real plan (pd2bwc's, 2
# stages, 2bw, tied embedding) is set to a value outside its documented range
# (docs/plan-format.md, "What the runtime checks"); pd2bwrun must exit 1, at once
# (before allocating anything: config.microbatches = 2^40 used to grow to 16 GB),
# with one message naming the field and the value. The same for the one-stage
# reader on PLAN/reference; and the untouched plans still train.
#   plan_fields.sh PD2BWC PD2BWRUN
set -u
PD2BWC=$1
RUN=$2
. "$(dirname "$0")/common.sh"
plan "$T/p" -D bsz=8 -D mbs=1 --stages 2 --replicas 1 --microbatches 8 --schedule 2bw --recompute off || exit 1
P=$T/p
R=$T/p/reference # the one-stage trainer reads the same fields with the same rules

# DIR|PATH|VALUE|MESSAGE (P: the 2-stage plan, R: its one-stage reference). PATH is
# dotted with [i] indexes (a segment may hold JSON escapes such as \u0000); VALUE is
# JSON, or @PATH for another field's value, or "+KEY=JSON" to add a key to the object
# at PATH.
cat >"$T/table" <<'TABLE'
P|version|2|plan.json: version: unsupported plan format version
P|config.microbatches|1099511627776|plan.json: config.microbatches = 1099511627776: must be an integer 1..1048576
P|config.microbatches|0|plan.json: config.microbatches = 0: must be an integer 1..1048576
P|config.microbatches|2.5|config.microbatches = 2.5: must be an integer
P|config.microbatches|"8"|config.microbatches = "8": expected a number
P|config.microbatch_size|0|config.microbatch_size = 0: must be an integer 1..1048576
P|config.replicas|0|config.replicas = 0: must be an integer 1..65536
P|config.stages|1000000|config.stages = 1000000: must be an integer 1..16384
P|config.stages|3|config.stages: must be >= 1 and match the "stages" array
P|config.schedule|"2bw\u0000junk"|config.schedule = "2bw\u0000junk": a string with a NUL or control character
P|config.schedule|"zigzag"|config.schedule = "zigzag": expected gpipe, 1f1b, 2bw or pipedream
P|config.recompute|"yes"|config.recompute = "yes": expected true or false
P|config|+sched\u0000ule="gpipe"|config.(a key) = "sched\u0000ule": a string with a NUL
P|train.batch|-8|train.batch = -8: must be an integer 0..1073741824
P|train.batch|2147483648|train.batch = 2147483648: must be an integer 0..1073741824
P|train.microbatch|-2|train.microbatch = -2: must be an integer 0..1073741824
P|train.lr|-1|train.lr = -1: must be a finite number >= 0
P|train.beta1|1|train.beta1 = 1: must be in [0, 1)
P|train.beta2|-0.5|train.beta2 = -0.5: must be in [0, 1)
P|train.eps|0|train.eps = 0: must be a finite number > 0
P|train.weight_decay|-0.1|train.weight_decay = -0.1: must be a finite number >= 0
P|train.min_lr|-1|train.min_lr = -1: must be a finite number >= 0
P|train.clip|-1|train.clip = -1: must be a finite number >= 0
P|train.warmup|-1|train.warmup = -1: must be an integer 0..9007199254740992
P|train.steps|1.5|train.steps = 1.5: must be an integer 0..9007199254740992
P|train.seed|"12x"|train.seed = "12x": must be a decimal integer 0..18446744073709551615
P|train.seed|"18446744073709551616"|train.seed = "18446744073709551616": must be a decimal integer
P|train.optimizer|"adam"|train.optimizer = "adam": expected "adamw" or "sgd"
P|train.lr_schedule|"step"|train.lr_schedule = "step": expected "constant", "cosine" or "linear"
P|train.flush_steps|-1|train.flush_steps = -1: must be an integer 0..9007199254740992
P|train.predict|11|train.predict = 11: must be in [0, 10]
P|stages[0].weight_versions|2|stage 0: 2 batches need 3 weight versions and 2 stash slots; the plan has 2 and 2
R|train.predict|1|train.predict: must be 0 unless config.schedule is 2bw
P|stages[1].program.source|"../x.c"|stages[1].program.source = "../x.c": must be a file name inside the plan directory
P|stages[1].program.hash|"zz"|stages[1].program.hash = "zz": expected 16 hex digits
P|stages[0].program.abi|1|stages[0].program: stage ABI version 1, this runtime speaks 
P|stages[0].program.real_bytes|2|stages[0].program.real_bytes = 2: must be 4 or 8
P|stages[0].program.microbatch_size|2|stages[0].program.microbatch_size = 2: must equal config.microbatch_size (1)
P|stages[0].program.blocks.params|-1|stages[0].program.blocks.params = -1: must be an integer 0..281474976710656
P|stages[0].program.params[0].shape[0]|0|stages[0].program.params[0].shape[0] = 0: must be an integer 1..1099511627776
P|stages[0].program.params[1].offset|@stages[0].program.params[0].offset|stages[0].program.params[1]: "wpe" at bytes 0..512 overlaps params[0] "wte" at 0..16384
P|stages[0].program.params[0].init|"uniform"|stages[0].program.params[0].init = "uniform": expected zeros, ones or normal
P|stages[0].program.params[2].std|-1|stages[0].program.params[2].std = -1: must be a finite number >= 0
P|stages[0].program.params[0].decay|1|stages[0].program.params[0].decay = 1: expected true or false
P|stages[0].program.inputs[0].dtype|"i64"|stages[0].program.inputs[0].dtype = "i64": expected "i32" or "f32"
P|stages[0].program.inputs[0].stream|"labels"|stages[0].program.inputs[0].stream = "labels": expected "tokens", "targets" or "other"
P|stages[0].program.flops.forward|-1|stages[0].program.flops.forward = -1: must be a finite number >= 0
P|stages[0].program.cuda.att_head_size|-4|stages[0].program.cuda.att_head_size = -4: must be an integer 0..65536
P|stages[0].weight_versions|200|stages[0].weight_versions = 200: must be an integer 1..128
P|stages[0].stash_slots|0|stages[0].stash_slots = 0: must be an integer 1..128
P|stages[0].memory.total_bytes|1152921504606846976|stages[0].memory.total_bytes = 1152921504606846976: must be an integer 0..281474976710656
P|stages[0].memory.buffers[1].offset|@stages[0].memory.buffers[0].offset|stages[0].memory.buffers[1]: weights 1 at bytes 0..
P|stages[0].memory.buffers[0].index|200|stages[0].memory.buffers[0].index = 200: must be an integer 0..127
P|stages[0].memory.buffers[0].kind|"scratch"|stages[0].memory.buffers[0].kind = "scratch": not a buffer kind
P|stages[0].ranks[0].rank|5|stages[0].ranks[0].rank = 5: must be an integer 0..1
P|stages[0].program.pipeline.boundary[0].peer|7|stages[0].program.pipeline.boundary[0].peer = 7: the program stage0.c was compiled with 1
P|tied[0].stages[1]|5|tied[0].stages = [0,5]: the program stage0.c ties "wte" over stages [0,1]
P|tied[0].group|-1|tied[0].group = -1: must be an integer 0..65535
R|config.microbatches|1099511627776|config.microbatches = 1099511627776: must be an integer 1..1048576
R|config.schedule|"gpipe\u0000x"|config.schedule = "gpipe\u0000x": a string with a NUL
R|train.lr|-1|train.lr = -1: must be a finite number >= 0
R|train.batch|0.5|train.batch = 0.5: must be an integer 0..1073741824
R|stages[0].program.params[1].offset|@stages[0].program.params[0].offset|overlaps params[0] "wte"
TABLE
sed -i "s#^P|#$P|#; s#^R|#$R|#" "$T/table"

# For line N of the table, $T/mN is DIR with plan.json's field changed (the other
# files linked). One python for every case: its start-up costs more than a run.
python3 - "$T/table" "$T" <<'PY' || { bad "mutating plan.json"; finish; exit 1; }
import json, os, re, sys
table, tmp = sys.argv[1:]
def walk(path):
    parts = []
    for seg in path.split("."):
        m = re.match(r"^(.*?)((\[\d+\])*)$", seg)
        key = json.loads('"' + m.group(1) + '"')
        if key:
            parts.append(key)
        parts += [int(i) for i in re.findall(r"\[(\d+)\]", m.group(2))]
    return parts
for n, line in enumerate(open(table).read().splitlines(), 1):
    src, path, value, _ = line.split("|", 3)
    plan = json.load(open(os.path.join(src, "plan.json")))
    def get(parts):
        o = plan
        for k in parts:
            o = o[k]
        return o
    parts = walk(path)
    if value.startswith("+"):
        k, v = value[1:].split("=", 1)
        get(parts)[json.loads('"' + k + '"')] = json.loads(v)
    else:
        v = get(walk(value[1:])) if value.startswith("@") else json.loads(value)
        get(parts[:-1])[parts[-1]] = v
    dst = os.path.join(tmp, "m%d" % n)
    os.mkdir(dst)
    for f in os.listdir(src):
        if f != "plan.json":
            os.symlink(os.path.join(src, f), os.path.join(dst, f))
    open(os.path.join(dst, "plan.json"), "w").write(json.dumps(plan, indent=1))
PY

n=0
while IFS='|' read -r dir path value want; do
  n=$((n + 1))
  t0=$(date +%s%N)
  timeout -s KILL 20 "$RUN" "$T/m$n" --data "$T/train.bin" --steps 2 --threads 1 -q >"$T/out" 2>&1
  rc=$?
  ms=$((($(date +%s%N) - t0) / 1000000))
  if [ $rc -eq 1 ] && grep -qF -- "$want" "$T/out" && [ "$(grep -c 'error' "$T/out")" -eq 1 ] && [ $ms -lt 3000 ]; then
    ok "${dir#"$T/"}: $path = $value (${ms} ms): $(grep -m1 error "$T/out")"
  else
    bad "${dir#"$T/"}: $path = $value: exit $rc after $ms ms, wanted one line with: $want"
    cat "$T/out"
  fi
done <"$T/table"

# the plans as pd2bwc wrote them still train, on both paths
check "the untouched 2-stage plan trains" train "$P" 2
check "the untouched one-stage plan trains" train "$R" 2
finish
