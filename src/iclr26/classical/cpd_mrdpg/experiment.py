"""Claim checks for arXiv:2506.21878 on simulated dynamic multilayer RDPG sequences.

Per seed: two sequences from :func:`simulate_dmrdpg` (the official scenario f1: Dirichlet latent
positions, directed, T = 200, change points at 70 and 140, regimes 1-2-1), one at the paper's jump
(metrics ``*_paper_jump``) and one at a jump 0.12 of it. The same stage 1 (seeded binary
segmentation with the sample-split CUSUM, threshold constant ``c`` chosen on development seeds)
feeds the localisers: the official low-rank refinement ``refinement1`` (CUSUM projected on the
TH-PCA jump estimate) ``lowrank``; the official least-squares re-estimate of those points
(``refinement2``, the centres of the official intervals) ``lowrank_r2``; no refinement ``sbs``;
and, at the weak jump, ``refinement1`` with its jump estimate from the other half (a deviation
from the official code) ``lowrank_xhalf``, the least-squares refinement on stage 1 directly
``lowrank_ls`` and ``refinement1`` without TH-PCA ``raw``. The competitor is a kernel change-point
method (ruptures ``KernelCPD``, Gaussian kernel, PELT with a penalty chosen on development seeds)
``kernel``, plus, for reference, the same method told the true number of change points
``kernel_oracle_k``. Measured: Hausdorff distance, whether the number of change points is
recovered, the official covering metric, whether ``refinement1`` moved a stage-1 point, and
whether each true change point is covered by the 95% interval of the nearest estimate.
"""
from __future__ import annotations

import time

import numpy as np
from threadpoolctl import threadpool_limits

from iclr26.common.seeding import seed_everything

from .changepoint import MRDPGChangePoint
from .simulate import simulate_dmrdpg

# the paper's grid of threshold constants (official simulate_sensitivity)
C_GRID = (0.05, 0.08, 0.1, 0.12, 0.15, 0.2, 0.25)
PEN_GRID = tuple(round(2 ** (k / 2), 2) for k in range(-8, 7))
DEV_SEEDS = tuple(range(1000, 1005))

SCALES = {
    "smoke": dict(T=40, n=20, L=2, d=3, change_points=(20,), jump=1.0, weak_jump=0.5, n_sim=100,
                  kernel_pen=dict(paper=1.0, weak=0.64), threshold_c=dict(paper=0.1, weak=0.1)),
    # the official scenario f1 (T = 200, n = 50, L = 4, d = 5, change points 70 and 140): the paper's
    # jump and a jump 0.12 of it. kernel_pen (the kernel competitor's penalty) and threshold_c (CPDmrdpg's
    # threshold constant, used by every CPDmrdpg arm) minimise the mean Hausdorff distance of their own arm
    # (kernel; lowrank = stage 1 + refinement1) on development seeds 1000-1004 (never evaluated):
    # kernel_pen over PEN_GRID (2^(k/2), k = -8..6), refined by steps of 0.02 over 0.50..0.70 at the weak
    # jump, threshold_c over the paper's grid C_GRID (development_tuning()). Weak jump: c = 0.08 (mean
    # Hausdorff 22.4-22.8; 0.1 and 0.12: 28.4, 0.05: 61.2, >= 0.15: 148 and more), pen = 0.64 (11.4; 0.62:
    # 64.6, 0.66: 160.6). Paper's jump: every c in 0.1..0.25 and every pen in 0.71..4.0 is exact (0); the
    # official c = 0.1 and the middle pen 1.41 are kept.
    "quick": dict(T=200, n=50, L=4, d=5, change_points=(70, 140), jump=1.0, weak_jump=0.12, n_sim=500,
                  kernel_pen=dict(paper=1.41, weak=0.64), threshold_c=dict(paper=0.1, weak=0.08)),
    # (not run; the constants are those chosen at n = 50)
    "paper": dict(T=200, n=100, L=4, d=5, change_points=(70, 140), jump=1.0, weak_jump=0.12, n_sim=500,
                  kernel_pen=dict(paper=1.41, weak=0.64), threshold_c=dict(paper=0.1, weak=0.08)),
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


def covering_metric(est, truth, T):
    """The official ``eval_CP`` covering metric: ``sum_A |A| max_A' J(A, A') / T`` over the true
    segments ``A`` and the estimated segments ``A'`` (J: Jaccard index of the sets of time points);
    0 when nothing is detected, as the official code has it."""
    est = sorted(int(c) for c in est)
    if not est:
        return 0.0
    tb, eb = [0, *sorted(int(c) for c in truth), T], [0, *est, T]
    total = 0.0
    for a, b in zip(tb[:-1], tb[1:]):
        best = 0.0
        for c, d in zip(eb[:-1], eb[1:]):
            inter = max(0, min(b, d) - max(a, c))
            union = (b - a) + (d - c) - inter
            best = max(best, inter / union)
        total += (b - a) * best
    return float(total / T)


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


def interval_audit(intervals, truth):
    """Per true change point: (matched, exact centre, covered), matched meaning the nearest interval's
    centre is nearer to it than to any other true change point (a detection, not a false alarm)."""
    truth = list(truth)
    out = []
    for i, c in enumerate(truth):
        if not intervals:
            out.append((False, False, False))
            continue
        j = int(np.argmin([abs(ci.estimate - c) for ci in intervals]))
        ci = intervals[j]
        nearest_true = int(np.argmin([abs(ci.estimate - t) for t in truth]))
        out.append((nearest_true == i, ci.estimate == c, bool(ci.lower <= c <= ci.upper)))
    return out


def kernel_cpd(A, pen=None, n_bkps=None, min_size=4):
    """Kernel change points (ruptures ``KernelCPD``, Gaussian kernel with the median-heuristic bandwidth,
    exact PELT with ``pen`` or dynamic programming with ``n_bkps``) on the flattened graphs."""
    import ruptures as rpt

    X = np.asarray(A, dtype=float).reshape(A.shape[0], -1)
    algo = rpt.KernelCPD(kernel="rbf", min_size=min_size).fit(X)
    bk = algo.predict(pen=pen) if n_bkps is None else algo.predict(n_bkps=n_bkps)
    return np.array(bk[:-1], dtype=int)


def _setting(cfg, which, seed, full):
    jump = cfg["jump"] if which == "paper" else cfg["weak_jump"]
    pen, c = cfg["kernel_pen"][which], cfg["threshold_c"][which]
    A, Ps, cps = simulate_dmrdpg(T=cfg["T"], n=cfg["n"], L=cfg["L"], d=cfg["d"],
                                 change_points=cfg["change_points"], jump=jump, random_state=seed)
    T, K = cfg["T"], len(cps)
    ranks = (cfg["d"], cfg["d"], cfg["L"])
    kw = dict(ranks=ranks, threshold_c=c, n_sim=cfg["n_sim"], random_state=seed)
    low = MRDPGChangePoint(**kw).fit(A)
    ci_low = low.confidence_intervals(LEVEL) if low.change_points_.size else []
    kern = kernel_cpd(A, pen=pen)
    sbs = 2 * low.stage1_half_
    est = {"lowrank": low.change_points_, "lowrank_r2": np.array([ci.estimate for ci in ci_low], dtype=int),
           "sbs": sbs, "kernel": kern}
    moved = {"lowrank": [float(low.change_points_.tolist() != sbs.tolist())]}
    if full:
        xh = MRDPGChangePoint(**kw, jump_half="other").fit(A)
        est["lowrank_xhalf"] = xh.change_points_
        moved["lowrank_xhalf"] = [float(xh.change_points_.tolist() != sbs.tolist())]
        est["lowrank_ls"] = MRDPGChangePoint(**kw, refinement="least_squares").fit(A).change_points_
        est["raw"] = MRDPGChangePoint(**{**kw, "ranks": None}).fit(A).change_points_
        est["kernel_oracle_k"] = kernel_cpd(A, n_bkps=K)
    audit = interval_audit(ci_low, cps)
    metrics = {
        "hausdorff": {arm: hausdorff(e, cps, T) for arm, e in est.items()},
        "covering": {arm: covering_metric(est[arm], cps, T) for arm in ("lowrank", "lowrank_r2", "kernel")},
        "k_correct": {arm: [float(est[arm].size == K)] for arm in ("lowrank", "kernel")},
        "moved": moved,
        "covered": {"lowrank": coverage(ci_low, cps)},
    }
    info = {"true": cps.tolist(), **{arm: np.asarray(e).tolist() for arm, e in est.items()},
            "threshold": low.threshold_, "threshold_c": c, "kernel_pen": pen,
            "kappa_true": float(np.linalg.norm(Ps[1] - Ps[0])) if len(Ps) > 1 else 0.0,
            "ci_lowrank": [[ci.lower, ci.upper] for ci in ci_low],
            # per true change point: detected (not a false alarm), exact centre, covered
            "ci_audit": [list(map(bool, a)) for a in audit]}
    return metrics, info


def development_tuning(scale="quick", seeds=DEV_SEEDS, which=("weak", "paper"), c_grid=C_GRID, pen_grid=PEN_GRID):
    """Mean Hausdorff distance on development seeds of the lowrank arm over ``C_GRID`` and of the
    kernel arm over ``PEN_GRID`` (the numbers behind ``kernel_pen`` and ``threshold_c``)."""
    cfg = SCALES[scale]
    out = {}
    with threadpool_limits(1):
        for w in which:
            jump = cfg["jump"] if w == "paper" else cfg["weak_jump"]
            res = {"c": {c: [] for c in c_grid}, "pen": {p: [] for p in pen_grid}}
            for seed in seeds:
                A, _, cps = simulate_dmrdpg(T=cfg["T"], n=cfg["n"], L=cfg["L"], d=cfg["d"],
                                            change_points=cfg["change_points"], jump=jump, random_state=seed)
                for c in c_grid:
                    m = MRDPGChangePoint(ranks=(cfg["d"], cfg["d"], cfg["L"]), threshold_c=c).fit(A)
                    res["c"][c].append(hausdorff(m.change_points_, cps, cfg["T"]))
                for p in pen_grid:
                    res["pen"][p].append(hausdorff(kernel_cpd(A, pen=p), cps, cfg["T"]))
            out[w] = {k: {g: float(np.mean(v)) for g, v in d.items()} for k, d in res.items()}
    return out


def run(scale: str, seed: int) -> dict:
    cfg = SCALES[scale]
    seed_everything(seed)
    t0 = time.perf_counter()
    with threadpool_limits(1):
        # the weak jump keeps the seed's own sequence; the paper's jump a separate draw
        weak, weak_info = _setting(cfg, "weak", seed, full=True)
        paper, paper_info = _setting(cfg, "paper", seed + 1_000_000, full=False)
    metrics = dict(weak)
    metrics.update({f"{k}_paper_jump": v for k, v in paper.items()})
    return {"metrics": metrics,
            "info": {"weak_jump": weak_info, "paper_jump": paper_info, "seconds": time.perf_counter() - t0}}
