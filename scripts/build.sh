#!/usr/bin/env bash
# Configures and builds Ferrite in ./build (CPU code, plus the CUDA code,
# compile-only, whenever nvcc is present). Extra arguments go to cmake.
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ ! -f build/CMakeCache.txt ]]; then
  cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release "$@"
fi
cmake --build build -j "$(nproc)"
