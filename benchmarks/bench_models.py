"""Speed of the bundled-model substrate: load time (cached HF folder) and greedy generation
throughput of :func:`iclr26.models.generation.generate` against a plain ``model.generate`` call on
the same prompts (same tokens: min_new_tokens = max_new_tokens), at batch 1 and batch B.
The wrapper should cost nothing measurable beyond tokenisation and decoding.

    python benchmarks/bench_models.py [--model smollm2-135m] [--tokens 32] [--batch 8] [--threads 1]
"""
from __future__ import annotations

import argparse
import time

import torch

from iclr26.models import load, prepare
from iclr26.models.generation import generate


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)

    t = time.perf_counter(); prepare(args.model); t_prep = time.perf_counter() - t
    t = time.perf_counter(); model, tok = load(args.model); t_load = time.perf_counter() - t
    print(f"{args.model}: prepare {t_prep:.2f} s (cached after the first call), load {t_load:.2f} s, dtype {model.dtype}")

    prompts = [f"Q: What is {a} + {2 * a + 1}?\nA:" for a in range(args.batch)]
    for bs in (1, args.batch):
        ps = prompts[:bs]
        t = time.perf_counter()
        generate(model, tok, ps, args.tokens, batch_size=bs, min_new_tokens=args.tokens)
        t_ours = time.perf_counter() - t
        tok.padding_side = "left"
        enc = tok(ps, return_tensors="pt", padding=True, add_special_tokens=False)
        t = time.perf_counter()
        with torch.no_grad():
            model.generate(**enc, max_new_tokens=args.tokens, min_new_tokens=args.tokens, do_sample=False,
                           pad_token_id=tok.pad_token_id)
        t_plain = time.perf_counter() - t
        n = bs * args.tokens
        print(f"batch {bs}: iclr26 generate {n / t_ours:.1f} tok/s, plain model.generate {n / t_plain:.1f} tok/s")


if __name__ == "__main__":
    main()
