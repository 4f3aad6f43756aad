#!/usr/bin/env python3
"""Trains Ferrite's default model, "ferrite-tiny": a small Qwen3 with the
project's own byte-level BPE tokenizer, on the text of
scripts/get_training_text.sh. One GPU call (the device tool):

    python3 scripts/train_default_model.py --text .training-text --out "$OUT"

writes into --out: config.json, generation_config.json, model.safetensors
(bf16), tokenizer.json, tokenizer_config.json (ChatML template),
perplexity.json (held-out perplexity measured by transformers, and by this
script's own model as a cross-check) and train_log.txt.

The model is written here in plain PyTorch with the weight names and the
arithmetic of transformers' Qwen3ForCausalLM (so the script also runs where
transformers is missing, e.g. a CPU smoke test with Debian's python3-torch:
--smoke); transformers, when present, loads the written folder and measures
the perplexity that `ferrite perplexity` must reproduce.

The text is documentation prose, not dialogue. So that `ferrite run "Hello"`
answers in English, a share of the training sequences is dialogue-shaped:
the user turn is the start of a paragraph (its first sentence, or a whole
paragraph) and the assistant turn the text that follows it, closed by
<|im_end|>: a reply continues the user's passage and stops.
"""
import argparse
import gzip
import json
import math
import os
import random
import re
import struct
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

T_START = time.time()
LOG_LINES = []


LOG_FILE = []


def log(*args):
    line = f"[{time.time() - T_START:7.1f}s] " + " ".join(str(a) for a in args)
    print(line, flush=True)
    LOG_LINES.append(line)
    if LOG_FILE:
        with open(LOG_FILE[0], "a") as f:
            f.write(line + "\n")


SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}")
# Qwen2's pre-tokenizer split (as `ferrite create-model` writes it).
SPLIT_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| "
               r"?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")


def render_chat(messages, add_generation_prompt=False):
    """CHAT_TEMPLATE in Python (what the Jinja template renders)."""
    s = "".join(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in messages)
    return s + ("<|im_start|>assistant\n" if add_generation_prompt else "")


# --- tokenizer ---------------------------------------------------------------
class HfTokenizer:
    """The project's tokenizer, trained with the `tokenizers` library."""

    def __init__(self, tok):
        self.tok = tok
        self.vocab_size = tok.get_vocab_size()
        self.special = {s: tok.token_to_id(s) for s in SPECIALS}

    @staticmethod
    def train(texts, vocab_size):
        from tokenizers import (Regex, Tokenizer, decoders, models, normalizers,
                                pre_tokenizers, processors, trainers)
        tok = Tokenizer(models.BPE(dropout=None, unk_token=None, fuse_unk=False,
                                   byte_fallback=False))
        tok.normalizer = normalizers.NFC()
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(SPLIT_REGEX), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
        tok.decoder = decoders.ByteLevel()
        tok.post_processor = processors.ByteLevel(trim_offsets=False)
        trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=2,
                                      special_tokens=SPECIALS, show_progress=False,
                                      initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
        tok.train_from_iterator(texts, trainer=trainer)
        return HfTokenizer(tok)

    def encode_batch(self, texts):
        return [e.ids for e in self.tok.encode_batch(texts, add_special_tokens=False)]

    def encode(self, text):
        return self.tok.encode(text, add_special_tokens=False).ids

    def decode(self, ids):
        return self.tok.decode(ids, skip_special_tokens=False)

    def save(self, out):
        from tokenizers import Tokenizer
        path = os.path.join(out, "tokenizer.json")
        self.tok.save(path)
        # The ByteLevel steps exactly as Qwen2's tokenizer.json has them (no
        # prefix space, no offset trimming, no regex of their own): the ids do
        # not change, the file reads the same everywhere.
        with open(path, encoding="utf-8") as f:
            tj = json.load(f)
        flags = {"add_prefix_space": False, "trim_offsets": False, "use_regex": False}
        for step in [tj.get("decoder"), tj.get("post_processor")] + list(
                (tj.get("pre_tokenizer") or {}).get("pretokenizers") or []):
            if step and step.get("type") == "ByteLevel":
                step.update(flags)
        with open(path, "w", encoding="utf-8") as f:
            json.dump(tj, f, ensure_ascii=False, indent=1)
        self.tok = Tokenizer.from_file(path)


class ByteTokenizer:
    """--smoke without `tokenizers`: bytes, then the specials (tests the rest)."""

    def __init__(self):
        self.vocab_size = 256 + len(SPECIALS)
        self.special = {s: 256 + i for i, s in enumerate(SPECIALS)}
        self.split = re.compile("(" + "|".join(re.escape(s) for s in SPECIALS) + ")")

    def encode(self, text):
        ids = []
        for part in self.split.split(text):
            if part in self.special:
                ids.append(self.special[part])
            else:
                ids.extend(part.encode("utf-8"))
        return ids

    def encode_batch(self, texts):
        return [self.encode(t) for t in texts]

    def decode(self, ids):
        inv = {v: k for k, v in self.special.items()}
        out, buf = [], bytearray()
        for i in ids:
            if i in inv:
                out.append(buf.decode("utf-8", "replace"))
                buf = bytearray()
                out.append(inv[i])
            else:
                buf.append(i)
        out.append(buf.decode("utf-8", "replace"))
        return "".join(out)

    def save(self, out):
        # The same ids as a tokenizer.json: byte-level BPE with no merges.
        bs = list(range(33, 127)) + list(range(161, 173)) + list(range(174, 256))
        cs, n = bs[:], 0
        for b in range(256):
            if b not in bs:
                bs.append(b)
                cs.append(256 + n)
                n += 1
        vocab = {chr(c): b for b, c in zip(bs, cs)}
        byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False,
                      "use_regex": False}
        tj = {"version": "1.0", "truncation": None, "padding": None,
              "added_tokens": [{"id": i, "content": s, "single_word": False, "lstrip": False,
                                "rstrip": False, "normalized": False, "special": True}
                               for s, i in self.special.items()],
              "normalizer": None,
              "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
                  {"type": "Split", "pattern": {"Regex": SPLIT_REGEX}, "behavior": "Isolated",
                   "invert": False}, byte_level]},
              "post_processor": byte_level, "decoder": byte_level,
              "model": {"type": "BPE", "dropout": None, "unk_token": None,
                        "continuing_subword_prefix": "", "end_of_word_suffix": "",
                        "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                        "vocab": dict(sorted(vocab.items(), key=lambda kv: kv[1])),
                        "merges": []}}
        with open(os.path.join(out, "tokenizer.json"), "w", encoding="utf-8") as f:
            json.dump(tj, f, ensure_ascii=False)


# --- model: transformers' Qwen3 arithmetic, HF weight names -------------------
class RMSNorm(nn.Module):
    def __init__(self, dim, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x):
        dtype = x.dtype
        x = x.float()
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x.to(dtype)


def rotate_half(x):
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


class Attention(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.h, self.kv, self.hd = c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"]
        d = c["hidden_size"]
        self.q_proj = nn.Linear(d, self.h * self.hd, bias=False)
        self.k_proj = nn.Linear(d, self.kv * self.hd, bias=False)
        self.v_proj = nn.Linear(d, self.kv * self.hd, bias=False)
        self.o_proj = nn.Linear(self.h * self.hd, d, bias=False)
        self.q_norm = RMSNorm(self.hd, c["rms_norm_eps"])
        self.k_norm = RMSNorm(self.hd, c["rms_norm_eps"])

    def forward(self, x, cos, sin):
        b, t, _ = x.shape
        q = self.q_norm(self.q_proj(x).view(b, t, self.h, self.hd)).transpose(1, 2)
        k = self.k_norm(self.k_proj(x).view(b, t, self.kv, self.hd)).transpose(1, 2)
        v = self.v_proj(x).view(b, t, self.kv, self.hd).transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        rep = self.h // self.kv
        k = k.repeat_interleave(rep, dim=1)
        v = v.repeat_interleave(rep, dim=1)
        if hasattr(F, "scaled_dot_product_attention"):
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:  # torch < 2.0 (Debian 12's python3-torch)
            att = (q @ k.transpose(-1, -2)) / math.sqrt(self.hd)
            mask = torch.ones(t, t, dtype=torch.bool, device=x.device).triu(1)
            att = att.masked_fill(mask, float("-inf")).softmax(-1)
            y = att @ v
        return self.o_proj(y.transpose(1, 2).reshape(b, t, self.h * self.hd))


class MLP(nn.Module):
    def __init__(self, c):
        super().__init__()
        d, i = c["hidden_size"], c["intermediate_size"]
        self.gate_proj = nn.Linear(d, i, bias=False)
        self.up_proj = nn.Linear(d, i, bias=False)
        self.down_proj = nn.Linear(i, d, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class Layer(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.self_attn = Attention(c)
        self.mlp = MLP(c)
        self.input_layernorm = RMSNorm(c["hidden_size"], c["rms_norm_eps"])
        self.post_attention_layernorm = RMSNorm(c["hidden_size"], c["rms_norm_eps"])

    def forward(self, x, cos, sin):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin)
        return x + self.mlp(self.post_attention_layernorm(x))


class Body(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.embed_tokens = nn.Embedding(c["vocab_size"], c["hidden_size"])
        self.layers = nn.ModuleList([Layer(c) for _ in range(c["num_hidden_layers"])])
        self.norm = RMSNorm(c["hidden_size"], c["rms_norm_eps"])


class Qwen3(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c
        self.model = Body(c)
        hd = c["head_dim"]
        inv = 1.0 / (c["rope_theta"] ** (torch.arange(0, hd, 2, dtype=torch.int64).float() / hd))
        self.register_buffer("inv_freq", inv, persistent=False)
        std = 0.02
        for name, p in self.named_parameters():
            if p.dim() == 2:
                s = std / math.sqrt(2 * c["num_hidden_layers"]) if name.endswith(
                    ("o_proj.weight", "down_proj.weight")) else std
                nn.init.normal_(p, 0.0, s)

    def hidden(self, ids):
        t = ids.shape[1]
        pos = torch.arange(t, device=ids.device, dtype=torch.float32)
        freqs = torch.outer(pos, self.inv_freq)
        emb = torch.cat((freqs, freqs), dim=-1)
        x = self.model.embed_tokens(ids)
        cos, sin = emb.cos().to(x.dtype), emb.sin().to(x.dtype)
        for layer in self.model.layers:
            x = layer(x, cos, sin)
        return self.model.norm(x)

    def logits(self, ids):
        return F.linear(self.hidden(ids), self.model.embed_tokens.weight)

    def forward(self, ids, targets):
        logits = self.logits(ids)
        return F.cross_entropy(logits.float().view(-1, logits.shape[-1]), targets.reshape(-1))

    def hf_state_dict(self):
        # Tied embeddings: no lm_head.weight, as transformers saves it.
        return {k: v for k, v in self.state_dict().items() if k.startswith("model.")}


# --- safetensors (no dependency) -----------------------------------------------
def write_safetensors(path, tensors):
    header, blobs, offset = {}, [], 0
    for name in sorted(tensors):
        t = tensors[name].detach().to("cpu").contiguous()
        assert t.dtype == torch.bfloat16
        data = t.view(torch.int16).numpy().tobytes()
        header[name] = {"dtype": "BF16", "shape": list(t.shape),
                        "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    header["__metadata__"] = {"format": "pt"}
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


# --- data ----------------------------------------------------------------------
def read_docs(path, limit_chars=None):
    with gzip.open(path, "rt", encoding="utf-8") as f:
        text = f.read(limit_chars) if limit_chars else f.read()
    return [d for d in text.split("\n\n\n") if d.strip()]


SENT = re.compile(r"(?<=[.!?])\s+(?=[A-Z\"'(])")


def chat_samples(docs, rng, share_chars):
    """Dialogue-shaped samples: (user = start of a passage, assistant = what follows)."""
    out, chars = [], 0
    order = list(range(len(docs)))
    rng.shuffle(order)
    while chars < share_chars and order:
        for di in order:
            paras = docs[di].split("\n\n")
            i = rng.randrange(len(paras))
            p = paras[i]
            sents = SENT.split(p)
            kind = rng.random()
            if kind < 0.55 and len(sents) >= 2:
                user = sents[0]
                reply = " ".join(sents[1:])
            elif i + 1 < len(paras):
                user, reply = p, paras[i + 1]
            else:
                continue
            if len(reply) > 1200:
                cut = reply.rfind(". ", 0, 1200)
                reply = reply[:cut + 1] if cut > 0 else reply[:1200]
            messages = [{"role": "user", "content": user}, {"role": "assistant", "content": reply}]
            if rng.random() < 0.15 and i + 2 < len(paras):  # a second turn
                nxt = SENT.split(paras[i + 2])
                messages += [{"role": "user", "content": nxt[0]},
                             {"role": "assistant", "content": " ".join(nxt[1:]) or paras[i + 2]}]
            s = render_chat(messages)
            out.append(s)
            chars += len(s)
            if chars >= share_chars:
                break
    return out


def tokens_of(tok, docs, eot):
    ids = []
    for d in tok.encode_batch(docs):
        ids.extend(d)
        ids.append(eot)
    return torch.tensor(ids, dtype=torch.int32)


# --- perplexity (the `ferrite perplexity` definition) -------------------------------
@torch.no_grad()
def perplexity(logits_fn, ids, ctx, stride, device, batch=16):
    """Windows of `ctx` tokens starting every `stride` tokens; each token from
    the second on is scored once, in the first window that reaches it, with
    the window's earlier tokens as context. Returns (ppl, tokens scored)."""
    n = len(ids)
    windows = []  # (begin, end, first scored position)
    prev_end, begin = 0, 0
    while True:
        end = min(begin + ctx, n)
        first = max(prev_end, begin + 1)
        if first < end:
            windows.append((begin, end, first))
        prev_end = end
        if end == n:
            break
        begin += stride
    nll, count = 0.0, 0
    for i in range(0, len(windows), batch):
        group = windows[i:i + batch]
        for b, e, first in group:  # different lengths: one at a time is simplest
            x = torch.tensor(ids[b:e], dtype=torch.long, device=device)[None]
            lp = logits_fn(x)[0].double().log_softmax(-1)
            pos = torch.arange(first - b - 1, e - b - 1, device=device)
            tgt = x[0, pos + 1]
            nll -= lp[pos, tgt].sum().item()
            count += len(pos)
    return math.exp(nll / count), count


# --- main ----------------------------------------------------------------------------
def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--text", required=True, help="folder of get_training_text.sh")
    ap.add_argument("--out", required=True)
    ap.add_argument("--smoke", action="store_true", help="tiny model, a few CPU steps")
    ap.add_argument("--train-seconds", type=float, default=170)
    ap.add_argument("--max-epochs", type=float, default=16)
    ap.add_argument("--vocab", type=int, default=8192)
    ap.add_argument("--hidden", type=int, default=384)
    ap.add_argument("--layers", type=int, default=6)
    ap.add_argument("--heads", type=int, default=6)
    ap.add_argument("--kv-heads", type=int, default=2)
    ap.add_argument("--intermediate", type=int, default=960)
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--chat-share", type=float, default=0.15)
    ap.add_argument("--compile", type=int, default=0)
    ap.add_argument("--seed", type=int, default=1234)
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    LOG_FILE.append(os.path.join(a.out, "train_log.txt"))
    open(LOG_FILE[0], "w").close()
    device = "cuda" if torch.cuda.is_available() and not a.smoke else "cpu"
    torch.manual_seed(a.seed)
    rng = random.Random(a.seed)
    if a.smoke:
        a.vocab, a.hidden, a.layers, a.heads, a.kv_heads, a.intermediate = 300, 64, 2, 4, 2, 128
        a.seq, a.batch, a.train_seconds = 128, 4, 12
    log(f"torch {torch.__version__} device {device}"
        f" {torch.cuda.get_device_name() if device == 'cuda' else ''}")

    limit = 2_000_000 if a.smoke else None
    train_docs = read_docs(os.path.join(a.text, "train.txt.gz"), limit)
    held_docs = read_docs(os.path.join(a.text, "heldout.txt.gz"), limit and limit // 4)
    with open(os.path.join(a.text, "heldout_excerpt.txt"), encoding="utf-8") as f:
        excerpt = f.read()
    log(f"text: {len(train_docs)} train documents ({sum(map(len, train_docs))} chars), "
        f"{len(held_docs)} held out ({sum(map(len, held_docs))} chars)")

    try:
        import tokenizers  # noqa: F401
        sample = list(train_docs)
        rng.shuffle(sample)
        budget, texts = 24_000_000, []
        for d in sample:
            texts.append(d)
            budget -= len(d)
            if budget <= 0:
                break
        tok = HfTokenizer.train(texts, a.vocab)
    except ImportError:
        if not a.smoke:
            raise
        tok = ByteTokenizer()
        a.vocab = tok.vocab_size
    a.vocab = tok.vocab_size
    eot, im_end = tok.special["<|endoftext|>"], tok.special["<|im_end|>"]
    log(f"tokenizer: vocab {tok.vocab_size}, specials {tok.special}")
    tok.save(a.out)

    chats = chat_samples(train_docs, rng, a.chat_share * sum(map(len, train_docs)))
    docs = train_docs + chats
    rng.shuffle(docs)
    train_ids = tokens_of(tok, docs, eot).to(device)
    held_ids = tokens_of(tok, held_docs, eot).to(device)
    log(f"tokens: train {len(train_ids)} ({len(chats)} dialogue samples), held out "
        f"{len(held_ids)}; {sum(map(len, docs)) / len(train_ids):.2f} chars/token")

    c = {"vocab_size": a.vocab, "hidden_size": a.hidden, "intermediate_size": a.intermediate,
         "num_hidden_layers": a.layers, "num_attention_heads": a.heads,
         "num_key_value_heads": a.kv_heads, "head_dim": a.hidden // a.heads,
         "rms_norm_eps": 1e-6, "rope_theta": 10000.0, "max_position_embeddings": a.seq}
    model = Qwen3(c).to(device)
    n_params = sum(p.numel() for p in model.hf_state_dict().values())
    log(f"model: {n_params} parameters ({n_params * 2 / 1e6:.1f} MB in bf16), config {c}")

    decay = [p for n, p in model.named_parameters() if p.dim() == 2]
    other = [p for n, p in model.named_parameters() if p.dim() != 2]
    groups = [{"params": decay, "weight_decay": 0.1}, {"params": other, "weight_decay": 0.0}]
    try:
        opt = torch.optim.AdamW(groups, lr=a.lr, betas=(0.9, 0.95), eps=1e-8,
                                fused=(device == "cuda"))
    except (TypeError, RuntimeError):
        opt = torch.optim.AdamW(groups, lr=a.lr, betas=(0.9, 0.95), eps=1e-8)
    if device == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    amp = torch.autocast("cuda", dtype=torch.bfloat16) if device == "cuda" else None

    step_fn = model
    if a.compile and device == "cuda" and hasattr(torch, "compile"):
        step_fn = torch.compile(model)

    T, B = a.seq, a.batch
    n_train = len(train_ids)
    gen = torch.Generator(device=device)
    gen.manual_seed(a.seed)

    def batch_of(ids, b, g):
        starts = torch.randint(0, len(ids) - T - 1, (b,), device=device, generator=g)
        idx = starts[:, None] + torch.arange(T + 1, device=device)[None]
        chunk = ids[idx].long()
        return chunk[:, :-1], chunk[:, 1:]

    eval_gen = torch.Generator(device=device)
    eval_gen.manual_seed(7)
    eval_batches = [batch_of(held_ids, B, eval_gen) for _ in range(4 if not a.smoke else 1)]

    @torch.no_grad()
    def held_loss():
        model.eval()
        tot = 0.0
        for x, y in eval_batches:
            if amp:
                with amp:
                    tot += model(x, y).item()
            else:
                tot += model(x, y).item()
        model.train()
        return tot / len(eval_batches)

    warmup = 30
    max_steps_epochs = int(a.max_epochs * n_train / (B * T))
    total_steps = None  # fixed once the step time is known
    step, t_train, best = 0, None, (float("inf"), None, 0)
    losses = []
    eval_every = 100
    while True:
        if step == warmup and total_steps is None:
            torch.cuda.synchronize() if device == "cuda" else None
            t_train = time.time()
        if total_steps is None and step == warmup + 20:
            if device == "cuda":
                torch.cuda.synchronize()
            per_step = (time.time() - t_train) / 20
            fit = int((a.train_seconds - (time.time() - t_first)) / per_step) + step
            total_steps = max(step + 1, min(fit, max_steps_epochs))
            log(f"step time {per_step * 1000:.1f} ms ({B * T / per_step / 1e6:.2f} M tok/s): "
                f"{total_steps} steps ({total_steps * B * T / n_train:.1f} epochs; "
                f"{fit} fit in the time, {max_steps_epochs} make {a.max_epochs} epochs)")
        if step == 0:
            t_first = time.time()
        ts = total_steps or 10 ** 9
        if step < warmup:
            lr = a.lr * (step + 1) / warmup
        else:
            prog = min(1.0, (step - warmup) / max(1, ts - warmup))
            lr = a.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * prog)))
        for g in opt.param_groups:
            g["lr"] = lr
        x, y = batch_of(train_ids, B, gen)
        try:
            if amp:
                with amp:
                    loss = step_fn(x, y)
            else:
                loss = step_fn(x, y)
            loss.backward()
        except Exception as e:  # torch.compile trouble: go on eagerly
            if step_fn is model:
                raise
            log(f"torch.compile failed ({type(e).__name__}: {str(e)[:300]}); running eagerly")
            opt.zero_grad(set_to_none=True)
            step_fn = model
            continue
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        step += 1
        if step % 10 == 0:
            losses.append((step, loss.item()))
        if step % eval_every == 0 or step == total_steps:
            hl = held_loss()
            log(f"step {step} lr {lr:.2e} train loss {loss.item():.3f} held-out loss {hl:.3f}")
            if hl < best[0]:
                best = (hl, {k: v.detach().clone() for k, v in model.state_dict().items()}, step)
        if total_steps is not None and step >= total_steps:
            break
    train_time = time.time() - t_first
    log(f"trained {step} steps in {train_time:.1f} s; best held-out loss {best[0]:.3f} "
        f"at step {best[2]}")
    if best[1] is not None:
        model.load_state_dict(best[1])

    # --- export -----------------------------------------------------------------------
    sd = {k: v.to(torch.bfloat16) for k, v in model.hf_state_dict().items()}
    write_safetensors(os.path.join(a.out, "model.safetensors"), sd)
    # Evaluate what was written: the bf16 weights, in f32.
    with torch.no_grad():
        for k, v in model.state_dict().items():
            if k in sd:
                v.copy_(sd[k].float())
    config = {
        "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3",
        "vocab_size": a.vocab, "hidden_size": a.hidden, "intermediate_size": a.intermediate,
        "num_hidden_layers": a.layers, "num_attention_heads": a.heads,
        "num_key_value_heads": a.kv_heads, "head_dim": c["head_dim"],
        "hidden_act": "silu", "max_position_embeddings": a.seq,
        "rms_norm_eps": c["rms_norm_eps"], "rope_theta": c["rope_theta"],
        "rope_parameters": {"rope_type": "default", "rope_theta": c["rope_theta"]},
        "attention_bias": False, "attention_dropout": 0.0, "tie_word_embeddings": True,
        "use_sliding_window": False, "initializer_range": 0.02,
        "bos_token_id": eot, "eos_token_id": [im_end, eot], "pad_token_id": eot,
        "torch_dtype": "bfloat16", "dtype": "bfloat16"}
    with open(os.path.join(a.out, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
        f.write("\n")
    with open(os.path.join(a.out, "generation_config.json"), "w") as f:
        json.dump({"bos_token_id": eot, "eos_token_id": [im_end, eot], "pad_token_id": eot,
                   "do_sample": True, "temperature": 0.7, "top_p": 0.9,
                   "repetition_penalty": 1.1}, f, indent=2)
        f.write("\n")
    added = {str(tok.special[s]): {"content": s, "lstrip": False, "normalized": False,
                                   "rstrip": False, "single_word": False, "special": True}
             for s in SPECIALS}
    with open(os.path.join(a.out, "tokenizer_config.json"), "w") as f:
        json.dump({"added_tokens_decoder": added, "bos_token": None, "eos_token": "<|im_end|>",
                   "pad_token": "<|endoftext|>", "unk_token": None,
                   "model_max_length": a.seq, "tokenizer_class": "PreTrainedTokenizerFast",
                   "clean_up_tokenization_spaces": False, "chat_template": CHAT_TEMPLATE},
                  f, indent=2)
        f.write("\n")

    # --- perplexity: this script's model and transformers' ------------------------------
    model.eval()
    own_logits = lambda x: model.logits(x)  # noqa: E731 (f32)
    held_text = "\n\n\n".join(held_docs) + "\n"
    evals = [("heldout_excerpt", excerpt, 256, 128), ("heldout_excerpt", excerpt, 1024, 512),
             ("heldout", held_text, 1024, 512)]
    if a.smoke:
        evals = [("heldout_excerpt", excerpt, 64, 32)]
    results = {"model": {"parameters": n_params, "config": c, "train_steps": step,
                         "train_seconds": round(train_time, 1), "best_step": best[2],
                         "train_tokens_per_epoch": n_train,
                         "held_out_loss": best[0], "final_train_losses": losses[-5:]},
               "perplexity": []}
    hf = None
    try:
        from transformers import AutoModelForCausalLM
        hf = AutoModelForCausalLM.from_pretrained(a.out, dtype=torch.float32).to(device).eval()
        log(f"transformers loaded {type(hf).__name__}")
    except Exception as e:  # noqa: BLE001
        log(f"transformers unavailable or failed: {type(e).__name__}: {str(e)[:400]}")
    for name, text, ctx, stride in evals:
        ids = tok.encode(text)
        ppl_own, n = perplexity(own_logits, ids, ctx, stride, device)
        entry = {"text": name, "ctx": ctx, "stride": stride, "text_tokens": len(ids),
                 "tokens_scored": n, "ppl_own_f32": ppl_own}
        if hf is not None:
            with torch.no_grad():
                ppl_hf, _ = perplexity(lambda x: hf(input_ids=x).logits, ids, ctx, stride, device)
            entry["ppl_transformers_f32"] = ppl_hf
        if name == "heldout_excerpt" and ctx == 256:
            entry["token_ids"] = ids
        log("perplexity", json.dumps({k: v for k, v in entry.items() if k != "token_ids"}))
        results["perplexity"].append(entry)

    # --- what the chat model says ------------------------------------------------------------
    @torch.no_grad()
    def reply(prompt, temperature, seed):
        g = torch.Generator(device=device)
        g.manual_seed(seed)
        ids = tok.encode(render_chat([{"role": "user", "content": prompt}], True))
        out = []
        for _ in range(80):
            x = torch.tensor(ids + out, device=device)[None][:, -a.seq:]
            logits = model.logits(x)[0, -1].float()
            if temperature == 0:
                nxt = int(logits.argmax())
            else:
                p = (logits / temperature).softmax(-1)
                sp, si = p.sort(descending=True)
                keep = sp.cumsum(0) - sp < 0.9
                sp = sp * keep
                nxt = int(si[torch.multinomial(sp / sp.sum(), 1, generator=g)])
            if nxt in (im_end, eot):
                break
            out.append(nxt)
        return tok.decode(out)

    samples = {}
    for prompt in ("Hello", "Hello!", "What is a database?", "Why is the sky blue?",
                   "Tell me about Python."):
        samples[prompt] = {"greedy": reply(prompt, 0, 0),
                           "t0.7": [reply(prompt, 0.7, s) for s in range(2)]}
        log(f"reply to {prompt!r}: {json.dumps(samples[prompt])}")
    results["samples"] = samples
    with open(os.path.join(a.out, "perplexity.json"), "w") as f:
        json.dump(results, f, indent=2)
        f.write("\n")
    log("done")


if __name__ == "__main__":
    main()
