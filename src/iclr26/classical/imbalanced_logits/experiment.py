"""Claim checks for arXiv:2502.11323 on simulated two-component Gaussian mixtures.

Per seed: draw a training set from ``y = +1`` w.p. ``pi`` (minority), ``x | y ~ N(y mu, I_d)``,
fit the max-margin classifier (``tau = 1``) and the margin-rebalanced one (``tau`` = the
theory's balanced-optimal ratio, computed from the population parameters only), and measure

* ``ks_minority``: Kolmogorov-Smirnov distance between the minority training logits ``y_i f(x_i)``
  and (a) the truncated law ``max{kappa_hat, N(m_hat, 1)}`` vs (b) the untruncated ``N(m_hat, 1)``,
  where ``kappa_hat`` is the fitted margin and ``m_hat = <mu, beta_hat> + beta0_hat`` the fitted
  classifier's mean minority test logit (plug-in parameters; same for both laws);
* ``w1_minority_theory``: 1-Wasserstein distance between the minority training logits and the
  pure-theory laws ``max{kappa*, N(rho*||mu|| + beta0*, 1)}`` vs ``N(rho*||mu|| + beta0*, 1)``;
* ``err_minority``: the fitted SVM's exact minority test error ``Phi(-<mu, beta_hat> - beta0_hat)``
  vs the theory's ``Phi(-rho*||mu|| - beta0*)``;
* ``minority_error`` / ``balanced_error``: rebalanced vs ordinary SVM (exact population errors).
"""
from __future__ import annotations

import time

import numpy as np
from scipy import stats

from iclr26.common.seeding import seed_everything

from .estimator import MarginRebalancedSVC
from .theory import imbalance_asymptotics, optimal_tau, truncated_logit_cdf

SCALES = {
    "smoke": dict(d=100, delta=2.0, pi=0.1, mu_norm=2.0),
    "quick": dict(d=1000, delta=2.0, pi=0.1, mu_norm=2.0),
    # the paper's simulations use larger d and sweep pi, ||mu|| and delta
    "paper": dict(d=4000, delta=2.0, pi=0.1, mu_norm=2.0),
}
SEEDS = {"smoke": 1, "quick": 20, "paper": 50}


def sample_gmm(n, d, pi, mu_norm, rng):
    """Two-component Gaussian mixture of the paper's Sec. 2 with ``mu = mu_norm * e_1``."""
    mu = np.zeros(d)
    mu[0] = mu_norm
    y = np.where(rng.random(n) < pi, 1, -1)
    X = y[:, None] * mu[None, :] + rng.standard_normal((n, d))
    return X, y, mu


def ks_distance(sample, cdf):
    """sup_t |F_n(t) - F(t)| for a CDF ``cdf`` that may jump (left and right limits both checked)."""
    x = np.sort(np.asarray(sample, dtype=float))
    n = x.size
    F = cdf(x)
    F_left = cdf(np.nextafter(x, -np.inf))
    ecdf_right = np.searchsorted(x, x, side="right") / n
    ecdf_left = np.searchsorted(x, x, side="left") / n
    return float(max(np.max(np.abs(ecdf_right - F)), np.max(np.abs(ecdf_left - F_left))))


def w1_distance(sample, cdf, lo, hi, num=20001):
    """1-Wasserstein distance ``int |F_n - F| dt`` on a fine grid over ``[lo, hi]``."""
    t = np.linspace(lo, hi, num)
    x = np.sort(np.asarray(sample, dtype=float))
    ecdf = np.searchsorted(x, t, side="right") / x.size
    return float(np.trapezoid(np.abs(ecdf - cdf(t)), t))


def _pop_errors(clf, mu):
    """Exact minority/majority test errors of a linear rule with unit-norm coef (x = y mu + z)."""
    a = float(clf.coef_[0] @ mu)
    b = float(clf.intercept_[0])
    return float(stats.norm.cdf(-a - b)), float(stats.norm.cdf(-a + b))


def run(scale: str, seed: int) -> dict:
    cfg = SCALES[scale]
    rng = seed_everything(seed)
    t0 = time.perf_counter()
    d, pi, m = cfg["d"], cfg["pi"], cfg["mu_norm"]
    n = int(round(cfg["delta"] * d))
    theory = imbalance_asymptotics(pi, m, cfg["delta"])
    tau_opt = optimal_tau(pi, m, cfg["delta"])
    theory_rb = imbalance_asymptotics(pi, m, cfg["delta"], tau=tau_opt)

    X, y, mu = sample_gmm(n, d, pi, m, rng)
    svm = MarginRebalancedSVC(tau=1.0, minority=1).fit(X, y)
    reb = MarginRebalancedSVC(tau=tau_opt, minority=1).fit(X, y)

    logits = svm.training_logits(X, y)[y == 1]
    kappa_hat = svm.margin_
    # solver tolerance: snap logits that sit on the margin up to 1e-6 relative error onto it
    on_margin = np.abs(logits - kappa_hat) <= 1e-6 * max(1.0, abs(kappa_hat))
    if np.any(logits < kappa_hat - 1e-3):
        raise RuntimeError("hard-margin constraint violated: data not separated at this seed")
    logits = np.where(on_margin, kappa_hat, logits)
    m_hat = float(svm.coef_[0] @ mu + svm.intercept_[0])
    ks_trunc = ks_distance(logits, lambda t: truncated_logit_cdf(t, kappa_hat, m_hat))
    ks_gauss = ks_distance(logits, lambda t: stats.norm.cdf(t - m_hat))

    trunc_star, mean_star = theory.minority_logit_law()
    lo, hi = min(logits.min(), mean_star - 8) - 1, max(logits.max(), mean_star + 8) + 1
    w1_trunc = w1_distance(logits, lambda t: truncated_logit_cdf(t, trunc_star, mean_star), lo, hi)
    w1_gauss = w1_distance(logits, lambda t: stats.norm.cdf(t - mean_star), lo, hi)

    e_min_svm, e_maj_svm = _pop_errors(svm, mu)
    e_min_reb, e_maj_reb = _pop_errors(reb, mu)
    return {
        "metrics": {
            "ks_minority": {"truncated": ks_trunc, "gaussian": ks_gauss},
            "w1_minority_theory": {"truncated": w1_trunc, "gaussian": w1_gauss},
            "err_minority": {"empirical": e_min_svm, "theory": theory.err_minority},
            "minority_error": {"rebalanced": e_min_reb, "svm": e_min_svm},
            "balanced_error": {"rebalanced": 0.5 * (e_min_reb + e_maj_reb), "svm": 0.5 * (e_min_svm + e_maj_svm)},
        },
        "info": {
            "n": n, "d": d, "n_minority": int((y == 1).sum()),
            "theory": {"rho": theory.rho, "beta0": theory.beta0, "kappa": theory.kappa,
                       "err_minority": theory.err_minority, "err_majority": theory.err_majority,
                       "tau_opt": tau_opt, "err_minority_rebalanced": theory_rb.err_minority,
                       "err_balanced_rebalanced": theory_rb.err_balanced},
            "fitted": {"rho": float(svm.coef_[0] @ mu / m), "beta0": float(svm.intercept_[0]),
                       "kappa": kappa_hat, "frac_minority_on_margin": float(on_margin.mean()),
                       "err_majority": e_maj_svm, "err_majority_rebalanced": e_maj_reb},
            "seconds": time.perf_counter() - t0,
        },
    }
