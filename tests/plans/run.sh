#!/usr/bin/env bash
# Golden plan test: compiles every case of tests/plans/cases.txt and compares the
# summary (and memory plan, and for "-sched" cases the schedule) with
# tests/golden/plans/NAME.txt. PD2BW_REGEN=1 rewrites the golden files instead.
# usage: run.sh PD2BWC_BINARY   (run from the source root)
set -u
pd2bwc=$1
golden=tests/golden/plans
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail=0 pass=0
while IFS='|' read -r name args; do
  name=$(printf "%s" "$name" | sed "s/^[[:space:]]*//; s/[[:space:]]*$//")
  case "$name" in ''|'#'*) continue ;; esac
  out="$work/$name.txt"
  # shellcheck disable=SC2086
  if ! "$pd2bwc" $args -o "$work/$name.plan" >"$out.summary" 2>"$out.err"; then
    echo "FAIL $name: pd2bwc failed:"; cat "$out.err"; fail=$((fail + 1)); continue
  fi
  {
    echo "# pd2bwc $args"
    grep -v '^wrote ' "$out.summary"
    echo "# memory.txt"
    cat "$work/$name.plan/memory.txt"
    case "$name" in *-sched)
      echo "# schedule.txt"
      cat "$work/$name.plan/schedule.txt" ;;
    esac
  } >"$out"
  if [ "${PD2BW_REGEN:-0}" = 1 ]; then
    cp "$out" "$golden/$name.txt"; pass=$((pass + 1)); continue
  fi
  if diff -u "$golden/$name.txt" "$out" >"$out.diff" 2>&1; then
    pass=$((pass + 1))
  else
    echo "FAIL $name: plan differs from $golden/$name.txt:"; head -40 "$out.diff"; fail=$((fail + 1))
  fi
done < tests/plans/cases.txt
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
