#!/usr/bin/env bash
# See the experts (docs/moe.md, "Metrics"): a tiny MoE job (preset
# tiny-qwen3-moe: 8 experts, top-2) runs through shardd on two CPU ranks;
# `shardctl metrics --json` carries moe/aux_loss, the imbalance figures and
# moe/expert_load (per sparse layer, 8 shares summing to 1) on every step, the
# table shows the moe/ columns, /metrics exports shardd_job_moe_aux_loss, the
# run report holds the router charts and final figures, and the dashboard in
# headless Chromium draws one expert-load heatmap per sparse layer (when
# chromium is installed).
source "$(dirname "$0")/lib.sh"
mkdir -p "$T/data"
python3 - "$T/data/train.jsonl" <<'PY'
import json, random, sys
rng = random.Random(5)
with open(sys.argv[1], "w") as f:
    for _ in range(64):
        s = "".join(rng.choice("abcdefgh") for _ in range(rng.randint(3, 6)))
        f.write(json.dumps({"prompt": f"rev {s}=", "response": s[::-1]}) + "\n")
PY
cat > "$T/moe.yaml" <<YAML
name: moe
model: {preset: tiny-qwen3-moe}
data: {jsonl: data/train.jsonl, tokenizer: byte, template: plain, seq_len: 32, packing: true}
train: {steps: 6, global_batch: 8, micro_batch: 2, lr: 3.0e-3, warmup_steps: 2, log_every: 1000}
parallel: {strategy: full_shard, world_size: 2, comm_timeout_s: 20}
moe: {aux_loss_coef: 0.01}
checkpoint: {dir: ckpt, every_steps: 0}
resources: {device: cpu}
YAML

start_shardd
id=$(ctl submit moe.yaml)
[ -n "$id" ] || fail "no job id"
out=$(ctl watch "$id") || fail "watch failed: $out"
state_is "$id" SUCCEEDED || fail "the MoE job did not succeed: $(ctl status "$id")"

ctl metrics "$id" --json > "$T/metrics.jsonl" || fail "metrics --json failed"
python3 - "$T/metrics.jsonl" <<'PY' || fail "metrics --json lacks the router figures: $(head -n 2 "$T/metrics.jsonl")"
import json, sys
rows = [json.loads(line) for line in open(sys.argv[1])]
assert [r["step"] for r in rows] == list(range(1, 7)), [r["step"] for r in rows]
for r in rows:
    assert r["moe_layers"] >= 1 and r["moe/aux_loss"] > 0, r
    load = r["moe/expert_load"]
    assert len(load) == r["moe_layers"] and all(len(layer) == 8 for layer in load), load
    assert all(abs(sum(layer) - 1) < 1e-9 for layer in load), load
    worst = max(max(layer) * 8 for layer in load)
    assert abs(r["moe/imbalance_max"] - worst) < 1e-9 and r["moe/imbalance_max"] >= r["moe/imbalance_mean"] >= 1, r
print("moe/aux_loss", rows[0]["moe/aux_loss"], "->", rows[-1]["moe/aux_loss"], "imbalance_max", rows[-1]["moe/imbalance_max"])
PY
ctl metrics "$id" | head -n 1 | grep -q "moe/aux_loss moe/imbalance_max moe/imbalance_mean" ||
  fail "the metrics table has no moe/ columns: $(ctl metrics "$id" | head -n 1)"
prom=$(prometheus_metrics) || fail "/metrics did not answer"
grep -q "^shardd_job_moe_aux_loss{job_id=\"$id\"} " <<<"$prom" || fail "/metrics lacks shardd_job_moe_aux_loss"

report=$T/ckpt/moe/report.html
# shardd writes the report after the job ends (off the watch's answer): wait for it.
wait_for 60 test -f "$report" || fail "no run report at $report"
grep -q 'id="chart-moe_aux_loss"' "$report" || fail "the report has no aux-loss chart"
grep -q '"moe":{' "$report" || fail "the report's final figures have no moe"

CHROMIUM=$(command -v chromium || command -v chromium-browser || true)
if [ -n "$CHROMIUM" ]; then
  http=$(grep -o 'metrics on http port [0-9]*' "$T/shardd.log" | tail -n 1 | awk '{print $NF}')
  url=$(ctl dashboard "$id" --url "http://127.0.0.1:$http/") || fail "shardctl dashboard failed"
  dom=$(timeout 120 "$CHROMIUM" --headless --no-sandbox --disable-gpu --disable-quic --no-first-run \
    --disable-background-networking --disable-component-update --disable-sync --disable-dev-shm-usage \
    --user-data-dir="$(mktemp -d "$T/chromium.XXXXXX")" --virtual-time-budget=6000 --dump-dom "$url" \
    2>>"$T/chromium.log") || fail "chromium --dump-dom failed: $(tail -n 5 "$T/chromium.log")"
  grep -q 'id="expert_load_0"[^>]*data-cells="48"' <<<"$dom" || fail "no expert-load heatmap of 6 steps x 8 experts"
  grep -q 'id="chart-moe_aux_loss"[^>]*data-points="6"' <<<"$dom" || fail "no aux-loss chart"
  grep -q 'id="chart-moe_imbalance"' <<<"$dom" || fail "no imbalance chart"
  echo "dashboard: the expert-load heatmap and router charts are drawn"
else
  echo "(chromium is not installed: the dashboard page is not checked here)"
fi
echo PASS
