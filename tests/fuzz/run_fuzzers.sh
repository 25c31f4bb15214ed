#!/usr/bin/env bash
# Builds the libFuzzer targets (clang, ASan+UBSan) in their own build dir and
# runs each for SECONDS (default 20), seeded from tests/fuzz/corpus/<target>/
# and the test data. Fails on any crash, leak, timeout or sanitizer report.
#
#   tests/fuzz/run_fuzzers.sh [SECONDS] [TARGET...]
#
# Environment: SHARDD_FUZZ_BUILD (build dir, default build-fuzz),
# SHARDD_FUZZ_JOBS (parallel compile jobs, default 2), SHARDD_FUZZ_LOGS (where
# each target's log goes, default $SHARDD_FUZZ_BUILD/logs). New inputs that
# reach new coverage collect in $SHARDD_FUZZ_BUILD/corpus/<target>/ (not
# committed); a crash leaves its input as $SHARDD_FUZZ_BUILD/artifacts/<target>/crash-*.
set -euo pipefail
cd "$(dirname "$0")/../.."
secs=${1:-20}
shift || true
all=(fuzz_job_file fuzz_config_json fuzz_safetensors fuzz_hf_index fuzz_manifest fuzz_shard_file
     fuzz_tokenizer_json fuzz_jsonl_row fuzz_prepared_header fuzz_jinja fuzz_chat_messages
     fuzz_copy_header fuzz_reference_file)
targets=("$@")
[ ${#targets[@]} -eq 0 ] && targets=("${all[@]}")
build=${SHARDD_FUZZ_BUILD:-build-fuzz}
logs=${SHARDD_FUZZ_LOGS:-$build/logs}

if ! command -v clang++ >/dev/null 2>&1; then
  echo "run_fuzzers: clang++ not found (Debian: apt-get install clang libclang-rt-14-dev)" >&2
  exit 1
fi
launcher=()
command -v ccache >/dev/null 2>&1 && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache)
start=$(date +%s)
if [ ! -f "$build/build.ninja" ]; then
  cmake -S . -B "$build" -G Ninja -DSHARDD_FUZZ=ON -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
    -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g" \
    -DSHARDD_BUILD_TESTS=OFF -DSHARDD_BUILD_BENCH=OFF -DSHARDD_WITH_CUDA=OFF "${launcher[@]}" >/dev/null
fi
cmake --build "$build" -j "${SHARDD_FUZZ_JOBS:-2}" --target "${targets[@]}" >"$build/build.log" 2>&1 ||
  { tail -40 "$build/build.log" >&2; echo "run_fuzzers: build failed (log: $build/build.log)" >&2; exit 1; }
echo "run_fuzzers: built ${#targets[@]} target(s) in $(( $(date +%s) - start )) s"

# Seeds beyond the committed corpora: the test data a reader already parses.
extra_seeds() {
  case "$1" in
    fuzz_job_file) echo configs/jobs tests/k8s/jobs ;;
  esac
}

mkdir -p "$logs"
failed=()
for t in "${targets[@]}"; do
  work="$build/corpus/$t" art="$build/artifacts/$t"
  mkdir -p "$work" "$art"
  seeds=()
  [ -d tests/fuzz/corpus/"$t" ] && seeds+=(tests/fuzz/corpus/"$t")
  for d in $(extra_seeds "$t"); do seeds+=("$d"); done
  # -rss_limit_mb: a reader that sizes an allocation from the input must be
  # refused before it allocates; 2 GB is far above any valid seed's need.
  dict=()
  [ -f tests/fuzz/"${t#fuzz_}".dict ] && dict=(-dict=tests/fuzz/"${t#fuzz_}".dict)
  if "$build/tests/fuzz/$t" "${dict[@]}" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -max_len=65536 \
       -artifact_prefix="$art/" -print_final_stats=1 "$work" "${seeds[@]}" >"$logs/$t.log" 2>&1; then
    stats=$(grep -E "^#[0-9]+.*(DONE|pulse|NEW|REDUCE)" "$logs/$t.log" | tail -1 | sed -E 's/^#([0-9]+)[[:space:]]+[A-Z]+[[:space:]]+/execs=\1 /')
    echo "run_fuzzers: $t ok: $stats"
  else
    echo "run_fuzzers: $t FAILED (log: $logs/$t.log, inputs: $art/)" >&2
    grep -E "ERROR: |runtime error|SUMMARY" "$logs/$t.log" | head -5 >&2 || true
    failed+=("$t")
  fi
done
echo "run_fuzzers: ${#targets[@]} target(s), ${secs} s each, $(( $(date +%s) - start )) s in all"
[ ${#failed[@]} -eq 0 ] || { echo "run_fuzzers: failed: ${failed[*]}" >&2; exit 1; }
