# Sourced by the GPU machine's scripts (gpu_run.sh, bench/quant_gpu.sh,
# bench/cuda): the dev packages that machine lacks (PCRE2, cpp-httplib)
# travel in .deb/ (git-ignored; scripts/gpu_carry.sh fetches them and packs
# them unpacked as prefix.tar.xz; loose .deb files work too) and are
# unpacked into a private prefix, never into /; the compiler
# and linker find them through these variables. Then
#   gpu_configure BUILD_DIR [cmake args...]
# configures a Release sm_90a build with the CUDA backend.
ROOT="${ROOT:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)}"
if [ -f "$ROOT/.deb/prefix.tar.xz" ] || ls "$ROOT"/.deb/*.deb > /dev/null 2>&1; then
  PFX=/tmp/ferrite-prefix
  mkdir -p "$PFX"
  if [ -f "$ROOT/.deb/prefix.tar.xz" ]; then
    tar xJf "$ROOT/.deb/prefix.tar.xz" -C "$PFX"
  else
    for f in "$ROOT"/.deb/*.deb; do dpkg -x "$f" "$PFX"; done
  fi
  # Only the shared libraries are linked: the -dev packages of cpp-httplib's
  # private dependencies (OpenSSL, zlib, brotli) are not needed.
  sed -i '/^Requires.private/d' "$PFX"/usr/lib/x86_64-linux-gnu/pkgconfig/*.pc
  export PKG_CONFIG_PATH="$PFX/usr/lib/x86_64-linux-gnu/pkgconfig"
  export PKG_CONFIG_SYSROOT_DIR="$PFX"
  export CPLUS_INCLUDE_PATH="$PFX/usr/include:$PFX/usr/include/x86_64-linux-gnu"
  export LD_LIBRARY_PATH="$PFX/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}"
  export LDFLAGS="-Wl,-rpath-link,$PFX/usr/lib/x86_64-linux-gnu -Wl,-rpath,$PFX/usr/lib/x86_64-linux-gnu"
fi
# With .gpu-prebuilt/ (scripts/gpu_prebuild.sh, carried) whose manifest matches this tree, the
# kernels are linked from its objects instead of compiled (FERRITE_PREBUILT=0: never).
gpu_configure() {
  local dir=$1
  shift
  local pre=()
  if [ "${FERRITE_PREBUILT:-1}" = 1 ] && [ -f "$ROOT/.gpu-prebuilt/manifest.sha256" ]; then
    if (cd "$ROOT" && sha256sum --quiet -c .gpu-prebuilt/manifest.sha256 > /dev/null 2>&1); then
      local objects=/tmp/ferrite-prebuilt
      rm -rf "$objects" && mkdir -p "$objects"
      if tar xJf "$ROOT/.gpu-prebuilt/kernels.tar.xz" -C "$objects"; then
        pre=(-DFERRITE_CUDA_KERNEL_OBJECTS="$objects/objects")
        echo "gpu_configure: prebuilt CUDA kernels from .gpu-prebuilt"
      else
        echo "gpu_configure: could not unpack .gpu-prebuilt/kernels.tar.xz; compiling the kernels"
      fi
    else
      echo "gpu_configure: .gpu-prebuilt does not match the sources (run scripts/gpu_prebuild.sh" \
        "after kernel changes); compiling the kernels"
    fi
  fi
  cmake -S "$ROOT" -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DFERRITE_CUDA=ON \
    -DCMAKE_CUDA_ARCHITECTURES=90a -DFERRITE_BUILD_BENCH=OFF "${pre[@]}" "$@"
}
