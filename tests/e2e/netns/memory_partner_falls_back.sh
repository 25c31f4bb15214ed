#!/usr/bin/env bash
# Issue 39 item 6 on the per-host memory tier: the newest memory step damaged
# (one flipped byte in host A's shard rank_00001 of memory step 30, whose only
# other copy is on host B) and host B replaced (its processes killed, its
# memory folder deleted) while the workers wait at a step gate before step 33.
# No host can assemble step 30: every rank must fall back to memory step 25
# (B's ranks fetching it from A), with a `resume_skipped` event naming step 30,
# its tier and the rank, host and file that failed — never "resumed from
# disk" (no disk step exists) nor a silent start from step 0. The setup is
# memory_partner.sh's (world 4 hybrid_shard, ranks 0-1 on A, 2-3 on B).
#
# Skips (77) unless root with `ip netns`; always deletes its namespaces.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
netns_setup mf
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

open_gate 32  # the job trains to step 32 and waits before step 33
JOB=$(ctl submit "$(job_file mfvic)") || fail "submit failed"
start_host "$NA" "$IPA" "$JOB" 0 2 a "$GATE"
start_host "$NB" "$IPB" "$JOB" 2 2 b "$GATE"
wait_for 90 committed_at_least 30 || fail "memory step 30 never committed: $(ctl status "$JOB")"
wait_for 60 step_at_least 32 || fail "the job never reached step 32: $(ctl status "$JOB")"
MEMB=$(ls -d "$T"/shm/mfvic-*/host-"$IPB") || fail "no memory folder for host B in $T/shm: $(ls -R "$T/shm")"
MEMA=${MEMB%/host-$IPB}/host-$IPA
[ -d "$MEMA/step_00000025" ] || fail "host A does not hold memory step 25: $(ls "$MEMA" | tr "\n" " ")"
shard="$MEMA/step_00000030/rank_00001-of-00002.shard"
python3 - "$shard" <<'PY'
import sys
p = sys.argv[1]
b = bytearray(open(p, "rb").read())
b[-3] ^= 0x10
open(p, "wb").write(bytes(b))
PY
for p in $(ip netns pids "$NB"); do kill -9 "$p" 2>/dev/null || true; done
host_b_empty() { [ -z "$(ip netns pids "$NB")" ]; }
wait_for 10 host_b_empty || fail "host B's processes survived kill -9: $(ip netns pids "$NB")"
rm -rf "$MEMB"
echo "flipped a byte of $shard; host B replaced: its memory folder deleted"
wait_for 60 attempt_at_least 2 || fail "no second attempt after host B died: $(ctl status "$JOB")"
start_host "$NB" "$IPB" "$JOB" 2 2 b2 "$GATE"
open_gate 1000000
wait_for 120 state_in "$JOB" SUCCEEDED FAILED CANCELLED || fail "the job did not end: $(ctl status "$JOB")"
state_in "$JOB" SUCCEEDED || fail "the job did not succeed: $(ctl status "$JOB")"
ctl watch "$JOB" > "$T/watch.log" 2>&1 || true
grep -E "resum|skipp|step 0" "$T/watch.log" | sed 's/^/  /'
grep -q "resume_skipped: skipping step 30 (memory): rank [0-3] on host [0-9.]* lacks rank_00001-of-00002.shard (this host's copy fails its checksum" \
  "$T/watch.log" || fail "no skip event naming step 30 and the damaged shard"
grep -q "resumed from step 25 (memory" "$T/watch.log" || fail "the job did not resume from memory step 25"
! grep -q "starting from step 0\|resumed from disk" "$T/watch.log" || fail "it fell back past an intact memory step"
echo "PASS: damaged memory step 30 + host B replaced -> skipped with an event, resumed from memory step 25"
