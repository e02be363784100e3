"""Cost of the inactive-heads pieces against a plain forward pass of the same model on the same
inputs: single-threaded CPU time (``time.process_time``), best of ``--repeats``, reported as ratios.

    python benchmarks/bench_inactive_heads.py [--model tiny|smollm2-135m] [--repeats 3]

- ``head_scores`` with all 12 scores (eager attention, weights returned, hooks on v_proj and o_proj),
  with the output-norm scores only (no attention weights), against ``model(ids)`` (the model's default
  attention).
- a forward pass inside ``zero_heads_per_input`` (10 % of the heads zeroed) against the plain pass.
"""
from __future__ import annotations

import argparse
import time

import torch

from iclr26.interpretability.inactive_heads import head_scores, random_mask, zero_heads_per_input
from iclr26.models.hooks import head_layout
from _timing import best_of


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="tiny")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--seq-len", type=int, default=96)
    args = ap.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    if args.model == "tiny":
        from transformers import LlamaConfig, LlamaForCausalLM

        model = LlamaForCausalLM(LlamaConfig(vocab_size=512, hidden_size=128, intermediate_size=256,
                                             num_hidden_layers=4, num_attention_heads=8,
                                             num_key_value_heads=4)).eval()
        vocab = 512
    else:
        from iclr26.models import load

        model, tok = load(args.model, dtype="float32")
        vocab = len(tok)
    ids = torch.randint(0, vocab, (args.batch, args.seq_len))
    L, H, _ = head_layout(model)
    mask = random_mask((L, H), 0.1, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        plain = best_of(lambda: model(ids), args.repeats)
        all12 = best_of(lambda: head_scores(model, ids), args.repeats)
        norms = best_of(lambda: head_scores(model, ids, scores=("ahon", "ahon_ln", "lthon", "lthon_ln")), args.repeats)

        def zeroed():
            for i in range(args.batch):
                with zero_heads_per_input(model, mask):
                    model(ids[i:i + 1])

        def single():
            for i in range(args.batch):
                model(ids[i:i + 1])
        z = best_of(zeroed, args.repeats)
        s = best_of(single, args.repeats)
    print(f"model {args.model}, batch {args.batch} x {args.seq_len} tokens, {L} x {H} heads")
    print("| piece | time (s) | peer | peer time (s) | piece / peer |")
    print("|---|---|---|---|---|")
    print(f"| head_scores, 12 scores | {all12:.3f} | plain forward | {plain:.3f} | {all12 / plain:.2f} |")
    print(f"| head_scores, output norms | {norms:.3f} | plain forward | {plain:.3f} | {norms / plain:.2f} |")
    print(f"| forward inside zero_heads_per_input (per input) | {z:.3f} | plain forward per input | {s:.3f} | {z / s:.2f} |")


if __name__ == "__main__":
    main()
