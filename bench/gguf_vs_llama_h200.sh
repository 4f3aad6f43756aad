#!/usr/bin/env bash
# llama.cpp beside Ferrite on the H200, on the same Qwen3-8B-shape twin GGUF files (issue 12):
# llama-bench (pp4096, tg128) and llama-batched-bench (128 + 128, B = 1, 8, 32, 64, 128) against
# `ferrite bench --model FILE.gguf` (the same batches, prefill 4096), for Q4_K_M and Q8_0.
#
# The device tree limit (64 MiB) leaves no room for .peer/llama.bundle beside the tracked
# files, so carry a trimmed source tarball instead: bash scripts/gpu_carry.sh (on the
# development machine, once) writes .gpu/llama-src.tar.xz (~4 MB; an older .gpu/llama-src.tgz
# works too), the tokenizer and the peer's twin_weights.py; then on the GPU machine, after the
# Ferrite build
# (build-gpu, scripts/gpu_run.sh): device carry [".gpu", ".gpu-prebuilt"] (the tree limit
# leaves no room for .deb too: carry it in the earlier call that builds), `bash
# bench/gguf_vs_llama_h200.sh`.
# The peer build (~5 min) and the twin weights (F16, 16 GB + its HF copy) come first; the
# whole script takes about 9 minutes. `--prepare` does only that part (start it with setsid
# in an earlier call of the same warm machine, e.g. while scripts/gpu_run.sh builds and
# tests; it touches /tmp/peer/prepared when done) so that the measuring call is short.
# FERRITE_AB_OFF="VAR=0 ...": each also runs ferrite's bench once more with that variable set
# (e.g. FERRITE_CUDA_QUANT_FUSED=0, the A/B of the fused decode GEMV).
# PEER_QUANTS: the dense files measured (default "q4_k_m q8_0").
# PEER_MOE=1: afterwards (or alone, with PEER_DENSE=0, when `--prepare` makes the MoE twin
# too) the Qwen3-30B-A3B-shape Q4_K_M target:
# bench/twin_moe_gguf.py writes the MoE twin in Q8_0 (32 GB; the dense twin files are deleted
# first for disk), llama-quantize --allow-requantize makes Q4_K_M, then llama-bench (tg128,
# pp4096), llama-batched-bench (B = 1, 8, 32) and ferrite bench (b1 / 8 / 32, prefill 4096).
# Ferrite decodes 128 tokens after a 128-token prompt, as llama-batched-bench -npp 128 -ntg 128
# (contexts 128 to 256). Output: $OUT/peer_side_by_side.txt.
set -u
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
OUT="${OUT:-$ROOT/out}"
G="$ROOT/.gpu"
B="${BUILD:-$ROOT/build-gpu}"
mkdir -p "$OUT" /tmp/peer
S="$OUT/peer_side_by_side.txt"
: > "$S"
# One preparation or measurement at a time: a second run (e.g. the measuring call while a
# --prepare started with setsid is still building, or a second measuring run) waits here.
exec 9> /tmp/peer/prepare.lock
flock 9
# What the preparation reads from .gpu, copied out first: a later device call that does not
# carry .gpu removes it from the tree while a --prepare started with setsid still runs.
if [ ! -s /tmp/peer/tok.json ] || [ ! -s /tmp/peer/twin_weights.py ]; then
  gunzip -c "$G/qwen3-tokenizer.json.gz" > /tmp/peer/tok.json.part &&
    mv /tmp/peer/tok.json.part /tmp/peer/tok.json &&
    cp "$G/twin_weights.py" /tmp/peer/twin_weights.py ||
    { echo "no .gpu/qwen3-tokenizer.json.gz or twin_weights.py (scripts/gpu_carry.sh)"; exit 1; }
fi
if [ ! -f /tmp/peer/built ]; then
  mkdir -p /tmp/peer/llama.cpp &&
  tar xf "$(ls "$G"/llama-src.tar.xz "$G"/llama-src.tgz 2>/dev/null | head -1)" -C /tmp/peer/llama.cpp &&
  ( cd /tmp/peer/llama.cpp && cmake -B build -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90a \
      -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF \
      -DLLAMA_BUILD_APP=OFF -DCMAKE_BUILD_TYPE=Release > /tmp/peer/cfg.log 2>&1 &&
    cmake --build build -j 12 --target llama-bench llama-batched-bench llama-quantize \
      > /tmp/peer/build.log 2>&1 && touch /tmp/peer/built ) &
fi
# The dense twin only when dense rows are asked for (PEER_DENSE=0 with PEER_MOE=1 skips its
# 16 GB F16 file and two quantizations, ~4 minutes).
DENSE="${PEER_DENSE:-1}"
stamp() { echo "-- $(date +%T) $*" >> "$S"; }  # progress, so that a cut-off run shows where
stamp "preparing (llama.cpp build, dense twin: $DENSE)"
if [ "$DENSE" = 1 ] && [ ! -f /tmp/peer/twin/model-f16.gguf ]; then
  python3 /tmp/peer/twin_weights.py qwen3-8b /tmp/peer/twin /tmp/peer/tok.json f16 \
    > /tmp/peer/twin.log 2>&1 &
fi
wait
[ -f /tmp/peer/built ] || { echo "llama.cpp build failed: /tmp/peer/build.log" | tee -a "$S"; exit 1; }
L=/tmp/peer/llama.cpp/build/bin
for q in $([ "$DENSE" = 1 ] && echo ${PEER_QUANTS:-q4_k_m q8_0}); do
  [ -f /tmp/peer/twin/$q.gguf ] || { "$L/llama-quantize" /tmp/peer/twin/model-f16.gguf \
    /tmp/peer/twin/$q.gguf.part "$(echo $q | tr a-z A-Z)" 16 > /tmp/peer/quantize-$q.log 2>&1 &&
    mv /tmp/peer/twin/$q.gguf.part /tmp/peer/twin/$q.gguf; } &
done
wait
M=/tmp/peer/moe
# The MoE twin (bench/twin_moe_gguf.py writes Q8_0, llama-quantize makes
# Q4_K_M); the dense twin's files go first for disk.
moe_twin() {
  [ -f $M/q4_k_m.gguf ] && return 0
  rm -rf /tmp/peer/twin && mkdir -p $M
  python3 "$ROOT/bench/twin_moe_gguf.py" $M/q8_0.gguf /tmp/peer/tok.json /tmp/peer/twin_weights.py \
    > $M/twin.log 2>&1 &&
    "$L/llama-quantize" --allow-requantize $M/q8_0.gguf $M/q4_k_m.gguf Q4_K_M 16 > $M/quantize.log 2>&1 &&
    rm -f $M/q8_0.gguf
}
# Without dense rows the MoE twin is part of the preparation (so `--prepare` makes it).
[ "$DENSE" = 1 ] || [ "${PEER_MOE:-0}" != 1 ] || moe_twin
touch /tmp/peer/prepared
stamp "prepared"
[ "${1:-}" = "--prepare" ] && exit 0
# A measuring run keeps the lock to its end: two of them (session 45: one left behind in a
# detached chain, one started by hand) would otherwise time llama.cpp and Ferrite on the same
# GPU at the same time, and every figure of both would be wrong.
for q in $([ "$DENSE" = 1 ] && echo ${PEER_QUANTS:-q4_k_m q8_0}); do
  F=/tmp/peer/twin/$q.gguf
  echo "== llama.cpp $q" >> "$S"
  timeout 150 "$L/llama-bench" -m "$F" -ngl 99 -fa 1 -p 4096 -n 128 -r 2 -o md 2>&1 | grep -E "^\|" >> "$S"
  timeout 150 "$L/llama-batched-bench" -m "$F" -ngl 99 -fa on -c 20000 -b 2048 -ub 512 -npp 128 \
    -ntg 128 -npl 1,8,32,64,128 2>&1 | grep -E "^\|" >> "$S"
  for v in "" ${FERRITE_AB_OFF:-}; do
    echo "== ferrite $q (same file) ${v:-default}" >> "$S"
    env $v timeout 150 "$B/ferrite" bench --model "$F" --device cuda --batch 1 8 32 64 128 \
      --prompt-len 4096 --decode-prompt-len 128 --gen-len 128 --max-num-seqs 128 --kv-cache-gib 16 \
      -r 2 2>&1 |
      grep -E "prefill|decode|weights|error" >> "$S"
  done
done
if [ "${PEER_MOE:-0}" = 1 ]; then
  moe_twin
  stamp "MoE twin ready"
  F=$M/q4_k_m.gguf
  echo "== llama.cpp qwen3-30b-a3b q4_k_m" >> "$S"
  timeout 200 "$L/llama-bench" -m "$F" -ngl 99 -fa 1 -p 4096 -n 128 -r 1 -o md 2>&1 | grep -E "^\|" >> "$S"
  timeout 200 "$L/llama-batched-bench" -m "$F" -ngl 99 -fa on -c 10000 -b 2048 -ub 512 -npp 128 \
    -ntg 128 -npl 1,8,32 2>&1 | grep -E "^\|" >> "$S"
  echo "== ferrite qwen3-30b-a3b q4_k_m (same file)" >> "$S"
  timeout 200 "$B/ferrite" bench --model "$F" --device cuda --batch 1 8 32 --prompt-len 4096 \
    --decode-prompt-len 128 --gen-len 128 --max-num-seqs 32 --kv-cache-gib 16 -r 1 2>&1 |
    grep -E "prefill|decode|weights|error" >> "$S"
fi
cat "$S"
