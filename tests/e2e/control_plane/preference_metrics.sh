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
# same keys. With eval: on 8 held-out pairs every 4 steps, steps 4, 8 and 12
# also carry TRL's eval/rewards/*, eval/logps/* (and eval_pairs) in the same
# places: shardctl metrics' eval/ keys and columns, the report's eval rewards
# charts and final figures, the dashboard's eval rewards chart, the worker's
# --metrics line. SFT output without these: metrics.sh, dashboard.sh,
# run_report.sh.
source "$(dirname "$0")/lib.sh"
mkdir -p "$T/data"
# "rev abc=" -> chosen "cba", rejected the word as it was (tests/unit/train/preference_train_test.cc).
python3 - "$T/data/pairs.jsonl" "$T/data/eval_pairs.jsonl" <<'PY'
import json, random, sys
rng = random.Random(3)
for path, n in ((sys.argv[1], 64), (sys.argv[2], 8)):  # training pairs, then held-out ones
    with open(path, "w") as f:
        for _ in range(n):
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
eval: {data: data/eval_pairs.jsonl, every_steps: 4, max_samples: 8}
YAML

start_shardd
id=$(ctl submit pref.yaml)
[ -n "$id" ] || fail "no job id"
out=$(ctl watch "$id") || fail "watch failed: $out"
state_is "$id" SUCCEEDED || fail "the DPO job did not succeed: $(ctl status "$id")"

# The last step's reward accuracy and margin in the status line, its JSON and
# /metrics (the job stays on /metrics for --metrics-finished-grace-s).
ctl status "$id" | grep -q "reward_acc [0-9.]* margin -\?[0-9.]*" || fail "no rewards in the status line: $(ctl status "$id")"
[ "$(job_field "$id" "j['progress']['pairs']")" = 8 ] || fail "status --json has no pairs: $(ctl status "$id" --json)"
[ "$(job_field "$id" "j['progress']['eval_step']")" = 12 ] || fail "status --json has no eval_step 12"
prom=$(prometheus_metrics) || fail "/metrics did not answer"
for s in shardd_job_rewards_accuracies shardd_job_rewards_margins shardd_job_eval_loss; do
  grep -q "^$s{job_id=\"$id\"} " <<<"$prom" || fail "/metrics lacks $s"
done
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
# eval: on the held-out pairs at steps 4, 8 and 12 (every_steps and the last step).
eval_keys = tuple("eval/" + k for k in keys) + ("eval/nll",)
for r in rows:
    if r["step"] % 4:
        assert r["eval_pairs"] == 0 and all(r[k] is None for k in eval_keys), r
        continue
    assert r["eval_pairs"] == 8 and r["eval_samples"] == 8 and isinstance(r["eval_loss"], float), r
    assert all(isinstance(r[k], float) for k in eval_keys), r
    assert 0 <= r["eval/rewards/accuracies"] <= 1 and r["eval/logps/chosen"] < 0 and r["eval/logps/rejected"] < 0, r
    assert abs(r["eval/rewards/margins"] - (r["eval/rewards/chosen"] - r["eval/rewards/rejected"])) < 1e-9, r
    assert r["eval/nll"] == 0, r
ev = [r for r in rows if r["eval_pairs"]]
assert [r["step"] for r in ev] == [4, 8, 12], [r["step"] for r in ev]
print("eval/rewards/margins", [round(r["eval/rewards/margins"], 4) for r in ev],
      "eval/rewards/accuracies", [r["eval/rewards/accuracies"] for r in ev])
PY
table=$(ctl metrics "$id") || fail "metrics failed"
echo "$table" | head -n 2
echo "$table" | head -n 1 | grep -q "TOKENS/S .*rewards/chosen .*rewards/rejected .*rewards/accuracies .*rewards/margins .*logps/chosen .*logps/rejected$" ||
  fail "the table lacks TRL's columns: $(echo "$table" | head -n 1)"
echo "$table" | head -n 1 | grep -q "EVAL_LOSS  eval/rewards/chosen .*eval/rewards/accuracies .*eval/logps/rejected$" ||
  fail "the table lacks TRL's eval/ columns: $(echo "$table" | head -n 1)"

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
assert points.get("eval_rewards") == 9 and points.get("eval_rewards_accuracies") == 3, points
e = final["preference_eval"]
assert e["step"] == 12 and e["eval_pairs"] == 8 and 0 <= e["eval_rewards_accuracies"] <= 1, e
assert "eval/rewards/accuracies</span>" in page
print("report: eval rewards chart", points["eval_rewards"], "points; final eval/rewards/accuracies",
      e["eval_rewards_accuracies"])
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
  grep -q 'id="chart-eval_rewards"[^>]*data-points="9"' <<<"$dom" || fail "no eval rewards chart (3 lines x 3 evals)"
  grep -q 'id="chart-eval_rewards_accuracies"[^>]*data-points="3"' <<<"$dom" || fail "no eval reward accuracy chart"
  grep -q 'id="chart-eval_loss"[^>]*data-points="3"' <<<"$dom" || fail "no eval loss chart (the pair loss at 3 evals)"
  grep -q 'id="chart-eval_exact_match"' <<<"$dom" && fail "an exact match chart for pairs (never computed for them)"
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
assert "eval_pairs" not in rows[0], rows[0]  # the last step (2) evaluates, step 1 does not
e = rows[1]
assert e["eval_pairs"] == 8 and 0 <= e["eval/rewards/accuracies"] <= 1 and e["eval/logps/chosen"] < 0, e
assert all(k in e for k in ("eval_loss", "eval/rewards/chosen", "eval/rewards/rejected", "eval/rewards/margins",
                            "eval/logps/rejected", "eval/nll")), e
PY
echo PASS
