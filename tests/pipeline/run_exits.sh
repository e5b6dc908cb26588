#!/usr/bin/env bash
# tests/pipeline/run_exits.sh PD2BWC RUN_EXITS — the ways out of a rank's run on a plan
# of 2 stages x 2 replicas (run_exits.c).
set -u
PD2BWC=$1 EXITS=$2
. "$(dirname "$0")/common.sh"
plan "$T/plan" --stages 2 --replicas 2 --schedule 1f1b -D train.batch=8 --microbatch-size 2 || exit 1
"$EXITS" "$T/plan" "$T/train.bin" "$T"
