"""Tests for iclr26.classical.imbalanced_logits (arXiv:2502.11323)."""
import numpy as np
import pytest
from scipy import integrate, optimize, stats
from sklearn.svm import SVC
from sklearn.utils.estimator_checks import parametrize_with_checks

from iclr26.classical.imbalanced_logits import (MarginRebalancedSVC, imbalance_asymptotics, optimal_tau,
                                                sample_training_logits, truncated_logit_cdf)
from iclr26.classical.imbalanced_logits.experiment import ks_distance, run, sample_gmm
from iclr26.classical.imbalanced_logits.theory import _h


def _separable(n=60, d=80, pi=0.2, m=2.0, seed=0):
    rng = np.random.default_rng(seed)
    return sample_gmm(n, d, pi, m, rng)


# ---------------------------------------------------------------- equations
@pytest.mark.parametrize("a", [-2.0, 0.0, 0.7, 3.0])
def test_h_closed_form_matches_quadrature(a):
    # E[(a - G)_+^2], the left side of the variational constraint
    ref = integrate.quad(lambda g: (a - g) ** 2 * stats.norm.pdf(g), -np.inf, a)[0]
    assert _h(a) == pytest.approx(ref, rel=1e-8, abs=1e-12)


def test_cover_capacity_no_signal():
    # ||mu|| = 0, pi = 1/2: random labels are separable with margin -> 0 exactly at n/d = 2 (Cover 1965)
    r = imbalance_asymptotics(0.5, 0.0, 2.0)
    assert abs(r.kappa) < 1e-4
    assert imbalance_asymptotics(0.5, 0.0, 1.0).kappa > 0.1       # below capacity: positive margin
    assert imbalance_asymptotics(0.5, 0.0, 3.0).kappa < 0          # above capacity: not separable


def test_balanced_case_is_symmetric():
    r = imbalance_asymptotics(0.5, 2.0, 0.5)
    assert r.beta0 == pytest.approx(0.0, abs=1e-6)
    assert r.err_minority == pytest.approx(r.err_majority, abs=1e-6)
    assert optimal_tau(0.5, 2.0, 0.5) == pytest.approx(1.0, abs=1e-5)


def test_constraint_active_and_optimal():
    pi, m, delta = 0.1, 2.0, 2.0
    r = imbalance_asymptotics(pi, m, delta)
    lhs = pi * _h(r.kappa - r.rho * m - r.beta0) + (1 - pi) * _h(r.kappa - r.rho * m + r.beta0)
    assert lhs == pytest.approx((1 - r.rho ** 2) / delta, abs=1e-6)
    # independent solve: for each (rho, beta0) the largest feasible kappa is a root; maximise it
    def kappa_of(z):
        rho, b0 = z
        if abs(rho) >= 1:
            return -1e9
        f = lambda k: pi * _h(k - rho * m - b0) + (1 - pi) * _h(k - rho * m + b0) - (1 - rho ** 2) / delta
        return optimize.brentq(f, -20, 20)
    res = optimize.minimize(lambda z: -kappa_of(z), x0=[0.5, 0.0], method="Nelder-Mead",
                            options={"xatol": 1e-9, "fatol": 1e-12, "maxiter": 4000})
    assert -res.fun == pytest.approx(r.kappa, abs=1e-5)
    assert res.x[0] == pytest.approx(r.rho, abs=1e-3)
    assert res.x[1] == pytest.approx(r.beta0, abs=1e-3)


def test_tau_moves_only_the_intercept():
    base = imbalance_asymptotics(0.1, 2.0, 2.0)
    prev = -np.inf
    for tau in (0.5, 1.0, 2.0, 4.0):
        r = imbalance_asymptotics(0.1, 2.0, 2.0, tau=tau)
        assert r.rho == pytest.approx(base.rho, abs=1e-7)
        assert r.beta0 > prev
        prev = r.beta0
    t = optimal_tau(0.1, 2.0, 2.0)
    r = imbalance_asymptotics(0.1, 2.0, 2.0, tau=t)
    assert t > 1 and r.beta0 == pytest.approx(0.0, abs=1e-6)
    assert r.err_balanced < base.err_balanced


def test_truncated_law_cdf_and_sampler():
    r = imbalance_asymptotics(0.1, 2.0, 2.0)
    trunc, mean = r.minority_logit_law()
    assert truncated_logit_cdf(trunc - 1e-9, trunc, mean) == 0.0
    assert truncated_logit_cdf(trunc, trunc, mean) == pytest.approx(stats.norm.cdf(trunc - mean))
    z = sample_training_logits(r, 20000, cls=1, random_state=0)
    assert z.min() == pytest.approx(trunc)
    assert np.mean(z == trunc) == pytest.approx(stats.norm.cdf(trunc - mean), abs=0.01)
    assert ks_distance(z, lambda t: truncated_logit_cdf(t, trunc, mean)) < 0.015


def test_ks_distance_reference():
    x = np.array([0.1, 0.4, 0.9])
    # uniform CDF: sup |F_n - F| = max(1/3 - 0.1, 0.4 - 1/3, 2/3 - 0.4, 0.9 - 2/3, 1 - 0.9)
    assert ks_distance(x, lambda t: np.clip(t, 0, 1)) == pytest.approx(stats.kstest(x, "uniform").statistic)


# ---------------------------------------------------------------- estimator
def test_reduction_tau_one_is_svm():
    X, y, _ = _separable()
    clf = MarginRebalancedSVC(tau=1.0).fit(X, y)
    svc = SVC(kernel="linear", C=1e6, tol=1e-6).fit(X, y)
    w = svc.coef_.ravel()
    np.testing.assert_allclose(clf.decision_function(X), svc.decision_function(X) / np.linalg.norm(w), atol=1e-6)
    assert clf.margin_ == pytest.approx(1 / np.linalg.norm(w), rel=1e-6)


def test_rebalanced_margins_hold_and_match_direct_solve():
    X, y, _ = _separable(n=30, d=40, seed=3)
    tau = 2.5
    clf = MarginRebalancedSVC(tau=tau).fit(X, y)
    s = clf.training_logits(X, y)
    minority = y == clf.minority_
    assert clf.minority_ == 1
    assert s[minority].min() == pytest.approx(tau * clf.margin_, rel=1e-4)
    assert s[~minority].min() == pytest.approx(clf.margin_, rel=1e-4)
    # direct solve of: max kappa s.t. y_i f(x_i) >= tau_i kappa, ||beta|| <= 1
    ys = np.where(y == 1, 1.0, -1.0)
    taus = np.where(minority, tau, 1.0)
    d = X.shape[1]
    cons = [{"type": "ineq", "fun": lambda z: ys * (X @ z[:d] + z[d]) - taus * z[d + 1]},
            {"type": "ineq", "fun": lambda z: 1.0 - z[:d] @ z[:d]}]
    z0 = np.r_[clf.coef_[0] * 0.9, 0.0, 0.0]
    res = optimize.minimize(lambda z: -z[d + 1], z0, constraints=cons, method="SLSQP",
                            options={"ftol": 1e-12, "maxiter": 2000})
    assert res.success
    assert -res.fun == pytest.approx(clf.margin_, rel=1e-4)
    np.testing.assert_allclose(res.x[:d], clf.coef_[0], atol=1e-3)
    assert res.x[d] == pytest.approx(clf.intercept_[0], abs=1e-3)


def test_minority_label_and_sign_conventions():
    X, y, _ = _separable(seed=1)
    labels = np.where(y == 1, "rare", "common")     # classes_ = ['common', 'rare']
    a = MarginRebalancedSVC(tau=3.0).fit(X, labels)
    b = MarginRebalancedSVC(tau=3.0).fit(X, y)
    assert a.minority_ == "rare"
    np.testing.assert_allclose(a.decision_function(X), b.decision_function(X), atol=1e-6)
    # explicit minority on the first class flips which side gets the larger margin
    c = MarginRebalancedSVC(tau=3.0, minority=-1).fit(X, y)
    s = c.training_logits(X, y)
    assert s[y == -1].min() == pytest.approx(3.0 * c.margin_, rel=1e-4)


def test_deterministic():
    X, y, _ = _separable(seed=2)
    a = MarginRebalancedSVC(tau=2.0).fit(X, y).decision_function(X)
    b = MarginRebalancedSVC(tau=2.0).fit(X, y).decision_function(X)
    np.testing.assert_array_equal(a, b)


@parametrize_with_checks([MarginRebalancedSVC(C=1.0, tau=2.0)])
def test_sklearn_contract(estimator, check):
    check(estimator)


@pytest.mark.slow
@parametrize_with_checks([MarginRebalancedSVC()])
def test_sklearn_contract_hard_margin_default(estimator, check):
    check(estimator)


# ---------------------------------------------------------------- rejection
@pytest.mark.parametrize("kw, word", [({"tau": 0}, "tau"), ({"tau": np.inf}, "tau"), ({"C": -1.0}, "C"),
                                      ({"tol": 0}, "tol"), ({"max_iter": 0}, "max_iter"),
                                      ({"minority": 7}, "minority")])
def test_rejects_bad_parameters(kw, word):
    X, y, _ = _separable()
    with pytest.raises(ValueError, match=word):
        MarginRebalancedSVC(**kw).fit(X, y)


def test_rejects_multiclass():
    X = np.random.default_rng(0).standard_normal((30, 3))
    with pytest.raises(ValueError, match="Only binary classification"):
        MarginRebalancedSVC().fit(X, np.arange(30) % 3)


@pytest.mark.parametrize("args, word", [((0.0, 1.0, 1.0), "pi"), ((0.2, -1.0, 1.0), "mu_norm"),
                                        ((0.2, 1.0, 0.0), "delta"), ((0.2, 1.0, 1.0, -2.0), "tau")])
def test_theory_rejects_bad_input(args, word):
    with pytest.raises(ValueError, match=word):
        imbalance_asymptotics(*args)


def test_optimal_tau_rejects_non_separable():
    with pytest.raises(ValueError, match="not separable"):
        optimal_tau(0.5, 0.0, 3.0)


# ---------------------------------------------------------------- experiment
def test_smoke_experiment_runs():
    out = run("smoke", 0)
    for metric, arms in out["metrics"].items():
        for arm, v in arms.items():
            assert np.isfinite(v), (metric, arm)
    assert out["metrics"]["ks_minority"]["truncated"] < out["metrics"]["ks_minority"]["gaussian"]
