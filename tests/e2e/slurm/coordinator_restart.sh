#!/usr/bin/env bash
# kill -9 the coordinator while a launcher: slurm job runs, start it again: it
# finds the attempt's Slurm job by name (squeue -n), the workers reconnect,
# and the job finishes in its first attempt.
source "$(dirname "$0")/lib.sh"
start_slurm
start_shardd
job=$(make_slurm_job crd)
id=$(ctl submit "$job" --set train.steps=150)
wait_for 120 step_at_least "$id" 10 || fail "never reached step 10"
sid=$(slurm_id_of "$id")
port=${ADDR##*:}
kill -9 "$SHARDD_PID"
echo "coordinator killed at step >= 10 (slurm job $sid); restarting on port $port"
sleep 1
start_shardd "$port"
out=$(ctl watch "$id") || fail "watch after restart failed"
state_is "$id" SUCCEEDED || fail "job did not finish after a coordinator restart: $(ctl status "$id")"
echo "$out" | grep -q "adopted" || fail "the attempt was not adopted: $out"
[ "$(job_field "$id" "j.get('attempt')")" = 1 ] || fail "a new attempt was started instead of adopting slurm job $sid"
echo "PASS: slurm job $sid adopted after a coordinator restart; the job finished in attempt 1"
