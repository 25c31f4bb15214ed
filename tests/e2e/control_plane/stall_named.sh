#!/usr/bin/env bash
# The flight recorder names a rank stuck outside collectives while its
# heartbeats go on. SHARDD_STALL_RANK=1@6 stops rank 1's training thread
# before step 6 (its heartbeat thread keeps beating); ranks 0 and 2 enter
# step 6's first collective and wait there. The hang watchdog
# (restart.hang_timeout_s 5, well under parallel.comm_timeout_s) fails the
# attempt, and the coordinator states the cause once: the stall_cause event,
# `shardctl status` (text and --json) and the dashboard's job page must name
# rank 1 as the one that never entered the collective, with its last
# collective (the call just before the one the others wait in). Paced by
# events, never by sleeps.
source "$(dirname "$0")/lib.sh"
export SHARDD_STALL_RANK=1@6
start_shardd 0 --cpu-slots 3  # three CPU ranks on a two-core CI host
job=$(make_job stall)
id=$(ctl submit "$job" --set parallel.world_size=3 --set train.global_batch=12 --set restart.max_restarts=0 \
  --set restart.hang_timeout_s=5 --set parallel.comm_timeout_s=300)

wait_for 180 state_is "$id" FAILED || fail "the stalled job did not fail: $(ctl status "$id")"
line=$(grep -m1 "stall_cause: " "$T/shardd.log") || fail "no stall_cause event"
echo "$line"
[ "$(grep -c "stall_cause: " "$T/shardd.log")" = 1 ] || fail "more than one stall_cause event"
cause=${line#*stall_cause: }
python3 - "$cause" <<'PY' || fail "the cause does not name rank 1 and its last collective: $cause"
import re, sys
m = re.fullmatch(r"ranks 0,2 waited [0-9.]+ s in (\w+) #(\d+)( \(unit \d+\))?; rank 1 never entered it: "
                 r"its last collective was (\w+) #(\d+)( \(unit \d+\))?, ended [0-9.]+ s ago", sys.argv[1])
assert m, "unexpected sentence"
waiting, last = int(m.group(2)), int(m.group(5))
assert waiting == last + 1, (waiting, last)  # the call rank 1 never made is the one after its last
print(f"rank 1 stopped after call #{last} ({m.group(4)}); ranks 0 and 2 wait in #{waiting} ({m.group(1)})")
PY
reason=$(job_field "$id" "j['reason']")
[[ $reason == *"made no progress"* ]] || fail "the attempt did not end on the hang watchdog: $reason"

status=$(ctl status "$id")
echo "$status" | grep -F "stall      attempt 1 (hang): $cause" || fail "status does not state the cause: $status"
[ "$(job_field "$id" "j['stall']['text']")" = "$cause" ] || fail "status --json does not carry the cause"
[ "$(job_field "$id" "j['stall']['trigger']")" = hang ] || fail "status --json: the trigger is not hang"

rc=0
dom=$(dashboard_dom "$id") || rc=$?
if [ $rc = 2 ]; then
  echo "dashboard check skipped: chromium is not installed"
else
  [ $rc = 0 ] || fail "chromium could not render the job page"
  grep -q 'id="stall"' <<<"$dom" || fail "the job page does not show the stall"
  grep -q "rank 1 never entered it" <<<"$dom" || fail "the job page's stall does not name rank 1"
fi
echo PASS
