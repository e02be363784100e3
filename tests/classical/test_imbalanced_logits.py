"""Tests for iclr26.classical.imbalanced_logits (arXiv:2502.11323)."""
import numpy as np
import pytest
from scipy import integrate, optimize, stats
from sklearn.svm import SVC
from sklearn.utils.estimator_checks import parametrize_with_checks

import warnings

from iclr26.classical.imbalanced_logits import (MarginRebalancedSVC, NotSeparableWarning, imbalance_asymptotics,
                                                optimal_tau, sample_training_logits, truncated_logit_cdf)
from iclr26.classical.imbalanced_logits.experiment import (_pop_errors, ks_distance, on_margin, run, sample_gmm,
                                                           w1_distance)
from iclr26.classical.imbalanced_logits.theory import _dh, _h


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
    assert (r.pi, r.mu_norm, r.delta, r.tau) == (0.1, 2.0, 2.0, 1.0)
    lhs = pi * _h(r.kappa - r.rho * m - r.beta0) + (1 - pi) * _h(r.kappa - r.rho * m + r.beta0)
    assert lhs == pytest.approx((1 - r.rho ** 2) / delta, abs=1e-10)   # solved to SLSQP's ftol 1e-13
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


def test_h_derivative_is_dh():
    a = np.linspace(-3, 3, 13)
    eps = 1e-6
    np.testing.assert_allclose(_dh(a), (_h(a + eps) - _h(a - eps)) / (2 * eps), rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("pi, m, delta, tau", [(0.1, 2.0, 2.0, 1.0), (0.25, 1.5, 1.0, 1.0), (0.1, 2.0, 2.0, 3.0)])
def test_class_error_formulas_match_monte_carlo(pi, m, delta, tau):
    # independent reference: a unit-norm rule at angle rho to mu with intercept beta0, errors counted on draws
    r = imbalance_asymptotics(pi, m, delta, tau=tau)
    beta = np.array([r.rho, np.sqrt(1 - r.rho ** 2)])
    mu = np.array([m, 0.0])
    z = np.random.default_rng(0).standard_normal((400_000, 2))
    err_min = np.mean((mu + z) @ beta + r.beta0 < 0)      # y = +1 (minority) misclassified
    err_maj = np.mean((-mu + z) @ beta + r.beta0 > 0)     # y = -1 (majority) misclassified
    assert r.err_minority == pytest.approx(err_min, abs=0.003)
    assert r.err_majority == pytest.approx(err_maj, abs=0.003)
    assert r.err_balanced == pytest.approx((err_min + err_maj) / 2, abs=0.003)


def test_majority_error_sign_at_the_quick_setting():
    # beta0* < 0 moves the boundary towards the minority: the majority error is the small one
    r = imbalance_asymptotics(0.1, 2.0, 2.0)
    assert r.beta0 < 0
    assert r.err_majority == pytest.approx(stats.norm.cdf(-r.rho * 2.0 + r.beta0))
    assert r.err_majority < 0.02 < 0.25 < r.err_minority


def test_logit_laws_match_a_fitted_max_margin_classifier():
    # the atoms of both classes' training-logit laws against a hard-margin fit (d = 400, n = 800)
    r = imbalance_asymptotics(0.1, 2.0, 2.0)
    X, y, _ = sample_gmm(800, 400, 0.1, 2.0, np.random.default_rng(7))
    clf = MarginRebalancedSVC(minority=1).fit(X, y)
    atoms = on_margin(clf.training_logits(X, y), clf.margin_)
    t_min, m_min = r.minority_logit_law()
    t_maj, m_maj = r.majority_logit_law()
    assert (t_min, t_maj) == (pytest.approx(r.kappa), pytest.approx(r.kappa))
    assert m_min == pytest.approx(r.rho * 2.0 + r.beta0) and m_maj == pytest.approx(r.rho * 2.0 - r.beta0)
    assert atoms[y == 1].mean() == pytest.approx(stats.norm.cdf(t_min - m_min), abs=0.1)    # about 0.78
    assert atoms[y == -1].mean() == pytest.approx(stats.norm.cdf(t_maj - m_maj), abs=0.05)  # about 0.19
    assert clf.margin_ == pytest.approx(r.kappa, abs=0.15)
    rb = imbalance_asymptotics(0.1, 2.0, 2.0, tau=2.0)
    assert rb.minority_logit_law()[0] == pytest.approx(2.0 * rb.kappa)


def test_sampler_is_the_documented_draw():
    r = imbalance_asymptotics(0.1, 2.0, 2.0)
    trunc, mean = r.minority_logit_law()
    z = sample_training_logits(r, 50, cls=1, random_state=5)
    np.testing.assert_array_equal(z, np.maximum(trunc, mean + np.random.default_rng(5).standard_normal(50)))
    np.testing.assert_array_equal(z, sample_training_logits(r, 50, cls=1, random_state=5))


def test_majority_sampler_has_the_majority_atom():
    r = imbalance_asymptotics(0.1, 2.0, 2.0)
    trunc, mean = r.majority_logit_law()
    z = sample_training_logits(r, 20000, cls=-1, random_state=1)
    assert z.min() == pytest.approx(trunc)
    assert np.mean(z == trunc) == pytest.approx(stats.norm.cdf(trunc - mean), abs=0.01)
    with pytest.raises(ValueError, match="cls must be"):
        sample_training_logits(r, 10, cls=0)


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


def test_non_separable_data_say_so():
    # pure noise, n/d = 15: no separating hyperplane exists
    rng = np.random.default_rng(0)
    X = rng.standard_normal((300, 20))
    y = np.where(rng.random(300) < 0.3, 1, -1)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        clf = MarginRebalancedSVC(max_iter=20_000).fit(X, y)
    assert clf.separable_ is False or clf.separable_ == False  # noqa: E712
    assert np.isnan(clf.margin_)
    assert np.min(clf.training_logits(X, y)) < 0
    mine = [w for w in caught if issubclass(w.category, NotSeparableWarning)]
    assert len(mine) == 1 and not mine[0].filename.endswith("estimator.py")   # reported at the caller, not inside fit
    msg = str(mine[0].message)
    worst = np.min(clf.training_logits(X, y))                      # tau = 1: min_i y_i f(x_i)
    assert f"min_i y_i f(x_i)/tau_i = {worst:.3g} <= 0" in msg
    assert msg.endswith("the fit is the soft-margin SVM with this C, stopped at max_iter=20000")
    # libsvm's own "Solver terminated early" is folded into this warning, not repeated
    assert not [w for w in caught if "terminated early" in str(w.message)]
    # a soft margin that converges (overlapping classes with some signal): the same warning, without the cap
    X, y, _ = sample_gmm(300, 5, 0.3, 1.0, np.random.default_rng(3))
    with pytest.warns(NotSeparableWarning) as rec:
        soft = MarginRebalancedSVC(C=1.0, tau=2.0, minority=1).fit(X, y)
    assert soft.n_iter_ < soft.max_iter
    s = soft.training_logits(X, y) / np.where(y == 1, 2.0, 1.0)
    assert f"= {s.min():.3g} <= 0" in str(rec[0].message) and str(rec[0].message).endswith("with this C")
    # the default cap stops libsvm instead of letting a huge C run for minutes
    assert MarginRebalancedSVC().max_iter == 1_000_000


def test_separable_data_fit_silently():
    X, y, _ = _separable(seed=4)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        clf = MarginRebalancedSVC(tau=2.0).fit(X, y)
    assert clf.separable_ and clf.margin_ > 0
    s = clf.training_logits(X, y)
    assert np.min(s / np.where(y == clf.minority_, 2.0, 1.0)) == pytest.approx(clf.margin_, rel=1e-4)


def test_capped_solver_on_separable_data_warns():
    from sklearn.exceptions import ConvergenceWarning
    X, y, _ = _separable(n=60, d=200, seed=5)   # d >> n: separated after a few steps, max margin later
    with pytest.warns(ConvergenceWarning, match="max_iter=30") as rec:
        clf = MarginRebalancedSVC(max_iter=30).fit(X, y)     # the full fit needs about 260 iterations
    assert clf.separable_ and clf.n_iter_ == 30 and clf.margin_ > 0
    assert not rec[0].filename.endswith("estimator.py")
    assert str(rec[0].message) == ("libsvm stopped at max_iter=30 before converging: the hyperplane separates the "
                                   "training data but its margin may be below the maximum; raise max_iter")


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
@pytest.mark.parametrize("kw, message", [
    ({"tau": 0}, "tau must be a finite real number > 0"), ({"tau": np.inf}, "tau must be a finite"),
    ({"tau": np.nan}, "tau must be a finite"), ({"tau": True}, "tau must be"), ({"tau": "2"}, "tau must be"),
    ({"C": -1.0}, "C must be a finite real number > 0"), ({"C": 0.0}, "C must be"), ({"C": np.inf}, "C must be"),
    ({"C": True}, "C must be"), ({"C": "big"}, "C must be"),
    ({"tol": 0}, "tol must be a real number > 0"), ({"tol": -1e-3}, "tol must be"), ({"tol": True}, "tol must be"),
    ({"tol": "x"}, "tol must be"),
    ({"max_iter": 0}, r"max_iter must be a positive integer or -1 \(no limit\), got 0"), ({"max_iter": -2}, "max_iter"),
    ({"max_iter": 2.5}, "max_iter must be"), ({"max_iter": True}, "max_iter must be"),
    ({"minority": 7}, r"minority=7 is not one of the classes \[-1, 1\] \(or use 'auto'\)")])
def test_rejects_bad_parameters(kw, message):
    X, y, _ = _separable()
    with pytest.raises(ValueError, match=message):
        MarginRebalancedSVC(**kw).fit(X, y)


@pytest.mark.parametrize("max_iter", [1, -1])
def test_accepts_iteration_limits(max_iter):
    X, y, _ = _separable(seed=6)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        clf = MarginRebalancedSVC(max_iter=max_iter).fit(X, y)
    assert clf.n_iter_ >= 1
    if max_iter == -1:       # no cap: no spurious "stopped at max_iter" warning
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            MarginRebalancedSVC(max_iter=-1).fit(X, y)


def test_rejects_one_class_and_constant_X_with_clear_messages():
    X, y, _ = _separable()
    with pytest.raises(ValueError, match="y must have exactly 2 classes, got 1 class$"):
        MarginRebalancedSVC().fit(X, np.ones(len(y)))
    with pytest.raises(ValueError, match="degenerate \\(coef_ = 0\\): X carries no signal"):
        MarginRebalancedSVC().fit(np.zeros((20, 3)), np.r_[np.ones(8), -np.ones(12)])


def test_auto_minority_is_the_rarer_class():
    X, y, _ = _separable(seed=1)                      # +1 is rare: classes_ = [-1, 1]
    assert MarginRebalancedSVC(tau=2.0).fit(X, -y).minority_ == -1     # the rare class is classes_[0]
    assert MarginRebalancedSVC(tau=2.0).fit(X, y).minority_ == 1
    yb = np.r_[np.ones(20), -np.ones(20)]
    Xb = yb[:, None] * np.array([1.0, 0.0, 0.0]) + np.random.default_rng(0).normal(size=(40, 3))
    assert MarginRebalancedSVC().fit(Xb, yb).minority_ == 1             # a tie goes to classes_[1]


def test_soft_margin_matches_direct_solve():
    # min 1/2 ||w||^2 + C sum xi  s.t.  y_i (<w, x_i> + b) >= tau_i - xi_i, xi >= 0: the reduction fits an ordinary
    # SVM with C / c, c = (tau + 1) / 2 (module docstring); data that are not separable, so C matters
    rng = np.random.default_rng(2)
    n, d, tau, C = 40, 3, 3.0, 0.5
    y = np.where(np.arange(n) < 12, 1.0, -1.0)
    X = y[:, None] * np.array([0.8, 0.0, 0.0]) + rng.normal(size=(n, d))
    taus = np.where(y == 1, tau, 1.0)
    cons = [{"type": "ineq", "fun": lambda z: y * (X @ z[:d] + z[d]) - taus + z[d + 1:]},
            {"type": "ineq", "fun": lambda z: z[d + 1:]}]
    res = optimize.minimize(lambda z: 0.5 * z[:d] @ z[:d] + C * z[d + 1:].sum(), np.r_[np.zeros(d + 1), np.ones(n)],
                            constraints=cons, method="SLSQP", options={"ftol": 1e-12, "maxiter": 3000})
    assert res.success
    w, b = res.x[:d], res.x[d]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", NotSeparableWarning)
        clf = MarginRebalancedSVC(tau=tau, C=C, minority=1).fit(X, y)
    np.testing.assert_allclose(clf.decision_function(X), (X @ w + b) / np.linalg.norm(w), atol=2e-3)


def test_predict_on_the_boundary_is_the_first_class():
    X, y, _ = _separable(seed=2)
    clf = MarginRebalancedSVC().fit(X, y)
    clf.coef_, clf.intercept_ = np.zeros_like(clf.coef_), np.array([0.0])
    assert (clf.predict(X[:3]) == clf.classes_[0]).all()     # decision 0 is not > 0


def test_rejects_multiclass():
    X = np.random.default_rng(0).standard_normal((30, 3))
    with pytest.raises(ValueError, match="Only binary classification"):
        MarginRebalancedSVC().fit(X, np.arange(30) % 3)


@pytest.mark.parametrize("args, message", [
    ((0.0, 1.0, 1.0), r"^pi \(minority proportion\) must lie in \(0, 1\), got 0\.0$"),
    ((1.0, 1.0, 1.0), "pi .minority proportion. must lie"),
    ((0.2, -1.0, 1.0), r"^mu_norm must be >= 0, got -1\.0$"),
    ((0.2, 1.0, 0.0), r"^delta = n/d must be > 0, got 0\.0$"), ((0.2, 1.0, -1.0), "delta = n/d must be"),
    ((0.2, 1.0, 1.0, -2.0), r"^tau \(margin ratio\) must be > 0, got -2\.0$"), ((0.2, 1.0, 1.0, 0.0), "tau .margin ratio."),
    ((np.nan, 1.0, 1.0), r"^pi must be a finite real number, got nan$"), (("0.2", 1.0, 1.0), "pi must be a finite"),
    ((0.2, np.inf, 1.0), "mu_norm must be a finite"), ((0.2, 1.0, None), "delta must be a finite"),
    ((0.2, 1.0, 1.0, np.inf), "tau must be a finite")])
def test_theory_rejects_bad_input(args, message):
    with pytest.raises(ValueError, match=message):
        imbalance_asymptotics(*args)


def test_theory_accepts_boundaries():
    assert imbalance_asymptotics(0.3, 0.0, 1.0).rho == pytest.approx(0.0, abs=1e-6)    # no signal: mu_norm = 0
    assert optimal_tau(0.3, 0.0, 1.0) > 1


def test_solver_failure_is_reported(monkeypatch):
    from scipy import optimize as opt
    from iclr26.classical.imbalanced_logits import theory

    failed = opt.OptimizeResult(success=False, x=np.array([0.5, 0.0, 0.0]), fun=0.0)
    monkeypatch.setattr(theory.optimize, "minimize", lambda *a, **k: failed)
    with pytest.raises(RuntimeError, match=r"^the variational problem could not be solved \(SLSQP did not converge\)$"):
        imbalance_asymptotics(0.1, 2.0, 2.0)


def test_solver_accepts_a_stalled_line_search_only_at_a_kkt_point(monkeypatch):
    # SLSQP may end with status 8 (line search) on the optimum itself, e.g. at Cover's capacity point
    # under single-threaded BLAS; such a result is kept when it satisfies the KKT conditions ...
    from scipy import optimize as opt
    from iclr26.classical.imbalanced_logits import theory

    ref = imbalance_asymptotics(0.2, 1.0, 1.5)
    real = opt.minimize

    def stalled(*a, **k):
        res = real(*a, **k)
        res.success, res.status = False, 8
        return res

    monkeypatch.setattr(theory.optimize, "minimize", stalled)
    r = imbalance_asymptotics(0.2, 1.0, 1.5)
    assert r.kappa == pytest.approx(ref.kappa, abs=1e-9) and r.rho == pytest.approx(ref.rho, abs=1e-9)
    # ... and rejected at a feasible point that is not optimal (rho off its optimum)
    x = np.array([0.1, ref.kappa - ref.beta0, ref.kappa + ref.beta0]) * np.array([1.0, 0.5, 0.5])
    monkeypatch.setattr(theory.optimize, "minimize",
                        lambda *a, **k: opt.OptimizeResult(success=False, status=8, x=x, fun=-(x[1] + x[2])))
    with pytest.raises(RuntimeError, match="could not be solved"):
        imbalance_asymptotics(0.2, 1.0, 1.5)


def test_optimal_tau_rejects_non_separable():
    with pytest.raises(ValueError, match=r"^data are not separable at these \(pi, mu_norm, delta\): no max-margin "
                                         r"classifier$"):
        optimal_tau(0.5, 0.0, 3.0)
    # separable, but so imbalanced (pi = 0.01) that b* = kappa* + beta0* < 0: no tau > 0 centres the boundary
    r = imbalance_asymptotics(0.01, 2.0, 2.0)
    assert r.kappa > 0 and r.kappa + r.beta0 < 0
    with pytest.raises(ValueError, match=r"^no positive margin ratio reaches beta0\* = 0 at these parameters$"):
        optimal_tau(0.01, 2.0, 2.0)


def test_optimal_tau_near_capacity():
    # balanced classes just below Cover's capacity: a tiny but positive margin, tau* = 1
    assert 0 < imbalance_asymptotics(0.5, 0.0, 1.9).kappa < 0.1
    assert optimal_tau(0.5, 0.0, 1.9) == pytest.approx(1.0, abs=1e-6)
    # and the ratio is a*/b* of the tau-free solution: beta0* = 0 there
    t = optimal_tau(0.2, 1.0, 1.5)
    assert imbalance_asymptotics(0.2, 1.0, 1.5, tau=t).beta0 == pytest.approx(0.0, abs=1e-7)


# ---------------------------------------------------------------- experiment
def test_smoke_experiment_runs():
    out = run("smoke", 0)
    for metric, arms in out["metrics"].items():
        for arm, v in arms.items():
            assert np.isfinite(v), (metric, arm)
    m = out["metrics"]
    # the minority logits pile up on the margin far more than the majority's (the truncation)
    assert m["atom_share"]["minority"] > m["atom_share"]["majority"] + 0.2
    assert m["atom_minority"]["observed"] == m["atom_share"]["minority"]
    assert m["minority_error"]["rebalanced"] < m["minority_error"]["svm"]


def test_on_margin_tolerance():
    logits = np.array([2.0, 2.0 + 1e-7, 2.0 + 1e-5, 1.9999999])
    np.testing.assert_array_equal(on_margin(logits, 2.0), [True, True, False, True])
    # the tolerance is relative to the margin (at least 1e-6 absolute)
    np.testing.assert_array_equal(on_margin(np.array([0.0005, 0.0005 + 5e-7]), 0.0005), [True, True])


def test_w1_distance_reference():
    # W1 between the empirical law of {0, 1} and the uniform law on [0, 1]: int |F_n - t| = 1/4
    assert w1_distance(np.array([0.0, 1.0]), lambda t: np.clip(t, 0, 1), -1, 2) == pytest.approx(0.25, abs=1e-3)
    # two point masses a distance 0.7 apart
    assert w1_distance(np.array([0.3]), lambda t: (t >= 1.0).astype(float), -1, 2) == pytest.approx(0.7, abs=1e-3)


def test_ks_distance_sees_the_atom():
    # half the sample on the atom at 0, a law with its atom at 0.5: the KS distance is the jump 1/2
    law = lambda t: truncated_logit_cdf(t, 0.5, 0.0)  # noqa: E731
    sample = np.r_[np.zeros(50), np.linspace(1, 3, 50)]
    assert ks_distance(sample, law) >= 0.5 - 1e-9
    # a sample exactly on the law's atom and tail: small distance
    exact = np.maximum(0.5, np.random.default_rng(0).standard_normal(4000))
    assert ks_distance(exact, law) < 0.03


def test_population_errors_of_a_rule():
    # x = y mu + z: the minority (+1) error of f = <x, b> + b0 is Phi(-<b, mu> - b0), the majority's Phi(-<b, mu> + b0)
    mu = np.array([1.5, 0.0, 0.0])
    clf = MarginRebalancedSVC()
    clf.coef_, clf.intercept_ = np.array([[0.6, 0.8, 0.0]]), np.array([-0.4])
    e_min, e_maj = _pop_errors(clf, mu)
    assert e_min == pytest.approx(stats.norm.cdf(-0.9 + 0.4))
    assert e_maj == pytest.approx(stats.norm.cdf(-0.9 - 0.4))
    rng = np.random.default_rng(1)
    z = rng.standard_normal((200_000, 3))
    f = lambda x: x @ clf.coef_[0] + clf.intercept_[0]  # noqa: E731
    assert np.mean(f(mu + z) < 0) == pytest.approx(e_min, abs=0.004)
    assert np.mean(f(-mu + z) > 0) == pytest.approx(e_maj, abs=0.004)
