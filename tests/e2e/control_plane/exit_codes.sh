#!/usr/bin/env bash
# Exit codes and messages for input no retry can fix (issue 28 item 14):
# shardctl answers OUT_OF_RANGE, UNIMPLEMENTED and FAILED_PRECONDITION to bad
# input with exit 2 (logs --rank 99, an unsupported model_type, "can never run
# on this host"); a malformed --coordinator is a usage error, not an offline
# view; report --out DIR, generate --prompt "" name what is wrong; and a job
# whose data cannot produce a target within seq_len fails at once (the
# worker's "can never run" exit 2), without spending its restarts. Also exit 2:
# a non-loopback --listen/--http-listen without TLS, a path outside
# --allowed-root, `plan /dev/zero` (issue 39 item 12).
source "$(dirname "$0")/lib.sh"
W=$BIN/worker/shardd-worker
expect_rc() {  # expect_rc CODE PATTERN CMD...: exit code CODE, PATTERN in stderr+stdout
  local want=$1 pat=$2; shift 2
  local rc=0
  "$@" >"$T/out" 2>"$T/err" </dev/null || rc=$?
  [ "$rc" = "$want" ] || fail "'$*' exited $rc, expected $want; stderr: $(head -c 400 "$T/err")"
  grep -q -- "$pat" "$T/out" "$T/err" || fail "'$*': no '$pat' in: $(head -c 400 "$T/err") $(head -c 200 "$T/out")"
}

# A malformed --coordinator, even with a state dir to show offline.
mkdir -p "$T/offline" && touch "$T/offline/shardd.db"
expect_rc 2 "port 99999 is outside 1..65535" "$CTL_BIN" --coordinator 127.0.0.1:99999 --state-dir "$T/offline" list
expect_rc 2 "expected HOST:PORT" "$CTL_BIN" --coordinator localhost --state-dir "$T/offline" status j
# An unsupported model_type (UNIMPLEMENTED) is bad input.
mkdir -p "$T/gpt2"
printf '{"model_type": "gpt2", "hidden_size": 64}\n' > "$T/gpt2/config.json"
gpt2=$(make_job gpt2)
sed -i "s#model: {preset: tiny}#model: {from_hf: $T/gpt2}#" "$gpt2"
expect_rc 2 "model_type 'gpt2' is not supported" "$CTL_BIN" plan "$gpt2"
# generate: a given but empty prompt is named.
expect_rc 2 "\-\-prompt is empty" "$CTL_BIN" generate --model "$T/gpt2" --prompt ""

# A non-loopback listen address without TLS is a usage error (issue 39 item 12).
expect_rc 2 "not a loopback address" "$SHARDD" --state-dir "$T/plain-grpc" --listen 0.0.0.0:0 --http-listen ""
expect_rc 2 "not a loopback address" "$SHARDD" --state-dir "$T/plain-http" --listen 127.0.0.1:0 \
  --http-listen 0.0.0.0:0
# A job file that is not a regular file is named, never read.
expect_rc 2 "job file /dev/zero is not a regular file" "$CTL_BIN" plan /dev/zero

# Against a coordinator whose host has one CPU slot, confined to $T.
start_shardd 0 --cpu-slots 1 --allowed-root "$T"
# A path outside the allowed roots is bad input, not a failure.
expect_rc 2 "outside the coordinator's allowed roots" ctl submit "$(make_job roots)" \
  --set "checkpoint.dir=$T/../escape-$$"
job=$(make_job codes)
expect_rc 2 "can never run on this host" ctl submit "$job"
id=$(ctl submit "$job" --set parallel.world_size=1 --set train.global_batch=4) || fail "submit"
expect_rc 0 "SUCCEEDED" ctl watch "$id"
# The same events as JSON, one object a line (issue 39 item 12).
ctl watch "$id" --json > "$T/events.jsonl" || fail "watch --json of a succeeded job exited non-zero"
python3 - "$T/events.jsonl" <<'PY' || fail "watch --json: $(head -c 600 "$T/events.jsonl")"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
keys = {"seq", "job_id", "unix_ms", "time", "attempt", "kind", "state", "message"}
assert rows and all(set(r) == keys for r in rows), rows[:2]
kinds = [r["kind"] for r in rows]
assert kinds[0] == "submitted" and "succeeded" in kinds and "progress" not in kinds, kinds
assert [r["seq"] for r in rows] == sorted(r["seq"] for r in rows), rows
assert all(r["time"].endswith("Z") for r in rows), rows[0]
PY
expect_rc 2 "has ranks 0..0" ctl logs "$id" --rank 99
mkdir -p "$T/reportdir"
expect_rc 2 "\-\-out $T/reportdir is a directory" ctl report "$id" --out "$T/reportdir"

# Data with no target within seq_len: FAILED on its first attempt, no restart spent.
python3 - "$T/data/long.jsonl" <<'PY'
import sys
with open(sys.argv[1], "w") as f:
    for i in range(8):
        f.write('{"prompt": "%s", "response": "ok"}\n' % ("x" * 200))
PY
long=$(make_job longprompt)
python3 - "$long" <<'PY'
import sys
p = sys.argv[1]
s = open(p).read().replace("data: {tokens: data/phrases.u32, seq_len: 32, shuffle: true}",
                           "data: {jsonl: data/long.jsonl, tokenizer: byte, template: plain, seq_len: 32}")
s = s.replace("world_size: 2", "world_size: 1").replace("global_batch: 8, micro_batch: 4", "global_batch: 4, micro_batch: 4")
open(p, "w").write(s)
PY
id2=$(ctl submit "$long") || fail "submit of the long-prompt job"
wait_for 120 state_is "$id2" FAILED || fail "the long-prompt job did not fail: $(ctl status "$id2")"
[ "$(job_field "$id2" "j['restarts']")" = 0 ] || fail "restarts were spent on data that can never train: $(ctl status "$id2")"
job_field "$id2" "j['reason']" | grep -q "no sample has a target token" || fail "reason: $(job_field "$id2" "j['reason']")"
# The same job standalone: the worker's "can never run" exit.
rc=0; (cd "$T" && "$W" --standalone --config "$long" --set checkpoint.dir=ckpt-sa >"$T/sa.out" 2>"$T/sa.err") || rc=$?
[ "$rc" = 2 ] || fail "standalone worker exited $rc on data that can never train: $(tail -3 "$T/sa.err")"
echo PASS
