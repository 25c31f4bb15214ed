#!/usr/bin/env bash
# Issue 18 items 1, 3, 4, 5 and 10 through the real binaries:
#  1  a committed step whose manifest lists one shard file twice is invalid for
#     every reader (checkpoints, export, eval) and resume falls back past it;
#  3  the resumed step is an event; a job already at train.steps says so; a
#     job of another run in the same checkpoint directory is refused, naming
#     the differing key;
#  4  prepare-data never overwrites its input;
#  5  a config.json with 10,000,000 layers is a clear error from plan and
#     submit (not bad_alloc, not an empty UNIMPLEMENTED);
# 10  a state database with garbage in its middle is refused at start,
#     pointing to the backup.
source "$(dirname "$0")/lib.sh"
start_shardd
expect_error() {  # expect_error PATTERN COMMAND...
  local pat=$1; shift
  local out
  if out=$("$@" 2>&1); then fail "succeeded but should not: $*"; fi
  grep -q -- "$pat" <<< "$out" || fail "error '$out' does not match '$pat'"
  echo "ok: $(echo "$out" | tail -n 1)"
}
job=$(make_job hard)
sed -i 's/steps: 40/steps: 20/; s/world_size: 2/world_size: 1/' "$job"

# ---- 1: a manifest that lists one shard twice --------------------------------
id=$(ctl submit "$job")
ctl watch "$id" > /dev/null
state_is "$id" SUCCEEDED || fail "first job did not succeed: $(ctl status "$id")"
s20=$T/ckpt/hard/step_00000020
python3 - "$s20/COMMITTED" <<'PY'
import json, sys
m = json.load(open(sys.argv[1]))
m["world"] = m["shard_count"] = 2
m["files"] = [m["files"][0], dict(m["files"][0], shard_rank=1)]
json.dump(m, open(sys.argv[1], "w"), indent=2)
PY
grep "^20 " <<< "$(ctl checkpoints "$T/ckpt/hard")" | grep -q "invalid.*twice" ||
  fail "checkpoints DIR calls the step valid: $(ctl checkpoints "$T/ckpt/hard")"
grep "step_00000020" <<< "$(ctl checkpoints "$id")" | grep -q "invalid" || fail "checkpoints JOB calls the step valid"
expect_error "twice" ctl export "$s20" --out "$T/export20"
expect_error "twice" ctl eval --model "$s20" --tokens "$T/data/phrases.u32" --seq-len 32
# Resume falls back to step 10 and says so (an event that watch prints).
id2=$(ctl submit "$job" --set train.steps=30)
out=$(ctl watch "$id2") || fail "watch failed: $out"
state_is "$id2" SUCCEEDED || fail "the job did not fall back past the bad step: $(ctl status "$id2")"
grep -q "resumed from .*step_00000010 at step 10 of 30" <<< "$out" || fail "no resumed event: $out"

# ---- 3: already complete, and another run --------------------------------------
id3=$(ctl submit "$job" --set train.steps=30)
ctl watch "$id3" > "$T/watch3.out" || true
state_is "$id3" SUCCEEDED || fail "already-complete job: $(ctl status "$id3")"
grep -q "already complete" <<< "$(ctl status "$id3")" || fail "not said as already complete: $(ctl status "$id3")"
grep -q "final loss" <<< "$(ctl status "$id3")" && fail "an untrained job reported a final loss: $(ctl status "$id3")"
id4=$(ctl submit "$job" --set train.steps=40 --set train.lr=1.0e-3)
ctl watch "$id4" > "$T/watch4.out" || true
state_is "$id4" FAILED || fail "another run's checkpoints were resumed: $(ctl status "$id4")"
# The coordinator chooses the step at launch (issue 40 item 2): refused there,
# in the job's reason, before any worker starts.
grep -q "another run.*train.lr 0.003 -> 0.001" <<< "$(ctl status "$id4")" ||
  fail "the refusal does not name train.lr: $(ctl status "$id4")"
[ -d "$T/ckpt/hard/step_00000030" ] || fail "the other run's step 30 is gone"

# ---- 4: prepare-data never overwrites its input ----------------------------------
printf '%s\n' '{"prompt":"1+1=","response":"2"}' '{"prompt":"abc","response":"cba"}' > "$T/p.json"
before=$(sha256sum < "$T/p.json")
expect_error "would overwrite the input" ctl prepare-data --input "$T/p.json" --out "$T/p" --tokenizer byte --template plain --seq-len 64
[ "$(sha256sum < "$T/p.json")" = "$before" ] || fail "prepare-data changed its input"

# ---- 5: a config that would exhaust memory ----------------------------------------
mkdir -p "$T/huge"
echo '{"vocab_size":256,"hidden_size":64,"intermediate_size":128,"num_hidden_layers":10000000,"num_attention_heads":4}' \
  > "$T/huge/config.json"
huge=$(make_job huge)
sed -i 's#model: {preset: tiny}#model: {from_hf: huge}#' "$huge"
expect_error "num_hidden_layers 10000000 is too large" ctl plan "$huge"
expect_error "num_hidden_layers 10000000 is too large" ctl submit "$huge"
expect_error "num_hidden_layers 10000000 is too large" ctl eval --model "$T/huge" --tokens "$T/data/phrases.u32" --seq-len 32

# ---- 10: a corrupt state database is refused ----------------------------------------
stop_shardd() {
  kill "$SHARDD_PID"
  wait_for 20 bash -c "! kill -0 $SHARDD_PID" || fail "shardd did not stop"
  SHARDD_PID=""
}
stop_shardd
start_shardd  # a good start: the backup now holds every job so far
stop_shardd
[ -f "$STATE/shardd.db.bak" ] || fail "no backup was kept"
python3 - "$STATE/shardd.db" <<'PY'
import sys
p = sys.argv[1]; b = bytearray(open(p, "rb").read()); page = 4096
mid = (len(b) // page // 2) * page
b[mid:mid + page] = bytes((i * 131 + 7) & 0xff for i in range(page))
open(p, "wb").write(bytes(b))
PY
if timeout 20 "$SHARDD" --state-dir "$STATE" --listen 127.0.0.1:0 --http-listen 127.0.0.1:0 > "$T/corrupt.log" 2>&1; then
  fail "shardd served a corrupt database"
fi
grep -q "shardd.db is corrupt" "$T/corrupt.log" || fail "unclear corrupt-store error: $(cat "$T/corrupt.log")"
grep -q "shardd.db.bak" "$T/corrupt.log" || fail "the error does not point to the backup: $(cat "$T/corrupt.log")"
echo "ok: $(grep "is corrupt" "$T/corrupt.log")"
cp "$STATE/shardd.db.bak" "$STATE/shardd.db"
rm -f "$STATE/shardd.db-wal" "$STATE/shardd.db-shm"
start_shardd
grep -q "$id" <<< "$(ctl list --all)" || fail "the restored backup lacks job $id"
echo PASS
