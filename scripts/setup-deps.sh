#!/usr/bin/env bash
# Installs pstar's build and test dependencies from Debian 12 packages.
# Idempotent: packages already present are left alone. Must run as root (or via sudo).
set -euo pipefail

PACKAGES=(
  build-essential cmake ninja-build pkg-config git
  libtorch-dev libgloo-dev libopenblas0-openmp
  libcli11-dev libhdf5-dev nlohmann-json3-dev zlib1g-dev
  libpcre2-dev libutf8proc-dev  # tokenizers (text/): regexes, NFC
  liburing-dev  # the NVMe tier's I/O through io_uring (libengine/src/nvme)
  libgtest-dev libgmock-dev libbenchmark-dev ccache python3-h5py python3-torch
  python3-protobuf  # tests/cmd/tensorboard_reader.py: an independent reader of the event files
  libplplot-dev plplot-driver-cairo
  clang libclang-rt-14-dev  # the fuzz preset: libFuzzer, ASan, UBSan (docs/fuzzing.md)
)

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "setup-deps: all ${#PACKAGES[@]} packages already installed"
  exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || { echo "setup-deps: need root (or sudo) to install: ${missing[*]}" >&2; exit 1; }
  SUDO="sudo"
fi

echo "setup-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
