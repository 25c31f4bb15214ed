#!/usr/bin/env bash
# Elastic restarts across two "hosts" (network namespaces A 10.213.0.1 and B
# 10.213.0.2 joined by a veth pair, as two_hosts.sh): an external job,
# hybrid_shard over world 4 in shard groups of 2 with restart.min_world_size 2,
# has ranks 0-1 on A and 2-3 on B, each host's started by an agent loop that
# starts its workers again when they exit with a retryable code. Beside it a
# reference job, the same run uninterrupted on 4 ranks of host A.
#
# After a committed checkpoint host B is removed (its processes killed, its
# link down). The attempt fails, the next one waits restart.elastic_wait_s
# for B's ranks, and the job continues on A's two ranks from the newest
# committed step, with twice the micro-batches per rank and step; its event
# must say what changed.
#
# Then host B comes back (link up, its agent started again) while A's ranks
# wait at a step gate after step 30: B's workers stand by (the shrunk attempt
# has no rank for them), the gate opens, and at the next committed checkpoint
# (step 40) the job grows back to 4 of 4 ranks and finishes there. It must
# SUCCEED on 4 ranks, and its loss at every step must be within 1e-3
# relative of the reference run's.
#
# Skips (77) unless root with `ip netns`; always deletes its namespaces.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
netns_setup el
STEPS=60
open_gate 25  # the elastic job waits before step 26 until host B is gone
start_shardd

cat > "$T/elastic.yaml" <<YAML
name: elastic
model: {preset: tiny}
data: {tokens: data/phrases.u32, seq_len: 32, shuffle: true}
train: {steps: $STEPS, global_batch: 8, micro_batch: 2, lr: 3.0e-3, warmup_steps: 5, seed: 7, log_every: 10}
parallel: {strategy: hybrid_shard, world_size: 4, shard_group_size: 2, comm_timeout_s: 5}
checkpoint: {dir: ckpt, every_steps: 20, keep_last: 3, async: true}
resources: {device: cpu, launcher: external}
restart: {max_restarts: 3, backoff_s: 0.5, heartbeat_timeout_s: 4, hang_timeout_s: 60,
          min_world_size: 2, elastic_wait_s: 8}
YAML
JOB=$(ctl submit "$T/elastic.yaml") || fail "submit failed"
REF=$(ctl submit "$T/elastic.yaml" --set name=reference --set restart.min_world_size=0) || fail "submit of the reference failed"

start_host "$NA" "$IPA" "$JOB" 0 2 a "$GATE"
start_host "$NB" "$IPB" "$JOB" 2 2 b "$GATE"
start_host "$NA" "$IPA" "$REF" 0 4 ref

wait_for 90 committed_at_least 20 && ! state_in "$JOB" FAILED CANCELLED ||
  fail "no committed checkpoint at step 20: $(ctl status "$JOB")"
[ "$(job_field "$JOB" "j.get('attempt')")" = 1 ] || fail "restarted before host B went: $(ctl status "$JOB")"

# Host B goes for good while the job waits at the step gate (step 25, after
# the step-20 commit): every process in it, then its link (B's end: A's
# address, which the coordinator and A's ranks use, stays).
for p in $(ip netns pids "$NB"); do kill -9 "$p" 2>/dev/null || true; done
host_b_empty() { [ -z "$(ip netns pids "$NB")" ]; }
wait_for 10 host_b_empty || fail "host B's processes survived kill -9: $(ip netns pids "$NB")"
ip -n "$NB" link set "$VB" down
open_gate 30  # host A's ranks go on (and find B gone), up to step 30
echo "host B removed at step $(job_field "$JOB" "j.get('progress',{}).get('step',0)")"

# On A's ranks alone: the shrunk attempt runs.
on_two() {
  [ "$(job_field "$JOB" "'%s %s' % (j.get('state'), j.get('attempt_world_size'))")" = "RUNNING 2" ] ||
    state_in "$JOB" SUCCEEDED FAILED CANCELLED
}
wait_for 60 on_two && state_in "$JOB" RUNNING || fail "the job did not continue on host A's ranks: $(ctl status "$JOB")"

# Host B comes back while A's ranks wait at the gate (step 30): its workers
# find no rank in the shrunk attempt and stand by, asking again.
ip -n "$NB" link set "$VB" up
b_reaches_a() { ip netns exec "$NB" timeout 2 bash -c "exec 3<>/dev/tcp/$IPA/$PORT"; }
wait_for 20 b_reaches_a || fail "host B does not reach the coordinator after its link came up"
start_host "$NB" "$IPB" "$JOB" 2 2 b2 "$GATE"
standing_by() { grep -q "rank 2 stands by" "$T/host_b2.log" && grep -q "rank 3 stands by" "$T/host_b2.log"; }
wait_for 30 standing_by || fail "host B's workers did not stand by: $(tail -n 5 "$T/host_b2.log")"
state_in "$JOB" RUNNING || fail "the job left RUNNING before the gate opened: $(ctl status "$JOB")"
open_gate 1000000  # the next commit (step 40) grows the job back

wait_for 90 state_in "$JOB" SUCCEEDED FAILED CANCELLED || fail "the job did not end after host B came back: $(ctl status "$JOB")"
state_in "$JOB" SUCCEEDED || fail "the job did not succeed after growing back: $(ctl status "$JOB")"
[ "$(job_field "$JOB" "j.get('attempt_world_size')")" = 4 ] ||
  fail "the last attempt did not run on 4 ranks: $(ctl status "$JOB" --json)"
ctl watch "$JOB" > "$T/watch.log" 2>&1 || true
grep -q "continuing on 2 of 4 ranks: host $IPB lost (ranks 2, 3 did not join within [0-9]* s); micro-batches per step 1 → 2" \
  "$T/watch.log" || fail "no elastic event naming host B and the micro-batches: $(cat "$T/watch.log")"
grep -q "growing back to 4 of 4 ranks after step 40: 2 worker(s) stand by; micro-batches per step 2 → 1" \
  "$T/watch.log" || fail "no grow-back event at the step-40 commit: $(cat "$T/watch.log")"
grep -E "restarting|elastic|resumed" "$T/watch.log" | sed 's/^/  /'
wait_for 60 state_in "$REF" SUCCEEDED FAILED CANCELLED || fail "the reference job did not end: $(ctl status "$REF")"
state_in "$REF" SUCCEEDED || fail "the reference job did not succeed: $(ctl status "$REF")"

# The loss curves: the elastic job's last word on each step against the reference's.
ctl metrics "$JOB" --json > "$T/elastic.jsonl" || fail "no metrics for $JOB"
ctl metrics "$REF" --json > "$T/reference.jsonl" || fail "no metrics for $REF"
python3 - "$T/elastic.jsonl" "$T/reference.jsonl" "$STEPS" <<'PY' || fail "the loss curve left the reference's by more than 1e-3 relative"
import json, sys
def curve(path):
    out = {}
    for line in open(path):
        r = json.loads(line)
        if r["step"] not in out or r["attempt"] >= out[r["step"]][0]:
            out[r["step"]] = (r["attempt"], r["loss"])
    return {s: l for s, (a, l) in out.items()}
el, ref, steps = curve(sys.argv[1]), curve(sys.argv[2]), int(sys.argv[3])
if sorted(el) != list(range(1, steps + 1)) or sorted(ref) != list(range(1, steps + 1)):
    sys.exit(f"steps missing: elastic {sorted(el)[:3]}..{len(el)}, reference {len(ref)}")
worst = max(abs(el[s] - ref[s]) / abs(ref[s]) for s in ref)
bad = [s for s in ref if abs(el[s] - ref[s]) / abs(ref[s]) >= 1e-3]
print(f"  loss vs the uninterrupted run: worst relative difference {worst:.2e} over {steps} steps")
sys.exit(f"steps {bad} differ" if bad else 0)
PY
echo "PASS: host B lost -> continued on host A's 2 ranks; B back -> grew back to 4 at step 40, succeeded, loss curve within 1e-3 of the reference"
