#!/usr/bin/env bash
# mpirun --hostfile: the launch path of a run on several machines, as far as one
# machine shows it (docs/pipelines.md, "MPI": what was and was not tested).
#   1. a hostfile naming this machine (localhost slots=4): validation, --init and the
#      sequential reference, bit-identical to the same run on local threads;
#   2. two names for this machine (127.0.0.1 and the hostname), one line per slot:
#      Open MPI resolves both to this node (the `NAME slots=N` form with both names is
#      refused by Open MPI: "multiple definitions of the slot count");
#   3. a second node that is this machine in disguise: node2 in the hostfile, reached
#      through a stand-in for ssh (plm_rsh_agent) that runs Open MPI's daemon here, so
#      mpirun starts a second orted as on a real cluster and the two ranks talk over
#      TCP (btl tcp,self: the shared-memory BTL crashes in Open MPI when two "nodes"
#      share one host). One rank per node: d = 2, w = 1.
#   hostfile.sh PD2BWC PD2BWRUN
set -u
PD2BWC=$1
RUN=$2
. "$(dirname "$0")/common.sh"
. "$(dirname "$0")/logs.sh"
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0" # Open MPI's own (see mpi.sh)
python3 - "$T/val.bin" <<'PY' || exit 1
import struct, sys
v = b"Held-out text, not the training text: it gives the validation loss. " * 40
open(sys.argv[1], "wb").write(struct.pack("<%dH" % len(v), *v))
PY
MPIX=() # more mpirun options
hostrun() { # HOSTFILE NP PLAN STEPS ARGS...: pd2bwrun as NP MPI processes placed by HOSTFILE
  local hf=$1 np=$2 dir=$3 steps=$4
  shift 4
  timeout 120 "${MPIRUN[@]}" "${MPIX[@]}" --hostfile "$hf" -np "$np" "$RUN" "$dir" --transport mpi --data "$T/train.bin" \
    --steps "$steps" --threads 1 -q "$@"
}
V=(--val-data "$T/val.bin" --eval-batches 2 --eval-every 2)
plan "$T/a" -D bsz=8 -D mbs=1 --stages 2 --replicas 2 --microbatches 4 --schedule 2bw --recompute off || exit 1
plan "$T/d2" -D bsz=2 -D mbs=1 --stages 2 --replicas 1 --microbatches 2 --schedule gpipe --recompute off || exit 1
plan "$T/one" -D bsz=2 -D mbs=1 --stages 1 --replicas 1 --microbatches 2 --schedule gpipe --recompute off || exit 1
"$RUN" "$T/one" --data "$T/train.bin" --steps 2 --threads 1 -q --seed 7 --save "$T/one.st" >/dev/null || exit 1

echo "localhost slots=4" >"$T/hosts1"
check "hostfile 'localhost slots=4': 2bw d=2 w=2 with validation matches the reference" \
  hostrun "$T/hosts1" 4 "$T/a" 4 "${V[@]}" --reference --log-json "$T/h1.json" --save "$T/h1.st"
train "$T/a" 4 "${V[@]}" --log-json "$T/local.json" --save "$T/local.st" >/dev/null
check "  ... the same validation losses as on local threads" same_log val_loss 0 "$T/h1.json" "$T/local.json"
check "  ... the same checkpoint bytes as on local threads" cmp "$T/h1.st" "$T/local.st"
check "hostfile, --init from a d=1 checkpoint" hostrun "$T/hosts1" 4 "$T/a" 3 --init "$T/one.st" --log-json "$T/h1i.json"
train "$T/a" 3 --init "$T/one.st" --log-json "$T/locali.json" >/dev/null
check "  ... the same losses as on local threads" same_log loss 0 "$T/h1i.json" "$T/locali.json"

h=$(hostname)
printf '127.0.0.1\n%s\n127.0.0.1\n%s\n' "$h" "$h" >"$T/hosts2"
check "hostfile naming this machine as 127.0.0.1 and $h, one line per slot" \
  hostrun "$T/hosts2" 4 "$T/a" 4 "${V[@]}" --save "$T/h2.st"
check "  ... the same checkpoint bytes as on local threads" cmp "$T/h2.st" "$T/local.st"

cat >"$T/fakessh" <<'EOF'
#!/bin/sh
# stands in for ssh: drops the options and the host name, runs the command here
while [ $# -gt 0 ]; do case "$1" in -*) shift ;; *) break ;; esac; done
shift
exec /bin/sh -c "$*"
EOF
chmod +x "$T/fakessh"
printf '%s slots=1\nnode2 slots=1\n' "$h" >"$T/hosts3"
MPIX=(--mca plm_rsh_agent "$T/fakessh" --mca btl tcp,self --display-map)
check "two nodes ($h, node2 through a stand-in ssh), TCP: gpipe d=2 with validation matches the reference" \
  hostrun "$T/hosts3" 2 "$T/d2" 4 "${V[@]}" --reference --log-json "$T/h3.json"
cp "$T/check.out" "$T/h3.out"
check "  ... mpirun placed rank 1 on node2" grep -q "Data for node: node2" "$T/h3.out"
MPIX=()
train "$T/d2" 4 "${V[@]}" --log-json "$T/local3.json" >/dev/null
check "  ... the same validation losses as on local threads" same_log val_loss 0 "$T/h3.json" "$T/local3.json"
finish
