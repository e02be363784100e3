"""Steps-to-target check for DOIT on sklearn's digits (a CPU proxy for the paper's image and text
classification runs).

Per seed: a stratified split of the 1797 digits into train / validation / test (60 / 20 / 20 %),
features standardised on train (the scale floored at one grey level of the 0-16 range, so a pixel constant or nearly constant on train stays within +-16 on validation and test); an MLP 64-32-10 (quick scale) trained with minibatches of 64 for ``steps`` steps;
accuracy on validation and test every ``eval_every`` steps. Steps-to-target = the first evaluated
step at which the accuracy reaches ``target`` (``steps + eval_every`` when never).

Tuning (validation only, the same budget for every optimizer): each candidate's learning rate is
chosen from a 5-value grid (quick scale; the ``lr_at_grid_edge`` info says where a choice fell on the grid's edge) by the validation steps-to-target (ties: the lower final validation
loss), one training run per value. The single optimizer with the best tuned validation score is the
``best_single`` arm. DOIT, random switching and SWATS use the tuned learning rates (SWATS: Adam's)
and no further tuning; the candidates' order (DOIT's probe order, the tie-break) is drawn per seed. DOIT's initial probes take ``explore_frac`` (10 %) of the run (5-step probes
of the four candidates in a 200-step run; :class:`DOIT`). All arms share the seed's initial weights
and minibatch order; the claims read the test split. A run stops at a non-finite loss or gradient
(its target then counts as never reached).
"""
from __future__ import annotations

import math
import time

import numpy as np
import torch
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

from iclr26.common.seeding import seed_everything

from .baselines import SWATS, RandomInterleaving
from .interleave import DOIT

SCALES = {
    "smoke": dict(steps=30, eval_every=10, stage_len=5, target=0.8, grid=1, hidden=16),
    "quick": dict(steps=200, eval_every=2, stage_len=10, target=0.96, grid=5, hidden=32),
    "paper": dict(steps=2000, eval_every=5, stage_len=50, target=0.97, grid=6, hidden=256),
}
SEEDS = {"smoke": 1, "quick": 12, "paper": 20}

LR_GRIDS = {
    "sgd": (torch.optim.SGD, dict(momentum=0.9), (0.3, 0.1, 0.03, 0.01, 0.003, 1.0)),
    "adam": (torch.optim.Adam, {}, (3e-3, 1e-3, 1e-2, 3e-4, 3e-2, 1e-4)),
    "rmsprop": (torch.optim.RMSprop, {}, (1e-3, 3e-4, 3e-3, 1e-4, 1e-2, 3e-5)),
    "adagrad": (torch.optim.Adagrad, {}, (0.1, 0.03, 0.3, 0.01, 1.0, 0.003)),
}


def load_split(seed: int):
    X, y = load_digits(return_X_y=True)
    X = X.astype(np.float32)
    Xtr, Xte, ytr, yte = train_test_split(X, y, test_size=0.2, stratify=y, random_state=seed)
    Xtr, Xva, ytr, yva = train_test_split(Xtr, ytr, test_size=0.25, stratify=ytr, random_state=seed)
    mu, sd = Xtr.mean(0), Xtr.std(0)
    sd = np.maximum(sd, 1.0).astype(np.float32)    # floor of one grey level (of 0-16): rare pixels stay bounded
    t = lambda a: torch.tensor((a - mu) / sd)
    return (t(Xtr), torch.tensor(ytr)), (t(Xva), torch.tensor(yva)), (t(Xte), torch.tensor(yte))


def make_model(hidden: int, seed: int) -> torch.nn.Module:
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(64, hidden), torch.nn.ReLU(), torch.nn.Linear(hidden, 10))


def make_optimizer(arm: str, params, lrs: dict, cfg: dict, seed: int):
    if arm in LR_GRIDS:
        cls, kw, _ = LR_GRIDS[arm]
        return cls(params, **dict(kw, lr=lrs[arm]))
    if arm not in ("doit", "random", "swats"):
        raise ValueError(f"unknown arm {arm!r}; allowed: doit, random, swats, {', '.join(LR_GRIDS)}")
    order = list(LR_GRIDS)
    np.random.default_rng(seed).shuffle(order)          # probe order drawn per seed (no fixed first probe)
    cands = {n: (LR_GRIDS[n][0], dict(LR_GRIDS[n][1], lr=lrs[n])) for n in order}
    if arm == "doit":
        return DOIT(params, cands, stage_len=cfg["stage_len"], total_steps=cfg["steps"], seed=seed)
    if arm == "random":
        return RandomInterleaving(params, cands, stage_len=cfg["stage_len"], total_steps=cfg["steps"], seed=seed)
    return SWATS(params, lr=lrs["adam"])


def train(arm: str, lrs: dict, data, cfg: dict, seed: int) -> dict:
    """Train one model; return the validation/test accuracy curves and the steps-to-target."""
    (Xtr, ytr), (Xva, yva), (Xte, yte) = data
    model = make_model(cfg["hidden"], seed)
    opt = make_optimizer(arm, model.parameters(), lrs, cfg, seed)
    gen = torch.Generator().manual_seed(seed)
    n = Xtr.shape[0]
    perm = torch.randperm(n, generator=gen)
    pos = 0
    lossf = torch.nn.CrossEntropyLoss()
    curve_va, curve_te, hit_va, hit_te = [], [], None, None
    for step in range(1, cfg["steps"] + 1):
        if pos + 64 > n:
            perm, pos = torch.randperm(n, generator=gen), 0
        idx = perm[pos:pos + 64]
        pos += 64
        opt.zero_grad()
        loss = lossf(model(Xtr[idx]), ytr[idx])
        if not torch.isfinite(loss):
            break
        loss.backward()
        if not all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None):
            loss = torch.tensor(float("nan"))
            break
        if hasattr(opt, "observe"):
            opt.observe(loss.item())
        opt.step()
        if step % cfg["eval_every"] == 0:
            with torch.no_grad():
                acc_va = float((model(Xva).argmax(1) == yva).float().mean())
                acc_te = float((model(Xte).argmax(1) == yte).float().mean())
            curve_va.append(acc_va)
            curve_te.append(acc_te)
            if hit_va is None and acc_va >= cfg["target"]:
                hit_va = step
            if hit_te is None and acc_te >= cfg["target"]:
                hit_te = step
    cap = cfg["steps"] + cfg["eval_every"]
    with torch.no_grad():
        val_loss = float(lossf(model(Xva), yva)) if torch.isfinite(loss) else math.inf
        final_te = float((model(Xte).argmax(1) == yte).float().mean())
    out = {"steps_va": hit_va or cap, "steps_te": hit_te or cap, "val_loss": val_loss, "final_te": final_te,
           "curve_te": curve_te}
    if arm in ("doit", "random"):
        out["schedule"] = list(opt.schedule)
    if arm == "swats":
        out["switched"] = bool(opt.switched)
    return out


def tune(data, cfg: dict, seed: int):
    """Each optimizer's learning rate by validation steps-to-target (same grid size for all)."""
    lrs, scores = {}, {}
    for name, (_, _, grid) in LR_GRIDS.items():
        best = None
        for lr in grid[: cfg["grid"]]:
            r = train(name, {name: lr}, data, cfg, seed)
            key = (r["steps_va"], r["val_loss"])
            if best is None or key < best[0]:
                best = (key, lr)
        lrs[name], scores[name] = best[1], best[0]
    best_single = min(scores, key=lambda n: scores[n])
    worst_single = max(scores, key=lambda n: scores[n])
    return lrs, best_single, worst_single, scores


def run(scale: str, seed: int) -> dict:
    cfg = SCALES[scale]
    seed_everything(seed)
    torch.set_num_threads(1)
    t0 = time.perf_counter()
    data = load_split(seed)
    lrs, best_single, worst_single, scores = tune(data, cfg, seed + 1000)   # tuning runs: other inits/orders
    res = {a: train(a, lrs, data, cfg, seed) for a in ("doit", "random", "swats", *LR_GRIDS)}
    res["best_single"], res["worst_single"] = res[best_single], res[worst_single]
    arms = ("doit", "best_single", "worst_single", "swats", "random", *LR_GRIDS)
    return {
        "metrics": {
            "log_steps_to_target": {a: math.log(res[a]["steps_te"]) for a in arms},
            "steps_to_target": {a: float(res[a]["steps_te"]) for a in arms},
            "final_test_accuracy": {a: res[a]["final_te"] for a in arms},
        },
        "info": {"lrs": lrs, "lr_at_grid_edge": {n: lrs[n] in (min(g[: cfg["grid"]]), max(g[: cfg["grid"]]))
                                                  for n, (_, _, g) in LR_GRIDS.items()}, "best_single": best_single, "worst_single": worst_single, "tuning": {k: list(v) for k, v in scores.items()},
                 "doit_schedule": res["doit"]["schedule"], "random_schedule": res["random"]["schedule"],
                 "swats_switched": res["swats"]["switched"],
                 "curves_te": {a: res[a]["curve_te"] for a in arms}, "seconds": time.perf_counter() - t0},
    }
