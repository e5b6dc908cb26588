#!/usr/bin/env bash
# pd2bwc -o DIR replaces only what is its own (issue 12, items 2 and 12): a directory
# that is a pd2bw plan (its plan.json names pd2bwc as the compiler) holding only the
# files pd2bwc writes (issue 24, item 9), or an empty one.
# A directory of anything else, a regular file or a symbolic link is refused with one
# line, exit 1, and nothing is written. A SIGTERM or SIGINT while the plan is being
# written removes the temporary DIR.tmp.PID; stale DIR.tmp.PID siblings of dead
# processes are removed by the next run, those of live ones are kept.
#   plan_dir_cli.sh PD2BWC   (from the source root)
set -u
pd2bwc=$1
src=$(pwd)
w=$(mktemp -d /tmp/pd2bw-plandir-XXXXXX)
trap 'rm -rf "$w"' EXIT
pass=0 fail=0
ok() { pass=$((pass + 1)); }
bad() { echo "FAIL: $*"; fail=$((fail + 1)); }
mlp=$src/tests/pipeline/mlp.model
compile() { "$pd2bwc" "$mlp" -q --backend cpu "$@"; }
no_tmp_left() { # NAME: no NAME.tmp.* or NAME.old.* beside it
  local left
  left=$(cd "$w" && ls -d "$1".tmp.* "$1".old.* 2>/dev/null)
  [ -z "$left" ] && ok || bad "left behind: $left"
}
refused() { # WHAT DIR PATTERN: pd2bwc -o DIR exits 1 with PATTERN, nothing beside DIR
  local what=$1 dir=$2 pat=$3 out rc
  out=$(compile -o "$dir" 2>&1)
  rc=$?
  [ $rc -eq 1 ] && grep -qF -- "$pat" <<<"$out" && ok || bad "$what: exit $rc, output: $out"
  no_tmp_left "$(basename "$dir")"
}

# A directory of model sources (the issue's `cp -r models m; pd2bwc m/... -o m`).
cp -r "$src/models" "$w/m"
refused "a directory that is not a plan" "$w/m" "pd2bwc: -o $w/m: exists and is not a pd2bw plan directory (not replacing it)"
diff -r "$src/models" "$w/m" >/dev/null && ok || bad "the model directory changed"
# A plan.json that is not pd2bw's does not make a plan.
mkdir "$w/j" && echo '{"version": 1}' >"$w/j/plan.json"
refused "a foreign plan.json" "$w/j" "pd2bwc: -o $w/j: exists and is not a pd2bw plan directory (not replacing it)"
[ "$(cat "$w/j/plan.json")" = '{"version": 1}' ] && ok || bad "the foreign plan.json changed"
# A regular file.
echo keep >"$w/f"
refused "a regular file" "$w/f" "pd2bwc: -o $w/f: exists and is not a directory (not replacing it)"
[ "$(cat "$w/f")" = keep ] && ok || bad "the regular file changed"
# Symbolic links, to a plan and to nowhere.
compile -o "$w/p" >/dev/null 2>&1 && [ -f "$w/p/plan.json" ] && ok || bad "a plan into a new directory"
cp "$w/p/plan.json" "$w/p.json"
ln -s p "$w/l"
refused "a symlink to a plan" "$w/l" "pd2bwc: -o $w/l: is a symbolic link (not replacing it"
[ -L "$w/l" ] && cmp -s "$w/p/plan.json" "$w/p.json" && ok || bad "the symlink or its target changed"
ln -s nowhere "$w/dangling"
refused "a dangling symlink" "$w/dangling" "pd2bwc: -o $w/dangling: is a symbolic link (not replacing it"
[ -L "$w/dangling" ] && ok || bad "the dangling symlink was replaced"

# A plan directory holding files pd2bwc did not write (issue 24, item 9): a user's
# notes, a checkpoint saved there, a directory, a file in reference/. Each is refused
# by name, and everything stays; without them the plan is replaced.
compile -o "$w/u" >/dev/null 2>&1 || bad "a plan for the user's files"
echo mine >"$w/u/notes.txt"
refused "a plan holding a user's file" "$w/u" "pd2bwc: -o $w/u: holds 1 file pd2bwc did not write (notes.txt): not replacing it"
[ "$(cat "$w/u/notes.txt")" = mine ] && [ -f "$w/u/plan.json" ] && ok || bad "the user's file or the plan changed"
mkdir "$w/u/runs" && echo x >"$w/u/reference/old.st" && echo y >"$w/u/stage0.c.bak"
out=$(compile -o "$w/u" 2>&1)
[ $? -eq 1 ] && grep -q "holds 4 files pd2bwc did not write" <<<"$out" && grep -q "notes.txt" <<<"$out" &&
  grep -q "runs/" <<<"$out" && grep -q "reference/old.st" <<<"$out" && grep -q "stage0.c.bak" <<<"$out" && ok ||
  bad "several foreign files: $out"
rm -r "$w/u/notes.txt" "$w/u/runs" "$w/u/reference/old.st" "$w/u/stage0.c.bak"
compile -D width=24 -o "$w/u" >/dev/null 2>&1 && ok || bad "the plan without the user's files was not replaced"

# What may be replaced: an empty directory and a plan.
mkdir "$w/e"
compile -o "$w/e" >/dev/null 2>&1 && [ -f "$w/e/plan.json" ] && ok || bad "a plan into an empty directory"
compile -D width=24 -o "$w/p" >/dev/null 2>&1 && ! cmp -s "$w/p/plan.json" "$w/p.json" && ok ||
  bad "a plan over a plan was not replaced"
no_tmp_left p
# DIR with a trailing slash (docs/compiling.md: `-o plan/`) names the same directory
compile -o "$w/p/" >/dev/null 2>&1 && [ -f "$w/p/plan.json" ] && ok || bad "-o DIR/ over a plan"
compile -o "$w/s/" >/dev/null 2>&1 && [ -f "$w/s/plan.json" ] && ok || bad "-o DIR/ for a new plan"
no_tmp_left p
no_tmp_left s

# Stale siblings: a dead process's DIR.tmp.PID and DIR.old.PID go; a live process's,
# other names and non-numeric suffixes stay.
sh -c 'exit 0' &
dead=$!
wait $dead
sleep 300 &
live=$!
for d in "p.tmp.$dead" "p.old.$dead" "p.tmp.$live" "p.tmp.12x" "q.tmp.$dead" "p.tmp.$dead.1"; do
  mkdir -p "$w/$d/reference" && echo x >"$w/$d/stage0.c"
done
compile -o "$w/p" >/dev/null 2>&1 && ok || bad "a plan over stale siblings"
[ ! -e "$w/p.tmp.$dead" ] && [ ! -e "$w/p.old.$dead" ] && ok || bad "a dead process's temporary plan was kept"
for d in "p.tmp.$live" "p.tmp.12x" "q.tmp.$dead" "p.tmp.$dead.1"; do
  [ -f "$w/$d/stage0.c" ] && ok || bad "$d was removed"
done
kill "$live"
wait "$live" 2>/dev/null

# A signal while the plan is written: the temporary directory goes, nothing else
# appears, the exit status is the signal's. The loop polls for the temporary
# directory of a 400-layer tiny GPT (written in about a second here) and stops the
# compiler there (SIGSTOP), so the signal lands inside the window however fast the
# compile becomes; if the window was missed, it tries again with a bigger model.
interrupt() { # SIGNAL
  local sig=$1 dir=$w/big$1 pid rc i layers caught=0
  for layers in 400 1600 6400; do
    set -m # job control: a background job keeps SIGINT at its default
    "$pd2bwc" "$src/tests/pipeline/tinygpt.model" -q -D layers=$layers -D dim=16 -D seq=8 -D heads=2 -o "$dir" &
    pid=$!
    set +m
    while [ ! -d "$dir.tmp.$pid" ] && kill -0 $pid 2>/dev/null; do :; done
    kill -STOP $pid 2>/dev/null
    if [ -d "$dir.tmp.$pid" ]; then
      caught=1
      kill -s "$sig" $pid
    fi
    kill -CONT $pid 2>/dev/null
    wait $pid 2>/dev/null # (bash reports the death; the status says it)
    rc=$?
    [ $caught -eq 1 ] && break
    rm -rf "$dir"
  done
  [ $caught -eq 1 ] || bad "SIG$sig: never caught pd2bwc while it wrote its plan"
  [ $rc -eq $((128 + $(kill -l "$sig"))) ] && ok || bad "SIG$sig: exit $rc, expected death by the signal"
  for i in $(seq 50); do [ -e "$dir.tmp.$pid" ] || break; sleep 0.1; done
  [ ! -e "$dir.tmp.$pid" ] && [ ! -e "$dir" ] && ok || bad "SIG$sig left $(ls -d "$dir"* 2>/dev/null)"
}
interrupt TERM
interrupt INT
interrupt ABRT # what an internal error's abort() raises

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
