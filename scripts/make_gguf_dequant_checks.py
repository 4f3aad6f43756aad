#!/usr/bin/env python3
"""What llama.cpp's own gguf-py dequantizes from GGUF files, for a test of Ferrite's
block decoding on files that llama-quantize wrote (tests/formats/gguf_dequant_test.cc).

    /usr/bin/python3 scripts/make_gguf_dequant_checks.py --gguf-py /tmp/llama.cpp/gguf-py \
        --out tests/models/gguf/quant/dequant_checks.json tests/models/gguf/quant/*.gguf

For every tensor of every file: its ggml type, element count, the FNV-1a 64 hash of the
float32 bit patterns of the whole dequantized tensor (row-major, gguf-py's order), their
float64 sum, and the first 16 values and 16 more spread over the tensor (index: value),
so that a mismatch says where. gguf-py's numpy dequantizers do ggml's float32 operations
in ggml's order, so Ferrite's reference dequantization (src/tensor/dtype.cc) must match
them bit for bit.

The K-quant files themselves are made from the f16 wide twins of make_gguf_models.py:

    /usr/bin/python3 scripts/make_gguf_models.py --gguf-py /tmp/llama.cpp/gguf-py --wide --out /tmp/gw
    llama-quantize /tmp/gw/qwen3w-f16.gguf tests/models/gguf/quant/qwen3w-q4_k_m.gguf Q4_K_M
    (and Q5_K_M, Q6_K; qwen3moew-f16.gguf as Q4_K_M)
"""
import argparse
import json
import os
import sys

import numpy as np

FNV_OFFSET = 0xCBF29CE484222325
FNV_PRIME = 0x100000001B3


def fnv1a64(data: bytes) -> int:
    h = FNV_OFFSET
    for b in data:
        h ^= b
        h = (h * FNV_PRIME) & 0xFFFFFFFFFFFFFFFF
    return h


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gguf-py", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("files", nargs="+")
    args = ap.parse_args()
    sys.path.insert(0, args.gguf_py)
    import gguf  # noqa: E402

    out = {}
    for path in args.files:
        reader = gguf.GGUFReader(path)
        entry = {}
        for t in reader.tensors:
            x = gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float32).reshape(-1)
            n = int(x.size)
            spread = sorted(set(int(i) for i in np.linspace(0, n - 1, 16).round()))
            entry[t.name] = {
                "type": t.tensor_type.name,
                "elements": n,
                "fnv1a64": format(fnv1a64(x.tobytes()), "016x"),
                "sum": float(x.astype(np.float64).sum()),
                "values": {str(i): float(x[i]) for i in list(range(min(16, n))) + spread},
            }
        out[os.path.basename(path)] = entry
        print(f"{path}: {len(entry)} tensors, types "
              f"{sorted(set(e['type'] for e in entry.values()))}")
    with open(args.out, "w") as f:
        json.dump(out, f, indent=1, sort_keys=True)
        f.write("\n")


if __name__ == "__main__":
    main()
