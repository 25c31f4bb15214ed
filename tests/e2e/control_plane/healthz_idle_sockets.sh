#!/usr/bin/env bash
# A slow client never locks out a health probe (issue 39, item 10): with 24
# idle connections held from the probe's own address (127.0.0.1), and then
# with 640 half-sent requests from 40 addresses across 127/8 (127.0.1.1-40, 16
# each: all of loopback is one peer), /healthz and the dashboard page still
# answer (curl --max-time 2: a bound on a probe, not a timing). Before the fix
# the 17th connection of 127.0.0.1 got a 503, and 640 sockets from distinct
# loopback addresses held every thread while the probe waited.
source "$(dirname "$0")/lib.sh"
start_shardd
http=$(grep -o 'metrics on http port [0-9]*' "$T/shardd.log" | tail -n 1 | awk '{print $NF}')
[ -n "$http" ] || fail "shardd did not report its HTTP port"
base="http://127.0.0.1:$http"
token=$(cat "$STATE/admin.token")

HOLDER_PID=""
hold() {  # hold NAME [--partial] SRC:N...: idle connections, held until release
  local name=$1; shift
  rm -f "$T/$name.ready"
  mkfifo "$T/$name.fifo"
  python3 "$SRC/tests/e2e/control_plane/idle_sockets.py" "$http" "$T/$name.ready" "$@" < "$T/$name.fifo" \
    > "$T/$name.log" 2>&1 &
  HOLDER_PID=$!
  exec 9> "$T/$name.fifo"  # the holder reads its stdin until this closes
  wait_for 60 test -f "$T/$name.ready" || fail "the idle connections ($name) were not made: $(cat "$T/$name.log")"
}
release() { exec 9>&-; wait "$HOLDER_PID" || true; HOLDER_PID=""; }
probe() {  # probe WHAT: /healthz answers ok and the dashboard page 200, each within curl's 2 s
  local body code
  body=$(curl -sS --max-time 2 "$base/healthz") || fail "/healthz did not answer within 2 s $1"
  [ "$body" = ok ] || fail "/healthz answered '$body' $1"
  code=$(curl -sS --max-time 2 -o /dev/null -w '%{http_code}' -H "Authorization: Bearer $token" "$base/") ||
    fail "the dashboard did not answer within 2 s $1"
  [ "$code" = 200 ] || fail "the dashboard answered HTTP $code $1"
}

hold own 127.0.0.1:24
[ "$(cat "$T/own.ready")" = 24 ] || fail "expected 24 idle connections"
probe "with 24 idle connections from 127.0.0.1"
release

specs=()
for i in $(seq 1 40); do specs+=("127.0.1.$i:16"); done
hold wide --partial "${specs[@]}"
[ "$(cat "$T/wide.ready")" = 640 ] || fail "expected 640 connections"
probe "with 640 half-sent requests from 127.0.1.1-40"
probe "again, with the 640 still held"
release
kill -0 "$SHARDD_PID" || fail "shardd died"
echo "PASS: /healthz and the dashboard answered behind 24 idle sockets from 127.0.0.1 and 640 from 127.0.1.1-40"
