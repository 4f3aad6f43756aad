#!/usr/bin/env python3
"""Goldens for quantized GGUF test files: transformers in float32 on the weights that
llama.cpp's gguf-py dequantizes from the file (run on the GPU machine, which has torch and
transformers; CPU works too).

    python3 scripts/make_gguf_goldens.py --gguf-py .peer/gguf-py --out $OUT/goldens \
        tests/models/gguf/quant/qwen3w-q4_k_m.gguf:tests/models/gguf/quant/qwen3w.config.json ...

For each FILE:CONFIG pair it writes OUT/<file stem>/golden.json + golden.safetensors in the
format of tests/models (same prompts, prefill and cached-decode logits, greedy tokens,
margins: scripts/make_golden_models.py's code does the forward passes). Supported
architectures: qwen3 and qwen3moe (the wide twins of scripts/make_gguf_models.py --wide),
whose GGUF tensors are the Hugging Face ones renamed (no converter transform to undo).
"""
import argparse
import json
import os
import re
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))


def hf_state_dict(reader, gguf, cfg):
    sd = {}
    experts = {}
    simple = {
        "attn_norm.weight": "input_layernorm.weight", "ffn_norm.weight": "post_attention_layernorm.weight",
        "attn_q.weight": "self_attn.q_proj.weight", "attn_k.weight": "self_attn.k_proj.weight",
        "attn_v.weight": "self_attn.v_proj.weight", "attn_output.weight": "self_attn.o_proj.weight",
        "attn_q_norm.weight": "self_attn.q_norm.weight", "attn_k_norm.weight": "self_attn.k_norm.weight",
        "ffn_gate.weight": "mlp.gate_proj.weight", "ffn_up.weight": "mlp.up_proj.weight",
        "ffn_down.weight": "mlp.down_proj.weight", "ffn_gate_inp.weight": "mlp.gate.weight",
    }
    types = {}
    for t in reader.tensors:
        data = gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float32)
        shape = [int(x) for x in reversed(t.shape.tolist())]
        data = data.reshape(shape)
        types[t.name] = t.tensor_type.name
        if t.name == "token_embd.weight":
            sd["model.embed_tokens.weight"] = data
        elif t.name == "output_norm.weight":
            sd["model.norm.weight"] = data
        elif t.name == "output.weight":
            sd["lm_head.weight"] = data
        else:
            m = re.match(r"blk\.(\d+)\.(.*)$", t.name)
            layer, rest = int(m.group(1)), m.group(2)
            e = re.match(r"ffn_(gate|up|down)_exps\.weight$", rest)
            if e:
                experts.setdefault(layer, {})[e.group(1)] = data
            else:
                sd[f"model.layers.{layer}.{simple[rest]}"] = data
    for layer, kinds in experts.items():
        p = f"model.layers.{layer}.mlp.experts."
        sd[p + "gate_up_proj"] = np.concatenate([kinds["gate"], kinds["up"]], axis=1)  # packed
        sd[p + "down_proj"] = kinds["down"]
        for e in range(kinds["gate"].shape[0]):  # per expert
            for k in ("gate", "up", "down"):
                sd[f"{p}{e}.{k}_proj.weight"] = kinds[k][e]
    if cfg.get("tie_word_embeddings") and "lm_head.weight" not in sd:
        sd["lm_head.weight"] = sd["model.embed_tokens.weight"]
    return sd, types


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gguf-py", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("pairs", nargs="+", help="FILE.gguf:CONFIG.json")
    args = ap.parse_args()
    sys.path.insert(0, args.gguf_py)
    sys.path.insert(0, HERE)
    import gguf  # noqa: E402
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
    seed = mg.parse_args(["unused"]).seed
    rng = np.random.default_rng(seed)
    prompts = {"short": [int(x) for x in rng.integers(3, mg.VOCAB, mg.SHORT_LEN)],
               "long": [int(x) for x in rng.integers(3, mg.VOCAB, mg.LONG_LEN)]}
    failures = 0
    for pair in args.pairs:
        path, cfg_path = pair.split(":")
        stem = os.path.basename(path)[:-5]
        try:
            cfg = json.load(open(cfg_path))
            reader = gguf.GGUFReader(path)
            sd, types = hf_state_dict(reader, gguf, cfg)
            cls_cfg, cls_model = {"qwen3": ("Qwen3Config", "Qwen3ForCausalLM"),
                                  "qwen3_moe": ("Qwen3MoeConfig", "Qwen3MoeForCausalLM")}[cfg["model_type"]]
            kw = {k: v for k, v in cfg.items() if k != "model_type"}
            config = getattr(transformers, cls_cfg)(**kw)
            for attr in ("_attn_implementation", "_experts_implementation"):
                try:
                    setattr(config, attr, "eager")
                except Exception:  # noqa: BLE001
                    pass
            model = getattr(transformers, cls_model)(config)
            model = mg.prepare_reference_(model)
            own = model.state_dict()
            load = {k: torch.from_numpy(np.ascontiguousarray(sd[k])).reshape(own[k].shape) for k in own}
            missing = [k for k in own if k not in sd]
            assert not missing, missing
            model.load_state_dict(load, strict=True)
            model.to(device)
            runs = {p: mg.greedy_run(model, prompts[p], mg.GREEDY_TOKENS[p], device) for p in ("short", "long")}
            out_dir = os.path.join(args.out, stem)
            os.makedirs(out_dir, exist_ok=True)
            tensors = {}
            for p in ("short", "long"):
                tensors[f"{p}.prefill_logits"] = runs[p]["prefill_logits"].float().contiguous()
                tensors[f"{p}.decode_logits"] = runs[p]["decode_logits"].float().contiguous()
            save_file(tensors, os.path.join(out_dir, "golden.safetensors"), metadata={"format": "pt"})
            pj = {}
            for p in ("short", "long"):
                P = len(prompts[p])
                pj[p] = {"ids": prompts[p], "greedy_tokens": runs[p]["greedy_tokens"],
                         "greedy_margins": [round(m, 6) for m in runs[p]["margins"]],
                         "prefill_logits_positions": list(range(P - mg.PREFILL_KEEP, P)),
                         "decode_logits_positions": list(range(P, P + mg.DECODE_STEPS)),
                         "decode_logits_fed_tokens": runs[p]["greedy_tokens"][:mg.DECODE_STEPS]}
            meta = {"file": os.path.basename(path), "config": cfg, "tensor_types": types,
                    "versions": {"transformers": transformers.__version__, "torch": torch.__version__,
                                 "numpy": np.__version__},
                    "numerics": f"gguf-py dequantized weights, float32 on {device}, eager attention",
                    "min_top1_top2_margin": min(min(runs[p]["margins"]) for p in runs),
                    "logit_abs_max": {k: float(v.abs().max()) for k, v in tensors.items()},
                    "prompts": pj,
                    "command": " ".join(["python3", "scripts/make_gguf_goldens.py"] + sys.argv[1:])}
            with open(os.path.join(out_dir, "golden.json"), "w") as f:
                json.dump(meta, f, indent=1)
                f.write("\n")
            print(f"{stem}: ok, min margin {meta['min_top1_top2_margin']:.4f}, greedy short "
                  f"{runs['short']['greedy_tokens']}", flush=True)
        except Exception as e:  # noqa: BLE001
            import traceback
            traceback.print_exc()
            print(f"{stem}: FAILED {e!r}", flush=True)
            failures += 1
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
