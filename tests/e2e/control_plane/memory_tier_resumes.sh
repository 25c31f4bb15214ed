#!/usr/bin/env bash
# The memory checkpoint tier (checkpoint.memory) under kill -9: disk steps
# every 200 steps (none before the end), memory steps every 5 in tmpfs. The
# workers wait at a step gate (SHARDD_STEP_GATE) after step 32, with memory
# step 30 committed and listed by `shardctl checkpoints` with its tier; rank 1
# is killed there, between memory steps. The new attempt resumes from memory
# step 30 (the event says "resumed from step 30 (memory)"), the job succeeds,
# its export is byte-identical to an uninterrupted run's, and the job's tmpfs
# folder is gone once it has ended.
source "$(dirname "$0")/lib.sh"
[ -d /dev/shm ] && [ -w /dev/shm ] || { echo "SKIP: no writable /dev/shm"; exit 77; }
MEM=""
mem_cleanup() { [ -n "$MEM" ] && rm -rf "$MEM"; cleanup; }
trap mem_cleanup EXIT
export SHARDD_STEP_GATE=$T/gate
open_gate 1000000
start_shardd
tiers="checkpoint: {dir: ckpt, every_steps: 200, keep_last: 3, async: true, memory: {every_steps: 5, keep_last: 2}}"
ref=$(make_job memref "export: {hf_dir: out/ref, dtype: fp32}")
vic=$(make_job memvic "export: {hf_dir: out/vic, dtype: fp32}")
for f in "$ref" "$vic"; do  # make_job's checkpoint: line gives way to the tiers
  grep -v '^checkpoint:' "$f" > "$f.tmp" && echo "$tiers" >> "$f.tmp" && mv "$f.tmp" "$f"
done

id_ref=$(ctl submit "$ref" --set train.steps=60)
ctl watch "$id_ref" > /dev/null || fail "reference run failed"
state_is "$id_ref" SUCCEEDED || fail "reference run did not succeed: $(ctl status "$id_ref")"

open_gate 32  # the victim trains to step 32 and waits before step 33
id=$(ctl submit "$vic" --set train.steps=60)
wait_for 120 committed_at_least "$id" 30 || fail "memory step 30 never committed: $(ctl status "$id")"
wait_for 60 step_at_least "$id" 32 || fail "never reached step 32"
listing=$(ctl checkpoints "$id" --json) || fail "shardctl checkpoints failed"
MEM=$(python3 - "$listing" <<'PY'
import json, os, sys
steps = json.loads(sys.argv[1])["checkpoints"]
mem = [c for c in steps if c["tier"] == "memory" and c["step"] == 30 and c["state"] == "valid"]
assert mem, steps
assert not [c for c in steps if c["tier"] == "disk"], steps  # every_steps 200: no disk step yet
print(os.path.dirname(mem[0]["path"]))
PY
) || fail "memory step 30 is not listed with its tier: $listing"
case "$MEM" in /dev/shm/shardd-"$(id -u)"/memvic-*) ;; *) fail "the memory tier is not in this user's tmpfs root: $MEM" ;; esac
# The tier's folders and shards are this user's alone (0700 / 0600).
for d in "$(dirname "$MEM")" "$MEM" "$MEM/step_00000030"; do
  [ "$(stat -c %a "$d")" = 700 ] || fail "$d is mode $(stat -c %a "$d"), not 700"
done
for f in "$MEM"/step_00000030/*.shard; do
  [ "$(stat -c %a "$f")" = 600 ] || fail "$f is mode $(stat -c %a "$f"), not 600"
done
ctl checkpoints "$id" | grep -E "^30 +valid +memory " > /dev/null || fail "no TIER column: $(ctl checkpoints "$id")"
pid=$(worker_pid "$id" 1)
echo "kill -9 rank 1 (pid $pid) waiting before step 33; memory tier $MEM"
kill -9 "$pid"
attempt_at_least() { [ "$(job_field "$1" "j.get('attempt', 1)")" -ge "$2" ]; }
wait_for 60 attempt_at_least "$id" 2 || fail "no second attempt after the kill: $(ctl status "$id")"
open_gate 1000000
out=$(ctl watch "$id") || fail "watch failed: $out"
state_is "$id" SUCCEEDED || fail "job did not succeed after the kill: $(ctl status "$id")"
grep -q "resumed from step 30 (memory): $MEM/step_00000030 at step 30 of 60" <<< "$out" ||
  fail "attempt 2 did not resume from memory step 30: $(grep -E 'resum' <<< "$out")"
cmp "$T/out/ref/model.safetensors" "$T/out/vic/model.safetensors" ||
  fail "final weights differ from the uninterrupted run"
wait_for 30 test ! -e "$MEM" || fail "the ended job's memory tier $MEM is still there: $(ls -R "$MEM")"
echo "PASS: kill -9 at step 32 resumed from memory step 30, export identical, tmpfs folder removed"
