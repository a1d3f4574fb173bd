#!/usr/bin/env bash
# Writes the default example's training text: the repository's own docs and sources, concatenated
# in a fixed order, so the example needs no download. Usage: scripts/make-corpus.sh OUT.txt
set -euo pipefail
out=${1:?usage: scripts/make-corpus.sh OUT.txt}
root=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$(dirname "$out")"
cd "$root"
find . \( -path ./build -o -path ./.git \) -prune -o -type f \
    \( -name '*.md' -o -name '*.h' -o -name '*.cpp' -o -name '*.cmake' -o -name 'CMakeLists.txt' \) -print |
  LC_ALL=C sort | while read -r f; do
  printf '\n// ===== %s =====\n' "${f#./}"
  cat "$f"
done > "$out"
echo "make-corpus: wrote $(wc -c < "$out") bytes to $out" >&2
