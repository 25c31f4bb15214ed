#!/usr/bin/env bash
# The DPO demo: builds what it runs, then
#
#   shardctl run configs/jobs/tiny-dpo-cpu.yaml
#
# which trains the tiny SFT demo's export (runs/tiny-sft-cpu/hf: the string
# reverser of deploy/local/demo.sh, trained first here if it is missing) with
# DPO on 2 CPU workers, fully sharded, on generated pairs of 7-letter strings
# (configs/data/make_dpo_demo.py: chosen the correct reversal, rejected a
# plausible wrong one). The reference log-probs are computed once, before
# step 1, with the starting weights. Before and after, on 200 held-out pairs:
# the reward accuracy (tools/pair_eval: the fraction where the chosen reply's
# log-prob margin over the reference beats the rejected one's) and the exact
# match of greedy answers (shardctl eval, as the SFT demo), also on the SFT
# demo's own held-out 3-6 letter strings.
set -euo pipefail
cd "$(dirname "$0")/../.."
bash deploy/local/install-deps.sh
SHARDD_BUILD_TARGETS="shardctl shardd-worker shardd pair_eval" bash deploy/local/build.sh
CTL=./build/coordinator/ctl/shardctl
EVAL_PAIRS=./build/tools/pair_eval
export SHARDD_STATE_DIR=runs/.shardd
export SHARDD_COORDINATOR=127.0.0.1:${SHARDD_DEMO_PORT:-7071}
t_start=$(date +%s)
mkdir -p runs/data

python3 configs/data/make_sft_demo.py runs/data/sft-reverse.jsonl \
  --eval-out runs/data/sft-reverse-eval.jsonl --eval-rows 200
if [ ! -f runs/tiny-sft-cpu/hf/config.json ]; then
  echo "== the starting model: shardctl run configs/jobs/tiny-sft-cpu.yaml (the SFT demo, no kill) =="
  rm -rf runs/checkpoints/tiny-sft-cpu
  $CTL run configs/jobs/tiny-sft-cpu.yaml 2>&1 | grep -E "SUCCEEDED|FAILED" || true
fi
# 4800 training pairs; 200 held-out pairs (strings no training pair has), and
# the same held-out prompts as prompt/response rows for exact match.
python3 configs/data/make_dpo_demo.py runs/data/dpo-reverse.jsonl \
  --eval-out runs/data/dpo-reverse-eval.jsonl --eval-sft-out runs/data/dpo-reverse-eval-sft.jsonl
echo "== DPO pairs, e.g. $(head -n 1 runs/data/dpo-reverse.jsonl) =="

scores() {  # scores LABEL MODEL
  echo "== $1: $2 =="
  echo -n "held-out pairs (7 letters):   "
  $EVAL_PAIRS --policy "$2" --reference runs/tiny-sft-cpu/hf --data runs/data/dpo-reverse-eval.jsonl | sed -n 2p
  echo -n "                              "
  $EVAL_PAIRS --policy "$2" --reference runs/tiny-sft-cpu/hf --data runs/data/dpo-reverse-eval.jsonl | sed -n 3p
  echo -n "exact match, 7 letters:       "
  $CTL eval --model "$2" --data runs/data/dpo-reverse-eval-sft.jsonl | tail -n 1
  echo -n "exact match, 3-6 letters:     "
  $CTL eval --model "$2" --data runs/data/sft-reverse-eval.jsonl | tail -n 1
}
scores "before (the SFT model is its own reference: every reward margin is 0)" runs/tiny-sft-cpu/hf

rm -rf runs/checkpoints/tiny-dpo-cpu runs/tiny-dpo-cpu
echo "== shardctl run configs/jobs/tiny-dpo-cpu.yaml (2 workers, full_shard, dpo beta 0.1) =="
out=runs/dpo-demo-run.log
t_dpo=$(date +%s)
$CTL run configs/jobs/tiny-dpo-cpu.yaml >"$out" 2>&1 || { tail -n 20 "$out"; exit 1; }
grep -E "SUCCEEDED" "$out" | tail -n 1
id=$(grep -o '^job [^ ]* SUCCEEDED' "$out" | tail -n 1 | cut -d' ' -f2)
grep -hE "reference log-probs|step (1|100|200|300)/300" "$SHARDD_STATE_DIR/jobs/$id"/attempt_*/rank_0.log | sed 's/^.*\] //'
dpo_s=$(( $(date +%s) - t_dpo ))

scores "after" runs/tiny-dpo-cpu/hf
echo "DPO demo done in $(( $(date +%s) - t_start )) s after the build ($dpo_s s the DPO job)"
