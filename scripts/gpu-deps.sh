#!/usr/bin/env bash
# Fills a folder with the header-only and source dependencies that the GPU machines lack (they have
# CUDA, PyTorch with its LibTorch, CMake and Ninja, but no package registry): Debian 12's
# nlohmann-json3-dev, libcli11-dev, googletest (sources), zlib and gloo's headers, PCRE2, utf8proc
# and liburing (their static archives), downloaded here
# with `apt-get download` and unpacked with `dpkg -x`. Give the folder to CMake as PSTAR_DEPS_DIR
# (scripts/gpu-verify.sh does). It is git-ignored; the device tool carries it.
#
#   scripts/gpu-deps.sh [DIR]      (default .gpu-deps)
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-.gpu-deps}
packages=(nlohmann-json3-dev libcli11-dev googletest zlib1g zlib1g-dev libgloo-dev
          libpcre2-dev libutf8proc-dev liburing-dev)
mkdir -p "$dir/debs"
dir=$(cd "$dir" && pwd)
if ! (cd "$dir/debs" && apt-get download "${packages[@]}" >/dev/null 2>&1); then
  echo "gpu-deps: apt-get download failed; running apt-get update once and retrying" >&2
  apt-get update -qq
  (cd "$dir/debs" && apt-get download "${packages[@]}")
fi
for deb in "$dir"/debs/*.deb; do dpkg -x "$deb" "$dir"; done
# Only headers and sources are wanted from gloo: its libraries are LibTorch's own on that machine.
rm -rf "$dir"/usr/lib/x86_64-linux-gnu/libgloo* "$dir"/usr/share/doc
rm -rf "$dir/debs"
echo "gpu-deps: $(du -sh "$dir" | cut -f1) in $dir: ${packages[*]}"
