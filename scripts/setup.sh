#!/usr/bin/env bash
# Installs everything Ferrite needs to build and test on Debian 12, then the
# test-only npm packages. Idempotent and non-interactive; run as root (or
# with sudo available).
set -euo pipefail
cd "$(dirname "$0")/.."

PACKAGES=(
  build-essential cmake ninja-build ccache pkg-config git
  nlohmann-json3-dev libcli11-dev libfmt-dev libspdlog-dev libpcre2-dev
  libcpp-httplib-dev libssl-dev zlib1g-dev libbrotli-dev
  libopenblas-dev libgtest-dev libgmock-dev libbenchmark-dev
  python3
  # The hardening build (scripts/test_hardening.sh): clang 14 with its
  # sanitizer and libFuzzer runtimes (libclang_rt.fuzzer*, asan, ubsan).
  clang-14 libclang-rt-14-dev
)
# Node.js for the tokenizer oracle and the server tests: Debian's packages
# unless a node + npm are already installed (they would conflict).
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
  PACKAGES+=(nodejs npm)
fi

SUDO=""
if [[ $(id -u) -ne 0 ]]; then SUDO="sudo"; fi

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup.sh: installing ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
else
  echo "setup.sh: Debian packages already installed"
fi

scripts/install_npm_deps.sh
