"""Tests for iclr26.classical.hybrid_online_learning (arXiv:2603.04546)."""
import itertools

import numpy as np
import pytest
from scipy.optimize import minimize
from scipy.special import xlogy

from iclr26.classical.hybrid_online_learning import (CoverExponentialWeights, ExactThresholdFTRL, FiniteClassERM,
                                                     FollowTheLeader, HybridOnlineLearner, SampleLedger, Threshold,
                                                     threshold_erm, truncated_entropy, truncated_entropy_argmin,
                                                     truncated_entropy_grad)
from iclr26.classical.hybrid_online_learning.baselines import cut_thresholds
from iclr26.classical.hybrid_online_learning.experiment import best_response, loglog_slope, play, run
from iclr26.classical.hybrid_online_learning.oracles import as_features, predict_many


# ----------------------------------------------------------------------------- helpers
class Halfspace:
    """2-D halfspace ``1[w . x >= b]`` (a non-threshold class for the generic code paths)."""

    def __init__(self, w, b):
        self.w, self.b = np.asarray(w, float), float(b)

    def predict(self, X):
        return (np.asarray(X, float) @ self.w >= self.b).astype(int)


def halfspaces(rng, k):
    ang = rng.uniform(0, 2 * np.pi, k)
    return [Halfspace([np.cos(a), np.sin(a)], b) for a, b in zip(ang, rng.uniform(-0.5, 0.5, k))]


def neg_entropy(u):
    return xlogy(u, u) + xlogy(1 - u, 1 - u)


def objective_ref(mu, n1, t, eta, gamma):
    """F_t written from the definition: eta * sum_s mean_j loss + mean_j phi_g(mu_j)."""
    m = mu.size
    loss = np.sum(mu * (t - n1) + (1 - mu) * n1) / m
    return eta * loss + np.sum(truncated_entropy(mu, gamma)) / m


def objective_many(L, M):
    """F_t at every row of M, vectorised (the same formula as objective_ref)."""
    return np.array([objective_ref(mu, L.ledger.n1, L.ledger.rounds, L.eta, L.gamma) for mu in M]) if len(M) < 50 else \
        (L.eta * (M * (L.ledger.rounds - L.ledger.n1) + (1 - M) * L.ledger.n1).sum(1)
         + truncated_entropy(M, L.gamma).sum(1)) / M.shape[1]


def adaptive_game(learner, T, seed, lo=0.3, hi=0.7):
    """Feed ``learner`` T rounds of x ~ U[0,1] with labels from a best-responding threshold adversary."""
    rng = np.random.default_rng(seed)
    for x in rng.random(T):
        th = np.array([h.theta for _, h in learner.mixture()])
        w = np.array([p for p, _ in learner.mixture()])
        r = Threshold(lo if w @ np.abs(np.clip(th, 0, 1) - lo) >= w @ np.abs(np.clip(th, 0, 1) - hi) else hi)
        learner.update(x, r)
    return learner


# ----------------------------------------------------------------------------- regulariser
G = 0.05


def test_truncated_entropy_is_the_entropy_inside():
    u = np.linspace(G, 1 - G, 41)
    np.testing.assert_allclose(truncated_entropy(u, G), neg_entropy(u), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(truncated_entropy_grad(u, G), np.log(u / (1 - u)), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(truncated_entropy(list(u), G), neg_entropy(u), rtol=1e-12, atol=1e-12)


def test_truncated_entropy_is_tangent_outside():
    slope = np.log(G / (1 - G))
    u = np.array([0.0, 0.01, 0.03])
    np.testing.assert_allclose(truncated_entropy(u, G), neg_entropy(G) + slope * (u - G), rtol=1e-12)
    np.testing.assert_allclose(truncated_entropy(1 - u, G), neg_entropy(G) - slope * (1 - u - (1 - G)), rtol=1e-12)
    assert truncated_entropy(np.array([0.0, 1.0]), G) == pytest.approx([np.log(1 - G)] * 2, rel=1e-12)
    np.testing.assert_allclose(truncated_entropy_grad(u, G), slope)
    np.testing.assert_allclose(truncated_entropy_grad(1 - u, G), -slope)


def test_truncated_entropy_gradient_matches_finite_differences():
    u = np.r_[np.linspace(0.001, 0.999, 57)]
    u = u[np.abs(u - G) > 1e-3]
    u = u[np.abs(u - 1 + G) > 1e-3]
    eps = 1e-7
    fd = (truncated_entropy(u + eps, G) - truncated_entropy(u - eps, G)) / (2 * eps)
    np.testing.assert_allclose(truncated_entropy_grad(u, G), fd, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("v", [-9.0, -4.0, -2.9, -1.0, 0.0, 0.4, 2.5, 2.9, 3.5, 12.0])
def test_truncated_entropy_argmin_minimises(v):
    grid = np.linspace(0, 1, 200_001)
    ref = grid[np.argmin(truncated_entropy(grid, G) - v * grid)]
    assert truncated_entropy_argmin(np.array([v]), G)[0] == pytest.approx(ref, abs=2e-5)


def test_truncated_entropy_argmin_closed_form():
    top = np.log((1 - G) / G)
    v = np.array([-top - 1, -top + 1e-9, -0.7, 0.0, 1.3, top - 1e-9, top + 1])
    out = truncated_entropy_argmin(list(v), G)
    np.testing.assert_allclose(out[1:-1], 1 / (1 + np.exp(-v[1:-1])), rtol=1e-9)
    assert out[0] == 0.0 and out[-1] == 1.0
    assert truncated_entropy_argmin(np.array([-800.0, 800.0]), G).tolist() == [0.0, 1.0]


@pytest.mark.parametrize("gamma", [0.0, 0.5, -0.1, np.nan, 0.7])
def test_truncated_entropy_rejects_bad_gamma(gamma):
    for f in (truncated_entropy, truncated_entropy_grad, truncated_entropy_argmin):
        with pytest.raises(ValueError, match=r"gamma .* must lie in \(0, 0.5\)"):
            f(np.array([0.3]), gamma)


# ----------------------------------------------------------------------------- oracles
def brute_threshold_error(X, y, w, signs):
    cand = np.r_[X - 1e-9, X + 1e-9, X]
    return min(np.sum(w * (Threshold(c, s).predict(X) != y)) for c, s in itertools.product(cand, signs))


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
@pytest.mark.parametrize("signs", [(1,), (-1,), (1, -1)])
def test_threshold_erm_matches_brute_force(seed, signs):
    rng = np.random.default_rng(seed)
    X = np.round(rng.random(30), 1)          # repeated values: a threshold cannot split them
    y = (rng.random(30) < 0.3 + 0.4 * X).astype(int)
    w = rng.random(30)
    h = threshold_erm(X, y, w, signs=signs)
    assert h.sign in signs
    assert np.sum(w * (h.predict(X) != y)) == pytest.approx(brute_threshold_error(X, y, w, signs), abs=1e-12)


def test_threshold_erm_placement_and_ties():
    X = np.array([0.1, 0.2, 0.3, 0.4])
    assert threshold_erm(X, [0, 0, 1, 1]).theta == pytest.approx(0.25)
    assert threshold_erm(X, [1, 1, 1, 1]).theta == pytest.approx(0.1)          # all ones: x_min itself
    h0 = threshold_erm(X, [0, 0, 0, 0])
    assert h0.theta > 0.4 and h0.predict(X).sum() == 0                          # none: just above x_max
    hm = threshold_erm(X, [1, 1, 0, 0], signs=(-1,))
    assert hm.theta == pytest.approx(0.25) and list(hm.predict(X)) == [1, 1, 0, 0]
    assert list(threshold_erm(X, [0, 0, 0, 0], signs=(-1,)).predict(X)) == [0, 0, 0, 0]
    assert list(threshold_erm(X, [1, 1, 1, 1], signs=(-1,)).predict(X)) == [1, 1, 1, 1]
    # a weight-0 point does not count; an unweighted call counts every point once
    assert list(threshold_erm(X, [0, 1, 0, 1], [1, 0, 0, 1]).predict(X)) == [0, 1, 1, 1]   # zero-error tie: first cut
    assert np.sum(threshold_erm(X, [0, 1, 0, 1]).predict(X) != [0, 1, 0, 1]) == 1
    # exact ties go to the first sign, then to the smallest cut
    assert threshold_erm(X, [0, 1, 1, 0], signs=(1, -1)).sign == 1
    assert threshold_erm(X, [0, 1, 1, 0], signs=(-1, 1)).sign == -1
    assert threshold_erm(X, [1, 0, 1, 0]).theta == pytest.approx(0.1)
    # the sign is chosen on the total error: here +1 is perfect and -1 cannot be
    Xs, ys, ws = np.array([0.1, 0.2, 0.3]), np.array([0, 1, 1]), np.array([1.0, 1.0, 5.0])
    hs = threshold_erm(Xs, ys, ws, signs=(-1, 1))
    assert hs.sign == 1 and np.sum(ws * (hs.predict(Xs) != ys)) == 0
    e = threshold_erm(np.zeros(0), np.zeros(0))
    assert (e.theta, e.sign) == (0.0, 1)
    assert threshold_erm(np.zeros(0), np.zeros(0), signs=(-1,)).sign == -1


def test_threshold_predicts_both_signs_and_compares():
    h, g = Threshold(0.5), Threshold(0.5, -1)
    X = np.array([0.2, 0.5, 0.8])
    assert list(h.predict(X)) == [0, 1, 1] and list(g.predict(X)) == [1, 1, 0]
    assert list(h.predict(X[:, None])) == [0, 1, 1] and h.predict(X).dtype.kind == "i"
    assert h == Threshold(0.5) and h != g and h != 0.5 and len({h, Threshold(0.5), g}) == 2
    assert hash(h) == hash(h.key())
    assert h.key() == (0.5, 1) and "0.5" in repr(g)


def test_predict_many_matches_one_by_one():
    rng = np.random.default_rng(4)
    X = as_features(np.r_[rng.random(12), 0.5])
    hs = [Threshold(t, s) for t, s in zip(np.r_[rng.random(3), 0.5, 0.5], [1, -1, 1, -1, 1])]   # x = theta included
    loop = np.array([h.predict(X) for h in hs])
    np.testing.assert_array_equal(predict_many(hs, X), loop)
    assert predict_many(hs, X).dtype.kind == "i" and predict_many(hs + [lambda Z: Z[:, 0] > 2], X).dtype.kind == "i"
    assert predict_many(hs, X)[-1, -1] == 1 and predict_many(hs, X)[-2, -1] == 1
    with pytest.raises(ValueError, match="^hypothesis outputs must be 0 or 1"):
        predict_many([lambda Z: Z[:, 0]], X)
    gen = hs + [lambda Z: (Z[:, 0] > 0.5).astype(int)]
    np.testing.assert_array_equal(predict_many(gen, X), np.vstack([loop, (X[:, 0] > 0.5).astype(int)]))
    assert predict_many([], X).shape == (0, 13)


def test_finite_class_erm_is_brute_force():
    rng = np.random.default_rng(5)
    hs = halfspaces(rng, 9)
    X = rng.normal(size=(40, 2))
    y = (X[:, 0] + 0.3 * rng.normal(size=40) > 0).astype(int)
    w = rng.random(40)
    errs = [np.sum(w * (h.predict(X) != y)) for h in hs]
    assert FiniteClassERM(hs)(X, y, w) is hs[int(np.argmin(errs))]
    errs1 = [np.sum(h.predict(X) != y) for h in hs]
    assert FiniteClassERM(hs)(X, y) is hs[int(np.argmin(errs1))]


@pytest.mark.parametrize("args, kw, err, word", [
    ((np.array([0.1, np.nan]), [0, 1]), {}, ValueError, "^X contains NaN or infinite features"),
    ((np.array([0.1, 0.2]), [0, 2]), {}, ValueError, "^y must be 0 or 1, got 2$"),
    ((np.array([0.1, 0.2]), [-1, 1]), {}, ValueError, "0 or 1, got -1"),
    ((np.array([0.1, 0.2]), [0.5, 1]), {}, ValueError, "0 or 1"),
    ((np.array([0.1, 0.2]), [0]), {}, ValueError, "^X and y must have the same length, got 2 and 1$"),
    ((np.array([0.1, 0.2]), [0, 1], [1.0, -1.0]), {}, ValueError, "^sample_weight must be finite and non-negative$"),
    ((np.array([0.1, 0.2]), [0, 1], [1.0, np.inf]), {}, ValueError, "finite"),
    ((np.array([0.1, 0.2]), [0, 1], [1.0]), {}, ValueError, "one weight per point"),
    ((np.zeros((3, 2)), [0, 1, 0]), {}, ValueError, "one feature"),
    ((np.zeros((2, 2, 2)), [0, 1]), {}, ValueError, "1-D .* or 2-D"),
    ((np.array([0.1, 0.2]), [0, 1]), {"signs": (0,)}, ValueError, "signs"),
    ((np.array([0.1, 0.2]), [0, 1]), {"signs": ()}, ValueError, "signs"),
])
def test_threshold_erm_rejects_bad_input(args, kw, err, word):
    with pytest.raises(err, match=word):
        threshold_erm(*args, **kw)


def test_hypotheses_and_finite_class_reject_bad_input():
    with pytest.raises(ValueError, match="sign must be"):
        Threshold(0.5, 0)
    with pytest.raises(ValueError, match="theta must be finite"):
        Threshold(np.nan)
    with pytest.raises(ValueError, match="one feature"):
        Threshold(0.5).predict(np.zeros((2, 3)))
    with pytest.raises(ValueError, match="^FiniteClassERM needs at least one hypothesis$"):
        FiniteClassERM([])
    with pytest.raises(TypeError, match="predict"):
        FiniteClassERM([3])
    with pytest.raises(ValueError, match="labels for 3 points"):
        FiniteClassERM([lambda X: np.zeros(2, int)])(np.zeros((3, 1)), [0, 0, 0])
    assert list(as_features(0.5).shape) == [1, 1]
    h = lambda X: X[:, 0] > 0   # noqa: E731
    assert FiniteClassERM([h])(np.ones((2, 1)), np.array([True, True])) is h


# ----------------------------------------------------------------------------- sample ledger
def direct_counts(Z, rs):
    return np.sum([(r.predict(Z) if hasattr(r, "predict") else r(Z)) for r in rs], axis=0)


@pytest.mark.parametrize("fixed", [False, True])
def test_ledger_counts_and_estimated_loss(fixed):
    rng = np.random.default_rng(6)
    Zfix = rng.random(15)
    ledger = SampleLedger(Zfix if fixed else None)
    pool = [Threshold(0.3), Threshold(0.6), lambda X: (X[:, 0] < 0.5).astype(int),
            lambda X: ((X[:, 0] > 0.2) & (X[:, 0] < 0.7)).astype(int)]          # two functions without key()
    rs, xs = [], rng.random(12)
    for x, i in zip(xs, [0, 2, 3, 1, 2, 3, 0, 1, 3, 2, 0, 1]):
        r = pool[i]
        r = Threshold(r.theta) if isinstance(r, Threshold) and rng.random() < 0.5 else r   # equal keys, new objects
        assert ledger.observe(x, r) == int((r.predict([x]) if hasattr(r, "predict") else r(np.array([[x]])))[0])
        rs.append(r)
    Z = as_features(Zfix if fixed else xs)
    np.testing.assert_array_equal(ledger.Z, Z)
    n1 = direct_counts(Z, rs)
    np.testing.assert_array_equal(ledger.n1, n1)
    assert ledger.rounds == 12 and ledger.m == Z.shape[0]
    np.testing.assert_array_equal(ledger.advantage, 12 - 2 * n1)
    V = np.array([Threshold(t).predict(Z) for t in (0.0, 0.45, 0.9)] + [np.full(Z.shape[0], 0.3)])
    ref = [np.mean([np.mean(np.abs(v - (r.predict(Z) if hasattr(r, "predict") else r(Z)))) for r in rs]) * 12
           for v in V]
    np.testing.assert_allclose(ledger.estimated_loss(V), ref, rtol=1e-12)
    empty = SampleLedger().estimated_loss(V)
    assert empty.shape == (4,) and not empty.any()
    assert SampleLedger().estimated_loss(np.zeros(3)) == 0.0 and np.ndim(SampleLedger().estimated_loss(np.zeros(3))) == 0


def test_ledger_rejects_bad_rounds():
    led = SampleLedger()
    with pytest.raises(ValueError, match="^x contains NaN or infinite features; only finite features are allowed"):
        led.observe(np.nan, Threshold(0.5))
    with pytest.raises(ValueError, match="0 or 1, got 2"):
        led.observe(0.3, lambda X: np.full(X.shape[0], 2))
    with pytest.raises(TypeError, match="label function r"):
        led.observe(0.3, "r")
    with pytest.raises(ValueError, match="one point with 1 feature"):
        led.observe([0.1, 0.2], Threshold(0.5))
    with pytest.raises(ValueError, match="^feature_samples must hold at least one sample$"):
        SampleLedger(np.zeros((0, 1)))
    with pytest.raises(ValueError, match="^feature_samples contains NaN or infinite features"):
        SampleLedger(np.array([0.1, np.inf]))
    with pytest.raises(ValueError, match="n_features"):
        SampleLedger(n_features=0)
    led.observe(0.3, Threshold(0.5))
    with pytest.raises(ValueError, match="^the label function r outputs must be 0 or 1, got 3"):   # every sample
        led.observe(0.9, lambda X: np.where(X[:, 0] > 0.5, 1, 3))
    led2 = SampleLedger()
    led2.observe(0.3, lambda X: np.where(X[:, 0] > 0.5, 3, 0))      # valid where it was used
    with pytest.raises(ValueError, match="^the label function r outputs must be 0 or 1, got 3"):
        led2.observe(0.9, Threshold(0.5))                             # an earlier r is asked at the new x


# ----------------------------------------------------------------------------- learner: equations
def test_default_parameters_follow_the_ftrl_bound():
    L = HybridOnlineLearner(threshold_erm, horizon=200)
    assert L.eta == pytest.approx(np.sqrt(8 * np.log(2) / 200))
    assert L.gamma == pytest.approx(1 / 200) and L.fw_tol == pytest.approx(1 / 200)
    assert L.max_fw_steps == 25 and L.horizon == 200 and np.isnan(L.fw_gap_) and L.oracle_calls_ == 1
    one = HybridOnlineLearner(threshold_erm, horizon=1)
    assert one.eta == pytest.approx(np.sqrt(8 * np.log(2))) and one.gamma == 0.25
    assert HybridOnlineLearner(threshold_erm, horizon=2).gamma == 0.25
    E = ExactThresholdFTRL(horizon=200)
    assert (E.eta, E.gamma) == (L.eta, L.gamma)
    assert ExactThresholdFTRL(horizon=2).gamma == 0.25
    assert CoverExponentialWeights(horizon=200).eta == pytest.approx(np.sqrt(8 * np.log(201) / 200))
    assert CoverExponentialWeights(200, feature_samples=np.linspace(0, 1, 9)).eta == pytest.approx(
        np.sqrt(8 * np.log(10) / 200))


def test_objective_matches_its_definition():
    rng = np.random.default_rng(7)
    L = adaptive_game(HybridOnlineLearner(threshold_erm, horizon=60, gamma=0.03), 25, 1)
    mu = rng.random(L.ledger.m)
    ref = objective_ref(mu, L.ledger.n1, L.ledger.rounds, L.eta, 0.03)
    assert L.objective(mu) == pytest.approx(ref, rel=1e-12)
    assert L.objective() == pytest.approx(objective_ref(L.marginals_, L.ledger.n1, 25, L.eta, 0.03), rel=1e-12)
    assert HybridOnlineLearner(threshold_erm, horizon=5).objective() == 0.0


def test_gradient_matches_finite_differences_of_the_objective():
    L = adaptive_game(HybridOnlineLearner(threshold_erm, horizon=60, gamma=0.04), 15, 12)
    mu = np.random.default_rng(12).uniform(0.1, 0.9, L.ledger.m)
    eps = 1e-6
    fd = np.array([(L.objective(mu + eps * e) - L.objective(mu - eps * e)) / (2 * eps) for e in np.eye(L.ledger.m)])
    np.testing.assert_allclose(L._gradient(mu), fd, rtol=1e-6, atol=1e-9)


@pytest.mark.parametrize("seed, gamma, eta", [(0, 0.02, 0.3), (1, 0.2, 0.3), (2, 0.01, 2.0)])
def test_frank_wolfe_reaches_the_exact_ftrl_solution(seed, gamma, eta):
    kw = dict(horizon=100, eta=eta, gamma=gamma)
    L = HybridOnlineLearner(threshold_erm, max_fw_steps=3000, fw_tol=1e-11, **kw)
    E = ExactThresholdFTRL(**kw)
    rng = np.random.default_rng(seed)
    for x in rng.random(30):
        r = Threshold(rng.choice([0.25, 0.5, 0.75]))
        L.update(x, r)
        E.update(x, r)
    order = np.argsort(L.ledger.Z[:, 0])
    mu_exact = np.empty(L.ledger.m)
    mu_exact[order] = E.group_marginals()
    assert L.objective() == pytest.approx(L.objective(mu_exact), abs=1e-9)
    np.testing.assert_allclose(L.marginals_, mu_exact, atol=2e-3)
    # the duality gap certifies the suboptimality
    assert L.objective() - L.objective(mu_exact) <= L.fw_gap_ + 1e-12


def test_frank_wolfe_matches_a_generic_convex_solver():
    """FTRL over a finite class of 2-D halfspaces: FW with the ERM oracle vs SLSQP over mixture weights."""
    rng = np.random.default_rng(8)
    hs = halfspaces(rng, 7)
    Z = rng.normal(size=(10, 2))
    L = HybridOnlineLearner(FiniteClassERM(hs), horizon=50, eta=0.4, gamma=0.02, max_fw_steps=5000,
                            fw_tol=1e-12, feature_samples=Z)
    for x in rng.normal(size=(12, 2)):
        L.update(x, hs[rng.integers(7)])
    P = np.array([h.predict(Z) for h in hs]).astype(float)
    F = lambda q: L.objective(q @ P)   # noqa: E731
    best = min((minimize(F, q0, method="SLSQP", bounds=[(0, 1)] * 7,
                         constraints={"type": "eq", "fun": lambda q: q.sum() - 1}, options={"ftol": 1e-14, "maxiter": 500})
                for q0 in (np.full(7, 1 / 7), np.eye(7)[0], rng.dirichlet(np.ones(7)))), key=lambda r: r.fun)
    assert L.objective() <= best.fun + 1e-7
    np.testing.assert_allclose(L.marginals_, best.x @ P, atol=5e-3)


def test_rich_class_reduces_to_pointwise_closed_form():
    """If H realises every labelling of the samples, the polytope is the cube and FTRL is separable."""
    Z = np.array([0.1, 0.4, 0.6, 0.9])
    table = {}
    for bits in itertools.product((0, 1), repeat=4):
        table[bits] = (lambda b: (lambda X: np.array([b[int(np.argmin(np.abs(Z - x)))] for x in np.asarray(X)[:, 0]])))(bits)
    L = HybridOnlineLearner(FiniteClassERM(list(table.values())), horizon=40, eta=0.5, gamma=0.05,
                            max_fw_steps=4000, fw_tol=1e-12, feature_samples=Z)
    rng = np.random.default_rng(9)
    for _ in range(9):
        L.update(rng.random(), Threshold(rng.choice([0.3, 0.5, 0.8])))
    closed = truncated_entropy_argmin(-0.5 * L.ledger.advantage, 0.05)
    np.testing.assert_allclose(L.marginals_, closed, atol=1e-3)


def test_no_rounds_gives_the_maximum_entropy_mixture():
    L = HybridOnlineLearner(threshold_erm, horizon=10, feature_samples=np.linspace(0, 1, 7), max_fw_steps=200,
                            fw_tol=1e-12)
    np.testing.assert_allclose(L.marginals_, 0.5, atol=1e-6)
    assert L.ledger.rounds == 0


def test_large_eta_plays_the_leader():
    L = HybridOnlineLearner(threshold_erm, horizon=100, eta=1e7)
    F = FollowTheLeader(threshold_erm)
    rng = np.random.default_rng(2)
    for x in rng.random(31):                 # an odd number of rounds: no sample has a tied label count
        r = Threshold(rng.choice([0.25, 0.5, 0.75], p=[0.5, 0.2, 0.3]))
        L.update(x, r)
        F.update(x, r)
    np.testing.assert_allclose(L.predict_proba(L.ledger.Z), F.predict_proba(F.ledger.Z), atol=1e-6)
    assert F.oracle_calls_ == 32 and len(F.mixture()) == 1 and F.mixture()[0][1] is F.h_
    # with tied leaders the regulariser mixes them, at the leaders' loss
    Lt = adaptive_game(HybridOnlineLearner(threshold_erm, horizon=100, eta=1e7), 30, 2)
    leader = threshold_erm(Lt.ledger.Z, (Lt.ledger.advantage < 0).astype(int), np.abs(Lt.ledger.advantage))
    assert Lt.ledger.estimated_loss(Lt.marginals_[None, :])[0] == pytest.approx(
        Lt.ledger.estimated_loss(leader.predict(Lt.ledger.Z)[None, :])[0], abs=1e-6)


def test_line_search_is_exact():
    L = adaptive_game(HybridOnlineLearner(threshold_erm, horizon=80, max_fw_steps=1), 20, 3)
    mu = L.marginals_
    g = L._gradient(mu)
    v = threshold_erm(L.ledger.Z, (g < 0).astype(int), np.abs(g)).predict(L.ledger.Z)
    a = L._line_search(mu, v - mu)
    grid = np.linspace(0, 1, 20_001)
    vals = objective_many(L, mu[None, :] + grid[:, None] * (v - mu)[None, :])
    assert a == pytest.approx(grid[int(np.argmin(vals))], abs=2e-4)
    assert L.objective(mu + a * (v - mu)) <= min(vals) + 1e-12
    # towards the pointwise leader with a huge eta, F decreases all the way: the full step
    Lb = adaptive_game(HybridOnlineLearner(threshold_erm, horizon=80, eta=1e7, max_fw_steps=1), 6, 3)
    half = np.full(Lb.ledger.m, 0.5)
    assert Lb._line_search(half, (Lb.ledger.advantage < 0) - half) == 1.0


def test_active_set_merges_equal_labellings_and_pairwise_steps_keep_the_simplex():
    L = HybridOnlineLearner(threshold_erm, horizon=10, feature_samples=np.array([0.2, 0.4, 0.6, 0.8]), max_fw_steps=1)
    L.atoms, L.weights, L.V = [Threshold(0.5)], np.ones(1), np.array([[0, 0, 1, 1]])
    assert L._add(Threshold(0.3), np.array([0, 1, 1, 1])) == 1
    assert L._add(Threshold(0.31), np.array([0, 1, 1, 1])) == 1          # same labelling: the same atom
    assert L._add(Threshold(0.55), np.array([0, 0, 1, 1])) == 0
    assert len(L.atoms) == 2 and list(L.weights) == [1.0, 0.0]
    L.ledger.observe(0.9, Threshold(0.3))
    L._pairwise_steps()
    assert L.weights.sum() == pytest.approx(1.0) and np.all(L.weights > 0)
    # the pairwise steps reach the optimum over the active set's hull (a 1-D problem here)
    grid = np.linspace(0, 1, 100_001)
    vals = objective_many(L, grid[:, None] * L.V[0][None, :] + (1 - grid[:, None]) * L.V[1][None, :])
    assert L.objective() <= min(vals) + 1e-9
    assert L.weights[0] == pytest.approx(grid[int(np.argmin(vals))], abs=1e-4)
    # an atom whose weight falls to zero leaves the active set
    L.ledger.observe(0.1, Threshold(0.9))
    L.atoms.append(Threshold(0.99))
    L.weights, L.V = np.array([0.5, 0.5, 0.0]), np.vstack([L.V, [0, 0, 0, 0]])
    L.weights[1], L.weights[2] = 0.5, 0.0
    L._pairwise_steps()
    assert all(w > 1e-12 for w in L.weights) and len(L.atoms) == len(L.weights) == L.V.shape[0]


def test_pairwise_step_moves_the_optimal_mass_from_a_partial_atom():
    L = HybridOnlineLearner(threshold_erm, horizon=10, eta=0.1, feature_samples=np.array([0.2, 0.4, 0.6, 0.8]),
                            max_fw_steps=1)
    for x in (0.1, 0.3, 0.5):
        L.ledger.observe(x, Threshold(0.3))              # every sample from 0.3 on is labelled 1
    V = np.array([[0, 1, 1, 1], [0, 0, 0, 0]])
    L.atoms, L.V, L.weights = [Threshold(0.3), Threshold(0.9)], V.copy(), np.array([0.3, 0.7])   # worse atom: 0.7
    L._pairwise_steps()
    # along the segment the optimum solves logit(q) = 0.3 at the three samples labelled 1
    assert L.weights[0] == pytest.approx(1 / (1 + np.exp(-0.3)), abs=1e-6)
    grid = np.linspace(0, 1, 100_001)
    vals = objective_many(L, grid[:, None] * V[0][None, :] + (1 - grid[:, None]) * V[1][None, :])
    assert L.weights[0] == pytest.approx(grid[int(np.argmin(vals))], abs=1e-4)
    assert L.weights.sum() == pytest.approx(1.0)


def test_mixture_prediction_and_sampling_agree():
    L = adaptive_game(HybridOnlineLearner(threshold_erm, horizon=300, random_state=0), 120, 4)
    mix = L.mixture()
    assert len(mix) >= 2 and sum(w for w, _ in mix) == pytest.approx(1.0) and all(w > 0 for w, _ in mix)
    Xq = np.linspace(0, 1, 23)
    np.testing.assert_allclose(L.predict_proba(Xq), sum(w * h.predict(Xq) for w, h in mix), atol=1e-12)
    np.testing.assert_allclose(L.predict_proba(L.ledger.Z), L.marginals_, atol=1e-12)
    twin = adaptive_game(HybridOnlineLearner(threshold_erm, horizon=300, random_state=0), 120, 4)
    assert [twin.sample().key() for _ in range(30)] == [L.sample().key() for _ in range(30)]
    other = adaptive_game(HybridOnlineLearner(threshold_erm, horizon=300, random_state=1), 120, 4)
    assert [other.sample().key() for _ in range(30)] != [twin.sample().key() for _ in range(30)]
    draws = [L.sample() for _ in range(4000)]
    for w, h in mix:
        assert np.mean([d is h for d in draws]) == pytest.approx(w, abs=4 * np.sqrt(w * (1 - w) / 4000) + 1e-3)


def test_oracle_calls_are_bounded_per_round():
    L = adaptive_game(HybridOnlineLearner(threshold_erm, horizon=200, max_fw_steps=3), 50, 5)
    assert 50 <= L.oracle_calls_ - 1 <= 150
    assert 10 <= L.fw_steps_ <= L.oracle_calls_ - 1 - 0   # at least one real step in most rounds
    assert L.fw_gap_ <= L.fw_tol or L.oracle_calls_ == 1 + 150
    L0 = adaptive_game(HybridOnlineLearner(threshold_erm, horizon=200, max_fw_steps=2, fw_tol=0.0), 10, 5)
    assert 1 + 10 <= L0.oracle_calls_ <= 1 + 2 * 10 and L0.fw_steps_ <= 2 * 10


def test_generic_features_and_fixed_samples():
    rng = np.random.default_rng(10)
    hs = halfspaces(rng, 12)
    L = HybridOnlineLearner(FiniteClassERM(hs), horizon=40, n_features=2)
    for x in rng.normal(size=(15, 2)):
        L.update(x, hs[0])
    assert L.ledger.Z.shape == (15, 2)
    assert all(any(h is g for g in hs) for _, h in L.mixture())
    assert L.predict_proba(np.zeros((3, 2))).shape == (3,)
    np.testing.assert_allclose(L.predict_proba(L.ledger.Z), L.marginals_, atol=1e-12)


def test_learner_beats_follow_the_leader_under_adaptive_labels():
    T = 400
    r_m, e_m = play(HybridOnlineLearner(threshold_erm, horizon=T), T, np.random.default_rng(3), 0.25, 0.75)
    r_f, e_f = play(FollowTheLeader(threshold_erm), T, np.random.default_rng(3), 0.25, 0.75)
    assert r_f > 0.15 * T and e_f > 0.2 * T        # the adversary drives FTL to linear regret
    assert r_m < 2 * np.sqrt(T) and 0 < e_m < np.sqrt(T)


def test_deterministic():
    a = play(HybridOnlineLearner(threshold_erm, horizon=80, random_state=0), 80, np.random.default_rng(4), 0.25, 0.75)
    b = play(HybridOnlineLearner(threshold_erm, horizon=80, random_state=0), 80, np.random.default_rng(4), 0.25, 0.75)
    assert a == b


def test_follow_the_leader_plays_the_estimated_loss_minimiser():
    rng = np.random.default_rng(13)
    Z = np.sort(rng.random(25))
    F = FollowTheLeader(threshold_erm, feature_samples=Z)
    assert F.ledger.fixed and F.ledger.m == 25
    for x in rng.random(9):
        F.update(x, Threshold(rng.choice([0.2, 0.5, 0.7]), rng.choice([1, -1])))
    cuts = [Threshold(t) for t in cut_thresholds(Z)]
    losses = F.ledger.estimated_loss(np.array([h.predict(Z) for h in cuts]))
    assert F.ledger.estimated_loss(F.h_.predict(Z)[None, :])[0] == pytest.approx(losses.min(), abs=1e-12)
    assert F.mixture() == [(1.0, F.h_)]
    p = F.predict_proba([0.0, 1.0])
    assert p.dtype == float and list(p) == list(F.h_.predict([0.0, 1.0]))
    F2 = FollowTheLeader(FiniteClassERM(halfspaces(rng, 5)), n_features=2)
    F2.update(np.array([0.2, -0.3]), lambda X: (X[:, 0] > 0).astype(int))
    assert F2.ledger.Z.shape == (1, 2) and F2.oracle_calls_ == 2
    # the leader weighs each sample by its label margin: here the unweighted majority labels tie between two
    # cuts, and only the weights pick the cut that errs on the weakly labelled sample
    Zs = np.array([0.1, 0.2, 0.3, 0.4, 0.5])
    Fw = FollowTheLeader(threshold_erm, feature_samples=Zs)
    for s_ in range(5):
        ones = [0.2, 0.4, 0.5] if s_ < 3 else [0.4, 0.5]
        Fw.update(0.05, (lambda o: (lambda X: np.isin(X[:, 0], o).astype(int)))(ones))
    assert list(Fw.h_.predict(Zs)) == [0, 0, 0, 1, 1]
    bad = FollowTheLeader(lambda X, y, w: (lambda Q: np.full(len(Q), 3)))
    with pytest.raises(ValueError, match="the leader outputs must be 0 or 1"):
        bad.predict_proba([0.5])


# ----------------------------------------------------------------------------- learner: rejection
@pytest.mark.parametrize("kw, word", [({"horizon": 0}, "horizon"), ({"horizon": 2.5}, "horizon"),
                                      ({"max_fw_steps": 0}, "max_fw_steps"), ({"gamma": 0.5}, "gamma"),
                                      ({"gamma": 0.0}, "gamma"), ({"eta": -1.0}, "eta"), ({"eta": np.inf}, "eta"),
                                      ({"eta": 0.0}, "eta"), ({"fw_tol": -1e-3}, "fw_tol"),
                                      ({"n_features": 0}, "n_features")])
def test_rejects_bad_parameters(kw, word):
    args = {"horizon": 10, **kw}
    with pytest.raises(ValueError, match=word):
        HybridOnlineLearner(threshold_erm, **args)


def test_rejects_bad_oracle_labels_and_features():
    with pytest.raises(TypeError, match="erm_oracle must be callable"):
        HybridOnlineLearner("not an oracle", horizon=10)
    with pytest.raises(TypeError, match="erm_oracle must be callable"):
        FollowTheLeader(None)
    L = HybridOnlineLearner(threshold_erm, horizon=10)
    with pytest.raises(ValueError, match="NaN"):
        L.update(np.nan, Threshold(0.5))
    with pytest.raises(ValueError, match=r"label function r outputs must be 0 or 1, got 2"):
        L.update(0.4, lambda X: 2 * np.ones(len(X), int))
    with pytest.raises(ValueError, match=r"0 or 1, got -1"):
        L.update(0.4, lambda X: -np.ones(len(X), int))
    bad = HybridOnlineLearner(lambda X, y, w: (lambda Z: np.full(len(Z), 0.5)), horizon=10)
    with pytest.raises(ValueError, match="^the ERM oracle's hypothesis outputs must be 0 or 1, got 0.5"):
        bad.update(0.4, Threshold(0.5))
    with pytest.raises(ValueError, match="^the ERM oracle's hypothesis outputs must be 0 or 1, got 0.5"):
        HybridOnlineLearner(lambda X, y, w: (lambda Z: np.full(len(Z), 0.5)), horizon=10, feature_samples=[0.1])
    late = HybridOnlineLearner(lambda X, y, w: Threshold(0.5) if len(X) == 0 else (lambda Z: np.full(len(Z), 7)),
                               horizon=10)
    with pytest.raises(ValueError, match="^the ERM oracle's hypothesis outputs must be 0 or 1, got 7"):
        late.update(0.4, Threshold(0.5))


# ----------------------------------------------------------------------------- reference learners
def test_cover_weights_are_exponential_weights_on_estimated_losses():
    C = adaptive_game(CoverExponentialWeights(horizon=150, eta=0.7), 20, 6)
    ux = np.unique(C.ledger.Z[:, 0])
    th = cut_thresholds(ux)
    losses = C.ledger.estimated_loss(np.array([Threshold(t).predict(C.ledger.Z) for t in th]))
    np.testing.assert_allclose(C.cover_losses(), losses, rtol=1e-12)
    w = np.exp(-0.7 * (losses - losses.min()))
    np.testing.assert_allclose(C.threshold_mixture()[1], w / w.sum(), rtol=1e-10)
    np.testing.assert_allclose(C.threshold_mixture()[0], th)
    Xq = np.linspace(-0.1, 1.1, 17)
    np.testing.assert_allclose(C.predict_proba(Xq), sum(p * h.predict(Xq) for p, h in C.mixture()), atol=1e-12)


def test_cover_counts_repeated_samples_and_survives_large_eta():
    Z = np.array([0.2, 0.2, 0.2, 0.5, 0.8, 0.8])
    C = CoverExponentialWeights(horizon=50, eta=0.9, feature_samples=Z)
    for x, th in zip((0.1, 0.6, 0.3, 0.9), (0.3, 0.6, 0.3, 0.1)):
        C.update(x, Threshold(th))
    th = cut_thresholds(np.unique(Z))
    ref = C.ledger.estimated_loss(np.array([Threshold(t).predict(Z) for t in th]))
    np.testing.assert_allclose(C.cover_losses(), ref, rtol=1e-12)
    big = CoverExponentialWeights(horizon=50, eta=1e5, feature_samples=Z)
    for x, th in zip((0.1, 0.6, 0.3), (0.5, 0.1, 0.9)):       # no threshold fits every round
        big.update(x, Threshold(th))
    assert big.cover_losses().min() > 0.5
    w = big.threshold_mixture()[1]
    assert np.all(np.isfinite(w)) and w.sum() == pytest.approx(1.0) and w.max() == pytest.approx(1.0)


def test_exact_ftrl_pools_repeated_samples_by_their_count():
    """A violated order between one sample and three equal samples pools to their count-weighted mean."""
    Z = np.array([0.1, 0.2, 0.2, 0.2])
    E = ExactThresholdFTRL(horizon=30, eta=0.4, gamma=0.01, feature_samples=Z)
    for x in (0.05, 0.5):
        E.update(x, Threshold(0.15, -1))                 # labels 1 at 0.1 and 0 at 0.2
    # natural parameters -eta a / c: +0.8 at 0.1 and -0.8 at 0.2 (out of order): pooled mean -0.4
    np.testing.assert_allclose(E.group_marginals(), 1 / (1 + np.exp(0.4)), rtol=1e-9)
    assert [w for w, _ in E.mixture()] == pytest.approx([1 / (1 + np.exp(0.4)), 1 - 1 / (1 + np.exp(0.4))])


def test_cut_thresholds_realise_every_cut():
    ux = np.array([0.1, 0.3, 0.7])
    th = cut_thresholds(ux)
    np.testing.assert_allclose(th[:3], [0.1, 0.2, 0.5])
    assert [int(Threshold(t).predict(ux).sum()) for t in th] == [3, 2, 1, 0]
    np.testing.assert_array_equal(cut_thresholds(np.zeros(0)), [0.0])


@pytest.mark.parametrize("eta, gamma", [(0.2, 0.05), (3.0, 0.05), (0.6, 0.2)])
def test_exact_threshold_ftrl_matches_constrained_solver(eta, gamma):
    """The isotonic closed form against SLSQP with explicit order constraints (with repeated samples)."""
    Z = np.array([0.15, 0.3, 0.3, 0.45, 0.6, 0.8])
    E = ExactThresholdFTRL(horizon=30, eta=eta, gamma=gamma, feature_samples=Z)
    rng = np.random.default_rng(11)
    for _ in range(7):
        E.update(rng.random(), Threshold(rng.choice([0.2, 0.5, 0.7])))
    a = E.ledger.advantage
    ux = np.unique(Z)
    idx = np.searchsorted(ux, Z)
    f = lambda g: np.sum(eta * a * g[idx] + truncated_entropy(g[idx], gamma))   # noqa: E731
    cons = [{"type": "ineq", "fun": (lambda g, k=k: g[k + 1] - g[k])} for k in range(ux.size - 1)]
    ref = minimize(f, np.full(ux.size, 0.5), method="SLSQP", bounds=[(0, 1)] * ux.size, constraints=cons,
                   options={"ftol": 1e-14, "maxiter": 1000})
    mu = E.group_marginals()
    assert f(mu) <= ref.fun + 1e-8
    np.testing.assert_allclose(mu, ref.x, atol=2e-3)
    # its mixture over cut thresholds reproduces those marginals
    np.testing.assert_allclose(E.predict_proba(ux), mu, atol=1e-12)
    assert E.mixture() and sum(w for w, _ in E.mixture()) == pytest.approx(1.0)


def test_reference_learners_start_and_reject():
    for cls in (CoverExponentialWeights, ExactThresholdFTRL):
        L = cls(horizon=10)
        np.testing.assert_allclose(L.predict_proba([-1.0, 0.5]), [0.0, 1.0])
        assert cls(horizon=1).eta > 0
        with pytest.raises(ValueError, match="horizon"):
            cls(horizon=0)
        for eta in (-2.0, 0.0, np.inf):
            with pytest.raises(ValueError, match="eta must be a positive finite number"):
                cls(horizon=10, eta=eta)
        with pytest.raises(ValueError, match="one feature"):
            cls(horizon=10, feature_samples=np.zeros((3, 2)))
    for gamma in (0.0, 0.5, 0.6):
        with pytest.raises(ValueError, match="gamma"):
            ExactThresholdFTRL(horizon=10, gamma=gamma)
    assert all(w > 0 for w, _ in adaptive_game(ExactThresholdFTRL(horizon=40), 20, 14).mixture())
    np.testing.assert_array_equal(ExactThresholdFTRL(horizon=10).group_marginals(), [])


# ----------------------------------------------------------------------------- experiment
def test_best_response_and_slope_reference():
    assert best_response([0.3], np.ones(1), 0.25, 0.75) == (0.75, pytest.approx(0.45))
    assert best_response([0.7], np.ones(1), 0.25, 0.75) == (0.25, pytest.approx(0.45))
    assert best_response([1.4, 0.0], np.array([0.5, 0.5]), 0.25, 0.75)[1] == pytest.approx(0.5)
    T = np.array([100, 400, 1600])
    assert loglog_slope(T, 3 * np.sqrt(T)) == pytest.approx(0.5)
    assert loglog_slope(T, 0.2 * T) == pytest.approx(1.0)


def test_smoke_experiment():
    out = run("smoke", 0)
    for arms in out["metrics"].values():
        assert set(arms) == {"method", "exact", "hedge", "ftl"}
        assert all(np.isfinite(v) for v in arms.values())
    assert out["info"]["oracle_calls"]["ftl"] == [41, 81, 161]
    assert all(c <= 1 + 25 * T for c, T in zip(out["info"]["oracle_calls"]["method"], (40, 80, 160)))
