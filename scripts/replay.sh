#!/usr/bin/env bash
# The bit-for-bit replay set of the training-step code paths (docs/replay.md).
#
#   scripts/replay.sh record DIR [--quick] [--build BUILD]
#   scripts/replay.sh check DIR [--quick] [--only REGEX] [--force] [--build BUILD]
#
# record trains a fixed grid of cases, each through one of today's paths, and writes
# DIR/CASE.txt per case (tests/replay/replay_case.c: every step's loss and each
# microbatch's as %a hex floats, the gradient norm where the path reports one, the
# SHA-256 of every final weight tensor by name) plus DIR/machine.txt. DIR must not
# exist: it is written under a temporary name and renamed at the end. check reruns the
# same grid (the one DIR was recorded with, or --quick's subset of it) into a scratch
# directory and compares: per case MATCH, or the first differing step or tensor;
# exit 1 on any difference, missing case or recorded case not run. Bits depend on the
# CPU, its BLAS and the compilers, so check refuses a DIR recorded on another machine
# (machine.txt) unless --force.
#
# The grid, on tests/pipeline's tiny GPT (3 layers, width 16, 8 tokens; tied wte / LM
# head, dropout 0.1, AdamW), 3 steps each:
#   - local threads (runtime/pipeline/pipeline.c): gpipe, 1f1b, 2bw, pipedream x d in {1,2,3}
#     x w in {1,2} x m in {d, 2d}; m = 2d with global-norm clipping (clipv 0.05), m = d
#     without; each with its sequential reference as pd2bwrun --reference runs it
#     (runtime/core/trainer.c on PLAN/reference, or pipeline_seq.c for pipedream);
#   - the one-stage CPU trainer (runtime/core/trainer.c) on every d = w = 1 plan;
#   - MPI (mpirun, runtime/pipeline/pipeline.c over transport_mpi): four plans of the grid;
#   - the emulated CUDA device (tests/cudaexec): the one-stage GPU trainer
#     (cuda_exec_train.c; since, the interpreter on cuda_exec_device.c) and single-GPU pipeline mode (recorded: cuda_pipe_run.c; now runtime/exec/ on cuda_exec_device.c with the same-GPU link cuda_link_local.c), --precision
#     fp32 plans with clipping, each with the CPU trainer / reference beside it;
#   - the stand-in NCCL (tests/nccl's fake libnccl over MPI): multi-GPU mode
#     (recorded: cuda_pipe_nccl.c; now runtime/exec/ on cuda_exec_device.c with the NCCL
#     link cuda_link_nccl.c) on 2 ranks, 2bw d=2 and gpipe w=2.
# --quick (the CTest test replay_selfcheck): one case of every path. --only REGEX
# (check): only the cases whose names match the extended regular expression.
# Full grid (118 cases): record about 100 s, check 65-85 s on 2 busy cores once the
# stage programs are cached. docs/replay.md: how to use it for a refactor, and what it
# cannot see.
set -u
usage() {
  echo "usage: replay.sh record|check DIR [--quick] [--only REGEX] [--force] [--build BUILD]" >&2
  exit 2
}
[ $# -ge 2 ] || usage
ACTION=$1
DIR=$2
shift 2
QUICK=
FORCE=
ONLY=
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=$ROOT/build
while [ $# -gt 0 ]; do
  case $1 in
  --quick) QUICK=1 ;;
  --force) FORCE=1 ;;
  --build) [ $# -ge 2 ] || usage; BUILD=$2; shift ;;
  --only) [ $# -ge 2 ] || usage; ONLY=$2; shift ;;
  *) usage ;;
  esac
  shift
done
case $ACTION in record | check) ;; *) usage ;; esac
if [ -n "$ONLY" ] && [ "$ACTION" = record ]; then
  echo "replay.sh: --only is for check (a recording holds its whole grid)" >&2
  exit 2
fi
# Absolute paths, then the repository root: the emulator builds each module with
# -I. to find tests/cuda/cuda_emu.cpp (tests/cudaexec/emu_module.c).
case $DIR in /*) ;; *) DIR=$PWD/$DIR ;; esac
case $BUILD in /*) ;; *) BUILD=$PWD/$BUILD ;; esac
cd "$ROOT" || exit 1
PD2BWC=$BUILD/tools/pd2bwc
RUN=$BUILD/tools/pd2bwrun
CASE=$BUILD/tests/replay/replay_case
FAKE_NCCL=$BUILD/tests/nccl/libpd2bw_fake_nccl.so
for f in "$PD2BWC" "$CASE"; do
  [ -x "$f" ] || { echo "replay.sh: $f: not built (ninja -C BUILD replay_case pd2bwc)" >&2; exit 1; }
done
DIR=${DIR%/}
if [ "$ACTION" = record ] && [ -e "$DIR" ]; then
  echo "replay.sh: record $DIR: it exists; record into a new directory" >&2
  exit 1
fi
if [ "$ACTION" = check ] && [ ! -f "$DIR/machine.txt" ]; then
  echo "replay.sh: check $DIR: no recording there ($DIR/machine.txt missing)" >&2
  exit 1
fi
# tests/pipeline/common.sh: the scratch directory $T (removed on exit), the token file
# $T/train.bin and plan() (the tiny GPT, dropout 0.1). Every run keeps the same
# single BLAS thread; the stage programs are cached as the tests cache them.
export PD2BW_CACHE=${PD2BW_CACHE:-$BUILD/pd2bw-cache}
. "$ROOT/tests/pipeline/common.sh" >/dev/null
export OMP_NUM_THREADS=1
MPI=(mpirun --oversubscribe --allow-run-as-root -x PD2BW_CACHE -x OMP_NUM_THREADS)

machine() {
  "$CASE" machine 2>/dev/null || return 1
  echo "stage compiler version: $(${PD2BW_CC:-cc} --version 2>/dev/null | head -n 1)"
}

# The grid: one line per case, "NAME MODE PLAN", after the plans it needs are made
# (plan NAME FLAGS... lines, made once). Names say path, schedule and shape.
grid() {
  local s d w m clip plain2bw="-D train.flush_steps=0 -D train.predict=0"
  for s in gpipe 1f1b 2bw pipedream; do
    for d in 1 2 3; do
      for w in 1 2; do
        for m in $d $((2 * d)); do
          clip=
          [ $m != $d ] && clip=-clip
          local p=$s-d$d-w$w-m$m$clip
          if [ -n "$QUICK" ]; then # one case of each path: threads (gpipe, pipedream), trainer.c
            case $p in 2bw-d2-w2-m4-clip | pipedream-d3-w1-m6-clip | 1f1b-d1-w1-m2-clip) ;; *) continue ;; esac
          fi
          # 2bw as recorded before its refinements (pd2bwc's defaults since: 2bwr- below)
          echo "plan $p -D bsz=$((w * m)) -D mbs=1 --stages $d --replicas $w --microbatches $m --schedule $s" \
            "--recompute off ${clip:+-D clipv=0.05} $([ $s = 2bw ] && echo "$plain2bw")"
          echo "case threads-$p pipe $p"
          echo "case ref-$p ref $p"
          [ $d = 1 ] && [ $w = 1 ] && echo "case trainer-$p trainer $p"
        done
      done
    done
  done
  # 2bw's flushed start and weight prediction (docs/update-rules.md), K = 2 so that the
  # flushed batch, the transition and the predicted batches all run within the steps
  for p in 2bwr-d2-w2-m4-clip 2bwr-d3-w1-m3; do
    [ -n "$QUICK" ] && [ $p != 2bwr-d2-w2-m4-clip ] && continue
    d=${p#*-d}; d=${d%%-*}; w=${p#*-w}; w=${w%%-*}; m=${p#*-m}; m=${m%%-*}
    clip=; [ "${p%-clip}" != "$p" ] && clip="-D clipv=0.05"
    echo "plan $p -D bsz=$((w * m)) -D mbs=1 --stages $d --replicas $w --microbatches $m --schedule 2bw" \
      "--recompute off $clip -D train.flush_steps=2 -D train.predict=1"
    echo "case threads-$p pipe $p"
    echo "case ref-$p ref $p"
  done
  if command -v mpirun >/dev/null; then
    for p in gpipe-d2-w2-m2 2bw-d2-w2-m4-clip 1f1b-d3-w1-m6-clip pipedream-d3-w1-m3 2bwr-d2-w2-m4-clip; do
      [ -n "$QUICK" ] && [ $p != 2bw-d2-w2-m4-clip ] && continue
      echo "case mpi-$p pipe-mpi $p"
    done
  fi
  local fp="--precision fp32 -D clipv=0.05 -D mbs=1 --recompute off"
  echo "plan fp32-2bw-d1-w1-m2-clip $fp -D bsz=2 --stages 1 --replicas 1 --microbatches 2 --schedule 2bw $plain2bw"
  echo "case emu-trainer-fp32-2bw-d1-w1-m2-clip emu-trainer fp32-2bw-d1-w1-m2-clip"
  echo "case trainer-fp32-2bw-d1-w1-m2-clip trainer fp32-2bw-d1-w1-m2-clip"
  echo "plan fp32-2bw-d2-w1-m4-clip $fp -D bsz=4 --stages 2 --replicas 1 --microbatches 4 --schedule 2bw $plain2bw"
  echo "case emu-pipe-fp32-2bw-d2-w1-m4-clip emu-pipe fp32-2bw-d2-w1-m4-clip"
  echo "case ref-fp32-2bw-d2-w1-m4-clip ref fp32-2bw-d2-w1-m4-clip"
  [ -x "$FAKE_NCCL" ] && echo "case nccl-fp32-2bw-d2-w1-m4-clip nccl fp32-2bw-d2-w1-m4-clip"
  [ -n "$QUICK" ] && return
  echo "plan fp32-gpipe-d1-w1-m1 $fp -D clipv=0 -D bsz=1 --stages 1 --replicas 1 --microbatches 1 --schedule gpipe"
  echo "case emu-trainer-fp32-gpipe-d1-w1-m1 emu-trainer fp32-gpipe-d1-w1-m1"
  echo "plan fp32-gpipe-d1-w2-m2-clip $fp -D bsz=4 --stages 1 --replicas 2 --microbatches 2 --schedule gpipe"
  echo "case emu-pipe-fp32-gpipe-d1-w2-m2-clip emu-pipe fp32-gpipe-d1-w2-m2-clip"
  [ -x "$FAKE_NCCL" ] && echo "case nccl-fp32-gpipe-d1-w2-m2-clip nccl fp32-gpipe-d1-w2-m2-clip"
  echo "plan fp32-pipedream-d3-w1-m3 $fp -D clipv=0 -D bsz=3 --stages 3 --replicas 1 --microbatches 3 --schedule pipedream"
  echo "case emu-pipe-fp32-pipedream-d3-w1-m3 emu-pipe fp32-pipedream-d3-w1-m3"
  echo "plan fp32-1f1b-d3-w1-m6-clip $fp -D bsz=6 --stages 3 --replicas 1 --microbatches 6 --schedule 1f1b"
  echo "case emu-pipe-fp32-1f1b-d3-w1-m6-clip emu-pipe fp32-1f1b-d3-w1-m6-clip"
}

# Runs case NAME through MODE on plan PLAN into OUTDIR/NAME.txt; 1 with its log shown.
run_case() {
  local outdir=$1 name=$2 mode=$3 plan=$4 np
  local args=("$mode" "$T/plans/$plan" "$T/train.bin" 3 "$outdir/$name.txt")
  case $mode in
  pipe-mpi) np=$(pipe_ranks "$plan") && timeout 300 "${MPI[@]}" -np "$np" "$CASE" "${args[@]}" ;;
  nccl)
    np=$(pipe_ranks "$plan") &&
      timeout 300 env PD2BW_LIBNCCL="$FAKE_NCCL" OMPI_MCA_btl_vader_single_copy_mechanism=none \
        "${MPI[@]}" -np "$np" "$CASE" "${args[@]}" ;;
  *) timeout 300 "$CASE" "${args[@]}" ;;
  esac </dev/null >"$T/case.log" 2>&1 && [ -f "$outdir/$name.txt" ] && return 0
  echo "FAIL  $name: replay_case $mode failed:"
  grep -v "^pd2bw: note:" "$T/case.log" | tail -n 20
  return 1
}
pipe_ranks() { # PLAN: stages x replicas (tests/pipeline plans name them dD-wW)
  local p=$1 d w
  d=${p#*-d}; d=${d%%-*}
  w=${p#*-w}; w=${w%%-*}
  echo $((d * w))
}

# First differing line of two case files, as "step 2 mb 1 loss" or "tensor 4 wte".
first_diff() {
  local a=$1 b=$2 n
  n=$(cmp "$a" "$b" 2>/dev/null | grep -o 'line [0-9]*' | grep -o '[0-9]*')
  [ -n "$n" ] || n=$(($(wc -l <"$a") + 1))
  local la lb
  la=$(sed -n "${n}p" "$a")
  lb=$(sed -n "${n}p" "$b")
  echo "line $n: recorded '${la:-<end>}', now '${lb:-<end>}' ($(diff "$a" "$b" | grep -c '^<') lines differ)"
}

mkdir -p "$T/plans" "$T/out"
: >"$T/ran"
if [ "$ACTION" = check ]; then
  machine >"$T/machine.txt" || { echo "replay.sh: replay_case machine failed" >&2; exit 1; }
  grep -v '^grid:' "$DIR/machine.txt" >"$T/recorded-machine.txt"
  if ! cmp -s "$T/recorded-machine.txt" "$T/machine.txt"; then
    echo "replay.sh: $DIR was recorded on another machine (or BLAS, or compiler):"
    diff "$T/recorded-machine.txt" "$T/machine.txt" | sed 's/^/  /'
    [ -n "$FORCE" ] || { echo "replay.sh: bits are only comparable on the same machine; --force compares anyway" >&2; exit 1; }
    echo "replay.sh: --force: comparing anyway"
  fi
  # the grid the recording was made with, unless --quick asks for the subset
  [ -z "$QUICK" ] && grep -qx "grid: quick" "$DIR/machine.txt" && QUICK=1
  WHOLE= # the whole recorded grid reruns: a recorded case this build cannot run fails
  [ -z "$ONLY" ] && grep -qx "grid: $([ -n "$QUICK" ] && echo quick || echo full)" "$DIR/machine.txt" && WHOLE=1
fi
start=$SECONDS
ncase=0
nbad=0
while read -r kind name rest; do
  if [ "$kind" = plan ]; then
    read -r -a flags <<<"$rest"
    if ! plan "$T/plans/$name" "${flags[@]}" >"$T/case.log" 2>&1; then
      echo "replay.sh: pd2bwc for plan $name failed:" >&2
      cat "$T/case.log" >&2
      exit 1
    fi
    continue
  fi
  read -r mode plan <<<"$rest"
  [ -n "$ONLY" ] && ! grep -qE -- "$ONLY" <<<"$name" && continue
  ncase=$((ncase + 1))
  echo "$name" >>"$T/ran"
  if ! run_case "$T/out" "$name" "$mode" "$plan"; then
    nbad=$((nbad + 1))
    continue
  fi
  if [ "$ACTION" = record ]; then
    echo "ok    $name"
  elif [ ! -f "$DIR/$name.txt" ]; then
    nbad=$((nbad + 1))
    echo "MISSING $name: not in $DIR"
  elif cmp -s "$DIR/$name.txt" "$T/out/$name.txt"; then
    echo "MATCH $name"
  else
    nbad=$((nbad + 1))
    echo "DIFFER $name: $(first_diff "$DIR/$name.txt" "$T/out/$name.txt")"
  fi
done < <(grid)
if [ "$ACTION" = record ]; then
  if [ $nbad -gt 0 ]; then
    echo "replay.sh: $nbad of $ncase cases failed; nothing recorded" >&2
    exit 1
  fi
  { machine && if [ -n "$QUICK" ]; then echo "grid: quick"; else echo "grid: full"; fi; } >"$T/out/machine.txt" || exit 1
  tmp=$DIR.tmp.$$
  mkdir -p "$(dirname "$DIR")" && cp -r "$T/out" "$tmp" && mv -T "$tmp" "$DIR" || {
    rm -rf "$tmp"
    echo "replay.sh: record $DIR: cannot write it" >&2
    exit 1
  }
  echo "recorded $ncase cases into $DIR in $((SECONDS - start)) s"
  exit 0
fi
if [ -n "$WHOLE" ]; then
  for f in "$DIR"/*.txt; do
    name=$(basename "$f" .txt)
    [ "$name" = machine ] || grep -qxF -- "$name" "$T/ran" && continue
    ncase=$((ncase + 1))
    nbad=$((nbad + 1))
    echo "NOT RUN $name: recorded, but not in this build's grid (no mpirun, emulator or stand-in NCCL?)"
  done
fi
echo "$((ncase - nbad)) of $ncase cases match, $nbad differ or failed ($((SECONDS - start)) s)"
[ $nbad -eq 0 ]
