"""SGD vs SAM vs CSAM calibration on scikit-learn's 8x8 digits with pixel noise (CPU proxy for
the paper's Sec. 5 tables).

The digits are made harder with fixed Gaussian pixel noise (sd 0.4 on [0, 1] pixels, drawn once
per image), so that an over-parameterised MLP that fits its 1000 training images exactly reaches
about the test accuracy of ResNet-50 on ImageNet (77 %) and, trained with SGD, is over-confident:
the regime the paper studies. Clean digits give ~97 % test accuracy and an SGD network that is
barely over-confident (ECE ~1.5 %, at the noise level of a 797-image test set).

All arms start from the same initial weights and see the same minibatches (same seed); they
differ only in the optimizer. A fourth arm, ``reweight``, is the control for CSAM: the CSAM loss
with plain SGD (``CSAM`` with ``rho = 0``), which separates the effect of the reweighted loss from
its combination with SAM's perturbation. Calibration is measured on the held-out test images,
never used for any choice. The recipe is fixed in advance and shared by all arms: SGD with
momentum 0.9, weight decay 5e-4, cosine schedule, about 200 epochs, rho = 0.05 (the paper's
radius for CIFAR-10 and ImageNet ResNets), gamma = 1 (one of the paper's values).
"""
from __future__ import annotations

import copy

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from iclr26.common.seeding import seed_everything
from iclr26.common.training import batches, train

from .calibration import adaptive_ece, brier_score, expected_calibration_error, nll
from .optimizer import CSAM, SAM

ARMS = ("sgd", "sam", "csam", "reweight")
SCALES = {
    "smoke": dict(hidden=32, steps=30, batch=64, lr=0.2, wd=5e-4, rho=0.05, gamma=1.0, n_train=300,
                  noise=0.4),
    # 3125 steps of batch 64 on 1000 images = 200 epochs, the paper's CIFAR training length
    "quick": dict(hidden=256, steps=3125, batch=64, lr=0.05, wd=5e-4, rho=0.05, gamma=1.0,
                  n_train=1000, noise=0.4),
    # paper: WRN-28-10 / ResNet-50 on CIFAR / ImageNet, 200 epochs, batch 128, SGD lr 0.1,
    # momentum 0.9, cosine, rho = 0.05 (CIFAR-10) / 0.2 (CIFAR-100), gamma in {0.5, 1, 2}.
    "paper": dict(hidden=512, steps=20000, batch=128, lr=0.1, wd=5e-4, rho=0.05, gamma=1.0,
                  n_train=1000, noise=0.4),
}
SEEDS = {"smoke": 1, "quick": 10, "paper": 5}


def _data(seed: int, n_train: int, noise: float):
    from sklearn.datasets import load_digits

    d = load_digits()
    x = d.data / 16.0
    x = (x + noise * np.random.default_rng(1000 + seed).standard_normal(x.shape)).astype(np.float32)
    y = d.target.astype(np.int64)
    perm = np.random.default_rng(seed).permutation(len(y))
    tr, te = perm[:n_train], perm[n_train:]
    return (torch.from_numpy(x[tr]), torch.from_numpy(y[tr]),
            torch.from_numpy(x[te]), torch.from_numpy(y[te]))


def _mlp(hidden: int) -> nn.Module:
    return nn.Sequential(nn.Linear(64, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(),
                         nn.Linear(hidden, 10))


def _fit(arm: str, init: nn.Module, xtr, ytr, cfg, seed: int) -> nn.Module:
    model = copy.deepcopy(init)
    kw = dict(lr=cfg["lr"], momentum=0.9, weight_decay=cfg["wd"])
    if arm == "sgd":
        opt = torch.optim.SGD(model.parameters(), **kw)
        step_fn = None
    elif arm == "sam":
        opt = SAM(model.parameters(), torch.optim.SGD, rho=cfg["rho"], **kw)

        def step_fn(m, o, batch):
            xb, yb = batch

            def closure():
                loss = F.cross_entropy(m(xb), yb)
                loss.backward()
                return loss
            return o.step(closure)
    elif arm in ("csam", "reweight"):
        rho = cfg["rho"] if arm == "csam" else 0.0      # rho = 0: the CSAM loss with plain SGD
        opt = CSAM(model.parameters(), torch.optim.SGD, rho=rho, gamma=cfg["gamma"], **kw)

        def step_fn(m, o, batch):
            xb, yb = batch

            def closure(loss_fn):
                loss = loss_fn(m(xb), yb)
                loss.backward()
                return loss
            return o.step(closure)
    else:
        raise ValueError(arm)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=cfg["steps"])
    gen = torch.Generator().manual_seed(seed)
    train(model, opt, batches(xtr, ytr, cfg["batch"], gen), cfg["steps"],
          lambda m, b: F.cross_entropy(m(b[0]), b[1]), step_fn=step_fn, scheduler=sched)
    return model


def run(scale: str, seed: int) -> dict:
    cfg = SCALES[scale]
    seed_everything(seed)
    xtr, ytr, xte, yte = _data(seed, cfg["n_train"], cfg["noise"])
    init = _mlp(cfg["hidden"])
    metrics: dict = {k: {} for k in ("ece", "log_ece", "adaece", "nll", "brier", "accuracy",
                                     "confidence", "overconfidence", "train_accuracy")}
    for arm in ARMS:
        model = _fit(arm, init, xtr, ytr, cfg, seed)
        model.eval()
        with torch.no_grad():
            p = F.softmax(model(xte), -1).numpy().astype(np.float64)
            ptr = model(xtr).argmax(-1)
        p = p / p.sum(1, keepdims=True)
        y = yte.numpy()
        metrics["ece"][arm] = expected_calibration_error(p, y, n_bins=15)
        metrics["log_ece"][arm] = float(np.log(max(metrics["ece"][arm], 1e-6)))
        metrics["adaece"][arm] = adaptive_ece(p, y, n_bins=15)
        metrics["nll"][arm] = nll(p, y)
        metrics["brier"][arm] = brier_score(p, y)
        metrics["accuracy"][arm] = float((p.argmax(1) == y).mean())
        metrics["confidence"][arm] = float(p.max(1).mean())
        metrics["overconfidence"][arm] = metrics["confidence"][arm] - metrics["accuracy"][arm]
        metrics["train_accuracy"][arm] = float((ptr == ytr).float().mean())
    return {"metrics": metrics, "info": {"n_train": int(len(ytr)), "n_test": int(len(yte)), **cfg}}
