#!/usr/bin/env bash
# The mixture-of-experts demo: builds what it runs, then
#
#   shardctl run configs/jobs/tiny-moe-sft-cpu.yaml
#
# the same path as the README demo (shardctl starts a local coordinator,
# submits the job and watches it): tiny-qwen3-moe (8 experts, top-2) learns
# to reverse short strings on 2 CPU workers, full_shard, with the
# load-balancing loss. At the end it prints the training loss curve from the
# run's log and the expert load of the exported model on held-out rows
# (tests/bench/moe_bench --balance: each expert's share of every sparse
# layer's assignments, balanced = 1/8). Greedy generation and the exact-match
# eval are not built for MoE yet (docs/moe.md).
set -euo pipefail
cd "$(dirname "$0")/../.."
bash deploy/local/install-deps.sh
SHARDD_BUILD_TARGETS="shardctl shardd-worker shardd moe_bench" bash deploy/local/build.sh
CTL=./build/coordinator/ctl/shardctl
export SHARDD_STATE_DIR=runs/.shardd
export SHARDD_COORDINATOR=127.0.0.1:${SHARDD_DEMO_PORT:-7071}
t_start=$(date +%s)
mkdir -p runs/data
python3 configs/data/make_sft_demo.py runs/data/sft-reverse.jsonl \
  --eval-out runs/data/sft-reverse-eval.jsonl --eval-rows 200
job=configs/jobs/tiny-moe-sft-cpu.yaml name=tiny-moe-sft-cpu
rm -rf "runs/checkpoints/$name" "runs/$name"
echo "== shardctl plan $job =="
$CTL plan "$job" | sed -n '1,4p'
echo "== shardctl run $job (2 workers, full_shard) =="
out=runs/demo-moe-run.log
$CTL run "$job" 2>&1 | tee "$out"
grep -q "^job .* SUCCEEDED" "$out" || { echo "demo_moe: the job did not succeed (see $out)" >&2; exit 1; }
echo "== committed checkpoints =="
$CTL checkpoints "runs/checkpoints/$name"
echo "== expert balance of runs/$name/hf on the held-out rows =="
./build/tests/bench/moe_bench --balance "runs/$name/hf" runs/data/sft-reverse-eval.jsonl
echo "demo_moe done in $(( $(date +%s) - t_start )) s (after the build)"
