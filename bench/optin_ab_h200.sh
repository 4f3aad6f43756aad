#!/usr/bin/env bash
# A/B of the CUDA paths still being decided (docs/tuning.md), on the GPU machine after
# scripts/gpu_run.sh built build-gpu (and its cuda_test and conformance ran the paths' cases):
#  - FERRITE_CUDA_QUANT_TILE_TOKENS: products of 9+ bf16 tokens on block weights through the
#    bf16 tensor-core tile that decodes the blocks in registers (64, the default, against 0:
#    dequantize + cuBLASLt, and 256; Qwen3-8B in TILE_QUANTS, default Q4_K_M and GPTQ-Int4,
#    b16-b128 and a 256-token prefill; session 15: 64 wins).
# DECIDED=1 also re-runs the A/Bs already settled (docs/perf-log.md):
#  - FERRITE_CUDA_QUANT_STREAM_BLOCKS: blocks an SM of the bulk-copy decode GEMV (1, the
#    default, against 2; Qwen3-8B Q4_K_M and Q8_0, Qwen3-30B-A3B Q4_K_M, b1 / b8; session 12:
#    1 wins);
#  - FERRITE_CUDA_QUANT_STREAM_TOKENS: decode GEMVs on block weights with their rows
#    bulk-copied into shared memory (8, the default, against 0: streamed through registers;
#    Qwen3-8B Q4_K_M, Q8_0, GPTQ-Int4 and FP8, Qwen3-30B-A3B Q4_K_M, b1 / b8; STREAM_QUANTS
#    overrides the 8B list; session 12: 8 wins, FP8 b1 even);
#  - FERRITE_CUDA_MOE_FUSED_TOKENS: MoE decode steps on the fused launches (8, the default,
#    against 0: one launch per stage; Qwen3-30B-A3B Q4_K_M and GPTQ-Int4, Qwen3.5-35B-A3B
#    GPTQ-Int4 (a shared expert), b1 / b8; FUSED_QUANTS / FUSED_MODELS override the lists;
#    session 11: 8 wins);
#  - FERRITE_CUDA_QUANT_FUSED_FP8: FP8 decode on the fused kernel (Qwen3-8B, b1 / b8);
#  - FERRITE_CUDA_DECODE_SPLIT_POSITIONS: positions per split of the fused decode attention
#    (64, the default, against 32; Qwen3-8B Q4_K_M, b1 / b8);
#  - FERRITE_CUDA_DEQUANT_SLICE_MIB: block weights dequantized per cuBLASLt call in products of
#    9+ tokens (512, the default, against L2-sized slices; Qwen3-8B Q4_K_M, b32-b128, prefill);
#  - FERRITE_CUDA_MOE_DEQUANT: prefill of block-format MoE experts on the grouped tensor-core
#    path (512, the default, against 0; Qwen3-30B-A3B Q4_K_M shape, a 4,096-token prefill;
#    MOE_QUANTS="--dummy-dtype q4_k_m;--quantization gptq-int4" for GPTQ-Int4 too).
# About 2 minutes (20 more with DECIDED=1). Output: $OUT/optin_ab.txt.
set -u
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
OUT="${OUT:-$ROOT/out}"
B="${BUILD:-$ROOT/build-gpu}/ferrite"
mkdir -p "$OUT"
T="$OUT/optin_ab.txt"
run() {  # label, env assignment, ferrite bench arguments...
  local label=$1 var=$2
  shift 2
  echo "== $label $var" | tee -a "$T"
  env "$var" timeout 200 "$B" bench --device cuda --dummy-weights -r 1 "$@" 2>&1 |
    grep -E "^(prefill|decode)|error" | tee -a "$T"
}
IFS=';' read -r -a TQ <<< "${TILE_QUANTS:---dummy-dtype q4_k_m;--quantization gptq-int4}"
for q in "${TQ[@]}"; do
  for v in 64 0 256; do  # the default first (optin_pick.py compares with it)
    run "qwen3-8b $q" "FERRITE_CUDA_QUANT_TILE_TOKENS=$v" --model "$ROOT/configs/qwen3-8b" \
      $q --batch 16 32 64 128 --prompt-len 256 --decode-prompt-len 128 --gen-len 24 \
      --max-num-seqs 128 --kv-cache-gib 16
  done
done
if [ "${DECIDED:-0}" = 1 ]; then
for q in "--dummy-dtype q4_k_m" "--dummy-dtype q8_0"; do
  for v in 1 2; do  # the default first (optin_pick.py compares with it)
    run "qwen3-8b $q" "FERRITE_CUDA_QUANT_STREAM_BLOCKS=$v" --model "$ROOT/configs/qwen3-8b" $q \
      --batch 1 8 --prompt-len 128 --decode-prompt-len 128 --gen-len 48 --max-num-seqs 8 \
      --kv-cache-gib 4 --max-model-len 8192
  done
done
for v in 1 2; do
  run "qwen3-30b-a3b --dummy-dtype q4_k_m" "FERRITE_CUDA_QUANT_STREAM_BLOCKS=$v" \
    --model "$ROOT/configs/qwen3-30b-a3b" --dummy-dtype q4_k_m --batch 1 8 --prompt-len 128 \
    --decode-prompt-len 128 --gen-len 32 --max-num-seqs 8 --kv-cache-gib 4
done
IFS=';' read -r -a SQ <<< "${STREAM_QUANTS:---dummy-dtype q4_k_m;--dummy-dtype q8_0;--quantization gptq-int4;--quantization fp8}"
for q in "${SQ[@]}"; do
  for v in 8 0; do  # the default first (optin_pick.py compares with it)
    run "qwen3-8b $q" "FERRITE_CUDA_QUANT_STREAM_TOKENS=$v" --model "$ROOT/configs/qwen3-8b" $q \
      --batch 1 8 --prompt-len 128 --decode-prompt-len 128 --gen-len 48 --max-num-seqs 8 \
      --kv-cache-gib 4 --max-model-len 8192
  done
done
for v in 8 0; do
  run "qwen3-30b-a3b --dummy-dtype q4_k_m" "FERRITE_CUDA_QUANT_STREAM_TOKENS=$v" \
    --model "$ROOT/configs/qwen3-30b-a3b" --dummy-dtype q4_k_m --batch 1 8 --prompt-len 128 \
    --decode-prompt-len 128 --gen-len 32 --max-num-seqs 8 --kv-cache-gib 4
done
IFS=';' read -r -a FQ <<< "${FUSED_QUANTS:---dummy-dtype q4_k_m;--quantization gptq-int4}"
for m in ${FUSED_MODELS:-qwen3-30b-a3b}; do
  for q in "${FQ[@]}"; do
    for v in 8 0; do  # the default first (optin_pick.py compares with it)
      run "$m $q" "FERRITE_CUDA_MOE_FUSED_TOKENS=$v" --model "$ROOT/configs/$m" $q --batch 1 8 \
        --prompt-len 128 --decode-prompt-len 128 --gen-len 32 --max-num-seqs 8 --kv-cache-gib 4
    done
  done
done
for v in 8 0; do
  run "qwen3.5-35b-a3b --quantization gptq-int4" "FERRITE_CUDA_MOE_FUSED_TOKENS=$v" \
    --model "$ROOT/configs/qwen3.5-35b-a3b" --quantization gptq-int4 --batch 1 8 \
    --prompt-len 128 --decode-prompt-len 128 --gen-len 32 --max-num-seqs 8 --kv-cache-gib 4 \
    --max-model-len 8192
done
for v in 1 0; do  # the default first (optin_pick.py compares with it)
  run "qwen3-8b fp8" "FERRITE_CUDA_QUANT_FUSED_FP8=$v" --model "$ROOT/configs/qwen3-8b" \
    --quantization fp8 --batch 1 8 --prompt-len 512 --decode-prompt-len 128 --gen-len 48 \
    --max-num-seqs 8 --kv-cache-gib 8
done
for v in 64 32; do
  run "qwen3-8b q4_k_m" "FERRITE_CUDA_DECODE_SPLIT_POSITIONS=$v" --model "$ROOT/configs/qwen3-8b" \
    --dummy-dtype q4_k_m --batch 1 8 --prompt-len 256 --decode-prompt-len 256 --gen-len 48 \
    --max-num-seqs 8 --kv-cache-gib 8
done
for v in 512 24 8; do
  run "qwen3-8b q4_k_m" "FERRITE_CUDA_DEQUANT_SLICE_MIB=$v" --model "$ROOT/configs/qwen3-8b" \
    --dummy-dtype q4_k_m --batch 32 64 128 --prompt-len 4096 --decode-prompt-len 128 \
    --gen-len 32 --max-num-seqs 128 --kv-cache-gib 16
done
IFS=';' read -r -a MQ <<< "${MOE_QUANTS:---dummy-dtype q4_k_m}"
for q in "${MQ[@]}"; do
  for v in 512 0; do
    run "qwen3-30b-a3b $q" "FERRITE_CUDA_MOE_DEQUANT=$v" --model "$ROOT/configs/qwen3-30b-a3b" \
      $q --batch 1 --prompt-len 4096 --decode-prompt-len 128 --gen-len 16 --max-num-seqs 4 \
      --kv-cache-gib 8
  done
done
fi
