#!/usr/bin/env bash
# CPU side by side: Ferrite vs llama.cpp on the same GGUF files, 2 threads
# (issue #12's CPU target: decode >= 1.1x, pp512 >= 1.2x llama.cpp).
#
#   bash bench/quant_cpu_vs_llama.sh [FILE.gguf ...]
#
# Defaults: the Qwen3-0.6B-shape twin in Q8_0 and Q4_K_M made by llama-quantize
# from the F16 twin (/tmp/twin/lq/, see docs/cpu_kernels.md), llama.cpp's CPU
# build in /tmp/llama.cpp/b. Both tools measure the same thing:
#   - pp512: one 512-token prompt in one batch (llama-bench -p 512; ferrite
#     bench --prompt-len 512 --max-num-batched-tokens 512);
#   - tg128: batch-1 decode of 128 tokens from an (almost) empty context
#     (llama-bench -n 128; ferrite bench --batch 1 --gen-len 128
#     --decode-prompt-len 1, timed over pure decode steps).
# The runs alternate (llama.cpp, Ferrite, llama.cpp, ...) REPS times and each
# side reports its best, so a background load hits both alike. Needs an idle
# machine for figures worth quoting: the load average before and after is
# printed with the table. Env: FERRITE, LLAMA_BENCH, THREADS, REPS.
#
# llama.cpp's CPU build: its AMX path (GGML_NATIVE on an AMX CPU) dies with
# SIGILL / SIGSEGV in ggml_backend_amx_mul_mat on this machine (the AMX unit
# itself works), so build it with the native ISA spelled out minus AMX (on an AMD Zen 4
# host, which has AVX-512 VNNI but not the VEX-encoded AVX-VNNI, also -DGGML_AVX_VNNI=OFF:
# with it llama-bench dies with SIGILL):
#   git clone -q .peer/llama.bundle /tmp/llama.cpp && cmake -S /tmp/llama.cpp \
#     -B /tmp/llama.cpp/b -DLLAMA_CURL=OFF -DCMAKE_BUILD_TYPE=Release \
#     -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON \
#     -DGGML_BMI2=ON -DGGML_AVX_VNNI=ON -DGGML_AVX512=ON -DGGML_AVX512_VBMI=ON \
#     -DGGML_AVX512_VNNI=ON -DGGML_AVX512_BF16=ON \
#     && cmake --build /tmp/llama.cpp/b -j2 --target llama-bench llama-quantize
# The twins: /usr/bin/python3 (with python3-numpy) .peer/twin_weights.py
# qwen3-0.6b /tmp/twin/lq TOKENIZER.json {f16,q8_0}, then llama-quantize
# model-f16.gguf model-q4_k_m.gguf Q4_K_M.
set -euo pipefail
cd "$(dirname "$0")/.."
FERRITE=${FERRITE:-build/ferrite}
LLAMA_BENCH=${LLAMA_BENCH:-/tmp/llama.cpp/b/bin/llama-bench}
THREADS=${THREADS:-2}
REPS=${REPS:-3}
if [ $# -gt 0 ]; then FILES=("$@"); else
  FILES=(/tmp/twin/lq/model-q8_0.gguf /tmp/twin/lq/model-q4_k_m.gguf)
fi
for tool in "$FERRITE" "$LLAMA_BENCH"; do
  [ -x "$tool" ] || { echo "missing $tool" >&2; exit 1; }
done
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "| file | test | llama.cpp tok/s | Ferrite tok/s | ratio | Ferrite decode roofline |"
echo "|---|---|---|---|---|---|"
for f in "${FILES[@]}"; do
  for r in $(seq "$REPS"); do
    "$LLAMA_BENCH" -m "$f" -t "$THREADS" -p 512 -n 128 -r 1 -o json >"$tmp/llama.$r.json" 2>/dev/null
    "$FERRITE" bench --model "$f" --threads "$THREADS" --prompt-len 512 \
      --max-num-batched-tokens 512 --batch 1 --gen-len 128 --decode-prompt-len 1 \
      --max-num-seqs 1 --json >"$tmp/ferrite.$r.json" 2>/dev/null
  done
  python3 - "$tmp" "$REPS" "$f" <<'EOF'
import json, sys, os
tmp, reps, f = sys.argv[1], int(sys.argv[2]), sys.argv[3]
ll = {"pp512": 0.0, "tg128": 0.0}
fe = {"pp512": 0.0, "tg128": 0.0}
roof = 0.0
for r in range(1, reps + 1):
    for e in json.load(open(f"{tmp}/llama.{r}.json")):
        key = "pp512" if e["n_prompt"] == 512 and e["n_gen"] == 0 else "tg128"
        ll[key] = max(ll[key], e["avg_ts"])
    j = json.load(open(f"{tmp}/ferrite.{r}.json"))
    fe["pp512"] = max(fe["pp512"], j["prefill"]["tokens_per_s"])
    d = j["decode"][0]
    if d["tokens_per_s"] > fe["tg128"]:
        fe["tg128"] = d["tokens_per_s"]
        roof = d["roofline_fraction"]
name = os.path.basename(f)
for k in ("pp512", "tg128"):
    extra = f"{100 * roof:.0f} % of {fe[k] / roof:.1f} tok/s" if k == "tg128" and roof > 0 else ""
    print(f"| {name} | {k} | {ll[k]:.1f} | {fe[k]:.1f} | {fe[k] / ll[k]:.2f}x | {extra} |")
EOF
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
