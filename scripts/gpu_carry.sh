#!/usr/bin/env bash
# Fills the git-ignored folders a GPU session carries (device `carry: [".gpu", ".deb"]`), on the
# development machine, once per machine (tree limit: 64 MiB with the tracked files):
#  - .deb/: the dev packages the GPU machine lacks, unpacked into prefix.tar.xz (gpu_env.sh
#    unpacks it into a private prefix);
#  - .gpu/: a trimmed llama.cpp source tarball (xz, ~4 MB, so that .gpu fits beside
#    .gpu-prebuilt: `carry: [".gpu", ".gpu-prebuilt"]` on a machine that has unpacked .deb; from .peer/llama.bundle: run
#    ../shared/peer/get_llama_cpp.sh first), the real Qwen3 tokenizer and the peer's
#    twin_weights.py (bench/gguf_vs_llama_h200.sh, bench/twin_moe_gguf.py), and with
#    `--baseline REV` a source snapshot for scripts/gpu_run.sh's A/B (FERRITE_BASELINE=.gpu/baseline).
# Before each device chain: bash scripts/gpu_prebuild.sh (the CUDA kernels compiled here, carried
# as .gpu-prebuilt: `carry: [".gpu", ".deb", ".gpu-prebuilt"]`; gpu_env.sh links them when their
# manifest matches the sources).
# Then one device chain (the machine stays warm ~30 s between calls: have the next call ready):
#   1. bash scripts/gpu_session.sh prepare     (peer build in the background; build + GPU tests)
#   2. bash scripts/gpu_session.sh measure     (opt-in A/B, side by side with llama.cpp)
set -euo pipefail
cd "$(dirname "$0")/.."
grep -qx '/.gpu/' .git/info/exclude 2>/dev/null || echo '/.gpu/' >> .git/info/exclude
mkdir -p .deb .gpu
if [ ! -f .deb/prefix.tar.xz ]; then
  # The packages unpacked here, less their static libraries and documentation, as one xz
  # tarball (~1 MB instead of ~5 MB of .deb files: the carried tree's limit is tight).
  rm -rf /tmp/ferrite-debs /tmp/ferrite-prefix-pack && mkdir -p /tmp/ferrite-debs /tmp/ferrite-prefix-pack
  (cd /tmp/ferrite-debs && apt-get download libpcre2-dev libpcre2-8-0 libcpp-httplib-dev libcpp-httplib0.11 \
    libbrotli1 libbrotli-dev zlib1g-dev libssl-dev)
  for f in /tmp/ferrite-debs/*.deb; do dpkg -x "$f" /tmp/ferrite-prefix-pack; done
  find /tmp/ferrite-prefix-pack -name '*.a' -delete
  rm -rf /tmp/ferrite-prefix-pack/usr/share/doc /tmp/ferrite-prefix-pack/usr/share/man
  tar -C /tmp/ferrite-prefix-pack -cf - . | xz -9 > .deb/prefix.tar.xz
  rm -f .deb/*.deb
fi
if [ ! -f .gpu/llama-src.tar.xz ]; then
  [ -f .peer/llama.bundle ] || { echo "gpu_carry.sh: run ../shared/peer/get_llama_cpp.sh first" >&2; exit 1; }
  rm -rf /tmp/llama.cpp-src && git clone -q .peer/llama.bundle /tmp/llama.cpp-src
  (cd /tmp/llama.cpp-src && tar --exclude=.git --exclude=./models --exclude=./docs --exclude=./benches \
    --exclude=./tests --exclude=./examples --exclude=./tools/ui --exclude=./tools/server \
    --exclude=./gguf-py --exclude=./conversion --exclude=./media --exclude=./pocs --exclude=./app \
    --exclude='./ggml/src/ggml-'{vulkan,sycl,metal,cann,opencl,webgpu,musa,hexagon,et,zdnn,openvino,hip,virtgpu} \
    -cf - . | xz -9 -T2 > "$OLDPWD/.gpu/llama-src.tar.xz")
  rm -f .gpu/llama-src.tgz
  cp .peer/qwen3-tokenizer.json.gz .peer/twin_weights.py .gpu/
fi
if [ "${1:-}" = "--baseline" ]; then
  rm -rf .gpu/baseline && mkdir -p .gpu/baseline
  git archive "$2" CMakeLists.txt src | tar x -C .gpu/baseline
fi
du -sh .gpu .deb
