#!/usr/bin/env bash
# restart.coordinator_loss_timeout_s bounds how long workers train on without
# their coordinator (docs/control-plane.md, "Coordinator restart"): with 3 s,
# the ranks of a job whose shardd was SIGKILLed give up (exit code 4, "giving
# up" in their log) long before the default 60 s; a shardd started again
# finds the attempt's ranks gone, restarts the job from its last commit, and
# the job succeeds.
source "$(dirname "$0")/lib.sh"
export SHARDD_STEP_GATE=$T/gate
start_shardd
port=${ADDR##*:}
job=$(make_job closs)
open_gate 14
id=$(ctl submit "$job" --set train.steps=30 --set train.log_every=1 --set restart.coordinator_loss_timeout_s=3) ||
  fail "submit refused restart.coordinator_loss_timeout_s"
wait_for 240 step_at_least "$id" 14 || fail "never reached step 14: $(ctl status "$id")"
[ "$(workers_of "$id" | wc -l)" = 2 ] || fail "expected 2 workers at step 14: $(workers_of "$id")"
kill -KILL "$SHARDD_PID"
wait_for 60 bash -c "! kill -0 $SHARDD_PID" || fail "shardd did not exit on SIGKILL"
# Well under the default 60 s window: only the job's 3 s lets them go this soon.
wait_for 40 no_workers "$id" || fail "workers still running 40 s after their coordinator vanished: $(workers_of "$id")"
ctl logs "$id" --rank 0 --attempt 1 2>/dev/null | grep -q "coordinator unreachable for .* giving up" ||
  fail "rank 0 did not say it gave up: $(ctl logs "$id" --rank 0 --attempt 1 2>&1 | tail -n 5)"
start_shardd "$port"
open_gate 1000000
ctl watch "$id" > /dev/null || fail "watch failed"
state_is "$id" SUCCEEDED || fail "job did not succeed: $(ctl status "$id")"
[ "$(job_field "$id" "j.get('restarts', 0)")" -ge 1 ] || fail "no restart after the ranks left: $(ctl status "$id")"
echo PASS
