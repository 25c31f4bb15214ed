#!/usr/bin/env bash
# shardctl run with no coordinator running starts one in-process and watches the job to the end.
source "$(dirname "$0")/lib.sh"
job=$(make_job emb)
port=$(python3 -c "import socket; s=socket.socket(); s.bind(('127.0.0.1',0)); print(s.getsockname()[1])")
ADDR=127.0.0.1:$port
out=$(cd "$T" && "$CTL_BIN" --coordinator "$ADDR" --state-dir "$STATE" run "$job" 2>&1) || fail "run failed: $out"
echo "$out" | tail -n 4
echo "$out" | grep -q "started one here" || fail "no embedded coordinator"
echo "$out" | grep -q "SUCCEEDED" || fail "job did not succeed"
[ -f "$STATE/admin.token" ] || fail "no admin token"
[ "$(stat -c %a "$STATE/admin.token")" = 600 ] || fail "admin token is not mode 600"
echo PASS
