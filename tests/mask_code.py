"""The masks as PyTorch (the mask editor's "Copy as PyTorch", `mha compute --scenario --out`'s masks.py)
run as written in torch and give the app's masks: for every preset file, and for every mask preset in
every scope and convention, plus hand-drawn cells with values other than 0 and -inf and hand-set key
padding, the snippet's attn_mask and key_padding_mask, merged as torch 1.13's
F.multi_head_attention_forward merges them, equal the attn_mask stage the app computed
(trace/attn_mask.npy), -inf for -inf and value for value.

    python3 tests/mask_code.py MHA SOURCE_DIR OUT_DIR

Exit 0: all match; 1: a snippet failed or differs; 77: torch or numpy is missing (skipped).
"""
import glob
import json
import os
import subprocess
import sys

try:
    import numpy as np
    import torch
except ImportError as e:  # ctest SKIP_RETURN_CODE
    print(f"skipped: {e} (bash tools/install_deps.sh --torch installs Debian's python3-torch)")
    sys.exit(77)


def merged(attn_mask, key_padding_mask, N, H, L, S):
    """torch 1.13's merge: key padding as (N·H, 1, S), or-ed into a bool mask or -inf into a float one,
    then a bool mask becomes 0 / -inf; broadcast to (N, H, L, S). None when neither is given."""
    m = attn_mask
    if m is not None and m.dim() == 2:
        m = m.unsqueeze(0)
    if key_padding_mask is not None:
        kpm = key_padding_mask.view(N, 1, 1, S).expand(-1, H, -1, -1).reshape(N * H, 1, S)
        if m is None:
            m = kpm
        elif m.dtype == torch.bool:
            m = m.logical_or(kpm)
        else:
            m = m.masked_fill(kpm, float("-inf"))
    if m is None:
        return None
    if m.dtype == torch.bool:
        m = torch.zeros_like(m, dtype=torch.float32).masked_fill_(m, float("-inf"))
    return m.to(torch.float32).expand(N * H, L, S).reshape(N, H, L, S)


def check(mha, scenario, out):
    subprocess.run([mha, "compute", "--scenario", scenario, "--out", out + "/", "--quiet"], check=True,
                   stdout=subprocess.DEVNULL)
    code = open(os.path.join(out, "masks.py")).read()
    names = {}
    exec(compile(code, scenario + " masks.py", "exec"), names)  # as a user pastes it
    d = json.load(open(os.path.join(out, "trace.json")))["dims"]
    N, H, L, S = d["N"], d["H"], d["L"], d["S"]
    got = merged(names["attn_mask"], names["key_padding_mask"], N, H, L, S)
    path = os.path.join(out, "trace", "attn_mask.npy")
    if not os.path.exists(path):
        return "the app has no mask but the snippet has one" if got is not None else None
    want = torch.from_numpy(np.load(path))
    if got is None:
        return "the snippet has no mask but the app has one"
    if tuple(got.shape) != tuple(want.shape):
        return f"shape {tuple(got.shape)} != the app's {tuple(want.shape)}"
    same = (got == want) | (torch.isnan(got) & torch.isnan(want))
    if not bool(same.all()):
        at = tuple(int(i) for i in (~same).nonzero()[0])
        return f"at {at}: snippet {float(got[at])}, app {float(want[at])}"
    return None


def main():
    mha, src, out = sys.argv[1], sys.argv[2], sys.argv[3]
    os.makedirs(out, exist_ok=True)
    cases = [(os.path.basename(p), json.load(open(p))) for p in sorted(glob.glob(f"{src}/assets/presets/*.json"))]
    base = {"format": "mha-studio-scenario", "version": 1, "seed": 3,
            "sizes": {"batch": 2, "tgt_len": 5, "src_len": 5, "embed_dim": 8, "num_heads": 2}}
    for preset in ["causal", "padding", "sliding_window", "block_diagonal", "prefix_lm", "random"]:
        for scope in ["shared", "per_batch", "per_head"]:
            for convention in ["torch_bool", "keep", "additive"]:
                s = dict(base, name=f"{preset} {scope} {convention}",
                         mask={"preset": preset, "scope": scope, "convention": convention})
                cases.append((s["name"], s))
    # Hand-drawn cells that only a float mask can hold, and key padding set by hand.
    cells = [0.0, -1.5, float("-inf"), 0.25, 2.0] * 10  # (N·H = 4, L, S) would be 100: per_batch (2, 5, 5)
    for convention in ["torch_bool", "keep", "additive"]:
        s = dict(base, name=f"custom {convention}",
                 mask={"preset": "custom", "scope": "per_batch", "convention": convention,
                       "cells": {"shape": [2, 5, 5], "data": [("-inf" if c == float("-inf") else c) for c in cells]},
                       "key_padding": {"shape": [2, 5], "data": [0, 0, 0, 0, 1, 0, 0, 1, 1, 0]}})
        cases.append((s["name"], s))
    failed = 0
    for k, (name, scenario) in enumerate(cases):
        path = os.path.join(out, f"case{k}.json")
        json.dump(scenario, open(path, "w"))
        try:
            why = check(mha, path, os.path.join(out, f"case{k}"))
        except Exception as e:  # a snippet that does not run, or a scenario the app refuses
            why = f"{type(e).__name__}: {e}"
        if why:
            failed += 1
            print(f"FAIL {name}: {why}")
    print(f"{len(cases) - failed} passed, {failed} failed (masks.py against the app's attn_mask)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
