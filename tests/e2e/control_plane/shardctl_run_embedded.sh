#!/usr/bin/env bash
# shardctl run with no coordinator running starts one in-process and watches the job to the end.
source "$(dirname "$0")/lib.sh"
job=$(make_job emb)
port=$(python3 -c "import socket; s=socket.socket(); s.bind(('127.0.0.1',0)); print(s.getsockname()[1])")
ADDR=127.0.0.1:$port
out=$(cd "$T" && "$CTL_BIN" --coordinator "$ADDR" --state-dir "$STATE" run "$job" 2>&1) || fail "run failed: $out"
echo "$out" | tail -n 4
echo "$out" | grep -q "started one here" || fail "no embedded coordinator"
echo "$out" | grep -q "dashboard http://127.0.0.1:[0-9]*/login?nonce=[0-9a-f]\{32\}$" || fail "run did not print a dashboard login link"
echo "$out" | grep -q "SUCCEEDED" || fail "job did not succeed"
[ -f "$STATE/admin.token" ] || fail "no admin token"
[ "$(stat -c %a "$STATE/admin.token")" = 600 ] || fail "admin token is not mode 600"
id=$(echo "$out" | grep -o 'submitted [^ ]*' | head -n 1 | cut -d' ' -f2)
[ -n "$id" ] || fail "no job id in: $out"
# The run is over and nothing answers: the read commands work from the state dir.
for cmd in "status $id" "list --all" "metrics $id --last 3" "logs $id --rank 0" "checkpoints $id"; do
  # shellcheck disable=SC2086
  if ! o=$(ctl $cmd 2>"$T/err"); then fail "offline '$cmd' failed: $(cat "$T/err")"; fi
  grep -q "read-only" "$T/err" || fail "offline '$cmd' did not say it is read-only: $(cat "$T/err")"
  [ "$(grep -c . "$T/err")" = 1 ] || fail "offline '$cmd' printed more than one line on stderr: $(cat "$T/err")"
  [ -n "$o" ] || fail "offline '$cmd' printed nothing"
done
ctl status "$id" 2>/dev/null | grep -q SUCCEEDED || fail "offline status does not show SUCCEEDED"
ctl checkpoints "$id" 2>/dev/null | grep -q step_00000040 || fail "offline checkpoints lack step 40"
if ctl cancel "$id" >/dev/null 2>&1; then fail "cancel worked without a coordinator"; fi
echo PASS
