#!/usr/bin/env bash
# shardctl launch supervises its standalone workers: killed with SIGKILL (no
# chance to stop them), its workers die with it (PR_SET_PDEATHSIG), so no rank
# trains on as an orphan. A SIGTERM is passed on and stops them too. The same
# holds for the workers shardd-worker --nproc-per-node starts (a pod's entry
# point), which also train a job by themselves.
source "$(dirname "$0")/lib.sh"
job=$(make_job "launchkill$$")
launched_workers() { pgrep -f -- "[s]hardd-worker --standalone --config $job " || true; }
two_workers() { [ "$(launched_workers | wc -l)" -ge 2 ]; }
none_left() { [ -z "$(launched_workers)" ]; }
stop_leftovers() { for p in $(launched_workers); do kill -9 "$p" 2>/dev/null || true; done; }

for sig in KILL TERM; do
  (cd "$T" && exec "$CTL_BIN" launch "$job" --set train.steps=100000 --set checkpoint.every_steps=0) \
    > "$T/launch-$sig.log" 2>&1 &
  launcher=$!
  wait_for 60 two_workers || { stop_leftovers; fail "the workers did not start: $(cat "$T/launch-$sig.log")"; }
  workers=$(launched_workers | tr '\n' ' ')
  kill -"$sig" "$launcher"
  wait "$launcher" 2>/dev/null || true
  if ! wait_for 10 none_left; then
    ps -o pid,ppid,pgid,cmd -p "$(launched_workers | paste -sd,)" >&2 || true
    stop_leftovers
    fail "workers $workers still run 10 s after shardctl launch got SIG$sig"
  fi
  echo "ok: SIG$sig to shardctl launch took its workers ($workers) with it"
done
grep -q "stopping the workers" "$T/launch-TERM.log" || fail "SIGTERM was not passed on: $(cat "$T/launch-TERM.log")"

# shardd-worker --nproc-per-node: its children train the job (ranks 0 and 1) ...
rdv=$(mktemp -d "$T/rdv.XXXXXX")
(cd "$T" && exec "$SHARDD_WORKER_BIN" --standalone --config "$job" --nproc-per-node 2 --rendezvous "file:$rdv" \
  --set train.steps=4) > "$T/nproc.log" 2>&1 || fail "--nproc-per-node 2 failed: $(tail -n 20 "$T/nproc.log")"
grep -q "done: 4 steps" "$T/nproc.log" || fail "--nproc-per-node 2 did not train: $(tail -n 20 "$T/nproc.log")"
# ... and die with it.
rdv=$(mktemp -d "$T/rdv.XXXXXX")
(cd "$T" && exec "$SHARDD_WORKER_BIN" --standalone --config "$job" --nproc-per-node 2 --rendezvous "file:$rdv" \
  --set train.steps=100000 --set checkpoint.every_steps=0) > "$T/nproc-kill.log" 2>&1 &
parent=$!
three() { [ "$(launched_workers | wc -l)" -ge 3 ]; }
wait_for 60 three || { stop_leftovers; fail "the --nproc-per-node workers did not start: $(cat "$T/nproc-kill.log")"; }
kill -KILL "$parent"
wait "$parent" 2>/dev/null || true
wait_for 10 none_left || { stop_leftovers; fail "--nproc-per-node workers outlived their SIGKILLed parent"; }
echo "ok: --nproc-per-node trains, and its workers die with it"
