"""Decoding overhead of AutoDeco against plain sampling (T = 1, p = 1) with the same model, prompts,
batch and number of new tokens (``min_new_tokens = max_new_tokens``, so no arm stops early),
single-threaded. The paper reports about +1.7 % latency (Sec. 4).

Three arms, timed alternately (best of ``--repeats`` rounds after one warm-up call each, so drift in
machine speed hits all of them):
- ``plain``: ``generate(do_sample=True)`` with T = 1, p = 1;
- ``autodeco``: the same with :class:`AutoDecoLogitsProcessor` (one log-softmax of ``l / T`` for the
  top-p head's features and the nucleus; nucleus among the 256 most probable tokens);
- ``autodeco_fullsort``: the heads followed by ``warp_logits`` (a sort of the whole vocabulary and a
  second softmax every step), the processor's earlier form, for comparison.
Besides wall time, the seconds spent inside the processor call are summed (``step share``): that is
the overhead with the noise of the shared machine taken out. Speed does not depend on what the heads
learnt, so untrained heads are used.

    python benchmarks/bench_autodeco.py [--model qwen2.5-coder-0.5b] [--tokens 32] [--batch 8] [--repeats 3]
"""
from __future__ import annotations

import argparse
import time

import torch


def main():
    from iclr26.decoding.autodeco import AutoDecoHeads, AutoDecoLogitsProcessor, warp_logits
    from iclr26.models import load
    from iclr26.models.generation import generate

    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="qwen2.5-coder-0.5b")
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model, tok = load(args.model, dtype=args.dtype)
    prompts = [f"Q: What is {a} + {2 * a + 3}? Think step by step.\nA:" for a in range(args.batch)]
    k = args.tokens
    fixed = dict(batch_size=args.batch, min_new_tokens=k)
    heads = AutoDecoHeads.from_base(model).eval()

    class Timed(AutoDecoLogitsProcessor):
        spent = 0.0

        def __call__(self, input_ids, scores):
            t = time.perf_counter()
            out = super().__call__(input_ids, scores)
            Timed.spent += time.perf_counter() - t
            return out

    class FullSort(Timed):
        def __call__(self, input_ids, scores):
            t = time.perf_counter()
            with torch.no_grad():
                temp, top_p = self.heads(self._hidden, scores)
                out = warp_logits(scores, temp, top_p).to(scores.dtype)
            Timed.spent += time.perf_counter() - t
            return out

    def run_with(cls):
        def f(r):
            with cls(model, heads) as proc:
                generate(model, tok, prompts, k, do_sample=True, seed=r, logits_processor=proc, **fixed)
        return f

    arms = {
        "plain": lambda r: generate(model, tok, prompts, k, do_sample=True, seed=r, **fixed),
        "autodeco": run_with(Timed),
        "autodeco_fullsort": run_with(FullSort),
    }
    best = {a: float("inf") for a in arms}
    spent = {a: float("inf") for a in arms}
    for a, f in arms.items():  # warm-up
        f(0)
    for r in range(args.repeats):
        for a, f in arms.items():
            Timed.spent = 0.0
            t = time.perf_counter()
            f(r)
            dt = time.perf_counter() - t
            if dt < best[a]:
                best[a], spent[a] = dt, Timed.spent
    n = args.batch * k
    print(f"{args.model} ({args.dtype}), batch {args.batch}, {k} new tokens, best of {args.repeats}")
    print("| arm | tokens/s | time per token vs plain | processor share of plain time |")
    print("|---|---|---|---|")
    for a in arms:
        share = "" if a == "plain" else f"{100 * spent[a] / best['plain']:+.1f} %"
        print(f"| {a} | {n / best[a]:.1f} | {100 * (best[a] / best['plain'] - 1):+.1f} % | {share} |")


if __name__ == "__main__":
    main()
