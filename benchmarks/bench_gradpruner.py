"""Cost of GradPruner's pieces against the plain operations they sit beside: single-threaded CPU time
(``time.process_time``), best of ``--repeats``, reported as ratios.

    python benchmarks/bench_gradpruner.py [--model tiny|smollm2-135m] [--repeats 3] [--prune 0.4]

- a LoRA training step with ``IGIA.update`` against the same step without it (the warm-up overhead);
- ``prune_layers`` with merging (one-off) against one LoRA step;
- a forward pass of the pruned model (``--prune`` of the blocks removed) against the dense model
  (the paper reports 61.5 % of the dense inference time at 40 % pruning, Sec. 4);
- ShortGPT ``block_influence_scores`` on the same batch against a plain forward pass.
"""
from __future__ import annotations

import argparse
import copy
import time

import torch

from iclr26.compression.gradpruner import IGIA, block_influence_scores, prune_layers, select_prune_run
from iclr26.models.lora import with_lora
from _timing import best_of


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="tiny")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq-len", type=int, default=32)
    ap.add_argument("--prune", type=float, default=0.4)
    args = ap.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    if args.model == "tiny":
        from iclr26.models.testing import wide_llama

        model, vocab = wide_llama(num_layers=10, hidden_size=128, intermediate_size=256, vocab_size=512), 512
    else:
        from iclr26.models import load

        model, tok = load(args.model, dtype="float32")
        vocab = len(tok)
    ids = torch.randint(0, vocab, (args.batch, args.seq_len))
    pm = with_lora(copy.deepcopy(model), r=8, seed=0)
    opt = torch.optim.AdamW([p for p in pm.parameters() if p.requires_grad], lr=1e-4)
    igia = IGIA()

    def step(with_igia):
        pm(input_ids=ids, labels=ids).loss.backward()
        if with_igia:
            igia.update(pm)
        opt.step()
        opt.zero_grad()

    step(False)
    plain = best_of(lambda: step(False), args.repeats)
    with_i = best_of(lambda: step(True), args.repeats)
    n = len(pm.get_base_model().model.layers)
    drop = select_prune_run(igia.layer_scores(), int(round(args.prune * n)))   # the official contiguous run
    merged_src = pm.merge_and_unload()
    prune_t = best_of(lambda: prune_layers(copy.deepcopy(merged_src), drop, importance=igia.matrices()),
                      1)
    small = prune_layers(copy.deepcopy(merged_src), drop, importance=igia.matrices())
    with torch.no_grad():
        dense_f = best_of(lambda: model(input_ids=ids), args.repeats)
        small_f = best_of(lambda: small(input_ids=ids), args.repeats)
        bi = best_of(lambda: block_influence_scores(model, ids), args.repeats)
    print(f"model {args.model}: {n} blocks, {len(drop)} pruned; batch {args.batch} x {args.seq_len} tokens")
    print(f"LoRA step {plain:.3f} s; with IGIA.update {with_i:.3f} s ({with_i / plain - 1:+.1%})")
    print(f"prune_layers with merge (one-off, incl. deepcopy) {prune_t:.3f} s = {prune_t / plain:.2f} LoRA steps")
    print(f"forward: dense {dense_f:.3f} s, pruned {small_f:.3f} s ({small_f / dense_f:.1%} of dense)")
    print(f"block_influence_scores {bi:.3f} s ({bi / dense_f:.2f}x a forward pass)")


if __name__ == "__main__":
    main()
