"""Real-model case for the McNemar degradation test (Sec. 6 of the paper: lossless optimisations
must not be flagged, real degradations must be).

On the same arithmetic items (:func:`iclr26.data.math.arithmetic_problems`, few-shot prompt whose
reply is started with the expression, first number of the completion read), per-item greedy
correctness of
(a) the base model (SmolLM2-135M-Instruct, fp32, batches of 8 in item order),
(b) a provably lossless change: the same model and weights with a different batch composition
    (items shuffled before batching, so padding lengths and batched matmul shapes change; only
    floating-point rounding can differ),
(c) a real degradation: the same model with two middle transformer layers removed (large drop),
(d) a milder real degradation: one late layer removed.

The paired lists feed the exact McNemar test (the folder's ``test.py``): (a) vs (b) should not be
flagged, (a) vs (c) should be.
"""
from __future__ import annotations

import copy

import numpy as np

SCALES = {
    # a handful of items, few tokens: exercises every code path in seconds
    "smoke": dict(model="smollm2-135m", n=6, difficulty=1, max_new_tokens=3, batch_size=8, drop=(14, 15),
                  mild_drop=(28,)),
    # SmolLM2-135M answers ~70 % of one-digit sums greedily with the few-shot prompt
    # measured on these 100 items: base 59 %, lossless 59 % (no output changed), dropping layers
    # 14-15: 7 %, dropping layer 28 only: 52 %
    "quick": dict(model="smollm2-135m", n=100, difficulty=1, max_new_tokens=4, batch_size=8, drop=(14, 15),
                  mild_drop=(28,)),
    "paper": dict(model="qwen2.5-coder-1.5b", n=1319, difficulty=4, max_new_tokens=8, batch_size=8, drop=(20, 21),
                  mild_drop=(26,)),
}


def drop_layers(model, layers):
    """A deep copy of a Llama/Qwen-style causal LM without the decoder ``layers`` (indices)."""
    import torch

    layers = sorted(set(int(i) for i in layers))
    n = len(model.model.layers)
    if any(i < 0 or i >= n for i in layers) or len(layers) >= n:
        raise ValueError(f"layers to drop must be distinct indices in [0, {n}) leaving at least one, got {layers}")
    new = copy.deepcopy(model)
    keep = [l for i, l in enumerate(new.model.layers) if i not in layers]
    new.model.layers = torch.nn.ModuleList(keep)
    for i, layer in enumerate(new.model.layers):
        layer.self_attn.layer_idx = i
    new.config.num_hidden_layers = len(keep)
    if getattr(new.config, "layer_types", None):
        new.config.layer_types = [t for i, t in enumerate(new.config.layer_types) if i not in layers]
    return new.eval()


def _correct(model, tok, prompts, golds, cfg, order=None):
    from iclr26.data.math import first_number, is_correct
    from iclr26.models.generation import generate

    order = np.arange(len(prompts)) if order is None else np.asarray(order)
    outs = generate(model, tok, [prompts[i] for i in order], cfg["max_new_tokens"], batch_size=cfg["batch_size"])
    texts = [None] * len(prompts)
    for j, i in enumerate(order):
        texts[i] = outs[j]
    return [float(is_correct(first_number(t), g)) for t, g in zip(texts, golds)], texts


def real_model_case(scale: str, seed: int) -> dict:
    """Per-item correctness of base, lossless and degraded variants (the experiment protocol format)."""
    from iclr26.common.seeding import seed_everything
    from iclr26.data.math import arithmetic_problems, arithmetic_prompt
    from iclr26.models import load

    if scale not in SCALES:
        raise ValueError(f"scale must be one of {sorted(SCALES)}, got {scale!r}")
    cfg = SCALES[scale]
    rng = seed_everything(seed)
    model, tok = load(cfg["model"])
    probs = arithmetic_problems(cfg["n"], seed=seed, difficulty=cfg["difficulty"])
    # few-shot chat prompt whose reply starts with "<expression> =": the completion is the value
    prompts = [arithmetic_prompt(tok, p) for p in probs]
    golds = [p.answer for p in probs]

    base, base_txt = _correct(model, tok, prompts, golds, cfg)
    lossless, loss_txt = _correct(model, tok, prompts, golds, cfg, order=rng.permutation(len(prompts)))
    degraded, _ = _correct(drop_layers(model, cfg["drop"]), tok, prompts, golds, cfg)
    mild, _ = _correct(drop_layers(model, cfg["mild_drop"]), tok, prompts, golds, cfg)
    return {
        "metrics": {
            "lossless_correct": {"base": base, "lossless": lossless},
            "degraded_correct": {"base": base, "degraded": degraded},
            "mild_degraded_correct": {"base": base, "degraded": mild},
        },
        "info": {
            "model": cfg["model"],
            "n_items": len(prompts),
            "accuracy": {"base": float(np.mean(base)), "lossless": float(np.mean(lossless)),
                         "degraded": float(np.mean(degraded)), "mild_degraded": float(np.mean(mild))},
            "lossless_text_changed": int(sum(a != b for a, b in zip(base_txt, loss_txt))),
            "dropped_layers": list(cfg["drop"]),
            "mild_dropped_layers": list(cfg["mild_drop"]),
        },
    }
