#!/usr/bin/env bash
# Issue 13's table on the GPU machine: quantized Hugging Face formats with random weights
# (`--dummy-weights --quantization Q`) beside bf16, per model: decode batch 1 / 8 / 32 / 128
# and a 4,096-token prefill, roofline fractions as `ferrite bench` prints them.
#
#   bash bench/quant_table_h200.sh [models...]      (after scripts/gpu_run.sh built build-gpu)
#
# QUANTS (default "bf16 fp8 gptq-int4"; awq-int4 repacks into the same u4_g128 blocks), FERRITE_BENCH_FLAGS (e.g. "-r 1"). One model
# takes about 4 minutes; output: $OUT/quant_table.txt (and per-run logs beside it).
set -u
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
OUT="${OUT:-$ROOT/out}"
B="${BUILD:-$ROOT/build-gpu}"
mkdir -p "$OUT"
T="$OUT/quant_table.txt"
MODELS=("$@")
[ ${#MODELS[@]} -eq 0 ] && MODELS=(qwen3-8b qwen3-30b-a3b qwen3.5-35b-a3b)
for m in "${MODELS[@]}"; do
  for q in ${QUANTS:-bf16 fp8 gptq-int4}; do
    echo "== $m $q" | tee -a "$T"
    flags=()
    [ "$q" != bf16 ] && flags=(--quantization "$q")
    timeout 240 "$B/ferrite" bench --model "$ROOT/configs/$m" --dummy-weights "${flags[@]}" \
      --device cuda --batch 1 8 32 128 --prompt-len 4096 --decode-prompt-len 128 --gen-len 64 \
      --max-num-seqs 128 --kv-cache-gib 24 ${FERRITE_BENCH_FLAGS:-} > "$OUT/quant-$m-$q.log" 2>&1
    echo "rc=$?" >> "$OUT/quant-$m-$q.log"
    grep -E "^(prefill|decode|weights)|error|rc=" "$OUT/quant-$m-$q.log" | tee -a "$T"
  done
done
