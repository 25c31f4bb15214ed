#!/usr/bin/env bash
# Elastic restarts across two "hosts" (network namespaces A 10.213.0.1 and B
# 10.213.0.2 joined by a veth pair, as two_hosts.sh): an external job,
# hybrid_shard over world 4 in shard groups of 2 with restart.min_world_size 2,
# has ranks 0-1 on A and 2-3 on B, each host's started by an agent loop that
# starts its workers again when they exit with a retryable code. Beside it a
# reference job, the same run uninterrupted on 4 ranks of host A.
#
# After a committed checkpoint host B is removed for good (its processes
# killed, its link down). The attempt fails, the next one waits
# restart.elastic_wait_s for B's ranks, and the job continues on A's two
# ranks from the newest committed step, with twice the micro-batches per
# rank and step; it must SUCCEED, its event must say what changed, and its
# loss at every step must be within 1e-3 relative of the reference run's.
#
# Skips (77) unless root with `ip netns`; always deletes its namespaces.
set -euo pipefail
BIN=${SHARDD_BIN_DIR:?SHARDD_BIN_DIR must point at the build dir}
SRC=${SHARDD_SOURCE_DIR:?SHARDD_SOURCE_DIR must point at the source dir}
skip() { echo "SKIP: $*"; exit 77; }
[ "$(id -u)" -eq 0 ] || skip "needs root to create network namespaces"
command -v ip >/dev/null || skip "no ip command (iproute2)"

NA=shardd-el-a-$$ NB=shardd-el-b-$$
VA=sheA$$ VB=sheB$$
IPA=10.213.0.1 IPB=10.213.0.2 PORT=7070
STEPS=60
T=$(mktemp -d /tmp/shardd-elastic.XXXXXX)
GATE=$T/gate  # SHARDD_STEP_GATE: the elastic job waits before step 26 until host B is gone
echo 25 > "$GATE"
PIDS=""  # process groups this test started (shardd, the host agents)
cleanup() {
  for p in $PIDS; do kill -9 -- "-$p" 2>/dev/null || true; done
  for ns in "$NA" "$NB"; do
    for p in $(ip netns pids "$ns" 2>/dev/null); do kill -9 "$p" 2>/dev/null || true; done
    ip netns del "$ns" 2>/dev/null || true
  done
  [ -n "${KEEP:-}" ] && echo "kept $T" || rm -rf "$T"
}
trap cleanup EXIT
ip netns add "$NA" 2>/dev/null || skip "ip netns add failed (no network namespaces here)"
ip netns add "$NB"
ip link add "$VA" netns "$NA" type veth peer name "$VB" netns "$NB"
ip -n "$NA" addr add "$IPA/24" dev "$VA"
ip -n "$NB" addr add "$IPB/24" dev "$VB"
for ns in "$NA" "$NB"; do ip -n "$ns" link set lo up; done
ip -n "$NA" link set "$VA" up
ip -n "$NB" link set "$VB" up

fail() {
  echo "FAIL: $*" >&2
  for f in "$T/shardd.log" "$T"/host_*.log; do [ -f "$f" ] && { echo "--- $f" >&2; tail -n 25 "$f" >&2; }; done
  exit 1
}
in_a() { ip netns exec "$NA" "$@"; }
ctl() { (cd "$T" && in_a "$BIN/coordinator/ctl/shardctl" --coordinator "$IPA:$PORT" --state-dir "$T/state" "$@"); }
job_field() { ctl status "$1" --json | python3 -c "import json,sys; j=json.load(sys.stdin); print($2)"; }
wait_for() {  # wait_for SECONDS COMMAND...
  local end=$((SECONDS + $1)); shift
  while [ $SECONDS -lt $end ]; do "$@" >/dev/null 2>&1 && return 0; sleep 0.2; done
  return 1
}
state_in() {  # state_in JOB STATE...
  local job=$1; shift
  [[ " $* " == *" $(job_field "$job" "j.get('state','')") "* ]]
}
committed_at_least() {  # (one status call: the poll must not lag the run)
  [ "$(job_field "$JOB" "99999 if j.get('state') in ('FAILED', 'CANCELLED') else
                        int(j.get('progress',{}).get('last_committed_step',-1))")" -ge "$1" ]
}

setsid ip netns exec "$NA" "$BIN/coordinator/shardd" --state-dir "$T/state" --listen "$IPA:$PORT" --allow-insecure \
  --http-listen 127.0.0.1:0 --kill-grace-s 2 > "$T/shardd.log" 2>&1 &
PIDS="$PIDS $!"
wait_for 20 grep -q "serving on $IPA:$PORT" "$T/shardd.log" || fail "shardd did not start on $IPA:$PORT"
ip netns exec "$NB" timeout 5 bash -c "exec 3<>/dev/tcp/$IPA/$PORT" ||
  skip "host B cannot reach $IPA:$PORT over the veth pair here"

mkdir -p "$T/data"
python3 "$SRC/configs/data/make_tokens.py" "$T/data/phrases.u32" >/dev/null
cat > "$T/elastic.yaml" <<YAML
name: elastic
model: {preset: tiny}
data: {tokens: data/phrases.u32, seq_len: 32, shuffle: true}
train: {steps: $STEPS, global_batch: 8, micro_batch: 2, lr: 3.0e-3, warmup_steps: 5, seed: 7, log_every: 10}
parallel: {strategy: hybrid_shard, world_size: 4, shard_group_size: 2, comm_timeout_s: 5}
checkpoint: {dir: ckpt, every_steps: 20, keep_last: 3, async: true}
resources: {device: cpu, launcher: external}
restart: {max_restarts: 3, backoff_s: 0.5, heartbeat_timeout_s: 4, hang_timeout_s: 60,
          min_world_size: 2, elastic_wait_s: 5}
YAML
JOB=$(ctl submit "$T/elastic.yaml") || fail "submit failed"
REF=$(ctl submit "$T/elastic.yaml" --set name=reference --set restart.min_world_size=0) || fail "submit of the reference failed"

# One agent per host and job: start ranks FIRST..FIRST+N-1, wait for them,
# note each exit in host_NAME.exits, start them again unless the job is done
# (0) or can never run (2).
start_host() {  # start_host NS IP JOB FIRST N NAME [GATE]
  local token
  token=$(job_field "$3" "j.get('join_token','')")
  [ ${#token} -ge 32 ] || fail "no join token for $3"
  setsid ip netns exec "$1" env SHARDD_WORKER_TOKEN="$token" SHARDD_NUM_THREADS=1 SHARDD_STEP_GATE="${7:-}" bash -c '
    worker=$1 addr=$2 job=$3 ip=$4 first=$5 n=$6 exits=$7
    cd "$8"
    for try in $(seq 1 8); do
      pids=()
      for r in $(seq "$first" $((first + n - 1))); do
        ( "$worker" --coordinator "$addr" --job "$job" --rank "$r" --hostname "$ip"; rc=$?
          echo "$(date +%s.%N) rank $r try $try exit $rc" >> "$exits"; exit $rc ) &
        pids+=($!)
      done
      done_ok=1
      for p in "${pids[@]}"; do wait "$p"; rc=$?; [ $rc -eq 0 ] || done_ok=0; [ $rc -eq 2 ] && exit 2; done
      [ $done_ok -eq 1 ] && exit 0
      sleep 1
    done
    exit 1' host "$BIN/worker/shardd-worker" "$IPA:$PORT" "$3" "$2" "$4" "$5" "$T/host_$6.exits" "$T" \
    > "$T/host_$6.log" 2>&1 &
  PIDS="$PIDS $!"
}
start_host "$NA" "$IPA" "$JOB" 0 2 a "$GATE"
start_host "$NB" "$IPB" "$JOB" 2 2 b "$GATE"
start_host "$NA" "$IPA" "$REF" 0 4 ref

wait_for 90 committed_at_least 20 && ! state_in "$JOB" FAILED CANCELLED ||
  fail "no committed checkpoint at step 20: $(ctl status "$JOB")"
[ "$(job_field "$JOB" "j.get('attempt')")" = 1 ] || fail "restarted before host B went: $(ctl status "$JOB")"

# Host B goes for good while the job waits at the step gate (step 25, after
# the step-20 commit): every process in it, then its link (B's end: A's
# address, which the coordinator and A's ranks use, stays).
for p in $(ip netns pids "$NB"); do kill -9 "$p" 2>/dev/null || true; done
host_b_empty() { [ -z "$(ip netns pids "$NB")" ]; }
wait_for 10 host_b_empty || fail "host B's processes survived kill -9: $(ip netns pids "$NB")"
ip -n "$NB" link set "$VB" down
echo 1000000 > "$GATE"  # host A's ranks go on (and find B gone)
echo "host B removed at step $(job_field "$JOB" "j.get('progress',{}).get('step',0)")"

wait_for 60 state_in "$JOB" SUCCEEDED FAILED CANCELLED || fail "the job did not end without host B: $(ctl status "$JOB")"
state_in "$JOB" SUCCEEDED || fail "the job did not succeed on host A's ranks: $(ctl status "$JOB")"
[ "$(job_field "$JOB" "j.get('attempt_world_size')")" = 2 ] ||
  fail "the last attempt did not run on 2 ranks: $(ctl status "$JOB" --json)"
ctl watch "$JOB" > "$T/watch.log" 2>&1 || true
grep -q "continuing on 2 of 4 ranks: host $IPB lost (ranks 2, 3 did not join within [0-9]* s); micro-batches per step 1 → 2" \
  "$T/watch.log" || fail "no elastic event naming host B and the micro-batches: $(cat "$T/watch.log")"
grep -E "restarting|elastic|resumed" "$T/watch.log" | sed 's/^/  /'
wait_for 60 state_in "$REF" SUCCEEDED FAILED CANCELLED || fail "the reference job did not end: $(ctl status "$REF")"
state_in "$REF" SUCCEEDED || fail "the reference job did not succeed: $(ctl status "$REF")"

# The loss curves: the elastic job's last word on each step against the reference's.
ctl metrics "$JOB" --json > "$T/elastic.jsonl" || fail "no metrics for $JOB"
ctl metrics "$REF" --json > "$T/reference.jsonl" || fail "no metrics for $REF"
python3 - "$T/elastic.jsonl" "$T/reference.jsonl" "$STEPS" <<'PY' || fail "the loss curve left the reference's by more than 1e-3 relative"
import json, sys
def curve(path):
    out = {}
    for line in open(path):
        r = json.loads(line)
        if r["step"] not in out or r["attempt"] >= out[r["step"]][0]:
            out[r["step"]] = (r["attempt"], r["loss"])
    return {s: l for s, (a, l) in out.items()}
el, ref, steps = curve(sys.argv[1]), curve(sys.argv[2]), int(sys.argv[3])
if sorted(el) != list(range(1, steps + 1)) or sorted(ref) != list(range(1, steps + 1)):
    sys.exit(f"steps missing: elastic {sorted(el)[:3]}..{len(el)}, reference {len(ref)}")
worst = max(abs(el[s] - ref[s]) / abs(ref[s]) for s in ref)
bad = [s for s in ref if abs(el[s] - ref[s]) / abs(ref[s]) >= 1e-3]
print(f"  loss vs the uninterrupted run: worst relative difference {worst:.2e} over {steps} steps")
sys.exit(f"steps {bad} differ" if bad else 0)
PY
echo "PASS: host B lost for good -> continued on host A's 2 ranks, succeeded, loss curve within 1e-3 of the reference"
