# Shared by the tests/pipeline/*.sh scripts: a scratch directory, a token file, the
# tiny GPT planner call, pd2bwrun calls and pass/fail counting. Source it after
# setting PD2BWC and RUN (pd2bwrun).
SRC=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
T=$(mktemp -d /tmp/pd2bw-pipe-XXXXXX)
trap 'rm -rf "$T"' EXIT
export PD2BW_CACHE=${PD2BW_CACHE:-/tmp/pd2bw-test-cache-$(id -u)}
pass=0
fail=0
python3 - "$T/train.bin" <<'PY' || exit 1
import struct, sys
text = (b"PipeDream-2BW keeps two weight versions per stage and updates them without "
        b"flushing the pipeline. ") * 200
open(sys.argv[1], "wb").write(struct.pack("<%dH" % len(text), *text))
PY
plan() { # DIR PD2BWC-ARGS...: the tiny GPT (3 layers, width 16, 8 tokens), dropout 0.1
  local dir=$1
  shift
  rm -rf "$dir"
  "$PD2BWC" "$SRC/tinygpt.model" -q -D layers=3 -D dim=16 -D seq=8 -D heads=2 \
    --cluster "$SRC/cpu8.cluster" "$@" -o "$dir"
}
plan_mlp() { # DIR PD2BWC-ARGS...: tests/pipeline/mlp.model (no tied weights, no attention)
  local dir=$1
  shift
  rm -rf "$dir"
  "$PD2BWC" "$SRC/mlp.model" -q --cluster "$SRC/cpu8.cluster" "$@" -o "$dir"
}
ok() { pass=$((pass + 1)); echo "ok   $*"; }
bad() { fail=$((fail + 1)); echo "FAIL $*"; }
check() { # NAME COMMAND...
  local name=$1
  shift
  if "$@" >"$T/check.out" 2>&1; then ok "$name"; else bad "$name"; cat "$T/check.out"; fi
}
finish() {
  echo "$pass passed, $fail failed"
  [ $fail -eq 0 ]
}
MPIRUN=(mpirun --oversubscribe --allow-run-as-root -x PD2BW_CACHE -x PD2BW_FAULT_INJECT)
train() { # PLAN STEPS ARGS...: pd2bwrun on local threads
  local dir=$1 steps=$2
  shift 2
  "$RUN" "$dir" --data "$T/train.bin" --steps "$steps" --threads 1 -q "$@"
}
mpitrain() { # NP PLAN STEPS ARGS...: pd2bwrun as NP MPI processes
  local np=$1 dir=$2 steps=$3
  shift 3
  # (sanitizer builds: the leaks LeakSanitizer reports under mpirun are Open MPI's own; mpi.sh)
  ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0" \
    timeout 120 "${MPIRUN[@]}" -np "$np" "$RUN" "$dir" --transport mpi --data "$T/train.bin" --steps "$steps" \
    --threads 1 -q "$@"
}
