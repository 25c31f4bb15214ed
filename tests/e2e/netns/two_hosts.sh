#!/usr/bin/env bash
# Two "hosts": network namespaces A (10.213.0.1) and B (10.213.0.2) joined by a
# veth pair, nothing routed anywhere else. The coordinator runs in A; the job
# (launcher: external, hybrid_shard, world 4, shard_group_size 2) has ranks 0-1
# on A and ranks 2-3 on B, one shard group per host, started by a small agent
# loop per host that starts its workers again whenever they exit with a
# retryable code (like deploy/slurm/external-job.sbatch). Both hosts share this
# machine's filesystem, as nodes share a checkpoint filesystem.
#
# The workers wait at a step gate (SHARDD_STEP_GATE) before step 31 until the
# link is down, so the cut lands mid-run whatever the machine's speed (a
# loaded machine once let the job finish before the test cut the link); the
# gate opens right after the cut, so every rank is inside a collective when
# the cut bites, as in a real run.
#
# Mid-run the link goes down: every worker of the attempt must be gone within
# the bound the job's own timeouts give (comm_timeout_s, read from the job
# file, and the worker's last words to the coordinator), the job restarts,
# host B's workers wait to join; when the link comes back they join, the next
# attempt resumes from a committed step and the job succeeds.
#
# Skips (77) unless root with `ip netns`; always deletes its namespaces.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
netns_setup tw
COMM_TIMEOUT=6
open_gate 30
now() { date +%s.%N; }
start_shardd

cat > "$T/twohost.yaml" <<YAML
name: twohost
model: {preset: tiny}
data: {tokens: data/phrases.u32, seq_len: 32, shuffle: true}
train: {steps: 160, global_batch: 8, micro_batch: 2, lr: 3.0e-3, warmup_steps: 5, seed: 7, log_every: 10}
parallel: {strategy: hybrid_shard, world_size: 4, shard_group_size: 2, comm_timeout_s: $COMM_TIMEOUT}
checkpoint: {dir: ckpt, every_steps: 10, keep_last: 3, async: true}
resources: {device: cpu, launcher: external}
restart: {max_restarts: 4, backoff_s: 0.5, heartbeat_timeout_s: 4, hang_timeout_s: 60}
YAML
JOB=$(ctl submit "$T/twohost.yaml") || fail "submit failed"
start_host "$NA" "$IPA" "$JOB" 0 2 0 "$GATE"
start_host "$NB" "$IPB" "$JOB" 2 2 2 "$GATE"

wait_for 120 committed_at_least 20 && ! state_in "$JOB" FAILED CANCELLED ||
  fail "no committed checkpoint at step 20: $(ctl status "$JOB")"
[ "$(job_field "$JOB" "j.get('attempt')")" = 1 ] || fail "restarted before the link went down: $(ctl status "$JOB")"
hosts=$(job_field "$JOB" "sorted(set(w.get('hostname','') for w in j.get('workers',[])))")
[ "$hosts" = "['$IPA', '$IPB']" ] || fail "the workers are not on both hosts: $hosts"

t_down=$(now)
ip -n "$NA" link set "$VA" down
open_gate 1000000
echo "link down at step $(job_field "$JOB" "j.get('progress',{}).get('step',0)")"
# The coordinator ends the attempt (host B's heartbeats stop) ...
wait_for 30 state_in "$JOB" RESTARTING LAUNCHING || fail "the coordinator did not end the attempt: $(ctl status "$JOB")"
# ... and every attempt-1 worker, on both sides of the cut, is gone within the
# bound the job's own timeouts give. Per rank: its collective gives up
# comm_timeout_s (the job file's) after it started, then its last words to the
# coordinator (the heartbeat in flight, a last one and the failure report)
# share one deadline, LAST_WORDS_S (worker/agent.cc, kLastWords). A rank can
# start the collective that times out a little after the cut (on a loaded
# 2-core CI machine one did, 5 s after its shard-group peer), so the cut may
# come up to one more comm_timeout_s before it; SLACK_S is for the process's
# own exit on a loaded machine. A worker stuck without a timeout would stay
# until the hang limit (60 s).
LAST_WORDS_S=2 SLACK_S=2
comm_timeout=$(python3 -c 'import sys, yaml; print(yaml.safe_load(open(sys.argv[1]))["parallel"]["comm_timeout_s"])' \
  "$T/twohost.yaml")
limit=$(python3 -c "import math; print(math.ceil(2 * $comm_timeout + $LAST_WORDS_S + $SLACK_S))")
echo "bound per rank: 2 x comm_timeout_s $comm_timeout + last words $LAST_WORDS_S s + $SLACK_S s = $limit s"
first_try_exits() { [ "$(cat "$T"/host_*.exits 2>/dev/null | grep -c ' try 1 exit')" -ge 4 ]; }
wait_for "$limit" first_try_exits || fail "attempt-1 workers still alive ${limit} s after the link went down"
python3 - "$t_down" "$limit" "$T/host_0.exits" "$T/host_2.exits" <<'PY' ||
import sys
t0, limit, late = float(sys.argv[1]), float(sys.argv[2]), 0
for path in sys.argv[3:]:
    for line in open(path):
        t, _, rank, _, tr, _, rc = line.split()
        if tr == "1":
            print(f"  rank {rank}: exit {rc} {float(t) - t0:.1f} s after the link went down")
            late += float(t) - t0 > limit
sys.exit(1 if late else 0)
PY
  fail "a worker outlived the cut by more than 2 x comm_timeout_s + $LAST_WORDS_S s last words + $SLACK_S s ($limit s)"
sleep 6  # longer than comm_timeout_s: host A's ranks of attempt 2 wait for host B
t_up=$(now)
ip -n "$NA" link set "$VA" up
echo "link up after $(python3 -c "print(f'{$t_up - $t_down:.1f}')") s"
wait_for 180 state_in "$JOB" SUCCEEDED FAILED CANCELLED || fail "the job did not end after the link came back: $(ctl status "$JOB")"
state_in "$JOB" SUCCEEDED || fail "the job did not succeed: $(ctl status "$JOB")"
attempt=$(job_field "$JOB" "j.get('attempt')")
# One restart for the cut; the ranks that joined attempt 2 first waited for
# host B without burning restarts on rendezvous timeouts.
[ "$attempt" -eq 2 ] || fail "attempt $attempt: waiting for host B burned restarts: $(grep restarting "$T/shardd.log")"
ctl watch "$JOB" > "$T/watch.log" 2>&1 || true
grep -q "resumed from .*step_" "$T/watch.log" || fail "no attempt resumed from a committed step: $(cat "$T/watch.log")"
grep -E "restarting|resumed" "$T/watch.log" | sed 's/^/  /'
host_b_idle() { [ -z "$(ip netns pids "$NB")" ]; }
wait_for 15 host_b_idle || fail "host B still runs processes after the job ended: $(ip netns pids "$NB")"
echo "PASS: link down -> attempt ended, workers gone; link up -> attempt $attempt resumed on both hosts and succeeded"
