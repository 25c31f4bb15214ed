#!/usr/bin/env bash
# Installs what is missing, builds, and runs every test. GPU tests (label gpu)
# skip cleanly on machines without a GPU.
set -euo pipefail
cd "$(dirname "$0")/../.."
bash deploy/local/install-deps.sh
bash deploy/local/build.sh "$@"
cd build
ctest --output-on-failure -j "${SHARDD_TEST_JOBS:-2}" --timeout 600
