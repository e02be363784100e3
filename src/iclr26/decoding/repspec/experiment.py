"""RepSpec claim check (structurally re-parameterised EAGLE draft training).

Per seed: a tiny Llama target is trained here on an order-2 Markov language
(:func:`iclr26.models.speculative.markov_target`); EAGLE-1 draft heads (one decoder layer on the
target's features, the target's frozen LM head) are trained on the target's features of fresh text
from the language: the plain head and the re-parameterised head (one Pre and one Bypass on
q/k/v/o/gate/up/down, :func:`iclr26.decoding.repspec.reparameterize`), from the same initial
weights, with the same batches and the same number of steps. Each arm's learning rate is chosen
from the same grid by its mean accepted length on validation prompts (equal tuning budget). The
re-parameterised head is merged (:func:`merge_all`) before decoding. Both are evaluated by exact
greedy chain speculative decoding on the same held-out prompts.

Metrics: ``tau`` (per test prompt: tokens per verification call, EAGLE's mean accepted length;
items clustered by seed), ``merge_max_abs_diff`` (max |logit difference| between the unmerged and
the merged re-parameterised head on held-out positions, one value per seed).
"""
from __future__ import annotations

import time

import numpy as np
import torch

from iclr26.common.seeding import seed_everything

SCALES = {
    "smoke": dict(target=dict(n_tokens=12, concentration=0.2, hidden_size=32, steps=20, seq_len=24, n_train=128),
                  n_train=32, train_len=24, draft_steps=5, batch_size=8, lrs=(3e-3,), n_val=2, n_test=2,
                  prompt_len=8, new_tokens=8, depth=3, cost_ratio=0.05),
    "quick": dict(target=dict(n_tokens=16, concentration=0.2, hidden_size=64, steps=300, seq_len=48),
                  n_train=256, train_len=48, draft_steps=200, batch_size=16, lrs=(3e-3, 1e-2), n_val=8,
                  n_test=16, prompt_len=16, new_tokens=40, depth=5, cost_ratio=0.05),
    # the paper: LLaMA-3.1-8B / Vicuna targets, EAGLE-1/-3 drafts trained on ShareGPT, MT-Bench etc.
    "paper": dict(target="meta-llama/Llama-3.1-8B-Instruct", data="ShareGPT 68k dialogues", epochs=20,
                  eval="MT-Bench, HumanEval, GSM8K, Alpaca, CNN/DM, Natural Questions"),
}
SEEDS = {"smoke": 1, "quick": 6, "paper": 1}   # quick: power estimate in README.md


def _head(target, seed, rep):
    from iclr26.decoding.repspec import reparameterize
    from iclr26.models.speculative import EagleDraftHead

    torch.manual_seed(10_000 + seed)           # the same initial weights for every arm of a seed
    head = EagleDraftHead.from_target(target, num_attention_heads=4)
    if rep:
        reparameterize(head)
    return head


def run(scale: str, seed: int) -> dict:
    from iclr26.decoding.repspec import merge_all
    from iclr26.models.speculative import (
        EagleDrafter, acceptance_profile, markov_target, target_features, train_draft_head,
    )

    if scale == "paper":
        raise NotImplementedError("the paper's 8B-70B targets need GPUs and hub access")
    cfg = SCALES[scale]
    seed_everything(seed)
    t0 = time.time()
    target, text = markov_target(seed, **cfg["target"])
    rng = np.random.default_rng(seed + 1000)
    train = text(cfg["n_train"], cfg["train_len"], rng)
    val = text(cfg["n_val"], cfg["prompt_len"], rng)
    test = text(cfg["n_test"], cfg["prompt_len"], rng)
    held = text(8, cfg["train_len"], rng)
    feats = target_features(target, train)
    held_feats = target_features(target, held)
    t_target = time.time() - t0
    dec = dict(depth=cfg["depth"], topk=1)

    taus, info_arm = {}, {}
    merge_diff = float("nan")
    for arm in ("plain", "repspec"):
        best = None
        val_taus = {}
        for lr in cfg["lrs"]:
            head = _head(target, seed, arm == "repspec")
            train_draft_head(head, feats, train, cfg["draft_steps"], batch_size=cfg["batch_size"], lr=lr, seed=seed)
            if arm == "repspec":
                with torch.no_grad():
                    before = head.lm_head(head(held_feats[:, :-1], held[:, 1:]))
                merge_all(head)
                with torch.no_grad():
                    after = head.lm_head(head(held_feats[:, :-1], held[:, 1:]))
                diff = float((before - after).abs().max())
            v = acceptance_profile(target, EagleDrafter(head), val, cfg["new_tokens"], **dec).mean_accepted_length
            val_taus[lr] = v
            if best is None or v > best[0]:
                best = (v, lr, head, diff if arm == "repspec" else None)
        _, lr, head, d = best
        if arm == "repspec":
            merge_diff = d
        st = acceptance_profile(target, EagleDrafter(head), test, cfg["new_tokens"], **dec)
        taus[arm] = [float(x) for x in st.per_prompt]
        info_arm[arm] = dict(lr=lr, val_tau=val_taus, tau=st.mean_accepted_length,
                             tokens_per_target_forward=st.tokens_per_target_forward,
                             acceptance_rate=st.acceptance_rate,
                             expected_speedup=st.expected_speedup(cfg["cost_ratio"]), wall_s=st.wall_s)
    return {
        "metrics": {"tau": taus, "merge_max_abs_diff": {"repspec": merge_diff}},
        "info": {"arms": info_arm, "target_train_loss": target.train_loss, "seconds": {
            "target": t_target, "total": time.time() - t0}, "cost_ratio": cfg["cost_ratio"],
            "decoding": dict(dec, new_tokens=cfg["new_tokens"])},
    }
