"""Wall time of PTP decoding (one PTP call + one teacher call per cycle, exact verification) against
plain autoregressive inverse-CDF sampling of the same teacher (``ar_sample``, one call per token),
same prompts, same auxiliaries (so both produce the same tokens), single-threaded.

The student is trained briefly on the teacher's Markov language (``train_ptp``) so that drafts are
accepted; the script reports tokens per teacher call, seconds per generated token of each arm and
their ratio, timed alternately (best of ``--repeats``). Without a KV cache every call recomputes the
sequence, so on a CPU the ratio reflects call counts more than memory bandwidth.

    python benchmarks/bench_ptp.py [--tokens 48] [--k 8] [--steps 300] [--prompts 4] [--repeats 2]
"""
from __future__ import annotations

import argparse
import time

import numpy as np
import torch


def main():
    from iclr26.decoding.ptp import PTPForCausalLM, ar_sample, ptp_generate, train_ptp
    from iclr26.models.speculative import markov_target

    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens", type=int, default=48)
    ap.add_argument("--k", type=int, default=8)
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--prompts", type=int, default=4)
    ap.add_argument("--repeats", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(1)
    teacher, text = markov_target(0, n_tokens=16, concentration=0.1, hidden_size=64, steps=300, seq_len=48)
    rng = np.random.default_rng(1)
    torch.manual_seed(0)
    student = PTPForCausalLM.from_teacher(teacher)
    train_ptp(student, teacher, text(512, 48, rng), args.steps, k=args.k, lr=2e-3)
    prompts = text(args.prompts, 12, rng)
    us = [torch.rand(args.tokens + args.k + 1, generator=torch.Generator().manual_seed(i), dtype=torch.float64)
          for i in range(args.prompts)]
    best = {"ptp": float("inf"), "ar": float("inf")}
    calls = 0
    for _ in range(args.repeats):
        t = time.perf_counter()
        calls = 0
        for p, u in zip(prompts, us):
            _, st = ptp_generate(teacher, student, p, args.tokens, k=args.k, u=u)
            calls += st.target_calls
        best["ptp"] = min(best["ptp"], time.perf_counter() - t)
        t = time.perf_counter()
        for p, u in zip(prompts, us):
            ar_sample(teacher, p, u[: args.tokens])
        best["ar"] = min(best["ar"], time.perf_counter() - t)
    n = args.tokens * args.prompts
    print(f"tokens per teacher call (PTP): {n / calls:.2f}")
    for arm in ("ptp", "ar"):
        print(f"{arm}: {1e3 * best[arm] / n:.2f} ms per token")
    print(f"time per token, PTP vs autoregressive: {100 * (best['ptp'] / best['ar'] - 1):+.1f} %")


if __name__ == "__main__":
    main()
