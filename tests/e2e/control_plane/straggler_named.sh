#!/usr/bin/env bash
# A rank slowed to 40% speed while alive is named as a straggler within the
# first window. SHARDD_SLOW_RANK=1:2.5 makes rank 1 sleep 1.5x its compute
# every step; the job (W=3, health.straggler_window 10) is held after step 10
# by SHARDD_STEP_GATE, so the event, `shardctl status` and /metrics must say
# so before any later step runs: paced by the job's steps, not by seconds.
# Then the job runs to the end with that one event (the state never changes)
# and no other rank named. The dashboard's job page (headless Chromium, when
# installed) flags rank 1's row.
source "$(dirname "$0")/lib.sh"
export SHARDD_SLOW_RANK=1:2.5
export SHARDD_STEP_GATE=$T/gate
echo 10 > "$SHARDD_STEP_GATE"
start_shardd 0 --cpu-slots 3  # three CPU ranks on a two-core CI host
job=$(make_job strag "health: {straggler_window: 10}")
id=$(ctl submit "$job" --set parallel.world_size=3 --set train.global_batch=12 --set checkpoint.every_steps=20)

rank1_flagged() { [ "$(job_field "$id" "[w['straggler'] for w in j['workers'] if w['rank'] == 1][0]")" = True ]; }
wait_for 120 rank1_flagged || fail "rank 1 not flagged as a straggler: $(ctl status "$id")"
step=$(job_field "$id" "j['progress']['step']")
[ "$step" -le 10 ] || fail "the job ran past the gate (step $step)"
line=$(grep -m1 "straggler: rank 1 is a straggler: " "$T/shardd.log") || fail "no straggler event for rank 1"
echo "$line"
echo "$line" | grep -q "(steps 1-10)" || fail "the event is not about the first window: $line"
status=$(ctl status "$id")
echo "$status" | grep -E "^  rank 1 .*compute .* s/step STRAGGLER" || fail "status does not flag rank 1: $status"
echo "$status" | grep -E "^  rank [02] .*STRAGGLER" && fail "status flags a healthy rank: $status"
python3 - "$(job_field "$id" "json.dumps(j['workers'])")" <<'PY' || fail "compute per step does not show rank 1 at ~40% speed"
import json, sys
w = {x["rank"]: x for x in json.loads(sys.argv[1])}
slow, fast = w[1]["compute_seconds"], max(w[0]["compute_seconds"], w[2]["compute_seconds"])
print(f"compute per step: rank 1 {slow:.4f} s, ranks 0/2 up to {fast:.4f} s ({slow / fast:.2f}x)")
assert slow > 1.5 * fast, (slow, fast)
PY
metrics=$(prometheus_metrics) || fail "/metrics did not answer"
grep -q "^shardd_worker_straggler{job_id=\"$id\",rank=\"1\"} 1$" <<<"$metrics" || fail "/metrics does not flag rank 1: $metrics"
grep -q "^shardd_worker_straggler{job_id=\"$id\",rank=\"0\"} 0$" <<<"$metrics" || fail "/metrics flags rank 0: $metrics"
# The dashboard's job page flags rank 1's row, and only it.
rc=0
dom=$(dashboard_dom "$id") || rc=$?
if [ $rc = 2 ]; then
  echo "dashboard check skipped: chromium is not installed"
else
  [ $rc = 0 ] || fail "chromium could not render the job page"
  grep -q '<tr class="straggler" data-rank="1">' <<<"$dom" || fail "the job page does not flag rank 1"
  [ "$(grep -o 'class="straggler"' <<<"$dom" | wc -l)" = 1 ] || fail "the job page flags more than rank 1"
fi

echo 1000 > "$SHARDD_STEP_GATE"
out=$(ctl watch "$id") || fail "watch failed: $out"
state_is "$id" SUCCEEDED || fail "job did not succeed: $(ctl status "$id")"
[ "$(echo "$out" | grep -c ": straggler: ")" = 1 ] || fail "not exactly one straggler event: $out"
echo "$out" | grep -q "straggler: rank [02] is\|straggler_cleared" && fail "a healthy rank named, or rank 1 cleared: $out"
echo PASS
