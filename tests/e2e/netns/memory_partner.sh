#!/usr/bin/env bash
# The memory checkpoint tier across two "hosts" (network namespaces A and B,
# tests/e2e/netns/lib.sh) with partner copies (checkpoint.memory.replicas: 1):
# world 4, hybrid_shard, ranks 0-1 on A and 2-3 on B (launcher: external);
# disk steps every 200 (none before the end), memory steps every 5, each in
# its host's folder <memory.dir>/<job>-<hash>/host-<address>. Host A's ranks
# write the shards (replica 0 of each) and send each to their partner on B.
#
# The workers wait at a step gate before step 33, with memory step 30
# committed and its partner copies on B. Host B is then replaced: every
# process in B is killed and B's memory folder deleted; a fresh agent starts
# B's ranks again. The next attempt must resume from memory step 30, B's
# ranks fetching the step from A (the resumed event says so), and export a
# model byte-identical to an uninterrupted reference run of the same job.
# When the job has succeeded, both hosts' memory folders are gone.
#
# Skips (77) unless root with `ip netns`; always deletes its namespaces.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
netns_setup mp
start_shardd
job_file() {  # job_file NAME: the job, exporting to out/NAME
  cat > "$T/$1.yaml" <<YAML
name: $1
model: {preset: tiny}
data: {tokens: data/phrases.u32, seq_len: 32, shuffle: true}
train: {steps: 40, global_batch: 8, micro_batch: 2, lr: 3.0e-3, warmup_steps: 5, seed: 7, log_every: 10}
parallel: {strategy: hybrid_shard, world_size: 4, shard_group_size: 2, comm_timeout_s: 6}
checkpoint: {dir: ckpt, every_steps: 200, keep_last: 3, async: true,
             memory: {every_steps: 5, keep_last: 2, replicas: 1, dir: $T/shm}}
export: {hf_dir: out/$1, dtype: fp32}
resources: {device: cpu, launcher: external}
restart: {max_restarts: 3, backoff_s: 0.5, heartbeat_timeout_s: 4, hang_timeout_s: 60}
YAML
  echo "$T/$1.yaml"
}
attempt_at_least() { [ "$(job_field "$JOB" "j.get('attempt', 1)")" -ge "$1" ]; }
step_at_least() { [ "$(job_field "$JOB" "int(j.get('progress',{}).get('step',0))")" -ge "$1" ]; }

# The reference: the same job, uninterrupted, on the same two hosts.
JOB=$(ctl submit "$(job_file mpref)") || fail "submit of the reference failed"
start_host "$NA" "$IPA" "$JOB" 0 2 refa
start_host "$NB" "$IPB" "$JOB" 2 2 refb
wait_for 120 state_in "$JOB" SUCCEEDED FAILED CANCELLED || fail "the reference run did not end: $(ctl status "$JOB")"
state_in "$JOB" SUCCEEDED || fail "the reference run did not succeed: $(ctl status "$JOB")"
ls -d "$T"/shm/mpref-*/host-* 2>/dev/null && fail "the reference run's host folders are still there"

open_gate 32  # the victim trains to step 32 and waits before step 33
JOB=$(ctl submit "$(job_file mpvic)") || fail "submit failed"
start_host "$NA" "$IPA" "$JOB" 0 2 a "$GATE"
start_host "$NB" "$IPB" "$JOB" 2 2 b "$GATE"
wait_for 90 committed_at_least 30 || fail "memory step 30 never committed: $(ctl status "$JOB")"
wait_for 60 step_at_least 32 || fail "the job never reached step 32: $(ctl status "$JOB")"
ctl checkpoints "$JOB" | grep -E "^30 +valid +memory " > /dev/null ||
  fail "memory step 30 is not listed: $(ctl checkpoints "$JOB")"
MEMB=$(ls -d "$T"/shm/mpvic-*/host-"$IPB") || fail "no memory folder for host B in $T/shm: $(ls -R "$T/shm")"
MEMA=${MEMB%/host-$IPB}/host-$IPA
# Host B's ranks write no shard (hybrid_shard: host A holds replica 0 of
# each): what B holds of step 30 are its partners' copies, bytes as on A.
for f in "$MEMA"/step_00000030/rank_*.shard; do
  cmp "$f" "$MEMB/step_00000030/$(basename "$f")" || fail "no partner copy of $(basename "$f") on host B"
done

# Host B is replaced: its processes die, its tmpfs is gone.
for p in $(ip netns pids "$NB"); do kill -9 "$p" 2>/dev/null || true; done
host_b_empty() { [ -z "$(ip netns pids "$NB")" ]; }
wait_for 10 host_b_empty || fail "host B's processes survived kill -9: $(ip netns pids "$NB")"
rm -rf "$MEMB"
echo "host B replaced at step $(job_field "$JOB" "j.get('progress',{}).get('step',0)"): its memory folder deleted"
wait_for 60 attempt_at_least 2 || fail "no second attempt after host B died: $(ctl status "$JOB")"
start_host "$NB" "$IPB" "$JOB" 2 2 b2 "$GATE"
open_gate 1000000
wait_for 120 state_in "$JOB" SUCCEEDED FAILED CANCELLED || fail "the job did not end: $(ctl status "$JOB")"
state_in "$JOB" SUCCEEDED || fail "the job did not succeed: $(ctl status "$JOB")"
ctl watch "$JOB" > "$T/watch.log" 2>&1 || true
grep -E "resum" "$T/watch.log" | sed 's/^/  /'
grep -q "resumed from step 30 (memory, .*took .* from rank [01] on host $IPA" "$T/watch.log" ||
  fail "the job did not resume from memory step 30 with host B's ranks fetching from host A: $(grep resum "$T/watch.log")"
cmp "$T/out/mpref/model.safetensors" "$T/out/mpvic/model.safetensors" ||
  fail "the export differs from the uninterrupted run's"
hosts_clean() { ! ls -d "$T"/shm/mpvic-*/host-* >/dev/null 2>&1; }
wait_for 15 hosts_clean || fail "host folders left after the job succeeded: $(ls -d "$T"/shm/mpvic-*/host-*)"
echo "PASS: host B replaced at step 32 -> resumed from memory step 30 with B's shards from host A; export identical"
