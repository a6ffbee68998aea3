#!/usr/bin/python3
# Side by side in one run: torch.nn.MultiheadAttention (torch 1.13, 2 threads, eval, no_grad,
# batch_first) against `mha bench`, alternating round by round, plus Eigen's sgemm rate from the same
# mha binary. Prints medians and per-round ratios, since the machines are noisy.
"""Usage: /usr/bin/python3 tools/bench_vs_torch.py [--mha build/mha] [--rounds 3] [--sizes ...] [--xl]

torch runs on distinct query/key/value tensors, as `mha bench` does. That takes torch's general path
(F.multi_head_attention_forward: linear, baddbmm, softmax, bmm, linear) for need_weights=True and
False alike. torch's fused fast path (torch._native_multi_head_attention) needs query is key is
value; it is timed too, with need_weights=True, and shown for reference.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

import torch

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


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--mha", default="build/mha", help="the mha binary (default build/mha)")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--sizes", default="small,teaching,medium,large")
    p.add_argument("--xl", action="store_true", help="add xl (a minute or more per round)")
    p.add_argument("--json-out", help="also write every round's raw numbers here")
    args = p.parse_args()
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
    print("\nmha per-stage medians (ms), last round:")
    for s in sizes:
        st = rounds[-1][s]["mha"].get("stages_ms", {})
        print(f"  {s}: " + ", ".join(f"{k} {v:.4f}" for k, v in st.items()))
    if "xl" not in sizes:
        print("\nxl skipped (a minute or more per round); add --xl to include it.")


if __name__ == "__main__":
    main()
