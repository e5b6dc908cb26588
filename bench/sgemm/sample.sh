#!/usr/bin/env bash
# bench/sgemm/sample.sh SGEMM_BENCH [SECONDS] — for a shared machine: runs sgemm_bench
# for pd_sgemm and for OpenBLAS, on 2 threads and on 1, round after round for SECONDS
# (default 900), then prints the best rate each (library, threads, shape) reached.
# Other load only ever slows a run down, so the maximum over many short runs
# estimates the uncontended rate; the per-run lines stay in the log for the spread.
set -euo pipefail
bench=${1:?usage: sample.sh path/to/sgemm_bench [seconds]}
secs=${2:-900}
log=$(mktemp /tmp/sgemm-samples.XXXXXX)
end=$(( $(date +%s) + secs ))
while [ "$(date +%s)" -lt "$end" ]; do
  for cfg in "pd 2" "openblas 2" "pd 1" "openblas 1"; do
    set -- $cfg
    echo "=== $(date -u +%H:%M:%S) lib $1 threads $2 load $(cut -d' ' -f1 /proc/loadavg)" >>"$log"
    "$bench" --threads "$2" --seconds 0.3 --lib "$1" 2>&1 | grep -E '\(.,.\)' >>"$log" || true
    sleep 5
  done
done
echo "samples in $log"
awk '/^===/ { key = $4 " " $6 " threads"; runs[key]++; next }
     { shape = $(NF-4) " " $(NF-3); k = key "|" shape; if ($(NF-2) > best[k]) best[k] = $(NF-2) }
     END { for (k in best) { split(k, p, "|"); printf "%-22s %-26s %7.1f GFLOP/s (max of %d runs)\n", p[1], p[2], best[k], runs[p[1]] } }' \
  "$log" | sort
