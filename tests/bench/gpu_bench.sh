#!/usr/bin/env bash
# Builds shardd with CUDA, runs the GPU tests (ctest -L gpu) and prints the
# one-GPU figures of gpu_bench: GEMM TFLOP/s vs the device peak, attention
# forward+backward TFLOP/s (fp32 SIMT and, experimental, tensor cores), training
# tokens/s and MFU of a ~1B Llama at precision auto (bf16 GEMM inputs on
# sm_80+), then the training run again with SHARDD_TC_ATTENTION=1.
#
# usage: tests/bench/gpu_bench.sh [BUILD_DIR]   (env: SHARDD_CUDA_ARCHS, JOBS,
#        GPU_BENCH_ARGS passed to gpu_bench, e.g. "--micro 2 --steps 3")
#        tests/bench/gpu_bench.sh --prebuilt BUNDLE_DIR
#        (binaries packed by tests/bench/gpu_bundle.sh on a machine that could
#        build them, for a GPU machine that lacks shardd's build dependencies)
# Writes the log to $OUT/gpu_bench.log when OUT is set.
set -euo pipefail
cd "$(dirname "$0")/../.."
PREBUILT=
if [[ "${1:-}" == "--prebuilt" ]]; then
  PREBUILT=$(cd "$2" && pwd)
fi
BUILD=${1:-build-gpu}
JOBS=${JOBS:-$(nproc)}
LOG=${OUT:-/tmp}/gpu_bench.log
exec > >(tee "$LOG") 2>&1

if [[ -z "${SHARDD_CUDA_ARCHS:-}" ]]; then
  # One architecture builds much faster: take the GPU's own when nvidia-smi knows it.
  cc=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d '. ' || true)
  SHARDD_CUDA_ARCHS=${cc:-90}
fi
echo "== $(date -u +%FT%TZ) gpu_bench.sh: build $BUILD, archs $SHARDD_CUDA_ARCHS, $JOBS jobs"
nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap --format=csv 2>/dev/null || echo "(no nvidia-smi)"

t0=$SECONDS
if [[ -n "$PREBUILT" ]]; then
  BIN=$PREBUILT/bin
  TESTDIR=$PREBUILT
  export LD_LIBRARY_PATH="$PREBUILT/lib:/usr/local/cuda/lib64:/usr/local/cuda/targets/x86_64-linux/lib:${LD_LIBRARY_PATH:-}"
  sed -i -e "s|@BUNDLE@|$PREBUILT|g" -e "s|@SRC@|$PWD|g" "$PREBUILT/CTestTestfile.cmake"
  echo "== prebuilt binaries from $PREBUILT ($(ls "$BIN" | tr '\n' ' '))"
else
  cmake -S . -B "$BUILD" -G Ninja -DSHARDD_CUDA_ARCHS="$SHARDD_CUDA_ARCHS" -DSHARDD_BUILD_TESTS=ON \
    -DSHARDD_BUILD_BENCH=ON -DSHARDD_WITH_CUDA=ON | grep -E "shardd|cuda=" || true
  ninja -C "$BUILD" -j"$JOBS" shardd-worker cuda_backend_test nccl_communicator_test gpu_train_test gpu_bench
  echo "== build: $((SECONDS - t0)) s"
  BIN=$BUILD/bin-links
  mkdir -p "$BIN"
  for b in worker/shardd-worker tests/bench/gpu_bench; do ln -sf "$(cd "$BUILD" && pwd)/$b" "$BIN/"; done
  TESTDIR=$BUILD
fi

echo "== shardd-worker --probe"
"$BIN"/shardd-worker --probe || echo "(probe exit $?)"

echo "== ctest -L gpu"
t1=$SECONDS
status=0
CTEST_LOG=${OUT:-/tmp}/ctest_gpu.log
ctest --test-dir "$TESTDIR" -L gpu --output-on-failure -V -j1 --timeout 300 > "$CTEST_LOG" 2>&1 || status=$?
# The summary, and the error figures the tests print (max |gpu - cpu| per kernel).
grep -E "max \|gpu-cpu\||loss cpu|\[  FAILED|Test +#|tests passed|tests failed|Failure|Expected|Which is" \
  "$CTEST_LOG" | sed -E 's/^[0-9]+: //' || true
echo "== ctest -L gpu: exit $status, $((SECONDS - t1)) s (full output: $CTEST_LOG)"

echo "== gpu_bench ${GPU_BENCH_ARGS:-}"
"$BIN"/gpu_bench ${GPU_BENCH_ARGS:-} || status=$?
# Training again with the experimental tensor-core attention (bf16 GEMMs in
# both runs under precision auto on sm_80+): the MFU the issue's target is about.
echo "== SHARDD_TC_ATTENTION=1 gpu_bench --train-only ${GPU_BENCH_ARGS:-}"
SHARDD_TC_ATTENTION=1 "$BIN"/gpu_bench --train-only ${GPU_BENCH_ARGS:-} || status=$?
echo "== done: exit $status, $((SECONDS - t0)) s in all"
exit $status
