#!/usr/bin/env bash
# The pipelined --log-json, streamed by rank 0 for every plan shape (issue 13,
# runtime/pipeline/pipeline_log.c):
#   - the streamed file is byte for byte what the run's outcome gives at the end
#     (log_stream_check: the losses reduced over the replicas as the summary's), for
#     d=2 1f1b, d=2 x w=2 2bw with a validation every 2 steps, d=1 x w=2 gpipe and
#     d=2 x w=2 pipedream;
#   - it drains nothing: 2bw and pipedream with the log run every rank's instructions
#     in the order they run without it (--trace; one stretch of 12 steps either way,
#     the log's stretches being ceil(256·(d-1)/m) = 64 steps long);
#   - it is streamed: a run whose rank 1 fails at the start of batch K leaves the
#     whole lines rank 0 wrote (1f1b: a step per stretch, K lines; 2bw, d=2 x w=2,
#     m=4, one stretch: rank 0 writes step t's line as it ends OPT_STEP(t), 0-based
#     batch t; rank 1, stage 0 of replica 1, stops at F25, batch 6's first forward,
#     which comes before its B24 and OPT_STEP(5), so rank 0's all-reduce of batch 5
#     never completes: its last OPT_STEP is batch 4's, the last line step 4);
#   - pd2bwrun streams it too (the threads plan's lines while it trains).
#   log_stream.sh PD2BWC PD2BWRUN LOG_STREAM_CHECK                threads
#   log_stream.sh PD2BWC PD2BWRUN LOG_STREAM_CHECK mpi MPI_BUILT  the same under mpirun
#                                       (exit 77, a CTest skip, without MPI)
set -u
PD2BWC=$1
RUN=$2
CHECK=$3
MODE=${4:-local}
SRC=$(cd "$(dirname "${BASH_SOURCE[0]}")/../pipeline" && pwd)
. "$SRC/../need_mpi.sh"
[ "$MODE" = mpi ] && need_mpi "${5:-0}"
# Open MPI's own allocations are never freed: LeakSanitizer would fail every mpirun
# run of the sanitizer build (as tests/pipeline/mpi.sh)
[ "$MODE" = mpi ] && export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
. "$SRC/../scratch.sh" logstream

python3 - "$T/train.bin" "$T/val.bin" <<'PY' || exit 1
import struct, sys
text = b"A log that streams lets tail -f follow a pipelined run as it trains. " * 40
open(sys.argv[1], "wb").write(struct.pack("<%dH" % len(text), *text))
val = b"Held-out words for the validation loss, another text. " * 20
open(sys.argv[2], "wb").write(struct.pack("<%dH" % len(val), *val))
PY
plan() { # NAME STAGES REPLICAS SCHEDULE [PD2BWC-ARGS...]
  "$PD2BWC" "$SRC/tinygpt.model" -q -D layers=2 -D dim=16 -D seq=8 -D heads=2 --cluster "$SRC/cpu8.cluster" \
    --stages "$2" --replicas "$3" --schedule "$4" --microbatches 4 "${@:5}" -o "$T/$1" || { echo "pd2bwc $*: failed"; exit 1; }
}
plan p1f1b 2 1 1f1b
plan p2bw 2 2 2bw -D train.flush_steps=0 # 2bw's steady state from batch 0 (a flushed start drains as 1f1b)
plan pgpipe 1 2 gpipe
plan ppd 2 2 pipedream
nranks() { case $1 in p1f1b) echo 2 ;; pgpipe) echo 2 ;; *) echo 4 ;; esac; }
launch() { # PLAN COMMAND...: on threads, or as nranks(PLAN) MPI processes
  local n
  n=$(nranks "$1")
  shift
  if [ "$MODE" = mpi ]; then
    timeout 120 mpirun --oversubscribe --allow-run-as-root -x PD2BW_CACHE -x PD2BW_FAULT_INJECT -np "$n" "$@"
  else
    timeout 120 "$@"
  fi
}
mpiflag() { [ "$MODE" = mpi ] && echo --mpi; }
tflag() { [ "$MODE" = mpi ] && echo "--transport mpi"; }

# ---- the streamed file is the outcome's, byte for byte ----
same() { # NAME PLAN ARGS...
  local name=$1 pl=$2 out
  shift 2
  out=$(PD2BW_FAULT_INJECT='' launch "$pl" "$CHECK" "$T/$pl" "$T/train.bin" 7 "$T/$pl.json" "$@" $(mpiflag) 2>&1)
  if [ $? -eq 0 ] && grep -q "log_stream_check: 7 lines identical" <<<"$out"; then ok; else bad "$name: $out"; fi
}
same "d=2 1f1b" p1f1b
same "d=2 x w=2 2bw, validation every 2 steps" p2bw --val "$T/val.bin" --eval-every 2
same "d=1 x w=2 gpipe" pgpipe
same "d=2 x w=2 pipedream" ppd
if grep -q '"val_loss"' "$T/p2bw.json" && [ "$(grep -c '"val_loss"' "$T/p2bw.json")" -eq 4 ]; then
  ok
else
  bad "2bw's log has a validation loss on steps 2, 4, 6 and 7: $(cat "$T/p2bw.json")"
fi

# ---- streamed: what a failing run finished is in the log, in whole lines ----
streamed() { # NAME PLAN FAIL_AT LINES
  local name=$1 pl=$2 at=$3 want=$4 out rc got
  rm -f "$T/f-$pl.json"
  out=$(PD2BW_FAULT_INJECT=1:$at:exit launch "$pl" "$RUN" "$T/$pl" $(tflag) --data "$T/train.bin" --steps 12 \
    --threads 1 -q --log-json "$T/f-$pl.json" 2>&1)
  rc=$?
  got=$(wc -l <"$T/f-$pl.json" 2>/dev/null || echo none)
  if [ $rc -ne 0 ] && [ "$got" = "$want" ] && whole_lines "$T/f-$pl.json" &&
    [ "$(tail -n 1 "$T/f-$pl.json" | python3 -c 'import json,sys; print(json.load(sys.stdin)["step"])')" = "$want" ]; then
    ok
  else
    bad "$name: exit $rc, $got lines (want $want), output: $out"
  fi
}
# ---- the log drains nothing: 2bw and pipedream run the stretches they run without
# it (one, for 12 steps without validation), so every rank executes its instructions
# in the same order; an extra stretch end would put its batch's first forwards after
# the previous OPT_STEP on stage 0 (the drain) ----
same_order() { # NAME PLAN
  local name=$1 pl=$2 out
  out=$(PD2BW_FAULT_INJECT='' launch "$pl" "$RUN" "$T/$pl" $(tflag) --data "$T/train.bin" --steps 12 --threads 1 -q \
    --trace "$T/o-$pl-plain.json" 2>&1) || { bad "$name: the run without the log failed: $out"; return; }
  out=$(PD2BW_FAULT_INJECT='' launch "$pl" "$RUN" "$T/$pl" $(tflag) --data "$T/train.bin" --steps 12 --threads 1 -q \
    --trace "$T/o-$pl-log.json" --log-json "$T/o-$pl.json" 2>&1) || { bad "$name: the run with the log failed: $out"; return; }
  out=$(python3 - "$T/o-$pl-plain.json" "$T/o-$pl-log.json" <<'PY'
import json, sys
def order(path):  # each rank's compute instructions (trace thread 0) in the order it ran them
    ev = json.load(open(path))
    ev = ev["traceEvents"] if isinstance(ev, dict) else ev
    per = {}
    for i, e in enumerate(ev):
        if e.get("ph") == "X" and e.get("tid") == 0:
            per.setdefault(e["pid"], []).append((e["ts"], i, e["name"]))
    return {p: [n for _, _, n in sorted(v)] for p, v in per.items()}
a, b = order(sys.argv[1]), order(sys.argv[2])
for p in sorted(set(a) | set(b)):
    x, y = a.get(p, []), b.get(p, [])
    if x != y:
        k = next((i for i in range(min(len(x), len(y))) if x[i] != y[i]), min(len(x), len(y)))
        print("rank %d: instruction %d is %s without the log, %s with it" % (p, k, x[k] if k < len(x) else "none", y[k] if k < len(y) else "none"))
        sys.exit(1)
print("same order on %d ranks" % len(a))
PY
  )
  if [ $? -eq 0 ] && [ "$(wc -l <"$T/o-$pl.json")" = 12 ]; then ok; else bad "$name: $out ($(wc -l <"$T/o-$pl.json") lines)"; fi
}
same_order "d=2 x w=2 2bw: the same stretches with the log" p2bw
same_order "d=2 x w=2 pipedream: the same stretches with the log" ppd

streamed "1f1b failing at batch 5 logged steps 1-5" p1f1b 5 5
streamed "2bw failing at batch 6 logged steps 1-4" p2bw 6 4

echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
