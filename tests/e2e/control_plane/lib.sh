# Helpers for the control-plane end-to-end tests: real shardd, shardd-worker
# and shardctl binaries on loopback, each test in its own temp dir and port.
set -euo pipefail
BIN=${SHARDD_BIN_DIR:?SHARDD_BIN_DIR must point at the build dir}
SRC=${SHARDD_SOURCE_DIR:?SHARDD_SOURCE_DIR must point at the source dir}
SHARDD=$BIN/coordinator/shardd
CTL_BIN=$BIN/coordinator/ctl/shardctl
export SHARDD_WORKER_BIN=$BIN/worker/shardd-worker
export SHARDD_NUM_THREADS=1

T=$(mktemp -d /tmp/shardd-e2e.XXXXXX)
STATE=$T/state
SHARDD_PID=""
ADDR=""
cleanup() {
  [ -n "$SHARDD_PID" ] && kill -9 "$SHARDD_PID" 2>/dev/null || true
  pkill -9 -f -- "--job e2e-$$" 2>/dev/null || true
  pkill -9 -f -- "shardd-worker --coordinator $ADDR " 2>/dev/null || true
  [ -n "${KEEP:-}" ] && echo "kept $T" || rm -rf "$T"
}
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; [ -f "$T/shardd.log" ] && tail -n 40 "$T/shardd.log" >&2; exit 1; }

# Training data and a tiny job file (names are unique per test run).
make_job() {  # make_job NAME [extra yaml lines...]
  local name=$1; shift
  mkdir -p "$T/data"
  [ -f "$T/data/phrases.u32" ] || python3 "$SRC/configs/data/make_tokens.py" "$T/data/phrases.u32" >/dev/null
  cat > "$T/$name.yaml" <<YAML
name: $name
model: {preset: tiny}
data: {tokens: data/phrases.u32, seq_len: 32, shuffle: true}
train: {steps: 40, global_batch: 8, micro_batch: 4, lr: 3.0e-3, warmup_steps: 5, seed: 7, log_every: 10}
parallel: {strategy: full_shard, world_size: 2, comm_timeout_s: 20}
checkpoint: {dir: ckpt, every_steps: 10, keep_last: 3, async: true}
resources: {device: cpu}
restart: {max_restarts: 3, backoff_s: 0.2, heartbeat_timeout_s: 4, hang_timeout_s: 60}
YAML
  for line in "$@"; do echo "$line" >> "$T/$name.yaml"; done
  echo "$T/$name.yaml"
}

log_size() { [ -f "$T/shardd.log" ] && wc -c < "$T/shardd.log" || echo 0; }

# wait_serving FROM [port]: until the daemon $SHARDD_PID logs "serving on"
# after byte FROM of shardd.log (an earlier instance's line does not count),
# on PORT when given; sets ADDR. Fails at once when the daemon exits first.
wait_serving() {
  local from=$1 port=${2:-0} addr end=$((SECONDS + 120))
  while :; do
    addr=$(tail -c +$((from + 1)) "$T/shardd.log" 2>/dev/null | grep -o 'serving on [0-9.:]*' | tail -n 1 \
      | cut -d' ' -f3 || true)
    if [ -n "$addr" ] && [ "${addr##*:}" != 0 ] && { [ "$port" = 0 ] || [ "${addr##*:}" = "$port" ]; }; then
      ADDR=$addr
      return 0
    fi
    kill -0 "$SHARDD_PID" 2>/dev/null || fail "shardd exited before serving"
    [ $SECONDS -lt $end ] || fail "shardd did not say it serves within 120 s"
    sleep 0.1
  done
}

start_shardd() {  # start_shardd [port [more shardd flags...]]
  local port=${1:-0} from
  shift || true
  from=$(log_size)
  "$SHARDD" --state-dir "$STATE" --listen "127.0.0.1:$port" --http-listen 127.0.0.1:0 --kill-grace-s 2 "$@" \
    >> "$T/shardd.log" 2>&1 &
  SHARDD_PID=$!
  disown "$SHARDD_PID"  # no "Killed" noise when a test or the cleanup kills it
  wait_serving "$from" "$port"
}

ctl() { (cd "$T" && "$CTL_BIN" --coordinator "$ADDR" --state-dir "$STATE" "$@"); }

# open_gate N: with SHARDD_STEP_GATE=$T/gate exported before the workers
# start, they may begin steps up to N (shard/common/fault.h); written atomically.
open_gate() { echo "$1" > "$T/gate.tmp" && mv "$T/gate.tmp" "$T/gate"; }

# prometheus_metrics: the daemon's /metrics page, read with the admin token.
prometheus_metrics() {
  local http
  http=$(grep -o 'metrics on http port [0-9]*' "$T/shardd.log" | tail -n 1 | awk '{print $NF}')
  [ -n "$http" ] || { echo "shardd did not report its HTTP port" >&2; return 1; }
  python3 - "http://127.0.0.1:$http/metrics" "$(cat "$STATE/admin.token")" <<'PY'
import sys, urllib.request
req = urllib.request.Request(sys.argv[1], headers={"Authorization": "Bearer " + sys.argv[2]})
print(urllib.request.urlopen(req, timeout=5).read().decode())
PY
}

job_field() {  # job_field JOB python-expression-on-j
  ctl status "$1" --json | python3 -c "import json,sys; j=json.load(sys.stdin); print($2)"
}

wait_for() {  # wait_for SECONDS COMMAND...: until COMMAND succeeds
  local limit=$1; shift
  local end=$((SECONDS + limit))
  while [ $SECONDS -lt $end ]; do
    if "$@" >/dev/null 2>&1; then return 0; fi
    sleep 0.2
  done
  return 1
}

state_is() { [ "$(job_field "$1" "j.get('state','')")" = "$2" ]; }
step_at_least() { [ "$(job_field "$1" "j.get('progress',{}).get('step',0)")" -ge "$2" ]; }
committed_at_least() { [ "$(job_field "$1" "j.get('progress',{}).get('last_committed_step',-1)")" -ge "$2" ]; }
workers_of() { pgrep -f -- "[s]hardd-worker --coordinator .* --job $1 "; }
no_workers() { ! workers_of "$1" > /dev/null; }
worker_pid() { job_field "$1" "[w.get('pid',0) for w in j.get('workers',[]) if w.get('rank',0)==$2][0]"; }
# kill_rank_and_finish JOB RANK STEP: once JOB reached STEP (a step gate at
# STEP holds it there), SIGKILLs worker RANK, opens the gate and waits for the
# job to end; fails unless it SUCCEEDED in a later attempt. Sets WATCH_OUT
# (what `shardctl watch` printed) and RESUMED (the step the last attempt
# resumed from, 0 if none).
kill_rank_and_finish() {
  local id=$1 rank=$2 at=$3 pid
  wait_for 120 step_at_least "$id" "$at" || fail "never reached step $at"
  pid=$(worker_pid "$id" "$rank")
  echo "kill -9 rank $rank (pid $pid) at step >= $at"
  kill -9 "$pid"
  open_gate 1000000
  WATCH_OUT=$(ctl watch "$id") || fail "watch failed"
  state_is "$id" SUCCEEDED || fail "job did not succeed after the kill: $(ctl status "$id")"
  [ "$(job_field "$id" "j.get('attempt')")" -ge 2 ] || fail "no second attempt"
  RESUMED=$(echo "$WATCH_OUT" | sed -n 's/.*resume from .*step_0*\([0-9][0-9]*\)$/\1/p' | tail -n 1)
  RESUMED=${RESUMED:-0}
}

# dashboard_dom JOB: the job's dashboard page as headless Chromium renders it
# (logged in with a one-time `shardctl dashboard` link, a fresh profile).
# Returns 2 when Chromium is not installed (the caller says it skipped).
dashboard_dom() {
  local chromium http url
  chromium=$(command -v chromium || command -v chromium-browser || true)
  [ -n "$chromium" ] || return 2
  http=$(grep -o 'metrics on http port [0-9]*' "$T/shardd.log" | tail -n 1 | awk '{print $NF}')
  [ -n "$http" ] || return 1
  url=$(ctl dashboard "$1" --url "http://127.0.0.1:$http/") || return 1
  timeout 120 "$chromium" --headless --no-sandbox --disable-gpu --disable-quic --no-first-run \
    --disable-background-networking --disable-component-update --disable-sync --disable-dev-shm-usage \
    --user-data-dir="$(mktemp -d "$T/chromium.XXXXXX")" --virtual-time-budget=6000 --dump-dom "$url" \
    2>>"$T/chromium.log"
}
