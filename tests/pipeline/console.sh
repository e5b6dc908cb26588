#!/usr/bin/env bash
# One console for every mode (issue 16): the one-stage trainer, pipelined threads and
# (where mpirun exists) MPI print one line per step in the same format
# (runtime/core/console.c) with the GLOBAL loss of the --log-json file, write the same
# JSON keys, and -q prints no step line and no BLAS note (stderr empty on success).
#   console.sh PD2BWC PD2BWRUN              the one-stage trainer and threads
#   console.sh PD2BWC PD2BWRUN mpi MPI_BUILT  the one-stage trainer and MPI (exit 77,
#                                             a CTest skip, without MPI: need_mpi.sh)
set -u
PD2BWC=$1
RUN=$2
. "$(dirname "$0")/common.sh"
. "$(dirname "$0")/../need_mpi.sh"
if [ "${3:-}" = mpi ]; then
  need_mpi "${4:-0}"
  modes=(one mpi)
else
  modes=(one threads)
fi
# 2 stages x 2 replicas: the global loss is the mean over both replicas' microbatches
plan "$T/p" -D bsz=4 -D mbs=1 --stages 2 --replicas 2 --microbatches 2 --schedule 2bw --recompute off || exit 1
runone() { local out=$1; shift; "$RUN" "$T/p/reference" --data "$T/train.bin" --steps 3 --threads 1 "$@"; }
runthreads() { local out=$1; shift; "$RUN" "$T/p" --data "$T/train.bin" --steps 3 --threads 1 "$@"; }
# common.sh's MPIRUN forwards PD2BW_FAULT_INJECT, and mpirun warns on stderr when unset
# (sanitizer builds: the leaks LeakSanitizer reports under mpirun are Open MPI's own; mpi.sh)
runmpi() { local out=$1; shift; ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0" timeout 120 mpirun --oversubscribe --allow-run-as-root -x PD2BW_CACHE -np 4 "$RUN" "$T/p" --transport mpi --data "$T/train.bin" \
  --steps 3 --threads 1 "$@"; }
for m in "${modes[@]}"; do
  if "run$m" x --log-json "$T/$m.json" >"$T/$m.out" 2>"$T/$m.err"; then ok "$m: 3 steps"
  else bad "$m: run failed"; cat "$T/$m.out" "$T/$m.err"; fi
  # -q: nothing but the final summary; no step line, no note on stderr
  if "run$m" x -q --log-json "$T/$m.q.json" >"$T/$m.q.out" 2>"$T/$m.q.err" && ! grep -q '^step ' "$T/$m.q.out" &&
    [ ! -s "$T/$m.q.err" ]; then ok "$m: -q prints no step line and nothing on stderr"
  else bad "$m: -q output"; cat "$T/$m.q.out" "$T/$m.q.err"; fi
done
python3 - "$T" "${modes[@]}" <<'PY' || fail=$((fail + 1))
import json, re, sys
d, modes = sys.argv[1], sys.argv[2:]
line = re.compile(r"^step (\d+)/3 \| loss ([0-9.]+) \| lr [0-9.e+-]+ \| grad norm ([0-9.]+) \| ([0-9.]+) ms \| "
                  r"([0-9]+) tok/s \| [0-9.]+ GFLOP/s( \| MFU [0-9.]+%)? \| ETA [0-9hms]+$")
keys, bad = {}, 0
for m in modes:
    steps = [l.rstrip("\n") for l in open(f"{d}/{m}.out") if l.startswith("step ")]
    log = [json.loads(l) for l in open(f"{d}/{m}.json")]
    keys[m] = [sorted(j) for j in log]
    shapes = [line.match(s) for s in steps]
    if len(steps) != 3 or not all(shapes):
        print(f"FAIL {m}: step lines not in the one format: {steps}"); bad += 1; continue
    for s, j in zip(shapes, log):
        if int(s.group(1)) != j["step"] or s.group(2) != "%.4f" % j["loss"] or s.group(3) != "%.4f" % j["grad_norm"]:
            print(f"FAIL {m}: step {s.group(1)}: line loss {s.group(2)} / norm {s.group(3)}, log {j['loss']} / {j['grad_norm']}"); bad += 1
        if not float(s.group(4)) > 0 or j["ms"] is None or not j["ms"] > 0 or not j["tokens_per_s"] > 0:
            print(f"FAIL {m}: step {s.group(1)}: time not measured ({s.group(4)} ms, log {j['ms']})"); bad += 1
    print(f"ok   {m}: 3 step lines in the one format, loss and grad norm = the log's ({[j['loss'] for j in log]})")
ref = keys[modes[0]]
for m in modes[1:]:
    if keys[m] != ref:
        print(f"FAIL JSON keys differ: {modes[0]} {ref[0]}, {m} {keys[m][0]}"); bad += 1
    else:
        print(f"ok   {m}: the JSON log has {modes[0]}'s keys {ref[0]}")
# same model, data and weights: the first step's loss and gradient norm (tied
# embedding included, clipping off) are the same in every mode
for k in ("loss", "grad_norm"):
    v1 = {m: json.loads(open(f"{d}/{m}.json").readline())[k] for m in modes}
    if len(set(round(v, 5) for v in v1.values())) != 1:
        print(f"FAIL the first step's {k} differs between modes: {v1}"); bad += 1
    else:
        print(f"ok   the first step's {k} agrees across modes: {v1}")
sys.exit(1 if bad else 0)
PY
finish
