"""Decoding throughput of AutoDeco (heads + per-token temperature/top-p via AutoDecoLogitsProcessor)
against plain sampling (T=1, p=1) with transformers' generate, same prompts, same number of new
tokens (min_new_tokens = max_new_tokens), single-threaded. The paper reports about +1.7 % latency.

    python benchmarks/bench_autodeco.py [--model smollm2-135m] [--tokens 32] [--batch 8] [--repeats 3]
"""
from __future__ import annotations

import argparse
import time

import torch

from iclr26.decoding.autodeco import AutoDecoHeads, AutoDecoLogitsProcessor
from iclr26.models import load
from iclr26.models.generation import generate


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    torch.set_num_threads(1)
    model, tok = load(args.model)
    heads = AutoDecoHeads.from_base(model).eval()
    prompts = [f"Q: {a} + {a + 3} = ?\nA:" for a in range(args.batch)]
    kw = dict(do_sample=True, batch_size=args.batch, min_new_tokens=args.tokens)

    def timed(proc):
        best = float("inf")
        for r in range(args.repeats):
            t = time.perf_counter()
            generate(model, tok, prompts, args.tokens, seed=r, logits_processor=proc, **kw)
            best = min(best, time.perf_counter() - t)
        return args.batch * args.tokens / best

    plain = timed(None)
    with AutoDecoLogitsProcessor(model, heads) as proc:
        auto = timed(proc)
    print(f"model={args.model} batch={args.batch} new_tokens={args.tokens}")
    print(f"plain sampling : {plain:8.1f} tokens/s")
    print(f"AutoDeco       : {auto:8.1f} tokens/s")
    print(f"latency overhead: {100 * (plain / auto - 1):+.1f} % (paper: +1.7 %)")


if __name__ == "__main__":
    main()
