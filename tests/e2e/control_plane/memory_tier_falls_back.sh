#!/usr/bin/env bash
# Issue 39 items 4 and 6 through the real binaries: the memory tier's newest
# step damaged (one flipped byte in a shard of committed memory step 30, while
# the workers wait at a step gate after step 32), then rank 1 killed. The
# restart skips step 30 with a `resume_skipped` event naming the step, its
# tier and the checksum, and resumes from memory step 25 (no disk step exists:
# never from step 0). The job's tmpfs folder carries its id; once the job has
# ended it is removed and recorded, and a restarted shardd leaves a new file
# placed at that path alone.
source "$(dirname "$0")/lib.sh"
[ -d /dev/shm ] && [ -w /dev/shm ] || { echo "SKIP: no writable /dev/shm"; exit 77; }
MEM=""
mem_cleanup() { [ -n "$MEM" ] && rm -rf "$MEM"; cleanup; }
trap mem_cleanup EXIT
export SHARDD_STEP_GATE=$T/gate
start_shardd
tiers="checkpoint: {dir: ckpt, every_steps: 200, keep_last: 3, memory: {every_steps: 5, keep_last: 2}}"
vic=$(make_job memfb)
grep -v '^checkpoint:' "$vic" > "$vic.tmp" && echo "$tiers" >> "$vic.tmp" && mv "$vic.tmp" "$vic"

open_gate 32  # trains to step 32 and waits before step 33
id=$(ctl submit "$vic" --set train.steps=40)
wait_for 120 committed_at_least "$id" 30 || fail "memory step 30 never committed: $(ctl status "$id")"
wait_for 60 step_at_least "$id" 32 || fail "never reached step 32"
MEM=$(ctl checkpoints "$id" --json | python3 -c '
import json, os, sys
c = [c for c in json.load(sys.stdin)["checkpoints"] if c["tier"] == "memory" and c["step"] == 30]
print(os.path.dirname(c[0]["path"]) if c else "")') || fail "no listing"
[ -n "$MEM" ] || fail "memory step 30 not listed: $(ctl checkpoints "$id")"
case "$(basename "$MEM")" in "$id"-*) ;; *) fail "the memory folder $MEM does not carry the job id $id" ;; esac
shard="$MEM/step_00000030/rank_00001-of-00002.shard"
[ -f "$shard" ] || fail "no $shard: $(ls -R "$MEM")"
python3 - "$shard" <<'PY'
import sys
p = sys.argv[1]
b = bytearray(open(p, "rb").read())
b[-3] ^= 0x10
open(p, "wb").write(bytes(b))
PY
pid=$(worker_pid "$id" 1)
echo "flipped a byte of $shard; kill -9 rank 1 (pid $pid)"
kill -9 "$pid"
attempt_at_least() { [ "$(job_field "$1" "j.get('attempt', 1)")" -ge "$2" ]; }
wait_for 60 attempt_at_least "$id" 2 || fail "no second attempt after the kill: $(ctl status "$id")"
open_gate 1000000
out=$(ctl watch "$id") || fail "watch failed: $out"
state_is "$id" SUCCEEDED || fail "job did not succeed after the kill: $(ctl status "$id")"
grep -q "skipping step 30 (memory): .*rank_00001-of-00002.shard fails its checksum" <<< "$out" ||
  fail "no skip event for the damaged step 30: $(grep -E 'resum|skipp' <<< "$out")"
grep -q "resumed from step 25 (memory): $MEM/step_00000025" <<< "$out" ||
  fail "attempt 2 did not resume from memory step 25: $(grep -E 'resum|skipp' <<< "$out")"
grep -E "skipping step 30|resumed from step 25" <<< "$out"
grep -q "starting from step 0" <<< "$out" && fail "a start from step 0 although memory step 25 was intact"
wait_for 30 test ! -e "$MEM" || fail "the ended job's memory tier $MEM is still there"
ended=$(ctl watch "$id") || fail "watch of the ended job failed"
grep -q "removed the ended job's memory checkpoint tier $MEM" <<< "$ended" || fail "no memory_tier_removed event"
# A coordinator restart: the ended job's folder is not removed again.
mkdir -p "$MEM" && echo new > "$MEM/new"
kill "$SHARDD_PID"
wait_for 60 eval '! kill -0 '"$SHARDD_PID"' 2>/dev/null' || fail "shardd did not stop on SIGTERM"
start_shardd
after=$(make_job memfb2)
id2=$(ctl submit "$after" --set train.steps=5)
ctl watch "$id2" > /dev/null || fail "a job after the restart failed"
[ -f "$MEM/new" ] || fail "a restarted shardd removed $MEM again"
echo "PASS: damaged memory step 30 skipped with an event, resumed from memory step 25; cleanup done once"
