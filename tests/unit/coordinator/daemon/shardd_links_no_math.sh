#!/usr/bin/env bash
# The daemon links no math (docs/architecture.md): a CPU-only head node runs
# shardd without the CUDA runtime, NCCL, cuBLAS, OpenBLAS or gloo. Checks the
# dynamic dependencies of the built binary and the static libraries its link
# line pulls in (a static engine library would not show in ldd).
set -euo pipefail
bin="${SHARDD_BIN_DIR:?}/coordinator/shardd"
[ -x "$bin" ] || { echo "no $bin"; exit 1; }
deps=$(ldd "$bin")
bad=$(echo "$deps" | grep -Ei 'libcudart|libcublas|libnccl|libopenblas|libblas|libgloo|libcuda\.so|libcudnn' || true)
if [ -n "$bad" ]; then
  echo "shardd links math libraries:"; echo "$bad"; exit 1
fi
# The static libraries on shardd's link line (Ninja's build file, else Make's link.txt).
link=$(grep -A3 '^build coordinator/shardd:' "${SHARDD_BIN_DIR}/build.ninja" 2>/dev/null ||
       cat "${SHARDD_BIN_DIR}/coordinator/CMakeFiles/shardd.dir/link.txt" 2>/dev/null || true)
[ -n "$link" ] || { echo "cannot find shardd's link line under $SHARDD_BIN_DIR"; exit 1; }
for lib in libshard_train libshard_backend libshard_backend_cpu libshard_backend_cuda libshard_model libshard_fsdp \
           libshard_comm libshard_optim libshard_data; do
  if echo "$link" | grep -q "/$lib\.a"; then echo "shardd's link line pulls in $lib.a"; exit 1; fi
done
echo "shardd links no math: $(echo "$deps" | wc -l) shared libraries, none of cudart/cublas/nccl/openblas/gloo"
