#!/usr/bin/env bash
# Writes a tiny Llama as a Hugging Face folder (examples/llama/make_tiny_llama.py, needs Debian's
# python3-torch, which scripts/setup-deps.sh installs), fine-tunes it on the repository's own text
# with the chunk engine, and merges the last checkpoint back into a Hugging Face folder. Extra arguments go to `pstar train`, e.g. examples/llama/run.sh --set training.steps=20
set -euo pipefail
cd "$(dirname "$0")/../.."
scripts/setup-deps.sh
cmake --preset cpu-release >/dev/null
cmake --build --preset cpu-release --target pstar
scripts/make-corpus.sh build/example/corpus.txt
rm -rf build/example/tiny-llama build/example/tiny-llama-run build/example/tiny-llama-tuned
/usr/bin/python3 examples/llama/make_tiny_llama.py --out build/example/tiny-llama --shards 2
build/cpu-release/pstar train examples/llama/config.json "$@"
run=build/example/tiny-llama-run
build/cpu-release/pstar merge-ckpt --dir "$run/$(cat "$run/latest")" \
  -o build/example/tiny-llama-tuned --dtype bf16
echo "fine-tuned model: build/example/tiny-llama-tuned (a Hugging Face folder; model.init_from loads it)"
