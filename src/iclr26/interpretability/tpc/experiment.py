"""TPC on synthetic activations with a known polynomial rule: accuracy per order, against a
parameter-matched MLP, and the adaptive cascade.

One trial (seed) is one independent draw of everything: the rule, the train/validation/test data and
every model's initialisation, so each seed is one unit of replication.

Data: x ~ N(0, I_d) (standardised activations). Two rules per draw, with unit directions a, u, v, z
drawn at random:
  * ``poly`` (order 3): s(x) = a.x + (u.x)^2 - (v.x)^2 + 0.5 (z.x)^3, the polynomial the paper says
    higher orders can capture;
  * ``linear`` (order 1): s(x) = a.x, where the higher orders can add nothing.
Labels y = 1[s(x) + e > m] with logistic noise e (scale ``noise``) and m the median of s + e on a
separate 20,000-point draw, so classes are balanced and the Bayes accuracy is below 1.

Arms (all chosen on the validation split, never on test, with the same budget of 3 candidate
settings): TPC (N = 3, rank R) with its learning rate from {3e-3, 1e-2, 3e-2}; its truncations f_1, f_2,
f_3 are read from the one fitted model (the paper's safety dial); a one-hidden-layer ReLU MLP
(scikit-learn ``MLPClassifier``) with as many parameters as the TPC (hidden width
h = round((P - 1)/(d + 2)), P the TPC's parameter count) and its L2 penalty from {1e-4, 1e-3, 1e-2}.
The cascade's temperatures and exit confidence are calibrated on validation to keep the full order's
validation accuracy (keep = 1: the claim's 99 % is the tolerance on test), then run on test; the
cascade calibrated to 99 % of the validation accuracy (``cascade99``) is recorded in ``info``.
"""
from __future__ import annotations

import time
import warnings

import numpy as np

from iclr26.common.seeding import seed_everything
from iclr26.interpretability.tpc.estimator import TruncatedPolynomialClassifier

SCALES = {
    "smoke": dict(d=6, rank=2, n_train=200, n_val=150, n_test=200, max_iter=20, mlp_iter=30, noise=0.1,
                  tpc_lrs=(1e-2,), mlp_alphas=(1e-3,)),
    "quick": dict(d=16, rank=4, n_train=1500, n_val=1000, n_test=3000, max_iter=200, mlp_iter=600, noise=0.1,
                  tpc_lrs=(3e-3, 1e-2, 3e-2), mlp_alphas=(1e-4, 1e-3, 1e-2)),
    # the paper: d = model width (up to 5,376), N up to 5, WildGuardMix / BeaverTails; not run here
    "paper": dict(d=64, rank=16, n_train=20000, n_val=5000, n_test=20000, max_iter=1000, mlp_iter=1000,
                  noise=0.1, tpc_lrs=(3e-3, 1e-2, 3e-2), mlp_alphas=(1e-4, 1e-3, 1e-2)),
}
SEEDS = {"smoke": 1, "quick": 10, "paper": 10}
MAX_ORDER = 3


def _unit(rng, d):
    v = rng.normal(size=d)
    return v / np.linalg.norm(v)


def make_task(rule: str, d: int, n: int, noise: float, rng: np.random.Generator):
    """Draw a rule and return a sampler ``sample(k) -> (X, y)`` of balanced labelled points."""
    if rule not in ("poly", "linear"):
        raise ValueError(f"rule must be 'poly' or 'linear', got {rule!r}")
    a, u, v, z = (_unit(rng, d) for _ in range(4))

    def score(X):
        s = X @ a
        if rule == "poly":
            s = s + (X @ u) ** 2 - (X @ v) ** 2 + 0.5 * (X @ z) ** 3
        return s

    Xr = rng.normal(size=(20000, d))
    cut = np.median(score(Xr) + noise * rng.logistic(size=20000))

    def sample(k):
        X = rng.normal(size=(k, d))
        y = (score(X) + noise * rng.logistic(size=k) > cut).astype(int)
        return X, y

    return sample


def mlp_width(tpc_params: int, d: int) -> int:
    """Hidden width of a one-hidden-layer MLP (d h + h + h + 1 parameters) closest to ``tpc_params``."""
    return max(1, int(round((tpc_params - 1) / (d + 2))))


def run_task(rule: str, cfg: dict, rng: np.random.Generator, seed: int) -> dict:
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.neural_network import MLPClassifier

    sample = make_task(rule, cfg["d"], 0, cfg["noise"], rng)
    Xtr, ytr = sample(cfg["n_train"])
    Xva, yva = sample(cfg["n_val"])
    Xte, yte = sample(cfg["n_test"])
    best = None
    for lr in cfg["tpc_lrs"]:
        clf = TruncatedPolynomialClassifier(max_order=MAX_ORDER, rank=cfg["rank"], max_iter=cfg["max_iter"],
                                            learning_rate=lr, random_state=seed).fit(Xtr, ytr)
        acc = clf.score(Xva, yva)
        if best is None or acc > best[0]:
            best = (acc, clf)
    tpc = best[1]
    h = mlp_width(tpc.n_params_, cfg["d"])
    best = None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        for alpha in cfg["mlp_alphas"]:
            m = MLPClassifier((h,), alpha=alpha, max_iter=cfg["mlp_iter"], learning_rate_init=1e-2,
                              random_state=seed).fit(Xtr, ytr)
            acc = m.score(Xva, yva)
            if best is None or acc > best[0]:
                best = (acc, m)
    mlp = best[1]
    mlp_params = sum(c.size for c in mlp.coefs_) + sum(b.size for b in mlp.intercepts_)
    out = {f"order{n}": float(np.mean(tpc.predict(Xte, order=n) == yte)) for n in range(1, MAX_ORDER + 1)}
    out["mlp"] = float(np.mean(mlp.predict(Xte) == yte))
    # operating point: validation accuracy of the full order kept (keep = 1); the 99 % of the claim is
    # the tolerance on test. The cascade calibrated to the 99 % bar itself is recorded as well.
    for name, keep in (("cascade99", 0.99), ("cascade", 1.0)):
        tpc.calibrate_cascade(Xva, yva, keep=keep)
        pred, exit_order = tpc.cascade_predict(Xte)
        out[name] = float(np.mean(pred == yte))
        out[f"{name}_cost"] = tpc.cascade_cost(exit_order)
        out[f"{name}_mean_exit_order"] = float(np.mean(exit_order))
    out["tpc_params"] = int(tpc.n_params_)
    out["mlp_params"] = int(mlp_params)
    out["tpc_lr"] = float(tpc.learning_rate)
    out["mlp_alpha"] = float(mlp.alpha)
    out["cascade_tau"] = float(tpc.cascade_tau_)
    return out


def run(scale: str, seed: int) -> dict:
    cfg = SCALES[scale]
    rng = seed_everything(seed)
    t0 = time.perf_counter()
    res = {rule: run_task(rule, cfg, rng, seed) for rule in ("poly", "linear")}
    p, lin = res["poly"], res["linear"]
    return {
        "metrics": {
            "accuracy_poly": {"order1": p["order1"], "order2": p["order2"], "order3": p["order3"],
                              "mlp": p["mlp"], "cascade": p["cascade"]},
            "accuracy_linear": {"order1": lin["order1"], "order3": lin["order3"], "mlp": lin["mlp"]},
            "cascade_retention": {"cascade": p["cascade"] / p["order3"]},
            "cascade_cost": {"cascade": p["cascade_cost"]},
        },
        "info": {"tasks": res, "seconds": time.perf_counter() - t0},
    }
