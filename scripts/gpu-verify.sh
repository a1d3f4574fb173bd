#!/usr/bin/env bash
# The whole GPU check in one command, for a machine with an NVIDIA GPU, CUDA, PyTorch (its
# LibTorch is what pstar builds against), CMake and Ninja, and no package registry:
#
#   scripts/gpu-deps.sh            # here, where Debian's packages can be downloaded: .gpu-deps/
#   scripts/gpu-verify.sh OUT_DIR  # there, with .gpu-deps/ carried beside the tree
#
# Phases, each timed (--only/--skip take comma lists of their names):
#   build    configure and build the cuda-release preset against the installed PyTorch's LibTorch
#            (-j = cores), then check that the kernels carry sm_90 machine code (cuobjdump)
#   gpu      ctest -L gpu: fails if any GPU test fails or is skipped (a skip means no usable GPU)
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
# OUT_DIR receives summary.json (every phase: status, seconds, and the benchmark rows), summary.md
# (a short table) and each phase's log. Exit status: 0 when every phase run passed.
#
# --deadline S: a phase that would start S seconds or more after the script began is not started
# and is recorded as skipped (the exit status is then 1), so that a lease-limited call still ends
# with its summary: give the call's limit less the longest phase.
#
# Environment: PYTHON (python3 with torch), PSTAR_DEPS_DIR (default .gpu-deps), BUILD_DIR
# (build/cuda-release), JOBS (nproc), CUDA_ARCHS (90).
set -uo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)

usage() { sed -n '2,/^set -uo/p' "$0" | grep '^#' | sed 's/^# \{0,1\}//'; }
all_phases=(build gpu trace suite kernels bench variants largest)
only="" skip="" deadline=0
out=""
while [ $# -gt 0 ]; do
  case "$1" in
    --only) only=$2; shift ;;
    --skip) skip=$2; shift ;;
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
build=${BUILD_DIR:-build/cuda-release}
jobs=${JOBS:-$(nproc)}
deps=${PSTAR_DEPS_DIR:-$repo/.gpu-deps}
python=${PYTHON:-python3}
phase_results=$out/phases.jsonl
: >"$phase_results"
failed=0
t_all=$(date +%s)

wanted() {
  if [ -n "$only" ]; then [[ ",$only," == *",$1,"* ]] || return 1; fi
  [[ ",$skip," != *",$1,"* ]]
}
say() { echo "[gpu-verify $(date +%H:%M:%S)] $*" >&2; }

# run_phase NAME COMMAND...: runs it with its output in OUT/NAME.log (and on stderr), records
# status and seconds.
run_phase() {
  local name=$1 start rc
  shift
  wanted "$name" || return 0
  local elapsed=$(($(date +%s) - t_all))
  if [ "$deadline" -gt 0 ] && [ "$elapsed" -ge "$deadline" ]; then
    failed=1
    printf '{"phase": "%s", "status": "skipped", "exit_code": null, "seconds": 0}\n' \
      "$name" >>"$phase_results"
    say "phase $name: skipped: ${elapsed} s have passed, --deadline is ${deadline} s"
    return 0
  fi
  say "phase $name: start"
  start=$(date +%s)
  "$@" > >(tee "$out/$name.log") 2>&1
  rc=$?
  local secs=$(($(date +%s) - start))
  local status=passed
  [ "$rc" = 0 ] || { status=failed; failed=1; }
  printf '{"phase": "%s", "status": "%s", "exit_code": %d, "seconds": %d}\n' \
    "$name" "$status" "$rc" "$secs" >>"$phase_results"
  say "phase $name: $status in ${secs} s"
  return 0
}

phase_build() {
  command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
  echo "nvcc: $(nvcc --version | tail -n 1)"
  echo "c++: $(c++ --version | head -n 1); $(cmake --version | head -n 1); ninja $(ninja --version)"
  local torch_prefix
  torch_prefix=$("$python" -c 'import torch; print(torch.utils.cmake_prefix_path)') || {
    echo "gpu-verify: $python cannot import torch (set PYTHON)"; return 1; }
  echo "torch: $("$python" -c 'import torch; print(torch.__version__, torch.version.cuda)') at $torch_prefix"
  local args=(--preset cuda-release -DCMAKE_PREFIX_PATH="$torch_prefix"
              -DCMAKE_CUDA_ARCHITECTURES="${CUDA_ARCHS:-90}"
              -DCMAKE_CUDA_COMPILER="$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)"
              -DCMAKE_POLICY_VERSION_MINIMUM=3.5)
  if [ -d "$deps/usr" ]; then
    args+=(-DPSTAR_DEPS_DIR="$deps")
  else
    echo "gpu-verify: no dependency folder at $deps (scripts/gpu-deps.sh fills one); using the system's"
  fi
  cmake "${args[@]}" || return 1
  grep -q '^PSTAR_WITH_CUDA:BOOL=ON' "$build/CMakeCache.txt" || {
    echo "gpu-verify: the build has no CUDA device tier (PSTAR_WITH_CUDA is not ON)"; return 1; }
  # -k 0: every error of the build in one go, not only the first target's.
  cmake --build "$build" -j "$jobs" -- -k 0 || return 1
  # pstar's kernels must carry machine code for the chip (sm_90 on Hopper), not only PTX.
  local elf
  elf=$(cuobjdump --list-elf "$build/libpstar_cuda.a" 2>&1) || { echo "$elf"; return 1; }
  echo "$elf"
  local want="sm_${CUDA_ARCHS:-90}"
  echo "$elf" | grep -q "$want" || { echo "gpu-verify: pstar_cuda has no $want machine code"; return 1; }
  "$build/pstar" --version
}

phase_gpu() {
  local log=$out/gpu-ctest.txt
  ctest --test-dir "$build" -L gpu -j 1 --output-on-failure 2>&1 | tee "$log"
  local rc=${PIPESTATUS[0]}
  grep -q "tests passed" "$log" || { echo "gpu-verify: ctest ran no gpu test"; return 1; }
  if grep -q "(Skipped)\|\*\*\*Skipped" "$log"; then
    echo "gpu-verify: GPU tests were skipped: the device is not usable here"
    return 1
  fi
  return "$rc"
}

phase_suite() {
  ctest --test-dir "$build" -LE "gpu|fuzz" -j "$jobs" --output-on-failure --timeout 900
}

phase_kernels() { "$build/pstar-bench-adam-kernel"; }

bench_common=(--pstar "$build/pstar" --python "$python")
phase_bench() {
  # shellcheck disable=SC2086  # BENCH_ARGS is a list of words
  bench/gpu/gpt_bench.sh "${bench_common[@]}" --out "$out/bench" ${BENCH_ARGS:-} \
    >"$out/bench.jsonl"
}

# variant NAME SIZE KEY=VALUE: pstar alone at SIZE with one config override, into OUT/variant-NAME.
# BENCH_ARGS come first so that the variant's own size wins over a --sizes in them.
variant() {
  # shellcheck disable=SC2086  # BENCH_ARGS is a list of words
  bench/gpu/gpt_bench.sh "${bench_common[@]}" ${BENCH_ARGS:-} --out "$out/variant-$1" \
    --sizes "$2" --skip-fsdp2 --plain none --set "$3" >"$out/variant-$1.jsonl"
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
  bench/gpu/gpt_bench.sh "${bench_common[@]}" --out "$out/largest" --sizes "" --largest \
    --skip-fsdp2 --plain none ${LARGEST_ARGS:-} >"$out/largest.jsonl"
}

# One traced step per side at the 1.3B size: the last of 2 + 2 steps, so that the chunk engine has
# planned and both have warmed up. The trace files stay in OUT/trace (tens of MB each).
phase_trace() {
  local dir=$out/trace rc=0
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
    --json "$out/trace-summary.json" | tee "$out/trace-summary.txt"
  return "$rc"
}

run_phase build phase_build
if wanted build && ! grep -q '"phase": "build", "status": "passed"' "$phase_results"; then
  say "the build failed: nothing else can run"
else
  run_phase gpu phase_gpu
  run_phase trace phase_trace
  run_phase suite phase_suite
  run_phase kernels phase_kernels
  run_phase bench phase_bench
  run_phase variants phase_variants
  run_phase largest phase_largest
fi

"$python" - "$out" "$(($(date +%s) - t_all))" <<'EOF'
import glob, json, os, sys
out, total = sys.argv[1], int(sys.argv[2])
phases = [json.loads(l) for l in open(os.path.join(out, "phases.jsonl")) if l.strip()]
rows = {}
for path in sorted(glob.glob(os.path.join(out, "*.jsonl"))):
    name = os.path.basename(path)[:-len(".jsonl")]
    if name == "phases":
        continue
    rows[name] = [json.loads(l) for l in open(path) if l.strip().startswith("{")]
summary = {"total_seconds": total, "phases": phases, "benchmarks": rows}
json.dump(summary, open(os.path.join(out, "summary.json"), "w"), indent=1)

def num(x, fmt):
    return "-" if x is None else format(x, fmt)

lines = ["| phase | status | seconds |", "|---|---|---|"]
lines += [f"| {p['phase']} | {p['status']} | {p['seconds']} |" for p in phases]
lines += ["", f"total: {total} s", "",
          "| run | model | params | pstar TFLOPS | pstar tok/s | pstar host B/param | "
          "FSDP2 TFLOPS | pstar/FSDP2 | plain TFLOPS |", "|---|---|---|---|---|---|---|---|---|"]
for name, rs in rows.items():
    for r in rs:
        p, f, pl = r.get("pstar") or {}, r.get("fsdp2") or {}, r.get("plain") or {}
        lines.append("| {} | {}x{} | {} | {} | {} | {} | {} | {} | {} |".format(
            name, r.get("hidden"), r.get("layers"), num(r.get("params"), ".3e"),
            num(p.get("tflops"), ".1f"), num(p.get("tokens_per_s"), ".0f"),
            num(p.get("host_bytes_per_param"), ".1f"), num(f.get("tflops"), ".1f"),
            num(r.get("ratio_vs_fsdp2"), ".2f"), num(pl.get("tflops"), ".1f")))
open(os.path.join(out, "summary.md"), "w").write("\n".join(lines) + "\n")
print("\n".join(lines))
EOF
say "done in $(($(date +%s) - t_all)) s; summary in $out/summary.json and $out/summary.md"
exit "$failed"
