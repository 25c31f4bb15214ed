#!/usr/bin/env bash
# The local scheduler end to end (docs/scheduling.md): with --cpu-slots 2,
# three CPU jobs that need 2 slots each run one at a time, in priority order
# (higher first), with no overlap of their workers' lifetimes. The
# coordinator is killed mid-queue and restarted: the running (adopted) job
# keeps its slots, the queue keeps its order, and the others follow. The
# workers wait at a step gate (SHARDD_STEP_GATE) before step 21 until the
# coordinator is back, so a is still running when it is killed whatever the
# machine's speed, and no job trains longer than the test needs.
source "$(dirname "$0")/lib.sh"
export SHARDD_STEP_GATE=$T/gate
open_gate 20
start_shardd 0 --cpu-slots 2

# A sampler: every 0.1 s, which job's workers exist (ps), as "ms job" lines.
sample() {
  set +e +o pipefail  # an empty sample (no workers) is not an error
  while :; do
    now=$(date +%s%3N)
    ps -ww -eo args= | grep -o -- "shardd-worker --coordinator [^ ]* --job q[abc]-$$-[0-9]*" | awk -v t="$now" '{print t, $5}' | sort -u
    sleep 0.1
  done >> "$T/samples" 2>/dev/null
}
sample &
SAMPLER=$!
trap 'kill "$SAMPLER" 2>/dev/null || true; cleanup' EXIT

a=$(ctl submit "$(make_job qa-$$ 'priority: 0')" --set train.steps=60) || fail "submit a"
wait_for 120 state_is "$a" RUNNING || fail "a never ran: $(ctl status "$a")"
b=$(ctl submit "$(make_job qb-$$ 'priority: 1')" --set train.steps=30) || fail "submit b"
c=$(ctl submit "$(make_job qc-$$ 'priority: 5')" --set train.steps=30) || fail "submit c"
wait_for 20 eval '[ "$(job_field "$b" "j.get(\"queue_position\",0)")" = 2 ]' || fail "b is not second in the queue"
state_is "$c" QUEUED || fail "c is not QUEUED: $(ctl status "$c")"
ctl status "$c" | sed -n 2p | tee "$T/queued_line"
grep -q "QUEUED: waiting for 2 CPU slots: 0-1 held by job $a" "$T/queued_line" || fail "queued reason: $(cat "$T/queued_line")"
ctl status "$c" | grep -q "queue      position 1, priority 5, needs 2 CPU slots" || fail "c's queue line: $(ctl status "$c")"
ctl queue | tee "$T/queue_before"
grep -Eq "^- +$a +RUNNING" "$T/queue_before" || fail "queue lacks the running job"
grep -Eq "^1 +$c +QUEUED +5 " "$T/queue_before" || fail "queue: c is not first"
place_a=$(job_field "$a" "j.get('placement','')")
[ "$place_a" != "" ] || fail "a has no placement"
ctl list | grep -q "$c .*QUEUED .*waiting for 2 CPU slots" || fail "list lacks c's reason: $(ctl list)"

# Kill the coordinator mid-queue (a running, b and c waiting) and start it again.
port=${ADDR##*:}
kill -9 "$SHARDD_PID"
echo "coordinator killed with $a running; restarting on port $port"
sleep 1
start_shardd "$port" --cpu-slots 2
[ "$(job_field "$a" "j.get('placement','')")" = "$place_a" ] || fail "a's placement changed: $(ctl status "$a")"
wait_for 10 eval '[ "$(job_field "$c" "j.get(\"queue_position\",0)")" = 1 ]' || fail "c lost its place: $(ctl queue)"
[ "$(job_field "$b" "j.get('queue_position',0)")" = 2 ] || fail "b lost its place: $(ctl queue)"
ctl queue | tee "$T/queue_after"
open_gate 1000000

for id in "$a" "$c" "$b"; do
  wait_for 240 state_is "$id" SUCCEEDED || fail "$id did not succeed: $(ctl status "$id")"
done
wait_for 20 no_workers "$b" || fail "b's workers outlive it"
sleep 0.3
kill "$SAMPLER" 2>/dev/null || true

# The timeline: first and last sample per job; in start order a, c, b; no overlap.
python3 - "$T/samples" "$a" "$c" "$b" <<'PY' || fail "timeline"
import sys
samples, order = sys.argv[1], sys.argv[2:]
span = {}
for line in open(samples):
    t, job = line.split()
    t = int(t)
    lo, hi = span.get(job, (t, t))
    span[job] = (min(lo, t), max(hi, t))
missing = [j for j in order if j not in span]
assert not missing, f"never saw workers of {missing}"
t0 = min(lo for lo, _ in span.values())
for j in order:
    print(f"timeline {j:<16} start {(span[j][0]-t0)/1000:7.1f} s  end {(span[j][1]-t0)/1000:7.1f} s")
starts = sorted(order, key=lambda j: span[j][0])
assert starts == order, f"start order {starts}, want {order}"
for x, y in zip(order, order[1:]):
    assert span[x][1] < span[y][0], f"{x} (ends {span[x][1]}) overlaps {y} (starts {span[y][0]})"
PY
echo PASS
