#!/usr/bin/env bash
# cancel → CANCELLED and no worker process left.
source "$(dirname "$0")/lib.sh"
start_shardd
job=$(make_job cnl)
id=$(ctl submit "$job" --set train.steps=100000 --set train.log_every=1000)
wait_for 120 step_at_least "$id" 3 || fail "never started training"
ctl cancel "$id" | grep -q CANCELLED || fail "cancel did not answer CANCELLED"
wait_for 15 no_workers "$id" || fail "workers still running: $(workers_of "$id")"
state_is "$id" CANCELLED || fail "state is not CANCELLED"
echo PASS
