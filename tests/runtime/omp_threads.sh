#!/usr/bin/env bash
# Each rank runs its stage program's OpenMP loops on its share of the cores
# (pipeline_run.c pipe_rank_threads): libgomp reads OMP_NUM_THREADS once, at load,
# so the runtime's setenv came too late and every rank ran one OpenMP thread per core
# whatever --threads said (two ranks on two cores: four threads spinning in barriers;
# a 2-layer GPT on one loaded core 20x slower). Checked by the threads the process
# holds with --threads 1: the same with and without OMP_NUM_THREADS=1 in the
# environment, and fewer than with --threads set to the cores (which shows the check
# sees OpenMP's threads), and no more than one pool of them (the BLAS's and OpenMP's
# would spin against each other). Thread counts, not times: no CPU's speed decides it.
#   omp_threads.sh PD2BWC PD2BWRUN
set -u
PD2BWC=$1 RUN=$2
SRC=$(cd "$(dirname "${BASH_SOURCE[0]}")/../pipeline" && pwd)
. "$SRC/../scratch.sh" ompthr
cores=$(nproc)
[ "$cores" -ge 2 ] || { echo "skipped: one core, one OpenMP thread either way"; exit 77; }
python3 - "$T/d.bin" <<'PY' || exit 1
import struct, sys
text = b"Each rank's OpenMP loops run on its share of the cores. " * 400
open(sys.argv[1], "wb").write(struct.pack("<%dH" % len(text), *text))
PY
# params > PK_PAR_MIN (16384): the optimizer's and the norms' loops are parallel
"$PD2BWC" "$SRC/tinygpt.model" -q -D layers=2 -D dim=64 -D seq=16 -D heads=2 --cluster "$SRC/cpu8.cluster" \
  --stages 1 --replicas 1 -o "$T/plan" || { echo "pd2bwc failed"; exit 1; }
most_threads() { # THREADS ENV...: the largest number of threads pd2bwrun held, sampled while it trains
  local threads=$1
  shift
  env "$@" "$RUN" "$T/plan" --data "$T/d.bin" --steps 400 --threads "$threads" -q >/dev/null 2>&1 &
  local pid=$! most=0 n
  while kill -0 $pid 2>/dev/null; do
    n=$(ls /proc/$pid/task 2>/dev/null | wc -l)
    [ "$n" -gt "$most" ] && most=$n
    sleep 0.02
  done
  wait $pid || { echo "pd2bwrun failed ($*)" >&2; echo -1; return; }
  echo "$most"
}
pinned=$(most_threads 1 OMP_NUM_THREADS=1)
free=$(most_threads 1 -u OMP_NUM_THREADS)
wide=$(most_threads "$cores" -u OMP_NUM_THREADS)
echo "threads held with --threads 1: $free; with OMP_NUM_THREADS=1 too: $pinned; --threads $cores: $wide"
fail=0
[ "$free" -ge 1 ] && [ "$free" -eq "$pinned" ] || { echo "FAIL: --threads 1 holds $free threads, $pinned with OMP_NUM_THREADS=1"; fail=1; }
[ "$wide" -gt "$pinned" ] || { echo "FAIL: the check cannot tell: --threads $cores holds $wide threads, --threads 1 $pinned"; fail=1; }
# one pool of $cores threads, not two: OpenBLAS's pthread build keeps its own, and
# then the rank's OpenMP loops get one thread (pipe_rank_threads); BLIS's OpenMP
# build shares OpenMP's (two pools spinning on the same cores: tinygpt 4x slower)
[ "$wide" -le $((pinned + cores - 1)) ] || { echo "FAIL: --threads $cores holds $wide threads: two pools of $cores"; fail=1; }
[ $fail -eq 0 ] && echo "passed"
exit $fail
