#!/usr/bin/env bash
# The demo: installs what is missing, builds, then
#  1. pretrains a tiny Llama on a synthetic token stream with 2 CPU workers,
#     fully sharded parameters and checkpoints every 20 steps. Partway through,
#     the demo kills one worker with SIGKILL; the surviving rank fails fast, the
#     launch is restarted and resumes from the last committed checkpoint. It
#     then evaluates the exported model and samples from it.
#  2. fine-tunes (SFT) the tiny model on a synthetic string-reversal task
#     (prompt/response JSONL, byte tokenizer, plain template, packed rows),
#     again killing a worker partway and resuming, and reports the exact-match
#     accuracy of greedy answers on held-out rows.
# SHARDD_DEMO=pretrain|sft runs one part only (default: both).
#
# (Until the coordinator lands, this script plays its part: it notices the
# failure and starts the next attempt.)
set -euo pipefail
cd "$(dirname "$0")/../.."
bash deploy/local/install-deps.sh
bash deploy/local/build.sh
CTL=./build/coordinator/ctl/shardctl
part="${SHARDD_DEMO:-all}"
t_start=$(date +%s)

# run_killed JOB NAME KILL_AT: launches JOB on 2 workers, SIGKILLs rank 1 once
# it reports step KILL_AT, then launches again, which resumes from the newest
# committed checkpoint.
run_killed() {
  local job=$1 name=$2 kill_at=$3
  local metrics=runs/demo-metrics/$name
  rm -rf "runs/checkpoints/$name" "runs/$name" "$metrics"
  mkdir -p "$metrics"
  echo "== $name, attempt 1: 2 workers, full_shard; a worker will be killed at step $kill_at =="
  $CTL launch "$job" --metrics-prefix "$metrics/a1-rank" &
  local launcher=$! victim=""
  for _ in $(seq 1 3000); do
    if [ -f "$metrics/a1-rank1.jsonl" ] && [ "$(wc -l < "$metrics/a1-rank1.jsonl")" -ge "$kill_at" ]; then
      victim=$(pgrep -f -- "--config $job --rank 1 --world 2 --rendezvous" | head -n 1 || true)
      break
    fi
    sleep 0.1
  done
  if [ -n "$victim" ]; then
    echo ">> demo: kill -9 rank 1 (pid $victim) at step $(wc -l < "$metrics/a1-rank1.jsonl")"
    kill -9 "$victim"
  fi
  if wait "$launcher"; then echo "attempt 1 finished without a failure (the kill came too late)"; fi
  echo "== committed checkpoints after the failure =="
  $CTL checkpoints "runs/checkpoints/$name"
  echo "== $name, attempt 2: same command; resumes from the newest committed step =="
  $CTL launch "$job" --metrics-prefix "$metrics/a2-rank"
  echo "final step: $(tail -n 1 "$metrics/a2-rank0.jsonl")"
}

if [ "$part" != sft ]; then
  mkdir -p runs/data
  python3 configs/data/make_tokens.py runs/data/phrases.u32
  run_killed configs/jobs/tiny-cpu.yaml tiny-cpu 70
  echo "== evaluating the exported model (runs/tiny-cpu/hf) =="
  $CTL eval --model runs/tiny-cpu/hf --tokens runs/data/phrases.u32 --seq-len 64 --max-windows 256
  echo "== greedy continuation of a phrase from the data =="
  prompt=$(python3 -c "import struct;print(','.join(map(str,struct.unpack('<8I',open('runs/data/phrases.u32','rb').read(32)))))")
  echo "prompt:    $prompt"
  echo "generated: $($CTL generate --model runs/tiny-cpu/hf --prompt-tokens "$prompt" --max-new 16)"
  echo "data:      $(python3 -c "import struct;print(','.join(map(str,struct.unpack('<24I',open('runs/data/phrases.u32','rb').read(96))[8:])))")"
fi

if [ "$part" != pretrain ]; then
  mkdir -p runs/data
  # 20000 training rows; 200 held-out rows whose strings are not in the training set.
  python3 configs/data/make_sft_demo.py runs/data/sft-reverse.jsonl \
    --eval-out runs/data/sft-reverse-eval.jsonl --eval-rows 200
  echo "== SFT: reverse strings, e.g. $(head -n 1 runs/data/sft-reverse.jsonl) =="
  run_killed configs/jobs/tiny-sft-cpu.yaml tiny-sft-cpu 120
  echo "== held-out exact match of greedy answers (runs/tiny-sft-cpu/hf on runs/data/sft-reverse-eval.jsonl) =="
  $CTL eval --model runs/tiny-sft-cpu/hf --data runs/data/sft-reverse-eval.jsonl --show 5
fi
echo "demo done in $(( $(date +%s) - t_start )) s (after the build)"
