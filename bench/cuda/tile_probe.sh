#!/usr/bin/env bash
# One GPU call for the bf16 tile (kernels/quant_tile.cu): with PEER=1 the llama.cpp build and
# the twin weights start in the background first (as scripts/gpu_session.sh prepare, so that a
# `gpu_session.sh measure` chained on the warm machine finds them), then the build (build-gpu:
# cuda_test, conformance_test, ferrite, quant_gemm_bench), the tile's correctness cases (cuda_test
# quantized goldens, the default cuda backend's conformance), quant_gemm_bench (the tile against
# dequantize + cuBLASLt at real shapes) and `ferrite bench` on Qwen3-8B Q4_K_M with the tile on
# and off. Output: $OUT/tile_probe.txt (its end on stdout).
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
OUT="${OUT:-$ROOT/out}"
mkdir -p "$OUT" /tmp/peer
if [ "${PEER:-0}" = 1 ] && [ ! -f /tmp/peer/prep-started ]; then
  touch /tmp/peer/prep-started
  mkdir -p /tmp/peer-out
  OUT=/tmp/peer-out setsid nohup nice -n 19 bash "$ROOT/bench/gguf_vs_llama_h200.sh" --prepare \
    > /tmp/peer-prep.log 2>&1 < /dev/null &
fi
. "$ROOT/scripts/gpu_env.sh"
BUILD="${BUILD:-$ROOT/build-gpu}"
T="$OUT/tile_probe.txt"
T0=$(date +%s)
[ -f "$BUILD/build.ninja" ] || gpu_configure "$BUILD" > "$OUT/build.log" 2>&1
ninja -C "$BUILD" cuda_test conformance_test ferrite quant_gemm_bench >> "$OUT/build.log" 2>&1
echo "build rc=$? in $(( $(date +%s) - T0 )) s" | tee "$T"
grep -E "error|FAILED" "$OUT/build.log" | head -10 | tee -a "$T"
"$BUILD/tests/cuda/cuda_test" --gtest_filter="${TESTS:-*Quant*}" > "$OUT/cuda_test.log" 2>&1
echo "cuda_test: rc=$? $(grep -E '^\[  PASSED|^\[  FAILED  \] [0-9]' "$OUT/cuda_test.log" | tr '\n' ' ')" | tee -a "$T"
grep -E "^\[  FAILED  \] [A-Z]" "$OUT/cuda_test.log" | head -20 | tee -a "$T"
"$BUILD/tests/conformance/conformance_test" --gtest_filter='*/cuda_cuda_*' > "$OUT/conformance.log" 2>&1
echo "conformance (cuda): rc=$? $(grep -E '^\[  PASSED|^\[  FAILED  \] [0-9]' "$OUT/conformance.log" | tr '\n' ' ')" | tee -a "$T"
grep -E "^\[  FAILED  \] [A-Z]" "$OUT/conformance.log" | head -20 | tee -a "$T"
"$BUILD/bench/cuda/quant_gemm_bench" --formats ${FORMATS:-q4_k,q8_0,u4_g128} \
  --shapes 4096x4096,12288x4096,4096x12288,1024x4096 --tokens 16,32,64,128 2>&1 | tee -a "$T"
for v in 64 0; do
  echo "== qwen3-8b q4_k_m FERRITE_CUDA_QUANT_TILE_TOKENS=$v" | tee -a "$T"
  FERRITE_CUDA_QUANT_TILE_TOKENS=$v timeout 150 "$BUILD/ferrite" bench --device cuda --dummy-weights \
    -r 1 --model "$ROOT/configs/qwen3-8b" --dummy-dtype q4_k_m --batch 16 32 64 128 \
    --prompt-len 256 --decode-prompt-len 128 --gen-len 24 --max-num-seqs 128 --kv-cache-gib 16 2>&1 |
    grep -E "^(prefill|decode)|error" | tee -a "$T"
done
