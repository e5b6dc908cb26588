#!/usr/bin/env bash
# One seed rule in every CPU mode (issue 13; docs/data.md "Seeds"): --seed when given,
# else the checkpoint's when resuming, else the plan's; for the weights, dropout and
# the --shuffle order alike. So a run resumed without --seed continues the run that
# wrote the checkpoint bit for bit (its losses are the uninterrupted run's), and one
# resumed with --seed N runs (and saves) seed N. The one-stage trainer
# (PLAN/reference), threads with 2 stages x 2 replicas and (where mpirun exists) MPI;
# the tiny GPT has dropout, and --shuffle draws the data order from the seed.
#   seed.sh PD2BWC PD2BWRUN [mpi MPI_BUILT]
set -u
PD2BWC=$1
RUN=$2
. "$(dirname "$0")/common.sh"
. "$(dirname "$0")/../need_mpi.sh"
modes=(one threads)
if [ "${3:-}" = mpi ]; then
  need_mpi "${4:-0}"
  modes=(mpi)
fi
plan "$T/p" -D bsz=4 -D mbs=1 --stages 2 --replicas 2 --microbatches 2 --schedule 2bw --recompute off || exit 1
for m in "${modes[@]}"; do
  case $m in
  one) run=(train "$T/p/reference") ;;
  threads) run=(train "$T/p") ;;
  mpi) run=(mpitrain 4 "$T/p") ;;
  esac
  "${run[@]}" 4 --shuffle --seed 7 --log-json "$T/$m.a.json" >"$T/$m.out" 2>&1 &&
    "${run[@]}" 2 --shuffle --seed 7 --save "$T/$m.ck.st" >>"$T/$m.out" 2>&1 &&
    "${run[@]}" 4 --shuffle --resume "$T/$m.ck.st" --log-json "$T/$m.b.json" >>"$T/$m.out" 2>&1 &&
    "${run[@]}" 4 --shuffle --resume "$T/$m.ck.st" --seed 9 --log-json "$T/$m.c.json" --save "$T/$m.c.st" \
      >>"$T/$m.out" 2>&1 || { bad "$m: a run failed"; cat "$T/$m.out"; continue; }
  python3 - "$T" "$m" <<'PY' && ok "$m: the seed rule holds" || bad "$m: the seed rule"
import json, struct, sys
d, m = sys.argv[1:]
loss = lambda f: [json.loads(l)["loss"] for l in open(f"{d}/{m}.{f}.json")]
def seed(f):
    raw = open(f"{d}/{m}.{f}.st", "rb").read()
    return json.loads(raw[8:8 + struct.unpack("<Q", raw[:8])[0]])["__metadata__"]["seed"]
a, b, c = loss("a"), loss("b"), loss("c")
bad = 0
if seed("ck") != "7" or seed("c") != "9":
    print(f"FAIL checkpoint seeds {seed('ck')} (want 7) and {seed('c')} (want 9 from --seed 9)"); bad += 1
if b != a[2:]:
    print(f"FAIL resumed without --seed: steps 3-4 {b}, the uninterrupted run's {a[2:]}"); bad += 1
if c == a[2:]:
    print(f"FAIL resumed with --seed 9: the losses of seed 7 {c}"); bad += 1
print(f"     uninterrupted {a[2:]}, resumed {b}, resumed --seed 9 {c}")
sys.exit(1 if bad else 0)
PY
done
finish
