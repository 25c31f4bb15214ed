#!/usr/bin/env bash
# The duplicate budget of issue 40: how many pairs of places share a block of
# six or more lines (the `duplicates` tool's count) in the source tree without
# tests/, as git sees it (tracked files and untracked ones it does not ignore).
# Fails when the count is over MAX; skips (77) where the tool is not installed.
#
#   tests/tools/duplicate_budget.sh ROOT MAX
set -euo pipefail
root=${1:?usage: duplicate_budget.sh ROOT MAX}
max=${2:?usage: duplicate_budget.sh ROOT MAX}
if ! command -v duplicates >/dev/null; then
  echo "duplicate_budget: the duplicates tool is not on PATH; skipped"
  exit 77
fi
tree=$(mktemp -d)
trap 'rm -rf "$tree"' EXIT
git -C "$root" ls-files -z --cached --others --exclude-standard | grep -zv '^tests/' |
  while IFS= read -r -d '' f; do
    [ -f "$root/$f" ] || continue  # deleted in the working tree
    mkdir -p "$tree/$(dirname "$f")"
    cp "$root/$f" "$tree/$f"
  done
out=$(cd "$tree" && duplicates --seconds 300 --most 200)
if grep -q '^incomplete:' <<<"$out"; then
  echo "duplicate_budget: the count is incomplete:" >&2
  grep '^incomplete:' <<<"$out" >&2
  exit 1
fi
first=$(head -n 1 <<<"$out")
pairs=$(sed -n 's/^\([0-9][0-9]*\) pairs of places.*/\1/p' <<<"$first")
case $first in no\ duplicates*) pairs=0 ;; esac
if [ -z "$pairs" ]; then
  echo "duplicate_budget: cannot read the count from: $first" >&2
  exit 1
fi
if [ "$pairs" -gt "$max" ]; then
  echo "duplicate_budget: $pairs pairs of repeated 6-line blocks outside tests/ (budget $max); the pairs:" >&2
  tail -n +2 <<<"$out" >&2
  exit 1
fi
echo "duplicate_budget: $pairs pairs (budget $max)"
