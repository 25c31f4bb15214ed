#!/usr/bin/env bash
# shardctl, shardd and shardd-worker follow one set of command-line
# conventions (docs/cli.md): the exit-code table row by row (usage errors 2,
# never CLI11's 105/106/109; --help/--version 0; a failed job 1 for run and
# watch alike), an unknown command with the nearest suggested, errors as JSON
# under --json, one JSON shape per object (numbers as numbers, zero values
# present, checkpoints JOB and DIR alike), SHARDD_* variables read by all
# three, torchrun's variables in the worker, --log-level debug and
# --log-format json, logs --tail and --all-ranks, render's renamed flags.
source "$(dirname "$0")/lib.sh"
W=$BIN/worker/shardd-worker
run_rc() {  # run_rc CMD...: runs it, output in $T/out and $T/err, prints the exit code
  local rc=0
  "$@" >"$T/out" 2>"$T/err" </dev/null || rc=$?
  echo "$rc"
}
expect_rc() {  # expect_rc CODE CMD...
  local want=$1; shift
  local got; got=$(run_rc "$@")
  [ "$got" = "$want" ] || fail "'$*' exited $got, expected $want; stderr: $(head -c 400 "$T/err"); stdout: $(head -c 400 "$T/out")"
}

# --version on all three.
for b in "$CTL_BIN" "$SHARDD" "$W"; do
  expect_rc 0 "$b" --version
  grep -Eq "^$(basename "$b") [0-9]+\.[0-9]+" "$T/out" || fail "$b --version printed: $(cat "$T/out")"
done
# Usage errors exit 2 (CLI11: 106 required, 105 validation, 109 extras).
expect_rc 0 "$CTL_BIN" --help
expect_rc 2 "$CTL_BIN"
expect_rc 2 "$CTL_BIN" status
expect_rc 2 "$CTL_BIN" plan /no/such/job.yaml
expect_rc 2 "$CTL_BIN" metrics j --last ten
expect_rc 2 "$CTL_BIN" list --bogus
expect_rc 2 "$CTL_BIN" --log-level loud list
expect_rc 2 "$SHARDD" --listen
expect_rc 2 "$SHARDD" --log-format xml
expect_rc 2 "$W" --bogus
expect_rc 2 "$W"  # neither coordinator mode nor --standalone
# An unknown command names the nearest one.
expect_rc 2 "$CTL_BIN" stauts j
grep -q "unknown command 'stauts' (did you mean 'status'?)" "$T/err" || fail "no suggestion: $(cat "$T/err")"
expect_rc 2 "$CTL_BIN" --coordinator 127.0.0.1:1 checkpoint j
grep -q "did you mean 'checkpoints'" "$T/err" || fail "no suggestion for checkpoint: $(cat "$T/err")"
# Errors as JSON under --json (stdout, one object), with the exit code.
expect_rc 2 "$CTL_BIN" stauts --json
python3 -c "import json,sys; e=json.load(open(sys.argv[1]))['error']; assert e['exit_code']==2 and 'stauts' in e['message'], e" \
  "$T/out" || fail "usage error under --json: $(cat "$T/out")"
expect_rc 1 "$CTL_BIN" --coordinator 127.0.0.1:1 --state-dir "$T/none" status j --json
python3 -c "import json,sys; e=json.load(open(sys.argv[1]))['error']; assert e['code']=='UNAVAILABLE' and e['exit_code']==1, e" \
  "$T/out" || fail "an unavailable coordinator under --json: $(cat "$T/out")"
# plan --json of a job that does not fit: stdout is the plan, one document (the
# verdict inside it), the reason on stderr, exit 1.
expect_rc 1 "$CTL_BIN" plan "$SRC/configs/jobs/llama2-70b-sft-4xrtx4090.yaml" --cluster 4xRTX4090 --json
python3 -c "import json,sys; p=json.load(open(sys.argv[1])); assert p['verdict']=='does not fit', p['verdict']" \
  "$T/out" || fail "plan --json of a job that does not fit is not one document: $(tail -c 400 "$T/out")"
grep -q "does not fit: per-GPU peak" "$T/err" || fail "plan --json: no reason on stderr: $(cat "$T/err")"
# render's flags that mean something else than the global ones are renamed.
job=$(make_job cli)
expect_rc 2 "$CTL_BIN" render k8s "$job" --coordinator x:1
grep -q -- "--pod-coordinator" "$T/err" || fail "render --coordinator does not name --pod-coordinator: $(cat "$T/err")"
expect_rc 2 "$CTL_BIN" render k8s "$job" --state-dir /x
grep -q -- "--pod-state-dir" "$T/err" || fail "render --state-dir does not name --pod-state-dir: $(cat "$T/err")"
expect_rc 0 "$CTL_BIN" render k8s "$job" --set resources.kubernetes.image=img --set resources.kubernetes.pvc=claim \
  --pod-coordinator shardd.ns:7070 --pod-state-dir /data/st
grep -q "shardd.ns:7070" "$T/out" || fail "render --pod-coordinator not used"

# shardd from SHARDD_* variables alone, logging debug lines as JSON.
port=$(python3 -c "import socket; s=socket.socket(); s.bind(('127.0.0.1',0)); print(s.getsockname()[1])")
from=$(log_size)
SHARDD_STATE_DIR=$STATE SHARDD_LISTEN=127.0.0.1:$port SHARDD_HTTP_LISTEN=127.0.0.1:0 SHARDD_KILL_GRACE_S=2 \
  SHARDD_LOG_LEVEL=debug SHARDD_LOG_FORMAT=json "$SHARDD" >>"$T/shardd.log" 2>&1 &
SHARDD_PID=$!
disown "$SHARDD_PID"
wait_serving "$from" "$port"
# shardctl from variables alone (no --coordinator/--state-dir).
id=$(cd "$T" && SHARDD_COORDINATOR=$ADDR SHARDD_STATE_DIR=$STATE "$CTL_BIN" submit "$job") || fail "submit via SHARDD_*"
expect_rc 0 ctl watch "$id"
grep -q "SUCCEEDED" "$T/out" || fail "watch did not end SUCCEEDED"
for what in launching rendezvous commit; do
  grep "^{" "$T/shardd.log" | grep "\"level\":\"debug\".*$what" >/dev/null || fail "no debug line about $what in shardd's JSON log"
done
python3 - "$T/shardd.log" <<'PY' || fail "shardd's --log-format json lines do not parse"
import json, sys
lines = [l for l in open(sys.argv[1]) if l.startswith("{")]
assert len(lines) > 5, len(lines)
for l in lines:
    j = json.loads(l)
    assert {"time", "level", "msg"} <= set(j), j
PY
# JSON shapes: status, list, checkpoints JOB and DIR.
ctl status "$id" --json > "$T/status.json"
ctl list --all --json > "$T/list.json"
ctl checkpoints "$id" --json > "$T/ck_job.json"
ctl checkpoints "$T/ckpt/cli" --json > "$T/ck_dir.json"
python3 - "$T" <<'PY' || fail "JSON shapes"
import json, sys
t = sys.argv[1]
s = json.load(open(f"{t}/status.json"))
assert isinstance(s["created_unix_ms"], int) and isinstance(s["progress"]["tokens_total"], int), s
assert s["restarts"] == 0 and s["progress"]["preemptions"] == 0 and s["reason"] is not None, s  # zero values present
assert s["progress"]["step"] == 40 and s["state"] == "SUCCEEDED", s
l = json.load(open(f"{t}/list.json"))
assert set(l["jobs"][0]) == set(s), (set(l["jobs"][0]) ^ set(s))
cj, cd = json.load(open(f"{t}/ck_job.json"))["checkpoints"], json.load(open(f"{t}/ck_dir.json"))["checkpoints"]
assert cj and cd and set(cj[0]) == set(cd[0]), (cj, cd)
assert [c["step"] for c in cj] == [c["step"] for c in cd], (cj, cd)
for a, b in zip(cj, cd):
    assert a["state"] == b["state"] == "valid" and a["world"] == b["world"] == 2 and a["files"] == b["files"], (a, b)
    assert isinstance(a["bytes"], int) and isinstance(b["bytes"], int)
PY
expect_rc 2 ctl status no-such-job --json
python3 -c "import json,sys; e=json.load(open(sys.argv[1]))['error']; assert e['code']=='NOT_FOUND', e" "$T/out" \
  || fail "status of an unknown job under --json: $(cat "$T/out")"
# logs --tail N and --all-ranks.
expect_rc 0 ctl logs "$id" --rank 1 --tail 3
[ "$(wc -l < "$T/out")" = 3 ] || fail "logs --tail 3 printed $(wc -l < "$T/out") lines"
expect_rc 0 ctl logs "$id" --all-ranks
grep -q '^\[rank 0\]' "$T/out" && grep -q '^\[rank 1\]' "$T/out" || fail "logs --all-ranks lacks a rank"
python3 - "$T/out" <<'PY' || fail "logs --all-ranks is not in time order"
import re, sys
# The workers inherited shardd's SHARDD_LOG_FORMAT=json: {"time":"2026-12-01T17:32:11.123Z",...}
times = [m.group(1) for m in (re.match(r'\[rank \d\] \{"time":"([0-9T:.-]{23})', l) for l in open(sys.argv[1])) if m]
assert len(times) > 4 and times == sorted(times), times[:10]
PY
expect_rc 2 ctl logs "$id" --all-ranks --follow
# watch exits like run: a cancelled job is a non-zero exit.
id2=$(ctl submit "$job" --set train.steps=100000)
ctl cancel "$id2" >/dev/null
expect_rc 1 ctl watch "$id2"
grep -q "CANCELLED" "$T/err" || fail "watch of a cancelled job: $(cat "$T/err")"

# The worker: torchrun's variables (standalone, one rank), and MASTER_ADDR without a store refused.
(cd "$T" && RANK=0 WORLD_SIZE=1 LOCAL_RANK=0 SHARDD_LOG_FORMAT=json "$W" --standalone --config "$job" \
  --set train.steps=2 --set parallel.world_size=1 --set checkpoint.dir=ckpt-tr >"$T/w.out" 2>"$T/w.err") || fail "worker under torchrun variables: $(tail -3 "$T/w.err")"
grep -q '"rank":0' "$T/w.err" || fail "worker JSON log lacks the rank: $(head -3 "$T/w.err")"
expect_rc 2 env RANK=1 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=29500 "$W" --standalone --config "$job"
grep -q "MASTER_ADDR/MASTER_PORT" "$T/err" || fail "MASTER_ADDR in standalone: $(cat "$T/err")"
expect_rc 2 env RANK=2 WORLD_SIZE=2 "$W" --standalone --config "$job"
grep -q "WORLD_SIZE=2" "$T/err" || fail "RANK >= WORLD_SIZE: $(cat "$T/err")"
echo PASS
