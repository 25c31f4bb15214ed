#!/usr/bin/env bash
# lib.sh's start_shardd reads only what the daemon it started logs: a line
# "serving on" left in shardd.log by an earlier instance (a restart on the
# same port) neither ends the wait nor gives the address. A fake daemon stands
# in for shardd, so each case waits on its files, not on time.
source "$(dirname "$0")/lib.sh"
cat > "$T/fake_shardd" <<'FAKE'
#!/usr/bin/env bash
# Started: touch $T/fake.started; then, when FAKE_MODE=serve, wait for
# $T/release and log a serving line on FAKE_ADDR; when FAKE_MODE=die, exit 1
# the way a daemon does when its port is still taken.
echo $$ > "$FAKE_DIR/fake.pid"
touch "$FAKE_DIR/fake.started"
if [ "$FAKE_MODE" = die ]; then echo "shardd: port taken"; exit 1; fi
while [ ! -e "$FAKE_DIR/release" ]; do sleep 0.05; done
echo "shardd: serving on $FAKE_ADDR (state x), http port 1"
exec sleep 600
FAKE
chmod +x "$T/fake_shardd"
SHARDD=$T/fake_shardd
trap 'kill -9 "$(cat "$T/fake.pid" 2>/dev/null)" 2>/dev/null; cleanup' EXIT
export FAKE_DIR=$T
echo "shardd: serving on 127.0.0.1:4242 (state x), http port 1" > "$T/shardd.log"  # the earlier instance

# 1. The restarted daemon exits before serving: start_shardd fails, naming it.
rc=0
( FAKE_MODE=die start_shardd 4242 ) 2> "$T/die.err" || rc=$?
[ "$rc" = 1 ] || fail "start_shardd took the earlier instance's line for a daemon that exited (rc $rc)"
grep -q "shardd exited before serving" "$T/die.err" || fail "unclear failure: $(cat "$T/die.err")"

# 2. The restarted daemon serves later: start_shardd returns its address, only
# after it logged it.
( FAKE_MODE=serve FAKE_ADDR=127.0.0.1:4243 start_shardd 0; echo "$ADDR" > "$T/returned" ) &
waiter=$!
wait_for 60 test -e "$T/fake.started" || fail "the fake daemon did not start"
[ ! -e "$T/returned" ] || fail "start_shardd returned before the new daemon logged a line: $(cat "$T/returned")"
touch "$T/release"
wait "$waiter" || fail "start_shardd failed for a daemon that serves"
[ "$(cat "$T/returned")" = 127.0.0.1:4243 ] || fail "start_shardd read $(cat "$T/returned"), not the new daemon's 127.0.0.1:4243"
echo PASS
