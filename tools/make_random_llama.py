#!/usr/bin/python3
"""A Llama checkpoint folder with a real model's shapes and random weights, for timing the runner.

Writes DIR/config.json and DIR/model.safetensors in the Hugging Face layout (LlamaForCausalLM's names:
model.embed_tokens.weight, model.layers.N.self_attn.q_proj.weight, ..., model.norm.weight, and
lm_head.weight when the head is untied). Weights are drawn from N(0, 0.02) (Hugging Face's
initializer_range), the RMSNorm weights near 1, and stored in the chosen dtype. No tokenizer is
written: the benchmark feeds token ids.

Drawing a billion normal numbers takes minutes on a small CPU, so one pool of 2^24 draws is made and
each chunk of each tensor is a slice of it at a random offset: the values have the distribution's
statistics, and no two matrices share a layout. The file is written chunk by chunk, so a 2.5 GB
checkpoint needs well under 1 GB of memory. Put the big ones outside the repository (e.g. under /tmp).

Presets (the published config.json's shapes and RoPE settings):
  llama-3.2-1b : hidden 2048, 16 layers, 32 query heads over 8 key/value heads, head_dim 64,
                 intermediate 8192, vocabulary 128256, tied, rope_theta 500000 with llama3 scaling
                 (1.24 B parameters, 2.47 GB in BF16)
  smollm2-135m : hidden 576, 30 layers, 9 query heads over 3 key/value heads, intermediate 1536,
                 vocabulary 49152, tied, rope_theta 100000 (135 M parameters, 269 MB in BF16)

Run: /usr/bin/python3 tools/make_random_llama.py --preset llama-3.2-1b /tmp/llama-3.2-1b-random
     /usr/bin/python3 tools/make_random_llama.py --preset smollm2-135m --dtype float16 /tmp/smollm2-f16
     /usr/bin/python3 tools/make_random_llama.py --preset smollm2-135m --set tie_word_embeddings=false DIR
"""
import argparse
import json
import os
import struct

import torch

PRESETS = {
    "llama-3.2-1b": dict(
        vocab_size=128256, hidden_size=2048, intermediate_size=8192, num_hidden_layers=16,
        num_attention_heads=32, num_key_value_heads=8, head_dim=64, max_position_embeddings=131072,
        rms_norm_eps=1e-5, rope_theta=500000.0, tie_word_embeddings=True, bos_token_id=128000,
        eos_token_id=128001,
        rope_scaling={"rope_type": "llama3", "factor": 32.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                      "original_max_position_embeddings": 8192}),
    "smollm2-135m": dict(
        vocab_size=49152, hidden_size=576, intermediate_size=1536, num_hidden_layers=30,
        num_attention_heads=9, num_key_value_heads=3, head_dim=64, max_position_embeddings=8192,
        rms_norm_eps=1e-5, rope_theta=100000.0, tie_word_embeddings=True, bos_token_id=0, eos_token_id=0,
        rope_scaling=None),
}
DTYPES = {"bfloat16": (torch.bfloat16, "BF16"), "float16": (torch.float16, "F16"), "float32": (torch.float32, "F32")}
POOL = 1 << 24  # normal draws made once
CHUNK = 1 << 22  # elements written at a time


def tensor_shapes(cfg):
    """(name, shape, kind) in file order; kind "norm" for the RMSNorm weights, "matrix" otherwise."""
    C, I, V = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"]
    d = cfg.get("head_dim") or C // cfg["num_attention_heads"]
    q, kv = cfg["num_attention_heads"] * d, cfg["num_key_value_heads"] * d
    out = [("model.embed_tokens.weight", (V, C), "matrix")]
    for l in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{l}."
        out += [(p + "input_layernorm.weight", (C,), "norm"),
                (p + "self_attn.q_proj.weight", (q, C), "matrix"),
                (p + "self_attn.k_proj.weight", (kv, C), "matrix"),
                (p + "self_attn.v_proj.weight", (kv, C), "matrix"),
                (p + "self_attn.o_proj.weight", (C, q), "matrix"),
                (p + "post_attention_layernorm.weight", (C,), "norm"),
                (p + "mlp.gate_proj.weight", (I, C), "matrix"),
                (p + "mlp.up_proj.weight", (I, C), "matrix"),
                (p + "mlp.down_proj.weight", (C, I), "matrix")]
    out.append(("model.norm.weight", (C,), "norm"))
    if not cfg["tie_word_embeddings"]:
        out.append(("lm_head.weight", (V, C), "matrix"))
    return out


def write(folder, cfg, dtype_name, seed):
    dtype, st_dtype = DTYPES[dtype_name]
    size = torch.tensor([], dtype=dtype).element_size()
    shapes = tensor_shapes(cfg)
    header, offset = {}, 0
    for name, shape, _ in shapes:
        n = 1
        for s in shape:
            n *= s
        header[name] = {"dtype": st_dtype, "shape": list(shape), "data_offsets": [offset, offset + n * size]}
        offset += n * size
    header["__metadata__"] = {"format": "pt"}
    text = json.dumps(header, separators=(",", ":"))
    text += " " * ((8 - len(text) % 8) % 8)  # the data starts 8-byte aligned
    os.makedirs(folder, exist_ok=True)
    gen = torch.Generator().manual_seed(seed)
    pool = torch.randn(POOL + CHUNK, generator=gen) * 0.02
    matrix_pool, norm_pool = pool.to(dtype), (pool + 1.0).to(dtype)
    if dtype == torch.bfloat16:  # numpy has no bfloat16: its bits
        matrix_pool, norm_pool = matrix_pool.view(torch.int16), norm_pool.view(torch.int16)
    matrix_pool, norm_pool = matrix_pool.numpy(), norm_pool.numpy()
    path = os.path.join(folder, "model.safetensors")
    with open(path + ".tmp", "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text.encode())
        for name, shape, kind in shapes:
            n = 1
            for s in shape:
                n *= s
            src = norm_pool if kind == "norm" else matrix_pool
            for start in range(0, n, CHUNK):
                m = min(CHUNK, n - start)
                at = int(torch.randint(0, POOL, (1,), generator=gen))
                f.write(src[at:at + m].tobytes())
    os.replace(path + ".tmp", path)
    config = dict(cfg, model_type="llama", architectures=["LlamaForCausalLM"], hidden_act="silu",
                  attention_bias=False, mlp_bias=False, torch_dtype=dtype_name, initializer_range=0.02)
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(config, f, indent=2, sort_keys=True)
    params = sum(header[k]["data_offsets"][1] - header[k]["data_offsets"][0] for k in header if k != "__metadata__")
    print(f"{folder}: {params // size} parameters, {os.path.getsize(path) / 1e9:.3f} GB of {dtype_name}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("folder", help="where to write config.json and model.safetensors")
    ap.add_argument("--preset", choices=sorted(PRESETS), default="smollm2-135m")
    ap.add_argument("--dtype", choices=sorted(DTYPES), default="bfloat16")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--set", action="append", default=[], metavar="KEY=JSON",
                    help="override a config.json field, e.g. num_hidden_layers=2 or tie_word_embeddings=false")
    args = ap.parse_args()
    cfg = dict(PRESETS[args.preset])
    for item in args.set:
        key, _, value = item.partition("=")
        if key not in cfg:
            ap.error(f"--set {item}: {key} is not a field of the preset ({', '.join(sorted(cfg))})")
        cfg[key] = json.loads(value)
    torch.set_num_threads(1)
    write(args.folder, cfg, args.dtype, args.seed)


if __name__ == "__main__":
    main()
