#!/usr/bin/env bash
# The demo: installs what is missing, builds, then trains a tiny Llama on 2 CPU
# workers with fully sharded parameters and checkpoints every 20 steps. Partway
# through, the demo kills one worker with SIGKILL; the surviving rank fails fast,
# the launch is restarted and resumes from the last committed checkpoint. At
# the end it evaluates the exported model and samples from it.
#
# (Until the coordinator lands, this script plays its part: it notices the
# failure and starts the next attempt.)
set -euo pipefail
cd "$(dirname "$0")/../.."
bash deploy/local/install-deps.sh
bash deploy/local/build.sh
CTL=./build/coordinator/ctl/shardctl
JOB=configs/jobs/tiny-cpu.yaml
mkdir -p runs/data
python3 configs/data/make_tokens.py runs/data/phrases.u32
rm -rf runs/checkpoints/tiny-cpu runs/tiny-cpu runs/demo-metrics
mkdir -p runs/demo-metrics

echo "== attempt 1: 2 workers, full_shard; a worker will be killed at step 70 =="
$CTL launch $JOB --metrics-prefix runs/demo-metrics/a1-rank &
launcher=$!
victim=""
for _ in $(seq 1 1200); do
  if [ -f runs/demo-metrics/a1-rank1.jsonl ] && [ "$(wc -l < runs/demo-metrics/a1-rank1.jsonl)" -ge 70 ]; then
    victim=$(pgrep -f -- "--rank 1 --world 2 --rendezvous" | head -n 1 || true)
    break
  fi
  sleep 0.1
done
if [ -n "$victim" ]; then
  echo ">> demo: kill -9 rank 1 (pid $victim) at step $(wc -l < runs/demo-metrics/a1-rank1.jsonl)"
  kill -9 "$victim"
fi
if wait $launcher; then echo "attempt 1 finished without a failure (the kill came too late)"; fi
echo "== committed checkpoints after the failure =="
$CTL checkpoints runs/checkpoints/tiny-cpu

echo "== attempt 2: same command; resumes from the newest committed step =="
$CTL launch $JOB --metrics-prefix runs/demo-metrics/a2-rank

echo "== evaluating the exported model (runs/tiny-cpu/hf) =="
$CTL eval --model runs/tiny-cpu/hf --tokens runs/data/phrases.u32 --seq-len 64 --max-windows 256
echo "== greedy continuation of a phrase from the data =="
prompt=$(python3 -c "import struct;print(','.join(map(str,struct.unpack('<8I',open('runs/data/phrases.u32','rb').read(32)))))")
echo "prompt:    $prompt"
echo "generated: $($CTL generate --model runs/tiny-cpu/hf --prompt-tokens "$prompt" --max-new 16)"
echo "data:      $(python3 -c "import struct;print(','.join(map(str,struct.unpack('<24I',open('runs/data/phrases.u32','rb').read(96))[8:])))")"
final=$(tail -n 1 runs/demo-metrics/a2-rank0.jsonl)
echo "final step: $final"
