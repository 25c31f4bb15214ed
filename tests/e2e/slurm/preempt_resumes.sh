#!/usr/bin/env bash
# Preemption under Slurm: SIGUSR1 to the batch shell (what --signal=B:USR1@N
# sends before a time limit) mid-run → the workers checkpoint their step and
# exit 5 → a new attempt (a new sbatch job) resumes from that checkpoint,
# without charging a restart, and ends with weights byte-identical to an
# uninterrupted run.
source "$(dirname "$0")/lib.sh"
start_slurm
start_shardd
ref=$(make_slurm_job ref "export: {hf_dir: out/ref, dtype: fp32}")
vic=$(make_slurm_job vic "export: {hf_dir: out/vic, dtype: fp32}")
id_ref=$(ctl submit "$ref" --set train.steps=120)
ctl watch "$id_ref" > /dev/null || fail "reference run failed"
state_is "$id_ref" SUCCEEDED || fail "reference run did not succeed"

id=$(ctl submit "$vic" --set train.steps=120)
at=$((12 + RANDOM % 20))
wait_for 120 step_at_least "$id" "$at" || fail "never reached step $at"
sid=$(slurm_id_of "$id")
echo "scancel --signal=USR1 --batch $sid at step >= $at"
scancel --signal=USR1 --batch "$sid"
out=$(ctl watch "$id") || fail "watch failed"
echo "$out" | grep -E "preempted|launching" || true
state_is "$id" SUCCEEDED || fail "job did not succeed after the preemption: $(ctl status "$id")"
echo "$out" | grep -q "preempted" || fail "no preempted event"
[ "$(job_field "$id" "j.get('attempt')")" -ge 2 ] || fail "no second attempt"
[ "$(job_field "$id" "j.get('restarts',0)")" = 0 ] || fail "the preemption was charged as a restart"
sid2=$(slurm_id_of "$id")
[ "$sid2" != "$sid" ] || fail "the second attempt reused slurm job $sid"
grep -q "SIGUSR1: asking the workers" "$STATE/jobs/$id/attempt_1/slurm.log" || fail "the batch shell did not forward SIGUSR1"
cmp "$T/out/ref/model.safetensors" "$T/out/vic/model.safetensors" || fail "final weights differ from the uninterrupted run"
echo "PASS: preempted at step >= $at (slurm job $sid), resumed as slurm job $sid2, identical final weights"
