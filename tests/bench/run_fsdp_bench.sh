#!/usr/bin/env bash
# Runs the W=2 FSDP benchmark (tests/bench/fsdp_bench) and the PyTorch DDP
# baseline (tests/bench/ddp_torch_bench.py) on the same model shape and prints
# them side by side, with the single-process figure (train_bench) for context.
#
# usage: tests/bench/run_fsdp_bench.sh [BUILD_DIR=build] [STEPS=6]
# Installs Debian's python3-torch with apt when it is missing (needs root).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
build="${1:-build}"
steps="${2:-6}"
py=/usr/bin/python3   # Debian's interpreter: python3-torch installs there, not into a pyenv/venv

if [[ ! -x "$build/tests/bench/fsdp_bench" ]]; then
  echo "run_fsdp_bench: $build/tests/bench/fsdp_bench not found; build it first:" >&2
  echo "  cmake -S . -B $build -G Ninja -DCMAKE_BUILD_TYPE=Release && ninja -C $build fsdp_bench train_bench" >&2
  exit 2
fi
if ! "$py" -c 'import torch' 2>/dev/null; then
  if [[ $(id -u) -ne 0 ]]; then
    echo "run_fsdp_bench: PyTorch is missing; install it with: sudo apt-get install -y python3-torch" >&2
    exit 2
  fi
  echo "run_fsdp_bench: installing python3-torch (apt)..." >&2
  apt-get update -qq >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-torch >&2
fi

out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT

echo "== shardd FSDP, 2 processes x 1 thread"
"$build/tests/bench/fsdp_bench" "$steps" | tee "$out/fsdp.txt"
echo
echo "== PyTorch DDP, 2 processes x 1 thread"
"$py" "$here/ddp_torch_bench.py" --steps "$steps" | tee "$out/ddp.txt"
if [[ -x "$build/tests/bench/train_bench" ]]; then
  echo
  echo "== shardd, 1 process x 2 threads (context)"
  "$build/tests/bench/train_bench" "$steps" | tee "$out/single.txt"
fi

# Side by side: median tokens/s of each configuration (medians resist load
# spikes on a shared machine) and the two ratios the targets are stated in.
echo
echo "== summary (W=2, bench model, seq 256, micro-batch 8 per rank; medians)"
"$py" - "$out/fsdp.txt" "$out/ddp.txt" <<'EOF'
import re, sys
rows = {}
pat = re.compile(r"\s+(\S+(?: \(torch\))?)\s+step\s+[\d.]+ ms \(median\s+([\d.]+).*tokens/s\s+\d+ \(median\s+(\d+)\)"
                 r".*cpu/step\s+([\d.]+) ms")
for path in sys.argv[1:]:
    for line in open(path):
        m = pat.match(line)
        if m:
            rows[m.group(1)] = (float(m.group(2)), float(m.group(3)), float(m.group(4)))
# tokens per CPU-second of the busiest rank: what each configuration costs,
# nearly independent of other load on the machine.
print("  %-14s %10s %10s %12s %16s" % ("config", "step ms", "tokens/s", "cpu/step ms", "tokens/cpu-s/rank"))
for k, (ms, tps, cpu) in rows.items():
    print("  %-14s %10.1f %10.0f %12.1f %16.0f" % (k, ms, tps, cpu, 16 * 256 / 2 / (cpu / 1e3)))
fs, ns, dd = rows.get("full_shard"), rows.get("no_shard"), rows.get("ddp (torch)")
if fs and ns:
    print("  full_shard / no_shard      = %.2f tokens/s, %.2f by CPU time  (target >= 0.90)" %
          (fs[1] / ns[1], ns[2] / fs[2]))
if fs and dd:
    print("  full_shard / torch DDP     = %.2f tokens/s, %.2f by CPU time  (target >= 1.80)" %
          (fs[1] / dd[1], dd[2] / fs[2]))
EOF
