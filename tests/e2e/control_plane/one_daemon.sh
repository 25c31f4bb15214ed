#!/usr/bin/env bash
# One daemon per port and per state dir (issue 28 item 1), through the real
# binaries: a second shardd on the first's gRPC or HTTP port exits 1 "port
# taken"; a second shardd on its state dir (another port) exits 1 naming the
# first's pid and address; with the first SIGSTOP'd, `shardctl run` starts no
# embedded coordinator on its state dir or its port; the first daemon then
# serves a job, and SIGKILLed while the job's worker runs, it restarts on the
# same ports and state dir (the worker holds neither its lock nor its
# listeners) and adopts the worker; read-only views of the state dir work
# while the daemon holds it.
source "$(dirname "$0")/lib.sh"
free_port() { python3 -c "import socket; s=socket.socket(); s.bind(('127.0.0.1',0)); print(s.getsockname()[1])"; }
port=$(free_port)
http=$(free_port)
serving() {  # how many times the log says a daemon serves on $port and $http
  local n
  n=$(grep -c "serving on 127.0.0.1:$port .*http port $http" "$T/shardd.log" 2>/dev/null) || true
  echo "${n:-0}"
}
start_fixed() {  # the daemon on $port and $http, waiting until it serves
  local before
  before=$(serving)
  "$SHARDD" --state-dir "$STATE" --listen "127.0.0.1:$port" --http-listen "127.0.0.1:$http" --kill-grace-s 2 \
    >> "$T/shardd.log" 2>&1 &
  SHARDD_PID=$!
  disown "$SHARDD_PID"
  ADDR=127.0.0.1:$port
  local end=$((SECONDS + 20))
  while [ "$(serving)" -le "$before" ]; do
    [ $SECONDS -lt $end ] && kill -0 "$SHARDD_PID" 2>/dev/null || fail "shardd did not start"
    sleep 0.1
  done
  grep -q "^pid $SHARDD_PID$" "$STATE/shardd.lock" || fail "lock file lacks the pid: $(cat "$STATE/shardd.lock")"
  grep -q "^address $ADDR$" "$STATE/shardd.lock" || fail "lock file lacks the address: $(cat "$STATE/shardd.lock")"
}
start_fixed

refused() {  # refused WANT_RC PATTERN COMMAND...: exits WANT_RC with one line matching PATTERN
  local want=$1 pat=$2; shift 2
  local out rc=0
  # A daemon that (wrongly) starts serves until the timeout: rc 124.
  out=$(timeout 30 "$@" 2>&1) || rc=$?
  [ "$rc" = "$want" ] || fail "exit $rc (want $want) from: $* -> $out"
  grep -q -- "$pat" <<< "$out" || fail "'$out' does not match '$pat'"
  [ "$(grep -c . <<< "$out")" = 1 ] || fail "more than one line: $out"
  echo "ok: $out"
}

# ---- ports: gRPC, then HTTP (other state dirs) --------------------------------
refused 1 "cannot listen on $ADDR: port taken" \
  "$SHARDD" --state-dir "$T/other" --listen "$ADDR" --http-listen 127.0.0.1:0
refused 1 "cannot listen on 127.0.0.1:$http for HTTP: port taken" \
  "$SHARDD" --state-dir "$T/other" --listen 127.0.0.1:0 --http-listen "127.0.0.1:$http"

# ---- the state dir, on other ports ---------------------------------------------
refused 1 "state dir .* is in use by another coordinator: pid $SHARDD_PID serving $ADDR" \
  "$SHARDD" --state-dir "$STATE" --listen 127.0.0.1:0 --http-listen 127.0.0.1:0

# ---- shardctl run beside a stopped daemon ------------------------------------
job=$(make_job once)
sed -i 's/world_size: 2/world_size: 1/; s/steps: 40,/steps: 100000,/' "$job"  # runs until cancelled
kill -STOP "$SHARDD_PID"
refused 1 "starting a local coordinator: state dir .* is in use by another coordinator: pid $SHARDD_PID serving $ADDR" \
  "$CTL_BIN" --coordinator "$ADDR" --state-dir "$STATE" run "$job"
refused 1 "starting a local coordinator: cannot listen on $ADDR: port taken" \
  "$CTL_BIN" --coordinator "$ADDR" --state-dir "$T/other" run "$job"
kill -CONT "$SHARDD_PID"

# ---- it still serves; SIGKILLed under running workers, it restarts in place ---
id=$(ctl submit "$job")
wait_for 60 step_at_least "$id" 2 || fail "job $id made no progress: $(ctl status "$id")"
worker=$(worker_pid "$id" 0)
kill -0 "$worker" || fail "no worker of $id runs"
kill -9 "$SHARDD_PID"
wait_for 10 bash -c "! kill -0 $SHARDD_PID" || fail "shardd survived SIGKILL"
kill -0 "$worker" || fail "the worker died with the daemon"
start_fixed  # the worker holds neither the lock nor a listener: the same ports and state dir are free
at=$(job_field "$id" "j['progress']['step']")
wait_for 60 step_at_least "$id" $((at + 3)) || fail "no progress reaches the restarted daemon: $(ctl status "$id")"
[ "$(worker_pid "$id" 0)" = "$worker" ] || fail "the worker was not adopted: $(ctl status "$id")"
ctl cancel "$id" > /dev/null
wait_for 30 no_workers "$id" || fail "the cancelled job's worker still runs"

# ---- read-only views while the daemon holds the state dir --------------------
free=$(free_port)
for cmd in "status $id" "list --all" "logs $id --rank 0" "checkpoints $id"; do
  # shellcheck disable=SC2086
  o=$("$CTL_BIN" --coordinator "127.0.0.1:$free" --state-dir "$STATE" $cmd 2>"$T/err") ||
    fail "offline '$cmd' beside the running daemon failed: $(cat "$T/err")"
  grep -q "read-only" "$T/err" || fail "'$cmd' was not the offline view: $(cat "$T/err")"
  [ -n "$o" ] || fail "offline '$cmd' printed nothing"
done
kill -0 "$SHARDD_PID" || fail "the daemon is gone"
echo PASS
