#!/usr/bin/python3
"""Random tiny GPT-2 checkpoints in the Hugging Face layout, and torch's activations for them.

Writes tests/fixtures/gpt2/<variant>/ with config.json, model.safetensors, vocab.json, merges.txt
and expected/*.npy: every stage of every layer (residual stream, ln_1, q, k, v, attention weights,
context, attention output, ln_2, MLP hidden and output, ln_f, last-position logits) computed by a
plain torch GPT-2 written the way Hugging Face's GPT2LMHeadModel computes it. Variants:
  f32   : F32 weights under "transformer." names, tied LM head, n_inner null (4·n_embd)
  f16   : F16 weights without the prefix, an untied lm_head.weight, n_inner 48, the attn.bias and
          attn.masked_bias buffers older checkpoints carry
  bf16  : BF16 weights in two shards with model.safetensors.index.json
The tokenizer is a small byte-level BPE in GPT-2's file format (256 bytes, a few merges, <|endoftext|>).

Run: /usr/bin/python3 tools/gen_model_fixtures.py  (Debian's python3-torch; deterministic)
     /usr/bin/python3 tools/gen_model_fixtures.py --gpt2-small DIR
       a GPT-2-small-sized checkpoint (124M parameters, random weights, F32, ~500 MB) for
       `mha bench --model DIR` and tools/bench_vs_torch.py --model DIR; GPT-2's real vocabulary
       sizes, n_positions 1024, no tokenizer (benchmarks use token ids).
"""
import json
import math
import os
import struct

import numpy as np
import torch

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "fixtures", "gpt2")
TEXT = "the cat sat on the mat, then the cat ran"


def bytes_to_unicode():
    """GPT-2's map from bytes to printable characters (printable bytes first, in byte order)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, [chr(c) for c in cs]))


def tokenizer_files():
    """A 256-byte vocabulary plus merges for a few English pieces, then <|endoftext|>."""
    b2u = bytes_to_unicode()
    vocab = {ch: i for i, ch in enumerate(b2u.values())}
    merges = [("Ġ", "t"), ("h", "e"), ("Ġt", "he"), ("a", "t"), ("Ġc", "at"), ("Ġ", "c"), ("Ġ", "s"),
              ("Ġs", "at"), ("Ġ", "m"), ("Ġm", "at"), ("o", "n"), ("Ġ", "on"), ("t", "he")]
    for a, b in merges:
        vocab[a + b] = len(vocab)
    vocab["<|endoftext|>"] = len(vocab)
    return vocab, merges


def bpe_encode(text, vocab, merges):
    """GPT-2's encoder restricted to what the fixture text needs (ASCII words, spaces, punctuation)."""
    import re
    b2u = bytes_to_unicode()
    ranks = {m: i for i, m in enumerate(merges)}
    ids = []
    for word in re.findall(r"'s|'t|'re|'ve|'m|'ll|'d| ?[A-Za-z]+| ?[0-9]+| ?[^\sA-Za-z0-9]+|\s+(?!\S)|\s+", text):
        parts = [b2u[b] for b in word.encode("utf-8")]
        while len(parts) > 1:
            pairs = [(ranks.get((parts[i], parts[i + 1]), 1 << 30), i) for i in range(len(parts) - 1)]
            rank, i = min(pairs)
            if rank == 1 << 30:
                break
            a, b = parts[i], parts[i + 1]
            merged, j = [], 0
            while j < len(parts):
                if j < len(parts) - 1 and parts[j] == a and parts[j + 1] == b:
                    merged.append(a + b)
                    j += 2
                else:
                    merged.append(parts[j])
                    j += 1
            parts = merged
        ids += [vocab[p] for p in parts]
    return ids


def write_safetensors(path, tensors, dtype):
    """The safetensors format: 8-byte little-endian header length, JSON header, data (name order)."""
    names = sorted(tensors)
    header, blobs, offset = {}, [], 0
    st_dtype = {torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16"}[dtype]
    for name in names:
        t = tensors[name].to(dtype).contiguous()
        raw = t.view(torch.int16).numpy().tobytes() if dtype == torch.bfloat16 else t.numpy().tobytes()
        header[name] = {"dtype": st_dtype, "shape": list(t.shape), "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    text = json.dumps(header, separators=(",", ":"))
    text += " " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text.encode())
        for b in blobs:
            f.write(b)


def make_weights(cfg, gen):
    C, V, P, L = cfg["n_embd"], cfg["vocab_size"], cfg["n_positions"], cfg["n_layer"]
    inner = cfg["n_inner"] or 4 * C
    r = lambda *shape, s=0.2: torch.randn(*shape, generator=gen) * s
    w = {"wte.weight": r(V, C, s=0.5), "wpe.weight": r(P, C, s=0.5)}
    for l in range(L):
        p = f"h.{l}."
        w[p + "ln_1.weight"] = 1 + r(C, s=0.1)
        w[p + "ln_1.bias"] = r(C, s=0.1)
        w[p + "attn.c_attn.weight"] = r(C, 3 * C, s=0.3)  # Conv1D: [in, out]
        w[p + "attn.c_attn.bias"] = r(3 * C, s=0.1)
        w[p + "attn.c_proj.weight"] = r(C, C)
        w[p + "attn.c_proj.bias"] = r(C, s=0.1)
        w[p + "ln_2.weight"] = 1 + r(C, s=0.1)
        w[p + "ln_2.bias"] = r(C, s=0.1)
        w[p + "mlp.c_fc.weight"] = r(C, inner)
        w[p + "mlp.c_fc.bias"] = r(inner, s=0.1)
        w[p + "mlp.c_proj.weight"] = r(inner, C)
        w[p + "mlp.c_proj.bias"] = r(C, s=0.1)
    w["ln_f.weight"] = 1 + r(C, s=0.1)
    w["ln_f.bias"] = r(C, s=0.1)
    if not cfg["tie_word_embeddings"]:
        w["lm_head.weight"] = r(V, C, s=0.5)
    return w


def gelu_new(x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))


def forward(cfg, w, ids, knockouts=(), ablation="zero"):
    """GPT2LMHeadModel's forward in plain torch, every activation kept (names as the engine's GPT2Run).

    knockouts: (layer, head) pairs whose context (hook_z, (T, d_k)) is replaced before c_proj: by
    zeros (ablation "zero") or by its mean over the T positions ("mean"), the layers after following.
    """
    C, H, L = cfg["n_embd"], cfg["n_head"], cfg["n_layer"]
    dk = C // H
    eps = cfg["layer_norm_epsilon"]
    T = len(ids)
    ln = lambda x, p: torch.nn.functional.layer_norm(x, (C,), w[p + ".weight"], w[p + ".bias"], eps)
    x = w["wte.weight"][ids] + w["wpe.weight"][:T]
    out = {k: [] for k in ["residual", "ln_1", "q", "k", "v", "attn_weights", "context", "attn_output",
                           "resid_mid", "ln_2", "mlp_hidden", "mlp_out"]}
    causal = torch.tril(torch.ones(T, T, dtype=torch.bool))
    for l in range(L):
        p = f"h.{l}."
        out["residual"].append(x)
        a_in = ln(x, p + "ln_1")
        qkv = a_in @ w[p + "attn.c_attn.weight"] + w[p + "attn.c_attn.bias"]
        q, k, v = qkv.split(C, dim=-1)
        heads = lambda t: t.view(T, H, dk).transpose(0, 1)  # (H, T, dk)
        s = heads(q) @ heads(k).transpose(-1, -2) / math.sqrt(dk)
        s = torch.where(causal, s, torch.tensor(torch.finfo(s.dtype).min))
        att = torch.softmax(s, dim=-1)
        ctx = att @ heads(v)  # (H, T, dk)
        for kl, kh in knockouts:
            if kl == l:
                ctx[kh] = 0 if ablation == "zero" else ctx[kh].mean(dim=0, keepdim=True).expand(T, dk)
        a_out = ctx.transpose(0, 1).reshape(T, C) @ w[p + "attn.c_proj.weight"] + w[p + "attn.c_proj.bias"]
        mid = x + a_out
        m_in = ln(mid, p + "ln_2")
        hidden = gelu_new(m_in @ w[p + "mlp.c_fc.weight"] + w[p + "mlp.c_fc.bias"])
        m_out = hidden @ w[p + "mlp.c_proj.weight"] + w[p + "mlp.c_proj.bias"]
        x = mid + m_out
        for name, t in [("ln_1", a_in), ("q", q), ("k", k), ("v", v), ("attn_weights", att), ("context", ctx),
                        ("attn_output", a_out), ("resid_mid", mid), ("ln_2", m_in), ("mlp_hidden", hidden),
                        ("mlp_out", m_out)]:
            out[name].append(t)
    out["residual"].append(x)
    res = {k: torch.stack(v) for k, v in out.items()}
    res["ln_f"] = ln(x, "ln_f")
    head = w["lm_head.weight"] if "lm_head.weight" in w else w["wte.weight"]
    res["logits"] = res["ln_f"][-1] @ head.T
    return res


def gpt2_small(out):
    cfg = {"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"], "vocab_size": 50257, "n_positions": 1024,
           "n_embd": 768, "n_layer": 12, "n_head": 12, "n_inner": None, "activation_function": "gelu_new",
           "layer_norm_epsilon": 1e-5, "tie_word_embeddings": True, "bos_token_id": 50256, "eos_token_id": 50256}
    gen = torch.Generator().manual_seed(0)
    w = make_weights(cfg, gen)
    w = {k: t * 0.1 if t.dim() == 2 else t for k, t in w.items()}  # GPT-2-like scale: std ~0.02
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    write_safetensors(os.path.join(out, "model.safetensors"), {"transformer." + k: t for k, t in w.items()},
                      torch.float32)
    print(f"wrote {out}: {sum(t.numel() for t in w.values())} parameters")


def main():
    import sys
    if len(sys.argv) == 3 and sys.argv[1] == "--gpt2-small":
        gpt2_small(sys.argv[2])
        return
    torch.manual_seed(0)
    vocab, merges = tokenizer_files()
    ids = bpe_encode(TEXT, vocab, merges)
    variants = {
        "f32": dict(dtype=torch.float32, prefix="transformer.", n_inner=None, tie=True, buffers=False, shards=1),
        "f16": dict(dtype=torch.float16, prefix="", n_inner=48, tie=False, buffers=True, shards=1),
        "bf16": dict(dtype=torch.bfloat16, prefix="transformer.", n_inner=None, tie=True, buffers=False, shards=2),
    }
    for seed, (name, v) in enumerate(variants.items()):
        gen = torch.Generator().manual_seed(seed)
        cfg = {"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"], "vocab_size": len(vocab),
               "n_positions": 24, "n_embd": 32, "n_layer": 3, "n_head": 4, "n_inner": v["n_inner"],
               "activation_function": "gelu_new", "layer_norm_epsilon": 1e-5,
               "tie_word_embeddings": v["tie"], "bos_token_id": len(vocab) - 1, "eos_token_id": len(vocab) - 1}
        w = make_weights(cfg, gen)
        # The stored (rounded) weights are what the engine reads: torch computes on those, in float32.
        w = {k: t.to(v["dtype"]).to(torch.float32) for k, t in w.items()}
        d = os.path.join(ROOT, name)
        os.makedirs(os.path.join(d, "expected"), exist_ok=True)
        with open(os.path.join(d, "config.json"), "w") as f:
            json.dump(cfg, f, indent=2)
        with open(os.path.join(d, "vocab.json"), "w") as f:
            json.dump(vocab, f, ensure_ascii=False)
        with open(os.path.join(d, "merges.txt"), "w") as f:
            f.write("#version: 0.2\n" + "".join(f"{a} {b}\n" for a, b in merges))
        stored = {}
        for k, t in w.items():
            stored[k if k == "lm_head.weight" else v["prefix"] + k] = t
        if v["buffers"]:
            T = cfg["n_positions"]
            for l in range(cfg["n_layer"]):
                stored[f"h.{l}.attn.bias"] = torch.tril(torch.ones(T, T)).view(1, 1, T, T)
                stored[f"h.{l}.attn.masked_bias"] = torch.tensor(-1e4)
        if v["shards"] == 1:
            write_safetensors(os.path.join(d, "model.safetensors"), stored, v["dtype"])
        else:
            names = sorted(stored)
            half = len(names) // 2
            weight_map = {}
            for i, part in enumerate([names[:half], names[half:]]):
                fname = f"model-{i + 1:05d}-of-00002.safetensors"
                write_safetensors(os.path.join(d, fname), {n: stored[n] for n in part}, v["dtype"])
                weight_map.update({n: fname for n in part})
            with open(os.path.join(d, "model.safetensors.index.json"), "w") as f:
                json.dump({"metadata": {}, "weight_map": weight_map}, f, indent=2)
        with torch.no_grad():
            res = forward(cfg, w, ids)
        np.save(os.path.join(d, "expected", "input_ids.npy"), np.array(ids, dtype=np.int64))
        with open(os.path.join(d, "expected", "text.txt"), "w") as f:
            f.write(TEXT)
        for k, t in res.items():
            np.save(os.path.join(d, "expected", k + ".npy"), t.numpy().astype(np.float32))
        top = torch.topk(torch.softmax(res["logits"].double(), -1), 5)
        print(f"{name}: T={len(ids)} ids={ids} top5={top.indices.tolist()}")


if __name__ == "__main__":
    main()
