"""Regret-scaling check for arXiv:2603.04546 (a theory paper: no empirical table to match).

Setting: features ``x_t ~ Uniform[0, 1]`` i.i.d.; the learner's class ``H`` and the adversary's
label class ``R`` are 1-D thresholds (``R`` restricted to ``theta in {0.25, 0.75}`` endpoints of
``[0.25, 0.75]``, which are the adversary's best responses anyway); the adversary is adaptive:
each round it picks the ``r_t in R`` that maximises the learner's expected loss under the
learner's current mixture (for the deterministic FTL baseline: under its current hypothesis).
For each horizon ``T`` in the grid a fresh run (``eta``, ``gamma`` set from ``T``) records the
regret ``sum_t E_{h ~ p_t} 1[h(x_t) != y_t] - min_h sum_t 1[h(x_t) != y_t]`` (exact ERM for the
comparator). Per seed the log-log slope of regret against ``T`` is fitted.
"""
from __future__ import annotations

import time

import numpy as np
from threadpoolctl import threadpool_limits

from iclr26.common.seeding import seed_everything

from .learner import FollowTheLeader, HybridOnlineLearner, threshold_erm

SCALES = {
    "smoke": dict(horizons=(50, 100, 200), r_lo=0.25, r_hi=0.75),
    "quick": dict(horizons=(250, 500, 1000, 2000), r_lo=0.25, r_hi=0.75),
    "paper": dict(horizons=(1000, 2000, 4000, 8000, 16000, 32000), r_lo=0.25, r_hi=0.75),
}
SEEDS = {"smoke": 1, "quick": 10, "paper": 20}


def best_response(mixture, r_lo, r_hi):
    """Adversary's label threshold maximising ``E_{h ~ p} P_x(h(x) != r(x)) = E |theta_h - theta_r|``."""
    th = np.clip(np.array([h.theta for _, h in mixture]), 0.0, 1.0)
    w = np.array([p for p, _ in mixture])
    return r_lo if w @ np.abs(th - r_lo) >= w @ np.abs(th - r_hi) else r_hi


def play(learner, T, rng, r_lo, r_hi):
    """Run ``T`` rounds against the adaptive adversary; return (regret, oracle calls)."""
    X = rng.random(T)
    Y = np.empty(T, dtype=int)
    loss = 0.0
    for t in range(T):
        phi = best_response(learner.mixture(), r_lo, r_hi)
        Y[t] = int(X[t] >= phi)
        loss += abs(float(learner.predict_proba([X[t]])[0]) - Y[t])
        learner.update(X[t], Y[t])
    best = threshold_erm(X, Y)
    return float(loss - np.sum(best.predict(X) != Y)), int(learner.oracle_calls_)


def loglog_slope(T, regret):
    """Least-squares slope of ``log max(regret, 0.5)`` on ``log T``."""
    return float(np.polyfit(np.log(np.asarray(T, float)), np.log(np.maximum(np.asarray(regret, float), 0.5)), 1)[0])


def run(scale: str, seed: int) -> dict:
    cfg = SCALES[scale]
    seed_everything(seed)
    t0 = time.perf_counter()
    reg = {"method": [], "ftl": []}
    calls = {"method": [], "ftl": []}
    with threadpool_limits(1):
        for i, T in enumerate(cfg["horizons"]):
            for arm in ("method", "ftl"):
                # same feature stream for both arms at a given (seed, T)
                rng = np.random.default_rng([seed, i])
                learner = (HybridOnlineLearner(threshold_erm, horizon=T, random_state=seed) if arm == "method"
                           else FollowTheLeader(threshold_erm))
                r, c = play(learner, T, rng, cfg["r_lo"], cfg["r_hi"])
                reg[arm].append(r)
                calls[arm].append(c)
    H = list(cfg["horizons"])
    return {
        "metrics": {
            "regret_slope": {"method": loglog_slope(H, reg["method"]), "ftl": loglog_slope(H, reg["ftl"])},
            "regret_at_max_T": {"method": reg["method"][-1], "ftl": reg["ftl"][-1]},
            "regret_over_sqrtT_at_max_T": {"method": reg["method"][-1] / np.sqrt(H[-1]),
                                           "ftl": reg["ftl"][-1] / np.sqrt(H[-1])},
        },
        "info": {"horizons": H, "regret": reg, "oracle_calls": calls, "seconds": time.perf_counter() - t0},
    }
