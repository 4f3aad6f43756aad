#!/usr/bin/env bash
# Perplexity of the trained default model (models/ferrite-tiny) quantized as a
# GPTQ checkpoint: 4-bit, group 128, zero points (round-to-nearest per group,
# GPTQ's quantizer without its error feedback), written as AutoGPTQ packs it
# (scripts/make_hf_quant_models.py's pack_gptq), once in natural column order
# and once act-order (each module's columns in a random order, desc_act). The
# integer CPU path (FERRITE_CPU_QUANT_DOT=1, 8-bit activation blocks of 128)
# against the exact path (dequantized weights, f32 dots), and the bf16
# checkpoint. ferrite-tiny's down projections (960 inputs, no whole
# 128-blocks) stay bf16, as a quantizer would leave them.
#
#   bash bench/quant_ppl_hf.sh            # needs build/ferrite and python3-numpy
#
# Env: OUT (default /tmp/ferrite-tiny-gptq), FERRITE.
set -euo pipefail
cd "$(dirname "$0")/.."
FERRITE=${FERRITE:-build/ferrite}
OUT=${OUT:-/tmp/ferrite-tiny-gptq}
TEXT=models/ferrite-tiny/heldout_excerpt.txt
mkdir -p "$OUT"
/usr/bin/python3 - "$OUT" <<'PY'
import json, os, shutil, sys, zlib
import numpy as np
sys.path.insert(0, "scripts")
import make_hf_quant_models as m

src, out = "models/ferrite-tiny", sys.argv[1]
cfg = json.load(open(os.path.join(src, "config.json")))
tensors = m.read_safetensors(os.path.join(src, "model.safetensors"))

def rtn(w, group=128):
    """Asymmetric round-to-nearest per group of 128 inputs: codes [out, in],
    scales [G, out] (f16), zeros [G, out]."""
    o, i = w.shape
    G = i // group
    codes = np.zeros((o, i), np.int64)
    scales = np.zeros((G, o), np.float32)
    zeros = np.zeros((G, o), np.int64)
    for k in range(G):
        wg = w[:, k * group:(k + 1) * group]
        lo, hi = np.minimum(wg.min(1), 0), np.maximum(wg.max(1), 0)
        s = np.maximum((hi - lo) / 15, 1e-8).astype(np.float16).astype(np.float32)
        z = np.clip(np.round(-lo / s), 0, 15).astype(np.int64)
        codes[:, k * group:(k + 1) * group] = np.clip(np.round(wg / s[:, None]) + z[:, None], 0, 15)
        scales[k], zeros[k] = s, z
    return codes, scales, zeros

for name, act_order in (("gptq", False), ("gptq-act", True)):
    d = os.path.join(out, name)
    os.makedirs(d, exist_ok=True)
    q = {}
    for n, (dt, shape, data) in tensors.items():
        quantize = (n.endswith("_proj.weight") and len(shape) == 2 and shape[1] % 128 == 0
                    and shape[0] % 8 == 0)
        if not quantize:
            q[n] = (dt, shape, data)
            continue
        w = m.from_bf16_bytes(data, shape) if dt == "BF16" else np.frombuffer(data, np.float32).reshape(shape)
        mod = n[:-len(".weight")]
        if act_order:
            perm = np.random.default_rng(zlib.crc32(mod.encode())).permutation(shape[1])
            cp, sc, z = rtn(w[:, perm])
            codes = np.empty_like(cp)
            codes[:, perm] = cp
            g_idx = np.empty(shape[1], np.int32)
            g_idx[perm] = (np.arange(shape[1]) // 128).astype(np.int32)
        else:
            codes, sc, z = rtn(w)
            g_idx = None
        for k, v in m.pack_gptq(codes, sc, z, 128, g_idx=g_idx).items():
            q[mod + "." + k] = v
    c = dict(cfg)
    c["quantization_config"] = {"bits": 4, "checkpoint_format": "gptq", "desc_act": act_order,
                                 "group_size": 128, "quant_method": "gptq", "static_groups": False,
                                 "sym": False, "true_sequential": True}
    json.dump(c, open(os.path.join(d, "config.json"), "w"), indent=2)
    m.write_safetensors(os.path.join(d, "model.safetensors"), q)
    for f in ("tokenizer.json", "tokenizer_config.json", "generation_config.json"):
        shutil.copy(os.path.join(src, f), d)
PY
ppl() { "$FERRITE" perplexity "$@" --text-file "$TEXT" 2>/dev/null | grep -i perplexity | tail -1; }
echo "safetensors (bf16): $(ppl --model models/ferrite-tiny)"
for q in gptq gptq-act; do
  echo "$q exact   (FERRITE_CPU_QUANT_DOT=0): $(FERRITE_CPU_QUANT_DOT=0 ppl --model "$OUT/$q")"
  echo "$q integer (FERRITE_CPU_QUANT_DOT=1): $(FERRITE_CPU_QUANT_DOT=1 ppl --model "$OUT/$q")"
done
