#!/usr/bin/env bash
# Configures and builds shardd into ./build (Release, Ninja). Extra arguments go
# to CMake's configure step, e.g. -DSHARDD_WITH_CUDA=OFF.
set -euo pipefail
cd "$(dirname "$0")/../.."
jobs="${SHARDD_BUILD_JOBS:-2}"
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release "$@"
cmake --build build -j "$jobs"
