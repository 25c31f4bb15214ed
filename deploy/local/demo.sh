#!/usr/bin/env bash
# The demo: installs what is missing, builds, then runs
#
#   shardctl run configs/jobs/tiny-sft-cpu.yaml
#
# which (no coordinator answering yet) starts a local coordinator inside
# shardctl, submits the job and watches it: the tiny Llama (~0.9M parameters)
# is fine-tuned to reverse short strings (prompt/response JSONL, byte
# tokenizer, plain template, packed rows) on 2 CPU workers with fully sharded
# parameters, checkpointing every 25 steps (the coordinator commits each step
# once both workers have reported their shards). Partway through, this script
# kills one worker with SIGKILL; the coordinator sees the exit, ends the
# attempt and starts the next one from the newest committed checkpoint by
# itself. At the end the exported model answers held-out prompts and the
# exact-match accuracy is printed.
#
# SHARDD_DEMO=pretrain runs the token-stream pretraining job (tiny-cpu) instead.
set -euo pipefail
cd "$(dirname "$0")/../.."
bash deploy/local/install-deps.sh
# Only what the demo runs (shardctl starts the coordinator in-process and the
# workers); deploy/local/test.sh builds everything else.
SHARDD_BUILD_TARGETS="shardctl shardd-worker shardd" bash deploy/local/build.sh
CTL=./build/coordinator/ctl/shardctl
export SHARDD_STATE_DIR=runs/.shardd          # the embedded coordinator's database, token and logs
export SHARDD_COORDINATOR=127.0.0.1:${SHARDD_DEMO_PORT:-7071}
t_start=$(date +%s)
mkdir -p runs/data

if [ "${SHARDD_DEMO:-sft}" = pretrain ]; then
  job=configs/jobs/tiny-cpu.yaml name=tiny-cpu kill_at=70
  python3 configs/data/make_tokens.py runs/data/phrases.u32
else
  job=configs/jobs/tiny-sft-cpu.yaml name=tiny-sft-cpu kill_at=120
  # 20000 training rows; 200 held-out rows whose strings are not in the training set.
  python3 configs/data/make_sft_demo.py runs/data/sft-reverse.jsonl \
    --eval-out runs/data/sft-reverse-eval.jsonl --eval-rows 200
  echo "== SFT: reverse strings, e.g. $(head -n 1 runs/data/sft-reverse.jsonl) =="
fi
rm -rf "runs/checkpoints/$name" "runs/$name"

echo "== shardctl run $job (2 workers, full_shard); the demo will kill a worker at step $kill_at =="
out=runs/demo-run.log
$CTL run "$job" 2>&1 | tee "$out" &
run_pid=$!

# The demo's part: find the job, wait for step $kill_at, kill -9 rank 1.
field() { $CTL status "$1" --json 2>/dev/null | python3 -c "import json,sys; j=json.load(sys.stdin); print($2)"; }
id=""
for _ in $(seq 1 600); do
  id=$(grep -o '^submitted [^ ]*' "$out" | cut -d' ' -f2 || true)
  [ -n "$id" ] && break
  sleep 0.1
done
if [ -n "$id" ]; then
  for _ in $(seq 1 3000); do
    step=$(field "$id" "j.get('progress',{}).get('step',0)" || echo 0)
    if [ "${step:-0}" -ge "$kill_at" ]; then
      victim=$(field "$id" "[w['pid'] for w in j.get('workers',[]) if w.get('rank',0)==1][0]" || true)
      echo ">> demo: kill -9 rank 1 (pid $victim) at step $step"
      kill -9 "$victim" || true
      break
    fi
    sleep 0.2
  done
fi
wait "$run_pid"

echo "== committed checkpoints =="
$CTL checkpoints "runs/checkpoints/$name"
if [ "$name" = tiny-sft-cpu ]; then
  echo "== held-out exact match of greedy answers (runs/tiny-sft-cpu/hf on runs/data/sft-reverse-eval.jsonl) =="
  $CTL eval --model runs/tiny-sft-cpu/hf --data runs/data/sft-reverse-eval.jsonl --show 5
else
  echo "== evaluating the exported model (runs/tiny-cpu/hf) =="
  $CTL eval --model runs/tiny-cpu/hf --tokens runs/data/phrases.u32 --seq-len 64 --max-windows 256
fi
echo "demo done in $(( $(date +%s) - t_start )) s (after the build): $(grep '^job .* SUCCEEDED' "$out" | tail -n 1)"
