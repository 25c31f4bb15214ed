#!/usr/bin/env bash
# The demo: installs what is missing, builds, then trains a tiny Llama on the
# CPU from a synthetic token stream, evaluates it and samples from it.
set -euo pipefail
cd "$(dirname "$0")/../.."
bash deploy/local/install-deps.sh
bash deploy/local/build.sh
mkdir -p runs/data
python3 configs/data/make_tokens.py runs/data/phrases.u32
echo "== training (configs/jobs/tiny-cpu.yaml) =="
./build/worker/shardd-worker --standalone --config configs/jobs/tiny-cpu.yaml "$@"
echo "== evaluating the exported model (runs/tiny-cpu/hf) =="
./build/coordinator/ctl/shardctl eval --model runs/tiny-cpu/hf --tokens runs/data/phrases.u32 --seq-len 64 --max-windows 256
echo "== greedy continuation of a phrase from the data =="
prompt=$(python3 -c "import struct;print(','.join(map(str,struct.unpack('<8I',open('runs/data/phrases.u32','rb').read(32)))))")
echo "prompt:    $prompt"
echo "generated: $(./build/coordinator/ctl/shardctl generate --model runs/tiny-cpu/hf --prompt-tokens "$prompt" --max-new 16)"
echo "data:      $(python3 -c "import struct;print(','.join(map(str,struct.unpack('<24I',open('runs/data/phrases.u32','rb').read(96))[8:])))")"
