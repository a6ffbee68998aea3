#!/usr/bin/python3
"""Random tiny Llama-family checkpoints in the Hugging Face layout, and torch's activations for them.

Writes tests/fixtures/llama/<variant>/ with config.json, the weights (model.safetensors, or shards
with model.safetensors.index.json) and expected/*.npy: every stage of every layer computed by a plain
torch forward written the way Hugging Face's LlamaForCausalLM computes it (modeling_llama.py:
LlamaRMSNorm in float32, the rotary embedding's inv_freq and cos/sin of cat(freqs, freqs),
apply_rotary_pos_emb with rotate_half, repeat_kv for grouped-query attention, eager attention with
head_dim**-0.5, the SwiGLU MLP, the final norm and the LM head). Weights are drawn in float32, rounded
to the storage dtype, and the forward runs on the rounded values in float32, as Hugging Face does
with torch_dtype=float32.

Variants (T = 8 tokens, 2 layers):
  gqa      : llama, 4 query heads over 2 key/value heads, untied lm_head, F32
  mqa      : llama, 4 query heads over 1 key/value head, tied, F16, rope_scaling linear (factor 2)
  qwen2    : qwen2, q/k/v biases, tied, BF16 in two shards
  head_dim : llama, head_dim 8 given explicitly with hidden_size 16 and 4 heads (not 16 / 4), F32
  mistral  : mistral, sliding_window 3 (shorter than the text), rope_theta 1e6, F32
  llama3   : llama, rope_scaling llama3 (each of its three frequency bands in use), attention_bias (o_proj
             too), 2 query heads over 1 key/value head, F32

Run: /usr/bin/python3 tools/gen_llama_fixtures.py  (Debian's python3-torch; deterministic)
     /usr/bin/python3 tools/gen_llama_fixtures.py --smollm2-135m DIR
       a checkpoint with SmolLM2-135M's shapes (hidden 576, 30 layers, 9 query heads over 3 key/value
       heads, intermediate 1536, vocabulary 49152, tied), random weights in BF16 (~270 MB), no
       tokenizer: for timing the runner on a real model's sizes.
"""
import argparse
import json
import math
import os
import shutil
import struct

import numpy as np
import torch

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "fixtures", "llama")
IDS = [1, 7, 3, 30, 12, 7, 25, 4]  # T = 8


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


def head_dim(cfg):
    return cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"]


def make_weights(cfg, gen, qkv_bias, o_bias):
    C, V, I = cfg["hidden_size"], cfg["vocab_size"], cfg["intermediate_size"]
    H, G, d = cfg["num_attention_heads"], cfg["num_key_value_heads"], head_dim(cfg)
    r = lambda *shape, s=0.3: torch.randn(*shape, generator=gen) * s
    w = {"model.embed_tokens.weight": r(V, C, s=0.5)}
    for l in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{l}."
        w[p + "input_layernorm.weight"] = 1 + r(C, s=0.1)
        w[p + "self_attn.q_proj.weight"] = r(H * d, C)  # nn.Linear: (out, in)
        w[p + "self_attn.k_proj.weight"] = r(G * d, C)
        w[p + "self_attn.v_proj.weight"] = r(G * d, C)
        w[p + "self_attn.o_proj.weight"] = r(C, H * d)
        if qkv_bias:
            for n, width in (("q", H * d), ("k", G * d), ("v", G * d)):
                w[p + f"self_attn.{n}_proj.bias"] = r(width, s=0.1)
        if o_bias:
            w[p + "self_attn.o_proj.bias"] = r(C, s=0.1)
        w[p + "post_attention_layernorm.weight"] = 1 + r(C, s=0.1)
        w[p + "mlp.gate_proj.weight"] = r(I, C)
        w[p + "mlp.up_proj.weight"] = r(I, C)
        w[p + "mlp.down_proj.weight"] = r(C, I)
    w["model.norm.weight"] = 1 + r(C, s=0.1)
    if not cfg["tie_word_embeddings"]:
        w["lm_head.weight"] = r(V, C, s=0.5)
    return w


def inv_freq_of(cfg):
    """LlamaRotaryEmbedding's inv_freq, with rope_scaling as _compute_*_parameters apply it."""
    d = head_dim(cfg)
    inv_freq = 1.0 / (cfg["rope_theta"] ** (torch.arange(0, d, 2, dtype=torch.int64).float() / d))
    rs = cfg.get("rope_scaling")
    if not rs:
        return inv_freq
    kind = rs.get("rope_type", rs.get("type"))
    if kind == "linear":
        return inv_freq / rs["factor"]
    assert kind == "llama3"
    factor, low, high = rs["factor"], rs["low_freq_factor"], rs["high_freq_factor"]
    old = rs["original_max_position_embeddings"]
    low_wavelen, high_wavelen = old / low, old / high
    wavelen = 2 * math.pi / inv_freq
    inv_freq_llama = torch.where(wavelen > low_wavelen, inv_freq / factor, inv_freq)
    smooth = (old / wavelen - low) / (high - low)
    smoothed = (1 - smooth) * inv_freq_llama / factor + smooth * inv_freq_llama
    medium = ~(wavelen < high_wavelen) * ~(wavelen > low_wavelen)
    return torch.where(medium, smoothed, inv_freq_llama)


def rms_norm(x, weight, eps):
    variance = x.to(torch.float32).pow(2).mean(-1, keepdim=True)
    return weight * (x * torch.rsqrt(variance + eps))


def rotate_half(x):
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2 :]
    return torch.cat((-x2, x1), dim=-1)


def forward(cfg, w, ids):
    """LlamaForCausalLM's forward, eager attention, every stage kept."""
    T, C = len(ids), cfg["hidden_size"]
    H, G, d = cfg["num_attention_heads"], cfg["num_key_value_heads"], head_dim(cfg)
    eps = cfg["rms_norm_eps"]
    inv_freq = inv_freq_of(cfg)
    position_ids = torch.arange(T)[None, :]
    freqs = (inv_freq[None, :, None].float() @ position_ids[:, None, :].float()).transpose(1, 2)[0]  # (T, d/2)
    emb = torch.cat((freqs, freqs), dim=-1)
    cos, sin = emb.cos(), emb.sin()  # (T, d)
    mask = torch.full((T, T), float("-inf")).triu(1)
    if cfg.get("sliding_window"):
        # Mistral: query i sees keys i - sliding_window < j <= i.
        i, j = torch.arange(T)[:, None], torch.arange(T)[None, :]
        mask = mask.masked_fill(j <= i - cfg["sliding_window"], float("-inf"))

    s = {k: [] for k in ["input_norm", "q", "k", "v", "q_rot", "k_rot", "scores", "attn_weights", "context",
                         "attn_output", "resid_mid", "post_norm", "mlp_hidden", "mlp_out"]}
    x = w["model.embed_tokens.weight"][torch.tensor(ids)]
    residual = [x]
    lin = lambda t, name: torch.nn.functional.linear(t, w[name + ".weight"], w.get(name + ".bias"))
    for l in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{l}."
        h = rms_norm(x, w[p + "input_layernorm.weight"], eps)
        q = lin(h, p + "self_attn.q_proj")  # (T, H·d)
        k = lin(h, p + "self_attn.k_proj")  # (T, G·d)
        v = lin(h, p + "self_attn.v_proj")
        qh = q.view(T, H, d).transpose(0, 1)  # (H, T, d)
        kh = k.view(T, G, d).transpose(0, 1)  # (G, T, d)
        vh = v.view(T, G, d).transpose(0, 1)
        q_rot = qh * cos + rotate_half(qh) * sin
        k_rot = kh * cos + rotate_half(kh) * sin
        k_rep = k_rot.repeat_interleave(H // G, dim=0)  # repeat_kv
        v_rep = vh.repeat_interleave(H // G, dim=0)
        scores = torch.matmul(q_rot, k_rep.transpose(1, 2)) * d ** -0.5  # (H, T, T)
        weights = torch.softmax(scores + mask, dim=-1, dtype=torch.float32)
        context = torch.matmul(weights, v_rep)  # (H, T, d)
        attn_output = lin(context.transpose(0, 1).reshape(T, H * d), p + "self_attn.o_proj")
        mid = x + attn_output
        post = rms_norm(mid, w[p + "post_attention_layernorm.weight"], eps)
        hidden = torch.nn.functional.silu(lin(post, p + "mlp.gate_proj")) * lin(post, p + "mlp.up_proj")
        mlp = lin(hidden, p + "mlp.down_proj")
        x = mid + mlp
        residual.append(x)
        for name, t in [("input_norm", h), ("q", q), ("k", k), ("v", v), ("q_rot", q_rot), ("k_rot", k_rot),
                        ("scores", scores), ("attn_weights", weights), ("context", context),
                        ("attn_output", attn_output), ("resid_mid", mid), ("post_norm", post),
                        ("mlp_hidden", hidden), ("mlp_out", mlp)]:
            s[name].append(t)
    out = {k: torch.stack(v) for k, v in s.items()}
    out["residual"] = torch.stack(residual)
    out["norm"] = rms_norm(x, w["model.norm.weight"], eps)
    head = w.get("lm_head.weight", w["model.embed_tokens.weight"])
    out["logits"] = out["norm"][-1] @ head.T
    out["rope_cos"], out["rope_sin"] = cos, sin
    return out


BASE = dict(vocab_size=32, hidden_size=16, intermediate_size=24, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, max_position_embeddings=64, rms_norm_eps=1e-6, rope_theta=10000.0,
            hidden_act="silu", tie_word_embeddings=False, attention_bias=False, torch_dtype="float32")

VARIANTS = {
    "gqa": dict(model_type="llama", architectures=["LlamaForCausalLM"]),
    "mqa": dict(model_type="llama", architectures=["LlamaForCausalLM"], num_key_value_heads=1,
                tie_word_embeddings=True, torch_dtype="float16", rope_scaling={"type": "linear", "factor": 2.0}),
    "qwen2": dict(model_type="qwen2", architectures=["Qwen2ForCausalLM"], tie_word_embeddings=True,
                  torch_dtype="bfloat16", use_sliding_window=False, sliding_window=4, max_window_layers=2),
    "head_dim": dict(model_type="llama", architectures=["LlamaForCausalLM"], head_dim=8),
    "mistral": dict(model_type="mistral", architectures=["MistralForCausalLM"], sliding_window=3,
                    rope_theta=1000000.0),
    # head_dim 8: four frequencies, whose wavelengths 6.3, 63, 628 and 6283 fall in the high, medium
    # and low bands of original_max_position_embeddings 64 with low_freq_factor 1, high_freq_factor 4.
    "llama3": dict(model_type="llama", architectures=["LlamaForCausalLM"], attention_bias=True,
                   num_attention_heads=2, num_key_value_heads=1,
                   rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                 "high_freq_factor": 4.0, "original_max_position_embeddings": 64}),
}
DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


def smollm2_135m(out):
    cfg = dict(BASE, model_type="llama", architectures=["LlamaForCausalLM"], vocab_size=49152, hidden_size=576,
               intermediate_size=1536, num_hidden_layers=30, num_attention_heads=9, num_key_value_heads=3,
               max_position_embeddings=8192, rms_norm_eps=1e-5, rope_theta=100000.0, tie_word_embeddings=True,
               torch_dtype="bfloat16")
    os.makedirs(out, exist_ok=True)
    w = make_weights(cfg, torch.Generator().manual_seed(0), False, False)
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2, sort_keys=True)
    write_safetensors(os.path.join(out, "model.safetensors"), w, torch.bfloat16)
    print(f"{out}: {sum(t.numel() for t in w.values())} parameters")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--smollm2-135m", metavar="DIR")
    args = ap.parse_args()
    if args.smollm2_135m:
        return smollm2_135m(args.smollm2_135m)
    torch.set_num_threads(1)
    for seed, (name, extra) in enumerate(VARIANTS.items()):
        cfg = dict(BASE, **extra)
        gen = torch.Generator().manual_seed(100 + seed)
        qkv_bias = cfg["model_type"] == "qwen2" or cfg["attention_bias"]
        o_bias = cfg["model_type"] != "qwen2" and cfg["attention_bias"]
        dtype = DTYPES[cfg["torch_dtype"]]
        stored = make_weights(cfg, gen, qkv_bias, o_bias)
        w = {k: t.to(dtype).to(torch.float32) for k, t in stored.items()}  # what the file holds, widened
        # Qwen2's sliding_window is only used with use_sliding_window; the runner reads it as Hugging
        # Face does, so this fixture's window (4, shorter than the text) must change nothing.
        run_cfg = dict(cfg)
        if cfg["model_type"] == "qwen2":
            run_cfg.pop("sliding_window")
        with torch.no_grad():
            out = forward(run_cfg, w, IDS)
        d = os.path.join(ROOT, name)
        shutil.rmtree(d, ignore_errors=True)
        os.makedirs(os.path.join(d, "expected"))
        with open(os.path.join(d, "config.json"), "w") as f:
            json.dump(cfg, f, indent=2, sort_keys=True)
        if name == "qwen2":  # two shards and their index
            names = sorted(stored)
            parts = [names[: len(names) // 2], names[len(names) // 2 :]]
            weight_map = {}
            for i, part in enumerate(parts):
                fname = f"model-{i + 1:05d}-of-00002.safetensors"
                write_safetensors(os.path.join(d, fname), {n: stored[n] for n in part}, dtype)
                weight_map.update({n: fname for n in part})
            with open(os.path.join(d, "model.safetensors.index.json"), "w") as f:
                json.dump({"metadata": {}, "weight_map": weight_map}, f, indent=2, sort_keys=True)
        else:
            write_safetensors(os.path.join(d, "model.safetensors"), stored, dtype)
        np.save(os.path.join(d, "expected", "input_ids.npy"), np.array(IDS, dtype=np.int64))
        for k, t in out.items():
            np.save(os.path.join(d, "expected", k + ".npy"), t.numpy().astype(np.float32))
        size = sum(os.path.getsize(os.path.join(r, f)) for r, _, fs in os.walk(d) for f in fs)
        top = torch.topk(out["logits"], 3)
        print(f"{name}: {cfg['model_type']}, H={cfg['num_attention_heads']} G={cfg['num_key_value_heads']} "
              f"d={head_dim(cfg)}, {cfg['torch_dtype']}, top ids {top.indices.tolist()}; {size} bytes")


if __name__ == "__main__":
    main()
