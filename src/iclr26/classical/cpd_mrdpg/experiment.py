"""Claim checks for arXiv:2506.21878 on simulated dynamic multilayer RDPG sequences.

Per seed: one sequence from :func:`simulate_dmrdpg` (Dirichlet latent positions, directed,
three change points). The same stage 1 (seeded binary segmentation with the sample-split
CUSUM) feeds three localisers: the paper's low-rank (TH-PCA) refinement ``lowrank``; the same
refinement with raw segment means, ignoring the low-rank multilayer structure, ``raw``; and no
refinement ``sbs``. Measured: Hausdorff distance between estimated and true change points,
whether the number of change points is recovered, and whether each true change point is
covered by the 95% interval of the nearest estimate (per change point items).
"""
from __future__ import annotations

import time

import numpy as np
from threadpoolctl import threadpool_limits

from iclr26.common.seeding import seed_everything

from .changepoint import MRDPGChangePoint
from .simulate import simulate_dmrdpg

SCALES = {
    "smoke": dict(T=40, n=20, L=2, d=3, change_points=(20,), jump=1.0, n_sim=100),
    # paper scenario sizes (n = 50, L = 4, d = 5, T = 200); jump 0.12 of the paper's jump
    "quick": dict(T=200, n=50, L=4, d=5, change_points=(50, 100, 150), jump=0.12, n_sim=500),
    "paper": dict(T=200, n=100, L=4, d=5, change_points=(50, 100, 150), jump=1.0, n_sim=500),
}
SEEDS = {"smoke": 1, "quick": 20, "paper": 100}
LEVEL = 0.95


def hausdorff(est, truth, T):
    """Hausdorff distance between two change-point sets (``T`` if one is empty and the other not)."""
    est, truth = np.asarray(est, float), np.asarray(truth, float)
    if est.size == 0 and truth.size == 0:
        return 0.0
    if est.size == 0 or truth.size == 0:
        return float(T)
    D = np.abs(est[:, None] - truth[None, :])
    return float(max(D.min(axis=0).max(), D.min(axis=1).max()))


def coverage(intervals, truth):
    """1/0 per true change point: covered by the interval of the nearest estimate (0 if none)."""
    out = []
    for c in truth:
        if not intervals:
            out.append(0.0)
            continue
        j = int(np.argmin([abs(ci.estimate - c) for ci in intervals]))
        out.append(float(intervals[j].lower <= c <= intervals[j].upper))
    return out


def run(scale: str, seed: int) -> dict:
    cfg = SCALES[scale]
    seed_everything(seed)
    t0 = time.perf_counter()
    with threadpool_limits(1):
        A, Ps, cps = simulate_dmrdpg(T=cfg["T"], n=cfg["n"], L=cfg["L"], d=cfg["d"],
                                     change_points=cfg["change_points"], jump=cfg["jump"],
                                     random_state=seed)
        ranks = (cfg["d"], cfg["d"], cfg["L"])
        low = MRDPGChangePoint(ranks=ranks, n_sim=cfg["n_sim"], random_state=seed).fit(A)
        raw = MRDPGChangePoint(ranks=None, n_sim=cfg["n_sim"], random_state=seed).fit(A)
        ci_low = low.confidence_intervals(LEVEL) if low.change_points_.size else []
        ci_raw = raw.confidence_intervals(LEVEL) if raw.change_points_.size else []
    T, K = cfg["T"], len(cps)
    sbs = 2 * low.stage1_half_
    return {
        "metrics": {
            "hausdorff": {"lowrank": hausdorff(low.change_points_, cps, T),
                          "raw": hausdorff(raw.change_points_, cps, T),
                          "sbs": hausdorff(sbs, cps, T)},
            "k_correct": {"lowrank": [float(low.change_points_.size == K)]},
            "covered": {"lowrank": coverage(ci_low, cps), "raw": coverage(ci_raw, cps)},
        },
        "info": {
            "true": cps.tolist(), "lowrank": low.change_points_.tolist(), "raw": raw.change_points_.tolist(),
            "sbs": sbs.tolist(), "threshold": low.threshold_,
            "kappa_true": float(np.linalg.norm(Ps[1] - Ps[0])) if len(Ps) > 1 else 0.0,
            "ci_lowrank": [[c.lower, c.upper] for c in ci_low],
            "ci_raw": [[c.lower, c.upper] for c in ci_raw],
            "seconds": time.perf_counter() - t0,
        },
    }
