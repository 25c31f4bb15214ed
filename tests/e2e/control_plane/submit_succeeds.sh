#!/usr/bin/env bash
# submit → train → succeed; the coordinator commits the checkpoints.
source "$(dirname "$0")/lib.sh"
start_shardd
job=$(make_job ok)
id=$(ctl submit "$job")
[ -n "$id" ] || fail "no job id"
out=$(ctl watch "$id") || fail "watch failed: $out"
echo "$out" | tail -n 3
state_is "$id" SUCCEEDED || fail "job did not succeed: $(ctl status "$id")"
echo "$out" | grep -q "checkpoint_committed" || fail "no checkpoint_committed event"
[ -f "$T/ckpt/ok/step_00000040/COMMITTED" ] || fail "final step not committed"
ctl checkpoints "$id" | grep -q "step_00000040" || fail "checkpoints JOB does not list step 40"
ctl logs "$id" --rank 1 | grep -q "/a1/r1\]" || fail "no rank 1 log"
ctl list --all | grep -q "$id" || fail "list --all does not show the job"
echo PASS
