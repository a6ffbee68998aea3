#!/usr/bin/python3
"""torch's forward of the shipped model with heads knocked out, for the engine's knock-out tests.

Writes tests/fixtures/gpt2_knockout/: meta.json (the model folder and its weights' sha256, the text,
the cases) and per case expected/<case>.<stage>.npy: the last position's logits, the residual stream
before every block and after the last (n_layer + 1, T, C), every layer's attention weights
(n_layer, H, T, T) and per-head context as the block used it (n_layer, H, T, d_k). Each case zeroes
or mean-ablates the contexts of some heads (TransformerLens's head ablation on hook_z: the mean is
over this sentence's T positions); the plain forward is the case with none.

Run: /usr/bin/python3 tools/gen_knockout_fixture.py  (Debian's python3-torch; deterministic)
"""
import hashlib
import json
import os
import struct

import numpy as np
import torch

from gen_model_fixtures import bpe_encode, forward

HERE = os.path.dirname(os.path.abspath(__file__))
MODEL = os.path.join("assets", "models", "tiny-fortunes")
OUT = os.path.join(HERE, "..", "tests", "fixtures", "gpt2_knockout")
TEXT = "the old man walked to the river. the old man walked to the"
# name: (heads knocked out as (layer, head), ablation)
CASES = {
    "none": ((), "zero"),
    "zero_0.1": (((0, 1),), "zero"),
    "mean_0.1_0.3": (((0, 1), (0, 3)), "mean"),
    # all but head 2 at layer 0, and head 3 of the last layer
    "zero_all_but_0.2_and_1.3": (((0, 0), (0, 1), (0, 3), (1, 3)), "zero"),
}


def read_safetensors(path):
    """F32/F16 tensors by name, as float32 (the engine computes on the stored values in float32)."""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, h in header.items():
        if name == "__metadata__":
            continue
        dtype = {"F32": np.float32, "F16": np.float16}[h["dtype"]]
        a, b = h["data_offsets"]
        out[name] = torch.from_numpy(np.frombuffer(data[a:b], dtype=dtype).astype(np.float32).reshape(h["shape"]))
    return out


def main():
    root = os.path.join(HERE, "..")
    folder = os.path.join(root, MODEL)
    with open(os.path.join(folder, "config.json")) as f:
        cfg = json.load(f)
    weights_path = os.path.join(folder, "model.safetensors")
    with open(weights_path, "rb") as f:
        sha = hashlib.sha256(f.read()).hexdigest()
    w = {k[len("transformer."):] if k.startswith("transformer.") else k: t
         for k, t in read_safetensors(weights_path).items()}
    with open(os.path.join(folder, "vocab.json")) as f:
        vocab = json.load(f)
    with open(os.path.join(folder, "merges.txt")) as f:
        merges = [tuple(line.split()) for line in f.read().splitlines()[1:] if line.strip()]
    ids = bpe_encode(TEXT, vocab, merges)
    os.makedirs(os.path.join(OUT, "expected"), exist_ok=True)
    np.save(os.path.join(OUT, "expected", "input_ids.npy"), np.array(ids, dtype=np.int64))
    meta = {"model": MODEL, "model_sha256": sha, "text": TEXT, "cases": {}}
    for name, (heads, ablation) in CASES.items():
        with torch.no_grad():
            res = forward(cfg, w, ids, knockouts=heads, ablation=ablation)
        for stage in ["logits", "residual", "attn_weights", "context"]:
            np.save(os.path.join(OUT, "expected", f"{name}.{stage}.npy"), res[stage].numpy().astype(np.float32))
        top = torch.topk(torch.softmax(res["logits"].double(), -1), 5)
        meta["cases"][name] = {"knockouts": [list(h) for h in heads], "ablation": ablation,
                               "top5_ids": top.indices.tolist()}
        print(f"{name}: top5 ids {top.indices.tolist()} p {[round(p, 4) for p in top.values.tolist()]}")
    with open(os.path.join(OUT, "meta.json"), "w") as f:
        json.dump(meta, f, indent=2)
    print(f"T={len(ids)} ids={ids}")


if __name__ == "__main__":
    main()
