#!/usr/bin/env bash
# tests/gpucheck/summary_format.sh — the lines gpu-check.sh reads, as the runtime prints
# them today: test_cudaexec_kprof's table part trains through cx_run (the loop of
# pd2bw-cuda-train) on the emulated device and prints its summary and its kernel
# profile; scripts/gpu-check-lib.sh must read that summary (gc_train_parse), and the
# profile must have the header and rows of the table gc_ncu_table writes from ncu. A
# change to cuda_pipe_run.c's summary or to cuda_exec_kprof.c's table fails here, not
# on the next lent GPU.
#   summary_format.sh TEST_CUDAEXEC_KPROF PD2BWC     (run in the source tree)
set -u
. scripts/gpu-check-lib.sh
out=$("$1" "$2" table 2>&1)
rc=$?
fail=0
[ $rc -eq 0 ] || { echo "FAIL: test_cudaexec_kprof table: exit $rc"; fail=1; }
summary=$(grep '^test_cudaexec_kprof: .* steps, final loss ' <<<"$out" | tail -1)
echo "summary: $summary"
if gc_train_parse "$summary" && awk -v t="$gc_tok" -v m="$gc_ms" 'BEGIN { exit !(t + 0 > 0 && m + 0 > 0) }'; then
  echo "read: $gc_tok tok/s, $gc_ms ms/step, $gc_plan_tflops plan TFLOP/s"
else
  echo "FAIL: gc_train_parse cannot read the summary"; fail=1
fi
prof=$(sed -n 's/^  > //p' <<<"$out")
ncu_head=$(printf '"Kernel Name","gpu__time_duration.sum"\n"","nsecond"\n"k","1000"\n' >/tmp/pd2bw-sf-$$.csv &&
           gc_ncu_table /tmp/pd2bw-sf-$$.csv | sed -n '3,4p'; rm -f /tmp/pd2bw-sf-$$.csv)
[ "$(sed -n '3,4p' <<<"$prof")" = "$ncu_head" ] || { echo "FAIL: the profile's header is not gc_ncu_table's"; fail=1; }
rowre='^\| [^|]+ \| [0-9]+ \| [0-9]+\.[0-9]{3} \| [0-9]+\.[0-9]% \|$'
[ "$(sed -n '5,$p' <<<"$prof" | grep -cvE "$rowre")" -eq 0 ] && [ "$(sed -n '5,$p' <<<"$prof" | wc -l)" -ge 2 ] ||
  { echo "FAIL: a profile row is not | name | calls | ms | share |"; fail=1; }
[ $fail -eq 0 ] && echo "the runtime's summary and kernel profile are in the formats gpu-check.sh reads"
exit $fail
