#!/usr/bin/env python3
"""Writes the hostile model files of this folder (regression inputs of
tests/formats/hostile_input_test.cc and seed corpus for the fuzzers).

Each file is the smallest form of one hostile input: a tiny valid file with
one value changed. Run from anywhere; it rewrites config/, safetensors/ and
gguf/ next to this script:

    python3 tests/formats/data/hostile/make_hostile.py
"""
import copy
import json
import os
import shutil
import struct

HERE = os.path.dirname(os.path.abspath(__file__))

# ---------------------------------------------------------------------------
# config.json variants

QWEN3 = {
    "model_type": "qwen3", "vocab_size": 512, "hidden_size": 64, "num_hidden_layers": 2,
    "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
    "intermediate_size": 128, "max_position_embeddings": 4096, "rms_norm_eps": 1e-6,
    "rope_parameters": {"rope_theta": 10000.0, "rope_type": "default"},
    "tie_word_embeddings": True, "bos_token_id": 1, "eos_token_id": 2,
}
LLAMA3 = {
    "model_type": "llama", "vocab_size": 512, "hidden_size": 64, "num_hidden_layers": 2,
    "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 128,
    "max_position_embeddings": 4096, "rms_norm_eps": 1e-6,
    "rope_parameters": {"factor": 8.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                        "original_max_position_embeddings": 256, "rope_theta": 10000.0,
                        "rope_type": "llama3"},
}
QWEN3_MOE = {
    "model_type": "qwen3_moe", "vocab_size": 512, "hidden_size": 64, "num_hidden_layers": 2,
    "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
    "intermediate_size": 128, "moe_intermediate_size": 32, "num_local_experts": 8,
    "num_experts_per_tok": 2, "decoder_sparse_step": 1, "mlp_only_layers": [1],
    "norm_topk_prob": True, "rms_norm_eps": 1e-6,
    "rope_parameters": {"rope_theta": 10000.0, "rope_type": "default"},
}
HYBRID = {
    "vocab_size": 512, "hidden_size": 64, "num_hidden_layers": 4, "num_attention_heads": 4,
    "num_key_value_heads": 2, "head_dim": 32, "intermediate_size": 128,
    "layer_types": ["linear_attention", "linear_attention", "linear_attention", "full_attention"],
    "linear_conv_kernel_dim": 4, "linear_key_head_dim": 16, "linear_num_key_heads": 2,
    "linear_num_value_heads": 4, "linear_value_head_dim": 16, "rms_norm_eps": 1e-6,
    "rope_parameters": {"partial_rotary_factor": 0.25, "rope_theta": 10000.0,
                        "rope_type": "default"},
}
QWEN3_NEXT = dict(HYBRID, model_type="qwen3_next", num_experts=8, num_experts_per_tok=2,
                  moe_intermediate_size=32, shared_expert_intermediate_size=48,
                  mlp_only_layers=[])
QWEN3_5_TEXT = dict(HYBRID, model_type="qwen3_5_text")
QWEN3_5_MOE_TEXT = dict(HYBRID, model_type="qwen3_5_moe_text", num_experts=8,
                        num_experts_per_tok=2, moe_intermediate_size=32,
                        shared_expert_intermediate_size=48)
del QWEN3_5_MOE_TEXT["intermediate_size"]


def vl(text):  # a vision-language wrapper, as Qwen3.5 checkpoints nest it
    outer = "qwen3_5_moe" if "moe" in text["model_type"] else "qwen3_5"
    return {"model_type": outer, "text_config": text, "vision_config": {"depth": 2},
            "tie_word_embeddings": False}


def with_(base, path, value):
    c = copy.deepcopy(base)
    node = c
    keys = path.split(".")
    for k in keys[:-1]:
        node = node[k]
    if value is DELETE:
        del node[keys[-1]]
    else:
        node[keys[-1]] = value
    return c


DELETE = object()

CONFIGS = {
    # The cases found by hand (ASan heap-buffer-overflow, length_error,
    # bad_alloc, hang, accepted nonsense).
    "partial_rotary_4.json": with_(QWEN3, "partial_rotary_factor", 4.0),
    "partial_rotary_negative.json": with_(QWEN3, "partial_rotary_factor", -0.5),
    "partial_rotary_zero.json": with_(QWEN3, "partial_rotary_factor", 0),
    "partial_rotary_odd_dim.json": with_(QWEN3, "partial_rotary_factor", 0.3125),  # 16 * 0.3125 = 5
    "partial_rotary_in_rope_parameters.json":
        with_(QWEN3_NEXT, "rope_parameters.partial_rotary_factor", 2.0),
    "layers_2pow32.json": with_(QWEN3, "num_hidden_layers", 4294967296),
    "layers_1025.json": with_(QWEN3, "num_hidden_layers", 1025),
    "text_config_layers_2pow32.json": vl(with_(QWEN3_5_TEXT, "num_hidden_layers", 4294967296)),
    "text_config_hidden_huge.json": vl(with_(QWEN3_5_TEXT, "hidden_size", 1 << 40)),
    "text_config_experts_huge.json": vl(with_(QWEN3_5_MOE_TEXT, "num_experts", 1000000000)),
    "text_config_linear_key_heads_huge.json":
        vl(with_(QWEN3_5_TEXT, "linear_num_key_heads", 1 << 30)),
    "text_config_conv_kernel_huge.json":
        vl(with_(QWEN3_5_TEXT, "linear_conv_kernel_dim", 1 << 40)),
    "rope_theta_negative.json": with_(QWEN3, "rope_parameters.rope_theta", -1e308),
    "rope_theta_zero.json": with_(QWEN3, "rope_parameters.rope_theta", 0),
    "rope_theta_top_level_negative.json":
        with_(with_(QWEN3, "rope_parameters", DELETE), "rope_theta", -1.0),
    # Sizes and their relations.
    "vocab_huge.json": with_(QWEN3, "vocab_size", 1 << 40),
    "vocab_zero.json": with_(QWEN3, "vocab_size", 0),
    "hidden_huge.json": with_(QWEN3, "hidden_size", 1 << 21),
    "heads_zero.json": with_(QWEN3, "num_attention_heads", 0),
    "heads_huge.json": with_(QWEN3, "num_attention_heads", 1 << 20),
    "kv_heads_not_dividing.json": with_(QWEN3, "num_key_value_heads", 3),
    "kv_heads_above_heads.json": with_(QWEN3, "num_key_value_heads", 8),
    "kv_heads_negative.json": with_(QWEN3, "num_key_value_heads", -2),
    "head_dim_huge.json": with_(QWEN3, "head_dim", 1 << 20),
    "heads_times_head_dim_huge.json":
        with_(with_(with_(QWEN3, "num_attention_heads", 4096), "head_dim", 1024),
              "num_key_value_heads", 1),
    "hidden_not_multiple_of_heads.json": with_(LLAMA3, "hidden_size", 66),
    "derived_head_dim_huge.json":
        with_(with_(LLAMA3, "hidden_size", 1 << 20), "num_attention_heads", 2),
    "intermediate_huge.json": with_(QWEN3, "intermediate_size", 1 << 40),
    "intermediate_negative.json": with_(QWEN3, "intermediate_size", -1),
    "intermediate_missing.json": with_(QWEN3, "intermediate_size", DELETE),
    "max_positions_huge.json": with_(QWEN3, "max_position_embeddings", 1 << 40),
    "max_positions_zero.json": with_(QWEN3, "max_position_embeddings", 0),
    "rms_norm_eps_zero.json": with_(QWEN3, "rms_norm_eps", 0),
    "rms_norm_eps_negative.json": with_(QWEN3, "rms_norm_eps", -1e-6),
    "layer_types_short.json": with_(QWEN3, "layer_types", ["full_attention"]),
    "layer_types_long_hybrid.json":
        with_(QWEN3_NEXT, "layer_types", ["linear_attention"] * 4 + ["full_attention"]),
    "layer_types_unknown.json":
        with_(QWEN3_5_TEXT, "layer_types", ["linear_attention"] * 3 + ["sliding_attention"]),
    "eos_outside_vocab.json": with_(QWEN3, "eos_token_id", [2, 512]),
    "eos_negative.json": with_(QWEN3, "eos_token_id", -1),
    "eos_too_many.json": with_(QWEN3, "eos_token_id", [2] * 1025),
    "bos_huge.json": with_(QWEN3, "bos_token_id", 1 << 40),
    # Rope scaling.
    "llama3_equal_freq_factors.json": with_(LLAMA3, "rope_parameters.high_freq_factor", 1.0),
    "llama3_factor_zero.json": with_(LLAMA3, "rope_parameters.factor", 0),
    "llama3_low_freq_negative.json": with_(LLAMA3, "rope_parameters.low_freq_factor", -1.0),
    "llama3_original_positions_zero.json":
        with_(LLAMA3, "rope_parameters.original_max_position_embeddings", 0),
    "llama3_original_positions_huge.json":
        with_(LLAMA3, "rope_parameters.original_max_position_embeddings", 1 << 40),
    "linear_rope_factor_negative.json":
        with_(QWEN3, "rope_parameters", {"rope_type": "linear", "factor": -2.0,
                                         "rope_theta": 10000.0}),
    # Experts.
    "experts_huge.json": with_(QWEN3_MOE, "num_local_experts", 1 << 40),
    "experts_negative.json": with_(QWEN3_MOE, "num_local_experts", -8),
    "experts_times_layers_huge.json":
        with_(with_(with_(QWEN3_MOE, "num_local_experts", 4096), "num_hidden_layers", 1000),
              "mlp_only_layers", []),
    "top_k_above_experts.json": with_(QWEN3_MOE, "num_experts_per_tok", 9),
    "top_k_zero.json": with_(QWEN3_MOE, "num_experts_per_tok", 0),
    "moe_intermediate_huge.json": with_(QWEN3_MOE, "moe_intermediate_size", 1 << 40),
    "shared_expert_negative.json": with_(QWEN3_NEXT, "shared_expert_intermediate_size", -48),
    "mlp_only_layers_outside.json": with_(QWEN3_MOE, "mlp_only_layers", [1, 2]),
    "mlp_only_layers_negative.json": with_(QWEN3_MOE, "mlp_only_layers", [-1]),
    "decoder_sparse_step_zero.json": with_(QWEN3_MOE, "decoder_sparse_step", 0),
    # Linear attention (Gated DeltaNet) sizes.
    "linear_key_head_dim_huge.json": with_(QWEN3_NEXT, "linear_key_head_dim", 1 << 40),
    "linear_value_heads_not_multiple.json": with_(QWEN3_NEXT, "linear_num_value_heads", 3),
    "linear_value_width_huge.json":
        with_(with_(QWEN3_NEXT, "linear_num_value_heads", 4096), "linear_value_head_dim", 1024),
    "linear_conv_kernel_zero.json": with_(QWEN3_NEXT, "linear_conv_kernel_dim", 0),
    "linear_key_heads_times_layers_huge.json":
        with_(with_(with_(QWEN3_5_TEXT, "linear_num_key_heads", 512),
                    "linear_num_value_heads", 512), "layer_types", DELETE) | {
            "num_hidden_layers": 1000},
    "full_attention_interval_zero.json":
        with_(with_(QWEN3_5_TEXT, "layer_types", DELETE), "full_attention_interval", 0),
}

# Texts json.dump cannot write: numbers that overflow a double.
RAW_CONFIGS = {
    "rope_theta_overflow.json":
        json.dumps(QWEN3).replace('"rope_theta": 10000.0', '"rope_theta": 1e999'),
    "rms_norm_eps_overflow.json":
        json.dumps(QWEN3).replace('"rms_norm_eps": 1e-06', '"rms_norm_eps": 1e999'),
}

# ---------------------------------------------------------------------------
# safetensors headers (tiny files; data is zeros)


def safetensors(header, data_len, pad_to=8, header_text=None):
    text = header_text if header_text is not None else json.dumps(header, separators=(",", ":"))
    if pad_to:
        text += " " * ((pad_to - len(text) % pad_to) % pad_to)
    raw = text.encode()
    return struct.pack("<Q", len(raw)) + raw + b"\0" * data_len


def t(dtype, shape, begin, end):
    return {"dtype": dtype, "shape": shape, "data_offsets": [begin, end]}


# Header length 8k+1: every tensor starts one byte past an even address.
MISALIGNED = {"a.bf16": t("BF16", [2, 3], 0, 12), "b.f32": t("F32", [3], 12, 24)}
_mis_text = json.dumps(MISALIGNED, separators=(",", ":"))
_mis_text += " " * ((1 - len(_mis_text)) % 8)

SAFETENSORS = {
    "misaligned_header.safetensors": safetensors(None, 24, pad_to=0, header_text=_mis_text),
    "odd_u8_before_bf16.safetensors":
        safetensors({"a.u8": t("U8", [3], 0, 3), "b.bf16": t("BF16", [2], 3, 7)}, 7),
    "overlap.safetensors":
        safetensors({"a": t("F32", [2], 0, 8), "b": t("F32", [2], 4, 12)}, 12),
    "out_of_file.safetensors": safetensors({"a": t("F32", [4], 0, 16)}, 8),
    "offsets_past_int64.safetensors":
        safetensors({"a": t("U8", [1], 18446744073709551614, 18446744073709551615)}, 1),
    "shape_product_overflow.safetensors":
        safetensors({"a": t("F32", [4294967296, 4294967296], 0, 0)}, 0),
    "shape_zero_dim_overflow.safetensors":
        safetensors({"a": t("F32", [0, 4294967296, 4294967296], 0, 0)}, 0),
    "shape_dtype_overflow.safetensors":
        safetensors({"a": t("BF16", [4611686018427387904, 2], 0, 0)}, 0),
    "span_mismatch.safetensors": safetensors({"a": t("F32", [3], 0, 8)}, 8),
    "negative_dim.safetensors": safetensors({"a": t("F32", [-1], 0, 0)}, 0),
    "rank_9.safetensors": safetensors({"a": t("F32", [1] * 9, 0, 4)}, 4),
    "unknown_dtype.safetensors": safetensors({"a": t("F64", [1], 0, 8)}, 8),
    "gap.safetensors": safetensors({"a": t("F32", [1], 0, 4), "b": t("F32", [1], 8, 12)}, 12),
    "duplicate_name.safetensors":
        safetensors(None, 8, header_text='{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},'
                                         '"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}'),
    "header_length_huge.safetensors": struct.pack("<Q", 1 << 40) + b"{}",
    "header_length_past_file.safetensors": struct.pack("<Q", 4096) + b"{}      ",
    "deep_header.safetensors": safetensors(None, 0, header_text="[" * 1000 + "]" * 1000),
}

# Sharded checkpoint indexes (model.safetensors.index.json bodies).
INDEXES = {
    "index_escaping_shard.json": {"weight_map": {"a": "../../etc/passwd"}},
    "index_absolute_shard.json": {"weight_map": {"a": "/tmp/model.safetensors"}},
    "index_not_a_name.json": {"weight_map": {"a": 7}},
    "index_no_weight_map.json": {"metadata": {"total_size": 1 << 62}},
}

# ---------------------------------------------------------------------------
# GGUF headers


class Gguf:
    def __init__(self, version=3):
        self.b = bytearray(b"GGUF") + struct.pack("<I", version)

    def u32(self, v):
        self.b += struct.pack("<I", v)
        return self

    def u64(self, v):
        self.b += struct.pack("<Q", v)
        return self

    def s(self, v):
        v = v.encode()
        return self.u64(len(v)).raw(v)

    def raw(self, v):
        self.b += v
        return self

    def pad(self, align=32):
        self.b += b"\0" * ((align - len(self.b) % align) % align)
        return self


def gguf_one_tensor(ne, ggml_type=0, offset=0, data=16, align_kv=None, dims=None):
    g = Gguf().u64(1).u64(1 if align_kv is not None else 0)
    if align_kv is not None:
        g.s("general.alignment").u32(4).u32(align_kv)
    g.s("w").u32(dims if dims is not None else len(ne))
    for n in ne:
        g.u64(n)
    g.u32(ggml_type).u64(offset)
    g.pad(align_kv or 32)
    return bytes(g.b) + b"\0" * data


GGUF = {
    # f32 data two bytes past an aligned address.
    "alignment_2.gguf": gguf_one_tensor([3], offset=2, data=16, align_kv=2),
    "alignment_not_power_of_two.gguf": gguf_one_tensor([4], data=16, align_kv=48),
    "tensor_count_huge.gguf": bytes(Gguf().u64(1 << 62).u64(0).b),
    "kv_count_huge.gguf": bytes(Gguf().u64(0).u64(1 << 62).b),
    "tensor_count_over_limit.gguf": bytes(Gguf().u64((1 << 20) + 1).u64(0).b) + b"\0" * 64,
    "kv_count_over_limit.gguf": bytes(Gguf().u64(0).u64((1 << 16) + 1).b) + b"\0" * 64,
    "tensor_count_after_metadata.gguf":
        bytes(Gguf().u64(40).u64(1).s("k").u32(8).s("x" * 1000).b),
    "key_length_huge.gguf": bytes(Gguf().u64(0).u64(1).u64(1 << 62).b) + b"\0" * 16,
    "string_array_count_huge.gguf":
        bytes(Gguf().u64(0).u64(1).s("k").u32(9).u32(8).u64(1 << 61).b) + b"\0" * 16,
    "nested_array.gguf": bytes(Gguf().u64(0).u64(1).s("k").u32(9).u32(9).u64(1).b) + b"\0" * 8,
    "unknown_value_type.gguf": bytes(Gguf().u64(0).u64(1).s("k").u32(13).b) + b"\0" * 8,
    "n_dims_5.gguf": gguf_one_tensor([1, 1, 1, 1, 1]),
    "dims_product_overflow.gguf": gguf_one_tensor([1 << 32, 1 << 32], data=0),
    "dim_above_int64.gguf": gguf_one_tensor([1 << 63], data=0),
    "offset_past_file.gguf": gguf_one_tensor([4], offset=1 << 40),
    "offset_unaligned.gguf": gguf_one_tensor([4], offset=4),
    "unknown_ggml_type.gguf": gguf_one_tensor([32], ggml_type=2),  # Q4_0
    "block_type_bad_inner_dim.gguf": gguf_one_tensor([33], ggml_type=8),  # Q8_0
    "bad_version.gguf": bytes(Gguf(version=1).u64(0).u64(0).b) + b"\0" * 8,
}
_overlap = Gguf().u64(2).u64(0)
for _name in ("a", "b"):
    _overlap.s(_name).u32(1).u64(8).u32(0).u64(0)
GGUF["overlapping_tensors.gguf"] = bytes(_overlap.pad().b) + b"\0" * 32


def write_folder(name, files, mode="wb"):
    folder = os.path.join(HERE, name)
    shutil.rmtree(folder, ignore_errors=True)
    os.makedirs(folder)
    for fname, body in files.items():
        with open(os.path.join(folder, fname), mode) as f:
            f.write(body)


def main():
    configs = {k: json.dumps(v, indent=1, sort_keys=True) + "\n" for k, v in CONFIGS.items()}
    configs.update({k: v + "\n" for k, v in RAW_CONFIGS.items()})
    write_folder("config", configs, "w")
    st = dict(SAFETENSORS)
    st.update({k: (json.dumps(v) + "\n").encode() for k, v in INDEXES.items()})
    write_folder("safetensors", st)
    write_folder("gguf", GGUF)


if __name__ == "__main__":
    main()
