# Sourced by gpt_bench.sh and llama_bench.sh: finding the pstar binary and a python3 with torch.
# Each expects `repo` (the repository root) and `die`, and sets or checks `pstar` and `python`.

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
