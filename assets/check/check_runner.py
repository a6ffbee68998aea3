"""Runs a student's PyTorch multi-head attention for `mha check`; MHA Studio does the rest.

    python3 check_runner.py WORKDIR

WORKDIR/cases.json (written by the program) names the student's file, the module sizes and the
cases, whose inputs and masks are .npy files beside it. This script imports the file, finds the
nn.Module subclass, constructs it for each (d_model, num_heads), writes its weights under
nn.MultiheadAttention's state_dict names, calls forward on every case (a masked case once per mask
convention: keep, block, additive) and writes what came back as .npy, with WORKDIR/result.json
saying what it found and every error with its file and line. It compares nothing: the engine
computes the reference and names the mistake.

Exit 0: result.json written (Python errors of the student's code are in it); 3: torch or numpy
cannot be imported (the reason on stdout).
"""
import contextlib
import importlib.util
import inspect
import io
import json
import os
import sys
import traceback
import types

try:
    import numpy as np
    import torch
    import torch.nn as nn
except Exception as e:  # noqa: BLE001 (any import failure means no usable torch)
    print(f"{type(e).__name__}: {e}")
    sys.exit(3)

WORK = os.path.abspath(sys.argv[1])
STUDENT = ""

D_MODEL_NAMES = ["d_model", "embed_dim", "n_embd", "hidden_size", "dim", "d_embed", "model_dim",
                 "embed_size", "embedding_dim", "emb_dim", "hidden_dim", "d"]
HEADS_NAMES = ["num_heads", "n_heads", "n_head", "h", "heads", "nhead", "num_head", "head_num"]
QKV_NAMES = [["q", "query", "queries", "Q"], ["k", "key", "keys", "K"], ["v", "value", "values", "V"]]
MASK_NAMES = ["mask", "attn_mask", "attention_mask", "causal_mask", "src_mask", "tgt_mask"]
# Words around the role in a layer's name: W_q, q_proj, to_q, q_linear, linear_q, wq, ...
NOISE = {"w", "proj", "projection", "linear", "lin", "to", "layer", "fc", "weight", "dense", "net", "mat"}
ROLE_WORDS = {"q": {"q", "query", "queries"}, "k": {"k", "key", "keys"}, "v": {"v", "value", "values"},
              "o": {"o", "out", "output", "c_proj", "proj", "dense", "fc_out", "wo"},
              "qkv": {"qkv", "in_proj", "c_attn", "in"}}


def progress(text):
    with open(os.path.join(WORK, "progress.txt"), "w") as f:
        f.write(text)


def error_info(e, stage, case="", convention=""):
    """The exception as result.json holds it: where it was raised in the student's file."""
    tb = traceback.extract_tb(e.__traceback__)
    file, line = "", 0
    for frame in tb:
        if os.path.abspath(frame.filename) == STUDENT:
            file, line = frame.filename, frame.lineno
    if isinstance(e, SyntaxError) and e.filename and os.path.abspath(e.filename) == STUDENT:
        file, line = e.filename, e.lineno or 0
    # The traceback from the student's first frame on (this script's own frames say nothing).
    tb_from = e.__traceback__
    while tb_from is not None and os.path.abspath(tb_from.tb_frame.f_code.co_filename) != STUDENT:
        tb_from = tb_from.tb_next
    text = traceback.format_exception(type(e), e, tb_from) if tb_from else traceback.format_exception_only(type(e), e)
    return {"stage": stage, "type": type(e).__name__, "message": str(e), "file": file, "line": line,
            "case": case, "convention": convention, "traceback": "".join(text)}


def role_of(name):
    """q, k, v, o or qkv for a layer or parameter name, None when it says none of them."""
    low = name.lower()
    if "qkv" in low or low in ("c_attn", "in_proj", "in_proj_weight", "wqkv"):
        return "qkv"
    if low in ("c_proj", "proj", "dense", "fc_out", "out_proj", "to_out", "wo", "w_o", "o_proj"):
        return "o"
    words = [w for w in low.split("_") if w and w not in NOISE]
    if len(words) == 1:
        word = words[0]
        if len(word) == 2 and word[0] == "w" and word[1] in "qkvo":  # wq, wk, wv, wo
            word = word[1]
        for role, names in ROLE_WORDS.items():
            if word in names:
                return role
    return None


def bias_role(name):
    """The role of a bare bias parameter (b_q, bq, bias_q, q_bias, b_qkv), None for other names."""
    low = name.lower()
    for strip in ("bias_", "_bias", "b_"):
        if strip in low:
            return role_of(low.replace(strip, "", 1))
    return role_of(low[1:]) if low[:1] == "b" and len(low) in (2, 4) else None


def last_name(path):
    """The last part of a module path that is not an index (to_out.0 -> to_out)."""
    parts = [p for p in path.split(".") if not p.isdigit()]
    return parts[-1] if parts else path


def find_class(module, wanted):
    classes = [c for c in vars(module).values()
               if inspect.isclass(c) and issubclass(c, nn.Module) and c.__module__ == module.__name__]
    if wanted:
        for c in classes:
            if c.__name__ == wanted:
                return c
        names = ", ".join(c.__name__ for c in classes) or "none"
        raise LookupError(f"no nn.Module subclass named {wanted} in the file (it defines: {names})")
    if len(classes) == 1:
        return classes[0]
    if not classes:
        raise LookupError("the file defines no nn.Module subclass (a function such as "
                          "multi_head_attention(q, k, v, ...) has no weights of its own to read: wrap it "
                          "in a module whose layers hold them)")
    # A helper module beside the attention module: the one whose name says multi-head, if one does.
    multi = [c for c in classes if "multi" in c.__name__.lower() or "mha" in c.__name__.lower()]
    if len(multi) == 1:
        return multi[0]
    names = ", ".join(c.__name__ for c in classes)
    raise LookupError(f"the file defines several nn.Module subclasses ({names}): choose one with --class NAME")


def construct(cls, d_model, num_heads):
    """cls(d_model, num_heads) by the names its constructor uses, or by position."""
    params = [p for p in list(inspect.signature(cls.__init__).parameters.values())[1:]
              if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    names = [p.name for p in params]
    d_name = next((n for n in D_MODEL_NAMES if n in names), None)
    h_name = next((n for n in HEADS_NAMES if n in names), None)
    if d_name and h_name:
        kwargs = {d_name: d_model, h_name: num_heads}
        if "dropout" in names:
            kwargs["dropout"] = 0.0
        text = f"{cls.__name__}({d_name}={d_model}, {h_name}={num_heads})"
        return cls(**kwargs), text
    if len(names) == 1 and names[0] in ("config", "cfg", "args", "params"):  # nanoGPT's (config)
        cfg = types.SimpleNamespace(dropout=0.0, bias=True, block_size=64)
        for n in D_MODEL_NAMES:
            setattr(cfg, n, d_model)
        for n in HEADS_NAMES:
            setattr(cfg, n, num_heads)
        return cls(cfg), f"{cls.__name__}({names[0]} with n_embd={d_model}, n_head={num_heads})"
    return cls(d_model, num_heads), f"{cls.__name__}({d_model}, {num_heads})"


def find_weights(model, d_model, manual):
    """The q, k, v, o (or fused qkv) weights and biases, as (role -> name, role -> (W, b)) with W in
    nn.Linear's (out, in) layout."""
    found, names = {}, {}

    def put(role, name, weight, bias):
        if role in found:
            raise LookupError(f"both {names[role]} and {name} look like the {role} projection")
        found[role], names[role] = (weight, bias), name

    linears = {path: m for path, m in model.named_modules() if isinstance(m, nn.Linear)}
    for path, m in linears.items():
        role = manual.get(path) if manual else role_of(last_name(path))
        if role:
            put(role, path, m.weight, m.bias)
    owned = {f"{p}.{n}" for p in linears for n in ("weight", "bias")}
    raw = {n: p for n, p in model.named_parameters() if n not in owned}
    for name, p in raw.items():
        if manual:
            role = manual.get(name)
        else:
            base = last_name(name)
            if base.endswith("_bias") or base.startswith("b_") or base.endswith("bias"):
                continue
            role = role_of(base.replace("_weight", ""))
        if not role or p.dim() != 2:
            continue
        # A bare parameter: in_proj_weight is torch's (out, in); other names are read as x @ W.
        weight = p if last_name(name) == "in_proj_weight" else p.t()
        bias_name = name.replace("weight", "bias") if "weight" in name else None
        bias = raw.get(bias_name) if bias_name else None
        if bias is None:  # b_q, bq, bias_q, q_bias beside W_q
            bias = next((b for n, b in raw.items() if b.dim() == 1 and bias_role(last_name(n)) == role), None)
        put(role, name, weight, bias)
    if manual:
        missing = [n for n in manual if n not in linears and n not in raw]
        if missing:
            raise LookupError(f"--map names {', '.join(missing)}, which the module does not have")
    return found, names


def map_hint(model, d_model):
    """A --map for the layers in the order they were defined: four (E, E) layers as q, k, v, o, or a
    (3E, E) layer and an (E, E) one as qkv, o; "" when the layers are not so."""
    layers = [(last_name(p) if p.split(".")[-1].isdigit() else p, m.weight.shape)
              for p, m in model.named_modules() if isinstance(m, nn.Linear)]
    square = [p for p, s in layers if tuple(s) == (d_model, d_model)]
    fused = [p for p, s in layers if tuple(s) == (3 * d_model, d_model)]
    if len(layers) == 4 and len(square) == 4:
        return ",".join(f"{p}={r}" for p, r in zip(square, "qkvo"))
    if len(layers) == 2 and len(fused) == 1 and len(square) == 1:
        return f"{fused[0]}=qkv,{square[0]}=o"
    return ""


def write_state_dict(folder, found, d_model):
    """in_proj_weight (3E, E), in_proj_bias, out_proj.weight and .bias as .npy under `folder`."""
    os.makedirs(folder, exist_ok=True)
    t = lambda x: x.detach().to(torch.float32).cpu().numpy()  # noqa: E731
    if "qkv" in found:
        w, b = found["qkv"]
        ws, bs = [t(w)], [None if b is None else t(b)]
    else:
        ws = [t(found[r][0]) for r in "qkv"]
        bs = [None if found[r][1] is None else t(found[r][1]) for r in "qkv"]
    in_w = np.concatenate(ws, 0)
    if in_w.shape != (3 * d_model, d_model):
        raise LookupError(f"the q, k, v projections hold {in_w.shape[0]}x{in_w.shape[1]} weights, expected "
                          f"{3 * d_model}x{d_model} for d_model={d_model}")
    out = found.get("o")
    has_bias = any(b is not None for b in bs) or (out is not None and out[1] is not None)
    np.save(os.path.join(folder, "in_proj_weight.npy"), in_w)
    if has_bias:
        full = [b if b is not None else np.zeros(w.shape[0], np.float32) for w, b in zip(ws, bs)]
        np.save(os.path.join(folder, "in_proj_bias.npy"), np.concatenate(full, 0))
    if out is not None:
        np.save(os.path.join(folder, "out_proj.weight.npy"), t(out[0]))
        if has_bias:
            ob = np.zeros(d_model, np.float32) if out[1] is None else t(out[1])
            np.save(os.path.join(folder, "out_proj.bias.npy"), ob)


def forward_style(model):
    """How forward takes its inputs: ("qkv" | "x", the mask parameter's name or None, extra kwargs)."""
    sig = inspect.signature(model.forward)
    params = [p for p in sig.parameters.values() if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    mask = next((p.name for p in params if p.name in MASK_NAMES), None)
    if mask is None:
        mask = next((p.name for p in params if "mask" in p.name.lower() and "padding" not in p.name.lower()), None)
    inputs = [p for p in params if "mask" not in p.name.lower() and p.name not in
              ("need_weights", "average_attn_weights", "is_causal", "return_attention", "return_weights")]
    required = [p for p in inputs if p.default is p.empty]
    extra = {}
    for p in params:
        if p.name == "need_weights":
            extra["need_weights"] = True
        if p.name == "average_attn_weights":
            extra["average_attn_weights"] = False
    style = "qkv" if len(required) >= 3 or (len(inputs) >= 3 and inputs[1].name.lower() in ("k", "key", "keys"))\
        else "x"
    return style, mask, extra, f"forward{sig}"


def call(model, style, mask_name, extra, q, k, v, mask):
    args = (q, k, v) if style == "qkv" else (q,)
    kwargs = dict(extra)
    if mask is not None:
        kwargs[mask_name] = mask
    with torch.no_grad():
        got = model(*args, **kwargs)
    weights = None
    if isinstance(got, (tuple, list)):
        if len(got) > 1 and isinstance(got[1], torch.Tensor):
            weights = got[1]
        got = got[0]
    if not isinstance(got, torch.Tensor):
        raise TypeError(f"forward returned {type(got).__name__}, not a tensor (or a tuple starting with one)")
    return got, weights


def main():
    global STUDENT
    manifest = json.load(open(os.path.join(WORK, "cases.json")))
    STUDENT = os.path.abspath(manifest["student"])
    result = {"error": None, "runs": [], "configs": [], "notes": [], "parameters": [], "mapping": {}}

    def finish():
        with open(os.path.join(WORK, "result.json"), "w") as f:
            json.dump(result, f, indent=1)

    sys.path.insert(0, os.path.dirname(STUDENT))  # its own helper modules beside it
    torch.manual_seed(0)
    printed = io.StringIO()  # the file's own prints (a test at the bottom) are not the checker's output
    progress("importing the file")
    try:
        spec = importlib.util.spec_from_file_location("student_attention", STUDENT)
        module = importlib.util.module_from_spec(spec)
        sys.modules["student_attention"] = module
        with contextlib.redirect_stdout(printed):
            spec.loader.exec_module(module)
        cls = find_class(module, manifest.get("class") or "")
    except BaseException as e:  # noqa: BLE001 (SystemExit from the file too)
        result["error"] = error_info(e, "import")
        return finish()
    result["class"] = cls.__name__

    models = {}
    for i, cfg in enumerate(manifest["configs"]):
        d, h = cfg["d_model"], cfg["num_heads"]
        progress(f"constructing {cls.__name__} with d_model={d}, num_heads={h}")
        try:
            torch.manual_seed(i)
            with contextlib.redirect_stdout(printed):
                model, text = construct(cls, d, h)
            model.eval()
        except BaseException as e:  # noqa: BLE001
            result["error"] = error_info(e, "construct")
            result["error"]["message"] += f" (constructing {cls.__name__} with d_model={d}, num_heads={h})"
            return finish()
        result.setdefault("constructor", text)
        try:
            found, names = find_weights(model, d, manifest.get("map") or {})
            if not ({"q", "k", "v"} <= found.keys() or "qkv" in found):
                raise LookupError("cannot tell which parameters are the q, k and v projections")
            folder = f"w{i}"
            write_state_dict(os.path.join(WORK, folder), found, d)
        except Exception as e:  # noqa: BLE001
            result["error"] = error_info(e, "weights")
            result["parameters"] = [f"{n} {tuple(p.shape)}" for n, p in model.named_parameters()]
            result["map_hint"] = map_hint(model, d)
            return finish()
        if i == 0:
            result["parameters"] = [f"{n} {tuple(p.shape)}" for n, p in model.named_parameters()]
            result["mapping"] = names
        result["configs"].append({"d_model": d, "num_heads": h, "weights": folder})
        models[(d, h)] = model

    first = models[next(iter(models))]
    style, mask_name, extra, signature = forward_style(first)
    result.update({"signature": signature, "call_style": style, "takes_mask": mask_name is not None})
    load = lambda name: torch.from_numpy(np.load(os.path.join(WORK, name)))  # noqa: E731
    for case in manifest["cases"]:
        cfg = manifest["configs"][case["config"]]
        model = models[(cfg["d_model"], cfg["num_heads"])]
        if case["cross"] and style != "qkv":
            continue  # one input: no cross-attention to run
        conventions = [("", None)]
        if case.get("mask"):
            if mask_name is None:
                continue
            conventions = [(c, case["mask"][c]) for c in ("keep", "block", "additive")]
        for conv, mask_file in conventions:
            progress(f"forward, case {case['name']}" + (f", mask as {conv}" if conv else ""))
            # Read again for every run: a forward that writes into its inputs changes no other run.
            q = load(case["query"])
            k, v = (load(case["key"]), load(case["value"])) if style == "qkv" else (q, q)
            run = {"case": case["name"], "convention": conv, "output": None, "weights": None, "error": None,
                   "mask_form": ""}
            forms = [None]
            if mask_file:
                m = load(mask_file)
                # (N, L, S) broadcasts against (N, H, L, S) only when the forward adds the head axis
                # itself; otherwise the same masks as (N, 1, L, S).
                forms = [m, m.unsqueeze(1)] if m.dim() == 3 else [m]
            for n, mask in enumerate(forms):
                try:
                    with contextlib.redirect_stdout(printed):
                        out, weights = call(model, style, mask_name, extra, q, k, v, mask)
                    run["error"] = None
                    run["mask_form"] = "" if mask is None else str(tuple(mask.shape))
                    base = f"out_{case['name']}_{conv or 'none'}"
                    np.save(os.path.join(WORK, base + ".npy"), out.detach().to(torch.float32).numpy())
                    run["output"] = base + ".npy"
                    if weights is not None:
                        np.save(os.path.join(WORK, base + "_weights.npy"),
                                weights.detach().to(torch.float32).numpy())
                        run["weights"] = base + "_weights.npy"
                    break
                except Exception as e:  # noqa: BLE001
                    if run["error"] is None:  # the first form's error is the one to report
                        run["error"] = error_info(e, "forward", case["name"], conv)
            result["runs"].append(run)
    result["stdout"] = printed.getvalue()[-2000:]
    finish()


if __name__ == "__main__":
    main()
