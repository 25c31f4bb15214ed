#!/usr/bin/env bash
# SIGTERM to shardd mid-run never stops training (issue 39 item 1): the
# workers keep training while no coordinator runs, a coordinator started
# again on the same state dir adopts them, and no restart is charged.
#
# Paced by the job: the workers wait at a step gate before step 11 while
# shardd is stopped (heartbeats in flight are cancelled by its shutdown), then
# the gate opens and they train on to step 20's checkpoint shards with no
# coordinator at all; only then is shardd started again.
source "$(dirname "$0")/lib.sh"
export SHARDD_STEP_GATE="$T/gate"
open_gate 10
start_shardd
job=$(make_job cstop)
id=$(ctl submit "$job" --set train.steps=60)
wait_for 120 step_at_least "$id" 10 || fail "never reached step 10"
pids=$(workers_of "$id" | sort | tr '\n' ' ')
[ -n "$pids" ] || fail "no workers of $id"
port=${ADDR##*:}
kill -TERM "$SHARDD_PID"
wait_for 60 eval '! kill -0 "$SHARDD_PID" 2>/dev/null' || fail "shardd did not stop on SIGTERM"
echo "shardd stopped at step >= 10; workers: $pids"
open_gate 1000000
# Step 20's shards land in the job's checkpoint folder with no coordinator
# running (it commits them when it is back): the workers trained on.
shards_at_20() { [ "$(find "$T/ckpt" -path '*step_00000020*' -name 'rank_*.shard' 2>/dev/null | wc -l)" -ge 2 ]; }
alive() { for p in $pids; do kill -0 "$p" 2>/dev/null || return 1; done; }
wait_for 120 eval 'shards_at_20 || ! alive' || fail "the workers made no progress without a coordinator"
alive || fail "a worker exited while shardd was stopped (pids $pids): $(tail -n 5 "$T"/*.log 2>/dev/null | tail -n 20)"
shards_at_20 || fail "no step-20 shards while shardd was stopped"
start_shardd "$port"
ctl watch "$id" > "$T/watch.out" || fail "watch after the restart failed: $(tail -n 5 "$T/watch.out")"
state_is "$id" SUCCEEDED || fail "job did not finish: $(ctl status "$id")"
[ "$(job_field "$id" "j.get('attempt')")" = 1 ] ||
  fail "a restart was charged for stopping the coordinator: $(ctl status "$id")"
grep -q "restarting" "$T/watch.out" && fail "the watch shows a restart: $(grep restarting "$T/watch.out")"
echo PASS
