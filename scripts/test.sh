#!/usr/bin/env bash
# Builds and runs every test (one ctest: unit, conformance, goldens,
# tokenizer oracle, server black-box tests). GPU tests report "skipped"
# on machines without a GPU.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/build.sh
ctest --test-dir build --output-on-failure -j "$(nproc)" --timeout 900
