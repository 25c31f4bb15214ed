#!/usr/bin/env bash
# health.straggler_action: restart. Rank 1 computes at 40% speed
# (SHARDD_SLOW_RANK=1:2.5) in every attempt; with restart.max_restarts 1 the
# first time it is named the attempt restarts (one restarting event saying
# why, counted as restart 1 of 1), the second time the budget is spent: one
# straggler_action event says so and the job trains on to SUCCEEDED.
source "$(dirname "$0")/lib.sh"
export SHARDD_SLOW_RANK=1:2.5
start_shardd 0 --cpu-slots 3
job=$(make_job stragr "health: {straggler_window: 5, straggler_action: restart}")
id=$(ctl submit "$job" --set parallel.world_size=3 --set train.global_batch=12 --set train.steps=20 \
  --set restart.max_restarts=1)
out=$(ctl watch "$id") || fail "watch failed: $out"
state_is "$id" SUCCEEDED || fail "job did not succeed: $(ctl status "$id")"
echo "$out" | grep -E ": restarting: rank 1 is a straggler: .*health.straggler_action: restart restarts the attempt; restart 1 of 1" \
  || fail "no restart for the straggler: $out"
[ "$(echo "$out" | grep -c ": restarting: ")" = 1 ] || fail "not exactly one restart: $out"
echo "$out" | grep -E ": straggler_action: rank 1 is a straggler: .*restart.max_restarts \(1\) is spent" \
  || fail "the spent budget is not said: $out"
[ "$(job_field "$id" "j['restarts']")" = 1 ] || fail "the restart is not counted"
echo PASS
