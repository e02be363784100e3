"""Time per optimiser step of TIDPOTrainer (hybrid weights + triplet, and without the triplet) against
TRL's DPOTrainer, SmolLM2-135M + LoRA, the same pairs and batch; methods alternate, best of the rounds.

The paper (Appendix D.1) puts TI-DPO at about 2x DPO's training time (one extra backward pass for the
attribution); the anchor sampling adds generation on top.
Run: python benchmarks/bench_ti_dpo.py [--steps 3] [--rounds 2] [--batch 8] [--anchor-tokens 8]
"""
from __future__ import annotations

import argparse
import tempfile
import time


def _pairs(n):
    from iclr26.data.math import arithmetic_problems
    out = []
    for p in arithmetic_problems(n, seed=1, difficulty=2):
        a = int(p.answer)
        out.append(dict(prompt=f"2 + 3 = 5\n{p.metadata['expression']} =", chosen=f" {a}", rejected=f" {a + 1}"))
    return out


def _step_time(kind, pairs, args):
    from datasets import Dataset
    from trl import DPOConfig, DPOTrainer

    from iclr26.models.lora import load_with_lora, trl_args
    from iclr26.posttraining.ti_dpo import TIDPOTrainer

    model, tok = load_with_lora("smollm2-135m", r=8, seed=0)
    with tempfile.TemporaryDirectory() as out:
        cfg = trl_args(DPOConfig, out, max_steps=args.steps, per_device_train_batch_size=args.batch,
                       precompute_ref_log_probs=False, learning_rate=1e-4, logging_steps=10 ** 6)
        kw = dict(model=model, args=cfg, processing_class=tok, train_dataset=Dataset.from_list(pairs))
        if kind == "dpo":
            tr = DPOTrainer(**kw)
        else:
            tr = TIDPOTrainer(**kw, gamma=0.1 if kind == "ti_dpo" else 0.0, anchor_max_new_tokens=args.anchor_tokens)
        t = time.perf_counter()
        tr.train()
        return (time.perf_counter() - t) / args.steps


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--anchor-tokens", type=int, default=8)
    args = ap.parse_args()
    import torch
    import transformers
    torch.set_num_threads(1)
    transformers.logging.set_verbosity_error()
    pairs = _pairs(args.batch * args.steps)
    kinds = ("dpo", "ti_dpo_no_triplet", "ti_dpo")
    best = {k: float("inf") for k in kinds}
    for _ in range(args.rounds):
        for k in kinds:
            best[k] = min(best[k], _step_time(k, pairs, args))
    print(f"{'trainer':<20} {'s/step':>8} {'vs DPO':>8}")
    for k in kinds:
        print(f"{k:<20} {best[k]:8.2f} {best[k] / best['dpo']:7.2f}x")


if __name__ == "__main__":
    main()
