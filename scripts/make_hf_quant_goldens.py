#!/usr/bin/env python3
"""Goldens for the quantized Hugging Face test checkpoints (issue 13): transformers in
float32 on the dequantized weights (run on the GPU machine, which has transformers).

    python3 scripts/make_hf_quant_goldens.py --out $OUT/hfq tests/models/hf_quant/qwen3-fp8 ...

For each quantized checkpoint folder NAME this loads NAME-deq (the same model with every
quantized module dequantized by scripts/make_hf_quant_models.py's own numpy code, as plain
bf16; every dequantized weight is exact in bf16) with transformers, float32, eager attention,
pure-torch linear attention, and writes OUT/NAME/golden.json + golden.safetensors in the format
of tests/models (the same prompts, prefill and cached-decode logits, greedy tokens, margins;
scripts/make_golden_models.py's code does the forward passes). Copied into
tests/models/hf_quant/NAME/, they are what hf_quant_test (CPU) and cuda_test (CUDA) compare
Ferrite on the quantized checkpoint with.
"""
import argparse
import json
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("models", nargs="+", help="quantized checkpoint folders (NAME; NAME-deq beside it)")
    args = ap.parse_args()
    sys.path.insert(0, HERE)
    import torch  # noqa: E402
    import transformers  # noqa: E402
    from safetensors.torch import save_file  # noqa: E402
    import make_golden_models as mg  # noqa: E402

    torch.set_grad_enabled(False)
    if args.device == "cuda" and not torch.cuda.is_available():
        args.device = "cpu"
    if args.device == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")
    device = torch.device(args.device)
    failures = 0
    for path in args.models:
        path = path.rstrip("/")
        name = os.path.basename(path)
        deq = path + "-deq"
        try:
            cfg = json.load(open(os.path.join(deq, "config.json")))
            text = cfg.get("text_config", cfg)
            vocab = int(text["vocab_size"])
            rng = np.random.default_rng(1234)
            prompts = {"short": [int(x) for x in rng.integers(3, vocab, mg.SHORT_LEN)],
                       "long": [int(x) for x in rng.integers(3, vocab, mg.LONG_LEN)]}
            model = transformers.AutoModelForCausalLM.from_pretrained(
                deq, dtype=torch.float32, attn_implementation="eager")
            model = mg.prepare_reference_(model)
            model.to(device)
            runs = {p: mg.greedy_run(model, prompts[p], mg.GREEDY_TOKENS[p], device)
                    for p in ("short", "long")}
            out_dir = os.path.join(args.out, name)
            os.makedirs(out_dir, exist_ok=True)
            tensors = {}
            pj = {}
            for p in ("short", "long"):
                tensors[f"{p}.prefill_logits"] = runs[p]["prefill_logits"].float().contiguous()
                tensors[f"{p}.decode_logits"] = runs[p]["decode_logits"].float().contiguous()
                P = len(prompts[p])
                pj[p] = {"ids": prompts[p], "greedy_tokens": runs[p]["greedy_tokens"],
                         "greedy_margins": [round(m, 6) for m in runs[p]["margins"]],
                         "prefill_logits_positions": list(range(P - mg.PREFILL_KEEP, P)),
                         "decode_logits_positions": list(range(P, P + mg.DECODE_STEPS)),
                         "decode_logits_fed_tokens": runs[p]["greedy_tokens"][:mg.DECODE_STEPS]}
            save_file(tensors, os.path.join(out_dir, "golden.safetensors"), metadata={"format": "pt"})
            meta = {"checkpoint": name, "oracle": name + "-deq",
                    "versions": {"transformers": transformers.__version__, "torch": torch.__version__,
                                 "numpy": np.__version__},
                    "numerics": f"float32 on {device}, eager attention, on the dequantized (exact bf16) weights",
                    "min_top1_top2_margin": min(min(runs[p]["margins"]) for p in runs),
                    "prompts": pj,
                    "command": " ".join(["python3", "scripts/make_hf_quant_goldens.py"] + sys.argv[1:])}
            json.dump(meta, open(os.path.join(out_dir, "golden.json"), "w"), indent=1)
            print(f"{name}: ok, greedy short {runs['short']['greedy_tokens']}", flush=True)
        except Exception as e:  # noqa: BLE001
            import traceback
            traceback.print_exc()
            print(f"{name}: FAILED {e!r}", flush=True)
            failures += 1
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
