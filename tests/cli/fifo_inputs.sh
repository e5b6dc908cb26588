#!/usr/bin/env bash
# No hangs on FIFOs (issue 24, item 6): every input is opened with O_NONBLOCK and
# checked to be a regular file before any read (runtime/io io_open_regular, and the
# drivers' check of every input flag, output_paths_check). A FIFO (or a directory, or a
# device) named by --data, --val-data, --resume or --init, by pd2bw-data's --input,
# --vocab, --merges or --info, by pd2bw-export's checkpoint, by pd2bwc's model or
# --cluster, or standing in a plan directory, ends the tool at once with exit 1 and a
# message naming the flag (where there is one) and the path. Before, open() waited
# for a writer forever and the trainer's SIGTERM handler kept it waiting.
#   fifo_inputs.sh PD2BWC PD2BWRUN PD2BW_DATA PD2BW_EXPORT   (from the source root)
set -u
pd2bwc=$1 run=$2 data=$3 export=$4
src=$(pwd)/tests/pipeline
T=$(mktemp -d /tmp/pd2bw-fifo-XXXXXX)
trap 'rm -rf "$T"' EXIT
export PD2BW_CACHE=${PD2BW_CACHE:-/tmp/pd2bw-test-cache-$(id -u)}
pass=0 fail=0
ok() { pass=$((pass + 1)); }
bad() { echo "FAIL: $*"; fail=$((fail + 1)); }
python3 - "$T/d.bin" <<'PY' || exit 1
import struct, sys
text = b"a FIFO is not a token file; " * 64
open(sys.argv[1], "wb").write(struct.pack("<%dH" % len(text), *text))
PY
for s in 1 2; do
  "$pd2bwc" "$src/tinygpt.model" -q -D layers=2 -D dim=16 -D seq=8 -D heads=2 --cluster "$src/cpu8.cluster" \
    --stages $s --replicas 1 --schedule 2bw -o "$T/plan$s" || { echo "pd2bwc failed"; exit 1; }
done
mkfifo "$T/fifo"
# refused NAME PATTERN COMMAND...: ends by itself within the limit (a hang is killed:
# exit 124 or 137), exit 1, PATTERN in its output
refused() {
  local name=$1 pat=$2 out rc
  shift 2
  out=$(timeout -k 2 10 "$@" 2>&1 </dev/null)
  rc=$?
  if [ $rc -eq 1 ] && grep -q -- "$pat" <<<"$out"; then
    ok
  else
    bad "$name: exit $rc$([ $rc -ge 124 ] && echo ' (hung, killed)'), output: $out"
  fi
}
fifo="$T/fifo: a FIFO, not a regular file"
for plan in plan1 plan2; do
  train=("$run" "$T/$plan" --steps 1 --threads 1 -q)
  refused "$plan --data FIFO" "--data $fifo" "${train[@]}" --data "$T/fifo"
  refused "$plan --val-data FIFO" "--val-data $fifo" "${train[@]}" --data "$T/d.bin" --val-data "$T/fifo"
  refused "$plan --resume FIFO" "--resume $fifo" "${train[@]}" --data "$T/d.bin" --resume "$T/fifo"
  refused "$plan --init FIFO" "--init $fifo" "${train[@]}" --data "$T/d.bin" --init "$T/fifo"
done
refused "--data a directory" "--data $T: a directory, not a regular file" "$run" "$T/plan1" --steps 1 --data "$T"
# a FIFO inside the plan directory: plan.json, a stage program
cp -r "$T/plan2" "$T/planf"
rm "$T/planf/plan.json" && mkfifo "$T/planf/plan.json"
refused "plan.json a FIFO" "$T/planf/plan.json: .*a FIFO, not a regular file" \
  "$run" "$T/planf" --data "$T/d.bin" --steps 1 --threads 1
cp -r "$T/plan1" "$T/plang"
rm "$T/plang/stage0.c" && mkfifo "$T/plang/stage0.c"
refused "stage0.c a FIFO" "$T/plang/stage0.c: .*a FIFO, not a regular file" \
  "$run" "$T/plang" --data "$T/d.bin" --steps 1 --threads 1

# pd2bw-data
printf 'some text\n' >"$T/text"
refused "pd2bw-data --input FIFO" "--input $fifo" "$data" --input "$T/text" "$T/fifo" --out-prefix "$T/o"
refused "pd2bw-data --vocab FIFO" "--vocab $fifo" "$data" --input "$T/text" --out-prefix "$T/o" \
  --vocab "$T/fifo" --merges "$T/text"
refused "pd2bw-data --merges FIFO" "--merges $fifo" "$data" --input "$T/text" --out-prefix "$T/o" \
  --vocab "$T/text" --merges "$T/fifo"
refused "pd2bw-data --info FIFO" "$T/fifo: .*a FIFO, not a regular file" "$data" --info "$T/fifo"
[ ! -e "$T/o_train.bin" ] && ok || bad "pd2bw-data wrote an output after a refused input"
# pd2bw-export
refused "pd2bw-export FIFO" "the checkpoint $fifo" "$export" "$T/fifo" --heads 2 --llmc "$T/out.bin"
# pd2bwc
refused "pd2bwc model FIFO" "the model file $fifo" "$pd2bwc" "$T/fifo" -q -o "$T/p"
refused "pd2bwc --cluster FIFO" "--cluster $fifo" "$pd2bwc" "$src/tinygpt.model" -q \
  --cluster "$T/fifo" -o "$T/p"
refused "pd2bwc --emit=ast on a FIFO" "$T/fifo: .*a FIFO, not a regular file" "$pd2bwc" "$T/fifo" --emit=ast
[ "$(stat -c %F "$T/fifo")" = fifo ] && ok || bad "the FIFO is not a FIFO any more"

echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
