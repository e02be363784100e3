"""Regret-rate check for arXiv:2603.04546 (a theory paper: it has no empirical table).

Setting: features ``x_t ~ Uniform[0, 1]`` i.i.d.; the learner's class ``H`` is upward 1-D thresholds,
reached through the exact ERM oracle :func:`.threshold_erm`; the adversary's label class ``R`` is
upward thresholds with ``theta in [0.25, 0.75]``. The adversary is adaptive: each round it picks the
``r_t in R`` that maximises the learner's expected loss under the learner's current mixture,
``E_{h ~ p_t} |theta_h - theta_r|`` (a convex function of ``theta_r``, so an endpoint of the range);
the learner then sees ``x_t`` and ``r_t``. Every arm faces its own adaptive adversary on the same
feature stream. For each horizon ``T`` a fresh game (defaults set from ``T``) records

* the regret ``sum_t E_{h ~ p_t} 1[h(x_t) != y_t] - min_h sum_t 1[h(x_t) != y_t]`` (exact ERM), and
* the expected regret ``sum_t E_{h ~ p_t} L(h, r_t) - min_h sum_t L(h, r_t)`` with the population
  loss ``L(h, r) = P_x(h(x) != r(x)) = |theta_h - theta_r|`` (thresholds clipped to [0, 1]),

and per seed the least-squares slope of log regret on log T (the regret exponent).

Arms: ``method`` (:class:`.HybridOnlineLearner`, Frank-Wolfe with the ERM oracle), ``exact`` (the
same objective solved exactly, :class:`.ExactThresholdFTRL`: isolates the Frank-Wolfe reduction),
``hedge`` (:class:`.CoverExponentialWeights`: the statistically optimal, inefficient route) and
``ftl`` (:class:`.FollowTheLeader`: the same ERM oracle without a regulariser).
"""
from __future__ import annotations

import time

import numpy as np
from threadpoolctl import threadpool_limits

from iclr26.common.seeding import seed_everything

from .baselines import CoverExponentialWeights, ExactThresholdFTRL
from .learner import FollowTheLeader, HybridOnlineLearner
from .oracles import Threshold, threshold_erm

SCALES = {
    "smoke": dict(horizons=(40, 80, 160), r_lo=0.25, r_hi=0.75),
    "quick": dict(horizons=(250, 500, 1000, 2000), r_lo=0.25, r_hi=0.75),
    "paper": dict(horizons=(1000, 2000, 4000, 8000, 16000, 32000), r_lo=0.25, r_hi=0.75),
}
SEEDS = {"smoke": 1, "quick": 32, "paper": 32}
ARMS = ("method", "exact", "hedge", "ftl")


def make_learner(arm: str, T: int):
    if arm == "method":
        return HybridOnlineLearner(threshold_erm, horizon=T)
    if arm == "exact":
        return ExactThresholdFTRL(horizon=T)
    if arm == "hedge":
        return CoverExponentialWeights(horizon=T)
    if arm == "ftl":
        return FollowTheLeader(threshold_erm)
    raise ValueError(f"unknown arm {arm!r}; allowed: {', '.join(ARMS)}")


def threshold_mixture(learner):
    """``(thetas, weights)`` of a learner's mixture over upward thresholds."""
    if hasattr(learner, "threshold_mixture"):
        return learner.threshold_mixture()
    mix = learner.mixture()
    return np.array([h.theta for _, h in mix]), np.array([w for w, _ in mix])


def best_response(thetas, weights, r_lo, r_hi):
    """The adversary's ``theta_r in [r_lo, r_hi]`` maximising ``sum_k w_k |clip(theta_k) - theta_r|``,
    and that expected loss."""
    th = np.clip(np.asarray(thetas, float), 0.0, 1.0)
    lo, hi = float(weights @ np.abs(th - r_lo)), float(weights @ np.abs(th - r_hi))
    return (r_lo, lo) if lo >= hi else (r_hi, hi)


def play(learner, T, rng, r_lo, r_hi):
    """Run ``T`` rounds against the adaptive adversary; return (regret, expected regret)."""
    X = rng.random(T)
    Y = np.empty(T, dtype=int)
    thr = np.empty(T)
    loss = exp_loss = 0.0
    for t in range(T):
        thr[t], e = best_response(*threshold_mixture(learner), r_lo, r_hi)
        exp_loss += e
        Y[t] = int(X[t] >= thr[t])
        loss += abs(float(learner.predict_proba([X[t]])[0]) - Y[t])
        learner.update(X[t], Threshold(thr[t]))
    best = threshold_erm(X, Y)
    # min over theta of sum_t |theta - thr_t| is reached at a median of thr_t
    med = np.median(thr)
    return float(loss - np.sum(best.predict(X) != Y)), float(exp_loss - np.abs(med - thr).sum())


def loglog_slope(T, regret):
    """Least-squares slope of ``log max(regret, 0.5)`` on ``log T``."""
    return float(np.polyfit(np.log(np.asarray(T, float)), np.log(np.maximum(np.asarray(regret, float), 0.5)), 1)[0])


def run(scale: str, seed: int) -> dict:
    cfg = SCALES[scale]
    seed_everything(seed)
    t0 = time.perf_counter()
    H = list(cfg["horizons"])
    reg = {a: [] for a in ARMS}
    ereg = {a: [] for a in ARMS}
    calls = {"method": [], "ftl": []}
    with threadpool_limits(1):
        for i, T in enumerate(H):
            for arm in ARMS:
                rng = np.random.default_rng([seed, i])      # the same feature stream for every arm
                learner = make_learner(arm, T)
                r, e = play(learner, T, rng, cfg["r_lo"], cfg["r_hi"])
                reg[arm].append(r)
                ereg[arm].append(e)
                if arm in calls:
                    calls[arm].append(int(learner.oracle_calls_))
    root = np.sqrt(H[-1])
    return {
        "metrics": {
            "regret_slope": {a: loglog_slope(H, reg[a]) for a in ARMS},
            "expected_regret_slope": {a: loglog_slope(H, ereg[a]) for a in ARMS},
            "regret_at_max_T": {a: reg[a][-1] for a in ARMS},
            "regret_over_sqrtT_at_max_T": {a: reg[a][-1] / root for a in ARMS},
        },
        "info": {"horizons": H, "regret": reg, "expected_regret": ereg, "oracle_calls": calls,
                 "seconds": time.perf_counter() - t0},
    }
