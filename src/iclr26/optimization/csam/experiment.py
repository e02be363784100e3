"""SGD vs SAM vs CSAM calibration on scikit-learn's 8x8 digits with pixel noise (CPU proxy for
the paper's Sec. 5 tables), every arm's hyper-parameter chosen on a validation split.

The digits are made harder with fixed Gaussian pixel noise (sd 0.4 on [0, 1] pixels, drawn once
per image), so that an over-parameterised MLP that fits its 1000 training images exactly reaches
about the test accuracy of ResNet-50 on ImageNet (77 %) and, trained with SGD, is over-confident:
the regime the paper studies. Clean digits give ~97 % test accuracy and an SGD network that is
barely over-confident (ECE ~1.5 %, at the noise level of a small test set).

Arms (all SGD with momentum 0.9, weight decay 5e-4, cosine schedule, the same initial weights and
minibatches within a seed):
- ``sgd``: plain SGD; its tuned knob is the learning rate (its only free hyper-parameter);
- ``sam``: SAM (Foret et al., 2021; paper Sec. 2) at lr 0.05; tuned knob: the radius ``rho``;
- ``csam``: CSAM (paper Sec. 4) at lr 0.05 and SAM's chosen ``rho`` (the paper keeps SAM's radius
  and sets CSAM's ``gamma``, from {0.5, 1, 2}); tuned knob: ``gamma``;
- ``reweight``: the control, the CSAM loss descended by plain SGD (``CSAM`` with ``rho = 0``) at
  lr 0.05; tuned knob: ``gamma``, on the same grid and budget as CSAM's. CSAM and the control differ
  only in the perturbation; each picks its own ``gamma``.
Three premise/control arms cost no training: ``sgd_same_lr`` (SGD's grid point at lr 0.05 = SAM
with ``rho = 0``), ``csam_same_gamma`` and ``reweight_same_gamma`` (the CSAM and control grid points
at ``gamma = 1``: the same loss with and without SAM's perturbation).

Tuning (:func:`search`): every arm gets the same budget, six trainings: a three-point geometric
grid around the arm's starting value, then further points, outward beyond the edge while the best
is at an edge, else halfway (geometrically) into the wider of the two gaps around an interior best
(the better-ranked side on a tie), so a cliff next to the best (a radius at which training
collapses) is bisected too. The choice minimises the ECE on the 300 validation images (ties: the validation
NLL) among the candidates within one accuracy point of the arm's most accurate one
(:func:`rank_by_calibration`: an untrained network is calibrated at chance); the test images (the remaining 497) are used for nothing but the reported metrics. The
chosen value of every arm and whether it still sits at the edge of what was tried are stored per
seed (``tuned_value``, ``tuned_at_edge``).
"""
from __future__ import annotations

import copy
import math
from typing import Callable

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from iclr26.common.seeding import seed_everything
from iclr26.common.training import batches, train

from .calibration import adaptive_ece, brier_score, expected_calibration_error, nll
from .optimizer import CSAM, SAM

ARMS = ("sgd", "sam", "csam", "reweight")   # trained in this order (CSAM takes SAM's chosen rho)
# arms with no extra training: the grid point of a tuned arm at a fixed setting, i.e. SGD at SAM's
# lr (SAM with rho = 0), and CSAM and the control at gamma = 1 (the same loss with and without the
# perturbation)
BASE = {"sgd": "sgd_same_lr", "csam": "csam_same_gamma", "reweight": "reweight_same_gamma"}
# the knob each arm tunes and its starting grid (geometric); widened by search()
KNOBS = {
    "sgd": ("lr", (0.05, 0.1, 0.2)),
    "sam": ("rho", (0.1, 0.2, 0.4)),
    # the paper's gamma values (Sec. 5: 0.5, 1, 2), for CSAM and the control alike
    "csam": ("gamma", (0.5, 1.0, 2.0)),
    "reweight": ("gamma", (0.5, 1.0, 2.0)),
}
BUDGET = 6          # trainings per arm and seed, the same for every arm
ACC_TOL = 0.01      # a candidate may give up at most 1 validation-accuracy point to calibration
N_DIGITS = 1797
SCALES = {
    "smoke": dict(hidden=32, steps=30, batch=64, lr=0.2, wd=5e-4, gamma=1.0, n_train=300, n_val=100,
                  noise=0.4),
    # 780 steps of batch 64 on 1000 images = 50 epochs (to ~100 % training accuracy)
    "quick": dict(hidden=256, steps=780, batch=64, lr=0.05, wd=5e-4, gamma=1.0, n_train=1000,
                  n_val=300, noise=0.4),
    # paper: WRN-28-10 / ResNet-50 on CIFAR / ImageNet, 200 epochs, batch 128, SGD lr 0.1,
    # momentum 0.9, cosine, rho = 0.05 (CIFAR-10) / 0.2 (CIFAR-100), gamma in {0.5, 1, 2}.
    "paper": dict(hidden=512, steps=20000, batch=128, lr=0.1, wd=5e-4, gamma=1.0, n_train=1000,
                  n_val=300, noise=0.4),
}
SEEDS = {"smoke": 1, "quick": 20, "paper": 5}


def _data(seed: int, n_train: int, n_val: int, noise: float):
    from sklearn.datasets import load_digits

    d = load_digits()
    x = d.data / 16.0
    x = (x + noise * np.random.default_rng(1000 + seed).standard_normal(x.shape)).astype(np.float32)
    y = d.target.astype(np.int64)
    perm = np.random.default_rng(seed).permutation(len(y))
    parts = perm[:n_train], perm[n_train:n_train + n_val], perm[n_train + n_val:]
    return [(torch.from_numpy(x[i]), torch.from_numpy(y[i])) for i in parts]


def _mlp(hidden: int) -> nn.Module:
    return nn.Sequential(nn.Linear(64, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(),
                         nn.Linear(hidden, 10))


def _check_finite(model: nn.Module, loss: torch.Tensor, where: str, step: int) -> None:
    if not torch.isfinite(loss):
        raise FloatingPointError(f"{where}: non-finite loss {float(loss)} at step {step}")
    for p in model.parameters():
        if not torch.isfinite(p).all():
            raise FloatingPointError(f"{where}: non-finite parameters after step {step}")


def _fit(arm: str, value: float, init: nn.Module, xtr, ytr, cfg, seed: int, rho: float | None = None) -> nn.Module:
    """Train ``arm`` with its tuned knob (``KNOBS[arm][0]``) set to ``value`` (CSAM: at radius ``rho``)."""
    model = copy.deepcopy(init)
    if arm == "csam" and rho is None:
        raise ValueError("csam needs rho (SAM's chosen radius)")
    lr = value if arm == "sgd" else cfg["lr"]
    kw = dict(lr=lr, momentum=0.9, weight_decay=cfg["wd"])
    where = f"{arm} ({KNOBS[arm][0]} = {value:g})"
    count = [0]
    if arm == "sgd":
        opt = torch.optim.SGD(model.parameters(), **kw)

        def step_fn(m, o, batch):
            o.zero_grad(set_to_none=True)
            loss = F.cross_entropy(m(batch[0]), batch[1])
            loss.backward()
            o.step()
            count[0] += 1
            _check_finite(m, loss, where, count[0])
            return loss
    else:
        if arm == "sam":
            opt = SAM(model.parameters(), torch.optim.SGD, rho=value, **kw)
        elif arm == "csam":
            opt = CSAM(model.parameters(), torch.optim.SGD, rho=rho, gamma=value, **kw)
        elif arm == "reweight":     # rho = 0: the CSAM loss with plain SGD
            opt = CSAM(model.parameters(), torch.optim.SGD, rho=0.0, gamma=value, **kw)
        else:
            raise ValueError(f"arm must be one of {ARMS}, got {arm!r}")

        def step_fn(m, o, batch):
            xb, yb = batch
            if arm == "sam":
                def closure():
                    loss = F.cross_entropy(m(xb), yb)
                    loss.backward()
                    return loss
            else:
                def closure(loss_fn):
                    loss = loss_fn(m(xb), yb)
                    loss.backward()
                    return loss
            loss = o.step(closure)
            count[0] += 1
            _check_finite(m, loss, where, count[0])
            return loss
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=cfg["steps"])
    gen = torch.Generator().manual_seed(seed)
    train(model, opt, batches(xtr, ytr, cfg["batch"], gen), cfg["steps"],
          lambda m, b: F.cross_entropy(m(b[0]), b[1]), step_fn=step_fn, scheduler=sched)
    return model


def search(evaluate: Callable[[float], dict], grid: tuple, rank: Callable[[dict], list],
           budget: int = BUDGET):
    """Fixed-budget search of one positive hyper-parameter on a geometric grid.

    ``grid``: three increasing values with a constant ratio ``r``; ``evaluate(v)`` trains and
    returns a record; ``rank(tried)`` orders the values of ``tried`` (value -> record) best first.
    After the three, each further evaluation goes outward (``min / r`` or ``max * r``) when the best
    so far is the smallest or largest value tried, else to the geometric midpoint between the best
    and the neighbour across the wider (log-scale) gap, the better ranked neighbour on a tie. Returns ``(best, tried, at_edge)``; ``at_edge`` is
    True when the best is the smallest or largest value tried (the optimum may lie beyond).
    """
    if len(grid) != 3 or not all(isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0
                                 for v in grid):
        raise ValueError(f"grid must hold three positive numbers, got {grid!r}")
    r1, r2 = grid[1] / grid[0], grid[2] / grid[1]
    if not (r1 > 1 and math.isclose(r1, r2, rel_tol=1e-9)):
        raise ValueError(f"grid must be increasing and geometric (constant ratio), got {grid!r}")
    if not (isinstance(budget, int) and not isinstance(budget, bool) and budget >= 3):
        raise ValueError(f"budget must be an integer >= 3 (the grid's three points), got {budget!r}")
    r = r1
    tried = {float(v): evaluate(float(v)) for v in grid}
    while len(tried) < budget:
        vals = sorted(tried)
        order = rank(tried)
        best = order[0]
        if best == vals[0]:
            nxt = vals[0] / r
        elif best == vals[-1]:
            nxt = vals[-1] * r
        else:
            i = vals.index(best)
            lo, hi = vals[i - 1], vals[i + 1]
            g_lo, g_hi = math.log(best / lo), math.log(hi / best)
            if math.isclose(g_lo, g_hi, rel_tol=1e-9):
                nb = min((lo, hi), key=order.index)
            else:
                nb = lo if g_lo > g_hi else hi
            nxt = math.sqrt(best * nb)
        tried[float(nxt)] = evaluate(float(nxt))
    vals = sorted(tried)
    best = rank(tried)[0]
    return best, tried, best in (vals[0], vals[-1])


def rank_by_calibration(tried: dict, tol: float = ACC_TOL) -> list:
    """Order candidates (value -> record with validation ``accuracy``, ``log_ece``, ``nll``, or
    None for a diverged run) best first: the candidates whose validation accuracy is within
    ``tol`` of the best one's come first, by validation ECE (ties: NLL), then the rest, then the
    diverged. The accuracy guard keeps a selection by ECE from taking a model that is calibrated
    because it learned little (an untrained network is well calibrated at chance)."""
    if not tried:
        raise ValueError("tried must hold at least one candidate")
    ok = [v for v, rec in tried.items() if rec is not None]
    if not ok:
        raise FloatingPointError(f"every value tried diverged: {sorted(tried)}")
    top = max(tried[v]["accuracy"] for v in ok)

    def key(v):
        rec = tried[v]
        if rec is None:
            return (2, math.inf, math.inf)
        return (int(rec["accuracy"] < top - tol - 1e-12), rec["log_ece"], rec["nll"])
    return sorted(tried, key=key)


def _measure(model: nn.Module, x, y) -> dict:
    model.eval()
    with torch.no_grad():
        p = F.softmax(model(x), -1).numpy().astype(np.float64)
    p = p / p.sum(1, keepdims=True)
    y = y.numpy()
    ece = expected_calibration_error(p, y, n_bins=15)
    acc = float((p.argmax(1) == y).mean())
    conf = float(p.max(1).mean())
    return {"ece": ece, "log_ece": float(np.log(max(ece, 1e-6))), "adaece": adaptive_ece(p, y, n_bins=15),
            "nll": nll(p, y), "brier": brier_score(p, y), "accuracy": acc, "confidence": conf,
            "overconfidence": conf - acc}


def run(scale: str, seed: int) -> dict:
    if scale not in SCALES:
        raise ValueError(f"scale must be one of {sorted(SCALES)}, got {scale!r}")
    if not (isinstance(seed, int) and not isinstance(seed, bool) and seed >= 0):
        raise ValueError(f"seed must be an integer >= 0, got {seed!r}")
    cfg = SCALES[scale]
    if cfg["n_train"] + cfg["n_val"] >= N_DIGITS:
        raise ValueError(f"n_train + n_val must leave test digits out of {N_DIGITS}")
    seed_everything(seed)
    (xtr, ytr), (xva, yva), (xte, yte) = _data(seed, cfg["n_train"], cfg["n_val"], cfg["noise"])
    init = _mlp(cfg["hidden"])
    metrics: dict = {k: {} for k in ("ece", "log_ece", "adaece", "nll", "brier", "accuracy",
                                     "confidence", "overconfidence", "train_accuracy", "val_ece",
                                     "tuned_value", "tuned_at_edge")}
    searched = {}
    for arm in ARMS:
        results = {}
        rho = metrics["tuned_value"].get("sam") if arm == "csam" else None

        def evaluate(v, arm=arm, results=results, rho=rho):
            try:
                model = _fit(arm, v, init, xtr, ytr, cfg, seed, rho=rho)
            except FloatingPointError:
                results[v] = None
                return None
            with torch.no_grad():
                tr_acc = float((model(xtr).argmax(-1) == ytr).float().mean())
            results[v] = {"test": _measure(model, xte, yte), "val": _measure(model, xva, yva),
                          "train_accuracy": tr_acc}
            return results[v]["val"]

        best, tried, at_edge = search(evaluate, KNOBS[arm][1], rank_by_calibration)
        chosen = results[best]
        for k, v in chosen["test"].items():
            metrics[k][arm] = v
        metrics["train_accuracy"][arm] = chosen["train_accuracy"]
        metrics["val_ece"][arm] = chosen["val"]["ece"]
        metrics["tuned_value"][arm] = best
        metrics["tuned_at_edge"][arm] = float(at_edge)
        if arm in BASE:     # the grid point at the perturbed arms' own setting (rho = 0 there)
            base = BASE[arm]
            value = cfg["lr"] if arm == "sgd" else cfg["gamma"]
            if results.get(value) is None:
                raise RuntimeError(f"{arm}: its grid must hold {KNOBS[arm][0]} = {value} (for {base}), "
                                   f"and that run must not diverge")
            for k, v in results[value]["test"].items():
                metrics[k][base] = v
            metrics["train_accuracy"][base] = results[value]["train_accuracy"]
        searched[arm] = {"knob": KNOBS[arm][0], "chosen": best, **({"rho": rho} if rho is not None else {}),
                         "val": {f"{v:g}": (None if tried[v] is None else
                                            {k: tried[v][k] for k in ("ece", "accuracy", "nll")})
                                 for v in sorted(tried)}}
    return {"metrics": metrics,
            "info": {"n_train": int(len(ytr)), "n_val": int(len(yva)), "n_test": int(len(yte)),
                     "search": searched, **cfg}}
