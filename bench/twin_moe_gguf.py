#!/usr/bin/env python3
"""A Qwen3-30B-A3B-shape GGUF (architecture qwen3moe) with the real Qwen3 vocabulary, for the
side-by-side with llama.cpp on the H200 (issue 12's MoE target; bench/gguf_vs_llama_h200.sh,
PEER_MOE=1). The peer's twin_weights.py writes only dense Qwen3 presets; this writes the MoE
shape of configs/qwen3-30b-a3b directly in Q8_0 (32 GB instead of 61 GB of F16), which
`llama-quantize --allow-requantize` turns into Q4_K_M. Both engines then run the very same file.

    python3 bench/twin_moe_gguf.py OUT.gguf TOKENIZER_JSON TWIN_WEIGHTS_PY

Values: one pool of Q8_0 blocks (random f16 values, std 0.02) tiled over every matrix (whole
blocks, so every tensor is valid Q8_0), norms 1, the routers (ffn_gate_inp, kept in f32 as
llama.cpp's converter and llama-quantize keep them) from a random f32 pool. The GGUF helpers
(string / key-value encoding, the tokenizer metadata) come from the peer's twin_weights.py.
Needs only numpy.
"""
import importlib.util
import json
import os
import struct
import sys

import numpy as np

CFG = dict(H=2048, L=int(os.environ.get("TWIN_LAYERS", 48)), heads=32, kv=4, hd=128, E=128, used=8, I=768, V=151936)


def load_peer(path):
    spec = importlib.util.spec_from_file_location("twin_weights", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def tensors(c):
    """(gguf name, shape in row-major [.., out, in] order, kind): kind q8 / f32."""
    H, I, E, hd = c["H"], c["I"], c["E"], c["hd"]
    yield "token_embd.weight", (c["V"], H), "q8"
    yield "output_norm.weight", (H,), "f32"
    yield "output.weight", (c["V"], H), "q8"
    for l in range(c["L"]):
        b = f"blk.{l}."
        yield b + "attn_norm.weight", (H,), "f32"
        yield b + "ffn_norm.weight", (H,), "f32"
        yield b + "attn_q.weight", (c["heads"] * hd, H), "q8"
        yield b + "attn_k.weight", (c["kv"] * hd, H), "q8"
        yield b + "attn_v.weight", (c["kv"] * hd, H), "q8"
        yield b + "attn_output.weight", (H, c["heads"] * hd), "q8"
        yield b + "attn_q_norm.weight", (hd,), "f32"
        yield b + "attn_k_norm.weight", (hd,), "f32"
        yield b + "ffn_gate_inp.weight", (E, H), "router"
        yield b + "ffn_gate_exps.weight", (E, I, H), "q8"
        yield b + "ffn_up_exps.weight", (E, I, H), "q8"
        yield b + "ffn_down_exps.weight", (E, H, I), "q8"


def main():
    out, tokjson, peer = sys.argv[1:4]
    tw = load_peer(peer)
    c = CFG
    pool = (np.random.default_rng(0).standard_normal(1 << 22) * 0.02).astype(np.float16)
    q8_pool = np.frombuffer(tw.q8_0(pool), np.uint8)  # 2^17 whole blocks of 34 bytes
    router_pool = (np.random.default_rng(1).standard_normal(1 << 20) * 0.05).astype(np.float32)

    tok = json.load(open(tokjson))
    V = c["V"]
    toks = [f"[PAD{i}]" for i in range(V)]
    types = [5] * V
    for s, i in tok["model"]["vocab"].items():
        toks[i], types[i] = s, 1
    for t in tok["added_tokens"]:
        toks[t["id"]], types[t["id"]] = t["content"], 3
    merges = [m if isinstance(m, str) else " ".join(m) for m in tok["model"]["merges"]]
    a, kv, kva = "qwen3moe", tw.kv, tw.kv_array
    meta = [
        kv("general.architecture", 8, a), kv("general.alignment", 4, 32),
        kv("general.file_type", 4, 7),
        kv(f"{a}.block_count", 4, c["L"]), kv(f"{a}.context_length", 4, 40960),
        kv(f"{a}.embedding_length", 4, c["H"]), kv(f"{a}.feed_forward_length", 4, 6144),
        kv(f"{a}.expert_feed_forward_length", 4, c["I"]), kv(f"{a}.expert_count", 4, c["E"]),
        kv(f"{a}.expert_used_count", 4, c["used"]),
        kv(f"{a}.attention.head_count", 4, c["heads"]), kv(f"{a}.attention.head_count_kv", 4, c["kv"]),
        kv(f"{a}.attention.key_length", 4, c["hd"]), kv(f"{a}.attention.value_length", 4, c["hd"]),
        kv(f"{a}.rope.freq_base", 6, 1000000.0), kv(f"{a}.attention.layer_norm_rms_epsilon", 6, 1e-6),
        kv("tokenizer.ggml.model", 8, "gpt2"), kv("tokenizer.ggml.pre", 8, "qwen2"),
        kva("tokenizer.ggml.tokens", 8, toks), kva("tokenizer.ggml.token_type", 5, types),
        kva("tokenizer.ggml.merges", 8, merges),
        kv("tokenizer.ggml.bos_token_id", 4, 151643), kv("tokenizer.ggml.eos_token_id", 4, 151645),
        kv("tokenizer.ggml.add_bos_token", 7, False),
    ]

    def data_of(shape, kind):
        n = int(np.prod(shape))
        if kind == "f32":
            return np.ones(n, np.float32).tobytes(), 0
        if kind == "router":
            return np.resize(router_pool, n).tobytes(), 0
        assert n % 32 == 0
        return np.resize(q8_pool, n // 32 * 34).tobytes(), 8

    specs = list(tensors(c))
    infos, sizes, off = [], [], 0
    for name, shape, kind in specs:
        n = int(np.prod(shape))
        nbytes = n * 4 if kind in ("f32", "router") else n // 32 * 34
        gtype = 0 if kind in ("f32", "router") else 8
        dims = list(reversed(shape))  # fastest-varying first
        infos.append(tw.gstr(name) + struct.pack("<I", len(dims)) +
                     struct.pack(f"<{len(dims)}Q", *dims) + struct.pack("<IQ", gtype, off))
        pad = -nbytes % 32
        sizes.append((nbytes, pad))
        off += nbytes + pad
    head = b"GGUF" + struct.pack("<IQQ", 3, len(specs), len(meta)) + b"".join(meta) + b"".join(infos)
    head += b"\0" * (-len(head) % 32)
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    with open(out, "wb") as f:
        f.write(head)
        for (name, shape, kind), (nbytes, pad) in zip(specs, sizes):
            data, _ = data_of(shape, kind)
            assert len(data) == nbytes, name
            f.write(data + b"\0" * pad)
    print(f"wrote {out}: {os.path.getsize(out) / 1e9:.1f} GB, {len(specs)} tensors")


if __name__ == "__main__":
    main()
