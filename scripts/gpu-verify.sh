#!/usr/bin/env bash
# The whole GPU check in one command, for a machine with an NVIDIA GPU, CUDA, PyTorch (its
# LibTorch is what pstar builds against), CMake and Ninja, and no package registry:
#
#   scripts/gpu-deps.sh            # here, where Debian's packages can be downloaded: .gpu-deps/
#   scripts/gpu-verify.sh OUT_DIR  # there, with .gpu-deps/ carried beside the tree
#
# Phases, each timed, in the GPU ledger's order of priority (--only/--skip take comma lists of
# their names):
#   build    configure (the cuda-release preset's settings, into BUILD_DIR) and build against the
#            installed PyTorch's LibTorch (-j = cores) the targets the chosen phases need, then
#            check that the kernels carry sm_90 machine code (cuobjdump); a second call on the
#            same machine finds the build there and only brings it up to date
#   gpu      ctest -L '^gpu$': fails if any GPU test fails or is skipped (a skip means no usable
#            GPU)
#   devices  where nvidia-smi lists two GPUs or more, ctest -L '^multidevice$' (ranks on GPUs of
#            their own, tests/cmd/train_devices_test.cpp); recorded as skipped with one GPU
#   gpt7b    the 7.46B GPT (4096x36) beside FSDP2-offload: gpt_bench.sh --steps 3 --warmup 2
#   gpt7bclip  the same size, pstar alone, with gradient_clipping 1.0 and host Adam waiting for
#            the gradient norm (engine.speculative_adam false)
#   gpt7bspec  the same with engine.speculative_adam true (Note [speculative adam]): its step time
#            and step / bound beside gpt7bclip's
#   gpt7bspecloose  the same with gradient_clipping 100: the norm is still needed, but no step
#            clips, so nothing is rolled back (what speculation gains where steps do not clip)
#   gpt7bauto  gradient_clipping 1.0 with engine.speculative_adam "auto" (Note [speculation by
#            cost]), 4 timed steps after 9: the rule measures waiting steps 3-5 and, where it
#            tries speculating, steps 7-9, so the timed steps are what it decided (issue 56: within
#            5% of gpt7b's step where clipping rarely fires, never slower than gpt7bclip's)
#   (PSTAR_ADAM_STREAMING=0 no longer measures ordinary stores under speculation, the former
#   gpt7bnostream: speculation now redirects only spans that stream, so it turns speculation off)
#   llama8b  Llama-3.1-8B from random initialisation (llama_bench.sh: seq 2048, micro-batch 4,
#            clipping 1.0)
#   llama8bspec  the same with engine.speculative_adam true
#   llama8bnoclip  the same with gradient_clipping 0: the step llama8b's and llama8bspec's are
#            held against (issue 56; llama8b clips every step from random initialisation)
#   llama8bfolder  the same from a Hugging Face folder written to local disk first (LLAMA_FOLDER,
#            default /tmp/pstar-llama-3.1-8b-hf, kept for a later call)
#   llama3b  Llama-3.2-3B, pstar beside FSDP2-offload (the largest Llama preset FSDP2-offload
#            holds in 128 GB at about 17 bytes per parameter)
#   families  each decoder family's tiny folder written by transformers' save_pretrained, its losses
#            at steps 1 and 2 from transformers' own classes, from tests/reference's float64
#            script and from pstar (bench/gpu/hf_family_parity.py; fails beyond 1e-5; recorded as
#            skipped where the Python has no transformers)
#   qwen3    Qwen3-8B cut to 28 layers (6.6B parameters), pstar beside FSDP2-offload on
#            transformers' Qwen3ForCausalLM (bench/gpu/family_bench.sh; both sides the same
#            config.json; FSDP2-offload holds about 7.5B parameters in 128 GB)
#   gemma3   Gemma-3-12B cut to 26 layers, the same, on Gemma3ForCausalLM
#   qwen3moe Qwen3-30B-A3B cut to 10 layers (6.9B parameters, 1.2B active), the same, on
#            Qwen3MoeForCausalLM (TFLOPS over the active parameters on both sides)
#   trace    one step of the 1.3B size traced by LibTorch's profiler (PSTAR_TORCH_TRACE, Note
#            [torch trace]) in pstar's chunk engine, in its torch engine and in plain PyTorch,
#            summarised side by side by bench/gpu/trace_summary.py into OUT/trace-summary.txt
#   suite    the whole test suite (every label but gpu and fuzz) against that LibTorch
#   kernels  pstar-bench-adam-kernel: Adam and sum of squares against the device's bandwidth
#   bench    bench/gpu/gpt_bench.sh: pstar beside FSDP2-offload (BENCH_ARGS adds arguments, e.g.
#            BENCH_ARGS="--sizes 2048x24 --steps 3")
#   variants the 7.46B size with engine.prefetch=false and with engine.overlap_adam=false; the
#            1.3B size with use_cpu_embedding=true (PatrickStar's host embedding, off by default on
#            a GPU: Note [cpu embedding]) and with engine.mode=torch (the model without the chunk
#            engine) (VARIANTS names a subset: noprefetch nooverlap cpuembedding torchengine)
#   largest  the largest GPT pstar trains (gpt_bench.sh --largest --skip-fsdp2)
#   scaling  where nvidia-smi lists two GPUs or more: the 7.46B GPT on 1 GPU and on all of them (at
#            most 8), pstar beside FSDP2-offload each time (gpt_bench.sh --nproc); skipped with
#            one GPU
# OUT_DIR receives summary.json (every phase: status, seconds, and the benchmark rows), summary.md
# (a short table), result.json (the record for bench/results/: commit, card, versions, figures,
# and the changes against the last record of the same card) and tails.txt (the end of each
# phase's log), rewritten after every phase, so that a call stopped at its limit still returns
# them. Whole logs, configs and traces go to --work DIR (default OUT_DIR itself). Exit status: 0
# when every phase run passed.
#
# --deadline S: a phase starts only if it is expected to end within S seconds of the script's
# start (the expected seconds per phase, measured on an H100, are in phase_seconds below;
# PHASE_SECONDS="gpt7b=200,llama8b=90" overrides them); one that would not is recorded as skipped
# (the exit status is then 1), and later, shorter phases may still run.
#
# Environment: PYTHON (python3 with torch), PSTAR_DEPS_DIR (default .gpu-deps), BUILD_DIR
# (build/cuda-release; give one outside a carried folder, e.g. /tmp/pstar-cuda, so that a second
# call finds it), JOBS (nproc), CUDA_ARCHS (90), PSTAR_COMMIT (the commit tested, for
# result.json: the device gets no .git), LLAMA_FOLDER.
set -uo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)

usage() { sed -n '2,/^set -uo/p' "$0" | grep '^#' | sed 's/^# \{0,1\}//'; }
all_phases=(build gpu devices gpt7b gpt7bclip gpt7bspec gpt7bspecloose gpt7bauto llama8b llama8bspec
            llama8bnoclip llama8bfolder llama3b families qwen3 gemma3 qwen3moe trace suite kernels
            tensorboard bench
            variants largest scaling)
# Expected seconds of each phase on an H100 (16 cores): the ledger run of 2026-11-27 (build 165 s
# with every target, gpu 71, gpt7b 158, gpt7bclip 52, llama8b 47, llama8bfolder 63 with the folder
# written, llama3b 105, suite 39) with about 20% added; --deadline uses them. bench depends on
# BENCH_ARGS: its figure is the 7.46B size's. Since the step bound (Note [step bound]), gpt7b and the
# Llama phases also run machine_rates.py and a short plain PyTorch run for the model-FLOPs rate. On
# an H200 (2026-11-27, with those runs): build 119 s cold (pstar and the gpu tests), gpu 73,
# gpt7bclip 76 (it measured the rate), gpt7bspec 61, gpt7bspecloose 58, llama8b 66, llama8bspec 68.
phase_seconds() {
  local name=$1 pair
  local overrides=${PHASE_SECONDS:-}
  for pair in ${overrides//,/ }; do
    [ "${pair%%=*}" != "$name" ] || { echo "${pair#*=}"; return; }
  done
  case "$name" in
    build) [ -f "$build/build.ninja" ] && echo 60 || echo 190 ;;  # 151 s on the H100, before the NCCL communicator and its tests
    gpu) echo 140 ;;  # 73 s on the H200 before the split-module, killed-rank and NCCL tests: guessed
    devices) echo 90 ;;
    gpt7b) echo 230 ;;
    gpt7bclip) echo 70 ;;
    gpt7bspec|gpt7bspecloose) echo 70 ;;
    gpt7bauto) echo 100 ;;  # guessed: 13 steps of about 2 s after the set-up
    llama8b|llama8bspec|llama8bnoclip) echo 100 ;;
    llama8bfolder) echo 120 ;;
    llama3b) echo 160 ;;
    trace) echo 100 ;;
    suite) echo 50 ;;
    kernels) echo 20 ;;
    tensorboard) echo 30 ;;  # guessed: a 6-step gpt-tiny run and TensorBoard's reader
    families) echo 60 ;;  # guessed: six tiny models, two steps each, in transformers and pstar
    qwen3|gemma3|qwen3moe) echo 240 ;;  # guessed: gpt7b's pair at about the same size
    bench) echo 300 ;;
    variants) echo 500 ;;
    largest) echo 300 ;;
    scaling) echo 700 ;;  # guessed: two gpt7b-sized pairs, set-up not yet measured on several
  esac
}
only="" skip="" deadline=0
out="" work=""
while [ $# -gt 0 ]; do
  case "$1" in
    --only) only=$2; shift ;;
    --skip) skip=$2; shift ;;
    --work) work=$2; shift ;;
    --deadline) deadline=$2; shift
      [[ "$deadline" =~ ^[0-9]+$ ]] ||
        { echo "gpu-verify: --deadline takes whole seconds, got '$deadline'" >&2; exit 2; } ;;
    -h|--help) usage; exit 0 ;;
    -*) echo "gpu-verify: unknown option '$1' (see --help)" >&2; exit 2 ;;
    *) [ -z "$out" ] || { echo "gpu-verify: one OUT_DIR, got '$out' and '$1'" >&2; exit 2; }
       out=$1 ;;
  esac
  shift
done
[ -n "$out" ] || { echo "gpu-verify: give the output folder: scripts/gpu-verify.sh OUT_DIR" >&2; exit 2; }
for p in ${only//,/ } ${skip//,/ }; do
  [[ " ${all_phases[*]} " == *" $p "* ]] ||
    { echo "gpu-verify: unknown phase '$p' (phases: ${all_phases[*]})" >&2; exit 2; }
done
mkdir -p "$out"
out=$(cd "$out" && pwd)
work=${work:-$out}
mkdir -p "$work"
work=$(cd "$work" && pwd)
build=${BUILD_DIR:-build/cuda-release}
mkdir -p "$build"
build=$(cd "$build" && pwd)
jobs=${JOBS:-$(nproc)}
deps=${PSTAR_DEPS_DIR:-$repo/.gpu-deps}
python=${PYTHON:-python3}
phase_results=$out/phases.jsonl
: >"$phase_results"
failed=0
nccl_failed=0  # phase_build: the NCCL communicator did not compile, and pstar was built without it
t_all=$(date +%s)

wanted() {
  if [ -n "$only" ]; then [[ ",$only," == *",$1,"* ]] || return 1; fi
  [[ ",$skip," != *",$1,"* ]]
}
say() { echo "[gpu-verify $(date +%H:%M:%S)] $*" >&2; }

# run_phase NAME COMMAND...: runs it with its output in WORK/NAME.log (and on stderr), records
# status and seconds, and rewrites the summaries in OUT.
run_phase() {
  local name=$1 start rc
  shift
  wanted "$name" || return 0
  local elapsed=$(($(date +%s) - t_all)) expected
  expected=$(phase_seconds "$name")
  if [ "$deadline" -gt 0 ] && [ $((elapsed + expected)) -gt "$deadline" ]; then
    failed=1
    printf '{"phase": "%s", "status": "skipped", "exit_code": null, "seconds": 0, "expected_seconds": %d}\n' \
      "$name" "$expected" >>"$phase_results"
    say "phase $name: skipped: ${elapsed} s have passed and it takes about ${expected} s; --deadline is ${deadline} s"
    write_summary
    return 0
  fi
  say "phase $name: start (about ${expected} s)"
  start=$(date +%s)
  "$@" > >(tee "$work/$name.log") 2>&1
  rc=$?
  local secs=$(($(date +%s) - start))
  local status=passed
  if [ "$rc" = 77 ]; then
    status=skipped  # the machine lacks what the phase needs (phase_devices)
  elif [ "$rc" != 0 ]; then
    status=failed
    failed=1
  fi
  printf '{"phase": "%s", "status": "%s", "exit_code": %d, "seconds": %d, "expected_seconds": %d}\n' \
    "$name" "$status" "$rc" "$secs" "$expected" >>"$phase_results"
  say "phase $name: $status in ${secs} s"
  write_summary
  return 0
}

# The targets the chosen phases run: the suite needs everything.
build_targets() {
  if wanted suite; then echo all; return; fi
  local targets=(pstar)
  wanted gpu && targets+=(engine_cuda_tests engine_tier_gpu_tests engine_model_gpu_tests engine_dist_gpu_tests
                           cmd_gpu_tests)
  wanted devices && targets+=(cmd_devices_tests)
  wanted kernels && targets+=(pstar-bench-adam-kernel)
  echo "${targets[*]}"
}

phase_build() {
  command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
  echo "nvcc: $(nvcc --version | tail -n 1)"
  echo "c++: $(c++ --version | head -n 1); $(cmake --version | head -n 1); ninja $(ninja --version)"
  local torch_prefix
  torch_prefix=$("$python" -c 'import torch; print(torch.utils.cmake_prefix_path)') || {
    echo "gpu-verify: $python cannot import torch (set PYTHON)"; return 1; }
  echo "torch: $("$python" -c 'import torch; print(torch.__version__, torch.version.cuda)') at $torch_prefix"
  # The cuda-release preset's settings with an explicit -B: --preset alone writes to the preset's
  # binaryDir whatever BUILD_DIR says.
  local args=(-S "$repo" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DPSTAR_WITH_CUDA=ON
              -DCMAKE_PREFIX_PATH="$torch_prefix"
              -DCMAKE_CUDA_ARCHITECTURES="${CUDA_ARCHS:-90}"
              -DCMAKE_CUDA_COMPILER="$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)"
              -DCMAKE_POLICY_VERSION_MINIMUM=3.5)
  # NCCL's header for the NCCL communicator: the toolkit's, else the nvidia-nccl wheel's that
  # PyTorch loads its NCCL from.
  local nccl_include
  nccl_include=$("$python" -c 'import os, nvidia.nccl as n; print(os.path.join(list(n.__path__)[0], "include"))' 2>/dev/null) || true
  if [ ! -f /usr/local/cuda/include/nccl.h ] && [ -f "$nccl_include/nccl.h" ]; then
    args+=(-DPSTAR_NCCL_INCLUDE_DIR="$nccl_include")
  fi
  if [ -d "$deps/usr" ]; then
    args+=(-DPSTAR_DEPS_DIR="$deps")
  else
    echo "gpu-verify: no dependency folder at $deps (scripts/gpu-deps.sh fills one); using the system's"
  fi
  cmake "${args[@]}" || return 1
  grep -q '^PSTAR_WITH_CUDA:BOOL=ON' "$build/CMakeCache.txt" || {
    echo "gpu-verify: the build has no CUDA device tier (PSTAR_WITH_CUDA is not ON)"; return 1; }
  # -k 0: every error of the build in one go, not only the first target's.
  local targets
  read -r -a targets <<<"$(build_targets)"
  echo "targets: ${targets[*]}"
  if ! cmake --build "$build" -j "$jobs" --target "${targets[@]}" -- -k 0 2>&1 | tee "$build/pstar-build.log"; then
    # The NCCL communicator is compiled against this LibTorch only here. Should it alone fail,
    # the build goes on without it, so that every other phase still runs, and the run fails.
    local failed
    failed=$(grep '^FAILED: ' "$build/pstar-build.log" | grep -v 'nccl_communicator' || true)
    if [ -n "$failed" ] || ! grep -q '^FAILED: .*nccl_communicator' "$build/pstar-build.log"; then
      return 1
    fi
    echo "gpu-verify: FAILED: the NCCL communicator does not compile against this LibTorch (errors above); building without it"
    nccl_failed=1
    cmake "${args[@]}" -DPSTAR_WITH_NCCL=OFF >/dev/null || return 1
    cmake --build "$build" -j "$jobs" --target "${targets[@]}" -- -k 0 || return 1
  fi
  # pstar's kernels must carry machine code for the chip (sm_90 on Hopper), not only PTX.
  local elf
  elf=$(cuobjdump --list-elf "$build/libpstar_cuda.a" 2>&1) || { echo "$elf"; return 1; }
  echo "$elf"
  local want="sm_${CUDA_ARCHS:-90}"
  echo "$elf" | grep -q "$want" || { echo "gpu-verify: pstar_cuda has no $want machine code"; return 1; }
  "$build/pstar" --version
  [ "$nccl_failed" = 0 ]
}

# ctest_every LABEL WHAT: every test of LABEL (an anchored -L regular expression, so that another
# label containing it is not selected too), one at a time; fails when one fails, none runs, or one
# is skipped (a skip there means the machine lacks what the tests need). The output goes to
# OUT/WHAT-ctest.txt too.
ctest_every() {
  local label=$1 what=$2
  local log=$out/$what-ctest.txt
  ctest --test-dir "$build" -L "^$label\$" -j 1 --output-on-failure 2>&1 | tee "$log"
  local rc=${PIPESTATUS[0]}
  grep -q "tests passed" "$log" || { echo "gpu-verify: ctest ran no $label test"; return 1; }
  if grep -q "(Skipped)\|\*\*\*Skipped" "$log"; then
    echo "gpu-verify: $label tests were skipped: this machine cannot run them"
    return 1
  fi
  return "$rc"
}

phase_gpu() { ctest_every gpu gpu; }

# Two GPUs or more: the multi-GPU tests, every one run. With one, nothing to run: the phase says
# so and exits 77 (automake's "skipped"), which run_phase records as skipped, not failed.
phase_devices() {
  local gpus
  gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')
  if [ "${gpus:-0}" -lt 2 ]; then
    echo "gpu-verify: devices: this machine has ${gpus:-0} GPU(s); the multidevice tests need two"
    return 77
  fi
  ctest_every multidevice devices
}

phase_suite() {
  ctest --test-dir "$build" -LE '^(gpu|fuzz)$' -j "$jobs" --output-on-failure --timeout 900
}

phase_kernels() { "$build/pstar-bench-adam-kernel"; }

# Issue 58: TensorBoard's own EventAccumulator reads a short run's event file and lists its tags
# (tests/cmd/tensorboard_accumulator.py, which also checks train/loss against the metrics). Where
# the Python has no tensorboard package, exit 77: recorded as skipped, not failed.
phase_tensorboard() {
  "$python" -c 'import tensorboard' 2>/dev/null || {
    echo "gpu-verify: tensorboard: $python has no tensorboard package (pip install tensorboard)"
    return 77
  }
  local dir=$work/tensorboard
  rm -rf "$dir" && mkdir -p "$dir"
  cat >"$dir/config.json" <<JSON
{"model": {"preset": "gpt-tiny", "seq_len": 64},
 "data": {"text": "$repo/README.md", "eval_fraction": 0.1},
 "train_micro_batch_size_per_gpu": 4,
 "training": {"steps": 6, "log_interval": 2, "eval_interval": 3}}
JSON
  "$build/pstar" train "$dir/config.json" --tensorboard "$dir/tb" --metrics "$dir/metrics.jsonl" ||
    return 1
  "$python" tests/cmd/tensorboard_accumulator.py "$dir/tb" "$dir/metrics.jsonl"
}

# Issue 54: transformers' own classes against tests/reference/decoder_reference.py and pstar on
# each family's tiny folder, on the CPU (the figures are losses, not times). Exit 77 without
# transformers: skipped, not failed.
phase_families() {
  "$python" -c 'import transformers' 2>/dev/null || {
    echo "gpu-verify: families: $python has no transformers package"
    return 77
  }
  rm -rf "$work/families"
  "$python" bench/gpu/hf_family_parity.py --pstar "$build/pstar" --out "$work/families" \
    >"$work/families.jsonl"
}

# Issues 54 and 55 (the GPU ledger's item 4): today's families and a mixture of experts beside
# FSDP2-offload on transformers' own classes, at sizes FSDP2-offload holds. Exit 77 without
# transformers: skipped, not failed.
family_phase() {
  "$python" -c 'import transformers' 2>/dev/null || {
    echo "gpu-verify: $1: $python has no transformers package"
    return 77
  }
  bench/gpu/family_bench.sh --pstar "$build/pstar" --python "$python" --steps 3 --warmup 2 \
    --timeout 200 --fsdp2 --preset "$2" --layers "$3" --out "$work/$1" >"$work/$1.jsonl"
}
phase_qwen3() { family_phase qwen3 qwen3-8b 28; }
phase_gemma3() { family_phase gemma3 gemma-3-12b 26; }
phase_qwen3moe() { family_phase qwen3moe qwen3-30b-a3b 10; }

# The ledger's model runs (issue 34): steady state is 3 timed steps after pstar's tracing step
# and its first planned one. Each training run is capped (--timeout) so that one hung run cannot
# eat the lease.
phase_gpt7b() {
  bench/gpu/gpt_bench.sh "${bench_common[@]}" --out "$work/gpt7b" --sizes 4096x36 --steps 3 \
    --warmup 2 --timeout 200 >"$work/gpt7b.jsonl"
}

# The clipped runs take the plain PyTorch rate for their bound from the first of them that measured
# it (gpt7b, else gpt7bclip: Note [step bound]), so that it is measured once per call.
clip_run() {  # clip_run NAME SPECULATIVE CLIPPING [WARMUP STEPS]
  local rate args=()
  for rate in "$work"/{gpt7b,gpt7bclip}/size-4096x36/plain-rate.json; do
    [ ! -f "$rate" ] || { args=(--plain-rate "$rate"); break; }
  done
  bench/gpu/gpt_bench.sh "${bench_common[@]}" --out "$work/$1" --sizes 4096x36 --steps "${5:-3}" \
    --warmup "${4:-2}" --timeout 200 --skip-fsdp2 --plain none --set "gradient_clipping=$3" \
    --set "engine.speculative_adam=$2" "${args[@]}" >"$work/$1.jsonl"
}
phase_gpt7bclip() { clip_run gpt7bclip false 1.0; }
phase_gpt7bspec() { clip_run gpt7bspec true 1.0; }
phase_gpt7bspecloose() { clip_run gpt7bspecloose true 100; }
phase_gpt7bauto() { clip_run gpt7bauto auto 1.0 9 4; }

llama_common=(--pstar "$build/pstar" --python "$python" --steps 3 --warmup 2 --timeout 200)
phase_llama8b() {
  bench/gpu/llama_bench.sh "${llama_common[@]}" --preset llama-3.1-8b --out "$work/llama8b" \
    >"$work/llama8b.jsonl"
}

phase_llama8bspec() {
  bench/gpu/llama_bench.sh "${llama_common[@]}" --preset llama-3.1-8b --out "$work/llama8bspec" \
    --set engine.speculative_adam=true >"$work/llama8bspec.jsonl"
}

phase_llama8bnoclip() {
  bench/gpu/llama_bench.sh "${llama_common[@]}" --preset llama-3.1-8b --out "$work/llama8bnoclip" \
    --set gradient_clipping=0 >"$work/llama8bnoclip.jsonl"
}

phase_llama8bfolder() {
  bench/gpu/llama_bench.sh "${llama_common[@]}" --preset llama-3.1-8b --from-folder \
    --folder "${LLAMA_FOLDER:-/tmp/pstar-llama-3.1-8b-hf}" --out "$work/llama8bfolder" \
    >"$work/llama8bfolder.jsonl"
}

phase_llama3b() {
  bench/gpu/llama_bench.sh "${llama_common[@]}" --preset llama-3.2-3b --fsdp2 \
    --out "$work/llama3b" >"$work/llama3b.jsonl"
}

bench_common=(--pstar "$build/pstar" --python "$python")
phase_bench() {
  # shellcheck disable=SC2086  # BENCH_ARGS is a list of words
  bench/gpu/gpt_bench.sh "${bench_common[@]}" --out "$work/bench" ${BENCH_ARGS:-} \
    >"$work/bench.jsonl"
}

# variant NAME SIZE KEY=VALUE: pstar alone at SIZE with one config override, into OUT/variant-NAME.
# BENCH_ARGS come first so that the variant's own size wins over a --sizes in them.
variant() {
  # shellcheck disable=SC2086  # BENCH_ARGS is a list of words
  bench/gpu/gpt_bench.sh "${bench_common[@]}" ${BENCH_ARGS:-} --out "$work/variant-$1" \
    --sizes "$2" --skip-fsdp2 --plain none --set "$3" >"$work/variant-$1.jsonl"
}

phase_variants() {
  local rc=0 wanted_variants=" ${VARIANTS:-noprefetch nooverlap cpuembedding torchengine} "
  local name size setting
  while read -r name size setting; do
    [[ "$wanted_variants" == *" $name "* ]] || continue
    variant "$name" "$size" "$setting" || rc=1
  done <<'LIST'
noprefetch 4096x36 engine.prefetch=false
nooverlap 4096x36 engine.overlap_adam=false
cpuembedding 2048x24 use_cpu_embedding=true
torchengine 2048x24 engine.mode=torch
LIST
  return "$rc"
}

phase_largest() {
  bench/gpu/gpt_bench.sh "${bench_common[@]}" --out "$work/largest" --sizes "" --largest \
    --skip-fsdp2 --plain none ${LARGEST_ARGS:-} >"$work/largest.jsonl"
}

# Tokens/s from one GPU to all of a node's (issue 36): each width of the node a gpt_bench.sh run
# of its own, so that a failure at N GPUs still leaves the 1-GPU row.
phase_scaling() {
  local gpus n rc=0
  gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')
  if [ "${gpus:-0}" -lt 2 ]; then
    echo "gpu-verify: scaling: this machine has ${gpus:-0} GPU(s); scaling needs two"
    return 77
  fi
  for n in 1 $((gpus < 8 ? gpus : 8)); do
    bench/gpu/gpt_bench.sh "${bench_common[@]}" --out "$work/scaling-$n" --sizes 4096x36 \
      --nproc "$n" --steps 3 --warmup 2 --timeout 300 --plain none --bound none \
      >"$work/scaling-$n.jsonl" || rc=1
  done
  return "$rc"
}

# One traced step per side at the 1.3B size: the last of 2 + 2 steps, so that the chunk engine has
# planned and both have warmed up. The trace files stay in OUT/trace (tens of MB each).
phase_trace() {
  local dir=$work/trace rc=0
  mkdir -p "$dir"
  local side
  for side in chunked torch; do
    # shellcheck disable=SC2086  # BENCH_ARGS is a list of words
    PSTAR_TORCH_TRACE="$dir/pstar-$side.trace.json:4:1" bench/gpu/gpt_bench.sh \
      "${bench_common[@]}" ${BENCH_ARGS:-} --out "$dir/$side" --sizes 2048x24 --skip-fsdp2 \
      --plain none --steps 2 --warmup 2 --set engine.mode=$side >"$dir/pstar-$side.jsonl" || rc=1
  done
  "$python" bench/gpu/fsdp2_reference.py --mode plain --hidden 2048 --layers 24 --steps 2 \
    --warmup 2 --trace "$dir/plain.trace.json" >"$dir/plain.jsonl" || rc=1
  local traces=()
  for f in "$dir/pstar-chunked.trace.json" "$dir/pstar-torch.trace.json" "$dir/plain.trace.json"; do
    [ -f "$f" ] && traces+=("$f") || { echo "gpu-verify: no trace at $f"; rc=1; }
  done
  [ "${#traces[@]}" -gt 0 ] && "$python" bench/gpu/trace_summary.py "${traces[@]}" \
    --json "$work/trace-summary.json" | tee "$work/trace-summary.txt"
  return "$rc"
}

write_summary() {
  "$python" bench/gpu/ledger_summary.py --out "$out" --work "$work" --repo "$repo" \
    --seconds "$(($(date +%s) - t_all))" --build "$build" ||
    say "the summary could not be written (bench/gpu/ledger_summary.py failed)"
}

run_phase build phase_build
if wanted build && ! grep -q '"phase": "build", "status": "passed"' "$phase_results"; then
  say "the build failed: nothing else can run"
else
  run_phase gpu phase_gpu
  run_phase devices phase_devices
  run_phase gpt7b phase_gpt7b
  run_phase gpt7bclip phase_gpt7bclip
  run_phase gpt7bspec phase_gpt7bspec
  run_phase gpt7bspecloose phase_gpt7bspecloose
  run_phase gpt7bauto phase_gpt7bauto
  run_phase llama8b phase_llama8b
  run_phase llama8bspec phase_llama8bspec
  run_phase llama8bnoclip phase_llama8bnoclip
  run_phase llama8bfolder phase_llama8bfolder
  run_phase llama3b phase_llama3b
  run_phase families phase_families
  run_phase qwen3 phase_qwen3
  run_phase gemma3 phase_gemma3
  run_phase qwen3moe phase_qwen3moe
  run_phase trace phase_trace
  run_phase suite phase_suite
  run_phase kernels phase_kernels
  run_phase tensorboard phase_tensorboard
  run_phase bench phase_bench
  run_phase variants phase_variants
  run_phase largest phase_largest
  run_phase scaling phase_scaling
fi
write_summary
cat "$out/summary.md" 2>/dev/null
say "done in $(($(date +%s) - t_all)) s; summaries in $out"
exit "$failed"
