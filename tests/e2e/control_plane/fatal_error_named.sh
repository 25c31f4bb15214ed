#!/usr/bin/env bash
# A worker's fatal error reaches the job's status: a checkpoint that cannot be
# written (its step folder's name is taken by a file made after submission)
# fails the job with the worker's own words, not only "rank 0 exited with code 1".
source "$(dirname "$0")/lib.sh"
start_shardd
job=$(make_job "fatal$$")
id=$(ctl submit "$job" --set restart.max_restarts=0 --set checkpoint.every_steps=2 --set checkpoint.async=false)
mkdir -p "$T/ckpt/fatal$$"
echo "not a folder" > "$T/ckpt/fatal$$/step_00000002"
wait_for 120 state_is "$id" FAILED || fail "job did not fail: $(ctl status "$id")"
reason=$(job_field "$id" "j.get('reason','')")
echo "reason: $reason"
echo "$reason" | grep -q "step_00000002" || fail "the status does not name the cause: $reason"
ctl status "$id" | grep -q "step_00000002" || fail "shardctl status does not show the cause: $(ctl status "$id")"
echo "ok: the failure names its cause"
