# Shared by the two-"host" tests (source it): network namespaces A
# (10.213.0.1) and B (10.213.0.2) joined by a veth pair, nothing routed
# anywhere else; the coordinator runs in A; an agent loop per host starts that
# host's workers of an external job again whenever they exit with a retryable
# code (like deploy/slurm/external-job.sbatch). Both hosts share this
# machine's filesystem, as nodes share a checkpoint filesystem.
#
#   netns_setup TAG     namespaces, veth pair, $T, the cleanup trap (skips 77
#                       unless root with `ip netns`)
#   start_shardd        the coordinator in A on $IPA:$PORT (skips when B cannot reach it)
#   start_host NS IP JOB FIRST N NAME [GATE]
#                       an agent on host NS for ranks FIRST..FIRST+N-1 of JOB;
#                       each exit is noted in $T/host_NAME.exits
#   ctl, job_field, state_in, wait_for, open_gate, fail, committed_at_least
#
# Always deletes its namespaces; KEEP=1 keeps $T.
BIN=${SHARDD_BIN_DIR:?SHARDD_BIN_DIR must point at the build dir}
SRC=${SHARDD_SOURCE_DIR:?SHARDD_SOURCE_DIR must point at the source dir}
IPA=10.213.0.1 IPB=10.213.0.2 PORT=7070
PIDS=""  # process groups this test started (shardd, the host agents)

skip() { echo "SKIP: $*"; exit 77; }

netns_cleanup() {
  for p in $PIDS; do kill -9 -- "-$p" 2>/dev/null || true; done
  # Anything still inside our namespaces was started by this test.
  for ns in "$NA" "$NB"; do
    for p in $(ip netns pids "$ns" 2>/dev/null); do kill -9 "$p" 2>/dev/null || true; done
    ip netns del "$ns" 2>/dev/null || true
  done
  [ -n "${KEEP:-}" ] && echo "kept $T" || rm -rf "$T"
}

netns_setup() {  # netns_setup TAG (a few letters: names the namespaces and links)
  [ "$(id -u)" -eq 0 ] || skip "needs root to create network namespaces"
  command -v ip >/dev/null || skip "no ip command (iproute2)"
  NA=shardd-$1-a-$$ NB=shardd-$1-b-$$
  VA=sh${1:0:2}A$$ VB=sh${1:0:2}B$$
  T=$(mktemp -d "/tmp/shardd-$1.XXXXXX")
  GATE=$T/gate  # SHARDD_STEP_GATE for the tests' workers
  trap netns_cleanup EXIT
  ip netns add "$NA" 2>/dev/null || skip "ip netns add failed (no network namespaces here)"
  ip netns add "$NB"
  ip link add "$VA" netns "$NA" type veth peer name "$VB" netns "$NB"
  ip -n "$NA" addr add "$IPA/24" dev "$VA"
  ip -n "$NB" addr add "$IPB/24" dev "$VB"
  for ns in "$NA" "$NB"; do ip -n "$ns" link set lo up; done
  ip -n "$NA" link set "$VA" up
  ip -n "$NB" link set "$VB" up
  mkdir -p "$T/data"
  python3 "$SRC/configs/data/make_tokens.py" "$T/data/phrases.u32" >/dev/null
}

fail() {
  echo "FAIL: $*" >&2
  for f in "$T/shardd.log" "$T"/host_*.log; do [ -f "$f" ] && { echo "--- $f" >&2; tail -n 25 "$f" >&2; }; done
  exit 1
}
open_gate() { echo "$1" > "$GATE.tmp" && mv "$GATE.tmp" "$GATE"; }
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
committed_at_least() {  # committed_at_least N: $JOB's commit reached N, or it ended badly (one status call)
  [ "$(job_field "$JOB" "99999 if j.get('state') in ('FAILED', 'CANCELLED') else
                        int(j.get('progress',{}).get('last_committed_step',-1))")" -ge "$1" ]
}

start_shardd() {  # plain gRPC on A's address: a private link
  setsid ip netns exec "$NA" "$BIN/coordinator/shardd" --state-dir "$T/state" --listen "$IPA:$PORT" \
    --allow-insecure --http-listen 127.0.0.1:0 --kill-grace-s 2 > "$T/shardd.log" 2>&1 &
  PIDS="$PIDS $!"
  wait_for 20 grep -q "serving on $IPA:$PORT" "$T/shardd.log" || fail "shardd did not start on $IPA:$PORT"
  ip netns exec "$NB" timeout 5 bash -c "exec 3<>/dev/tcp/$IPA/$PORT" ||
    skip "host B cannot reach $IPA:$PORT over the veth pair here"
}

# One agent per host and job: start ranks FIRST..FIRST+N-1, wait for them,
# note each exit (time, rank, try, code) in host_NAME.exits, start them again
# unless the job is done (0) or can never run (2).
start_host() {  # start_host NS IP JOB FIRST N NAME [GATE]
  local token
  token=$(job_field "$3" "j.get('join_token','')")
  [ ${#token} -ge 32 ] || fail "no join token for $3"
  setsid ip netns exec "$1" env SHARDD_WORKER_TOKEN="$token" SHARDD_NUM_THREADS=1 SHARDD_STEP_GATE="${7:-}" bash -c '
    worker=$1 addr=$2 job=$3 ip=$4 first=$5 n=$6 exits=$7
    cd "$8"  # the job file'"'"'s relative paths: a shared filesystem, same layout
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
