#!/usr/bin/env bash
# Quick start, part 2: installs dependencies, builds everything (CPU release) and runs the whole
# test suite. Extra arguments go to ctest, e.g. scripts/test.sh -L unit
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup-deps.sh
# Real tokenizers and their reference ids for the tokenizer tests (skips them when it cannot).
scripts/fetch-tokenizer-data.sh
cmake --preset cpu-release >/dev/null
cmake --build --preset cpu-release
ctest --preset cpu-release -j "$(nproc)" "$@"
