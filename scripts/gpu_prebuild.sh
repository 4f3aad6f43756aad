#!/usr/bin/env bash
# Prebuilds the CUDA kernels (src/backends/cuda/kernels/*.cu) on this machine for the GPU
# machine, whose builds otherwise spend most of their ~200 s in nvcc on the largest kernels:
#   bash scripts/gpu_prebuild.sh        (then carry [".deb", ".gpu-prebuilt"] on device calls)
# It compiles the kernels in build-prebuilt/ (Release, sm_90a SASS only and no -lineinfo: such
# objects compress ~20x, and a device call's whole tree, tracked files included, must stay under
# 64 MiB; the same nvcc 13.0 as the GPU machine; the first run compiles all 17 kernels, ~4
# minutes here, later runs what changed), packs them into .gpu-prebuilt/kernels.tar.xz (~3 MB)
# and writes .gpu-prebuilt/manifest.sha256: the sha256 of every file of this tree they were
# compiled from (ninja's dependency record) and of the CMake files that set their flags.
# gpu_configure (scripts/gpu_env.sh) links them instead of compiling the kernels only when every
# hash matches the tree it builds; otherwise it says so and compiles them. Run it before every
# device chain (a few seconds when nothing changed).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
BUILD=${BUILD:-build-prebuilt}
if [ ! -f "$BUILD/build.ninja" ]; then
  cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DFERRITE_CUDA=ON \
    -DCMAKE_CUDA_ARCHITECTURES=90a-real -DFERRITE_CUDA_LINEINFO=OFF -DFERRITE_BUILD_BENCH=OFF \
    > /dev/null
fi
grep -q 'code=\[sm_90a\]\|code=sm_90a' "$BUILD/build.ninja" ||
  { echo "gpu_prebuild.sh: $BUILD does not compile for sm_90a" >&2; exit 1; }
objdir=src/backends/cuda/CMakeFiles/ferrite_cuda.dir/kernels
objs=()
for f in src/backends/cuda/kernels/*.cu; do objs+=("$objdir/$(basename "$f").o"); done
ninja -C "$BUILD" "${objs[@]}"
out=.gpu-prebuilt
rm -rf "$out" && mkdir -p "$out/objects"
for o in "${objs[@]}"; do cp "$BUILD/$o" "$out/objects/"; done
{
  echo CMakeLists.txt
  echo src/backends/cuda/CMakeLists.txt
  ninja -C "$BUILD" -t deps "${objs[@]}" | sed -n "s|^    $ROOT/||p"
} | sort -u | xargs sha256sum > "$out/manifest.sha256"
tar cf - -C "$out" objects | xz -9 -T2 > "$out/kernels.tar.xz"
rm -rf "$out/objects"
echo "gpu_prebuild.sh: ${#objs[@]} kernels, $(wc -l < "$out/manifest.sha256") source files hashed, $(du -sh "$out" | cut -f1)"
