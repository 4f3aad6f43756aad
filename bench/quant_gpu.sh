#!/usr/bin/env bash
# The GPU run of the GGUF block-format paths, in one command on the GPU
# machine: build (sm_90a), the CUDA conformance suite (every CUDA provider,
# block-format cases included, against the CPU reference), then `ferrite
# bench` on dummy weights in block formats at real sizes (decode roofline
# fraction of the format's bytes per token, prefill FLOP fraction).
#
#   bench/quant_gpu.sh            # logs and summary.txt in $OUT (./out)
#   QUANT_SPECS="qwen3-8b q4_k_m;qwen3-8b q8_0" bench/quant_gpu.sh
#
# Needs the .deb folder of scripts/gpu_run.sh (carry [".deb"]).
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
OUT="${OUT:-$ROOT/out}"
mkdir -p "$OUT"
BUILD="${BUILD:-$ROOT/build-gpu}"
SUMMARY="$OUT/summary.txt"
: > "$SUMMARY"
log() { echo "$*" | tee -a "$SUMMARY"; }
. "$ROOT/scripts/gpu_env.sh"
T0=$(date +%s)
gpu_configure "$BUILD" > "$OUT/build.log" 2>&1
ninja -C "$BUILD" -k 0 conformance_test ferrite >> "$OUT/build.log" 2>&1
log "build: rc=$? in $(( $(date +%s) - T0 )) s"
grep -E "error|FAILED" "$OUT/build.log" | head -20 | tee -a "$SUMMARY"
if [ -x "$BUILD/tests/conformance/conformance_test" ]; then
  T1=$(date +%s)
  timeout "${QUANT_CONF_TIMEOUT:-150}" "$BUILD/tests/conformance/conformance_test" \
    --gtest_filter='*cuda*:*EveryListed*' > "$OUT/conformance.log" 2>&1
  log "conformance (cuda providers): rc=$? in $(( $(date +%s) - T1 )) s $(grep -E '^\[  PASSED|^\[  FAILED  \] [0-9]' "$OUT/conformance.log" | tr '\n' ' ')"
  grep -E "^\[  FAILED  \] [A-Z]|out of tolerance|failed" "$OUT/conformance.log" | head -30 | tee -a "$SUMMARY"
fi
if [ -x "$BUILD/ferrite" ]; then
  IFS=';' read -r -a SPECS <<< "${QUANT_SPECS:-qwen3-8b q4_k_m;qwen3-8b q8_0;qwen3-0.6b q4_k_m}"
  for spec in "${SPECS[@]}"; do
    set -- $spec
    log "== bench $1 --dummy-dtype $2"
    timeout "${QUANT_BENCH_TIMEOUT:-70}" "$BUILD/ferrite" bench --model "$ROOT/configs/$1" \
      --dummy-weights --dummy-dtype "$2" --device cuda --batch 1 64 --prompt-len 4096 \
      --decode-prompt-len 128 --gen-len 32 --max-num-seqs 64 --kv-cache-gib 16 \
      > "$OUT/bench-$1-$2.log" 2>&1
    rc=$?
    grep -vE "^\s*$" "$OUT/bench-$1-$2.log" | tail -8 | tee -a "$SUMMARY"
    log "rc=$rc"
  done
fi
exit 0
