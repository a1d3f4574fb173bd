#!/usr/bin/env bash
# The SFT example as a test (ctest example.sft, example.sft.qwen3): a tiny model with a real
# vocabulary (Llama 3's, or Qwen3's with FAMILY qwen3) trains for a few steps on
# examples/sft/conversations.jsonl through the example's own config, and its loss on the answers
# must fall. Exits 77 (ctest's skip) with the reason where the fetched tokenizer or Python's torch
# is missing.
#   examples/sft/check.sh PSTAR_BINARY WORK_DIR [llama|qwen3]
set -euo pipefail
pstar=$1 work=$2 family=${3:-llama}
repo=$(cd "$(dirname "$0")/../.." && pwd)
cache="${PSTAR_TOKENIZER_DATA:-$repo/.cache/tokenizers}"
if [ "$family" = qwen3 ]; then
  tokenizer="$cache/qwen3" config="$repo/examples/sft/qwen3.json"
else
  tokenizer="$cache/chat/llama3_2" config="$repo/examples/sft/config.json"
fi
if [ ! -f "$tokenizer/tokenizer_config.json" ]; then
  echo "skipped: no $family tokenizer at $tokenizer: run scripts/fetch-tokenizer-data.sh"
  exit 77
fi
if ! /usr/bin/python3 -c 'import torch' 2>/dev/null; then
  echo "skipped: /usr/bin/python3 has no torch (Debian: apt-get install python3-torch)"
  exit 77
fi
rm -rf "$work" && mkdir -p "$work"
if [ "$family" = qwen3 ]; then
  /usr/bin/python3 "$repo/tests/reference/decoder_reference.py" --family qwen3 --vocab 151936 \
    --max-positions 256 --weights-only --out "$work/model" >/dev/null
else
  /usr/bin/python3 "$repo/examples/llama/make_tiny_llama.py" --out "$work/model" --vocab 128256 \
    --max-positions 256 >/dev/null
fi
# The example's own config, the data copied so that its record cache goes to the work folder.
cp "$repo/examples/sft/conversations.jsonl" "$work/"
"$pstar" train "$config" --device cpu --metrics "$work/metrics.jsonl" \
  --set "model.init_from=$work/model" --set "data.jsonl=$work/conversations.jsonl" \
  --set "data.tokenizer=$tokenizer" --set training.steps=8 --set training.save_dir= \
  --set training.lr_schedule.warmup_steps=1
/usr/bin/python3 - "$work/metrics.jsonl" "$family" <<'PY'
import json, sys
steps = [json.loads(l) for l in open(sys.argv[1]) if '"step"' in l]
assert len(steps) == 8, len(steps)
first, last = steps[0]["loss"], steps[-1]["loss"]
assert all(s["counted_targets"] > 0 for s in steps), steps
print(f"example.sft ({sys.argv[2]}): loss {first:.4f} -> {last:.4f} over {len(steps)} steps")
assert last < first - 1.0, (first, last)
PY
