"""xLSTM vs Transformer at matched training compute: a tiny IsoFLOP study on offline text.

One trial (seed) is one independent IsoFLOP study: both families are trained at every width of a
grid under every compute budget (the token count of each run is the budget divided by the model's
traced training FLOPs per token), from a fresh initialisation and data order, with each family's
learning rate chosen on a validation split; the final cross-entropy is measured on a held-out test
split. Per seed and family we report

* ``envelope_log_loss``: the mean over budgets of ``log`` of the best test loss among the widths
  (the Pareto envelope of loss against compute, the paper's Fig. 1 comparison);
* ``log10_nstar``: the mean over budgets of ``log10`` of the compute-optimal parameter count, the
  vertex of the IsoFLOP parabola of loss in ``log10 N`` (:func:`isoflop_optimum`).

Text: every topic of CPython's bundled documentation (``pydoc_data.topics``), characters as
tokens; the first 80 % trains, the next 10 % is the validation split (learning rates), the last
10 % the test split.
"""
from __future__ import annotations

import math

import numpy as np

from iclr26.common.seeding import seed_everything

from .fitting import isoflop_optimum
from .lm import ARCHS, build_lm, count_params, training_flops_per_token

SCALES = {
    "smoke": dict(widths=(16, 24, 32), budgets=(1e8, 2e8), context_length=32, batch=4, num_layers=1,
                  lr_grid=(3e-3,), lr_width=16, lr_budget=1e8, n_eval=4, max_chars=60_000),
    "quick": dict(widths=(16, 24, 32, 48), budgets=(1e11, 3e11), context_length=256, batch=8, num_layers=2,
                  lr_grid=(3e-3, 1e-2, 3e-2), lr_width=24, lr_budget=1e11, n_eval=64, max_chars=None),
    # the paper: 80M-7B parameters, 2B-2T tokens, budgets 2.8e18-8.5e22 FLOPs, context 2k/8k/16k,
    # DCLM text, 672 runs (not run here)
    "paper": dict(widths=(768, 1024, 1536, 2048, 4096), budgets=(6e18, 1e19, 3e19, 1e20, 6e20),
                  context_length=8192, batch=128, num_layers=24, lr_grid=(3e-4, 1e-3), lr_width=1024,
                  lr_budget=6e18, n_eval=1000, max_chars=None),
}
SEEDS = {"smoke": 1, "quick": 4, "paper": 3}
NUM_HEADS = 2


def corpus_ids(max_chars: int | None = None) -> tuple[np.ndarray, int]:
    """Character ids of CPython's bundled documentation topics (sorted by key) and the vocabulary size."""
    import pydoc_data.topics as topics

    text = "\n\n".join(topics.topics[k] for k in sorted(topics.topics))
    if max_chars is not None:
        text = text[:max_chars]
    vocab = sorted(set(text))
    lut = {c: i for i, c in enumerate(vocab)}
    return np.fromiter((lut[c] for c in text), dtype=np.int64, count=len(text)), len(vocab)


def _split(ids: np.ndarray):
    n = len(ids)
    return ids[: int(0.8 * n)], ids[int(0.8 * n): int(0.9 * n)], ids[int(0.9 * n):]


def _eval_windows(ids: np.ndarray, n: int, T: int):
    import torch

    starts = np.linspace(0, len(ids) - T - 1, n).astype(int)
    return torch.as_tensor(np.stack([ids[s: s + T] for s in starts]))


def train_run(arch: str, width: int, budget: float, cfg: dict, train_ids: np.ndarray, eval_x, vocab: int,
              lr: float, seed: int) -> dict:
    """Train one model of ``arch``/``width`` for ``budget`` training FLOPs; return its loss on ``eval_x``."""
    import torch

    T, B = cfg["context_length"], cfg["batch"]
    model = build_lm(arch, width, vocab, num_layers=cfg["num_layers"], num_heads=NUM_HEADS, context_length=T,
                     seed=seed)
    f_tok = training_flops_per_token(model, T, vocab)
    steps = max(1, int(round(budget / (f_tok * T * B))))
    opt = torch.optim.AdamW(model.parameters(), lr=lr, betas=(0.9, 0.95), weight_decay=0.1)
    warm = max(1, steps // 10)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / warm) * 0.5 * (1 + math.cos(math.pi * min(s, steps) / steps)))
    rng = np.random.default_rng(seed)
    model.train()
    for _ in range(steps):
        starts = rng.integers(0, len(train_ids) - T - 1, size=B)
        x = torch.as_tensor(np.stack([train_ids[s: s + T] for s in starts]))
        loss = model(input_ids=x, labels=x).loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
    model.eval()
    with torch.no_grad():
        ev = float(model(input_ids=eval_x, labels=eval_x).loss)
    return dict(arch=arch, width=width, budget=budget, n_params=count_params(model), flops_per_token=f_tok,
                tokens=steps * T * B, steps=steps, lr=lr, loss=ev)


def _nstar(runs: list[dict]) -> tuple[float, bool]:
    """IsoFLOP vertex in N; falls back to the best observed size when the parabola has no minimum
    inside a factor 2 of the grid (the second value says whether the vertex was used)."""
    n = np.array([r["n_params"] for r in runs], dtype=float)
    loss = np.array([r["loss"] for r in runs])
    try:
        nstar, _ = isoflop_optimum(n, loss)
        if n.min() / 2 <= nstar <= n.max() * 2:
            return nstar, True
    except ValueError:
        pass
    return float(n[np.argmin(loss)]), False


def run(scale: str, seed: int) -> dict:
    import torch

    if scale not in SCALES:
        raise ValueError(f"unknown scale {scale!r}; allowed: {', '.join(SCALES)}")
    cfg = SCALES[scale]
    seed_everything(seed)
    torch.set_num_threads(1)
    ids, vocab = corpus_ids(cfg["max_chars"])
    tr, va, te = _split(ids)
    val_x = _eval_windows(va, cfg["n_eval"], cfg["context_length"])
    test_x = _eval_windows(te, cfg["n_eval"], cfg["context_length"])

    lr = {}
    lr_runs = []
    for arch in ARCHS:                      # each family's learning rate, chosen on validation
        scores = []
        for cand in cfg["lr_grid"]:
            r = train_run(arch, cfg["lr_width"], cfg["lr_budget"], cfg, tr, val_x, vocab, cand, 1000 * seed + 7)
            lr_runs.append(r)
            scores.append(r["loss"])
        lr[arch] = cfg["lr_grid"][int(np.argmin(scores))]

    runs = []
    for budget in cfg["budgets"]:
        for width in cfg["widths"]:
            for arch in ARCHS:              # the same initialisation seed and data order for both families
                runs.append(train_run(arch, width, budget, cfg, tr, test_x, vocab, lr[arch],
                                      1000 * seed + width))

    envelope, nstar, vertex_used = {}, {}, {}
    for arch in ARCHS:
        per_budget = [[r for r in runs if r["arch"] == arch and r["budget"] == b] for b in cfg["budgets"]]
        envelope[arch] = float(np.mean([math.log(min(r["loss"] for r in rs)) for rs in per_budget]))
        ns = [_nstar(rs) for rs in per_budget]
        nstar[arch] = float(np.mean([math.log10(n) for n, _ in ns]))
        vertex_used[arch] = [bool(u) for _, u in ns]
    return {
        "metrics": {"envelope_log_loss": envelope, "log10_nstar": nstar},
        "info": {"runs": runs, "lr_runs": lr_runs, "lr": lr, "vertex_used": vertex_used,
                 "vocab": vocab, "budgets": list(cfg["budgets"]), "widths": list(cfg["widths"])},
    }
