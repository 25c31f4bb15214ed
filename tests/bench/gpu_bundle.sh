#!/usr/bin/env bash
# Packs already-built GPU test and bench binaries into a relocatable folder for a
# GPU machine that cannot build shardd itself (e.g. one without gRPC, SQLite or
# Gloo installed): the binaries (stripped), the shared libraries they need that
# such a machine may lack, and a CTestTestfile so `ctest -L gpu` runs there.
# glibc, libstdc++, the CUDA runtime/cuBLASLt/NCCL and OpenBLAS are expected on
# the target (they are large and the driver pins the CUDA ones anyway).
#
# usage: tests/bench/gpu_bundle.sh BUILD_DIR OUT_DIR
#   then on the GPU machine: tests/bench/gpu_bench.sh --prebuilt OUT_DIR
set -euo pipefail
BUILD=$(cd "$1" && pwd)
OUTDIR=$2
SRC=$(cd "$(dirname "$0")/../.." && pwd)
rm -rf "$OUTDIR" && mkdir -p "$OUTDIR/bin" "$OUTDIR/lib"
bins=(worker/shardd-worker tests/bench/gpu_bench tests/gpu/backend/cuda_backend_test
      tests/gpu/comm/nccl_communicator_test tests/gpu/train/gpu_train_test)
for b in "${bins[@]}"; do
  cp "$BUILD/$b" "$OUTDIR/bin/" && strip "$OUTDIR/bin/$(basename "$b")"
done
skip='^(libc|libm|libdl|libpthread|librt|libstdc\+\+|libgcc_s|ld-linux.*|libcudart|libcublasLt|libcublas|libnccl|libopenblas|libgfortran|libquadmath)\.so'
for b in "$OUTDIR"/bin/*; do ldd "$b" | awk '$3 ~ /^\// {print $3}'; done | sort -u | while read -r lib; do
  name=$(basename "$lib")
  [[ "$name" =~ $skip ]] || cp -L "$lib" "$OUTDIR/lib/$name"
done
# ctest: the discovered tests of each binary, with paths made relocatable
# (gpu_bench.sh --prebuilt substitutes @BUNDLE@ and @SRC@).
: > "$OUTDIR/CTestTestfile.cmake"
for f in "$BUILD"/tests/gpu/*/*_tests.cmake; do
  sed -e "s|$BUILD/tests/gpu/[a-z]*/|@BUNDLE@/bin/|g" -e "s|$BUILD|@BUNDLE@|g" -e "s|$SRC|@SRC@|g" "$f" \
    >> "$OUTDIR/CTestTestfile.cmake"
done
du -sh "$OUTDIR" "$OUTDIR"/lib
