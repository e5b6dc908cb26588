#!/usr/bin/env bash
# pd2bwc -D train.KEY=VALUE (issue 16): every train setting can be overridden from the
# command line; plan.json's train section holds the value in force and lists the
# overrides (train.overrides); a 4-step run changes where the setting should (the
# losses, or the logged lr for the schedule's settings); bad values are refused with
# the setting and what it accepts, exit 1, and no plan.
#   train_override.sh PD2BWC PD2BWRUN
set -u
PD2BWC=$1
RUN=$2
SRC=$(cd "$(dirname "$0")/.." && pwd)
T=$(mktemp -d /tmp/pd2bw-trainov-XXXXXX)
trap 'rm -rf "$T"' EXIT
export PD2BW_CACHE=${PD2BW_CACHE:-/tmp/pd2bw-test-cache-$(id -u)}
pass=0 fail=0
ok() { pass=$((pass + 1)); echo "ok   $*"; }
bad() { fail=$((fail + 1)); echo "FAIL $*"; }
python3 - "$T/train.bin" <<'PY' || exit 1
import struct, sys
text = b"Settings from the command line change what the run does, and plan.json says so. " * 100
open(sys.argv[1], "wb").write(struct.pack("<%dH" % len(text), *text))
PY
compile() { # DIR OVERRIDES...: the tiny GPT, one stage (batch 4 of microbatch 2)
  local dir=$1
  shift
  "$PD2BWC" "$SRC/pipeline/tinygpt.model" -q -D layers=2 -D dim=16 -D seq=8 -D heads=2 -D bsz=4 -D mbs=2 \
    --cluster "$SRC/pipeline/cpu8.cluster" --stages 1 --replicas 1 --backend cpu "$@" -o "$dir"
}
train() { "$RUN" "$1" --data "$T/train.bin" --steps 4 --threads 1 -q --log-json "$1.log" >/dev/null; }
field() { # LOG FIELD: the field of every step
  python3 -c 'import json,sys; print(" ".join(repr(json.loads(l)[sys.argv[2]]) for l in open(sys.argv[1])))' "$1" "$2"
}
planval() { # DIR KEY: plan.json's train.KEY (or config.KEY for config.*)
  python3 -c '
import json, sys
j = json.load(open(sys.argv[1] + "/plan.json"))
k = sys.argv[2]
print(j["config"][k[7:]] if k.startswith("config.") else j["train"][k])' "$1" "$2"
}
n=0
declare -A based # base overrides -> its plan directory, compiled and trained once
# NAME BASE_OVERRIDES(space-separated, may be empty) OVERRIDE PLAN_KEY PLAN_VALUE LOG_FIELD(loss|lr|-)
case_() {
  local name=$1 base=$2 ov=$3 key=$4 want=$5 what=$6 b=() d bd
  n=$((n + 1))
  d="$T/c$n"
  for x in $base; do b+=(-D "train.$x"); done
  bd=${based[x$base]:-}
  if [ -z "$bd" ]; then
    bd="$T/base$n"
    compile "$bd" "${b[@]}" && train "$bd" || { bad "$name: base run failed"; return; }
    based[x$base]=$bd
  fi
  if ! compile "$d" "${b[@]}" -D "train.$ov"; then bad "$name: pd2bwc failed"; return; fi
  local got
  got=$(planval "$d" "$key")
  if [ "$got" != "$want" ]; then bad "$name: plan.json $key is '$got', expected '$want'"; return; fi
  if ! planval "$d" overrides | grep -qF "'$ov'"; then bad "$name: train.overrides lacks $ov"; return; fi
  if [ "$what" = - ]; then ok "$name: plan.json $key = $got"; return; fi
  train "$d" || { bad "$name: pd2bwrun failed"; return; }
  local x y
  x=$(field "$bd.log" "$what")
  y=$(field "$d.log" "$what")
  if [ "$x" != "$y" ]; then ok "$name: plan.json $key = $got; $what $x -> $y"
  else bad "$name: the run's $what did not change ($x)"; fi
}
case_ batch "" batch=8 batch 8 loss
case_ microbatch "" microbatch=1 config.microbatch_size 1 -
case_ optimizer "" optimizer=sgd optimizer sgd loss
case_ lr "" lr=0.05 lr 0.05 loss
# a plan of one stage still updates with 2BW's delay: step 4's loss is the first on
# weights that two updates (and so the moments) shaped
case_ beta1 "lr=0.05 warmup=0" beta1=0.5 beta1 0.5 loss
case_ beta2 "lr=0.05 warmup=0" beta2=0.5 beta2 0.5 loss
case_ eps "lr=0.05 warmup=0" eps=0.001 eps 0.001 loss
case_ momentum "optimizer=sgd lr=0.5" momentum=0.9 beta1 0.9 loss
case_ weight_decay "lr=0.05" weight_decay=0.9 weight_decay 0.9 loss
case_ clip "" clip=0.01 clip 0.01 loss
case_ seed "" seed=7 seed 7 loss
case_ lr_schedule "" lr_schedule=constant lr_schedule constant lr
case_ warmup "" warmup=2 warmup 2 lr
case_ steps "warmup=0" steps=10 steps 10 lr
case_ min_lr "warmup=0 steps=4" min_lr=0.0005 min_lr 0.0005 lr
# refused, named, exit 1, no plan written
refuse() { # OVERRIDE EXPECTED-MESSAGE
  rm -rf "$T/bad"
  local out rc
  out=$(compile "$T/bad" -D "$1" 2>&1)
  rc=$?
  if [ $rc -eq 1 ] && grep -qF -- "$2" <<<"$out" && [ ! -e "$T/bad" ]; then ok "-D $1 refused: $out"
  else bad "-D $1: rc $rc, '$out' (expected '$2')"; fi
}
refuse train.optimizer=adamx "-D train.optimizer=adamx: not an optimizer (adamw, sgd)"
refuse train.lr_schedule=step "not an lr_schedule (constant, cosine, linear)"
refuse train.lr=0 "-D train.lr=0: expected a finite number > 0"
refuse train.lr=abc "-D train.lr=abc: expected a finite number > 0"
refuse train.lr=1e400 "-D train.lr=1e400: expected a finite number > 0"
refuse train.beta1=1 "-D train.beta1=1: expected a number in [0, 1)"
refuse train.clip=-1 "-D train.clip=-1: expected a finite number >= 0"
refuse train.batch=0 "-D train.batch=0: expected an integer in [1, 1073741824]"
# past the runtime's train.batch range (plan.json 0..2^30): refused here, not at run time (issue 24, item 9)
refuse train.batch=2147483647 "-D train.batch=2147483647: expected an integer in [1, 1073741824]"
refuse train.seed=-3 "-D train.seed=-3: expected an integer in [0, 9223372036854775807]"
refuse train.seed=18446744073709551615 "-D train.seed=18446744073709551615: expected an integer in [0, 9223372036854775807]"
refuse train.flush_steps=9007199254740993 "expected an integer in [0, 9007199254740992]"
refuse train.momentum=0.9 "'momentum' is a setting of sgd, the optimizer is adamw"
refuse train.dropout=0.1 "'dropout' is not a train setting (batch, microbatch, optimizer, lr"
refuse train.warmup=500 "warmup is 500 steps, more than the 300 steps of the schedule"
refuse train.batch=5 "microbatch 2 does not divide batch 5"
refuse lr=1e-4 "'lr' is not a param of model 'tinygpt' (the train setting is -D train.lr=1e-4)"
echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
