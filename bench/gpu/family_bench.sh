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
  --skip-pstar          only the reference (with --fsdp2)
  --steps N             timed steps (default 3)
  --warmup N            untimed steps first (default 2: pstar's tracing step and first planned one)
  --micro-batch B       sequences per step (default 4)
  --seq S               sequence length (default 2048)
  --clip C              gradient_clipping (default 1.0), on both sides
  --device-memory SIZE  pstar's engine.device_memory (default 64GiB)
  --host-memory SIZE    pstar's engine.host_memory (default unset: 80% of the machine's RAM)
  --timeout S           stop a training run after S seconds (default 0: no limit)
  --pstar PATH, --python PATH, --out DIR, --set KEY=VALUE: as gpt_bench.sh
  --dry-run             train nothing: write the configs, check them with pstar estimate
                        --config, run the reference's --dry-run where transformers is installed,
                        and print the row
EOF
}

preset="" layers="" fsdp2=0 skip_pstar=0 steps=3 warmup=2 micro_batch=4 seq=2048 clip=1.0
device_memory=64GiB host_memory="" timeout=0 pstar=${PSTAR:-} python=${PYTHON:-} out="" dry_run=0
sets=()
while [ $# -gt 0 ]; do
  case "$1" in
    --preset) preset=$2; shift ;;
    --layers) layers=$2; shift ;;
    --fsdp2) fsdp2=1 ;;
    --skip-pstar) skip_pstar=1 ;;
    --steps) steps=$2; shift ;;
    --warmup) warmup=$2; shift ;;
    --micro-batch) micro_batch=$2; shift ;;
    --seq) seq=$2; shift ;;
    --clip) clip=$2; shift ;;
    --device-memory) device_memory=$2; shift ;;
    --host-memory) host_memory=$2; shift ;;
    --timeout) timeout=$2; shift ;;
    --pstar) pstar=$2; shift ;;
    --python) python=$2; shift ;;
    --out) out=$2; shift ;;
    --set) sets+=(--set "$2"); shift ;;
    --dry-run) dry_run=1 ;;
    -h|--help) usage; exit 0 ;;
    *) echo "family_bench: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
  shift
done

log() { echo "[family_bench] $*" >&2; }
die() { log "error: $*"; exit 1; }

[ -n "$preset" ] || die "--preset NAME is required (see --help)"
[ -f "$configs/$preset.json" ] ||
  die "no published config.json for '$preset' in $configs (see --help for the presets)"
# shellcheck source=bench/gpu/bench_common.sh
. "$here/bench_common.sh"
find_pstar "$([ "$dry_run" = 0 ] && [ "$skip_pstar" = 0 ] && echo 1 || echo 0)"
find_python
util() { "$python" "$here/gpt_bench_util.py" "$@"; }

[ -n "$out" ] || out=$(mktemp -d /tmp/pstar-family-bench.XXXXXX)
mkdir -p "$out"
out=$(cd "$out" && pwd)
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

tokens=$out/tokens-$vocab.bin
[ -f "$tokens" ] || util tokens "$tokens" --count 1048576 --vocab "$vocab"

model="{\"preset\": \"$preset\", \"seq_len\": $seq${layers:+, \"layers\": $layers}}"
# --hidden/--layers/--heads are unused when --model is given; the config writer requires them.
util config "$dir/pstar.json" --hidden 0 --layers 0 --heads 0 --vocab "$vocab" --seq "$seq" \
  --micro-batch "$micro_batch" --steps $((warmup + steps)) --tokens "$tokens" \
  --device-memory "$device_memory" --host-memory "$host_memory" --clip "$clip" --model "$model"
rc=0
"$pstar" estimate --config "$dir/pstar.json" "${sets[@]}" --hardware H100-80GB --cpu-mem 128GB \
  --json >"$dir/estimate.json" 2>"$dir/estimate.log" || rc=$?
case "$rc" in
  0|5) ;;
  *) die "pstar rejects the config ($rc): $(tail -n 1 "$dir/estimate.log")" ;;
esac

if [ "$dry_run" = 0 ] && [ "$skip_pstar" = 0 ]; then
  log "$name: pstar train ($((warmup + steps)) steps)"
  rc=0
  util measure "$dir/pstar.measure.json" --timeout "$timeout" -- \
    "$pstar" train "$dir/pstar.json" "${sets[@]}" --device cuda \
    --metrics "$dir/pstar.metrics.jsonl" >"$dir/pstar.log" 2>&1 || rc=$?
  [ "$rc" = 0 ] || log "$name: pstar exited with $rc ($(tail -n 1 "$dir/pstar.log"))"
fi

if [ "$fsdp2" = 1 ]; then
  args=(--model hf --hf-config "$hf_config" --mode fsdp2-offload --optimizer fused --seq "$seq"
        --micro-batch "$micro_batch" --steps "$steps" --warmup "$warmup" --clip "$clip")
  if [ "$dry_run" = 1 ]; then
    if "$python" -c 'import transformers' 2>/dev/null; then
      "$python" "$here/fsdp2_reference.py" "${args[@]}" --dry-run >"$dir/fsdp2.json" \
        2>"$dir/fsdp2.log" || die "fsdp2_reference.py --dry-run failed: $(tail -n 1 "$dir/fsdp2.log")"
    else
      log "$name: $python has no transformers: the reference's dry run is left out"
    fi
  else
    log "$name: FSDP2-offload on transformers' class (fused AdamW)"
    util measure "$dir/fsdp2.measure.json" --timeout "$timeout" -- \
      "$python" "$here/fsdp2_reference.py" "${args[@]}" >"$dir/fsdp2.json" 2>"$dir/fsdp2.log" ||
      log "$name: fsdp2 exited with $? ($(tail -n 1 "$dir/fsdp2.log"))"
  fi
fi

extra=()
[ "$dry_run" = 0 ] || extra+=(--dry-run)
util row "$dir" --hf-config "$hf_config" --hidden 0 --layers 0 --vocab "$vocab" --seq "$seq" \
  --micro-batch "$micro_batch" --skip "$warmup" "${extra[@]}" | tee -a "$out/results.jsonl"
log "done; results in $out/results.jsonl"
