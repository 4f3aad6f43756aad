#!/usr/bin/env python3
"""Writes tiny GGUF files from the tiny Hugging Face test models (tests/models/<family>),
exactly as llama.cpp's convert_hf_to_gguf.py would write them: the same tensor names,
metadata keys, dtypes per tensor and weight transforms per architecture (the Q/K RoPE
row permutation of `llama`; for qwen3next / qwen35 the +1 on zero-centred norms,
ssm_a = -exp(A_log), ssm_dt.bias, squeezed conv1d, qkvz split into attn_qkv + attn_gate,
and for qwen35* the value heads reordered from grouped to tiled order; experts stacked).

The converter itself needs torch and transformers; this script needs only numpy and the
peer bundle's gguf-py (llama.cpp's own writer):

    git clone -q .peer/llama.bundle /tmp/llama.cpp      # bash ../shared/peer/get_llama_cpp.sh first
    /usr/bin/python3 scripts/make_gguf_models.py --gguf-py /tmp/llama.cpp/gguf-py \
        --out tests/models/gguf

Per family it writes <family>-f32.gguf and <family>-f16.gguf (and bf16 for one family,
and a 3-shard split of one), each with a small tokenizer in the GGUF (a byte-level BPE
`gpt2` vocab with merges and the `qwen2` / `qwen35` pre-tokenizer for the Qwen families,
a SentencePiece-style `llama` vocab with scores and token types for the Llama ones) and
a ChatML chat template. Quantized files are made from the f16 ones with llama-quantize.
"""
import argparse
import json
import os
import re
import struct
import sys

import numpy as np

FAMILIES = ["llama", "llama3_scaled", "qwen3", "qwen3_moe", "qwen3_next", "qwen3_5", "qwen3_5_moe"]
ARCH = {
    "llama": "llama", "qwen3": "qwen3", "qwen3_moe": "qwen3moe", "qwen3_next": "qwen3next",
    "qwen3_5_text": "qwen35", "qwen3_5_moe_text": "qwen35moe",
}
CHATML = ("{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + "
          "message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}"
          "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")
TEXT = ("The quick brown fox jumps over the lazy dog. Hello world! It is a truth universally "
        "acknowledged, that a single man in possession of a good fortune, must be in want of a "
        "wife. In the beginning was the word, and the word was with the model. 0123456789 "
        "tokens, merges and vocabularies: the tokenizer splits text into pieces.\n")


def read_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        b, e = info["data_offsets"]
        raw = np.frombuffer(data[b:e], dtype={"BF16": np.uint16, "F32": np.float32,
                                              "F16": np.float16}[info["dtype"]])
        if info["dtype"] == "BF16":
            raw = (raw.astype(np.uint32) << 16).view(np.float32)
        out[name] = raw.astype(np.float32).reshape(info["shape"])
    return out


def bytes_to_unicode():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + \
        list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))


def train_bpe(words, n_merges):
    """Greedy BPE on a list of symbol sequences: the most frequent pair first (ties: first seen)."""
    words = [list(w) for w in words]
    merges = []
    for _ in range(n_merges):
        counts = {}
        for w in words:
            for a, b in zip(w, w[1:]):
                counts[(a, b)] = counts.get((a, b), 0) + 1
        if not counts:
            break
        pair = max(counts, key=lambda p: counts[p])
        merges.append(pair)
        for w in words:
            i = 0
            while i < len(w) - 1:
                if (w[i], w[i + 1]) == pair:
                    w[i:i + 2] = [w[i] + w[i + 1]]
                i += 1
    return merges


def gpt2_vocab(vocab_size):
    b2u = bytes_to_unicode()
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    tokens = specials + [b2u[b] for b in range(256)]
    words = [''.join(b2u[b] for b in w.encode()) for w in re.findall(r" ?\w+| ?[^\s\w]+|\s+", TEXT)]
    merges = train_bpe(words, vocab_size - len(tokens))
    for a, b in merges:
        tokens.append(a + b)
    while len(tokens) < vocab_size:  # unreachable merges keep the vocabulary full
        tokens.append(f"<|extra_{len(tokens)}|>")
    types = [3] * 3 + [1] * (vocab_size - 3)
    for i, t in enumerate(tokens):
        if t.startswith("<|extra_"):
            types[i] = 4  # USER_DEFINED, as the converter marks added tokens that are not special
    return tokens, types, [f"{a} {b}" for a, b in merges]


def spm_vocab(vocab_size):
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)]
    types = [2, 3, 3] + [6] * 256
    scores = [0.0] * len(tokens)
    text = "▁" + TEXT.replace(" ", "▁").replace("\n", "")
    chars = []
    for ch in text:
        if ch not in chars:
            chars.append(ch)
    pieces = list(chars)
    words = ["▁" + w for w in TEXT.replace("\n", "").split(" ")]
    for a, b in train_bpe(words, vocab_size - len(tokens) - len(pieces)):
        if a + b not in pieces:
            pieces.append(a + b)
    for i, p in enumerate(pieces[:vocab_size - len(tokens)]):
        tokens.append(p)
        types.append(1)
        scores.append(-float(i))
    while len(tokens) < vocab_size:
        tokens.append(f"<extra_{len(tokens)}>")
        types.append(4)
        scores.append(-1e9)
    return tokens, types, scores


def permute(w, n_head):
    """llama.cpp's LlamaModel.permute (Q / K rows for ggml's adjacent-pair RoPE)."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def reorder_v_heads(t, dim, hk, r, hd):
    """_LinearAttentionVReorderBase._reorder_v_heads: grouped -> tiled along `dim`."""
    shape = list(t.shape)
    dim = dim % len(shape)
    t = t.reshape(shape[:dim] + [hk, r, hd] + shape[dim + 1:])
    t = np.swapaxes(t, dim, dim + 1)
    return np.ascontiguousarray(t).reshape(shape)


def convert_tensors(cfg, arch, w):
    """HF tensors -> [(gguf name, array)], as the converter's modify_tensors chain."""
    L = cfg["num_hidden_layers"]
    heads, kv = cfg["num_attention_heads"], cfg.get("num_key_value_heads", cfg["num_attention_heads"])
    out = []
    hybrid = arch in ("qwen3next", "qwen35", "qwen35moe")
    post_norm = "post_attention_norm" if hybrid else "ffn_norm"
    simple = {
        "input_layernorm.weight": "attn_norm.weight",
        "post_attention_layernorm.weight": post_norm + ".weight",
        "self_attn.q_proj.weight": "attn_q.weight", "self_attn.k_proj.weight": "attn_k.weight",
        "self_attn.v_proj.weight": "attn_v.weight", "self_attn.o_proj.weight": "attn_output.weight",
        "self_attn.q_norm.weight": "attn_q_norm.weight", "self_attn.k_norm.weight": "attn_k_norm.weight",
        "mlp.gate_proj.weight": "ffn_gate.weight", "mlp.up_proj.weight": "ffn_up.weight",
        "mlp.down_proj.weight": "ffn_down.weight", "mlp.gate.weight": "ffn_gate_inp.weight",
        "mlp.shared_expert_gate.weight": "ffn_gate_inp_shexp.weight",
        "mlp.shared_expert.gate_proj.weight": "ffn_gate_shexp.weight",
        "mlp.shared_expert.up_proj.weight": "ffn_up_shexp.weight",
        "mlp.shared_expert.down_proj.weight": "ffn_down_shexp.weight",
        "linear_attn.in_proj_qkv.weight": "attn_qkv.weight", "linear_attn.in_proj_z.weight": "attn_gate.weight",
        "linear_attn.in_proj_b.weight": "ssm_beta.weight", "linear_attn.in_proj_a.weight": "ssm_alpha.weight",
        "linear_attn.in_proj_ba.weight": "ssm_ba.weight",
        "linear_attn.conv1d.weight": "ssm_conv1d.weight", "linear_attn.A_log": "ssm_a",
        "linear_attn.dt_bias": "ssm_dt.bias", "linear_attn.norm.weight": "ssm_norm.weight",
        "linear_attn.out_proj.weight": "ssm_out.weight",
    }
    hk = cfg.get("linear_num_key_heads", 0)
    hv = cfg.get("linear_num_value_heads", 0)
    dk = cfg.get("linear_key_head_dim", 0)
    dv = cfg.get("linear_value_head_dim", 0)
    tiled = arch in ("qwen35", "qwen35moe") and hk != hv
    r = hv // hk if hk else 0

    def name_of(hf):
        if hf == "model.embed_tokens.weight":
            return "token_embd.weight"
        if hf == "model.norm.weight":
            return "output_norm.weight"
        if hf == "lm_head.weight":
            return "output.weight"
        m = re.match(r"model\.layers\.(\d+)\.(.*)$", hf)
        return f"blk.{m.group(1)}.{simple[m.group(2)]}"

    experts = {}
    for hf in sorted(w, key=lambda n: [int(x) if x.isdigit() else x for x in re.split(r"(\d+)", n)]):
        t = w[hf]
        m = re.match(r"model\.layers\.(\d+)\.mlp\.experts\.(.*)$", hf)
        if m:
            layer, rest = int(m.group(1)), m.group(2)
            if rest == "gate_up_proj":
                n_ff = t.shape[1] // 2
                out.append((f"blk.{layer}.ffn_gate_exps.weight", np.ascontiguousarray(t[:, :n_ff])))
                out.append((f"blk.{layer}.ffn_up_exps.weight", np.ascontiguousarray(t[:, n_ff:])))
            elif rest == "down_proj":
                out.append((f"blk.{layer}.ffn_down_exps.weight", t))
            else:
                e, kind = re.match(r"(\d+)\.(\w+)_proj\.weight", rest).groups()
                experts.setdefault(layer, {}).setdefault(kind, {})[int(e)] = t
            continue
        if arch == "llama" and hf.endswith("q_proj.weight"):
            t = permute(t, heads)
        if arch == "llama" and hf.endswith("k_proj.weight"):
            t = permute(t, kv)
        if hybrid:
            if tiled and "linear_attn." in hf:
                if ".in_proj_qkv." in hf:
                    qk = 2 * hk * dk
                    t = np.concatenate([t[:qk], reorder_v_heads(t[qk:], 0, hk, r, dv)], 0)
                elif ".in_proj_z." in hf:
                    t = reorder_v_heads(t, 0, hk, r, dv)
                elif ".in_proj_b." in hf or ".in_proj_a." in hf:
                    t = reorder_v_heads(t, 0, hk, r, 1)
                elif ".A_log" in hf or ".dt_bias" in hf:
                    t = reorder_v_heads(t[:, None], 0, hk, r, 1)[:, 0]
                elif ".conv1d" in hf:
                    t = t.squeeze()
                    qk = 2 * hk * dk
                    t = np.concatenate([t[:qk], reorder_v_heads(t[qk:], 0, hk, r, dv)], 0)
                elif ".out_proj." in hf:
                    t = reorder_v_heads(t, 1, hk, r, dv)
            if hf.endswith(".A_log"):
                t = -np.exp(t)
            elif "conv1d" in hf:
                t = t.squeeze()
            elif hf.endswith("norm.weight") and not hf.endswith("linear_attn.norm.weight"):
                t = t + np.float32(1)
            if "in_proj_qkvz.weight" in hf:
                layer = int(re.match(r"model\.layers\.(\d+)", hf).group(1))
                split = [dk, dk, r * dv, r * dv]
                x = t.T.reshape(-1, hk, sum(split))
                q, k, v, z = np.split(x, np.cumsum(split)[:-1], axis=-1)
                H = cfg["hidden_size"]
                q, k, v, z = (np.ascontiguousarray(a).reshape(H, -1) for a in (q, k, v, z))
                out.append((f"blk.{layer}.attn_qkv.weight", np.ascontiguousarray(np.concatenate([q, k, v], -1).T)))
                out.append((f"blk.{layer}.attn_gate.weight", np.ascontiguousarray(z.T)))
                continue
        out.append((name_of(hf), np.ascontiguousarray(t)))
    for layer, kinds in sorted(experts.items()):
        for kind in ("down", "gate", "up"):
            stack = np.stack([kinds[kind][e] for e in sorted(kinds[kind])], 0)
            out.append((f"blk.{layer}.ffn_{kind}_exps.weight", stack))
    return out


def llama3_rope_freqs(cfg):
    rp = cfg.get("rope_parameters") or cfg.get("rope_scaling") or {}
    if rp.get("rope_type", rp.get("type")) != "llama3":
        return None
    base = rp.get("rope_theta", cfg.get("rope_theta", 10000.0))
    dim = cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"]
    freqs = 1.0 / (base ** (np.arange(0, dim, 2, dtype=np.float32) / dim))
    factor, low, high = rp.get("factor", 8.0), rp.get("low_freq_factor", 1.0), rp.get("high_freq_factor", 4.0)
    old = rp.get("original_max_position_embeddings", 8192)
    lw, hw = old / low, old / high
    out = []
    for f in freqs:
        wl = 2 * np.pi / f
        if wl < hw:
            out.append(1)
        elif wl > lw:
            out.append(factor)
        else:
            s = (old / wl - low) / (high - low)
            out.append(1 / ((1 - s) / factor + s))
    return np.array(out, dtype=np.float32)


def write_gguf(gguf, family, cfg, tensors, path, outtype, split_max_tensors=0):
    arch = ARCH[cfg["model_type"]]
    GT = gguf.GGMLQuantizationType
    ftype = {"f32": 0, "f16": 1, "bf16": 32, "q8_0": 7, "q4_0": 2}[outtype]
    w = gguf.GGUFWriter(path, arch, split_max_tensors=split_max_tensors)
    w.add_type("model")
    w.add_name(f"ferrite-tiny-{family}")
    L = cfg["num_hidden_layers"]
    w.add_block_count(L)
    w.add_context_length(cfg["max_position_embeddings"])
    w.add_embedding_length(cfg["hidden_size"])
    if "intermediate_size" in cfg:
        w.add_feed_forward_length(cfg["intermediate_size"])
    w.add_head_count(cfg["num_attention_heads"])
    w.add_head_count_kv(cfg.get("num_key_value_heads", cfg["num_attention_heads"]))
    rp = cfg.get("rope_parameters") or {}
    w.add_rope_freq_base(rp.get("rope_theta", cfg.get("rope_theta", 10000.0)))
    w.add_layer_norm_rms_eps(cfg["rms_norm_eps"])
    n_experts = next((cfg[k] for k in ("num_local_experts", "num_experts", "n_routed_experts") if k in cfg), None)
    if n_experts is not None:
        w.add_expert_count(n_experts)
        w.add_expert_used_count(cfg["num_experts_per_tok"])
    if "head_dim" in cfg:
        w.add_key_length(cfg["head_dim"])
        w.add_value_length(cfg["head_dim"])
    w.add_file_type(ftype)
    hd = cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"]
    if arch == "llama":
        w.add_vocab_size(cfg["vocab_size"])
        w.add_rope_dimension_count(hd)
    if "moe_intermediate_size" in cfg:
        w.add_expert_feed_forward_length(cfg["moe_intermediate_size"])
    if "shared_expert_intermediate_size" in cfg:
        w.add_expert_shared_feed_forward_length(cfg["shared_expert_intermediate_size"])
    if arch in ("qwen3next", "qwen35", "qwen35moe"):
        w.add_ssm_conv_kernel(cfg["linear_conv_kernel_dim"])
        w.add_ssm_state_size(cfg["linear_key_head_dim"])
        w.add_ssm_group_count(cfg["linear_num_key_heads"])
        w.add_ssm_time_step_rank(cfg["linear_num_value_heads"])
        w.add_ssm_inner_size(cfg["linear_value_head_dim"] * cfg["linear_num_value_heads"])
        w.add_full_attention_interval(cfg.get("full_attention_interval", 4))
        prf = rp.get("partial_rotary_factor", cfg.get("partial_rotary_factor", 0.25))
        w.add_rope_dimension_count(int(hd * prf))
    if arch in ("qwen35", "qwen35moe"):
        sec = list(rp.get("mrope_section", [11, 11, 10]))
        w.add_rope_dimension_sections((sec + [0, 0, 0, 0])[:4])
    # Tokenizer.
    V = cfg["vocab_size"]
    if arch == "llama":
        tokens, types, scores = spm_vocab(V)
        w.add_tokenizer_model("llama")
        w.add_tokenizer_pre("default")
        w.add_token_list(tokens)
        w.add_token_scores(scores)
        w.add_token_types(types)
        w.add_bos_token_id(1)
        w.add_eos_token_id(2)
        w.add_unk_token_id(0)
        w.add_add_bos_token(True)
        w.add_add_eos_token(False)
    else:
        tokens, types, merges = gpt2_vocab(V)
        w.add_tokenizer_model("gpt2")
        w.add_tokenizer_pre("qwen35" if arch.startswith("qwen35") else "qwen2")
        w.add_token_list(tokens)
        w.add_token_types(types)
        w.add_token_merges(merges)
        w.add_eos_token_id(2)
        w.add_pad_token_id(0)
        w.add_bos_token_id(0)
        w.add_add_bos_token(False)
    w.add_chat_template(CHATML)
    # Tensors, with the converter's dtype rules.
    f32_names = ("ffn_gate_inp.weight", "ffn_gate_inp_shexp.weight", "ssm_conv1d.weight")
    extra = []
    freqs = llama3_rope_freqs(cfg)
    if freqs is not None:
        extra.append(("rope_freqs.weight", freqs))
    for name, t in extra + tensors:
        t = t.astype(np.float32)
        if outtype == "f32" or t.ndim <= 1 or name.endswith("_norm.weight") or \
                name.endswith(f32_names) or not name.endswith(".weight"):
            w.add_tensor(name, t, raw_dtype=GT.F32)
        elif outtype == "f16":
            w.add_tensor(name, t.astype(np.float16), raw_dtype=GT.F16)
        elif outtype in ("q8_0", "q4_0"):
            # The converter's --outtype q8_0 (gguf-py's quantizer, bitwise ggml's
            # reference); q4_0 the same way, all matrices (llama-quantize would
            # keep the output head in q6_k / q8_0).
            qt = GT.Q8_0 if outtype == "q8_0" else GT.Q4_0
            try:
                w.add_tensor(name, gguf.quants.quantize(t, qt), raw_dtype=qt)
            except gguf.QuantError:
                w.add_tensor(name, t.astype(np.float16), raw_dtype=GT.F16)
        else:
            w.add_tensor(name, gguf.quants.quantize(t, GT.BF16), raw_dtype=GT.BF16)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


# Wider twins for the block formats: every row a whole number of 256-element
# K-quant blocks (the tiny models' 64-wide rows only fit 32-element blocks, and
# llama-quantize falls back to other types for them). Random weights as
# make_golden_models.py draws them; goldens come from transformers on the
# dequantized weights (scripts/make_gguf_goldens.py, GPU machine).
WIDE = {
    "qwen3w": {"model_type": "qwen3", "vocab_size": 512, "hidden_size": 256, "num_hidden_layers": 2,
               "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 64,
               "intermediate_size": 256, "max_position_embeddings": 4096, "rms_norm_eps": 1e-6,
               "rope_theta": 10000.0, "tie_word_embeddings": True},
    "qwen3moew": {"model_type": "qwen3_moe", "vocab_size": 512, "hidden_size": 256,
                  "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
                  "head_dim": 64, "intermediate_size": 256, "moe_intermediate_size": 256,
                  "num_experts": 4, "num_experts_per_tok": 2, "norm_topk_prob": True,
                  "max_position_embeddings": 4096, "rms_norm_eps": 1e-6, "rope_theta": 10000.0,
                  "tie_word_embeddings": False},
}


def wide_weights(cfg, seed):
    rng = np.random.default_rng(seed)
    H, V, L = cfg["hidden_size"], cfg["vocab_size"], cfg["num_hidden_layers"]
    hd, nh, nkv = cfg["head_dim"], cfg["num_attention_heads"], cfg["num_key_value_heads"]

    def mat(o, i):
        return (rng.standard_normal((o, i)) / np.sqrt(i)).astype(np.float32)

    def norm(n):
        return (1 + 0.1 * rng.standard_normal(n)).astype(np.float32)

    w = {"model.embed_tokens.weight": rng.standard_normal((V, H)).astype(np.float32)}
    for l in range(L):
        p = f"model.layers.{l}."
        w[p + "input_layernorm.weight"] = norm(H)
        w[p + "post_attention_layernorm.weight"] = norm(H)
        w[p + "self_attn.q_proj.weight"] = mat(nh * hd, H)
        w[p + "self_attn.k_proj.weight"] = mat(nkv * hd, H)
        w[p + "self_attn.v_proj.weight"] = mat(nkv * hd, H)
        w[p + "self_attn.o_proj.weight"] = mat(H, nh * hd)
        w[p + "self_attn.q_norm.weight"] = norm(hd)
        w[p + "self_attn.k_norm.weight"] = norm(hd)
        if "num_experts" in cfg:
            I = cfg["moe_intermediate_size"]
            w[p + "mlp.gate.weight"] = mat(cfg["num_experts"], H)
            for e in range(cfg["num_experts"]):
                w[p + f"mlp.experts.{e}.gate_proj.weight"] = mat(I, H)
                w[p + f"mlp.experts.{e}.up_proj.weight"] = mat(I, H)
                w[p + f"mlp.experts.{e}.down_proj.weight"] = mat(H, I)
        else:
            I = cfg["intermediate_size"]
            w[p + "mlp.gate_proj.weight"] = mat(I, H)
            w[p + "mlp.up_proj.weight"] = mat(I, H)
            w[p + "mlp.down_proj.weight"] = mat(H, I)
    # Logits of std ~5: the final norm scales hidden states of rms 1 against
    # (tied or untied) head rows of norm ~sqrt(H) (embedding) or ~1 (lm_head).
    head_scale = 1.0 if cfg["tie_word_embeddings"] else np.sqrt(H)
    w["model.norm.weight"] = (norm(H) * 5 / np.sqrt(H) * head_scale).astype(np.float32)
    if not cfg["tie_word_embeddings"]:
        w["lm_head.weight"] = mat(V, H)
    # bf16 values, as the tiny checkpoints.
    return {k: ((v.view(np.uint32) + 0x8000) & 0xffff0000).view(np.float32) for k, v in w.items()}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gguf-py", required=True, help="llama.cpp's gguf-py folder (peer bundle)")
    ap.add_argument("--models", default=os.path.join(os.path.dirname(__file__), "..", "tests", "models"))
    ap.add_argument("--out", required=True)
    ap.add_argument("--families", nargs="*", default=FAMILIES)
    ap.add_argument("--wide", action="store_true",
                    help="write the wide twins (WIDE) as f16 GGUF + config.json instead")
    args = ap.parse_args()
    sys.path.insert(0, args.gguf_py)
    import gguf  # noqa: E402
    os.makedirs(args.out, exist_ok=True)
    if args.wide:
        for i, (name, cfg) in enumerate(WIDE.items()):
            tensors = convert_tensors(cfg, ARCH[cfg["model_type"]], wide_weights(cfg, 4242 + i))
            for outtype in ("f16", "q8_0", "q4_0"):
                write_gguf(gguf, name, cfg, tensors, os.path.join(args.out, f"{name}-{outtype}.gguf"),
                           outtype)
            with open(os.path.join(args.out, f"{name}.config.json"), "w") as f:
                json.dump(cfg, f, indent=1)
            print("wrote", name)
        return
    for family in args.families:
        d = os.path.join(args.models, family)
        cfg = json.load(open(os.path.join(d, "config.json")))
        weights = read_safetensors(os.path.join(d, "model.safetensors"))
        tensors = convert_tensors(cfg, ARCH[cfg["model_type"]], weights)
        for outtype in ("f32", "f16"):
            path = os.path.join(args.out, f"{family}-{outtype}.gguf")
            write_gguf(gguf, family, cfg, tensors, path, outtype)
            print("wrote", path)
        if family == "qwen3":
            write_gguf(gguf, family, cfg, tensors, os.path.join(args.out, "qwen3-bf16.gguf"), "bf16")
            write_gguf(gguf, family, cfg, tensors, os.path.join(args.out, "qwen3-split.gguf"), "f32",
                       split_max_tensors=10)
            print("wrote bf16 and split")


if __name__ == "__main__":
    main()
