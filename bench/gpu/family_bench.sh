#!/usr/bin/env bash
# Training throughput of pstar's chunk engine on one GPU for a decoder family of today (Qwen3,
# Gemma 3, Phi-4, Mixtral, Qwen3-MoE: a preset whose published config.json is in
# tests/data/hf_configs), from random initialisation, beside PyTorch FSDP2 with CPU offload
# training Hugging Face's own class for the same config.json (fsdp2_reference.py --model hf) in the
# same run. --layers cuts the model to fewer layers on both sides (a Qwen3-30B-A3B of 10 layers is
# 6.9B parameters, 1.2B active: what FSDP2-offload's 16 bytes a parameter of pinned host memory can
# hold). One JSON line on stdout (gpt_bench.sh's row, with the family's "model" and, for a mixture
# of experts, "active_params": FLOPs and TFLOPS count the active parameters on both sides, as
# pstar's Note [flops per token]); progress on stderr; configs, logs and metrics under --out.
#
#   bench/gpu/family_bench.sh --preset qwen3-30b-a3b --layers 10 [--fsdp2] ...
#   bench/gpu/family_bench.sh --help
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
configs=$repo/tests/data/hf_configs

usage() {
  cat <<EOF
Usage: bench/gpu/family_bench.sh --preset NAME [OPTIONS]

  --preset NAME         a preset with a published config.json: $(for f in "$configs"/*.json; do
                          f=${f##*/}; printf '%s ' "${f%.json}"; done)
  --layers N            train N layers of it (default: all)
  --fsdp2               also train Hugging Face's class for it with FSDP2-offload (fused AdamW;
                        needs transformers)
EOF
  shared_usage
  cat <<'EOF'
  --dry-run             train nothing: write the configs, check them with pstar estimate
                        --config, run the reference's --dry-run where transformers is installed,
                        and print the row
EOF
}

preset="" layers="" fsdp2=0 skip_pstar=0 steps=3 warmup=2 micro_batch=4 seq=2048 clip=1.0
device_memory=64GiB host_memory="" timeout=0 pstar=${PSTAR:-} python=${PYTHON:-} out="" dry_run=0
sets=()
# shellcheck source=bench/gpu/bench_common.sh
. "$here/bench_common.sh"
while [ $# -gt 0 ]; do
  case "$1" in
    --preset) preset=$2; shift ;;
    --layers) layers=$2; shift ;;
    --fsdp2) fsdp2=1 ;;
    -h|--help) usage; exit 0 ;;
    *) shared_option "$@" || { echo "family_bench: unknown argument '$1' (see --help)" >&2; exit 2; }
       shift $((taken - 1)) ;;
  esac
  shift
done

log() { echo "[family_bench] $*" >&2; }
die() { log "error: $*"; exit 1; }

[ -n "$preset" ] || die "--preset NAME is required (see --help)"
[ -f "$configs/$preset.json" ] ||
  die "no published config.json for '$preset' in $configs (see --help for the presets)"
start_run /tmp/pstar-family-bench.XXXXXX
name=$preset${layers:+-$layers-layers}
dir=$out/$name
mkdir -p "$dir"
log "pstar $pstar; python $python; $name, seq $seq, micro-batch $micro_batch, clip $clip; output in $out"

# The config.json both sides train: the published one's text part, cut to --layers.
hf_config=$dir/config.json
"$python" "$here/hf_shape.py" "$configs/$preset.json" ${layers:+--layers "$layers"} --seq "$seq" \
  --write "$hf_config" >"$dir/shape.json" || die "hf_shape.py failed on $configs/$preset.json"
log "shape: $(cat "$dir/shape.json")"
vocab=$("$python" -c 'import json, sys; print(json.load(open(sys.argv[1]))["vocab_size"])' "$hf_config")

pstar_side "{\"preset\": \"$preset\", \"seq_len\": $seq${layers:+, \"layers\": $layers}}" "$name"

if [ "$fsdp2" = 1 ]; then
  args=(--model hf --hf-config "$hf_config" --mode fsdp2-offload --optimizer fused --seq "$seq"
        --micro-batch "$micro_batch" --steps "$steps" --warmup "$warmup" --clip "$clip")
  if [ "$dry_run" = 1 ] && ! "$python" -c 'import transformers' 2>/dev/null; then
    log "$name: $python has no transformers: the reference's dry run is left out"
  else
    fsdp2_side "$name" "on transformers' class (fused AdamW)" "${args[@]}"
  fi
fi

extra=()
[ "$dry_run" = 0 ] || extra+=(--dry-run)
util row "$dir" --hf-config "$hf_config" --hidden 0 --layers 0 --vocab "$vocab" --seq "$seq" \
  --micro-batch "$micro_batch" --skip "$warmup" "${extra[@]}" | tee -a "$out/results.jsonl"
log "done; results in $out/results.jsonl"
