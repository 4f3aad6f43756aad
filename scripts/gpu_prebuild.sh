#!/usr/bin/env bash
# Prebuilds the CUDA kernels (src/backends/cuda/kernels/*.cu) on this machine for the GPU
# machine, whose builds otherwise spend most of their ~200 s in nvcc on the largest kernels:
#   bash scripts/gpu_prebuild.sh        (then carry [".deb", ".gpu-prebuilt"] on device calls)
# It brings the kernel objects of the local build (BUILD, default build/: Release, sm_90a, the
# same nvcc 13.0 as the GPU machine) up to date, packs them into .gpu-prebuilt/kernels.tar.gz
# (~26 MB) and writes .gpu-prebuilt/manifest.sha256: the sha256 of every file of this tree they
# were compiled from (ninja's dependency record) and of the CUDA CMake file. gpu_configure
# (scripts/gpu_env.sh) links them instead of compiling the kernels only when every hash matches
# the tree it builds; otherwise it says so and compiles them. Run it after every kernel change
# (it is incremental: the local build compiles what changed, which checks the change anyway).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
BUILD=${BUILD:-build}
cache="$BUILD/CMakeCache.txt"
[ -f "$BUILD/build.ninja" ] || { echo "gpu_prebuild.sh: no build in $BUILD" >&2; exit 1; }
grep -qx 'CMAKE_BUILD_TYPE:STRING=Release' "$cache" ||
  { echo "gpu_prebuild.sh: $BUILD is not a Release build" >&2; exit 1; }
grep -q 'code=\[compute_90a,sm_90a\]' "$BUILD/build.ninja" ||
  { echo "gpu_prebuild.sh: $BUILD does not compile for sm_90a" >&2; exit 1; }
if grep -q '^FERRITE_CUDA_KERNEL_OBJECTS:PATH=.' "$cache"; then
  echo "gpu_prebuild.sh: $BUILD links prebuilt kernels itself" >&2
  exit 1
fi
objdir=src/backends/cuda/CMakeFiles/ferrite_cuda.dir/kernels
objs=()
for f in src/backends/cuda/kernels/*.cu; do objs+=("$objdir/$(basename "$f").o"); done
ninja -C "$BUILD" "${objs[@]}"
out=.gpu-prebuilt
rm -rf "$out" && mkdir -p "$out/objects"
for o in "${objs[@]}"; do cp "$BUILD/$o" "$out/objects/"; done
{
  echo src/backends/cuda/CMakeLists.txt
  ninja -C "$BUILD" -t deps "${objs[@]}" | sed -n "s|^    $ROOT/||p"
} | sort -u | xargs sha256sum > "$out/manifest.sha256"
tar czf "$out/kernels.tar.gz" -C "$out" objects
rm -rf "$out/objects"
echo "gpu_prebuild.sh: ${#objs[@]} kernels, $(wc -l < "$out/manifest.sha256") source files hashed, $(du -sh "$out" | cut -f1)"
