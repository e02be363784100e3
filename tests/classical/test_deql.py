"""Tests of DEQL (arXiv:2603.07402): equations, reductions, contracts, rejections."""
import numpy as np
import pytest
import scipy.sparse as sp
from scipy.optimize import minimize

from iclr26.classical.deql import (
    DEQLRecommender,
    EASERecommender,
    EDLAERecommender,
    deql_closed_form,
    deql_closed_form_pair,
    deql_expected_loss,
    deql_naive,
    ease_closed_form,
    edlae_closed_form,
)


def _data(m=30, n=8, density=0.35, seed=0):
    rng = np.random.default_rng(seed)
    X = (rng.random((m, n)) < density).astype(float)
    X[0, :] = 1.0  # every item observed at least once
    return X


@pytest.mark.parametrize("b", [0.0, 0.3, 1.0, 2.0])
@pytest.mark.parametrize("zero_diagonal", [False, True])
def test_rank2_update_equals_naive_per_column_solve(b, zero_diagonal):
    # The O(n^3) rank-2 (Miller/Woodbury) algorithm equals solving each column's normal equations.
    X = _data()
    G = X.T @ X
    B1 = deql_closed_form(G, 0.3, 1.0, b, 2.0, zero_diagonal)
    B2 = deql_naive(G, 0.3, 1.0, b, 2.0, zero_diagonal)
    np.testing.assert_allclose(B1, B2, atol=1e-10)


@pytest.mark.parametrize("p,a,b,l2", [(0.3, 1.0, 0.5, 1.0), (0.5, 1.0, 2.0, 0.5), (0.2, 0.7, 0.0, 1.0)])
def test_closed_form_minimises_enumerated_expected_loss(p, a, b, l2):
    # Equation test: the closed form is the minimiser of the expected loss E_mask ||W (X - X~ B)||^2
    # + l2 ||B||^2, computed independently by enumerating all 2^n masks and minimised numerically.
    X = _data(m=6, n=4, density=0.5, seed=1)
    n = X.shape[1]
    B = deql_closed_form(X.T @ X, p, a, b, l2)
    f = lambda v: deql_expected_loss(X, v.reshape(n, n), p, a, b, l2)
    res = minimize(f, np.zeros(n * n), method="BFGS", options={"gtol": 1e-10})
    np.testing.assert_allclose(res.x.reshape(n, n), B, atol=1e-5)
    assert f(B.ravel()) <= res.fun + 1e-9


def test_expected_loss_matches_monte_carlo_dropout():
    # The enumerated expected loss equals the average over sampled dropout masks (inverted scaling).
    X = _data(m=5, n=4, density=0.5, seed=2)
    rng = np.random.default_rng(0)
    B = rng.normal(size=(4, 4))
    p, a, b = 0.4, 1.0, 0.5
    exact = deql_expected_loss(X, B, p, a, b, 0.0)
    M = rng.random((200_000, 4)) >= p
    tot = 0.0
    for x in X:
        R = x[None, :] - (M * x[None, :] / (1 - p)) @ B
        W = np.where(M, b * b, a * a)
        tot += np.mean(np.sum(W * R * R, axis=1))
    assert abs(tot - exact) / exact < 0.01


def test_b0_reduces_to_edlae_closed_form():
    # Reduction: b = 0 is Steck's EDLAE with Lambda = p/(1-p) Diag(G) + l2/(p a^2) I.
    X = _data(n=10)
    G = X.T @ X
    for p, a, l2 in [(0.3, 1.0, 2.0), (0.5, 2.0, 10.0)]:
        np.testing.assert_allclose(deql_closed_form(G, p, a, 0.0, l2), edlae_closed_form(G, p, l2 / (p * a * a)),
                                   atol=1e-10)


def test_b_equals_a_reduces_to_dropout_denoising():
    # Reduction: b = a removes the emphasis: B = (G + p/q Diag(G) + l2/a^2 I)^{-1} G.
    X = _data(n=10)
    G = X.T @ X
    p, a, l2 = 0.25, 1.5, 3.0
    K = G + np.diag(p / (1 - p) * np.diag(G))
    np.testing.assert_allclose(deql_closed_form(G, p, a, a, l2), np.linalg.solve(K + l2 / a**2 * np.eye(10), G),
                               atol=1e-10)


def test_edlae_with_p0_is_ease():
    X = _data(n=10)
    G = X.T @ X
    np.testing.assert_allclose(edlae_closed_form(G, 0.0, 5.0), ease_closed_form(G, 5.0), atol=1e-12)


def test_ease_reference_values_by_constrained_least_squares():
    # Independent reference: EASE column j solves ridge regression of X_j on the other items.
    X = _data(n=6)
    B = ease_closed_form(X.T @ X, 2.0)
    for j in range(6):
        o = [k for k in range(6) if k != j]
        ref = np.linalg.solve(X[:, o].T @ X[:, o] + 2.0 * np.eye(5), X[:, o].T @ X[:, j])
        np.testing.assert_allclose(B[o, j], ref, atol=1e-10)
        assert B[j, j] == 0.0


def test_zero_diagonal_constraint_holds_and_b0_has_zero_diagonal():
    X = _data(n=10)
    G = X.T @ X
    assert np.allclose(np.diag(deql_closed_form(G, 0.3, 1.0, 0.7, 2.0, zero_diagonal=True)), 0.0)
    assert np.allclose(np.diag(deql_closed_form(G, 0.3, 1.0, 0.0, 2.0)), 0.0, atol=1e-12)
    assert not np.allclose(np.diag(deql_closed_form(G, 0.3, 1.0, 0.7, 2.0)), 0.0)


def test_estimator_fit_recommend_sparse_and_dense_agree():
    X = _data(m=40, n=12, seed=3)
    est_s = DEQLRecommender(p=0.3, b=0.5, l2=5.0).fit(sp.csr_matrix(X))
    est_d = DEQLRecommender(p=0.3, b=0.5, l2=5.0).fit(X)
    np.testing.assert_allclose(est_s.coef_, est_d.coef_)
    users = np.arange(1, 6)  # user 0 has seen every item
    rec = est_s.recommend(users, k=3)
    assert rec.shape == (5, 3)
    for i, u in enumerate(users):
        assert not np.any(X[u, rec[i]] > 0), "seen items must be excluded"
        s = est_s.predict_scores(X[u:u + 1])[0]
        s[X[u] > 0] = -np.inf
        assert list(rec[i]) == list(np.argsort(-s, kind="stable")[:3])
    # new users given as a history matrix
    assert est_s.recommend(sp.csr_matrix(X[:2]), k=2).shape == (2, 2)


def test_estimators_follow_sklearn_conventions():
    from sklearn.base import clone

    for est in (DEQLRecommender(p=0.2, b=0.3), EDLAERecommender(p=0.2), EASERecommender(l2=3.0)):
        params = est.get_params()
        c = clone(est)
        assert c.get_params() == params
        assert not hasattr(c, "coef_")
        c.fit(_data())
        assert c.coef_.shape == (8, 8)
        assert c.get_params() == params


def test_deterministic():
    X = _data()
    a = DEQLRecommender().fit(X).coef_
    b = DEQLRecommender().fit(X).coef_
    assert np.array_equal(a, b)


@pytest.mark.parametrize(
    "kwargs,match",
    [
        (dict(p=1.0), "p must be < 1"),
        (dict(p=-0.1), "p must be >= 0"),
        (dict(b=-1.0), "b must be >= 0"),
        (dict(a=float("nan")), "a must be a finite real"),
        (dict(l2=0.0), "l2 must be > 0"),
        (dict(a=0.0, b=0.0), "a and b cannot both be 0"),
        (dict(p=0.0, b=0.0), "b must be > 0"),
        (dict(zero_diagonal="yes"), "zero_diagonal must be True or False"),
    ],
)
def test_rejects_bad_parameters(kwargs, match):
    with pytest.raises(ValueError, match=match):
        DEQLRecommender(**kwargs).fit(_data())


def test_rejects_bad_inputs():
    with pytest.raises(ValueError, match="2-D"):
        DEQLRecommender().fit(np.ones(5))
    with pytest.raises(ValueError, match="NaN"):
        DEQLRecommender().fit(np.array([[1.0, np.nan], [0.0, 1.0]]))
    est = DEQLRecommender()
    with pytest.raises(ValueError, match="not fitted"):
        est.recommend(np.arange(2), k=1)
    est.fit(_data())
    with pytest.raises(ValueError, match="k must be a positive integer"):
        est.recommend(np.arange(2), k=0)
    with pytest.raises(ValueError, match="user indices must lie"):
        est.recommend(np.array([100]), k=1)
    with pytest.raises(ValueError, match="item columns"):
        est.recommend(np.ones((2, 3)), k=1)


def test_smoke_experiment_runs():
    from iclr26.classical.deql.experiment import run

    out = run("smoke", 0)
    m = out["metrics"]
    assert set(m) == {"recall@20", "ndcg@100"}
    n = len(m["recall@20"]["deql"])
    assert n > 50 and all(len(v) == n for arms in m.values() for v in arms.values())
    assert all(0.0 <= x <= 1.0 for arms in m.values() for v in arms.values() for x in v)
    assert set(m["recall@20"]) == {"deql", "deql_diag0", "edlae", "ease"}
    assert out["info"]["deql_diag0_selected"]["b"] > 0


@pytest.mark.parametrize("b", [0.3, 1.5])
def test_pair_gives_both_variants_from_one_factorisation(b):
    X = _data(seed=2)
    G = X.T @ X
    free, diag0 = deql_closed_form_pair(G, 0.4, 1.0, b, 3.0)
    np.testing.assert_allclose(free, deql_naive(G, 0.4, 1.0, b, 3.0, False), atol=1e-10)
    np.testing.assert_allclose(diag0, deql_naive(G, 0.4, 1.0, b, 3.0, True), atol=1e-10)
    assert np.all(np.diag(diag0) == 0.0) and np.any(np.abs(np.diag(free)) > 1e-3)


def test_closed_form_rejects_a_non_boolean_zero_diagonal():
    G = _data().T @ _data()
    with pytest.raises(ValueError, match="^zero_diagonal must be True or False, got 'no'$"):
        deql_closed_form(G, 0.3, 1.0, 0.5, 1.0, zero_diagonal="no")


def test_quick_grid_holds_the_official_variants():
    from iclr26.classical.deql.experiment import SCALES

    q = SCALES["quick"]
    # the official config's p values (0.75 included) and an l2 grid wider than what the first run chose
    assert set(q["p_grid"]) == {0.1, 0.25, 0.5, 0.75}
    assert min(q["l2_grid"]) < 10.0 and max(q["l2_grid"]) > 640.0
    assert all(b > 0 for b in q["b_grid"])


@pytest.mark.slow
def test_quick_trial_runs():
    from iclr26.classical.deql.experiment import run

    out = run("quick", 1)
    assert out["info"]["n_items"] > 1000
