#!/usr/bin/env bash
# Control-plane latencies through the real binaries (tiny job, 2 CPU workers):
#   * submit → first finished step (process start, registration, rendezvous, model init, one step)
#   * kill -9 of a worker → the resumed attempt's first finished step
# Prints figures; never fails on speed.
#
# usage: tests/bench/control_plane_bench.sh [BUILD_DIR=build] [repeats=3]
set -euo pipefail
cd "$(dirname "$0")/../.."
export SHARDD_BIN_DIR=$(realpath "${1:-build}") SHARDD_SOURCE_DIR=$PWD
repeats=${2:-3}
source tests/e2e/control_plane/lib.sh
trap cleanup EXIT
now_ms() { date +%s%3N; }
start_shardd
job=$(make_job bench)
sub=(); res=()
for i in $(seq 1 "$repeats"); do
  t0=$(now_ms)
  id=$(ctl submit "$job" --set train.steps=400 --set name=bench$i)
  while ! step_at_least "$id" 1; do sleep 0.02; done
  sub+=($(( $(now_ms) - t0 )))
  wait_for 120 committed_at_least "$id" 10
  pid=$(worker_pid "$id" 1)
  step=$(job_field "$id" "j['progress']['step']")
  t1=$(now_ms)
  kill -9 "$pid"
  while [ "$(job_field "$id" "j.get('attempt')")" -lt 2 ] || ! step_at_least "$id" $((10 + 1)) \
        || [ "$(job_field "$id" "j.get('state')")" != RUNNING ]; do sleep 0.02; done
  # The resumed attempt restarts at the last committed step; its first step ends the wait.
  res+=($(( $(now_ms) - t1 )))
  ctl cancel "$id" > /dev/null
  echo "run $i: submit→first step ${sub[-1]} ms; kill at step $step → resumed first step ${res[-1]} ms"
done
median() { printf '%s\n' "$@" | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
echo "control_plane_bench: median submit→first step $(median "${sub[@]}") ms; median worker death→resumed first step $(median "${res[@]}") ms (restart.backoff_s 0.2, heartbeat 1 s)"
