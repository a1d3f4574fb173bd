#!/usr/bin/env bash
# Llama-family training throughput of pstar's chunk engine on one GPU, from random initialisation
# or from a Hugging Face folder written to local disk first, beside PyTorch FSDP2 with CPU offload
# training the same shape (bench/gpu/llama_reference.py) in the same run. One JSON line on stdout
# (gpt_bench.sh's row, with "model": "llama"); progress on stderr; configs, logs and metrics
# under --out.
#
#   bench/gpu/llama_bench.sh --preset llama-3.1-8b [--from-folder] [--fsdp2] ...
#   bench/gpu/llama_bench.sh --help
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)

usage() {
  cat <<'EOF'
Usage: bench/gpu/llama_bench.sh --preset NAME [OPTIONS]

  --preset NAME         llama-3.1-8b, llama-3.2-3b or llama-3.2-1b (write_hf_llama.py --list)
  --from-folder         pstar loads a Hugging Face folder (bf16 safetensors shards) that
                        write_hf_llama.py writes first, instead of initialising the preset
  --folder DIR          where that folder goes (default OUT/hf); kept for a later run
  --folder-device DEV   where its random values are drawn (default cuda)
  --fsdp2               also train the same shape with FSDP2-offload (fused AdamW)
  --bound auto|none     hold pstar's timed steps against their physical bound (as gpt_bench.sh:
                        machine_rates.py, and plain PyTorch at the same shape with the most
                        layers that fit for the model-FLOPs rate); default auto
EOF
  shared_usage
  cat <<'EOF'
  --dry-run             train nothing: write the configs, check them with pstar estimate
                        --config, run the reference's --dry-run and print the row
EOF
}

preset="" from_folder=0 folder="" folder_device=cuda fsdp2=0 skip_pstar=0
steps=3 warmup=2 micro_batch=4 seq=2048 clip=1.0 device_memory=64GiB host_memory="" timeout=0
pstar=${PSTAR:-} python=${PYTHON:-} out="" dry_run=0 bound=auto
sets=()
# shellcheck source=bench/gpu/bench_common.sh
. "$here/bench_common.sh"
while [ $# -gt 0 ]; do
  case "$1" in
    --preset) preset=$2; shift ;;
    --from-folder) from_folder=1 ;;
    --folder) folder=$2; shift ;;
    --folder-device) folder_device=$2; shift ;;
    --fsdp2) fsdp2=1 ;;
    --bound) bound=$2; shift ;;
    -h|--help) usage; exit 0 ;;
    *) shared_option "$@" || { echo "llama_bench: unknown argument '$1' (see --help)" >&2; exit 2; }
       shift $((taken - 1)) ;;
  esac
  shift
done

case "$bound" in auto|none) ;; *) echo "llama_bench: --bound auto|none" >&2; exit 2 ;; esac
log() { echo "[llama_bench] $*" >&2; }
die() { log "error: $*"; exit 1; }

[ -n "$preset" ] || die "--preset NAME is required (see --help)"
start_run /tmp/pstar-llama-bench.XXXXXX
folder=${folder:-$out/hf}
dir=$out/$preset
mkdir -p "$dir"
log "pstar $pstar; python $python; $preset, seq $seq, micro-batch $micro_batch, clip $clip; output in $out"

# The shape as a Hugging Face config.json (and, with --from-folder, the weights beside it).
if [ "$from_folder" = 1 ] && [ "$dry_run" = 0 ]; then
  if [ -f "$folder/config.json" ] &&
     { [ -f "$folder/model.safetensors.index.json" ] || [ -f "$folder/model.safetensors" ]; }; then
    log "$folder holds a folder already; using it"
  else
    log "writing $preset to $folder (values drawn on $folder_device)"
    "$python" "$here/write_hf_llama.py" --preset "$preset" --out "$folder" \
      --device "$folder_device" >"$dir/write.json" 2>"$dir/write.log" ||
      die "write_hf_llama.py failed: $(tail -n 1 "$dir/write.log")"
    log "wrote $(cat "$dir/write.json")"
  fi
else
  "$python" "$here/write_hf_llama.py" --preset "$preset" --out "$folder" --config-only ||
    die "write_hf_llama.py --config-only failed"
fi
hf_config=$folder/config.json
vocab=$("$python" -c 'import json, sys; print(json.load(open(sys.argv[1]))["vocab_size"])' "$hf_config")

# A dry run wrote no weights, so it checks the preset's config instead of the folder's.
if [ "$from_folder" = 1 ] && [ "$dry_run" = 0 ]; then
  pstar_side "{\"init_from\": \"$folder\", \"seq_len\": $seq}" "$preset" ", from $folder"
else
  pstar_side "{\"preset\": \"$preset\", \"seq_len\": $seq}" "$preset"
fi

if [ "$fsdp2" = 1 ]; then
  args=(--model llama --hf-config "$hf_config" --mode fsdp2-offload --optimizer fused
        --seq "$seq" --micro-batch "$micro_batch" --steps "$steps" --warmup "$warmup"
        --clip "$clip")
  fsdp2_side "$preset" "(fused AdamW)" "${args[@]}"
fi

# Note [step bound]: the machine's rates and plain PyTorch's model-FLOPs rate, in this run.
extra=()
if [ "$bound" = auto ] && [ "$skip_pstar" = 0 ]; then
  "$python" "$here/machine_rates.py" $([ "$dry_run" = 0 ] || echo --dry-run) >"$out/rates.json" \
    2>"$out/rates.log" || die "machine_rates.py failed: $(tail -n 1 "$out/rates.log")"
  log "rates: $(util rates-line "$out/rates.json")"
  extra+=(--rates "$out/rates.json")
  rate_layers=$(util rate-config "$hf_config" "$dir/plain-rate.config.json")
  if [ "$rate_layers" -gt 0 ]; then
    args=(--model llama --hf-config "$dir/plain-rate.config.json" --mode plain --optimizer fused
          --seq "$seq" --micro-batch "$micro_batch" --steps 3 --warmup 1 --clip "$clip")
    if [ "$dry_run" = 1 ]; then
      "$python" "$here/fsdp2_reference.py" "${args[@]}" --dry-run >"$dir/plain-rate.json" \
        2>"$dir/plain-rate.log" || die "fsdp2_reference.py --dry-run failed: $(tail -n 1 "$dir/plain-rate.log")"
    else
      log "$preset: plain PyTorch at $rate_layers layers (the model-FLOPs rate of the bound)"
      util measure "$dir/plain-rate.measure.json" --timeout "$timeout" -- \
        "$python" "$here/fsdp2_reference.py" "${args[@]}" >"$dir/plain-rate.json" \
        2>"$dir/plain-rate.log" || log "$preset: plain-rate exited with $? ($(tail -n 1 "$dir/plain-rate.log"))"
    fi
  fi
fi
[ "$dry_run" = 0 ] || extra+=(--dry-run)
util row "$dir" --hf-config "$hf_config" --hidden 0 --layers 0 --vocab "$vocab" --seq "$seq" \
  --micro-batch "$micro_batch" --skip "$warmup" "${extra[@]}" | tee -a "$out/results.jsonl"
log "done; results in $out/results.jsonl"
