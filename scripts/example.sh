#!/usr/bin/env bash
# Quick start, part 1: installs dependencies, builds pstar (CPU release) and trains the default
# example (examples/default) on the repository's own text. Extra arguments go to `pstar train`,
# e.g. scripts/example.sh --set training.steps=50 --metrics build/example/metrics.jsonl
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup-deps.sh
cmake --preset cpu-release >/dev/null
cmake --build --preset cpu-release --target pstar
scripts/make-corpus.sh build/example/corpus.txt
exec build/cpu-release/pstar train examples/default/config.json "$@"
