#!/usr/bin/env bash
# a worker that dies at the same step every attempt: FAILED once max_restarts is spent, with the reason.
source "$(dirname "$0")/lib.sh"
export SHARDD_FAULT=ckpt_before_write@20   # every attempt kills itself saving step 20
start_shardd
job=$(make_job mxr)
id=$(ctl submit "$job" --set restart.max_restarts=1)
out=$(ctl watch "$id") || true
state_is "$id" FAILED || fail "job is not FAILED: $(ctl status "$id")"
reason=$(job_field "$id" "j.get('reason')")
echo "reason: $reason"
echo "$reason" | grep -q "max_restarts (1) exhausted" || fail "reason does not say max_restarts"
echo "$reason" | grep -q "signal 9" || fail "reason does not name the signal"
echo PASS
