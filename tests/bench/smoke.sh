#!/usr/bin/env bash
# Runs one benchmark in its smoke mode (a few seconds) and checks that it
# exited 0 and printed its figures: `smoke.sh REGEX PROGRAM ARGS...` passes
# when PROGRAM succeeds and its output matches REGEX (grep -E). Exit 77 from
# PROGRAM (nothing to measure here, e.g. no GPU) is passed through: ctest
# reports it as skipped. Figures are never judged: benchmarks do not fail on speed.
set -uo pipefail
regex=$1
shift
out=$("$@" 2>&1)
rc=$?
printf '%s\n' "$out"
[ $rc -eq 77 ] && exit 77
if [ $rc -ne 0 ]; then
  echo "bench smoke: $(basename "$1") exited $rc" >&2
  exit 1
fi
if ! grep -Eq -- "$regex" <<<"$out"; then
  echo "bench smoke: $(basename "$1") did not print its figures (no line matching '$regex')" >&2
  exit 1
fi
