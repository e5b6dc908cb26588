#!/usr/bin/env bash
# --steps 0 (issue 16): with --save, the initial weights are written and nothing is
# trained, on the one-stage trainer, pipelined threads and (where mpirun exists) MPI;
# a run resumed from that checkpoint logs the same losses, bit for bit (%.9g), as a
# fresh run.
#   steps0.sh PD2BWC PD2BWRUN                 the one-stage trainer and threads
#   steps0.sh PD2BWC PD2BWRUN mpi MPI_BUILT   MPI (exit 77, a CTest skip, without MPI)
set -u
PD2BWC=$1
RUN=$2
. "$(dirname "$0")/common.sh"
. "$(dirname "$0")/../need_mpi.sh"
[ "${3:-}" = mpi ] && need_mpi "${4:-0}"
plan "$T/p" -D bsz=2 -D mbs=1 --stages 2 --replicas 1 --microbatches 2 --schedule 2bw --recompute off || exit 1
losses() { python3 -c 'import json,sys; print(" ".join("%d:%s" % (j["step"], repr(j["loss"])) for j in map(json.loads, open(sys.argv[1]))))' "$1"; }
same_resume() { # NAME RUNNER... (RUNNER PLAN STEPS ARGS...)
  local name=$1
  shift
  rm -f "$T/$name".*
  if ! "$@" 0 --save "$T/$name.st0" >"$T/$name.out0" 2>&1; then bad "$name: --steps 0 --save"; cat "$T/$name.out0"; return; fi
  if [ ! -s "$T/$name.st0" ]; then bad "$name: --steps 0 wrote no checkpoint"; return; fi
  if grep -q "step *1/" "$T/$name.out0"; then bad "$name: --steps 0 trained a step"; cat "$T/$name.out0"; return; fi
  ok "$name: --steps 0 --save writes the initial weights, exit 0"
  "$@" 3 --log-json "$T/$name.fresh" >/dev/null 2>&1 || { bad "$name: fresh run"; return; }
  "$@" 3 --resume "$T/$name.st0" --log-json "$T/$name.res" >/dev/null 2>&1 || { bad "$name: resumed run"; return; }
  local a b
  a=$(losses "$T/$name.fresh")
  b=$(losses "$T/$name.res")
  if [ -n "$a" ] && [ "$a" = "$b" ]; then ok "$name: resumed from step 0 = fresh run ($a)"
  else bad "$name: resumed from step 0 differs: fresh '$a', resumed '$b'"; fi
}
one() { local steps=$1; shift; "$RUN" "$T/p/reference" --data "$T/train.bin" --steps "$steps" --threads 1 -q "$@"; }
threads() { local steps=$1; shift; train "$T/p" "$steps" "$@"; }
mpi() { local steps=$1; shift; mpitrain 2 "$T/p" "$steps" "$@"; }
if [ "${3:-}" = mpi ]; then
  same_resume mpi mpi
  finish
  exit
fi
same_resume one-stage one
same_resume threads threads
# the initial weights are the same whichever executor wrote them
python3 - "$T/one-stage.st0" "$T/threads.st0" <<'PY' && ok "one-stage and pipelined step-0 weights agree" || bad "step-0 weights differ"
import json, struct, sys
def load(p):
    b = open(p, "rb").read(); n = struct.unpack("<Q", b[:8])[0]
    h = json.loads(b[8:8 + n]); h.pop("__metadata__", None)
    return {k: b[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]] for k, v in h.items() if not k.startswith(("opt.", "prev.", "next."))}
a, b = load(sys.argv[1]), load(sys.argv[2])
sys.exit(0 if a and a == b else 1)
PY
# --init then --steps 0: the checkpoint's weights, written as they were loaded
one 2 --save "$T/two.st" >/dev/null 2>&1 || bad "one-stage 2 steps"
for m in one threads; do
  if "$m" 0 --init "$T/two.st" --save "$T/$m.init0" >/dev/null 2>&1 && python3 - "$T/two.st" "$T/$m.init0" <<'PY'
import json, struct, sys
def load(p):
    b = open(p, "rb").read(); n = struct.unpack("<Q", b[:8])[0]
    h = json.loads(b[8:8 + n]); h.pop("__metadata__", None)
    return {k: b[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]] for k, v in h.items() if not k.startswith(("opt.", "prev.", "next."))}
a, b = load(sys.argv[1]), load(sys.argv[2])
sys.exit(0 if a and a == b else 1)
PY
  then ok "$m: --init CKPT --steps 0 --save writes CKPT's weights"; else bad "$m: --init --steps 0 weights"; fi
done
if out=$("$RUN" "$T/p" --data "$T/train.bin" --steps -1 2>&1); then bad "--steps -1 accepted"
else grep -q "steps needs an integer from 0 to" <<<"$out" && ok "--steps -1 refused: $out" || bad "--steps -1 message: $out"; fi
finish
