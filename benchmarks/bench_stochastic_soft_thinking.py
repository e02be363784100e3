"""Throughput of soft thinking (vanilla and Gumbel-Softmax soft tokens through inputs_embeds)
against discrete greedy decoding with the same loop (mode="discrete") and against transformers'
own greedy generate, single-threaded, same prompts and number of thinking steps.

    python benchmarks/bench_stochastic_soft_thinking.py [--model smollm2-135m] [--tokens 32] [--batch 8]
"""
from __future__ import annotations

import argparse
import time

import torch

from iclr26.decoding.stochastic_soft_thinking import soft_thinking_generate
from iclr26.models import load
from iclr26.models.generation import generate


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--batch", type=int, default=8)
    args = ap.parse_args()
    torch.set_num_threads(1)
    model, tok = load(args.model)
    prompts = [f"Q: {a} + {a + 3} + 4\nA:" for a in range(args.batch)]
    n = args.batch * args.tokens
    t = time.perf_counter()
    generate(model, tok, prompts, args.tokens, batch_size=args.batch, min_new_tokens=args.tokens)
    print(f"transformers greedy generate : {n / (time.perf_counter() - t):8.1f} tokens/s")
    for mode in ("discrete", "vanilla", "gumbel"):
        t = time.perf_counter()
        soft_thinking_generate(model, tok, prompts, mode=mode, seed=0, max_think_tokens=args.tokens,
                               max_answer_tokens=0, batch_size=args.batch)
        print(f"soft_thinking_generate {mode:8s}: {n / (time.perf_counter() - t):8.1f} tokens/s")


if __name__ == "__main__":
    main()
