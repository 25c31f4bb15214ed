#!/usr/bin/env bash
# launcher: slurm on a real single-node cluster: submit through shardctl → two
# workers via srun → success; then a second job cancelled mid-run → its Slurm
# job is gone and no worker is left.
source "$(dirname "$0")/lib.sh"
start_slurm
start_shardd
job=$(make_slurm_job slurmok)
id=$(ctl submit "$job")
ctl watch "$id" > "$T/watch.log" || fail "watch failed: $(cat "$T/watch.log")"
state_is "$id" SUCCEEDED || fail "job did not succeed: $(ctl status "$id")"
sid=$(slurm_id_of "$id")
[ -n "$sid" ] || fail "the workers did not report a Slurm job id"
grep -q "#SBATCH --ntasks-per-node=2" "$STATE/jobs/$id/attempt_1/job.sbatch" || fail "unexpected sbatch script"
for r in 0 1; do grep -q "model tiny" "$STATE/jobs/$id/attempt_1/rank_$r.log" || fail "no log for rank $r"; done
ctl logs "$id" --rank 1 | grep -q . || fail "shardctl logs shows nothing for rank 1"
echo "ok: job $id ran as slurm job $sid: $(job_field "$id" "j.get('reason')")"

long=$(make_slurm_job slurmcancel)
id2=$(ctl submit "$long" --set train.steps=100000)
wait_for 60 step_at_least "$id2" 3 || fail "the long job never trained"
sid2=$(slurm_id_of "$id2")
squeue -h -j "$sid2" | grep -q . || fail "slurm job $sid2 not in squeue while running"
ctl cancel "$id2" > /dev/null
state_is "$id2" CANCELLED || fail "not cancelled: $(ctl status "$id2")"
wait_for 30 slurm_job_gone "$sid2" || fail "slurm job $sid2 still in squeue after shardctl cancel"
wait_for 30 no_workers "$id2" || fail "workers of $id2 still run after cancel"
echo "PASS: slurm job $sid succeeded; cancel removed slurm job $sid2"
