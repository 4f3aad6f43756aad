#!/usr/bin/env bash
# Perplexity of the trained default model (models/ferrite-tiny) as GGUF block
# weights: the integer CPU path (FERRITE_CPU_QUANT_DOT=1, 8-bit activation
# blocks) against the exact path (dequantized weights, f32 dots) on the same
# file, and the bf16 safetensors checkpoint.
#
#   bash bench/quant_ppl.sh            # needs build/ferrite and llama.cpp's gguf-py
#
# The GGUFs are written with scripts/make_gguf_models.py's converter (its
# tensor names and transforms) carrying ferrite-tiny's own tokenizer, in
# Q8_0 and Q4_0 (ferrite-tiny's 384 / 960-wide rows are no whole 256-element
# k-quant blocks). Env: GGUF_PY (default /tmp/llama.cpp/gguf-py), OUT
# (default /tmp/ferrite-tiny-gguf), FERRITE.
set -euo pipefail
cd "$(dirname "$0")/.."
FERRITE=${FERRITE:-build/ferrite}
GGUF_PY=${GGUF_PY:-/tmp/llama.cpp/gguf-py}
OUT=${OUT:-/tmp/ferrite-tiny-gguf}
TEXT=models/ferrite-tiny/heldout_excerpt.txt
mkdir -p "$OUT"
/usr/bin/python3 - "$GGUF_PY" "$OUT" <<'EOF'
import json, os, sys
sys.path.insert(0, "scripts")
sys.path.insert(0, sys.argv[1])
import gguf
import make_gguf_models as m

d = "models/ferrite-tiny"
cfg = json.load(open(os.path.join(d, "config.json")))
tok = json.load(open(os.path.join(d, "tokenizer.json")))
vocab = dict(tok["model"]["vocab"])
for a in tok.get("added_tokens", []):
    vocab[a["content"]] = a["id"]
special = {a["id"] for a in tok.get("added_tokens", []) if a.get("special")}
tokens = [None] * cfg["vocab_size"]
for t, i in vocab.items():
    tokens[i] = t
tokens = [t if t is not None else f"[PAD{i}]" for i, t in enumerate(tokens)]
types = [3 if i in special else 1 for i in range(len(tokens))]
merges = [mg if isinstance(mg, str) else " ".join(mg) for mg in tok["model"]["merges"]]
m.gpt2_vocab = lambda V: (tokens, types, merges)  # the real tokenizer instead of the test one
tensors = m.convert_tensors(cfg, "qwen3", m.read_safetensors(os.path.join(d, "model.safetensors")))
for outtype in ("f16", "q8_0", "q4_0"):
    m.write_gguf(gguf, "qwen3", cfg, tensors, os.path.join(sys.argv[2], f"ferrite-tiny-{outtype}.gguf"), outtype)
EOF
ppl() { "$FERRITE" perplexity "$@" --text-file "$TEXT" 2>/dev/null | grep -i perplexity | tail -1; }
echo "safetensors (bf16), reference: $(ppl --model models/ferrite-tiny --providers reference)"
for q in f16 q8_0 q4_0; do
  f="$OUT/ferrite-tiny-$q.gguf"
  echo "$q exact   (FERRITE_CPU_QUANT_DOT=0): $(FERRITE_CPU_QUANT_DOT=0 ppl --model "$f")"
  echo "$q integer (FERRITE_CPU_QUANT_DOT=1): $(FERRITE_CPU_QUANT_DOT=1 ppl --model "$f")"
done
