#!/usr/bin/env bash
# The web dashboard in a real headless Chromium: shardd runs a tiny CPU job,
# a browser that has not logged in gets the login form (loopback too); with a
# one-time link from `shardctl dashboard JOB` (a fresh profile each time, so a
# fresh link; a used one is refused) Chromium loads the job's page, the DOM
# must show the charts with points, the events, workers, checkpoints and plan, a restart (rank 1 killed) and
# the checkpoint commits marked on the charts; a screenshot goes to the test's
# output dir ($SHARDD_TEST_OUTPUT_DIR, default <build>/test-output/dashboard).
# The job's TensorBoard file is read back too (CRCs checked by a Python
# reader independent of the C++ one). Skips (77) only when chromium is absent.
source "$(dirname "$0")/lib.sh"
CHROMIUM=$(command -v chromium || command -v chromium-browser || true)
if [ -z "$CHROMIUM" ]; then
  echo "SKIP: chromium is not installed (deploy/local/install-deps.sh installs it)"
  exit 77
fi
OUT=${SHARDD_TEST_OUTPUT_DIR:-$BIN/test-output}/dashboard
mkdir -p "$OUT"

start_shardd
job=$(make_job dash)
sed -i 's/steps: 40,/steps: 100000,/; s/every_steps: 10/every_steps: 20/' "$job"
id=$(ctl submit "$job")
[ -n "$id" ] || fail "no job id"
wait_for 180 committed_at_least "$id" 40 || fail "the job did not commit step 40: $(ctl status "$id")"
# A restart, so the charts have one to mark: kill rank 1, wait for attempt 2 to train on.
kill -9 "$(worker_pid "$id" 1)"
attempt_at_least() { [ "$(job_field "$1" "j.get('attempt',0)")" -ge "$2" ]; }
wait_for 120 attempt_at_least "$id" 2 || fail "no second attempt after the kill"
wait_for 120 state_is "$id" RUNNING || fail "attempt 2 is not running: $(ctl status "$id")"
resumed=$(job_field "$id" "j.get('progress',{}).get('last_committed_step',0)")
wait_for 180 step_at_least "$id" $((resumed + 30)) || fail "attempt 2 did not train on: $(ctl status "$id")"
http=$(grep -o 'metrics on http port [0-9]*' "$T/shardd.log" | tail -n 1 | awk '{print $NF}')
grep -q "dashboard http://127.0.0.1:$http/" "$T/shardd.log" || fail "shardd did not print the dashboard URL"
base="http://127.0.0.1:$http/"

browse() {  # browse EXTRA-FLAGS...: headless Chromium on $url, in a fresh profile
  timeout 120 "$CHROMIUM" --headless --no-sandbox --disable-gpu --disable-quic --no-first-run \
    --disable-background-networking --disable-component-update --disable-sync --disable-dev-shm-usage \
    --user-data-dir="$(mktemp -d "$T/chromium.XXXXXX")" --virtual-time-budget=6000 "$@" "$url" 2>>"$T/chromium.log"
}
# Without logging in, loopback included, the dashboard shows the login form.
url=$base
login=$(browse --dump-dom) || fail "chromium failed on the dashboard without a login"
grep -q 'name="token"' <<<"$login" || fail "the dashboard did not ask a loopback browser to log in: $login"
grep -q '<table id="jobs"' <<<"$login" && fail "the job list was shown without a login"
url=$(ctl dashboard "$id" --url "$base") || fail "shardctl dashboard failed"
[[ $url == "${base}login?nonce="*"&next="* ]] || fail "shardctl dashboard printed no login link: $url"
dom=$(browse --dump-dom) || fail "chromium --dump-dom failed: $(tail -n 5 "$T/chromium.log")"
echo "$dom" > "$OUT/dom.html"
points=$(grep -o 'id="chart-loss"[^>]*data-points="[0-9]*"' <<<"$dom" | grep -o '[0-9]*"$' | tr -d '"')
[ -n "$points" ] || fail "no loss chart in the DOM (saved in $OUT/dom.html)"
[ "$points" -ge 30 ] || fail "the loss chart shows $points points, expected >= 30"
for chart in lr grad_norm tokens_per_s loss_scale; do
  grep -q "id=\"chart-$chart\"" <<<"$dom" || fail "no $chart chart"
done
grep -q 'id="chart-rewards' <<<"$dom" && fail "an SFT job's page has a rewards chart (preference: jobs only)"
grep -q 'class="commit"' <<<"$dom" || fail "no checkpoint commit marked on the charts"
grep -q 'class="restart"' <<<"$dom" || fail "the restart is not marked on the charts"
grep -q "checkpoint_committed" <<<"$dom" || fail "the event timeline lacks checkpoint_committed"
grep -q '<table id="workers"' <<<"$dom" || fail "no workers table"
grep -q 'id="plan"' <<<"$dom" || fail "no admission plan"
grep -q "worker(s)" <<<"$dom" || fail "the plan text is missing"
grep -q '<span class="state RUNNING">RUNNING</span>' <<<"$dom" || fail "the job is not shown RUNNING"
echo "dashboard: the loss chart shows $points points"

# The link was used: a second browser cannot log in with it.
used=$(browse --dump-dom) || fail "chromium failed on a used login link"
grep -q "used already or has expired" <<<"$used" || fail "a used login link logged in again"
url=$(ctl dashboard "$id" --url "$base") || fail "shardctl dashboard failed"
browse --screenshot="$OUT/dashboard.png" --window-size=1280,900 >/dev/null || fail "chromium --screenshot failed"
[ -s "$OUT/dashboard.png" ] || fail "no screenshot written"
echo "screenshot: $OUT/dashboard.png"

# The job list page, logged in with a link that names no job.
url=$(ctl dashboard --url "$base") || fail "shardctl dashboard failed"
list=$(browse --dump-dom) || fail "chromium failed on the job list"
grep -q "#/job/$id" <<<"$list" || fail "the job list does not link the job"

# Rank 0's TensorBoard events (one file per attempt), read back by an
# independent reader. Attempt 1's file holds at least the steps of the
# checkpoint it was resumed from: the trainer flushes the events at each save.
ev=("$T/ckpt/dash/"events.out.tfevents.*)
[ -f "${ev[0]}" ] || fail "no TensorBoard event file under $T/ckpt/dash"
[ "${#ev[@]}" -ge 2 ] || fail "one TensorBoard file for two attempts: ${ev[*]}"
python3 "$SRC/tests/e2e/control_plane/read_tfevents.py" 40 "${ev[0]}" || fail "attempt 1's TensorBoard file lacks the committed steps"
python3 "$SRC/tests/e2e/control_plane/read_tfevents.py" 60 "${ev[@]}" || fail "the TensorBoard files do not read back"
ctl cancel "$id" >/dev/null
echo PASS
