#!/usr/bin/env bash
# pd2bwc --calibrate and the cluster pd2bwc plans for without --cluster (issue 26;
# docs/calibration.md): the calibration writes a valid cluster file (every key in
# range, its measurements in comments) into the cache directory, owner-only; without
# --cluster pd2bwc calibrates once, saying so, then uses that file; PD2BW_CLUSTER picks
# the built-in host or a file. Nothing here depends on the figures measured.
#   calibrate.sh PD2BWC
set -u
PD2BWC=$1
src=$(pwd)
w=$(mktemp -d /tmp/pd2bw-calibrate-test-XXXXXX)
trap 'rm -rf "$w"' EXIT
pass=0 fail=0
ok() { pass=$((pass + 1)); }
bad() { echo "FAIL: $*"; fail=$((fail + 1)); }
model=$src/models/tinygpt.model

mkdir -m 0700 "$w/c1"
out=$(env -u PD2BW_CLUSTER PD2BW_CACHE="$w/c1" "$PD2BWC" --calibrate 2>&1)
rc=$?
file=$(ls "$w"/c1/host-*.cluster 2>/dev/null)
[ $rc -eq 0 ] && [ -n "$file" ] && grep -qF "wrote $file" <<<"$out" && ok || bad "--calibrate (exit $rc): $out"
if [ -n "$file" ]; then
  for key in devices_per_node memory_gib tflops gemm_latency_us nongemm_tflops launch_us memory_gbs \
    intra_node_gbs optimizer_gbs; do
    grep -qE "^  $key = [0-9.e+-]+;$" "$file" && ok || bad "$key missing from $file"
  done
  grep -q "^# GEMM, pd_sgemm on 1 thread" "$file" && grep -q "^# memcpy" "$file" && grep -q "mean error" "$file" &&
    ok || bad "the measurements are not in the file's comments"
  [ "$(stat -c %a "$file")" = 644 ] || [ "$(stat -c %a "$file")" = 600 ] && ok || bad "mode $(stat -c %a "$file")"
  env -u PD2BW_CLUSTER "$PD2BWC" "$model" --cluster "$file" --stages 2 -q -o "$w/p1" && [ -f "$w/p1/plan.json" ] &&
    ok || bad "the calibrated file does not make a plan"
  ls "$w"/c1 | grep -q calibrate && bad "scratch left in the cache: $(ls "$w/c1")" || ok
  ls /tmp | grep -q "^pd2bw-calibrate-[A-Za-z0-9]\{6\}$" && [ -z "${CI_SHARED_TMP:-}" ] &&
    echo "note: a pd2bw-calibrate-* scratch directory exists in /tmp (another run's?)"
fi

# without --cluster: calibrates once (a note), then uses the file (no note)
mkdir -m 0700 "$w/c2"
out=$(env -u PD2BW_CLUSTER PD2BW_CACHE="$w/c2" "$PD2BWC" "$model" --stages 2 -q -o "$w/p2" 2>&1)
rc=$?
[ $rc -eq 0 ] && grep -q "note: no cluster file for this host yet .*calibrating once" <<<"$out" &&
  ls "$w"/c2/host-*.cluster >/dev/null 2>&1 && ok || bad "first plan without --cluster (exit $rc): $out"
python3 -c "import json,sys; sys.exit(json.load(open(sys.argv[1]))['cluster']['name'] != 'host')" "$w/p2/plan.json" && ok || bad "the plan is not for the calibrated host"
out=$(env -u PD2BW_CLUSTER PD2BW_CACHE="$w/c2" "$PD2BWC" "$model" --stages 2 -q -o "$w/p3" 2>&1)
rc=$?
[ $rc -eq 0 ] && ! grep -q "calibrat" <<<"$out" && ok || bad "second plan calibrated again (exit $rc): $out"

# a calibration that cannot be kept (a cache directory of ours that no one can write:
# /proc/self/fdinfo): said, and this run plans with it; one that cannot be measured
# (pd2bwrun, which profiles, cannot compile: PD2BW_CC names no compiler): said, and
# the built-in host is planned for. The calibration's own stage programs stay in its
# scratch: nothing in the cache but the cluster file.
[ "$(ls "$w/c2")" = "$(basename "$(ls "$w"/c2/host-*.cluster)")" ] && ok || bad "more than the cluster file in the cache: $(ls "$w/c2")"
out=$(env -u PD2BW_CLUSTER PD2BW_CACHE=/proc/self/fdinfo "$PD2BWC" "$model" --stages 2 -q -o "$w/p7" 2>&1)
rc=$?
[ $rc -eq 0 ] && grep -q "warning: cannot keep this host's calibration: .*/proc/self/fdinfo/host-" <<<"$out" &&
  python3 -c "import json,sys; sys.exit(json.load(open(sys.argv[1]))['cluster']['name'] != 'host')" "$w/p7/plan.json" &&
  ok || bad "a calibration that cannot be kept (exit $rc): $out"
mkdir -m 0700 "$w/c5"
out=$(env -u PD2BW_CLUSTER PD2BW_CACHE="$w/c5" PD2BW_CC="$w/no-such-compiler" "$PD2BWC" "$model" -q -o "$w/p8" 2>&1)
rc=$?
[ $rc -eq 0 ] && grep -q "warning: cannot calibrate this host: .*planning for the built-in host" <<<"$out" &&
  [ -z "$(ls "$w/c5" | grep cluster)" ] && ok || bad "a host that cannot be measured (exit $rc): $out"

# PD2BW_CLUSTER: builtin (no calibration, no file), a file, a missing file
mkdir -m 0700 "$w/c3"
out=$(PD2BW_CLUSTER=builtin PD2BW_CACHE="$w/c3" "$PD2BWC" "$model" -q -o "$w/p4" 2>&1)
[ $? -eq 0 ] && [ -z "$(ls "$w/c3")" ] && ! grep -q calibrat <<<"$out" && ok || bad "builtin: $out"
out=$(PD2BW_CLUSTER="$src/models/clusters/cpu2.cluster" "$PD2BWC" "$model" -q -o "$w/p5" 2>&1)
[ $? -eq 0 ] && python3 -c "import json,sys; sys.exit(json.load(open(sys.argv[1]))['cluster']['name'] != 'cpu2')" "$w/p5/plan.json" && ok || bad "PD2BW_CLUSTER=cpu2.cluster: $out"
out=$(PD2BW_CLUSTER="$w/none.cluster" "$PD2BWC" "$model" -q -o "$w/p6" 2>&1)
[ $? -eq 1 ] && grep -q "none.cluster" <<<"$out" && [ ! -e "$w/p6" ] && ok || bad "a missing PD2BW_CLUSTER file: $out"

echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
