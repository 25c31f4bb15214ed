#!/usr/bin/env bash
# a worker that stops making progress (SIGSTOP) is detected and restarted.
source "$(dirname "$0")/lib.sh"
start_shardd
job=$(make_job stp)
id=$(ctl submit "$job")
wait_for 120 committed_at_least "$id" 10 || fail "no committed checkpoint"
pid=$(worker_pid "$id" 0)
kill -STOP "$pid"
echo "SIGSTOP rank 0 (pid $pid)"
out=$(ctl watch "$id") || fail "watch failed"
echo "$out" | grep -E "restarting" || fail "no restart event"
echo "$out" | grep -q "rank 0 missed its heartbeat deadline\|rank 0 is alive but made no progress" || fail "the reason does not name rank 0"
state_is "$id" SUCCEEDED || fail "job did not succeed"
kill -0 "$pid" 2>/dev/null && fail "the stopped worker $pid is still there"
echo PASS
