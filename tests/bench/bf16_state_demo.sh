#!/usr/bin/env bash
# optim.state_dtype on the demo task (docs/optimizer-state.md): trains the
# demo job configs/jobs/tiny-sft-cpu.yaml (reverse strings, 300 steps, 2 CPU
# workers) once with fp32 optimizer state as shipped and once with bf16 state
# (offloaded, stochastic rounding), evaluates both exports on the same 200
# held-out prompts, prints the exact match of each, and fails if they differ
# by more than 2 points. About 1.5 minutes on 2 cores; not part of ctest.
#   usage: tests/bench/bf16_state_demo.sh [BUILD_DIR]
set -euo pipefail
SRC=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=$(cd "${1:-$SRC/build}" && pwd)
CTL=$BUILD/coordinator/ctl/shardctl
export SHARDD_WORKER_BIN=$BUILD/worker/shardd-worker
T=$(mktemp -d /tmp/shardd-bf16-state.XXXXXX)
trap 'rm -rf "$T"' EXIT
cd "$T"
mkdir -p data
python3 "$SRC/configs/data/make_sft_demo.py" data/train.jsonl --eval-out data/eval.jsonl --eval-rows 200 > /dev/null
declare -A em
for state in fp32 bf16; do
  sets=(--set name=demo-$state --set data.jsonl=data/train.jsonl --set checkpoint.dir=ckpt
        --set checkpoint.resume=none --set export.hf_dir=out/$state)
  [ $state = bf16 ] && sets+=(--set parallel.offload_optimizer=true --set optim.state_dtype=bf16)
  start=$(date +%s)
  "$CTL" launch "$SRC/configs/jobs/tiny-sft-cpu.yaml" "${sets[@]}" > log-$state.txt 2>&1 ||
    { tail -n 20 log-$state.txt; exit 1; }
  eval_out=$("$CTL" eval --model out/$state --data data/eval.jsonl --json)
  em[$state]=$(echo "$eval_out" | python3 -c 'import json,sys; j=json.load(sys.stdin); print(100.0*j["exact_match"])')
  loss=$(echo "$eval_out" | python3 -c 'import json,sys; print(json.load(sys.stdin)["loss"])')
  printf '%s state: %d s, final train loss %s, held-out loss %.6f, exact match %.1f%%\n' $state \
    $(( $(date +%s) - start )) "$(grep -o 'loss [0-9.]* -> [0-9.]*' log-$state.txt | tail -1 | awk '{print $4}')" \
    "$loss" "${em[$state]}"
done
python3 -c "import sys; d=abs(${em[bf16]}-${em[fp32]}); print('difference %.1f points' % d); sys.exit(0 if d <= 2.0 else 1)"
