#!/usr/bin/env bash
# launcher: external on a real Slurm cluster: a job is submitted, then the
# user's own sbatch (deploy/slurm/external-job.sbatch) starts two workers that
# join it with the join token. Rank 1 is killed mid-run: the attempt fails,
# the script starts the workers again, they join attempt 2 and resume from the
# last committed checkpoint, and the job succeeds.
source "$(dirname "$0")/lib.sh"
# The workers (sbatch --export=ALL) wait at a step gate (SHARDD_STEP_GATE)
# before step 21 until the kill, so it lands mid-run whatever the machine's
# speed: a loaded machine once let the job finish before the test looked.
export SHARDD_STEP_GATE=$T/gate
open_gate() { echo "$1" > "$T/gate.tmp" && mv "$T/gate.tmp" "$T/gate"; }
open_gate 20
start_slurm
start_shardd
job=$(make_job ext)
sed -i 's/^resources: .*/resources: {device: cpu, launcher: external}/' "$job"
id=$(ctl submit "$job" --set train.steps=200)
wait_for 10 state_is "$id" LAUNCHING || fail "the external job is not waiting for workers: $(ctl status "$id")"
sleep 1
state_is "$id" LAUNCHING || fail "the external job did not keep waiting for its workers"
token=$(job_field "$id" "j.get('join_token','')")
[ ${#token} -ge 32 ] || fail "no join token in shardctl status --json"

# A wrong token is refused with one line, and the job keeps waiting.
if SHARDD_WORKER_TOKEN=wrong SLURM_PROCID=0 "$SHARDD_WORKER_BIN" --coordinator "$ADDR" --job "$id" 2> "$T/wrong.err"; then
  fail "a wrong join token was accepted"
fi
grep -q "wrong join token" "$T/wrong.err" || fail "unexpected error for a wrong token: $(cat "$T/wrong.err")"

sid=$(cd "$T" && SHARDD_COORDINATOR=$ADDR SHARDD_JOB=$id SHARDD_WORKER_TOKEN=$token SHARDD_WORKER_BIN=$SHARDD_WORKER_BIN \
  sbatch --parsable --ntasks-per-node=2 --output="$T/ext-%j.log" "$SRC/deploy/slurm/external-job.sbatch")
echo "external slurm job $sid"
wait_for 60 step_at_least "$id" 15 || fail "the joined workers never trained: $(ctl status "$id"); $(cat "$T"/ext-*.log)"
# The kill must come after a commit, or attempt 2 rightly starts over: the
# step-10 checkpoint is written in the background and commits once both ranks
# reported it, which on a loaded machine can be after step 15.
wait_for 60 committed_at_least "$id" 10 || fail "no committed checkpoint: $(ctl status "$id"); $(cat "$T"/ext-*.log)"
pid=$(worker_pid "$id" 1)
echo "kill -9 rank 1 (pid $pid)"
kill -9 "$pid"
open_gate 1000000
ctl watch "$id" > "$T/watch.log" || true
state_is "$id" SUCCEEDED || fail "job did not succeed: $(ctl status "$id"); $(cat "$T/watch.log"); $(cat "$T"/ext-*.log)"
[ "$(job_field "$id" "j.get('attempt')")" -ge 2 ] || fail "no second attempt"
grep -q "resume from .*step_" "$T/watch.log" || fail "attempt 2 did not resume from a checkpoint: $(cat "$T/watch.log")"
wait_for 30 slurm_job_gone "$sid" || fail "the user's slurm job $sid did not end"
grep -q "workers exited with code 0" "$T/ext-$sid.log" || fail "the user's script did not end with success: $(cat "$T/ext-$sid.log")"
echo "PASS: external workers joined, rejoined attempt $(job_field "$id" "j.get('attempt')") after a kill, and succeeded"
