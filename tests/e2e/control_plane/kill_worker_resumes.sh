#!/usr/bin/env bash
# kill -9 a worker at a random step: the job resumes from the last committed
# step and ends with the same final weights as an uninterrupted run.
source "$(dirname "$0")/lib.sh"
start_shardd
ref=$(make_job ref "export: {hf_dir: out/ref, dtype: fp32}")
victim=$(make_job vic "export: {hf_dir: out/vic, dtype: fp32}")
id_ref=$(ctl submit "$ref" --set train.steps=120)
ctl watch "$id_ref" > /dev/null || fail "reference run failed"
state_is "$id_ref" SUCCEEDED || fail "reference run did not succeed"

id=$(ctl submit "$victim" --set train.steps=120)
kill_at=$((12 + RANDOM % 20))
wait_for 120 step_at_least "$id" "$kill_at" || fail "never reached step $kill_at"
pid=$(worker_pid "$id" 1)
echo "kill -9 rank 1 (pid $pid) at step >= $kill_at"
kill -9 "$pid"
out=$(ctl watch "$id") || fail "watch failed"
echo "$out" | grep -E "restarting|launching" || true
state_is "$id" SUCCEEDED || fail "job did not succeed after the kill: $(ctl status "$id")"
echo "$out" | grep -q "rank 1 killed by signal 9" || fail "no event names the killed rank"
[ "$(job_field "$id" "j.get('attempt')")" -ge 2 ] || fail "no second attempt"
cmp "$T/out/ref/model.safetensors" "$T/out/vic/model.safetensors" || fail "final weights differ from the uninterrupted run"
echo PASS: identical final weights after a kill at step $kill_at
