# Sourced by gpt_bench.sh, llama_bench.sh and family_bench.sh: the options the model benchmarks
# share, finding the pstar binary and a python3 with torch. The finders expect `repo` (the
# repository root) and `die`, and set or check `pstar` and `python`.

# shared_option ARG [VALUE]: one of the options llama_bench.sh and family_bench.sh both take, into
# the variable of its name (--set appends to the array `sets`, the flags set 1); `taken` is how
# many words it used.
# Returns 1 for any other ARG.
shared_option() {
  taken=2
  case "$1" in
    --steps) steps=$2 ;;
    --warmup) warmup=$2 ;;
    --micro-batch) micro_batch=$2 ;;
    --seq) seq=$2 ;;
    --clip) clip=$2 ;;
    --device-memory) device_memory=$2 ;;
    --host-memory) host_memory=$2 ;;
    --timeout) timeout=$2 ;;
    --pstar) pstar=$2 ;;
    --python) python=$2 ;;
    --out) out=$2 ;;
    --set) sets+=(--set "$2") ;;
    --dry-run) dry_run=1; taken=1 ;;
    --skip-pstar) skip_pstar=1; taken=1 ;;
    *) return 1 ;;
  esac
}

# The help of shared_option's options (but --dry-run, which each script says in its own words).
shared_usage() {
  cat <<'EOF'
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
EOF
}

# find_pstar NEED_CUDA: $pstar, else the CUDA build, else the CPU build. With NEED_CUDA=1 a build
# without the CUDA device tier stops here: it would fail every run at start-up and leave empty
# rows. `pstar --version` names the build's features.
find_pstar() {
  if [ -z "$pstar" ]; then
    pstar=$repo/build/cpu-release/pstar
    [ -x "$repo/build/cuda-release/pstar" ] && pstar=$repo/build/cuda-release/pstar
  fi
  [ -x "$pstar" ] || die "no pstar binary at $pstar (--pstar PATH or PSTAR=...)"
  if [ "$1" = 1 ] && ! "$pstar" --version 2>/dev/null | grep -q "CUDA device tier: built"; then
    die "$pstar has no CUDA device tier ($("$pstar" --version 2>&1 | tr '\n' ' ')); build the cuda-release preset (scripts/gpu-verify.sh --only build)"
  fi
}

# find_python: $python, else the first of python3 and /usr/bin/python3 that imports torch.
find_python() {
  if [ -z "$python" ]; then
    local candidate
    for candidate in python3 /usr/bin/python3; do
      if command -v "$candidate" >/dev/null && "$candidate" -c 'import torch' 2>/dev/null; then
        python=$candidate
        break
      fi
    done
  fi
  [ -n "$python" ] || die "no python3 with torch found (--python PATH or PYTHON=...)"
  "$python" -c 'import torch' 2>/dev/null || die "$python cannot import torch"
}

# pstar_side MODEL NAME [NOTE]: the pstar side of llama_bench.sh and family_bench.sh: the random
# token file of `vocab` ids (kept in `out` for later runs), pstar's config with MODEL (a JSON object)
# as its model section, checked by `pstar estimate --config` on an H100 with 128 GB (a config pstar
# rejects stops the script; one that does not fit, exit 5, goes on), and, unless a dry run or
# --skip-pstar, `pstar train` measured, NAME (and NOTE) in its log lines. Expects the scripts' own
# variables (dir, out, vocab, seq, micro_batch, steps, warmup, device_memory, host_memory, clip,
# sets, timeout, dry_run, skip_pstar) and functions (util, log, die).
pstar_side() {
  local model=$1 name=$2 note=${3:-} rc=0
  local tokens=$out/tokens-$vocab.bin
  [ -f "$tokens" ] || util tokens "$tokens" --count 1048576 --vocab "$vocab"
  # --hidden/--layers/--heads are unused when --model is given; the config writer requires them.
  util config "$dir/pstar.json" --hidden 0 --layers 0 --heads 0 --vocab "$vocab" --seq "$seq" \
    --micro-batch "$micro_batch" --steps $((warmup + steps)) --tokens "$tokens" \
    --device-memory "$device_memory" --host-memory "$host_memory" --clip "$clip" --model "$model"
  "$pstar" estimate --config "$dir/pstar.json" "${sets[@]}" --hardware H100-80GB --cpu-mem 128GB \
    --json >"$dir/estimate.json" 2>"$dir/estimate.log" || rc=$?
  case "$rc" in
    0|5) ;;
    *) die "pstar rejects the config ($rc): $(tail -n 1 "$dir/estimate.log")" ;;
  esac
  [ "$dry_run" = 0 ] && [ "$skip_pstar" = 0 ] || return 0
  log "$name: pstar train ($((warmup + steps)) steps$note)"
  rc=0
  util measure "$dir/pstar.measure.json" --timeout "$timeout" -- \
    "$pstar" train "$dir/pstar.json" "${sets[@]}" --device cuda \
    --metrics "$dir/pstar.metrics.jsonl" >"$dir/pstar.log" 2>&1 || rc=$?
  [ "$rc" = 0 ] || log "$name: pstar exited with $rc ($(tail -n 1 "$dir/pstar.log"))"
}

# fsdp2_side NAME WHAT ARG...: fsdp2_reference.py ARG... into dir/fsdp2.json: in a dry run its
# --dry-run (a failure stops the script), else the training run measured (a failure is logged, and
# the row says it), NAME and WHAT in its log lines.
fsdp2_side() {
  local name=$1 what=$2
  shift 2
  if [ "$dry_run" = 1 ]; then
    "$python" "$here/fsdp2_reference.py" "$@" --dry-run >"$dir/fsdp2.json" 2>"$dir/fsdp2.log" ||
      die "fsdp2_reference.py --dry-run failed: $(tail -n 1 "$dir/fsdp2.log")"
    return 0
  fi
  log "$name: FSDP2-offload $what"
  util measure "$dir/fsdp2.measure.json" --timeout "$timeout" -- \
    "$python" "$here/fsdp2_reference.py" "$@" >"$dir/fsdp2.json" 2>"$dir/fsdp2.log" ||
    log "$name: fsdp2 exited with $? ($(tail -n 1 "$dir/fsdp2.log"))"
}

# start_run TEMPLATE: pstar found (with its CUDA tier, unless a dry run or --skip-pstar) and a
# python3 with torch; `util` (gpt_bench_util.py) defined; `out` made absolute, a new folder from
# `mktemp -d TEMPLATE` when none was given.
start_run() {
  find_pstar "$([ "$dry_run" = 0 ] && [ "$skip_pstar" = 0 ] && echo 1 || echo 0)"
  find_python
  util() { "$python" "$here/gpt_bench_util.py" "$@"; }
  [ -n "$out" ] || out=$(mktemp -d "$1")
  mkdir -p "$out"
  out=$(cd "$out" && pwd)
}
