#!/usr/bin/env bash
# The run report: `shardctl run` ends a job and <run dir>/report.html exists,
# self-contained, with the curves' points (read back by read_report.py, which
# checks the SVG against the embedded data), the events, the plan and the
# final figures; `shardctl report JOB` rewrites it offline from the state dir
# (and to --out); a report of a job a shardd daemon ran is written when it
# ends. A Chromium screenshot goes to the test output when chromium exists.
source "$(dirname "$0")/lib.sh"
OUT=${SHARDD_TEST_OUTPUT_DIR:-$BIN/test-output}/run_report
mkdir -p "$OUT"
job=$(make_job rep)
port=$(python3 -c "import socket; s=socket.socket(); s.bind(('127.0.0.1',0)); print(s.getsockname()[1])")
ADDR=127.0.0.1:$port
out=$(cd "$T" && "$CTL_BIN" --coordinator "$ADDR" --state-dir "$STATE" run "$job" 2>&1) || fail "run failed: $out"
id=$(echo "$out" | grep -o 'submitted [^ ]*' | head -n 1 | cut -d' ' -f2)
report=$T/ckpt/rep/report.html
[ -f "$report" ] || fail "no $report after the run"
python3 "$SRC/tests/e2e/control_plane/read_report.py" "$report" 40 || fail "the report does not read back"
cp "$report" "$OUT/report.html"

# Regenerated offline (nothing answers at ADDR any more).
rm "$report"
o=$(ctl report "$id" 2>"$T/err") || fail "shardctl report failed: $(cat "$T/err")"
grep -q "read-only" "$T/err" || fail "offline report did not say so"
[ "$o" = "$report" ] || fail "report printed '$o', expected $report"
python3 "$SRC/tests/e2e/control_plane/read_report.py" "$report" 40 || fail "the regenerated report does not read back"
j=$(ctl report "$id" --out "$T/copy.html" --json 2>/dev/null) || fail "report --out --json failed"
python3 -c "import json,sys; d=json.loads(sys.argv[1]); assert d['path']=='$T/copy.html' and d['steps']==40, d" "$j" \
  || fail "report --json: $j"
cmp <(grep -o '"metrics":.*"final"' "$report") <(grep -o '"metrics":.*"final"' "$T/copy.html") \
  || fail "two reports of the same ended job differ in their curves"
if ctl report no-such-job >/dev/null 2>"$T/err"; then fail "report of an unknown job succeeded"; fi

# A daemon writes the report when the job ends.
start_shardd
job2=$(make_job rep2)
id2=$(ctl submit "$job2")
ctl watch "$id2" >/dev/null || fail "watch: $id2 did not succeed"
wait_for 30 test -f "$T/ckpt/rep2/report.html" || fail "shardd wrote no report for $id2"
python3 "$SRC/tests/e2e/control_plane/read_report.py" "$T/ckpt/rep2/report.html" 40 || fail "shardd's report"

CHROMIUM=$(command -v chromium || command -v chromium-browser || true)
if [ -n "$CHROMIUM" ]; then
  timeout 120 "$CHROMIUM" --headless --no-sandbox --disable-gpu --no-first-run --disable-background-networking \
    --disable-component-update --disable-sync --disable-dev-shm-usage --user-data-dir="$T/chromium" \
    --screenshot="$OUT/report.png" --window-size=1280,1400 "file://$report" >/dev/null 2>>"$T/chromium.log" \
    || fail "chromium --screenshot failed: $(tail -n 5 "$T/chromium.log")"
  [ -s "$OUT/report.png" ] || fail "no screenshot"
  echo "screenshot: $OUT/report.png"
fi
echo PASS
