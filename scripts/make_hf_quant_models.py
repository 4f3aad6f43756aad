#!/usr/bin/python3
"""Tiny quantized Hugging Face checkpoints for Ferrite's tests (issue 13).

    /usr/bin/python3 scripts/make_hf_quant_models.py tests/models/hf_quant

For each (family, format) below this writes two checkpoint folders:

  <name>/        the quantized checkpoint as the real tool writes it: tensor
                 names, packing order, dtypes and config.json's
                 quantization_config (FP8 as Qwen's / DeepSeek's fp8 block
                 checkpoints and transformers' finegrained-fp8 store them,
                 compressed-tensors as llm-compressor's FP8_DYNAMIC / W4A16
                 presets, GPTQ as AutoGPTQ / GPTQModel pack it (v1 zeros:
                 stored zero - 1), AWQ as AutoAWQ's GEMM layout);
  <name>-deq/    the oracle: the same model with every quantized module
                 dequantized by the independent numpy code of this script
                 (dequantize_* below, which follows the tools' own unpacking:
                 AutoGPTQ's `zeros + 1`, AutoAWQ's reverse order, compressed-
                 tensors' unpack_from_int32), as a plain bf16 checkpoint.

Weights are random (no calibration: GPTQ's Hessian updates change which codes
are chosen, not how they are stored). The scales are rounded up to 4
significant bits (still ordinary f32 / f16 / bf16 values), so every
dequantized weight (an e4m3 value or a code difference of at most 5 bits,
times the scale) is exact in bf16 and the oracle stays small and exact.

The test (tests/models/hf_quant_test.cc) checks that Ferrite on <name> gives
the same greedy tokens and logits as Ferrite on <name>-deq; Ferrite's f32 path
on plain bf16 checkpoints is exact to transformers (tests/models goldens), so
the chain is: transformers == Ferrite(bf16) on the oracle == Ferrite on the
quantized checkpoint.

numpy only; no safetensors package (the format is written by hand: an 8-byte
header length, a JSON header, raw little-endian bytes).
"""
import argparse
import json
import math
import os
import struct
import sys
import zlib

import numpy as np

# --- safetensors ------------------------------------------------------------

ST_DTYPES = {"F32": np.float32, "F16": np.float16, "I32": np.int32, "I64": np.int64}


def write_safetensors(path, tensors):
    """tensors: name -> (st_dtype, shape, bytes)."""
    header, off, blobs = {}, 0, []
    for name in sorted(tensors):
        dt, shape, data = tensors[name]
        header[name] = {"dtype": dt, "shape": list(shape), "data_offsets": [off, off + len(data)]}
        off += len(data)
        blobs.append(data)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


def read_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        b, end = e["data_offsets"]
        out[name] = (e["dtype"], tuple(e["shape"]), data[b:end])
    return out


def bf16_bytes(x):
    """f32 array -> bf16 bytes (round to nearest even)."""
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    u = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
    return u.astype(np.uint16).tobytes()


def bf16_round(x):
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    u = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16) << 16
    return u.astype(np.uint32).view(np.float32)


def from_bf16_bytes(b, shape):
    return (np.frombuffer(b, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32).reshape(shape)


def tensor_f32(entry):
    dt, shape, b = entry
    if dt == "BF16":
        return from_bf16_bytes(b, shape)
    return np.frombuffer(b, dtype=ST_DTYPES[dt]).astype(np.float32).reshape(shape)


# --- e4m3fn -----------------------------------------------------------------

def e4m3_values():
    v = np.zeros(256, dtype=np.float32)
    for c in range(256):
        s, e, m = c >> 7, (c >> 3) & 15, c & 7
        if e == 15 and m == 7:
            x = np.nan
        elif e == 0:
            x = m / 8.0 * 2.0 ** -6
        else:
            x = (1 + m / 8.0) * 2.0 ** (e - 7)
        v[c] = -x if s else x
    return v


E4M3 = e4m3_values()
POS_CODES = np.arange(127)  # 0 .. 0x7e: the finite magnitudes, increasing


def to_e4m3(x):
    """f32 -> e4m3fn codes, round to nearest even, saturated (torch's cast of a clamped value)."""
    x = np.clip(x, -448.0, 448.0).astype(np.float32)
    a = np.abs(x)
    mags = E4M3[POS_CODES]
    hi = np.clip(np.searchsorted(mags, a), 1, 126)
    lo = hi - 1
    dlo, dhi = a - mags[lo], mags[hi] - a
    pick = np.where(dlo < dhi, lo, np.where(dhi < dlo, hi, np.where(lo % 2 == 0, lo, hi)))
    return (pick | np.where(np.signbit(x), 0x80, 0)).astype(np.uint8)


def round_up_4bits(s):
    """Scales rounded up to 4 significant bits (see the module docstring)."""
    s = np.maximum(np.asarray(s, dtype=np.float64), 1e-8)
    e = np.floor(np.log2(s)) - 3
    return (np.ceil(s / 2.0 ** e) * 2.0 ** e).astype(np.float32)


# --- quantizers (as the tools) and packers ------------------------------------

def quant_fp8_block(w, block=128):
    """Qwen / DeepSeek fp8 block: per [128, 128] block scale = amax / 448,
    weight_scale_inv = scale (f32), weight = (w / scale) in e4m3."""
    out, inn = w.shape
    gr, gc = math.ceil(out / block), math.ceil(inn / block)
    s = np.zeros((gr, gc), np.float32)
    for i in range(gr):
        for j in range(gc):
            s[i, j] = np.abs(w[i * block:(i + 1) * block, j * block:(j + 1) * block]).max() / 448.0
    s = round_up_4bits(s)
    full = np.repeat(np.repeat(s, block, 0), block, 1)[:out, :inn]
    return to_e4m3(w / full), s


def quant_fp8_channel(w):
    """compressed-tensors FP8_DYNAMIC: per output channel, weight_scale [out, 1] (bf16)."""
    s = round_up_4bits(np.abs(w).max(axis=1, keepdims=True) / 448.0)
    s = bf16_round(s)  # 4 significant bits: exact in bf16
    return to_e4m3(w / s), s


def minmax_asym(wg, maxq=15):
    lo = np.minimum(wg.min(axis=-1), 0)
    hi = np.maximum(wg.max(axis=-1), 0)
    scale = round_up_4bits((hi - lo) / maxq)
    zero = np.clip(np.round(-lo / scale), 0, maxq)
    return scale, zero


def quant_groups_act_order(w, group, sym, perm):
    """GPTQ with desc_act (act-order, static_groups off): the columns are
    quantized in the order perm (GPTQ's by decreasing Hessian diagonal; here a
    fixed random one) and the groups are runs of `group` columns of that order,
    so a group's columns are scattered: g_idx[perm[j]] = j // group. Returns
    codes [out, in] in the original column order, scales, zeros, g_idx."""
    codes_p, scales, zeros = quant_groups(w[:, perm], group, sym)
    codes = np.empty_like(codes_p)
    codes[:, perm] = codes_p
    g_idx = np.empty(w.shape[1], np.int32)
    g_idx[perm] = (np.arange(w.shape[1]) // group).astype(np.int32)
    return codes, scales, zeros, g_idx


def quant_groups(w, group, sym, zero_one_in=None):
    """GPTQ's quantizer (RTN per group): sym -> scale = 2 max|w| / 15, zero 8;
    asym -> scale = (max - min) / 15, zero = round(-min / scale).
    Returns codes [out, in] (0..15), scales [G, out], zeros [G, out]."""
    out, inn = w.shape
    g = inn if group < 0 else group
    G = math.ceil(inn / g)
    codes = np.zeros((out, inn), np.int64)
    scales = np.zeros((G, out), np.float32)
    zeros = np.zeros((G, out), np.int64)
    for k in range(G):
        wg = w[:, k * g:(k + 1) * g]
        if sym:
            s = round_up_4bits(2 * np.abs(wg).max(axis=1) / 15)
            z = np.full(out, 8)
        else:
            s, z = minmax_asym(wg)
            z = z.astype(np.int64)
        if zero_one_in is not None and k == 0:
            z[::zero_one_in] = 0  # a zero of 0: GPTQ v1 stores -1 (read back as 16)
        scales[k], zeros[k] = s, z
        codes[:, k * g:(k + 1) * g] = np.clip(np.round(wg / s[:, None]) + z[:, None], 0, 15)
    return codes, scales.astype(np.float16).astype(np.float32), zeros


def pack_gptq(codes, scales, zeros, group, bits=4, g_idx=None):
    """AutoGPTQ's QuantLinear.pack: qweight [in/8, out] packs 8 input rows per
    int32 (row 8r + j at bits 4j); qzeros [G, out/8] packs zeros - 1 along the
    output; g_idx [in] the group of each input column (act-order: given)."""
    out, inn = codes.shape
    iw = codes.T.astype(np.uint32)  # [in, out]
    qweight = np.zeros((inn // 8, out), np.uint32)
    for j in range(8):
        qweight |= iw[j::8] << np.uint32(4 * j)
    # zeros - 1 in 4 bits (a zero of 0 is stored as 15 and read back as 16:
    # the v1 format's off-by-one, kept as GPTQModel writes it).
    z = ((zeros - 1) & 15).astype(np.uint32)
    qzeros = np.zeros((z.shape[0], out // 8), np.uint32)
    for j in range(8):
        qzeros |= z[:, j::8] << np.uint32(4 * j)
    if g_idx is None:
        g_idx = (np.arange(inn) // (inn if group < 0 else group)).astype(np.int32)
    return {"qweight": ("I32", qweight.shape, qweight.view(np.int32).tobytes()),
            "qzeros": ("I32", qzeros.shape, qzeros.view(np.int32).tobytes()),
            "scales": ("F16", scales.shape, scales.astype(np.float16).tobytes()),
            "g_idx": ("I32", g_idx.shape, g_idx.tobytes())}


AWQ_ORDER = [0, 2, 4, 6, 1, 3, 5, 7]
AWQ_REVERSE_ORDER = [0, 4, 1, 5, 2, 6, 3, 7]


def pack_awq(codes, scales, zeros):
    """AutoAWQ's WQLinear_GEMM.from_linear: intweight [in, out]; qweight
    [in, out/8], word col holds columns 8 col + order_map[i] at bits 4i;
    qzeros [G, out/8] the same; scales [G, out] f16."""
    out, inn = codes.shape
    iw = codes.T.astype(np.uint32)
    qweight = np.zeros((inn, out // 8), np.uint32)
    for i in range(8):
        qweight |= iw[:, AWQ_ORDER[i]::8] << np.uint32(4 * i)
    z = zeros.astype(np.uint32)
    qzeros = np.zeros((z.shape[0], out // 8), np.uint32)
    for i in range(8):
        qzeros |= z[:, AWQ_ORDER[i]::8] << np.uint32(4 * i)
    return {"qweight": ("I32", qweight.shape, qweight.view(np.int32).tobytes()),
            "qzeros": ("I32", qzeros.shape, qzeros.view(np.int32).tobytes()),
            "scales": ("F16", scales.shape, scales.astype(np.float16).tobytes())}


def pack_ct_int4(w, group, sym, perm=None):
    """compressed-tensors W4A16 (pack-quantized): signed codes in [-8, 7]
    (sym: scale = max|w| / 7.5, zero 0; asym: scale = (max - min) / 15,
    zero = -8 - round(min / scale)), pack_to_int32 with offset 8 along the
    input (weight_packed [out, in/8]); zero points packed along the output
    (weight_zero_point [out/8, G]); weight_scale [out, G] bf16. With perm
    (actorder "group"): the groups are runs of the columns in that order and
    weight_g_idx [in] names each column's group."""
    if perm is not None:
        t = pack_ct_int4(w[:, perm], group, sym)
        wp = np.frombuffer(t["weight_packed"][2], np.uint32).reshape(t["weight_packed"][1])
        shifts = np.arange(0, 32, 4, dtype=np.uint32)
        q_p = ((wp[:, :, None] >> shifts[None, None, :]) & 15).reshape(w.shape[0], -1)
        q = np.empty_like(q_p)
        q[:, perm] = q_p
        packed = np.zeros_like(wp)
        for i in range(8):
            packed |= q[:, i::8].astype(np.uint32) << np.uint32(4 * i)
        t["weight_packed"] = ("I32", packed.shape, packed.view(np.int32).tobytes())
        g_idx = np.empty(w.shape[1], np.int32)
        g_idx[perm] = (np.arange(w.shape[1]) // group).astype(np.int32)
        t["weight_g_idx"] = ("I32", g_idx.shape, g_idx.tobytes())
        return t
    out, inn = w.shape
    g = inn if group < 0 else group
    G = math.ceil(inn / g)
    q = np.zeros((out, inn), np.int64)
    sc = np.zeros((out, G), np.float32)
    zp = np.zeros((out, G), np.int64)
    for k in range(G):
        wg = w[:, k * g:(k + 1) * g]
        if sym:
            s = bf16_round(round_up_4bits(np.abs(wg).max(axis=1) / 7.5))
            z = np.zeros(out, np.int64)
        else:
            lo, hi = np.minimum(wg.min(axis=1), 0), np.maximum(wg.max(axis=1), 0)
            s = bf16_round(round_up_4bits((hi - lo) / 15))
            z = np.clip(-8 - np.round(lo / s), -8, 7).astype(np.int64)
        sc[:, k], zp[:, k] = s, z
        q[:, k * g:(k + 1) * g] = np.clip(np.round(wg / s[:, None]) + z[:, None], -8, 7)
    u = (q + 8).astype(np.uint32)
    packed = np.zeros((out, inn // 8), np.uint32)
    for i in range(8):
        packed |= u[:, i::8] << np.uint32(4 * i)
    t = {"weight_packed": ("I32", packed.shape, packed.view(np.int32).tobytes()),
         "weight_scale": ("BF16", sc.shape, bf16_bytes(sc)),
         "weight_shape": ("I64", (2,), np.array([out, inn], np.int64).tobytes())}
    if not sym:
        zu = (zp + 8).astype(np.uint32)
        zpk = np.zeros((math.ceil(out / 8), G), np.uint32)
        for i in range(8):
            zpk |= zu[i::8, :] << np.uint32(4 * i)
        t["weight_zero_point"] = ("I32", zpk.shape, zpk.view(np.int32).tobytes())
    return t


# --- the oracle: dequantization as the tools unpack ----------------------------

def i32(entry):
    dt, shape, b = entry
    assert dt == "I32", dt
    return np.frombuffer(b, dtype=np.int32).reshape(shape).view(np.uint32)


def dequantize_fp8(t, m):
    w = E4M3[np.frombuffer(t[m + ".weight"][2], np.uint8)].reshape(t[m + ".weight"][1])
    key = m + ".weight_scale_inv" if m + ".weight_scale_inv" in t else m + ".weight_scale"
    s = tensor_f32(t[key])
    out, inn = w.shape
    if s.size == 1:
        full = np.full((out, inn), s.reshape(-1)[0], np.float32)
    elif s.shape == (out, 1):
        full = np.repeat(s, inn, 1)
    else:
        br, bc = math.ceil(out / s.shape[0]), math.ceil(inn / s.shape[1])
        full = np.repeat(np.repeat(s, br, 0), bc, 1)[:out, :inn]
    return (w * full).astype(np.float32)


def dequantize_gptq(t, m, v1=True):
    """AutoGPTQ: weight = (qweight >> wf) & 15, zeros = ((qzeros >> wf) & 15) + 1,
    W = scales[g_idx] * (weight - zeros[g_idx]), transposed to [out, in]."""
    qw, qz = i32(t[m + ".qweight"]), i32(t[m + ".qzeros"])
    sc = tensor_f32(t[m + ".scales"])
    g_idx = np.frombuffer(t[m + ".g_idx"][2], np.int32)
    shifts = np.arange(0, 32, 4, dtype=np.uint32)
    w = ((qw[:, None, :] >> shifts[None, :, None]) & 15).reshape(-1, qw.shape[1])  # [in, out]
    z = ((qz[:, :, None] >> shifts[None, None, :]) & 15).reshape(qz.shape[0], -1)  # [G, out]
    if v1:
        z = z + 1
    W = sc[g_idx] * (w.astype(np.float32) - z[g_idx].astype(np.float32))
    return W.T.astype(np.float32)


def dequantize_awq(t, m):
    """AutoAWQ: iweight = (qweight >> shifts) & 15 reordered by AWQ_REVERSE_ORDER,
    W = (iweight - izeros) * scales, transposed to [out, in]."""
    qw, qz = i32(t[m + ".qweight"]), i32(t[m + ".qzeros"])
    sc = tensor_f32(t[m + ".scales"])
    shifts = np.arange(0, 32, 4, dtype=np.uint32)

    def unpack(x):
        u = (x[:, :, None] >> shifts[None, None, :]) & 15  # [rows, words, 8]
        u = u[:, :, AWQ_REVERSE_ORDER]
        return u.reshape(x.shape[0], -1)

    iw, iz = unpack(qw), unpack(qz)  # [in, out], [G, out]
    group = iw.shape[0] // iz.shape[0]
    W = (iw.astype(np.float32) - np.repeat(iz, group, 0).astype(np.float32)) * np.repeat(sc, group, 0)
    return W.T.astype(np.float32)


def dequantize_ct_int4(t, m):
    """compressed-tensors: unpack_from_int32 (minus the offset 8), zero points
    unpacked along dim 0, W = (q - zp) * scale."""
    wp = i32(t[m + ".weight_packed"])
    out, inn = np.frombuffer(t[m + ".weight_shape"][2], np.int64)
    sc = tensor_f32(t[m + ".weight_scale"])
    shifts = np.arange(0, 32, 4, dtype=np.uint32)
    q = ((wp[:, :, None] >> shifts[None, None, :]) & 15).reshape(out, -1)[:, :inn].astype(np.int64) - 8
    G = sc.shape[1]
    if m + ".weight_zero_point" in t:
        zpk = i32(t[m + ".weight_zero_point"])
        zp = ((zpk[:, None, :] >> shifts[None, :, None]) & 15).reshape(-1, G)[:out].astype(np.int64) - 8
    else:
        zp = np.zeros((out, G), np.int64)
    if m + ".weight_g_idx" in t:  # actorder "group": each column's group
        g_idx = np.frombuffer(t[m + ".weight_g_idx"][2], np.int32)
        return ((q - zp[:, g_idx]).astype(np.float32) * sc[:, g_idx]).astype(np.float32)
    group = inn // G
    return ((q - np.repeat(zp, group, 1)).astype(np.float32) * np.repeat(sc, group, 1)).astype(np.float32)


# --- the tiny wide models ----------------------------------------------------

H, V, NH, NKV, HD, I, IM, E, IS = 128, 128, 4, 2, 32, 128, 128, 3, 128
HK, DK, HV, DV, KC = 2, 32, 4, 32, 4


def family_config(family, layers, experts=None):
    """config.json of a wide twin: the family's tiny config (tests/models) with
    rows of whole 128-element blocks (hidden 128, MLPs 128, head_dim 32)."""
    here = os.path.dirname(os.path.abspath(__file__))
    with open(os.path.join(here, "..", "tests", "models", family, "config.json")) as f:
        c = json.load(f)
    c.update(hidden_size=H, vocab_size=V, num_attention_heads=NH, num_key_value_heads=NKV,
             head_dim=HD, intermediate_size=I, num_hidden_layers=len(layers))
    if "moe_intermediate_size" in c:
        c["moe_intermediate_size"] = IM
        c["num_experts_per_tok"] = 2
        for k in ("num_experts", "num_local_experts"):
            if k in c:
                c[k] = experts or E
    if "shared_expert_intermediate_size" in c:
        c["shared_expert_intermediate_size"] = IS
    if "linear_num_key_heads" in c:
        c.update(linear_num_key_heads=HK, linear_key_head_dim=DK, linear_num_value_heads=HV,
                 linear_value_head_dim=DV, linear_conv_kernel_dim=KC)
        c["layer_types"] = layers
        c["full_attention_interval"] = 2
    if "layer_types" in c and "linear_num_key_heads" not in c:
        c["layer_types"] = ["full_attention"] * len(layers)
    if "mlp_only_layers" in c:
        c["mlp_only_layers"] = [i for i, l in enumerate(layers) if l.endswith("+dense")]
    if "layer_types" in c:
        c["layer_types"] = [l.split("+")[0] for l in c["layer_types"]]
    c.pop("transformers_version", None)
    return c


def model_tensors(family, c, rng):
    """name -> f32 array, the names and shapes transformers saves."""
    t = {}

    def mat(name, out, inn, std=None):
        t[name] = (rng.standard_normal((out, inn)) * (std or 1 / math.sqrt(inn))).astype(np.float32)

    def vec(name, n, zero_centred=False):
        t[name] = ((0.1 * rng.standard_normal(n)) + (0 if zero_centred else 1)).astype(np.float32)

    hybrid = "linear_num_key_heads" in c
    t["model.embed_tokens.weight"] = rng.standard_normal((V, H)).astype(np.float32)
    vec("model.norm.weight", H, hybrid)
    if not c.get("tie_word_embeddings"):
        mat("lm_head.weight", V, H)
    types = c.get("layer_types") or ["full_attention"] * c["num_hidden_layers"]
    experts = c.get("num_experts") or c.get("num_local_experts") or 0
    for L in range(c["num_hidden_layers"]):
        p = f"model.layers.{L}."
        vec(p + "input_layernorm.weight", H, hybrid)
        vec(p + "post_attention_layernorm.weight", H, hybrid)
        if types[L] == "linear_attention":
            la = p + "linear_attn."
            if family == "qwen3_next":
                mat(la + "in_proj_qkvz.weight", 2 * HK * DK + 2 * HV * DV, H)
                mat(la + "in_proj_ba.weight", 2 * HV, H)
            else:
                mat(la + "in_proj_qkv.weight", 2 * HK * DK + HV * DV, H)
                mat(la + "in_proj_z.weight", HV * DV, H)
                mat(la + "in_proj_b.weight", HV, H)
                mat(la + "in_proj_a.weight", HV, H)
            t[la + "conv1d.weight"] = (0.3 * rng.standard_normal((2 * HK * DK + HV * DV, 1, KC))).astype(np.float32)
            t[la + "A_log"] = np.log(rng.uniform(0.05, 1, HV)).astype(np.float32)
            t[la + "dt_bias"] = (0.5 * rng.standard_normal(HV)).astype(np.float32)
            vec(la + "norm.weight", DV)
            mat(la + "out_proj.weight", H, HV * DV)
        else:
            a = p + "self_attn."
            gated = hybrid
            mat(a + "q_proj.weight", NH * HD * (2 if gated else 1), H)
            mat(a + "k_proj.weight", NKV * HD, H)
            mat(a + "v_proj.weight", NKV * HD, H)
            mat(a + "o_proj.weight", H, NH * HD)
            if family != "llama":
                vec(a + "q_norm.weight", HD, hybrid)
                vec(a + "k_norm.weight", HD, hybrid)
        moe = "moe_intermediate_size" in c and L not in c.get("mlp_only_layers", [])
        m = p + "mlp."
        if moe:
            mat(m + "gate.weight", experts, H)
            for e in range(experts):
                mat(m + f"experts.{e}.gate_proj.weight", IM, H)
                mat(m + f"experts.{e}.up_proj.weight", IM, H)
                mat(m + f"experts.{e}.down_proj.weight", H, IM)
            if "shared_expert_intermediate_size" in c:
                mat(m + "shared_expert.gate_proj.weight", IS, H)
                mat(m + "shared_expert.up_proj.weight", IS, H)
                mat(m + "shared_expert.down_proj.weight", H, IS)
                mat(m + "shared_expert_gate.weight", 1, H)
        else:
            mat(m + "gate_proj.weight", I, H)
            mat(m + "up_proj.weight", I, H)
            mat(m + "down_proj.weight", H, I)
    return {k: bf16_round(v) for k, v in t.items()}


def quantizable(name, shape, skip):
    """The Linear weights the tools quantize: matrices with whole 128-blocks of
    inputs and 8-aligned outputs, minus embeddings, LM head, routers and the
    tool's ignore list."""
    if not name.endswith(".weight") or len(shape) != 2:
        return False
    if "embed_tokens" in name or name.startswith("lm_head") or "norm" in name:
        return False
    if name.endswith("mlp.gate.weight") or "shared_expert_gate" in name:
        return False
    if any(s in name for s in skip):
        return False
    return shape[1] % 128 == 0 and shape[0] % 8 == 0


# name, family, layers, format, options
MODELS = [
    ("qwen3-fp8", "qwen3", ["full_attention"], "fp8", {}),
    ("qwen3-gptq-int4", "qwen3", ["full_attention"], "gptq", {"group": 128, "sym": True}),
    ("qwen3-awq-int4", "qwen3", ["full_attention"], "awq", {"group": 128}),
    ("llama-ct-fp8", "llama", ["full_attention"], "ct-fp8", {}),
    ("llama-ct-w4a16", "llama", ["full_attention"], "ct-int4", {"group": 128, "sym": False}),
    ("llama-gptq-int4-pc", "llama", ["full_attention"], "gptq",
     {"group": -1, "sym": False, "desc_act": True, "zero_one_in": 5}),
    ("qwen3_moe-gptq-int4", "qwen3_moe", ["full_attention", "full_attention+dense"], "gptq",
     {"group": 128, "sym": True}),
    ("qwen3_5-fp8", "qwen3_5", ["linear_attention", "full_attention"], "fp8",
     {"skip": ["in_proj_a", "in_proj_b"]}),
    ("qwen3_5_moe-gptq-int4", "qwen3_5_moe", ["full_attention"], "gptq",
     {"group": 128, "sym": True, "experts": 2}),
    ("qwen3_next-fp8", "qwen3_next", ["linear_attention", "full_attention+dense"], "fp8",
     {"skip": ["in_proj_ba"], "experts": 2}),
    # Act-order: every module's columns quantized in its own random order;
    # hidden 256 and MLPs 384, so that the inputs have 2 and 3 groups.
    ("qwen3-gptq-int4-act", "qwen3", ["full_attention"], "gptq",
     {"group": 128, "sym": False, "desc_act": True, "act_order": True, "H": 256, "I": 384}),
    ("llama-ct-w4a16-act", "llama", ["full_attention"], "ct-int4",
     {"group": 128, "sym": False, "act_order": True, "H": 256, "I": 384}),
    # Act-order MoE: every expert matrix (and the shared expert, the gated
    # delta projections) in its own column order; experts of 256 so that the
    # down projections have 2 groups too (the shared expert's has 1: no
    # permutation, bound beside permuted ones).
    ("qwen3_5_moe-gptq-int4-act", "qwen3_5_moe", ["linear_attention", "full_attention"], "gptq",
     {"group": 128, "sym": False, "desc_act": True, "act_order": True, "experts": 2, "H": 256,
      "IM": 256}),
]


def quant_config(fmt, opts, skipped):
    if fmt == "fp8":
        q = {"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8",
             "weight_block_size": [128, 128]}
        if skipped:
            q["modules_to_not_convert"] = skipped
        return q
    if fmt == "gptq":
        return {"bits": 4, "checkpoint_format": "gptq", "damp_percent": 0.01,
                "desc_act": opts.get("desc_act", False), "group_size": opts["group"],
                "model_file_base_name": "model", "model_name_or_path": None,
                "quant_method": "gptq",
                "static_groups": opts.get("desc_act", False) and not opts.get("act_order", False),
                "sym": opts["sym"], "true_sequential": True}
    if fmt == "awq":
        return {"bits": 4, "group_size": opts["group"], "modules_to_not_convert": None,
                "quant_method": "awq", "version": "gemm", "zero_point": True}
    ignore = ["lm_head"]
    if fmt == "ct-fp8":
        group = {"input_activations": {"actorder": None, "block_structure": None, "dynamic": True,
                                       "group_size": None, "num_bits": 8, "observer": None,
                                       "observer_kwargs": {}, "strategy": "token", "symmetric": True,
                                       "type": "float"},
                 "output_activations": None, "targets": ["Linear"],
                 "weights": {"actorder": None, "block_structure": None, "dynamic": False,
                             "group_size": None, "num_bits": 8, "observer": "minmax",
                             "observer_kwargs": {}, "strategy": "channel", "symmetric": True,
                             "type": "float"}}
        fmt_name = "float-quantized"
    else:
        group = {"input_activations": None, "output_activations": None, "targets": ["Linear"],
                 "weights": {"actorder": "group" if opts.get("act_order") else None,
                             "block_structure": None, "dynamic": False,
                             "group_size": opts["group"], "num_bits": 4, "observer": "minmax",
                             "observer_kwargs": {}, "strategy": "group",
                             "symmetric": opts["sym"], "type": "int"}}
        fmt_name = "pack-quantized"
    return {"config_groups": {"group_0": group}, "format": fmt_name,
            "global_compression_ratio": None, "ignore": ignore, "kv_cache_scheme": None,
            "quant_method": "compressed-tensors", "quantization_status": "compressed"}


def make(out_dir, index, spec):
    global H, I, IM, IS
    name, family, layers, fmt, opts = spec
    dims = (H, I, IM, IS)
    # this model's widths (module constants)
    H, I, IM, IS = (opts.get("H", H), opts.get("I", I), opts.get("IM", IM), opts.get("IS", IS))
    try:
        make_one(out_dir, index, name, family, layers, fmt, opts)
    finally:
        H, I, IM, IS = dims


def make_one(out_dir, index, name, family, layers, fmt, opts):
    rng = np.random.default_rng(1300 + index)
    c = family_config(family, layers, opts.get("experts"))
    w = model_tensors(family, c, rng)
    skip = opts.get("skip", [])
    q_tensors, d_tensors, skipped = {}, {}, []
    for n, x in w.items():
        if not quantizable(n, x.shape, skip):
            q_tensors[n] = ("BF16", x.shape, bf16_bytes(x))
            d_tensors[n] = q_tensors[n]
            if any(s in n for s in skip):
                skipped.append(n[:-len(".weight")])
            continue
        m = n[:-len(".weight")]
        if fmt == "fp8":
            codes, s = quant_fp8_block(x)
            q_tensors[n] = ("F8_E4M3", x.shape, codes.tobytes())
            q_tensors[m + ".weight_scale_inv"] = ("F32", s.shape, s.tobytes())
        elif fmt == "ct-fp8":
            codes, s = quant_fp8_channel(x)
            q_tensors[n] = ("F8_E4M3", x.shape, codes.tobytes())
            q_tensors[m + ".weight_scale"] = ("BF16", s.shape, bf16_bytes(s))
        elif fmt == "gptq" and opts.get("act_order"):
            perm = np.random.default_rng(zlib.crc32(m.encode())).permutation(x.shape[1])
            codes, sc, z, g_idx = quant_groups_act_order(x, opts["group"], opts["sym"], perm)
            for k, v in pack_gptq(codes, sc, z, opts["group"], g_idx=g_idx).items():
                q_tensors[m + "." + k] = v
        elif fmt == "gptq":
            codes, sc, z = quant_groups(x, opts["group"], opts["sym"], opts.get("zero_one_in"))
            for k, v in pack_gptq(codes, sc, z, opts["group"]).items():
                q_tensors[m + "." + k] = v
        elif fmt == "awq":
            codes, sc, z = quant_groups(x, opts["group"], False)
            for k, v in pack_awq(codes, sc, z).items():
                q_tensors[m + "." + k] = v
        elif fmt == "ct-int4":
            perm = (np.random.default_rng(zlib.crc32(m.encode())).permutation(x.shape[1])
                    if opts.get("act_order") else None)
            for k, v in pack_ct_int4(x, opts["group"], opts["sym"], perm).items():
                q_tensors[m + "." + k] = v
        # The oracle: dequantized from the packed tensors, as the tools unpack.
        if fmt in ("fp8", "ct-fp8"):
            deq = dequantize_fp8(q_tensors, m)
        elif fmt == "gptq":
            deq = dequantize_gptq(q_tensors, m)
        elif fmt == "awq":
            deq = dequantize_awq(q_tensors, m)
        else:
            deq = dequantize_ct_int4(q_tensors, m)
        assert np.array_equal(bf16_round(deq), deq), f"{n}: dequantized values not exact in bf16"
        err = np.abs(deq - x).max() / max(np.abs(x).max(), 1e-9)
        if "zero_one_in" not in opts:  # zeros of 0 read back as 16: far off on purpose
            assert err < (0.2 if fmt in ("fp8", "ct-fp8") else 0.5), (n, err)
        d_tensors[n] = ("BF16", x.shape, bf16_bytes(deq))
    qc = dict(c)
    qc["quantization_config"] = quant_config(fmt, opts, sorted(set(skipped)))
    for d, cfg, tensors in ((name, qc, q_tensors), (name + "-deq", c, d_tensors)):
        path = os.path.join(out_dir, d)
        os.makedirs(path, exist_ok=True)
        with open(os.path.join(path, "config.json"), "w") as f:
            json.dump(cfg, f, indent=2, sort_keys=True)
            f.write("\n")
        write_safetensors(os.path.join(path, "model.safetensors"), tensors)
    print(f"{name}: {len(q_tensors)} tensors, "
          f"{os.path.getsize(os.path.join(out_dir, name, 'model.safetensors'))} + "
          f"{os.path.getsize(os.path.join(out_dir, name + '-deq', 'model.safetensors'))} bytes")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out", help="output folder (tests/models/hf_quant)")
    ap.add_argument("--only", nargs="*", help="model names to write")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    for i, spec in enumerate(MODELS):
        if args.only and spec[0] not in args.only:
            continue
        make(args.out, i, spec)


if __name__ == "__main__":
    sys.exit(main())
