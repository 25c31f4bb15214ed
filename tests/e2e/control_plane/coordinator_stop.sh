#!/usr/bin/env bash
# Stopping the coordinator never stops training (docs/control-plane.md,
# "Coordinator restart"). One job, four stops of its coordinator: SIGTERM,
# SIGINT (a clean stop: in-flight heartbeats are cancelled), SIGKILL (the
# coordinator vanishes mid-RPC), and SIGTERM with the coordinator away for
# 20 s, well inside the workers' 60 s reconnect window but longer than gRPC's
# default reconnect backoff grows in that time (the ranks must still
# heartbeat within heartbeat_timeout_s, 4 s, of its return). Each time the workers are held at a step gate
# while the coordinator is up, then let on while it is away: they must still be
# alive and their steps (rank 0's log, read without a coordinator) must
# advance. A coordinator started again on the same state dir adopts them, the
# step it shows moves on, and the job ends SUCCEEDED in its first attempt with
# no restart charged and no restart event.
source "$(dirname "$0")/lib.sh"
export SHARDD_STEP_GATE=$T/gate
start_shardd
port=${ADDR##*:}
job=$(make_job cstop)
# Gates sit between the checkpoints (every 10 steps): while the coordinator is
# away the ranks train steps no report waits on.
open_gate 14
id=$(ctl submit "$job" --set train.steps=50 --set train.log_every=1)
logged_step() { ctl logs "$id" --rank 0 2>/dev/null | grep -q "step $1/50 "; }
for round in "TERM 14 17 0" "INT 24 27 0" "KILL 34 37 0" "TERM 44 47 20"; do
  read -r sig held away absent_s <<< "$round"
  open_gate "$held"
  wait_for 240 step_at_least "$id" "$held" || fail "never reached step $held: $(ctl status "$id")"
  pids=$(workers_of "$id" | tr '\n' ' ')
  [ "$(echo $pids | wc -w)" = 2 ] || fail "expected 2 workers at step $held, found: $pids"
  echo "SIG$sig to shardd (pid $SHARDD_PID) at step $held; workers $pids"
  kill -"$sig" "$SHARDD_PID"
  wait_for 60 bash -c "! kill -0 $SHARDD_PID" || fail "shardd did not exit on SIG$sig"
  open_gate "$away"
  # The workers train on without a coordinator (heartbeats fail and retry).
  wait_for 120 logged_step "$away" || fail "rank 0 did not reach step $away without a coordinator (SIG$sig): $(
    ctl logs "$id" --rank 0 | tail -n 5)"
  for p in $pids; do kill -0 "$p" 2>/dev/null || fail "worker $p exited after SIG$sig to shardd"; done
  sleep "$absent_s"  # the scenario's length of absence, not a pace
  for p in $pids; do kill -0 "$p" 2>/dev/null || fail "worker $p exited while shardd was away $absent_s s"; done
  start_shardd "$port"
  [ "$(workers_of "$id" | tr '\n' ' ')" = "$pids" ] || fail "the workers changed after SIG$sig: $(workers_of "$id")"
  # Adopted: the restarted coordinator hears the same processes' steps.
  open_gate $((held + 10))
  wait_for 120 step_at_least "$id" $((away + 1)) || fail "the restarted coordinator never saw step $((away + 1)): $(
    ctl status "$id")"
  [ "$(job_field "$id" "j.get('restarts', 0)")" = 0 ] || fail "a restart was charged after SIG$sig: $(ctl status "$id")"
done
open_gate 1000000
out=$(ctl watch "$id") || fail "watch failed"
state_is "$id" SUCCEEDED || fail "job did not succeed: $(ctl status "$id")"
[ "$(job_field "$id" "j.get('attempt')")" = 1 ] || fail "the job ran more than one attempt: $(ctl status "$id")"
[ "$(job_field "$id" "j.get('restarts', 0)")" = 0 ] || fail "restarts charged: $(ctl status "$id")"
echo "$out" | grep -q "restarting" && fail "a restart event: $(echo "$out" | grep restarting)"
[ "$(echo "$out" | grep -c "adopted")" -ge 4 ] || fail "not adopted after each stop: $out"
echo PASS
