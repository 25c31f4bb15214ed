#!/usr/bin/env bash
# A memory tier that cannot be written never fails a run whose disk tier
# works, and its folders are never followed through a link: memory steps
# every 5, disk every 10. The workers wait at a step gate after step 6 with
# memory step 5 committed; the job's tmpfs folder is then swapped for a link
# to another folder (what another user could do to a shared root). The job
# goes on: memory steps 15 and 25 are skipped, each said once in a
# memory_step_skipped event naming the link, disk steps 10, 20 and 30 commit,
# the job succeeds, and nothing is written into (or deleted from) the
# link's target.
source "$(dirname "$0")/lib.sh"
[ -d /dev/shm ] && [ -w /dev/shm ] || { echo "SKIP: no writable /dev/shm"; exit 77; }
MEM=""
mem_cleanup() { [ -n "$MEM" ] && rm -rf "$MEM" "$MEM.moved"; cleanup; }
trap mem_cleanup EXIT
export SHARDD_STEP_GATE=$T/gate
start_shardd
tiers="checkpoint: {dir: ckpt, every_steps: 10, keep_last: 3, async: true, memory: {every_steps: 5, keep_last: 2}}"
job=$(make_job memskip)
grep -v '^checkpoint:' "$job" > "$job.tmp" && echo "$tiers" >> "$job.tmp" && mv "$job.tmp" "$job"

open_gate 6  # trains to step 6 and waits before step 7
id=$(ctl submit "$job" --set train.steps=30)
wait_for 120 committed_at_least "$id" 5 || fail "memory step 5 never committed: $(ctl status "$id")"
wait_for 60 step_at_least "$id" 6 || fail "never reached step 6"
listing=$(ctl checkpoints "$id" --json) || fail "shardctl checkpoints failed"
MEM=$(python3 - "$listing" <<'PY'
import json, os, sys
mem = [c for c in json.loads(sys.argv[1])["checkpoints"] if c["tier"] == "memory" and c["step"] == 5]
assert mem, sys.argv[1]
print(os.path.dirname(mem[0]["path"]))
PY
) || fail "memory step 5 is not listed: $listing"
mkdir -p "$T/elsewhere/step_00000001" && echo theirs > "$T/elsewhere/step_00000001/keep"
mv "$MEM" "$MEM.moved" && ln -s "$T/elsewhere" "$MEM"
echo "swapped the memory tier folder $MEM for a link to $T/elsewhere"
open_gate 1000000
out=$(ctl watch "$id") || fail "watch failed: $out"
state_is "$id" SUCCEEDED || fail "the job did not succeed with an unwritable memory tier: $(ctl status "$id")"
for s in 15 25; do
  n=$(grep -c "memory_step_skipped.*step $s: $MEM is a symbolic link" <<< "$out" || true)
  [ "$n" = 1 ] || fail "memory step $s skipped $n times in the events (want 1): $(grep memory_step <<< "$out")"
done
grep -q "restarting" <<< "$out" && fail "the unwritable memory tier cost a restart: $(grep restarting <<< "$out")"
for s in 10 20 30; do
  ctl checkpoints "$id" | grep -E "^$s +valid +disk " > /dev/null || fail "disk step $s missing: $(ctl checkpoints "$id")"
done
[ "$(ls "$T/elsewhere")" = step_00000001 ] && [ -f "$T/elsewhere/step_00000001/keep" ] ||
  fail "written or deleted through the link: $(ls -R "$T/elsewhere")"
echo "PASS: memory steps 15 and 25 skipped once each through a linked folder; disk steps and the job went on"
