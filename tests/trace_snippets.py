"""Runs every stage's "torch" formula from `mha compute --out DIR`'s trace.json in torch, in order, and
compares each result with the stage the app computed (DIR/trace/<stage>.npy).

    python3 tests/trace_snippets.py OUT_DIR [WEIGHTS_DIR]

The formulas are what the Pipeline and Heads views show as PyTorch: they must run as written. The
names they use are defined here as their notes define them: query, key, value (batch-first), W_q,
W_k, W_v, b_q, b_k, b_v (rows of in_proj_weight / in_proj_bias, or the separate q/k/v_proj_weight),
bias_k, bias_v, out_proj (.weight, .bias), N, L, S, E, H, G, d_k, num_heads, and attn_mask, the merged
additive (N, H, L, S') mask, which is an input here (its trace formula is prose). Each stage is
computed from the formulas' own earlier results, not from the app's, so an error carries forward.
Without weight files (a --scenario run) q, k and v are inputs as well.
Exit 0: all match; 1: a formula failed or differs; 77: torch or numpy is missing (skipped).
"""
import json
import math
import os
import sys

try:
    import numpy as np
    import torch
    import torch.nn.functional as F
except ImportError as e:  # ctest SKIP_RETURN_CODE
    print(f"skipped: {e} (bash tools/install_deps.sh --torch installs Debian's python3-torch)")
    sys.exit(77)


def load(folder, name):
    path = os.path.join(folder, name + ".npy")
    return torch.from_numpy(np.load(path)) if os.path.exists(path) else None


def main():
    out = sys.argv[1]
    weights_dir = sys.argv[2] if len(sys.argv) > 2 else out
    meta = json.load(open(os.path.join(out, "trace.json")))
    d = meta["dims"]
    N, L, S, E, H, G, d_k = d["N"], d["L"], d["S"], d["E"], d["H"], d["num_kv_heads"], d["d_k"]
    kv = G * d_k

    def weight(name):
        w = load(out, name)
        return w if w is not None else load(weights_dir, name)

    ns = {"torch": torch, "F": F, "math": math, "N": N, "L": L, "S": S, "E": E, "H": H, "G": G,
          "d_k": d_k, "num_heads": H}
    in_w, in_b = weight("in_proj_weight"), weight("in_proj_bias")
    if in_w is not None:
        ns["W_q"], ns["W_k"], ns["W_v"] = in_w[:E], in_w[E:E + kv], in_w[E + kv:]
    else:
        ns["W_q"], ns["W_k"], ns["W_v"] = (weight(n) for n in ("q_proj_weight", "k_proj_weight", "v_proj_weight"))
    if in_b is not None:
        ns["b_q"], ns["b_k"], ns["b_v"] = in_b[:E], in_b[E:E + kv], in_b[E + kv:]
    else:
        ns["b_q"] = ns["b_k"] = ns["b_v"] = None
    ns["bias_k"], ns["bias_v"] = weight("bias_k"), weight("bias_v")

    class OutProj:
        weight = load(out, "out_proj.weight")

    if OutProj.weight is None:
        OutProj.weight = load(weights_dir, "out_proj.weight")
    OutProj.bias = weight("out_proj.bias")
    ns["out_proj"] = OutProj

    # Without the weights (a --scenario run writes none), the projections are inputs too.
    inputs = ("query", "key", "value", "attn_mask")
    if ns["W_q"] is None:
        inputs += ("q", "k", "v")
    if OutProj.weight is None:
        inputs += ("output",)
    failures = 0
    for st in meta["stages"]:
        name, formula = st["name"], st["torch"]
        expected = torch.from_numpy(np.load(os.path.join(out, "trace", name + ".npy")))
        if name in inputs:
            ns[name] = expected  # inputs (attn_mask: the merged mask the note describes)
            continue
        try:
            got = eval(formula, ns)
        except Exception as e:  # a formula that does not run is the bug this test is for
            print(f"FAIL {name}: `{formula}` raised {type(e).__name__}: {e}")
            failures += 1
            continue
        ns[name] = got
        if tuple(got.shape) != tuple(expected.shape):
            print(f"FAIL {name}: `{formula}` has shape {tuple(got.shape)}, the app's {tuple(expected.shape)}")
            failures += 1
            continue
        g, x = got.double(), expected.double()
        # NaN and ±inf (blocked scores) must sit in the same places with the same values.
        nan_same = torch.equal(torch.isnan(g), torch.isnan(x)) and torch.equal(g[torch.isinf(x)], x[torch.isinf(x)])
        finite = torch.isfinite(x)
        diff = (g[finite] - x[finite]).abs()
        tol = 1e-5 + 1e-4 * x[finite].abs()
        worst = float(diff.max()) if diff.numel() else 0.0
        if not nan_same or bool((diff > tol).any()):
            print(f"FAIL {name}: `{formula}` differs from the app's values (max |diff| {worst:.3g}, "
                  f"NaN/inf positions {'match' if nan_same else 'differ'})")
            failures += 1
        else:
            print(f"ok   {name}: `{formula}` (max |diff| {worst:.2g})")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
