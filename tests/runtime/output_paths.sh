#!/usr/bin/env bash
# pd2bwrun's output flags (--save, --log-json, --trace, --profile-out), on the one-stage
# trainer and the pipeline executor (issue 12, items 3, 6 and 12):
#   - a device, FIFO, socket or directory is refused before training, and left as it was;
#   - a symlink is written through (the link stays, its target gets the file);
#   - a path whose directory is missing or unusable is refused before training;
#   - a write error (EFBIG under `ulimit -f`, with SIGXFSZ ignored) fails the run,
#     names the file and the cause, cuts no log line in half and leaves no temporary;
#   - stale PATH.tmp.<pid> of a dead process is removed by the next run, nothing else.
# Devices are made with mknod in the scratch directory when root (never /dev's own
# nodes, which a broken build run as root would replace); otherwise /dev/null and
# /dev/full stand in, which a non-root run cannot damage.
#   output_paths.sh PD2BWC PD2BWRUN                 the one-stage trainer and threads
#   output_paths.sh PD2BWC PD2BWRUN mpi MPI_BUILT   under mpirun (exit 77, a CTest skip,
#                                                   without MPI: tests/need_mpi.sh)
set -u
PD2BWC=$1
RUN=$2
MODE=${3:-local}
SRC=$(cd "$(dirname "${BASH_SOURCE[0]}")/../pipeline" && pwd)
. "$SRC/../need_mpi.sh"
[ "$MODE" = mpi ] && need_mpi "${4:-0}"
. "$SRC/../scratch.sh" out
check() { # NAME COMMAND...
  local name=$1
  shift
  if "$@"; then ok; else bad "$name"; fi
}

python3 - "$T/train.bin" <<'PY' || exit 1
import struct, sys
text = b"Output flags write regular files, through symlinks, and never devices. " * 40
open(sys.argv[1], "wb").write(struct.pack("<%dH" % len(text), *text))
PY
for s in 1 2; do
  "$PD2BWC" "$SRC/tinygpt.model" -q -D layers=2 -D dim=16 -D seq=8 -D heads=2 --cluster "$SRC/cpu8.cluster" \
    --stages $s --replicas 1 --schedule 2bw -o "$T/plan$s" || { echo "pd2bwc failed"; exit 1; }
done
train() { # PLAN ARGS...: a short run (the stage programs are cached after the first)
  local plan=$1
  shift
  timeout 60 "$RUN" "$T/$plan" --data "$T/train.bin" --steps 3 --threads 1 "$@"
}
# ---- under mpirun (MODE mpi) rank 0 checks (it writes every output) and stops the job ----
if [ "$MODE" = mpi ]; then
  mkfifo "$T/fifo"
  out=$(timeout 60 mpirun --oversubscribe --allow-run-as-root -x PD2BW_CACHE -np 2 "$RUN" "$T/plan2" \
    --transport mpi --data "$T/train.bin" --steps 3 --threads 1 --save "$T/fifo" 2>&1)
  rc=$?
  if [ $rc -ne 0 ] && grep -q -- "--save $T/fifo: .*FIFO" <<<"$out" && ! grep -q '^step' <<<"$out"; then
    ok
  else
    bad "mpi --save FIFO: exit $rc, output: $out"
  fi
  check "the FIFO is still a FIFO" test "$(stat -c %F "$T/fifo")" = "fifo"
  # a write error of rank 0's streamed log stops every rank, agreed on: one error line
  # (the limit on the ranks only: mpirun's own shared memory files need more). The stage
  # programs are compiled first, so the limit meets the log and not the compiler's output
  # (with a cold cache: "cc ... File too large")
  train plan2 -q >/dev/null || { echo "plain run failed"; exit 1; }
  out=$(timeout 60 mpirun --oversubscribe --allow-run-as-root -x PD2BW_CACHE -np 2 \
    bash -c 'trap "" XFSZ; ulimit -f 1; exec "$@"' _ "$RUN" "$T/plan2" --transport mpi --data "$T/train.bin" \
    --steps 40 --threads 1 --log-json "$T/mbig.json" 2>&1)
  rc=$?
  check "mpi: pipeline log past the limit fails (exit $rc)" test $rc -ne 0
  check "mpi: pipeline log error names file and cause" grep -q "mbig.json.*File too large" <<<"$out"
  check "mpi: one error line" test "$(grep -c '^pd2bwrun: error' <<<"$out")" -eq 1 # (MPI warns about the limit too)
  check "mpi: pipeline log keeps whole lines" whole_lines "$T/mbig.json"
  check "mpi: pipeline log has the lines before the error" test "$(wc -l <"$T/mbig.json")" -lt 40
  echo "$pass passed, $fail failed"
  [ $fail -eq 0 ]
  exit
fi
train plan1 -q >/dev/null && train plan2 -q >/dev/null || { echo "plain runs failed"; exit 1; }

if [ "$(id -u)" = 0 ] && mknod "$T/null" c 1 3 2>/dev/null && mknod "$T/full" c 1 7 2>/dev/null; then
  NULLDEV=$T/null FULLDEV=$T/full
else
  NULLDEV=/dev/null FULLDEV=/dev/full
fi
mkfifo "$T/fifo"
kind() { stat -c %F "$1"; }

refused() { # NAME PATTERN PLAN ARGS...: exit 1 with PATTERN, before any step ran
  local name=$1 pat=$2 plan=$3
  shift 3
  local out rc
  out=$(train "$plan" "$@" 2>&1)
  rc=$?
  if [ $rc -eq 1 ] && grep -q -- "$pat" <<<"$out" && ! grep -q '^step' <<<"$out"; then
    ok
  else
    bad "$name: exit $rc, output: $out"
  fi
}

# ---- special files: refused before training, left untouched ----
for plan in plan1 plan2; do
  refused "$plan --save device" "--save $NULLDEV: .*character device" $plan --save "$NULLDEV"
  refused "$plan --log-json device" "--log-json $FULLDEV: .*character device" $plan --log-json "$FULLDEV"
  refused "$plan --save FIFO" "--save $T/fifo: .*FIFO" $plan --save "$T/fifo"
  refused "$plan --log-json FIFO" "--log-json $T/fifo: .*FIFO" $plan --log-json "$T/fifo"
  refused "$plan --save directory" "--save $T: .*directory" $plan --save "$T"
  refused "$plan --log-json missing dir" "--log-json /nonexistent/x.json: " $plan --log-json /nonexistent/x.json
  : >"$T/plain"
  refused "$plan --save under a file" "--save $T/plain/ck: " $plan --save "$T/plain/ck"
done
if [ "$(id -u)" != 0 ]; then # root writes into a read-only directory anyway
  mkdir "$T/ro" && chmod 555 "$T/ro"
  refused "--save in a read-only directory" "--save $T/ro/ck: cannot create files in $T/ro: " plan1 --save "$T/ro/ck"
  refused "--trace in a read-only directory" "--trace $T/ro/t.json: cannot create files in $T/ro: " plan2 --trace "$T/ro/t.json"
  chmod 755 "$T/ro"
fi
refused "--trace FIFO" "--trace $T/fifo: .*FIFO" plan2 --trace "$T/fifo"
refused "--profile-out device" "--profile-out $NULLDEV: .*character device" plan2 --profile-out "$NULLDEV"
refused "--trace missing dir" "--trace /nonexistent/t.json: " plan2 --trace /nonexistent/t.json
ln -s "$NULLDEV" "$T/to-null"
refused "--save link to a device" "--save $T/to-null: .*character device" plan2 --save "$T/to-null"
refused "two flags, one file" "name the same file" plan2 --trace "$T/same.json" --profile-out "$T/same.json"
check "the device is still a device" test "$(kind "$NULLDEV")" = "character special file"
check "the other device too" test "$(kind "$FULLDEV")" = "character special file"
check "the FIFO is still a FIFO" test "$(kind "$T/fifo")" = "fifo"
check "the link is still a link" test -L "$T/to-null"
check "no temporaries beside the FIFO" test -z "$(ls "$T" | grep -e '^fifo\.' -e '^null\.' -e '^full\.')"

# ---- symlinks are written through ----
for plan in plan1 plan2; do
  mkdir -p "$T/ck-$plan"
  ln -s "ck-$plan/real.safetensors" "$T/link-$plan"
  ln -s "ck-$plan/log.json" "$T/log-$plan"
  train $plan -q --save "$T/link-$plan" --log-json "$T/log-$plan" >/dev/null 2>&1
  check "$plan: --save link stays a link" test -L "$T/link-$plan"
  check "$plan: --save wrote the link's target" test -s "$T/ck-$plan/real.safetensors"
  check "$plan: --log-json link stays a link" test -L "$T/log-$plan"
  check "$plan: --log-json wrote the link's target" test "$(wc -l <"$T/ck-$plan/log.json")" -eq 3
  check "$plan: resume through the link" train $plan -q --steps 4 --resume "$T/link-$plan" >/dev/null
done

# ---- write errors: EFBIG past `ulimit -f` (KiB), SIGXFSZ ignored so write() reports it ----
limited() { # KIB PLAN ARGS...
  local kib=$1
  shift
  bash -c 'trap "" XFSZ; ulimit -f "$1"; shift; exec "$@"' _ "$kib" \
    timeout 60 "$RUN" "$T/$1" --data "$T/train.bin" --threads 1 "${@:2}"
}
out=$(limited 1 plan1 --steps 40 --log-json "$T/big.json" 2>&1)
rc=$?
check "one-stage log past the limit fails (exit $rc)" test $rc -eq 1
check "one-stage log error names file and cause" grep -q "big.json.*File too large" <<<"$out"
check "one-stage log keeps whole lines" whole_lines "$T/big.json"
out=$(limited 1 plan2 --steps 40 --log-json "$T/pbig.json" 2>&1)
rc=$?
check "pipeline log past the limit fails (exit $rc)" test $rc -eq 1
check "pipeline log error names file and cause" grep -q "pbig.json.*File too large" <<<"$out"
check "pipeline log leaves no temporary" test -z "$(ls "$T" | grep -e '^pbig\.json\.')"
# streamed by rank 0 (runtime/pipeline/pipeline_log.c): what was written before the
# failing line stays, in whole lines, and the run stops with one error line
check "pipeline log keeps whole lines" whole_lines "$T/pbig.json"
check "pipeline log has the lines before the error" test "$(wc -l <"$T/pbig.json")" -lt 40
check "pipeline log: one error line" test "$(grep -c 'error' <<<"$out")" -eq 1
out=$(limited 8 plan2 --steps 3 --trace "$T/tbig.json" 2>&1)
rc=$?
check "trace past the limit fails (exit $rc)" test $rc -eq 1
check "trace error names file and cause" grep -q "tbig.json.*File too large" <<<"$out"
check "trace leaves no temporary" test -z "$(ls "$T" | grep '^tbig\.json')"
out=$(limited 64 plan1 --steps 3 --save "$T/sbig.safetensors" 2>&1)
rc=$?
check "save past the limit fails (exit $rc)" test $rc -eq 1
check "save error names file and cause" grep -q "sbig.safetensors.*File too large" <<<"$out"
check "save leaves no temporary" test -z "$(ls "$T" | grep '^sbig\.safetensors')"

# ---- stale temporaries of dead processes ----
sh -c 'exit 0' &
dead=$!
wait $dead
: >"$T/ck.safetensors.tmp.$dead"
: >"$T/ck.safetensors.tmp.junk"
: >"$T/ck.safetensors.tmp.1" # pid 1 is alive
: >"$T/other.tmp.$dead"
train plan1 -q --save "$T/ck.safetensors" >/dev/null 2>&1
check "stale temporary of a dead process removed" test ! -e "$T/ck.safetensors.tmp.$dead"
check "a name not ours kept" test -e "$T/ck.safetensors.tmp.junk"
check "a live process's temporary kept" test -e "$T/ck.safetensors.tmp.1"
check "another file's temporary kept" test -e "$T/other.tmp.$dead"

echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
