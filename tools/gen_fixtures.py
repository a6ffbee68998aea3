#!/usr/bin/python3
"""Reference fixtures for MHA Studio: torch.nn.MultiheadAttention (torch 1.13), stage by stage.

Run:  /usr/bin/python3 tools/gen_fixtures.py [CASE...]   (no CASE: every case)

Deletes and rewrites every tests/fixtures/<case>/ directory (README.md is kept) and prints one
line per case. For each case it
  * builds the inputs and the module weights (seeded, deterministic),
  * calls nn.MultiheadAttention (eval, no_grad) and saves what it returns (expected/module_*),
  * recomputes every stage with torch ops that follow F.multi_head_attention_forward line by
    line (in torch's own (L, N, E) layout, so the arithmetic is the module's) and saves them in
    batch-first, batched layout (expected/<stage>.npy),
  * asserts that the recomputed output / attention weights equal the module's (torch.equal, NaN
    positions compared as equal; else allclose at rel 1e-7 (float32) / 1e-14 (float64)).
See tests/fixtures/README.md for the file list and conventions.
"""
import json
import math
import shutil
import sys
import warnings
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from gen_model_fixtures import write_safetensors

torch.set_num_threads(1)

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures"

NEG_INF = float("-inf")


# ----------------------------------------------------------------------------------------------
# Case specification
# ----------------------------------------------------------------------------------------------
class Spec:
    def __init__(self, name, description, *, E=8, H=2, G=None, N=2, L=4, S=None, kdim=None,
                 vdim=None, bias=True, add_bias_kv=False, add_zero_attn=False,
                 dtype=torch.float32, batch_first=True, batched=True, layout="torch",
                 convention="torch", fully_masked="nan", atol=1e-6, rtol=1e-5, seed=0,
                 torch_seed=False, masks=None):
        self.name = name
        self.description = description
        self.E, self.H = E, H
        self.G = H if G is None else G
        self.N = N if batched else 1
        self.L = L
        self.S = L if S is None else S
        self.kdim = E if kdim is None else kdim
        self.vdim = E if vdim is None else vdim
        self.bias = bias
        self.add_bias_kv = add_bias_kv
        self.add_zero_attn = add_zero_attn
        self.dtype = dtype
        self.batch_first = batch_first
        self.batched = batched
        self.layout = layout
        self.convention = convention
        self.fully_masked = fully_masked
        self.atol, self.rtol = atol, rtol
        self.seed = seed
        self.torch_seed = torch_seed
        # masks(spec, generator) -> (attn_mask or None, key_padding_mask or None), stored form
        self.masks = masks if masks is not None else (lambda s, g: (None, None))

    @property
    def gqa(self):
        return self.G != self.H

    @property
    def separate(self):  # torch uses q/k/v_proj_weight when kdim or vdim differs from E
        return self.kdim != self.E or self.vdim != self.E

    @property
    def module_expressible(self):
        return (not self.gqa and self.layout == "torch" and self.convention == "torch"
                and self.fully_masked == "nan")


def bt(rows):
    return torch.tensor(rows, dtype=torch.bool)


def causal(L, S):
    return torch.ones(L, S, dtype=torch.bool).triu(1)


# ----------------------------------------------------------------------------------------------
# Inputs and weights
# ----------------------------------------------------------------------------------------------
def uniform(g, shape, lo, hi, dtype):
    return torch.rand(shape, generator=g, dtype=dtype) * (hi - lo) + lo


def repeat_kv_rows(w, G, H, d):
    """(G*d, ...) -> (H*d, ...): kv head g's d rows repeated for query heads g*r .. (g+1)*r-1."""
    return w.reshape(G, d, *w.shape[1:]).repeat_interleave(H // G, dim=0).reshape(H * d, *w.shape[1:])


def build(spec):
    """Returns (inputs_bf, mha, state, g). inputs_bf: batch-first (N,L,E) query/key/value."""
    E, H, G, N, L, S = spec.E, spec.H, spec.G, spec.N, spec.L, spec.S
    d = E // H
    if spec.torch_seed:
        assert spec.dtype == torch.float32 and not spec.add_bias_kv and not spec.gqa
        torch.manual_seed(spec.seed)
        query = torch.rand(N, L, E)
        key = torch.rand(N, S, spec.kdim)
        value = torch.rand(N, S, spec.vdim)
        mha = nn.MultiheadAttention(E, H, bias=spec.bias, batch_first=True,
                                    kdim=spec.kdim, vdim=spec.vdim)
        g = torch.Generator().manual_seed(1000 + spec.seed)  # masks only
        state = {k: v.detach().clone() for k, v in mha.state_dict().items()}
        return (query, key, value), mha, state, g

    g = torch.Generator().manual_seed(spec.seed)
    dt = spec.dtype
    query = uniform(g, (N, L, E), -1, 1, dt)
    key = uniform(g, (N, S, spec.kdim), -1, 1, dt)
    value = uniform(g, (N, S, spec.vdim), -1, 1, dt)
    torch.manual_seed(spec.seed)
    mha = nn.MultiheadAttention(E, H, bias=spec.bias, add_bias_kv=spec.add_bias_kv,
                                add_zero_attn=spec.add_zero_attn, kdim=spec.kdim, vdim=spec.vdim,
                                batch_first=spec.batch_first, dtype=dt)
    with torch.no_grad():
        if spec.bias:
            mha.in_proj_bias.copy_(uniform(g, (3 * E,), -0.5, 0.5, dt))
            mha.out_proj.bias.copy_(uniform(g, (E,), -0.5, 0.5, dt))
    state = {k: v.detach().clone() for k, v in mha.state_dict().items()}
    if getattr(spec, "tweak_inputs", None):  # e.g. NaN/Inf/huge/subnormal values (nonfinite_inputs)
        spec.tweak_inputs(query, key, value)
    if spec.gqa:
        assert not spec.separate and not spec.add_bias_kv and not spec.add_zero_attn
        Gd = G * d
        bound = math.sqrt(6.0 / (E + E))
        w_q = uniform(g, (E, E), -bound, bound, dt)
        w_k = uniform(g, (Gd, E), -bound, bound, dt)
        w_v = uniform(g, (Gd, E), -bound, bound, dt)
        packed_w = torch.cat([w_q, w_k, w_v])
        state["in_proj_weight"] = packed_w
        if spec.bias:
            b_q = uniform(g, (E,), -0.5, 0.5, dt)
            b_k = uniform(g, (Gd,), -0.5, 0.5, dt)
            b_v = uniform(g, (Gd,), -0.5, 0.5, dt)
            state["in_proj_bias"] = torch.cat([b_q, b_k, b_v])
        # the equivalent torch module: W_k / W_v (and biases) repeated per query head
        with torch.no_grad():
            mha.in_proj_weight.copy_(torch.cat([w_q, repeat_kv_rows(w_k, G, H, d),
                                                repeat_kv_rows(w_v, G, H, d)]))
            if spec.bias:
                mha.in_proj_bias.copy_(torch.cat([b_q, repeat_kv_rows(b_k, G, H, d),
                                                  repeat_kv_rows(b_v, G, H, d)]))
    return (query, key, value), mha, state, g


def to_torch_masks(spec, attn_mask, kpm):
    """Stored masks -> the masks torch's module is called with."""
    if attn_mask is not None:
        if spec.convention == "keep":
            attn_mask = attn_mask == 0          # 1 = attend, 0 = blocked  ->  True = blocked
        if spec.layout == "per_batch":
            attn_mask = attn_mask.repeat_interleave(spec.H, dim=0)   # (N,L,S) -> (N*H,L,S)
    return attn_mask, kpm


# ----------------------------------------------------------------------------------------------
# The stage recomputation: multi_head_attention_forward line by line (torch 1.13), plus GQA.
# query/key/value arrive exactly as the module hands them to F.multi_head_attention_forward
# (L,N,E) (batch_first: transposed views; unbatched: unsqueezed).
# ----------------------------------------------------------------------------------------------
def recompute(spec, state, query, key, value, attn_mask, key_padding_mask):
    E, H, G = spec.E, spec.H, spec.G
    head_dim = E // H
    r = H // G
    tgt_len, bsz, embed_dim = query.shape
    src_len = key.shape[0]

    # in-projection (the third branch of _in_projection_packed / _in_projection: q, k, v distinct)
    b = state.get("in_proj_bias")
    if spec.separate:
        w_q, w_k, w_v = state["q_proj_weight"], state["k_proj_weight"], state["v_proj_weight"]
        b_q, b_k, b_v = (None, None, None) if b is None else b.chunk(3)
    else:
        sizes = [E, G * head_dim, G * head_dim]
        w_q, w_k, w_v = state["in_proj_weight"].split(sizes)
        b_q, b_k, b_v = (None, None, None) if b is None else b.split(sizes)
    q = F.linear(query, w_q, b_q)
    k = F.linear(key, w_k, b_k)
    v = F.linear(value, w_v, b_v)

    # prep attention mask
    if attn_mask is not None:
        if attn_mask.dtype == torch.uint8:
            attn_mask = attn_mask.to(torch.bool)
        if attn_mask.dim() == 2:
            attn_mask = attn_mask.unsqueeze(0)

    if spec.add_bias_kv:
        k = torch.cat([k, state["bias_k"].repeat(1, bsz, 1)])
        v = torch.cat([v, state["bias_v"].repeat(1, bsz, 1)])
        if attn_mask is not None:
            attn_mask = F.pad(attn_mask, (0, 1))
        if key_padding_mask is not None:
            key_padding_mask = F.pad(key_padding_mask, (0, 1))

    q = q.contiguous().view(tgt_len, bsz * H, head_dim).transpose(0, 1)
    k = k.contiguous().view(k.shape[0], bsz * G, head_dim).transpose(0, 1)
    v = v.contiguous().view(v.shape[0], bsz * G, head_dim).transpose(0, 1)

    if spec.add_zero_attn:
        zero_attn_shape = (bsz * G, 1, head_dim)
        k = torch.cat([k, torch.zeros(zero_attn_shape, dtype=k.dtype)], dim=1)
        v = torch.cat([v, torch.zeros(zero_attn_shape, dtype=v.dtype)], dim=1)
        if attn_mask is not None:
            attn_mask = F.pad(attn_mask, (0, 1))
        if key_padding_mask is not None:
            key_padding_mask = F.pad(key_padding_mask, (0, 1))

    src_len = k.size(1)

    if key_padding_mask is not None:
        key_padding_mask = key_padding_mask.view(bsz, 1, 1, src_len). \
            expand(-1, H, -1, -1).reshape(bsz * H, 1, src_len)
        if attn_mask is None:
            attn_mask = key_padding_mask
        elif attn_mask.dtype == torch.bool:
            attn_mask = attn_mask.logical_or(key_padding_mask)
        else:
            attn_mask = attn_mask.masked_fill(key_padding_mask, NEG_INF)

    if attn_mask is not None and attn_mask.dtype == torch.bool:
        new_attn_mask = torch.zeros_like(attn_mask, dtype=q.dtype)
        new_attn_mask.masked_fill_(attn_mask, NEG_INF)
        attn_mask = new_attn_mask

    # GQA: query head h reads kv head h // r (no copy needed when G == H)
    if r == 1:
        k_e, v_e = k, v
    else:
        k_e = k.reshape(bsz, G, src_len, head_dim).repeat_interleave(r, dim=1) \
            .reshape(bsz * H, src_len, head_dim)
        v_e = v.reshape(bsz, G, src_len, head_dim).repeat_interleave(r, dim=1) \
            .reshape(bsz * H, src_len, head_dim)

    B, Nt, E_head = q.shape
    scores = torch.bmm(q, k_e.transpose(-2, -1))
    q_scaled = q / math.sqrt(E_head)
    scores_scaled = torch.bmm(q_scaled, k_e.transpose(-2, -1))
    if attn_mask is not None:
        scores_masked = torch.baddbmm(attn_mask, q_scaled, k_e.transpose(-2, -1))
    else:
        scores_masked = scores_scaled
    attn_weights = F.softmax(scores_masked, dim=-1)
    if spec.fully_masked == "zero":
        dead = torch.isneginf(scores_masked).all(dim=-1, keepdim=True)
        attn_weights = torch.where(dead, torch.nan_to_num(attn_weights, nan=0.0), attn_weights)
    attn_output, context = out_project(state, attn_weights, v_e, tgt_len, bsz, embed_dim)
    weights4 = attn_weights.view(bsz, H, tgt_len, src_len)
    avg = weights4.sum(dim=1) / H

    N, L, Sp, d = bsz, tgt_len, src_len, head_dim
    bf = lambda t: t.transpose(0, 1)  # noqa: E731  (L,N,...) -> (N,L,...)
    q_bf = bf(q.transpose(0, 1).reshape(L, N, E))
    k_view = k.reshape(N, G, Sp, d).transpose(1, 2)
    v_view = v.reshape(N, G, Sp, d).transpose(1, 2)
    stages = {
        "q": q_bf,
        "k": k_view.reshape(N, Sp, G * d),
        "v": v_view.reshape(N, Sp, G * d),
        "q_view": q_bf.reshape(N, L, H, d),
        "k_view": k_view,
        "v_view": v_view,
        "q_heads": q.reshape(N, H, L, d),
        "k_heads": k.reshape(N, G, Sp, d),
        "v_heads": v.reshape(N, G, Sp, d),
        "scores": scores.view(N, H, L, Sp),
        "scores_scaled": scores_scaled.view(N, H, L, Sp),
        "scores_masked": scores_masked.view(N, H, L, Sp),
        "attn_weights": weights4,
        "context": context.view(N, H, L, d),
        "context_transposed": context.view(N, H, L, d).transpose(1, 2),
        "concat": context.view(N, H, L, d).transpose(1, 2).contiguous().view(N, L, E),
        "output": bf(attn_output),
        "attn_weights_avg": avg,
    }
    if attn_mask is not None:
        stages["attn_mask"] = attn_mask.expand(N * H, L, Sp).reshape(N, H, L, Sp)
    return stages, (attn_output, weights4, avg), v_e


def out_project(state, attn_weights, v_e, tgt_len, bsz, embed_dim):
    context = torch.bmm(attn_weights, v_e)
    attn_output = context.transpose(0, 1).contiguous().view(tgt_len * bsz, embed_dim)
    attn_output = F.linear(attn_output, state["out_proj.weight"], state.get("out_proj.bias"))
    return attn_output.view(tgt_len, bsz, attn_output.size(1)), context


# ----------------------------------------------------------------------------------------------
# Comparison helpers
# ----------------------------------------------------------------------------------------------
def same(a, b):
    """Bit-equal values (NaN matches NaN; -0 == 0)."""
    if a.shape != b.shape:
        return False
    na, nb = torch.isnan(a), torch.isnan(b)
    return bool(torch.equal(na, nb) and torch.equal(a[~na], b[~nb]))


def max_diff(a, b):
    na = torch.isnan(a) | torch.isnan(b)
    if (~na).sum() == 0:
        return 0.0
    return float((a[~na] - b[~na]).abs().max())


def compare(mine, theirs, dtype):
    if same(mine, theirs):
        return "equal", 0.0
    tol = 1e-7 if dtype == torch.float32 else 1e-14
    assert torch.equal(torch.isnan(mine), torch.isnan(theirs)), "NaN pattern differs"
    ok = torch.allclose(mine, theirs, rtol=tol, atol=tol, equal_nan=True)
    diff = max_diff(mine, theirs)
    assert ok, f"recomputed stage differs from the module beyond {tol}: max diff {diff}"
    return "allclose", diff


# ----------------------------------------------------------------------------------------------
# One case
# ----------------------------------------------------------------------------------------------
def module_layout(spec, t_lne):
    """(L,N,...) result of the function -> what the module returns."""
    if not spec.batched:
        return t_lne.squeeze(1)
    return t_lne.transpose(1, 0) if spec.batch_first else t_lne


def function_layout(spec, x):
    """Module input -> what the module hands to F.multi_head_attention_forward."""
    if not spec.batched:
        return x.unsqueeze(1)
    return x.transpose(1, 0) if spec.batch_first else x


def call_module(mha, spec, inputs, attn_mask, kpm):
    mha.eval()
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # uint8 attn_mask deprecation warning
        out, w = mha(*inputs, key_padding_mask=kpm, need_weights=True, attn_mask=attn_mask,
                     average_attn_weights=False)
        _, w_avg = mha(*inputs, key_padding_mask=kpm, need_weights=True, attn_mask=attn_mask,
                       average_attn_weights=True)
    return out, w, w_avg


def np_save(path, t):
    a = t.detach().cpu().numpy() if isinstance(t, torch.Tensor) else t
    np.save(path, np.ascontiguousarray(a))


def run_case(spec):
    (q_bf, k_bf, v_bf), mha, state, g = build(spec)
    attn_mask_stored, kpm_stored = spec.masks(spec, g)
    if attn_mask_stored is not None and attn_mask_stored.is_floating_point():
        attn_mask_stored = attn_mask_stored.to(spec.dtype)
    if kpm_stored is not None and kpm_stored.is_floating_point():
        kpm_stored = kpm_stored.to(spec.dtype)

    # inputs in the case's layout (what is saved and what the module is called with)
    if not spec.batched:
        inputs = tuple(x[0].contiguous() for x in (q_bf, k_bf, v_bf))
    elif spec.batch_first:
        inputs = (q_bf, k_bf, v_bf)
    else:
        inputs = tuple(x.transpose(0, 1).contiguous() for x in (q_bf, k_bf, v_bf))
    assert inputs[0] is not inputs[1] and inputs[1] is not inputs[2]  # no fast path, 3rd branch

    attn_mask_t, kpm_t = to_torch_masks(spec, attn_mask_stored, kpm_stored)

    # module (or its torch equivalent)
    out_m, w_m, w_avg_m = call_module(mha, spec, inputs, attn_mask_t, kpm_t)

    # stages
    f_in = [function_layout(spec, x) for x in inputs]
    kpm_f = kpm_t.unsqueeze(0) if (kpm_t is not None and not spec.batched) else kpm_t
    stages, (out_f, w4_f, avg_f), v_e = recompute(spec, state, *f_in, attn_mask_t, kpm_f)

    w_m4 = w_m if spec.batched else w_m.unsqueeze(0)
    if spec.fully_masked == "zero":
        # module semantics + NaN -> 0 in the weights; output recomputed from the zeroed weights
        w_m4 = torch.nan_to_num(w_m4, nan=0.0)
        w_avg_nan0 = torch.nan_to_num(w_avg_m, nan=0.0)
        N, H, L, Sp = w_m4.shape
        out_lne, _ = out_project(state, w_m4.reshape(N * H, L, Sp), v_e, L, N, spec.E)
        out_m = module_layout(spec, out_lne)
        w_m = w_m4 if spec.batched else w_m4[0]
        w_avg_m = w_m4.sum(dim=1) / H
        if not spec.batched:
            w_avg_m = w_avg_m[0]
        assert torch.allclose(w_avg_m, w_avg_nan0, rtol=1e-6, atol=1e-7)

    res = {
        "output": compare(module_layout(spec, out_f), out_m, spec.dtype),
        "attn_weights": compare(w4_f, w_m4, spec.dtype),
        "attn_weights_avg": compare(avg_f if spec.batched else avg_f[0], w_avg_m, spec.dtype),
    }

    # sanity: NaN only where intended; masks must matter
    has_nan = bool(torch.isnan(out_m).any())
    assert has_nan == (spec.name in ("fully_masked_nan", "nonfinite_inputs")), \
        f"{spec.name}: unexpected NaN state"
    effects = []
    if attn_mask_t is not None or kpm_t is not None:
        base, _, _ = call_module(mha, spec, inputs, None, None)
        changed = not same(base, out_m)
        effects.append(f"masks change output: {'yes' if changed else 'NO'}")
        assert changed, f"{spec.name}: masks do not change the result"
        if attn_mask_t is not None and kpm_t is not None:
            only_attn, _, _ = call_module(mha, spec, inputs, attn_mask_t, None)
            only_kpm, _, _ = call_module(mha, spec, inputs, None, kpm_t)
            effects.append(f"kpm changes output: {'yes' if not same(only_attn, out_m) else 'NO'}")
            effects.append(f"attn_mask changes output: {'yes' if not same(only_kpm, out_m) else 'NO'}")

    # ---- write ----
    case_dir = FIXTURES / spec.name
    exp_dir = case_dir / "expected"
    exp_dir.mkdir(parents=True)
    cfg = {
        "description": spec.description,
        "embed_dim": spec.E,
        "num_heads": spec.H,
        "num_kv_heads": spec.G,
        "batch_first": spec.batch_first,
        "batched": spec.batched,
        "bias": spec.bias,
        "add_bias_kv": spec.add_bias_kv,
        "add_zero_attn": spec.add_zero_attn,
        "kdim": spec.kdim,
        "vdim": spec.vdim,
        "dtype": "float32" if spec.dtype == torch.float32 else "float64",
        "attn_mask_layout": spec.layout,
        "mask_convention": spec.convention,
        "fully_masked": spec.fully_masked,
        "atol": spec.atol,
        "rtol": spec.rtol,
    }
    if spec.torch_seed:
        cfg["torch_seed"] = {"seed": spec.seed, "batch": spec.N, "tgt_len": spec.L,
                             "src_len": spec.S, "embed_dim": spec.E, "num_heads": spec.H,
                             "bias": spec.bias, "kdim": spec.kdim, "vdim": spec.vdim}
    (case_dir / "case.json").write_text(json.dumps(cfg, indent=2) + "\n")

    for name, t in zip(("query", "key", "value"), inputs):
        np_save(case_dir / f"{name}.npy", t)
    for name, t in state.items():
        np_save(case_dir / f"{name}.npy", t)
    if attn_mask_stored is not None:
        np_save(case_dir / "attn_mask.npy", attn_mask_stored)
    if kpm_stored is not None:
        np_save(case_dir / "key_padding_mask.npy", kpm_stored)

    np_save(exp_dir / "module_output.npy", out_m)
    np_save(exp_dir / "module_attn_weights.npy", w_m)
    np_save(exp_dir / "module_attn_weights_avg.npy", w_avg_m)
    for name, t in stages.items():
        np_save(exp_dir / f"{name}.npy", t.contiguous())

    # shape checks against the documented contract
    N, L, E, H, G, d = spec.N, spec.L, spec.E, spec.H, spec.G, spec.E // spec.H
    Sp = spec.S + spec.add_bias_kv + spec.add_zero_attn
    want = {"q": (N, L, E), "k": (N, Sp, G * d), "v": (N, Sp, G * d), "q_view": (N, L, H, d),
            "k_view": (N, Sp, G, d), "v_view": (N, Sp, G, d), "q_heads": (N, H, L, d),
            "k_heads": (N, G, Sp, d), "v_heads": (N, G, Sp, d), "scores": (N, H, L, Sp),
            "scores_scaled": (N, H, L, Sp), "attn_mask": (N, H, L, Sp),
            "scores_masked": (N, H, L, Sp), "attn_weights": (N, H, L, Sp),
            "context": (N, H, L, d), "context_transposed": (N, L, H, d), "concat": (N, L, E),
            "output": (N, L, E), "attn_weights_avg": (N, L, Sp)}
    for name, t in stages.items():
        assert tuple(t.shape) == want[name], (spec.name, name, t.shape)

    nbytes = sum(p.stat().st_size for p in case_dir.rglob("*") if p.is_file())
    summary = ", ".join(f"{k} {v[0]}" + (f" (max diff {v[1]:.3g})" if v[0] != "equal" else "")
                        for k, v in res.items())
    kind = "module" if spec.module_expressible else "torch-equivalent module"
    extra = ("; " + "; ".join(effects)) if effects else ""
    print(f"{spec.name:28s} vs {kind}: {summary}{extra}; {nbytes} bytes")
    return res


# ----------------------------------------------------------------------------------------------
# The cases
# ----------------------------------------------------------------------------------------------
def course_padding(spec, g):
    # N=3: item 0 blocks key 3, item 1 nothing, item 2 keys 2 and 3 (same for every query row)
    blocked = bt([[0, 0, 0, 1], [0, 0, 0, 0], [0, 0, 1, 1]])
    return blocked[:, None, :].expand(3, spec.L, spec.S).contiguous(), None


def per_head_random(spec, g):
    m = torch.rand(spec.N * spec.H, spec.L, spec.S, generator=g) < 0.4
    for i in range(m.shape[0]):
        for row in range(m.shape[1]):
            if bool(m[i, row].all()):
                m[i, row, int(torch.randint(spec.S, (1,), generator=g))] = False
    return m, None


NB_SEED = "query/key/value and weights are exactly torch.manual_seed(42); torch.rand(3,4,8) x3; " \
          "nn.MultiheadAttention(8, 2, bias=False, batch_first=True) (see torch_seed)."

SPECS = [
    Spec("notebook",
         "The course notebook: " + NB_SEED + " No mask. Expected: the module.",
         N=3, E=8, H=2, bias=False, seed=42, torch_seed=True, atol=1e-8, rtol=1e-5),
    # Two more seeds of the notebook's own case: its tolerance is checked on more than one draw.
    *[Spec(f"notebook_seed_{seed}",
           f"The course notebook's case with torch.manual_seed({seed}): torch.rand(3,4,8) x3; "
           "nn.MultiheadAttention(8, 2, bias=False, batch_first=True) (see torch_seed). No mask. "
           "Expected: the module.",
           N=3, E=8, H=2, bias=False, seed=seed, torch_seed=True, atol=1e-8, rtol=1e-5)
      for seed in (0, 7)],
    Spec("notebook_causal_per_batch",
         "Notebook inputs (" + NB_SEED + ") with the course's (N,L,S) causal bool mask "
         "(True above the diagonal, True = blocked). torch rejects (N,L,S); expected = module "
         "called with the mask repeat_interleave'd to (N*H,L,S) (batch-major, head-minor).",
         N=3, E=8, H=2, bias=False, seed=42, torch_seed=True, atol=1e-8, rtol=1e-5,
         layout="per_batch",
         masks=lambda s, g: (causal(s.L, s.S).expand(s.N, s.L, s.S).contiguous(), None)),
    Spec("notebook_padding_per_batch",
         "Notebook inputs (" + NB_SEED + ") with the course's padding mask as an (N,L,S) bool "
         "attn_mask (True = blocked): item 0 blocks key 3, item 1 nothing, item 2 keys 2 and 3. "
         "Expected = module called with the mask repeat_interleave'd to (N*H,L,S).",
         N=3, E=8, H=2, bias=False, seed=42, torch_seed=True, atol=1e-8, rtol=1e-5,
         layout="per_batch", masks=course_padding),
    Spec("seed_default_init",
         "torch.manual_seed(7); torch.rand query/key/value; nn.MultiheadAttention(12, 3, "
         "bias=True, batch_first=True) default init (in_proj_bias and out_proj.bias are zero). "
         "No mask. Expected: the module.",
         N=2, L=5, E=12, H=3, bias=True, seed=7, torch_seed=True),
    Spec("seed_kdim_vdim",
         "torch.manual_seed(11); torch.rand query (2,3,8), key (2,4,5), value (2,4,6); "
         "nn.MultiheadAttention(8, 2, bias=True, batch_first=True, kdim=5, vdim=6) default init "
         "(separate q/k/v_proj_weight, zero biases). No mask. Expected: the module.",
         N=2, L=3, S=4, E=8, H=2, kdim=5, vdim=6, bias=True, seed=11, torch_seed=True),
    Spec("no_mask",
         "Random inputs in [-1,1), default-init weights, random non-zero biases, no mask. "
         "Expected: the module.", seed=101),
    Spec("causal_bool",
         "(L,S) bool causal attn_mask (True above the diagonal = blocked). Expected: the module.",
         seed=102, masks=lambda s, g: (causal(s.L, s.S), None)),
    Spec("key_padding_bool",
         "(N,S) bool key_padding_mask, valid lengths 3 and 2 (True = padding). "
         "Expected: the module.",
         seed=103, masks=lambda s, g: (None, bt([[0, 0, 0, 1], [0, 0, 1, 1]]))),
    Spec("per_head_bool_3d",
         "(N*H,L,S) random bool attn_mask, index n*H+h (batch-major, head-minor), no fully "
         "masked row. Expected: the module.",
         seed=104, masks=per_head_random),
    Spec("float_additive",
         "(L,S) float attn_mask added to the scores: mixed finite values and -inf. "
         "Expected: the module.",
         seed=105, masks=lambda s, g: (torch.tensor([[0.0, -1.5, NEG_INF, 0.7],
                                                     [0.7, 0.0, NEG_INF, -1.5],
                                                     [NEG_INF, 0.25, 0.0, NEG_INF],
                                                     [-1.5, NEG_INF, 0.7, 0.0]]), None)),
    Spec("float_attn_float_kpm",
         "(L,S) float attn_mask + (N,S) float key_padding_mask holding 0.0/1.0. torch 1.13 merges "
         "them with attn_mask.masked_fill(kpm, -inf); with a float mask, masked_fill reads the "
         "first (lowest) byte of each float as the bool, and 1.0f = 0x3F800000 has low byte 0, so "
         "the key_padding_mask has NO effect: the result equals the float attn_mask alone. "
         "Expected: the module (torch's real behaviour, kept on purpose).",
         seed=106, masks=lambda s, g: (torch.tensor([[0.0, NEG_INF, 0.5, -1.0],
                                                     [-0.5, 0.0, NEG_INF, 0.3],
                                                     [0.2, -2.0, 0.0, NEG_INF],
                                                     [NEG_INF, 1.0, -0.7, 0.0]]),
                                       torch.tensor([[0.0, 0.0, 1.0, 0.0],
                                                     [1.0, 0.0, 0.0, 1.0]]))),
    Spec("bool_attn_float_kpm",
         "(L,S) bool attn_mask + (N,S) float key_padding_mask with 0, 0.7 and -inf: torch "
         "logical_or's them, so every non-zero kpm entry (0.7 as well as -inf) blocks its key. "
         "Expected: the module.",
         seed=107, masks=lambda s, g: (bt([[0, 1, 0, 0], [0, 0, 1, 0], [1, 0, 0, 0], [0, 0, 0, 1]]),
                                       torch.tensor([[0.0, 0.7, 0.0, 0.0],
                                                     [0.0, 0.0, NEG_INF, 0.7]]))),
    Spec("float_kpm_alone",
         "(N,S) float key_padding_mask with finite values and no attn_mask: torch uses it as an "
         "additive mask (broadcast over heads and query rows). Expected: the module.",
         seed=108, masks=lambda s, g: (None, torch.tensor([[0.0, -1.5, 0.7, 0.3],
                                                           [-0.25, 0.0, 2.0, -3.0]]))),
    Spec("uint8_attn_mask",
         "(L,S) uint8 attn_mask (deprecated; torch converts it to bool: non-zero = blocked). "
         "attn_mask.npy is uint8 ('|u1'). Expected: the module.",
         seed=109, masks=lambda s, g: (torch.tensor([[0, 1, 0, 1], [0, 0, 1, 1], [1, 0, 0, 0],
                                                     [0, 1, 1, 0]], dtype=torch.uint8), None)),
    Spec("cross_attention",
         "Cross attention, L=3 queries over S=6 keys/values. No mask. Expected: the module.",
         L=3, S=6, seed=110),
    Spec("kdim_vdim",
         "kdim=5, vdim=7: separate q_proj_weight (8,8), k_proj_weight (8,5), v_proj_weight (8,7); "
         "random non-zero biases. No mask. Expected: the module.",
         kdim=5, vdim=7, seed=111),
    Spec("bias_kv_zero_attn",
         "add_bias_kv and add_zero_attn (S'=S+2: bias_k/bias_v row, then the zero row), (L,S) bool "
         "causal attn_mask and (N,S) bool key_padding_mask; both masks are padded with False for "
         "the two extra columns, so batch item 1, query 0 attends only to bias_k and the zero key. "
         "Expected: the module.",
         add_bias_kv=True, add_zero_attn=True, seed=112,
         masks=lambda s, g: (causal(s.L, s.S), bt([[0, 0, 0, 1], [1, 0, 0, 0]]))),
    Spec("fully_masked_nan",
         "(L,S) bool attn_mask whose query row 1 blocks every key: torch's softmax gives NaN for "
         "that row in every head and batch item, so context rows, output rows (and the averaged "
         "weights) are NaN there. Expected: the module.",
         seed=113, masks=lambda s, g: (bt([[0, 1, 1, 1], [1, 1, 1, 1], [0, 0, 1, 1],
                                           [1, 0, 0, 0]]), None)),
    Spec("fully_masked_zero",
         "Same inputs as fully_masked_nan, fully_masked policy 'zero' (not a torch option): a row "
         "whose masked scores are all -inf gets weights 0 instead of NaN, so its context is 0 and "
         "its output row is out_proj.bias. Expected: module weights with NaN -> 0 (avg = their "
         "sum over heads / H); module_output recomputed from those zeroed weights with the same "
         "torch ops (bmm with v, transpose, view, out_proj linear).",
         fully_masked="zero", seed=113,
         masks=lambda s, g: (bt([[0, 1, 1, 1], [1, 1, 1, 1], [0, 0, 1, 1], [1, 0, 0, 0]]), None)),
    Spec("no_bias",
         "bias=False: no in_proj_bias, no out_proj.bias. No mask. Expected: the module.",
         bias=False, seed=114),
    Spec("float64",
         "dtype float64 throughout (module built with dtype=torch.float64), (L,S) float64 "
         "attn_mask with finite values and -inf plus an (N,S) bool key_padding_mask (masked_fill "
         "-inf into the float mask). Expected: the module.",
         dtype=torch.float64, atol=1e-12, rtol=1e-10, seed=115,
         masks=lambda s, g: (torch.tensor([[0.0, -0.5, 1.25, NEG_INF],
                                           [NEG_INF, 0.0, -2.0, 0.5],
                                           [0.3, NEG_INF, 0.0, -1.0],
                                           [-0.75, 0.6, NEG_INF, 0.0]], dtype=torch.float64),
                             bt([[0, 0, 1, 0], [1, 0, 0, 0]]))),
    Spec("single_head",
         "num_heads=1 (head_dim = E = 8). No mask. Expected: the module.", H=1, seed=116),
    Spec("batch_first_false",
         "Inputs in (L,N,E) layout, module built with batch_first=False; (N,S) bool "
         "key_padding_mask (still batch-major). module_output is (L,N,E); the stages are "
         "batch-first as always. Expected: the module.",
         batch_first=False, seed=117, masks=lambda s, g: (None, bt([[0, 1, 0, 0], [0, 0, 0, 1]]))),
    Spec("unbatched",
         "Unbatched 2-D (L,E) inputs and a 1-D (S,) bool key_padding_mask; module built with "
         "batch_first=True (ignored for unbatched input). module_* results are unbatched "
         "(output (L,E), weights (H,L,S), avg (L,S)); the stages use N=1. Expected: the module.",
         batched=False, seed=118, masks=lambda s, g: (None, bt([0, 0, 1, 0]))),
    Spec("keep_convention",
         "(L,S) float attn_mask in the 'keep' convention (1 = attend, 0 = blocked; lower "
         "triangle = causal), as half of the course writes masks. Not torch's convention: "
         "expected = module called with the bool mask (attn_mask == 0) (True = blocked).",
         convention="keep", seed=119,
         masks=lambda s, g: (torch.ones(s.L, s.S).tril(), None)),
    Spec("gqa",
         "Grouped-query attention (our extension): H=4 query heads, G=2 kv heads, d_k=4, causal "
         "(L,S) bool attn_mask. in_proj_weight (E+2*G*d_k, E) = [W_q; W_k; W_v], query head h uses "
         "kv head h // (H/G). Expected = torch module whose W_k/W_v and biases repeat each kv "
         "head's d_k rows for its H/G query heads.",
         E=16, H=4, G=2, seed=120, masks=lambda s, g: (causal(s.L, s.S), None)),
    Spec("mqa",
         "Multi-query attention (our extension): H=4 query heads, G=1 kv head, d_k=4. No mask. "
         "Expected = torch module whose W_k/W_v and biases repeat the single kv head's rows for "
         "all 4 query heads.",
         E=16, H=4, G=1, seed=121),
    Spec("teaching",
         "Teaching size: N=1, L=S=16, E=64, H=4, causal (L,S) bool attn_mask, random non-zero "
         "biases. Expected: the module.",
         N=1, L=16, E=64, H=4, seed=122, masks=lambda s, g: (causal(s.L, s.S), None)),
]


def nonfinite(query, key, value):
    """NaN, +Inf, 1e30 and subnormals in the inputs: torch's numbers, NaN for NaN."""
    query[0, 1, 3] = float("nan")      # batch 0, query 1: its scores, weights and output row NaN
    query[1, 0, 5] = float("inf")      # batch 1, query 0: +-inf projections -> a NaN row
    query[0, 2, :] = 1e-40             # subnormal query row: projects to about the bias
    key[0, 3, :] = 1e-39               # subnormal key row
    value[0, 0, 2] = 1e30              # huge but finite: context and output of batch 0 ~1e29
    value[1, 2, 1] = -1e30


NONFINITE = Spec("nonfinite_inputs",
                 "Random inputs with special values: query[0,1,3]=NaN, query[1,0,5]=+Inf, "
                 "query[0,2,:]=1e-40 and key[0,3,:]=1e-39 (subnormal), value[0,0,2]=1e30, "
                 "value[1,2,1]=-1e30. No mask. Expected: the module (NaN where torch gives NaN).",
                 seed=123, rtol=1e-4)
NONFINITE.tweak_inputs = nonfinite
SPECS.append(NONFINITE)


# ----------------------------------------------------------------------------------------------
# An nn.MultiheadAttention inside a bigger model's state_dict (`mha --weights FILE --prefix P`)
# ----------------------------------------------------------------------------------------------
ENCODER = "encoder_state_dict"


def encoder_state_dict():
    """A seeded two-layer nn.TransformerEncoder(8 wide, 2 heads): its whole state_dict as
    model.safetensors (two self_attn modules, under layers.0.self_attn. and layers.1.self_attn.),
    query.npy, and what layers[1].self_attn returns for it. No case.json: not a case of the table."""
    torch.manual_seed(7)
    layer = nn.TransformerEncoderLayer(8, 2, dim_feedforward=16, batch_first=True)
    model = nn.TransformerEncoder(layer, num_layers=2, enable_nested_tensor=False).eval()
    with torch.no_grad():
        for p in model.parameters():  # the layers start as copies of one; biases start at zero
            p.uniform_(-0.5, 0.5)
    query = torch.rand(2, 4, 8)
    with torch.no_grad():  # distinct key and value tensors: torch's general path, not the fused one
        out, w = model.layers[1].self_attn(query, query.clone(), query.clone(), need_weights=True,
                                           average_attn_weights=False)
    case_dir = FIXTURES / ENCODER
    (case_dir / "expected").mkdir(parents=True)
    write_safetensors(case_dir / "model.safetensors", model.state_dict(), torch.float32)
    np_save(case_dir / "query.npy", query)
    np_save(case_dir / "expected" / "module_output.npy", out)
    np_save(case_dir / "expected" / "module_attn_weights.npy", w)
    names = len(model.state_dict())
    print(f"{ENCODER:28s} nn.TransformerEncoder state_dict, {names} tensors; layers[1].self_attn's output")


def main():
    """All cases (every case folder is rewritten), or only the cases named on the command line."""
    names = [s.name for s in SPECS] + [ENCODER]
    assert len(names) == len(set(names))
    only = sys.argv[1:]
    unknown = [n for n in only if n not in names]
    assert not unknown, f"unknown case(s): {unknown}; cases: {names}"
    FIXTURES.mkdir(parents=True, exist_ok=True)
    for p in sorted(FIXTURES.iterdir()):
        if p.is_dir() and (not only or p.name in only):
            shutil.rmtree(p)
    print(f"torch {torch.__version__}, numpy {np.__version__}; writing {FIXTURES}")
    for spec in SPECS:
        if not only or spec.name in only:
            run_case(spec)
    if not only or ENCODER in only:
        encoder_state_dict()
    return 0


if __name__ == "__main__":
    sys.exit(main())
