"""Claim checks for arXiv:2502.11323 on simulated two-component Gaussian mixtures.

Per seed: draw a training set from ``y = +1`` w.p. ``pi`` (minority), ``x | y ~ N(y mu, I_d)``,
fit the max-margin classifier (``tau = 1``) and the margin-rebalanced one (``tau`` = the
theory's balanced-optimal ratio, computed from the population parameters only), and measure

* ``ks_minority_law``: Kolmogorov-Smirnov distance between the minority training logits ``y_i f(x_i)``
  and the truncated law ``max{kappa_hat, N(m_hat, 1)}`` itself, atom at the fitted margin included
  (``kappa_hat`` the fitted margin, ``m_hat = <mu, beta_hat> + beta0_hat`` the fitted rule's exact
  mean minority test logit), against the same distance for an exact sample of the same size drawn
  from that law (the sampling floor: what KS shows when the law holds exactly);
* ``w1_minority_theory``: the same comparison in 1-Wasserstein distance with every constant from the
  variational problem: ``max{kappa*, N(rho*||mu|| + beta0*, 1)}`` (W1, not KS: KS jumps by the whole
  atom when the atom sits 0.001 away from kappa*);
* ``atom_minority``: share of minority training points on the margin vs the theory's
  ``P(N(m*, 1) <= kappa*) = Phi(kappa* - m*)``; ``atom_share``: minority vs majority share on the margin;
* ``err_minority`` / ``err_majority``: the fitted SVM's exact class test errors
  ``Phi(-<mu, beta_hat> -+ beta0_hat)`` vs the theory's ``Phi(-rho*||mu|| -+ beta0*)``;
* ``minority_error`` / ``balanced_error``: rebalanced vs ordinary SVM (exact population errors).
"""
from __future__ import annotations

import time

import numpy as np
from scipy import stats

from iclr26.common.seeding import seed_everything

from .estimator import MarginRebalancedSVC
from .theory import imbalance_asymptotics, optimal_tau, sample_training_logits, truncated_logit_cdf

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


def on_margin(logits: np.ndarray, margin: float, rel: float = 1e-6) -> np.ndarray:
    """Which training logits sit on the margin, up to the solver's relative tolerance ``rel``."""
    return np.abs(logits - margin) <= rel * max(1.0, abs(margin))


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
    if not svm.separable_:
        raise RuntimeError(f"seed {seed}: the training data are not linearly separable (no max-margin classifier)")

    kappa_hat = svm.margin_
    all_logits = svm.training_logits(X, y)
    # solver tolerance: logits within 1e-6 (relative) of the margin are on it
    atoms = on_margin(all_logits, kappa_hat)
    logits = np.where(atoms, kappa_hat, all_logits)[y == 1]
    n_min = logits.size
    m_hat = float(svm.coef_[0] @ mu + svm.intercept_[0])
    plug_cdf = lambda t: truncated_logit_cdf(t, kappa_hat, m_hat)  # noqa: E731
    floor_rng = np.random.default_rng([seed, 1])
    exact_plug = np.maximum(kappa_hat, m_hat + floor_rng.standard_normal(n_min))
    ks_obs, ks_exact = ks_distance(logits, plug_cdf), ks_distance(exact_plug, plug_cdf)

    trunc_star, mean_star = theory.minority_logit_law()
    star_cdf = lambda t: truncated_logit_cdf(t, trunc_star, mean_star)  # noqa: E731
    exact_star = sample_training_logits(theory, n_min, cls=1, random_state=np.random.default_rng([seed, 2]))
    lo = min(logits.min(), exact_star.min(), mean_star - 8) - 1
    hi = max(logits.max(), exact_star.max(), mean_star + 8) + 1
    w1_obs, w1_exact = w1_distance(logits, star_cdf, lo, hi), w1_distance(exact_star, star_cdf, lo, hi)

    atom_min, atom_maj = float(atoms[y == 1].mean()), float(atoms[y == -1].mean())
    e_min_svm, e_maj_svm = _pop_errors(svm, mu)
    e_min_reb, e_maj_reb = _pop_errors(reb, mu)
    return {
        "metrics": {
            "ks_minority_law": {"observed": ks_obs, "exact_sample": ks_exact},
            "w1_minority_theory": {"observed": w1_obs, "exact_sample": w1_exact},
            "atom_minority": {"observed": atom_min, "theory": float(stats.norm.cdf(trunc_star - mean_star))},
            "atom_share": {"minority": atom_min, "majority": atom_maj},
            "err_minority": {"empirical": e_min_svm, "theory": theory.err_minority},
            "err_majority": {"empirical": e_maj_svm, "theory": theory.err_majority},
            "minority_error": {"rebalanced": e_min_reb, "svm": e_min_svm},
            "balanced_error": {"rebalanced": 0.5 * (e_min_reb + e_maj_reb), "svm": 0.5 * (e_min_svm + e_maj_svm)},
        },
        "info": {
            "n": n, "d": d, "n_minority": n_min,
            "theory": {"rho": theory.rho, "beta0": theory.beta0, "kappa": theory.kappa,
                       "err_minority": theory.err_minority, "err_majority": theory.err_majority,
                       "atom_majority": float(stats.norm.cdf(theory.kappa - theory.majority_logit_law()[1])),
                       "tau_opt": tau_opt, "err_minority_rebalanced": theory_rb.err_minority,
                       "err_balanced_rebalanced": theory_rb.err_balanced},
            "fitted": {"rho": float(svm.coef_[0] @ mu / m), "beta0": float(svm.intercept_[0]),
                       "kappa": kappa_hat, "m_hat": m_hat,
                       "ks_to_gaussian": ks_distance(logits, lambda t: stats.norm.cdf(t - m_hat)),
                       "err_majority_rebalanced": e_maj_reb, "n_iter": svm.n_iter_},
            "seconds": time.perf_counter() - t0,
        },
    }
