#!/usr/bin/env bash
# A tiny DPO job's metrics, everywhere a user reads them: shardd runs it on
# two CPU ranks; `shardctl metrics` (JSON and table) carries TRL's
# rewards/chosen, rewards/rejected, rewards/accuracies, rewards/margins,
# logps/chosen and logps/rejected on every step (step 1: the policy is its
# reference, so the rewards are 0 and the loss log 2; the last step prefers
# the chosen replies); the run report the daemon writes has the rewards,
# accuracy and log-prob charts and the last step's figures; the dashboard in
# headless Chromium draws the rewards chart with its three lines (when
# chromium is installed); and a standalone worker's --metrics line has the
# same keys. SFT output without these: metrics.sh, dashboard.sh, run_report.sh.
source "$(dirname "$0")/lib.sh"
mkdir -p "$T/data"
# "rev abc=" -> chosen "cba", rejected the word as it was (tests/unit/train/preference_train_test.cc).
python3 - "$T/data/pairs.jsonl" <<'PY'
import json, random, sys
rng = random.Random(3)
with open(sys.argv[1], "w") as f:
    for _ in range(64):
        s = "".join(rng.choice("abcdefgh") for _ in range(rng.randint(3, 6)))
        rev = s[::-1]
        f.write(json.dumps({"prompt": f"rev {s}=", "chosen": rev, "rejected": s + "a" if rev == s else s}) + "\n")
PY
cat > "$T/pref.yaml" <<YAML
name: pref
model: {preset: tiny}
data: {jsonl: data/pairs.jsonl, tokenizer: byte, template: plain, seq_len: 32, shuffle: true}
train: {steps: 12, global_batch: 8, micro_batch: 4, lr: 3.0e-3, warmup_steps: 0, schedule: constant, precision: fp32, seed: 7, log_every: 4}
parallel: {strategy: full_shard, world_size: 2, comm_timeout_s: 20}
checkpoint: {dir: ckpt, every_steps: 6, keep_last: 2, async: true}
resources: {device: cpu}
restart: {max_restarts: 1, backoff_s: 0.2, heartbeat_timeout_s: 4, hang_timeout_s: 60}
preference: {method: dpo, beta: 0.5}
YAML

start_shardd
id=$(ctl submit pref.yaml)
[ -n "$id" ] || fail "no job id"
out=$(ctl watch "$id") || fail "watch failed: $out"
state_is "$id" SUCCEEDED || fail "the DPO job did not succeed: $(ctl status "$id")"

ctl metrics "$id" --json > "$T/metrics.jsonl" || fail "metrics --json failed"
python3 - "$T/metrics.jsonl" <<'PY' || fail "metrics --json is wrong: $(head -n 3 "$T/metrics.jsonl")"
import json, math, sys
rows = [json.loads(line) for line in open(sys.argv[1])]
assert [r["step"] for r in rows] == list(range(1, 13)), [r["step"] for r in rows]
keys = ("rewards/chosen", "rewards/rejected", "rewards/accuracies", "rewards/margins", "logps/chosen", "logps/rejected")
for r in rows:
    assert r["pairs"] == 8, r
    assert all(isinstance(r[k], float) for k in keys), r
    assert 0 <= r["rewards/accuracies"] <= 1 and r["logps/chosen"] < 0 and r["logps/rejected"] < 0, r
    assert abs(r["rewards/margins"] - (r["rewards/chosen"] - r["rewards/rejected"])) < 1e-9, r
    assert r["nll"] == 0, r  # dpo reports none
first, last = rows[0], rows[-1]
assert abs(first["loss"] - math.log(2)) < 1e-6 and abs(first["rewards/chosen"]) < 1e-6, first
assert last["rewards/margins"] > 0 and last["loss"] < math.log(2), ("DPO did not learn", last)
print(f"rewards/margins {first['rewards/margins']:.4f} -> {last['rewards/margins']:.4f}, "
      f"rewards/accuracies {first['rewards/accuracies']:.3f} -> {last['rewards/accuracies']:.3f}")
PY
table=$(ctl metrics "$id") || fail "metrics failed"
echo "$table" | head -n 2
echo "$table" | head -n 1 | grep -q "TOKENS/S .*rewards/chosen .*rewards/rejected .*rewards/accuracies .*rewards/margins .*logps/chosen .*logps/rejected$" ||
  fail "the table lacks TRL's columns: $(echo "$table" | head -n 1)"

# The report shardd writes when the job ends.
report=$T/ckpt/pref/report.html
wait_for 30 test -f "$report" || fail "shardd wrote no report for $id"
python3 "$SRC/tests/e2e/control_plane/read_report.py" "$report" 12 || fail "the report does not read back"
python3 - "$report" <<'PY' || fail "the report lacks the preference charts or figures"
import json, re, sys
page = open(sys.argv[1], encoding="utf-8").read()
data = json.loads(re.search(r'<script type="application/json" id="report-data">(.*?)</script>', page, re.S).group(1))
m, final = data["metrics"], data["final"]
for key in ("rewards_chosen", "rewards_rejected", "rewards_accuracies", "rewards_margins", "logps_chosen", "logps_rejected"):
    assert len(m[key]) == len(m["steps"]) == 12 and None not in m[key], key
points = {c: int(n) for c, n in re.findall(r'<svg id="chart-([a-z_]+)"[^>]*data-points="(\d+)"', page)}
assert points.get("rewards") == 36 and points.get("rewards_accuracies") == 12 and points.get("logps") == 24, points
for s in ("chosen", "rejected", "margins"):
    assert f'data-series="{s}"' in page, s
p = final["preference"]
assert p["step"] == 12 and p["pairs"] == 8 and p["rewards_margins"] == m["rewards_margins"][-1], p
print("report: rewards chart", points["rewards"], "points; final rewards/accuracies", p["rewards_accuracies"])
PY

CHROMIUM=$(command -v chromium || command -v chromium-browser || true)
if [ -n "$CHROMIUM" ]; then
  http=$(grep -o 'metrics on http port [0-9]*' "$T/shardd.log" | tail -n 1 | awk '{print $NF}')
  url=$(ctl dashboard "$id" --url "http://127.0.0.1:$http/") || fail "shardctl dashboard failed"
  dom=$(timeout 120 "$CHROMIUM" --headless --no-sandbox --disable-gpu --disable-quic --no-first-run \
    --disable-background-networking --disable-component-update --disable-sync --disable-dev-shm-usage \
    --user-data-dir="$(mktemp -d "$T/chromium.XXXXXX")" --virtual-time-budget=6000 --dump-dom "$url" \
    2>>"$T/chromium.log") || fail "chromium --dump-dom failed: $(tail -n 5 "$T/chromium.log")"
  points=$(grep -o 'id="chart-rewards"[^>]*data-points="[0-9]*"' <<<"$dom" | grep -o '[0-9]*"$' | tr -d '"')
  [ "$points" = 36 ] || fail "the dashboard's rewards chart shows '$points' points, expected 36 (3 lines x 12 steps)"
  for s in chosen rejected margins; do
    grep -q "data-series=\"$s\"" <<<"$dom" || fail "the rewards chart has no $s line"
  done
  grep -q 'id="chart-rewards_accuracies"[^>]*data-points="12"' <<<"$dom" || fail "no reward accuracy chart"
  grep -q 'id="chart-loss"' <<<"$dom" || fail "no loss chart beside the rewards"
  echo "dashboard: the rewards chart shows $points points"
else
  echo "(chromium is not installed: the dashboard page is not checked here; dashboard.sh skips too)"
fi

# A standalone worker's --metrics line (one rank, two steps).
(cd "$T" && "$SHARDD_WORKER_BIN" --standalone --config pref.yaml --set parallel.world_size=1 --set train.steps=2 \
  --set checkpoint.dir=standalone --metrics "$T/worker.jsonl" --log-level warn) > "$T/worker.log" 2>&1 ||
  fail "the standalone worker failed: $(tail -n 5 "$T/worker.log")"
python3 - "$T/worker.jsonl" <<'PY' || fail "the worker's --metrics lines are wrong: $(cat "$T/worker.jsonl")"
import json, sys
rows = [json.loads(line) for line in open(sys.argv[1])]
assert [r["step"] for r in rows] == [1, 2], rows
for r in rows:
    assert r["pairs"] == 8 and 0 <= r["rewards/accuracies"] <= 1 and r["logps/chosen"] < 0, r
    assert all(k in r for k in ("rewards/chosen", "rewards/rejected", "rewards/margins", "logps/rejected", "nll")), r
PY
echo PASS
