"""Time of the closed-form KAN tangent kernel, H = (S S^T / m) * (Psi Psi^T), against the generic
empirical kernel J J^T (one autograd backward per point, what neural-tangents-style tools do for a
torch model without a closed form), single-threaded, reported with the max abs difference.

    python benchmarks/bench_kan_tk.py [--sizes 32x256,64x1024] [--d 10]
"""
from __future__ import annotations

import argparse
import time

import torch

from iclr26.architectures.kan_tk import KANTKConfig, TwoLayerKAN, empirical_tangent_kernel, kan_tangent_kernel


def timed(fn, repeats):
    best, out = float("inf"), None
    for _ in range(repeats):
        t = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t)
    return best, out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="32x256,64x1024", help="comma list of n x m")
    ap.add_argument("--d", type=int, default=10)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    torch.set_num_threads(1)
    print(f"{'n':>5} {'m':>6} {'closed form s':>14} {'autograd JJ^T s':>16} {'speed-up':>9} {'max |diff|':>11}")
    for size in args.sizes.split(","):
        n, m = (int(v) for v in size.split("x"))
        g = torch.Generator().manual_seed(0)
        model = TwoLayerKAN(KANTKConfig(args.d, m), generator=g).double()
        x = torch.nn.functional.normalize(torch.randn(n, args.d, generator=g, dtype=torch.float64), dim=1)
        t_cf, h_cf = timed(lambda: kan_tangent_kernel(model, x), args.repeats)
        t_ad, h_ad = timed(lambda: empirical_tangent_kernel(model, x), args.repeats)
        diff = float((h_cf - h_ad).abs().max())
        print(f"{n:>5} {m:>6} {t_cf:>14.4f} {t_ad:>16.4f} {t_ad / t_cf:>9.1f} {diff:>11.2e}")


if __name__ == "__main__":
    main()
