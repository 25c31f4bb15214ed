#!/usr/bin/env bash
# kill -9 the coordinator mid-run and start it again: the job still finishes,
# and when its attempt was adopted no step's metrics are lost (rank 0 holds
# them until a heartbeat lands).
source "$(dirname "$0")/lib.sh"
start_shardd
job=$(make_job crd)
id=$(ctl submit "$job" --set train.steps=80)
wait_for 120 step_at_least "$id" 10 || fail "never reached step 10"
port=${ADDR##*:}
kill -9 "$SHARDD_PID"
echo "coordinator killed at step >= 10; restarting on port $port"
sleep 1
start_shardd "$port"
out=$(ctl watch "$id") || fail "watch after restart failed"
state_is "$id" SUCCEEDED || fail "job did not finish after a coordinator restart: $(ctl status "$id")"
echo "$out" | grep -E "adopt" || true
if [ "$(job_field "$id" "j.get('attempt')")" = 1 ]; then
  steps=$(ctl metrics "$id" --json | python3 -c 'import json,sys; print([json.loads(l)["step"] for l in sys.stdin] == list(range(1, 81)))')
  [ "$steps" = True ] || fail "metrics lack steps of 1..80 after the restart: $(ctl metrics "$id" | tail -n 3)"
fi
echo PASS
