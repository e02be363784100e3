"""Tests of DEQL (arXiv:2603.07402): equations, reductions, contracts, rejections."""
import numpy as np
import pytest
import scipy.sparse as sp
from scipy.optimize import minimize

from iclr26.classical.deql import (
    DEQLRecommender,
    EASERecommender,
    EDLAERecommender,
    LinearAEPath,
    deql_closed_form,
    deql_closed_form_pair,
    deql_expected_loss,
    deql_naive,
    dlae_closed_form,
    ease_closed_form,
    edlae_closed_form,
    effective_ridge,
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
    assert est_s.recommend(sp.csr_matrix(X[1:3]), k=2).shape == (2, 2)


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
    from iclr26.classical.deql.experiment import ARMS, run

    out = run("smoke", 0)
    m = out["metrics"]
    assert set(m) == {"recall@20", "ndcg@100"}
    n = len(m["recall@20"]["deql"])
    assert n > 50 and all(len(v) == n for arms in m.values() for v in arms.values())
    assert all(0.0 <= x <= 1.0 for arms in m.values() for v in arms.values() for x in v)
    assert set(m["recall@20"]) == set(ARMS) == {"deql", "deql_novel", "dlae", "edlae", "ease"}
    sel = out["info"]["selected"]
    assert sel["edlae"]["b"] == 0.0 and sel["dlae"]["b"] == 1.0 and sel["ease"]["p"] == 0.0
    assert sel["deql_novel"]["b"] not in (0.0, 1.0) and sel["deql"]["b"] > 0
    # validation users are the training users (inner cross-validation), never the test users
    assert out["info"]["n_val_users"] == out["info"]["n_train_users"]


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


def test_quick_grid_holds_the_official_variants_and_one_ridge_grid_for_every_arm():
    from iclr26.classical.deql.experiment import SCALES, arm_grid

    q = SCALES["quick"]
    assert set(q["p_grid"]) == {0.1, 0.25, 0.5, 0.75}
    assert set(q["b_grid"]) >= {0.1, 0.25, 0.5, 0.75, 1.25, 1.5, 1.75, 2.0} and max(q["b_grid"]) > 2.0
    assert len(q["rho_grid"]) >= 18
    g = arm_grid(q)
    pr = {(p, r) for p, r, _ in g["edlae"]}
    for arm in ("deql", "deql_novel", "dlae"):  # every arm sees the same (p, effective ridge) points
        assert {(p, r) for p, r, _ in g[arm]} == pr
    assert {b for *_, b in g["edlae"]} == {0.0} and {b for *_, b in g["dlae"]} == {1.0}
    assert not ({b for *_, b in g["deql_novel"]} & {0.0, 1.0})
    assert sorted(g["deql"]) == sorted(g["deql_novel"] + g["dlae"])
    assert {r for _, r, _ in g["ease"]} == {r for _, r in pr}
    with pytest.raises(ValueError, match="b_grid must hold the new solutions only"):
        arm_grid({**q, "b_grid": (0.5, 1.0)})


@pytest.mark.slow
def test_quick_trial_runs():
    from iclr26.classical.deql.experiment import run

    out = run("quick", 1)
    assert out["info"]["n_items"] > 1000


# --------------------------------------------------------------------------- the shared-inverse family
@pytest.mark.parametrize("p", [0.0, 0.3, 0.75])
@pytest.mark.parametrize("b", [0.0, 0.3, 1.0, 2.5])
def test_path_members_equal_the_closed_forms(p, b):
    # One eigendecomposition per p serves every (ridge, b): each member equals its own closed form, with the
    # DEQL l2 mapped from the effective ridge by l2 = ridge * (p a^2 + q b^2).
    X = _data(n=10, seed=4)
    G = X.T @ X
    path = LinearAEPath(G, p)
    for ridge in (0.7, 6.0, 40.0):
        if b == 0.0:
            ref = ease_closed_form(G, ridge) if p == 0.0 else edlae_closed_form(G, p, ridge)
        else:
            ref = deql_closed_form(G, p, 1.0, b, ridge * (p + (1 - p) * b * b))
        np.testing.assert_allclose(path.coef(ridge, b), ref, atol=1e-10)
        np.testing.assert_allclose(path.scores(sp.csr_matrix(X[:5]), ridge, [b])[0], X[:5] @ ref, atol=1e-10)


def test_path_b_equals_a_is_dlae_and_ridge_mapping_hand_values():
    X = _data(n=10, seed=5)
    G = X.T @ X
    np.testing.assert_allclose(LinearAEPath(G, 0.4).coef(3.0, 1.0), dlae_closed_form(G, 0.4, 3.0), atol=1e-10)
    K = G + np.diag(0.4 / 0.6 * np.diag(G))
    np.testing.assert_allclose(dlae_closed_form(G, 0.4, 3.0), np.linalg.solve(K + 3.0 * np.eye(10), G), atol=1e-10)
    assert effective_ridge(0.25, 1.0, 0.0, 10.0) == pytest.approx(40.0)        # EDLAE: l2 / p
    assert effective_ridge(0.25, 1.0, 1.0, 10.0) == pytest.approx(10.0)        # DLAE: l2 / a^2
    assert effective_ridge(0.5, 1.0, 2.0, 10.0) == pytest.approx(10.0 / 2.5)   # p + q b^2 = 2.5


@pytest.mark.parametrize("p,b,l2", [(0.25, 0.5, 10.0), (0.5, 2.0, 3.0), (0.75, 1.0, 40.0), (0.1, 3.0, 7.0)])
def test_zero_diagonal_deql_is_edlae_with_the_effective_ridge(p, b, l2):
    # With diag(B) = 0 the weight of output j does not depend on whether input j was dropped, so the column
    # objective is (p a^2 + q b^2) times a b-free loss: the official diag0 variant is EDLAE with ridge l2 / w.
    X = _data(n=10, seed=6)
    G = X.T @ X
    diag0 = deql_closed_form(G, p, 1.0, b, l2, zero_diagonal=True)
    np.testing.assert_allclose(diag0, edlae_closed_form(G, p, l2 / (p + (1 - p) * b * b)), atol=1e-10)
    np.testing.assert_allclose(diag0, edlae_closed_form(G, p, effective_ridge(p, 1.0, b, l2)), atol=1e-10)


# --------------------------------------------------------------------------- ranking metrics, hand values
def _rank_case(n_items=120):
    return np.zeros((1, n_items)), sp.csr_matrix((1, n_items)), np.zeros((1, n_items))


def test_ndcg_discounts_rank_i_by_log2_of_i_plus_1():
    from iclr26.classical.deql.experiment import ranking_metrics_from_scores

    S, fi, te = _rank_case()
    S[0, :] = -np.arange(120)          # item i at rank i + 1
    te[0, 1] = 1.0                     # the single test item at rank 2
    r, n = ranking_metrics_from_scores(S, fi, sp.csr_matrix(te))
    assert n[0] == pytest.approx(1.0 / np.log2(3.0)) and r[0] == 1.0
    te[0, [0, 2, 4]] = 1.0; te[0, 1] = 0.0   # ranks 1, 3, 5 of 3 test items
    r, n = ranking_metrics_from_scores(S, fi, sp.csr_matrix(te))
    ideal = 1 + 1 / np.log2(3) + 1 / np.log2(4)
    assert n[0] == pytest.approx((1 + 1 / np.log2(4) + 1 / np.log2(6)) / ideal)
    te[0, :110] = 1.0                  # more test items than k = 100: the ideal DCG stops at 100 hits
    r, n = ranking_metrics_from_scores(S, fi, sp.csr_matrix(te))
    assert n[0] == pytest.approx(1.0) and r[0] == 1.0


def test_recall20_divides_by_min_of_20_and_test_size():
    from iclr26.classical.deql.experiment import ranking_metrics_from_scores

    S, fi, te = _rank_case()
    S[0, :] = -np.arange(120)
    te[0, :25] = 1.0                    # 25 test items, the top 20 all hits
    r, _ = ranking_metrics_from_scores(S, fi, sp.csr_matrix(te))
    assert r[0] == 1.0
    te[0, :] = 0.0; te[0, [3, 30]] = 1.0   # 2 test items, one in the top 20
    r, _ = ranking_metrics_from_scores(S, fi, sp.csr_matrix(te))
    assert r[0] == 0.5


def test_fold_in_items_are_excluded_from_the_ranking():
    from iclr26.classical.deql.experiment import ranking_metrics, ranking_metrics_from_scores

    S, _, te = _rank_case()
    S[0, :] = -np.arange(120)
    fi = sp.csr_matrix(([1.0], ([0], [0])), shape=(1, 120))   # the top-scored item is already seen
    te[0, 1] = 1.0
    r, n = ranking_metrics_from_scores(S, fi, sp.csr_matrix(te))
    assert n[0] == 1.0 and r[0] == 1.0
    # through an item x item model: item 0 (seen) scores item 1 highest, item 0 itself higher still
    B = np.zeros((120, 120)); B[0, 0] = 10.0; B[0, 1] = 5.0; B[0, 2:] = -np.arange(118) * 0.01
    _, n = ranking_metrics(B, fi, sp.csr_matrix(te))
    assert n[0] == 1.0


# --------------------------------------------------------------------------- rejections
def _indef(n):
    # symmetric with a non-negative diagonal, yet strongly indefinite: not a Gram matrix
    A = np.zeros((n, n)); A[0, 1] = A[1, 0] = 1e4
    return A


_BAD_G = [
    (lambda G: np.triu(G), "symmetric"),
    (lambda G: np.where(np.eye(len(G)) > 0, np.nan, G), "NaN"),
    (lambda G: -G, "positive semi-definite"),
    (lambda G: G + _indef(len(G)), "positive semi-definite"),
    (lambda G: np.zeros((0, 0)), "at least one item"),
]


@pytest.mark.parametrize("bad,match", _BAD_G)
def test_closed_forms_reject_bad_gram_matrices(bad, match):
    X = _data(n=8)
    G = bad(X.T @ X)
    for f in (lambda: deql_closed_form(G, 0.3, 1.0, 0.5, 1.0), lambda: edlae_closed_form(G, 0.3, 1.0),
              lambda: ease_closed_form(G, 1.0), lambda: dlae_closed_form(G, 0.3, 1.0),
              lambda: LinearAEPath(G, 0.3)):
        with pytest.raises(ValueError, match=match):
            f()


def test_expected_loss_rejects_bad_inputs():
    B = np.eye(2)
    with pytest.raises(ValueError, match="NaN"):
        deql_expected_loss(np.array([[np.nan, 1.0]]), B, 0.3, 1.0, 0.5, 1.0)
    for p in (1.0, 1.5, -0.1):
        with pytest.raises(ValueError, match="p must be"):
            deql_expected_loss(np.ones((2, 2)), B, p, 1.0, 0.5, 1.0)
    with pytest.raises(ValueError, match="B contains NaN"):
        deql_expected_loss(np.ones((2, 2)), np.full((2, 2), np.nan), 0.3, 1.0, 0.5, 1.0)


def test_recommend_never_returns_seen_items_for_a_user_who_has_seen_everything():
    X = _data(m=40, n=12, seed=3)   # user 0 has seen every item
    est = DEQLRecommender(p=0.3, b=0.5, l2=5.0).fit(X)
    with pytest.raises(ValueError, match="fewer than k = 3 unseen items"):
        est.recommend(np.array([0, 1]), k=3)
    assert est.recommend(np.array([0]), k=3, exclude_seen=False).shape == (1, 3)
    assert est.recommend(np.array([1]), k=3).shape == (1, 3)


def test_negative_interactions_are_accepted_as_least_squares_targets():
    # documented: the loss is least squares, so negative entries are legal input
    X = _data(seed=7)
    X[1, 0] = -1.0
    est = DEQLRecommender(p=0.3, b=0.5, l2=2.0).fit(X)
    np.testing.assert_allclose(est.coef_, deql_naive(X.T @ X, 0.3, 1.0, 0.5, 2.0), atol=1e-10)
