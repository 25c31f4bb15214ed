#!/usr/bin/env bash
# Elastic restarts with the Slurm launcher (restart.min_world_size;
# coordinator/jobs/elastic_launched.h) on a real cluster of one node with 2
# CPUs: a 2-rank job (1 CPU per task) commits a checkpoint; another Slurm job
# asks for a CPU and waits for it; rank 1 is killed, the attempt ends and the
# other job takes the freed CPU, so the restart's sbatch stays PENDING
# (Resources). After restart.elastic_wait_s the coordinator counts 1 free
# CPU, cancels it and runs the next attempt on 1 rank (one task); once the
# other job is gone it grows back to 2 at a following commit, and the job
# succeeds. Paced by a step gate (SHARDD_STEP_GATE), never by sleeps.
source "$(dirname "$0")/lib.sh"
export SHARDD_STEP_GATE=$T/gate
open_gate 20
export SLURM_TEST_CPUS=2
start_slurm
start_shardd
job=$(make_slurm_job el)
id=$(ctl submit "$job" --set train.steps=60 --set checkpoint.async=false --set restart.min_world_size=1 \
  --set restart.elastic_wait_s=3)
ctl watch "$id" > "$T/watch.log" 2>&1 &  # every event, flushed as it comes
watch_pid=$!
wait_for 60 committed_at_least "$id" 20 || fail "no commit at the gate: $(ctl status "$id")"

blocker=$(cd "$T" && sbatch --parsable -n1 --output=/dev/null --wrap "sleep 600")
wait_for 10 eval '[ "$(squeue -h -j "$blocker" -o %T)" = PENDING ]' || fail "the blocker did not queue behind the job"
pid=$(worker_pid "$id" 1)
echo "blocker slurm job $blocker queued; kill -9 rank 1 (pid $pid)"
kill -9 "$pid"
shrunk() { grep -q "elastic_shrink: " "$T/watch.log"; }
wait_for 60 shrunk || fail "no elastic shrink: $(ctl status "$id"); $(cat "$T/watch.log")"
line=$(grep "elastic_shrink: " "$T/watch.log")
echo "$line"
echo "$line" | grep -q "continuing on 1 of 2 ranks: slurm job [0-9]* PENDING (Resources) for [0-9]* s; 1 of 2 ranks placeable (slurm launcher); micro-batches per step 1 → 2" \
  || fail "the shrink event does not say what changed: $line"
[ "$(squeue -h -j "$blocker" -o %T)" = RUNNING ] || fail "the blocker does not hold the freed CPU"
wait_for 60 eval '[ "$(job_field "$id" "j.get(\"attempt_world_size\",0)")" = 1 ] && state_is "$id" RUNNING' \
  || fail "the shrunk attempt does not run on 1 rank: $(ctl status "$id")"
a=$(job_field "$id" "j.get('attempt')")
grep -q -- "--ntasks-per-node=1" "$STATE/jobs/$id/attempt_$a/job.sbatch" || fail "attempt $a's script does not ask for 1 task"

# The CPU comes back: the job grows back to 2 at a following commit.
scancel "$blocker"
wait_for 20 slurm_job_gone "$blocker" || fail "the blocker did not end"
open_gate 1000000
wait "$watch_pid" || true
state_is "$id" SUCCEEDED || fail "job did not succeed: $(ctl status "$id"); $(cat "$T/watch.log")"
grep "elastic_grow: " "$T/watch.log" | grep -q "growing back to 2 of 2 ranks after step [0-9]*: 2 of 2 ranks placeable" \
  || fail "no grow back to 2 ranks: $(cat "$T/watch.log")"
grep "elastic_grow: " "$T/watch.log"
[ "$(job_field "$id" "j.get('attempt_world_size',0)")" = 2 ] || fail "the last attempt did not run on 2 ranks"
[ "$(job_field "$id" "j.get('restarts',0)")" = 1 ] || fail "a resize was charged as a restart: $(ctl status "$id")"
echo "PASS: shrank to 1 rank while slurm job $blocker held a CPU, grew back to 2, succeeded"
