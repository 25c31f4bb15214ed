#!/usr/bin/env bash
# Configures and builds shardd into ./build (Release, Ninja). Extra arguments go
# to CMake's configure step, e.g. -DSHARDD_WITH_CUDA=OFF. SHARDD_BUILD_TARGETS
# (space-separated) builds only those targets and what they need: the demo
# builds its three binaries, not the ~450 targets the tests need.
set -euo pipefail
cd "$(dirname "$0")/../.."
jobs="${SHARDD_BUILD_JOBS:-2}"
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release "$@"
# shellcheck disable=SC2086  # a list of target names
cmake --build build -j "$jobs" ${SHARDD_BUILD_TARGETS:+--target $SHARDD_BUILD_TARGETS}
