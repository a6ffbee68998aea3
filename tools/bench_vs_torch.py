#!/usr/bin/python3
# Side by side in one run: torch.nn.MultiheadAttention (torch 1.13, 2 threads, eval, no_grad,
# batch_first) against `mha bench`, or, with --model, a GPT-2 checkpoint's forward in plain torch
# against `mha bench --model`; alternating round by round, plus Eigen's sgemm rate from the same
# mha binary. Prints medians and per-round ratios, since the machines are noisy.
"""Usage: /usr/bin/python3 tools/bench_vs_torch.py [--mha build/mha] [--rounds 3] [--sizes ...] [--xl]
       /usr/bin/python3 tools/bench_vs_torch.py --model DIR [--tokens 64 256 1024] [--rounds 3]

torch runs on distinct query/key/value tensors, as `mha bench` does. That takes torch's general path
(F.multi_head_attention_forward: linear, baddbmm, softmax, bmm, linear) for need_weights=True and
False alike. torch's fused fast path (torch._native_multi_head_attention) needs query is key is
value; it is timed too, with need_weights=True, and shown for reference.

--model DIR (a Hugging Face GPT-2 folder; a GPT-2-small-sized random one comes from
`tools/gen_model_fixtures.py --gpt2-small DIR`): `mha bench --model DIR --tokens T` (every layer's
trace kept) against GPT2LMHeadModel's forward written in plain torch (Conv1D as addmm, every layer's
attention weights kept, logits at the last position), on the same token ids and thread count. The
torch forward is first checked against tests/fixtures/gpt2/f32's expected attention weights. The
sgemm floor is the model's GFLOP at that rate: the time its GEMMs alone would take.
"""
import argparse
import json
import math
import os
import statistics
import struct
import subprocess
import sys
import time

import numpy as np
import torch

FIXTURE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "fixtures", "gpt2", "f32")

SIZES = {  # name: (N, L, E, H), S = L
    "small": (3, 4, 8, 2),
    "teaching": (1, 16, 64, 4),
    "medium": (1, 512, 512, 8),
    "large": (1, 2048, 512, 8),
    "xl": (1, 4096, 1024, 16),
}
# Timed calls per round, torch and mha: enough for a stable median, a few seconds per round.
TORCH_REPEATS = {"small": 300, "teaching": 300, "medium": 10, "large": 3, "xl": 1}
MHA_REPEATS = {"small": 2000, "teaching": 1000, "medium": 20, "large": 5, "xl": 2}


def median_time(fn, repeats):
    fn()  # warm-up
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e3


class TorchCase:
    def __init__(self, size):
        n, l, e, h = SIZES[size]
        torch.manual_seed(0)
        self.module = torch.nn.MultiheadAttention(e, h, batch_first=True).eval()
        self.q, self.k, self.v = torch.rand(n, l, e), torch.rand(n, l, e), torch.rand(n, l, e)

    def time(self, need_weights, fast_path, repeats):
        m, q, k, v = self.module, self.q, self.k, self.v
        if fast_path:
            k = v = q  # query is key is value: torch._native_multi_head_attention
        with torch.no_grad():
            return median_time(lambda: m(q, k, v, need_weights=need_weights, average_attn_weights=False), repeats)


def run_mha(args, extra):
    out = subprocess.run([args.mha, "bench", "--json"] + extra, check=True, capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


# ------------------------------------------------------------------------------------------------
# GPT-2 (--model)
# ------------------------------------------------------------------------------------------------
def read_safetensors(path):
    """Every tensor of a .safetensors file as float32 torch tensors (F32, F16 and BF16 files)."""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
    data = np.memmap(path, dtype=np.uint8, mode="r", offset=8 + n)
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        a, b = e["data_offsets"]
        raw = data[a:b]
        if e["dtype"] == "BF16":  # numpy has no bfloat16: the bits, widened by torch
            t = torch.from_numpy(np.array(raw.view(np.int16))).view(torch.bfloat16).float()
        else:
            t = torch.from_numpy(np.array(raw.view({"F32": np.float32, "F16": np.float16}[e["dtype"]]),
                                          dtype=np.float32))
        out[name] = t.reshape(e["shape"])
    return out


def load_gpt2(folder):
    """config.json and the weights (model.safetensors, or the shards of model.safetensors.index.json),
    under GPT-2's names without the "transformer." prefix."""
    with open(os.path.join(folder, "config.json")) as f:
        cfg = json.load(f)
    index = os.path.join(folder, "model.safetensors.index.json")
    if os.path.exists(index):
        with open(index) as f:
            files = sorted(set(json.load(f)["weight_map"].values()))
    else:
        files = ["model.safetensors"]
    w = {}
    for name in files:
        for k, t in read_safetensors(os.path.join(folder, name)).items():
            w[k[len("transformer."):] if k.startswith("transformer.") else k] = t
    return cfg, w


def gpt2_forward(cfg, w, ids):
    """GPT2LMHeadModel's forward for one sequence, as tools/gen_model_fixtures.py's forward computes it,
    keeping every layer's attention weights (H, T, T) and the last position's logits."""
    C, H = cfg["n_embd"], cfg["n_head"]
    dk, T = C // H, len(ids)
    eps = cfg["layer_norm_epsilon"]
    ln = lambda x, p: torch.nn.functional.layer_norm(x, (C,), w[p + ".weight"], w[p + ".bias"], eps)
    heads = lambda t: t.view(T, H, dk).transpose(0, 1)  # (H, T, dk)
    blocked = ~torch.tril(torch.ones(T, T, dtype=torch.bool))
    x = w["wte.weight"][ids] + w["wpe.weight"][:T]  # (T, C)
    attentions = []
    for l in range(cfg["n_layer"]):
        p = f"h.{l}."
        qkv = torch.addmm(w[p + "attn.c_attn.bias"], ln(x, p + "ln_1"), w[p + "attn.c_attn.weight"])  # Conv1D
        q, k, v = qkv.split(C, dim=-1)
        s = torch.matmul(heads(q), heads(k).transpose(-1, -2)) / math.sqrt(dk)  # (H, T, T)
        att = torch.softmax(s.masked_fill_(blocked, torch.finfo(s.dtype).min), dim=-1)
        attentions.append(att)
        ctx = torch.matmul(att, heads(v)).transpose(0, 1).reshape(T, C)
        x = x + torch.addmm(w[p + "attn.c_proj.bias"], ctx, w[p + "attn.c_proj.weight"])
        hidden = torch.addmm(w[p + "mlp.c_fc.bias"], ln(x, p + "ln_2"), w[p + "mlp.c_fc.weight"])
        hidden = 0.5 * hidden * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (hidden + 0.044715 * hidden ** 3)))
        x = x + torch.addmm(w[p + "mlp.c_proj.bias"], hidden, w[p + "mlp.c_proj.weight"])
    head = w["lm_head.weight"] if "lm_head.weight" in w else w["wte.weight"]
    logits = ln(x[-1:], "ln_f") @ head.T
    return logits, attentions


def check_gpt2_forward():
    """The torch forward against the fixture's expected attention weights (computed by
    gen_model_fixtures.py), so a wrong forward is not timed."""
    cfg, w = load_gpt2(FIXTURE)
    ids = np.load(os.path.join(FIXTURE, "expected", "input_ids.npy")).tolist()
    want = torch.from_numpy(np.load(os.path.join(FIXTURE, "expected", "attn_weights.npy")))
    with torch.no_grad():
        _, att = gpt2_forward(cfg, w, ids)
    diff = float((torch.stack(att) - want).abs().max())
    assert diff < 1e-5, f"the torch GPT-2 forward differs from {FIXTURE}: max |diff| {diff:.3g}"
    return diff


def bench_model(args):
    torch.set_num_threads(args.threads)
    load_before = os.getloadavg()[0]
    check = check_gpt2_forward()
    cfg, w = load_gpt2(args.model)
    for t in args.tokens:
        assert 1 <= t <= cfg["n_positions"], f"--tokens {t}: this model takes 1 to {cfg['n_positions']}"
    # `mha bench --model`'s token ids and repeats, so both sides do the same work as often.
    ids = {t: [(i * 7919 + 13) % cfg["vocab_size"] for i in range(t)] for t in args.tokens}
    repeats = {t: args.repeats or (20 if t <= 64 else 5 if t <= 256 else 3) for t in args.tokens}
    rounds = []
    for r in range(args.rounds):
        rnd = {"sgemm": run_mha(args, ["--sgemm", "1024", "--threads", str(args.threads)])}
        for t in args.tokens:
            mha = run_mha(args, ["--model", args.model, "--tokens", str(t), "--threads", str(args.threads),
                                 "--repeats", str(repeats[t])])
            with torch.no_grad():
                torch_ms = median_time(lambda: gpt2_forward(cfg, w, ids[t]), repeats[t])
            rnd[t] = {"mha": mha, "torch_ms": torch_ms}
            print(f"round {r + 1}/{args.rounds} T={t}: mha {mha['median_ms']:.2f} ms, torch {torch_ms:.2f} ms",
                  file=sys.stderr)
        rounds.append(rnd)
    if args.json_out:
        with open(args.json_out, "w") as f:
            json.dump(rounds, f, indent=1)

    med = statistics.median
    sgemm = med(x["sgemm"]["gflops"] for x in rounds)
    n_params = rounds[0][args.tokens[0]]["mha"]["parameters"]
    print(f"GPT-2 {args.model}: {cfg['n_layer']} layers, {cfg['n_head']} heads, n_embd {cfg['n_embd']}, "
          f"{n_params / 1e6:.1f}M parameters; every layer's attention weights kept on both sides")
    print(f"torch {torch.__version__} (plain-torch forward, max |diff| {check:.2g} from {os.path.relpath(FIXTURE)}), "
          f"{torch.get_num_threads()} threads; mha: {args.mha} --threads {args.threads}; {args.rounds} rounds, "
          f"medians over rounds; ratios are per round, then the median")
    print(f"{os.cpu_count()} CPUs; 1-minute load average {load_before:.2f} before, "
          f"{os.getloadavg()[0]:.2f} after (anything else running skews both sides)")
    print(f"Eigen sgemm n=1024 (mha bench --sgemm 1024 --threads {args.threads}): {sgemm:.1f} GFLOP/s\n")
    head = "| tokens | mha ms | torch ms | mha / torch | GFLOP | sgemm floor ms | mha / floor | mha GFLOP/s |"
    print(head)
    print("|" + "---|" * (head.count("|") - 1))
    for t in args.tokens:
        ms = med(x[t]["mha"]["median_ms"] for x in rounds)
        torch_ms = med(x[t]["torch_ms"] for x in rounds)
        ratio = med(x[t]["mha"]["median_ms"] / x[t]["torch_ms"] for x in rounds)
        gflop = rounds[0][t]["mha"]["gflop"]
        floor_ms = gflop / sgemm * 1e3
        print(f"| {t} | {ms:.2f} | {torch_ms:.2f} | {ratio:.3f} | {gflop:.2f} | {floor_ms:.2f} | "
              f"{ms / floor_ms:.2f} | {med(x[t]['mha']['gflops'] for x in rounds):.1f} |")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--mha", default="build/mha", help="the mha binary (default build/mha)")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--sizes", default="small,teaching,medium,large")
    p.add_argument("--xl", action="store_true", help="add xl (a minute or more per round)")
    p.add_argument("--json-out", help="also write every round's raw numbers here")
    p.add_argument("--model", help="a GPT-2 folder: time its forward instead of the MHA sizes")
    p.add_argument("--tokens", type=int, nargs="+", default=[64, 256, 1024], help="with --model: sequence lengths")
    p.add_argument("--threads", type=int, default=2, help="with --model: threads for torch and mha (default 2)")
    p.add_argument("--repeats", type=int, default=0,
                   help="with --model: timed forwards per round and side (default as mha bench: 20, 5 or 3)")
    args = p.parse_args()
    if args.model:
        return bench_model(args)
    sizes = args.sizes.split(",") + (["xl"] if args.xl and "xl" not in args.sizes else [])

    torch.set_num_threads(2)
    load_before = os.getloadavg()[0]
    cases = {s: TorchCase(s) for s in sizes}
    a = torch.rand(1024, 1024)
    b = torch.rand(1024, 1024)
    rounds = []
    for r in range(args.rounds):
        rnd = {"sgemm": run_mha(args, ["--sgemm", "1024"])}
        rnd["torch_sgemm_gflops"] = 2 * 1024**3 / (median_time(lambda: torch.mm(a, b), 10) * 1e6)
        for s in sizes:
            c = cases[s]
            rnd[s] = {
                "torch_nw_true_ms": c.time(True, False, TORCH_REPEATS[s]),
                "mha": run_mha(args, ["--size", s, "--repeats", str(MHA_REPEATS[s])]),
                "torch_nw_false_ms": c.time(False, False, TORCH_REPEATS[s]),
                # On demand: the output, no (N, H, L, S) stage kept, then head 0's weights computed
                # for the view that shows them (what torch's need_weights=False skips entirely).
                "mha_on_demand": run_mha(args, ["--size", s, "--repeats", str(MHA_REPEATS[s]),
                                                "--stages", "output", "--head-weights", "0"]),
                "torch_fast_nw_true_ms": c.time(True, True, TORCH_REPEATS[s]),
            }
            print(f"round {r + 1}/{args.rounds} {s}: mha {rnd[s]['mha']['median_ms']:.4f} ms, "
                  f"torch need_weights=True {rnd[s]['torch_nw_true_ms']:.4f} ms", file=sys.stderr)
        rounds.append(rnd)
    if args.json_out:
        with open(args.json_out, "w") as f:
            json.dump(rounds, f, indent=1)

    med = statistics.median
    sgemm = med(x["sgemm"]["gflops"] for x in rounds)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; mha: {args.mha}; "
          f"{args.rounds} rounds, medians over rounds; ratios are per round, then the median")
    print(f"{os.cpu_count()} CPUs; 1-minute load average {load_before:.2f} before, "
          f"{os.getloadavg()[0]:.2f} after (anything else running skews both sides)")
    kernels = sorted({x[s]["mha"].get("cpu_kernels", "?") for x in rounds for s in sizes})
    print(f"mha kernels (runtime CPU dispatch; MHA_CPU=sse2|avx2|avx512 picks a lower one): {', '.join(kernels)}")
    print(f"Eigen sgemm n=1024 (mha bench --sgemm 1024): {sgemm:.1f} GFLOP/s; "
          f"torch.mm n=1024: {med(x['torch_sgemm_gflops'] for x in rounds):.1f} GFLOP/s\n")
    head = ("| size | mha full trace ms | torch nw=True ms | torch nw=False ms | torch fast path nw=True ms "
            "| mha / torch nw=True | mha / torch nw=False | mha GFLOP/s | mha / sgemm | peak RSS / trace |")
    print(head)
    print("|" + "---|" * (head.count("|") - 1))
    for s in sizes:
        m = [x[s]["mha"] for x in rounds]
        ms = med(x["median_ms"] for x in m)
        p10 = med(x["p10_ms"] for x in m)
        p90 = med(x["p90_ms"] for x in m)
        t_true = med(x[s]["torch_nw_true_ms"] for x in rounds)
        t_false = med(x[s]["torch_nw_false_ms"] for x in rounds)
        t_fast = med(x[s]["torch_fast_nw_true_ms"] for x in rounds)
        r_true = med(x[s]["mha"]["median_ms"] / x[s]["torch_nw_true_ms"] for x in rounds)
        r_false = med(x[s]["mha"]["median_ms"] / x[s]["torch_nw_false_ms"] for x in rounds)
        r_sgemm = med(x[s]["mha"]["gflops"] / x["sgemm"]["gflops"] for x in rounds)
        gflops = med(x["gflops"] for x in m)
        rss = max(x["peak_rss_bytes"] for x in m)
        trace = m[0]["trace_bytes"]
        print(f"| {s} | {ms:.4f} ({p10:.4f}–{p90:.4f}) | {t_true:.4f} | {t_false:.4f} | {t_fast:.4f} "
              f"| {r_true:.3f} | {r_false:.3f} | {gflops:.1f} | {100 * r_sgemm:.0f} % "
              f"| {rss / 2**20:.0f} / {trace / 2**20:.0f} MiB = {rss / trace:.2f} |")
    print("\nOn demand: `mha bench --stages output --head-weights 0` (the output, no (N, H, L, S) stage kept, "
          "then head 0's attn_weights) against torch need_weights=False:\n")
    head = "| size | mha on demand ms | torch nw=False ms | mha on demand / torch nw=False | peak RSS |"
    print(head)
    print("|" + "---|" * (head.count("|") - 1))
    for s in sizes:
        od = [x[s]["mha_on_demand"] for x in rounds]
        ms = med(x["median_ms"] for x in od)
        t_false = med(x[s]["torch_nw_false_ms"] for x in rounds)
        ratio = med(x[s]["mha_on_demand"]["median_ms"] / x[s]["torch_nw_false_ms"] for x in rounds)
        rss = max(x["peak_rss_bytes"] for x in od)
        print(f"| {s} | {ms:.4f} | {t_false:.4f} | {ratio:.3f} | {rss / 2**20:.0f} MiB |")
    print("\nmha per-stage medians (ms), last round:")
    for s in sizes:
        st = rounds[-1][s]["mha"].get("stages_ms", {})
        print(f"  {s}: " + ", ".join(f"{k} {v:.4f}" for k, v in st.items()))
    if "xl" not in sizes:
        print("\nxl skipped (a minute or more per round); add --xl to include it.")


if __name__ == "__main__":
    main()
