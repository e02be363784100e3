"""Claim check of ALI-CFM against OT-CFM and cubic-spline MMFM on the rotating-Gaussians toy (2-D).

Data (the official repository's toy generator, ``toy_experiment/generate_rotating_gaussians.py``):
``x_t = R(pi t) y + mu_t`` with ``y ~ N(0, [[1, .9], [.9, 1]])``, ``mu_t = (4t - 2, 2 - 4t)`` and ``R``
a rotation: a correlated Gaussian that translates and rotates by half a turn. Observed snapshots at
``t = 0, 0.25, 0.75, 1``; ``t = 0.5`` is held out. Each seed draws every snapshot, the start points
and the held-out sample afresh and trains every model afresh (one unit of replication).

Metric: exact W1 (POT ``ot.emd2``, Euclidean cost) between the points integrated from ``t = 0`` to
``t = 0.5`` and a fresh held-out sample; claims use ``log W1``. Arms: ``ali_cfm``, ``ot_cfm``,
``mmfm``, and ``nearest_snapshot`` (the observed ``t = 0.25`` snapshot itself, the trivial level).
"""
from __future__ import annotations

import time

import numpy as np
import ot
import torch

from iclr26.common.seeding import seed_everything

from .flow import ALICFM

SCALES = {
    "smoke": dict(n=120, n_test=120, gan_steps=20, cfm_steps=20, batch_size=64, width=32, ode_steps=10),
    "quick": dict(n=500, n_test=500, gan_steps=1000, cfm_steps=800, batch_size=128, width=64, ode_steps=40),
    "paper": dict(n=1000, n_test=1000, gan_steps=10000, cfm_steps=10000, batch_size=256, width=128,
                  ode_steps=100),
}
SEEDS = {"smoke": 1, "quick": 6, "paper": 10}
OBSERVED = (0.0, 0.25, 0.75, 1.0)
HELD_OUT = 0.5
LR, REG = 1e-3, 0.01   # chosen on the fit at the observed intermediate times of one pilot draw


def rotating_gaussian(t: float, n: int, rng: np.random.Generator) -> np.ndarray:
    """``n`` draws of the rotating-Gaussians marginal at time ``t``."""
    y = rng.multivariate_normal([0.0, 0.0], [[1.0, 0.9], [0.9, 1.0]], n)
    th = np.pi * t
    rot = np.array([[np.cos(th), -np.sin(th)], [np.sin(th), np.cos(th)]])
    return y @ rot.T + np.array([4 * t - 2, 2 - 4 * t])


def w1(a: np.ndarray, b: np.ndarray) -> float:
    """Exact 1-Wasserstein distance between two equal-weight point sets (POT)."""
    return float(ot.emd2([], [], ot.dist(a, b, metric="euclidean")))


def run(scale: str, seed: int) -> dict:
    cfg = SCALES[scale]
    seed_everything(seed)
    torch.set_num_threads(1)
    t0 = time.perf_counter()
    rng = np.random.default_rng(seed)
    snaps = [rotating_gaussian(t, cfg["n"], rng) for t in OBSERVED]
    x0 = rotating_gaussian(0.0, cfg["n_test"], rng)
    test = rotating_gaussian(HELD_OUT, cfg["n_test"], rng)
    common = dict(width=cfg["width"], gan_steps=cfg["gan_steps"], cfm_steps=cfg["cfm_steps"],
                  batch_size=cfg["batch_size"], lr=LR, reg=REG, ode_steps=cfg["ode_steps"], seed=seed)
    dist, secs = {}, {}
    for arm, interp in (("ali_cfm", "adversarial"), ("ot_cfm", "ot_linear"), ("mmfm", "cubic_spline")):
        s = time.perf_counter()
        model = ALICFM(interp, **common).fit(snaps, OBSERVED)
        dist[arm] = w1(model.predict(x0, HELD_OUT), test)
        secs[arm] = time.perf_counter() - s
    dist["nearest_snapshot"] = w1(snaps[1][: cfg["n_test"]], test)
    dist["oracle_resample"] = w1(rotating_gaussian(HELD_OUT, cfg["n_test"], rng), test)
    return {
        "metrics": {"log_w1": {k: float(np.log(v)) for k, v in dist.items()}},
        "info": {"w1": dist, "seconds": secs, "total_seconds": time.perf_counter() - t0},
    }
