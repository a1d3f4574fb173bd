#!/usr/bin/env bash
# GPT training throughput of pstar's chunk engine on one GPU against PyTorch FSDP2 with CPU
# offload (fused AdamW) in the same run, so that the ratio comes from one machine
# (bench/README.md, "GPU model benchmarks"). One JSON line per model size on stdout; progress on
# stderr; configs, logs and metrics under --out.
#
#   bench/gpu/gpt_bench.sh [--sizes 2048x24,4096x30,4096x36] [--largest] [--nproc N] [--dry-run] ...
#   bench/gpu/gpt_bench.sh --help
#
# Environment: PSTAR (the pstar binary), PYTHON (a python3 with torch).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)

usage() {
  cat <<'EOF'
Usage: bench/gpu/gpt_bench.sh [OPTIONS]

  --sizes LIST          HIDDENxLAYERS,... (default 2048x24,4096x30,4096x36; "" for none)
  --largest             also find the largest GPT pstar trains at --largest-hidden: the most
                        layers its start-up fit check accepts, stepping down if that fails
  --largest-hidden H    width for --largest (default 4096)
  --largest-layers LIST train exactly these layer counts, in order, up to the first failure
  --largest-tries N     at most N training runs for --largest (default 4)
  --steps N             timed steps per run (default 5)
  --warmup N            untimed steps first (default 2: pstar's tracing step and first planned one)
  --micro-batch B       sequences per step and GPU (default 8)
  --nproc N             train on N GPUs of this node (default 1): pstar train --nproc N, and
                        FSDP2-offload under torchrun --nproc_per_node N; tokens/s count the
                        global batch, TFLOPS are per GPU, host peaks the node's. Where pstar has
                        no NCCL communicator (pstar --version) its ranks use distributed.backend
                        "gloo" unless a --set names the backend. The plain references stay on one
                        GPU (the model-FLOPs rate of the step bound is one GPU's)
  --seq S               sequence length (default 1024)
  --vocab V             vocabulary (default 50257)
  --optimizer fused|foreach   the reference's torch.optim.AdamW (default fused)
  --plain auto|all|none the all-on-GPU PyTorch reference: auto runs it where its 16 bytes per
                        parameter take at most 48 GB (the 1.3B size); default auto
  --skip-pstar, --skip-fsdp2  leave one side out
  --bound auto|none     hold each of pstar's timed steps against its physical bound (Note [step
                        bound]): machine_rates.py measures the copy and host memory rates once,
                        and where the plain reference does not run at a size, it runs at the
                        same width with the most layers that fit (3 steps) for the model-FLOPs
                        rate; default auto
  --plain-rate FILE     with --bound auto: take the model-FLOPs rate from FILE (a plain-rate.json
                        of an earlier run at the same width) instead of running plain PyTorch
  --device-memory SIZE  pstar's engine.device_memory (default 64GiB: 80% of an 80 GB H100)
  --host-memory SIZE    pstar's engine.host_memory (default: unset, 80% of the machine's RAM)
  --hardware NAME       pstar estimate's GPU preset (default H100-80GB)
  --cpu-mem SIZE        pstar estimate's host memory (default 128GB)
  --timeout S           stop a training run after S seconds (default 0: no limit)
  --pstar PATH          the pstar binary (default $PSTAR, else build/cuda-release/pstar, else
                        build/cpu-release/pstar)
  --python PATH         python3 with torch (default $PYTHON, else the first of python3 and
                        /usr/bin/python3 that imports torch)
  --out DIR             where configs, logs and metrics go (default a new /tmp/pstar-gpt-bench.*)
  --set KEY=VALUE       extra pstar config override for every run (repeatable)
  --dry-run             train nothing on the GPU: write and check the configs (pstar estimate
                        --config), train a tiny model for 3 steps with pstar on the CPU to check
                        the data and metrics path, run fsdp2_reference.py --dry-run, and print
                        the JSON lines with null timings
EOF
}

sizes="2048x24,4096x30,4096x36"
largest=0 largest_hidden=4096 largest_layers="" largest_tries=4
steps=5 warmup=2 micro_batch=8 seq=1024 vocab=50257 optimizer=fused plain=auto
skip_pstar=0 skip_fsdp2=0 bound=auto plain_rate="" device_memory=64GiB host_memory="" hardware=H100-80GB cpu_mem=128GB
timeout=0 pstar=${PSTAR:-} python=${PYTHON:-} out="" dry_run=0 nproc=1
sets=()
while [ $# -gt 0 ]; do
  case "$1" in
    --sizes) sizes=$2; shift ;;
    --largest) largest=1 ;;
    --largest-hidden) largest_hidden=$2; shift ;;
    --largest-layers) largest_layers=$2; largest=1; shift ;;
    --largest-tries) largest_tries=$2; shift ;;
    --steps) steps=$2; shift ;;
    --warmup) warmup=$2; shift ;;
    --micro-batch) micro_batch=$2; shift ;;
    --nproc) nproc=$2; shift ;;
    --seq) seq=$2; shift ;;
    --vocab) vocab=$2; shift ;;
    --optimizer) optimizer=$2; shift ;;
    --plain) plain=$2; shift ;;
    --skip-pstar) skip_pstar=1 ;;
    --skip-fsdp2) skip_fsdp2=1 ;;
    --bound) bound=$2; shift ;;
    --plain-rate) plain_rate=$2; shift ;;
    --device-memory) device_memory=$2; shift ;;
    --host-memory) host_memory=$2; shift ;;
    --hardware) hardware=$2; shift ;;
    --cpu-mem) cpu_mem=$2; shift ;;
    --timeout) timeout=$2; shift ;;
    --pstar) pstar=$2; shift ;;
    --python) python=$2; shift ;;
    --out) out=$2; shift ;;
    --set) sets+=(--set "$2"); shift ;;
    --dry-run) dry_run=1 ;;
    -h|--help) usage; exit 0 ;;
    *) echo "gpt_bench: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
  shift
done
case "$plain" in auto|all|none) ;; *) echo "gpt_bench: --plain auto|all|none" >&2; exit 2 ;; esac
case "$optimizer" in fused|foreach) ;; *) echo "gpt_bench: --optimizer fused|foreach" >&2; exit 2 ;; esac
case "$bound" in auto|none) ;; *) echo "gpt_bench: --bound auto|none" >&2; exit 2 ;; esac
[[ "$nproc" =~ ^[1-9][0-9]*$ ]] || { echo "gpt_bench: --nproc '$nproc' is not a number of GPUs (1, 2, ...)" >&2; exit 2; }

log() { echo "[gpt_bench] $*" >&2; }
die() { log "error: $*"; exit 1; }

# shellcheck source=bench/gpu/bench_common.sh
. "$here/bench_common.sh"
find_pstar "$([ "$dry_run" = 0 ] && echo 1 || echo 0)"
find_python
util() { "$python" "$here/gpt_bench_util.py" "$@"; }

[ -n "$out" ] || out=$(mktemp -d /tmp/pstar-gpt-bench.XXXXXX)
mkdir -p "$out"
out=$(cd "$out" && pwd)
results=$out/results.jsonl
: >"$results"
log "pstar $pstar; python $python (torch $("$python" -c 'import torch; print(torch.__version__)')); output in $out"
if command -v nvidia-smi >/dev/null; then
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader >&2 || true
fi

# Several GPUs: as many visible as ranks (pstar refuses fewer unless told to share, and NCCL
# refuses two ranks on one GPU), and the backend pstar can use for them.
if [ "$nproc" -gt 1 ]; then
  if [ "$dry_run" = 0 ]; then
    gpus=$("$python" -c 'import torch; print(torch.cuda.device_count())')
    [ "$gpus" -ge "$nproc" ] ||
      die "--nproc $nproc: $gpus GPU(s) visible (CUDA_VISIBLE_DEVICES '${CUDA_VISIBLE_DEVICES:-unset}'); train on at most $gpus"
  fi
  if ! printf '%s\n' "${sets[@]}" | grep -q '^distributed\.backend='; then
    nccl=$("$pstar" --version | grep '^NCCL communicator:' || true)
    if [ "$nccl" = "NCCL communicator: built" ]; then
      log "--nproc $nproc: pstar's ranks over NCCL"
    else
      sets+=(--set distributed.backend=gloo)
      log "--nproc $nproc: ${nccl:-pstar names no NCCL communicator}; its ranks gather and reduce through host memory over Gloo (distributed.backend \"gloo\")"
    fi
  fi
fi

# One Mi random ids: 128 sequences' worth, plenty for random sampling; validated by pstar in one
# scan at start-up.
tokens=$out/tokens.bin
util tokens "$tokens" --count 1048576 --vocab "$vocab"

# Note [step bound]: the machine's copy and host memory rates, measured once in this run.
rates=""
if [ "$bound" = auto ]; then
  rates=$out/rates.json
  "$python" "$here/machine_rates.py" $([ "$dry_run" = 0 ] || echo --dry-run) >"$rates" \
    2>"$out/rates.log" || die "machine_rates.py failed: $(tail -n 1 "$out/rates.log")"
  log "rates: $(util rates-line "$rates")"
fi

# The hardware-wide prediction: the largest model pstar estimate says fits at this workload.
estimate_hw=(--hardware "$hardware" --cpu-mem "$cpu_mem" --gpus-per-node "$nproc")
rc=0
"$pstar" estimate "${estimate_hw[@]}" --micro-batch "$micro_batch" --seq-len "$seq" \
  --vocab "$vocab" --json >"$out/estimate-max.json" 2>"$out/estimate-max.log" || rc=$?
[ "$rc" = 0 ] || [ "$rc" = 5 ] || die "pstar estimate failed ($rc): $(tail -n 1 "$out/estimate-max.log")"

plain_for() {  # 1 if the plain reference runs for this parameter count
  case "$plain" in
    all) echo 1 ;;
    none) echo 0 ;;
    auto) "$python" -c "import sys; sys.exit(0 if 16 * $1 <= 48e9 else 1)" && echo 1 || echo 0 ;;
  esac
}

rate_layers_for() {  # the most layers (at most $2) of width $1 whose plain run fits (0: none)
  "$python" -c "
h, L, v, s = $1, $2, $vocab, $seq
fits = [l for l in range(1, L + 1) if 16 * (l * (12 * h * h + 13 * h) + v * h + s * h + 2 * h) <= 48e9]
print(max(fits) if fits else 0)"
}

params_of() {  # pstar's parameter count of hidden $1, layers $2
  "$python" -c "h, L = $1, $2; print(L * (12 * h * h + 13 * h) + $vocab * h + $seq * h + 2 * h)"
}

# engine.mode=torch among the --set overrides: pstar's plain LibTorch engine (everything on the
# GPU, torch::optim's Adam), which pstar estimate does not model; a diagnostic that separates the
# model's own cost from the chunk engine's.
torch_engine=0
for s in "${sets[@]}"; do [[ "$s" != engine.mode=torch ]] || torch_engine=1; done

# Writes DIR/pstar.json for hidden $2, layers $3 and checks it with pstar estimate (whose parser
# is pstar train's) on the named hardware: exit 0 fits, 5 predicted not to fit, else invalid.
write_config() {
  local dir=$1 hidden=$2 layers=$3 rc=0
  mkdir -p "$dir"
  util config "$dir/pstar.json" --hidden "$hidden" --layers "$layers" \
    --heads $((hidden >= 128 ? hidden / 128 : 1)) \
    --vocab "$vocab" --seq "$seq" --micro-batch "$micro_batch" --steps $((warmup + steps)) \
    --tokens "$tokens" --device-memory "$device_memory" --host-memory "$host_memory"
  if [ "$torch_engine" = 1 ]; then
    log "${hidden}x${layers}: engine.mode=torch: no estimate (it models the chunk engine)"
    return 0
  fi
  "$pstar" estimate --config "$dir/pstar.json" "${sets[@]}" "${estimate_hw[@]}" --json \
    >"$dir/estimate.json" 2>"$dir/estimate.log" || rc=$?
  case "$rc" in
    0) ;;
    5) log "${hidden}x${layers}: pstar estimate predicts it does not fit: $(tail -n 1 "$dir/estimate.log")" ;;
    *) die "${hidden}x${layers}: pstar rejects the config ($rc): $(tail -n 1 "$dir/estimate.log")" ;;
  esac
}

# reference(DIR, NAME, MODE, HIDDEN, LAYERS, [STEPS, WARMUP]): fsdp2_reference.py into DIR/NAME.*
reference() {
  local dir=$1 name=$2 mode=$3 hidden=$4 layers=$5
  local args=(--mode "$mode" --optimizer "$optimizer" --hidden "$hidden" --layers "$layers"
              --seq "$seq" --micro-batch "$micro_batch" --vocab "$vocab" --steps "${6:-$steps}"
              --warmup "${7:-$warmup}")
  if [ "$dry_run" = 1 ]; then
    "$python" "$here/fsdp2_reference.py" "${args[@]}" --dry-run >"$dir/$name.json" \
      2>"$dir/$name.log" || die "fsdp2_reference.py --dry-run failed: $(tail -n 1 "$dir/$name.log")"
    return
  fi
  # FSDP2-offload on --nproc GPUs under torchrun; the plain references on one.
  local launch=("$python") gpus=1
  if [ "$mode" = fsdp2-offload ] && [ "$nproc" -gt 1 ]; then
    launch=("$python" -m torch.distributed.run --standalone --nproc_per_node "$nproc")
    gpus=$nproc
  fi
  log "${hidden}x${layers}: $name ($mode, $optimizer AdamW, $gpus GPU(s))"
  util measure "$dir/$name.measure.json" --timeout "$timeout" --gpus "$gpus" -- \
    "${launch[@]}" "$here/fsdp2_reference.py" "${args[@]}" >"$dir/$name.json" 2>"$dir/$name.log" ||
    log "${hidden}x${layers}: $name exited with $? ($(tail -n 1 "$dir/$name.log"))"
}

run_pstar() {  # run_pstar(DIR, HIDDEN, LAYERS); returns pstar's exit code
  local dir=$1 hidden=$2 layers=$3 rc=0
  log "${hidden}x${layers}: pstar train ($((warmup + steps)) steps, $nproc GPU(s))"
  util measure "$dir/pstar.measure.json" --timeout "$timeout" --gpus "$nproc" -- \
    "$pstar" train "$dir/pstar.json" "${sets[@]}" --device cuda --nproc "$nproc" \
    --metrics "$dir/pstar.metrics.jsonl" >"$dir/pstar.log" 2>&1 || rc=$?
  [ "$rc" = 0 ] || log "${hidden}x${layers}: pstar exited with $rc ($(tail -n 1 "$dir/pstar.log"))"
  return "$rc"
}

row() {  # row(DIR, HIDDEN, LAYERS, [LARGEST_JSON]): one JSON line to stdout and results.jsonl
  local extra=()
  [ "$dry_run" = 0 ] || extra+=(--dry-run)
  [ -z "${4:-}" ] || extra+=(--largest "$4")
  [ -z "$rates" ] || extra+=(--rates "$rates")
  util row "$1" --hidden "$2" --layers "$3" --vocab "$vocab" --seq "$seq" \
    --micro-batch "$micro_batch" --skip "$warmup" --nproc "$nproc" "${extra[@]}" | tee -a "$results"
}

bench_size() {  # bench_size(HIDDEN, LAYERS)
  local hidden=$1 layers=$2 dir=$out/size-$1x$2
  write_config "$dir" "$hidden" "$layers"
  local with_plain
  with_plain=$(plain_for "$(params_of "$hidden" "$layers")")
  if [ "$dry_run" = 0 ] && [ "$skip_pstar" = 0 ]; then run_pstar "$dir" "$hidden" "$layers" || true; fi
  [ "$skip_fsdp2" = 1 ] || reference "$dir" fsdp2 fsdp2-offload "$hidden" "$layers"
  [ "$with_plain" = 0 ] || reference "$dir" plain plain "$hidden" "$layers"
  # Note [step bound]: plain PyTorch's model-FLOPs rate at the same width, if not measured above.
  if [ "$bound" = auto ] && [ "$with_plain" = 0 ] && [ "$skip_pstar" = 0 ]; then
    local rate_layers
    rate_layers=$(rate_layers_for "$hidden" "$layers")
    if [ -n "$plain_rate" ]; then
      cp "$plain_rate" "$dir/plain-rate.json" || die "--plain-rate: cannot read $plain_rate"
    elif [ "$rate_layers" -gt 0 ]; then
      reference "$dir" plain-rate plain "$hidden" "$rate_layers" 3 1
    else
      log "${hidden}x${layers}: no plain PyTorch model of width $hidden fits; no compute term"
    fi
  fi
  row "$dir" "$hidden" "$layers"
}

estimate_max_model() {  # the shape pstar estimate found largest for the whole machine, as JSON
  "$python" -c 'import json, sys; print(json.dumps(json.load(open(sys.argv[1])).get("model")))' \
    "$out/estimate-max.json"
}

# 0 if pstar's start-up fit check accepts DIR/pstar.json with LAYERS layers. pstar train runs the
# same check (plan::check_fit) against the config's own budgets, so on the GPU machine this is
# what train will do; a dry run checks against --hardware/--cpu-mem instead, since this machine's
# RAM sets the default host budget.
fits_layers() {  # fits_layers(DIR, LAYERS)
  local hw=() rc=0
  [ "$dry_run" = 0 ] || hw=("${estimate_hw[@]}")
  "$pstar" estimate --config "$1/pstar.json" "${sets[@]}" --set "model.layers=$2" "${hw[@]}" \
    >/dev/null 2>&1 || rc=$?
  [ "$rc" = 0 ] || [ "$rc" = 5 ] || die "pstar estimate --config failed ($rc) at $2 layers"
  return "$rc"
}

# The largest GPT pstar trains at width --largest-hidden. Models larger than the start-up fit
# check allows are refused before anything is built, so the search bisects on that check (about a
# second per probe) and trains only there; a run that fails anyway (out of memory at run time)
# steps down. FSDP2 offload needs about 16 bytes per parameter of host memory, so only pstar runs.
find_largest() {
  local hidden=$largest_hidden candidates=() tried="" best="" rc=0 predicted lo hi mid
  "$pstar" estimate "${estimate_hw[@]}" --micro-batch "$micro_batch" --seq-len "$seq" \
    --vocab "$vocab" --hidden "$hidden" --json >"$out/largest-estimate.json" \
    2>"$out/largest-estimate.log" || rc=$?
  [ "$rc" = 0 ] || die "pstar estimate finds no model at hidden $hidden: $(tail -n 1 "$out/largest-estimate.log")"
  predicted=$(util estimate-layers "$out/largest-estimate.json")
  local probe=$out/largest-probe
  write_config "$probe" "$hidden" 1 2>/dev/null
  lo=0 hi=$((2 * predicted + 2))
  fits_layers "$probe" "$hi" && die "the fit check accepts ${hidden}x$hi; raise the search bound"
  while [ $((hi - lo)) -gt 1 ]; do  # lo fits (0 trivially), hi does not
    mid=$(((lo + hi) / 2))
    if fits_layers "$probe" "$mid"; then lo=$mid; else hi=$mid; fi
  done
  [ "$lo" -gt 0 ] || die "the fit check refuses ${hidden}x1"
  log "largest: pstar estimate --hardware predicts ${hidden}x$predicted; the fit check accepts up to ${hidden}x$lo ($(params_of "$hidden" "$lo") parameters)"
  if [ -n "$largest_layers" ]; then
    IFS=, read -r -a candidates <<<"$largest_layers"
  else
    local step=$(( lo / 16 > 0 ? lo / 16 : 1 ))
    for ((i = 0; i < largest_tries && lo - i * step > 0; i++)); do candidates+=($((lo - i * step))); done
  fi
  local info max_model
  max_model=$(estimate_max_model)
  info="\"hidden\": $hidden, \"estimate_layers\": $predicted, \"fit_check_layers\": $lo, \"estimate_max\": $max_model"
  if [ "$dry_run" = 1 ]; then
    local dir=$out/size-${hidden}x${candidates[0]}
    write_config "$dir" "$hidden" "${candidates[0]}"
    row "$dir" "$hidden" "${candidates[0]}" \
      "{$info, \"candidates\": [$(IFS=,; echo "${candidates[*]}")], \"tried\": [], \"trained_layers\": null}"
    return
  fi
  local layers shown=""
  for layers in "${candidates[@]}"; do
    local dir=$out/size-${hidden}x$layers rc=0
    write_config "$dir" "$hidden" "$layers"
    run_pstar "$dir" "$hidden" "$layers" || rc=$?
    tried+="${tried:+, }{\"layers\": $layers, \"exit_code\": $rc}"
    shown=$layers
    # Explicit lists go up until a failure; the searched list goes down until a success.
    if [ -n "$largest_layers" ]; then
      if [ "$rc" = 0 ]; then best=$layers; else break; fi
    elif [ "$rc" = 0 ]; then
      best=$layers
      break
    fi
  done
  shown=${best:-$shown}
  row "$out/size-${hidden}x$shown" "$hidden" "$shown" \
    "{$info, \"tried\": [$tried], \"trained_layers\": ${best:-null}}"
}

if [ "$dry_run" = 1 ]; then
  # The data and metrics path at toy size on the CPU: the same token file and config keys, a
  # 2-layer model of width 64 (vocab unchanged, so the ids are checked against it), on --nproc
  # ranks over Gloo.
  smoke=$out/smoke
  write_config "$smoke" 2048 24
  "$pstar" train "$smoke/pstar.json" "${sets[@]}" --set model.hidden=64 --set model.layers=2 \
    --set model.heads=2 --set model.seq_len=64 --set train_micro_batch_size_per_gpu=2 \
    --set training.steps=3 --set engine.device_memory=1GiB --set engine.host_memory=1GiB \
    --device cpu --nproc "$nproc" --metrics "$smoke/pstar.metrics.jsonl" >"$smoke/pstar.log" 2>&1 ||
    die "the CPU smoke run of pstar failed: $(tail -n 1 "$smoke/pstar.log")"
  echo '{"exit_code": 0, "timed_out": false, "wall_s": 0, "host_peak_bytes": 0, "gpu_used_peak_bytes": null}' \
    >"$smoke/pstar.measure.json"
  util row "$smoke" --hidden 64 --layers 2 --vocab "$vocab" --seq 64 --micro-batch 2 --skip 1 \
    --heads 2 --nproc "$nproc" ${rates:+--rates "$rates"} >"$smoke/row.json" 2>/dev/null
  "$python" - "$smoke/row.json" "$smoke/pstar.metrics.jsonl" "$nproc" <<'EOF' || die "the smoke run's metrics did not parse"
import json, sys
row = json.load(open(sys.argv[1]))
assert row["pstar"]["steps_done"] == 3 and row["pstar"]["tokens_per_s"] > 0, row["pstar"]
# The row counts every rank's micro-batch, as pstar's metrics count the global batch.
last = [json.loads(l) for l in open(sys.argv[2]) if '"step_time_s"' in l][-1]
assert last["tokens"] == 3 * int(sys.argv[3]) * 2 * 64, last
assert row["params_agree"] and row["pstar"]["params_logged"] == row["params"], row
bound = row["bound"]
if bound is not None:  # --bound auto: host memory measured, each timed step held against it
    assert bound["host_memory_bytes_per_s"] > 0 and len(bound["steps"]) == 2, bound
    assert all(s["host_adam_s"] is not None for s in bound["steps"]), bound
EOF
  log "smoke: pstar trained 3 steps on the CPU on $nproc rank(s); its metrics and parameter count parse"
fi

IFS=, read -r -a size_list <<<"$sizes"
for size in "${size_list[@]}"; do
  [[ "$size" =~ ^([0-9]+)x([0-9]+)$ ]] || die "--sizes: '$size' is not HIDDENxLAYERS"
  bench_size "${BASH_REMATCH[1]}" "${BASH_REMATCH[2]}"
done
[ "$largest" = 0 ] || find_largest
log "done; results in $results"
