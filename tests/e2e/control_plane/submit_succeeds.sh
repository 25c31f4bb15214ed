#!/usr/bin/env bash
# submit → train → succeed; the coordinator commits the checkpoints.
source "$(dirname "$0")/lib.sh"
start_shardd
job=$(make_job ok)
id=$(ctl submit "$job")
[ -n "$id" ] || fail "no job id"
out=$(ctl watch "$id") || fail "watch failed: $out"
echo "$out" | tail -n 3
state_is "$id" SUCCEEDED || fail "job did not succeed: $(ctl status "$id")"
echo "$out" | grep -q "checkpoint_committed" || fail "no checkpoint_committed event"
[ -f "$T/ckpt/ok/step_00000040/COMMITTED" ] || fail "final step not committed"
ctl checkpoints "$id" | grep -q "step_00000040" || fail "checkpoints JOB does not list step 40"
ctl logs "$id" --rank 1 | grep -q "/a1/r1\]" || fail "no rank 1 log"
ctl list --all | grep -q "$id" || fail "list --all does not show the job"
http=$(grep -o 'metrics on http port [0-9]*' "$T/shardd.log" | tail -n 1 | awk '{print $NF}')
[ -n "$http" ] || fail "shardd did not report its HTTP port"
# fetch URL [TOKEN]: the body, or "HTTP <code>" for an error status.
fetch() {
  python3 - "$@" <<'PY'
import sys, urllib.error, urllib.request
req = urllib.request.Request(sys.argv[1])
if len(sys.argv) > 2: req.add_header("Authorization", "Bearer " + sys.argv[2])
try: print(urllib.request.urlopen(req, timeout=5).read().decode())
except urllib.error.HTTPError as e: print(f"HTTP {e.code}")
PY
}
[ "$(fetch "http://127.0.0.1:$http/healthz")" = ok ] || fail "/healthz is not ok"
# /metrics holds job names and figures: the admin token, also from loopback
# (deploy/monitoring/prometheus.yml sends it with credentials_file).
[ "$(fetch "http://127.0.0.1:$http/metrics")" = "HTTP 401" ] || fail "/metrics answered without the token"
metrics=$(fetch "http://127.0.0.1:$http/metrics" "$(cat "$STATE/admin.token")")
grep -q "shardd_jobs{state=\"SUCCEEDED\"} 1" <<<"$metrics" || fail "/metrics lacks the succeeded job: $metrics"
grep -q "shardd_job_step{job_id=\"$id\"} 40" <<<"$metrics" || fail "/metrics lacks the job's step: $metrics"
grep -q "shardd_job_state{job_id=\"$id\",state=\"SUCCEEDED\"} 1" <<<"$metrics" || fail "/metrics lacks the job's state: $metrics"
grep -q "shardd_checkpoints_committed_total{job_id=\"$id\"} [1-9]" <<<"$metrics" || fail "/metrics counts no commits: $metrics"
grep -q "shardd_job_step_seconds_count{job_id=\"$id\"} [1-9]" <<<"$metrics" || fail "/metrics has no step-time histogram: $metrics"
grep -q "^shardd_build_info{version=" <<<"$metrics" || fail "/metrics lacks shardd_build_info: $metrics"
# Every series the Grafana dashboard queries is a family /metrics declares.
for name in $(grep -o 'shardd_[a-z_]*' "$SRC/deploy/monitoring/grafana-dashboard.json" | sort -u); do
  family=$(echo "$name" | sed -E 's/_(bucket|sum|count)$//')
  grep -q "^# TYPE $family " <<<"$metrics" || fail "the Grafana dashboard queries $name, which /metrics lacks"
done
echo PASS
