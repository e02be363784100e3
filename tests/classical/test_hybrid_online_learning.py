"""Tests for iclr26.classical.hybrid_online_learning (arXiv:2603.04546)."""
import itertools

import numpy as np
import pytest

from iclr26.classical.hybrid_online_learning import FollowTheLeader, HybridOnlineLearner, Threshold, threshold_erm
from iclr26.classical.hybrid_online_learning.experiment import best_response, loglog_slope, play, run


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("signs", [(1,), (1, -1)])
def test_threshold_erm_matches_brute_force(seed, signs):
    rng = np.random.default_rng(seed)
    X = rng.random(25)
    y = (rng.random(25) < 0.5).astype(int)
    w = rng.random(25)
    h = threshold_erm(X, y, w, signs=signs)
    cand = np.r_[X - 1e-9, X + 1e-9]
    brute = min(np.sum(w * (Threshold(c, s).predict(X) != y)) for c, s in itertools.product(cand, signs))
    assert np.sum(w * (h.predict(X) != y)) == pytest.approx(brute)


def test_truncated_entropy_is_c1_at_gamma():
    L = HybridOnlineLearner(threshold_erm, horizon=100, gamma=0.05)
    g = 0.05
    eps = 1e-7
    assert L._phi(np.array([g - eps]))[0] == pytest.approx(L._phi(np.array([g + eps]))[0], abs=1e-6)
    assert L._dphi(np.array([g - eps]))[0] == pytest.approx(1 + np.log(g))
    assert L._dphi(np.array([0.3]))[0] == pytest.approx(1 + np.log(0.3))
    # below gamma the regulariser is linear with slope 1 + log(gamma)
    u = np.array([0.0, 0.01, 0.02])
    assert np.allclose(np.diff(L._phi(u)) / 0.01, 1 + np.log(g))


def test_reduces_to_exponential_weights_on_support():
    # with every support weight above gamma, the FTRL minimiser over the support is softmax(-eta * Lambda)
    cycle = itertools.cycle([Threshold(0.3), Threshold(0.5), Threshold(0.7)])
    L = HybridOnlineLearner(lambda X, y, w: next(cycle), horizon=10_000, eta=0.3, gamma=1e-4, fw_steps=400)
    rng = np.random.default_rng(0)
    for x in rng.random(6):
        L.update(x, int(x >= 0.55))
    w = np.array([p for p, _ in L.mixture()])
    target = np.exp(-0.3 * L._cum)
    target /= target.sum()
    assert len(w) == 3
    np.testing.assert_allclose(w, target, atol=0.02)


def test_large_eta_plays_the_leader():
    rng = np.random.default_rng(1)
    L = HybridOnlineLearner(threshold_erm, horizon=100, eta=1e6)
    F = FollowTheLeader(threshold_erm)
    for x in rng.random(30):
        y = int(x >= 0.4)
        L.update(x, y)
        F.update(x, y)
    Xq = np.linspace(0, 1, 101)
    np.testing.assert_allclose(L.predict_proba(Xq), F.predict_proba(Xq), atol=1e-6)


def test_one_oracle_call_per_round():
    L = HybridOnlineLearner(threshold_erm, horizon=50)
    rng = np.random.default_rng(2)
    for x in rng.random(20):
        L.update(x, int(x > 0.5))
    assert L.oracle_calls_ == 21


def test_ftl_linear_and_learner_sqrt_regret_small_run():
    r_m, _ = play(HybridOnlineLearner(threshold_erm, horizon=400), 400, np.random.default_rng(3), 0.25, 0.75)
    r_f, _ = play(FollowTheLeader(threshold_erm), 400, np.random.default_rng(3), 0.25, 0.75)
    assert r_f > 0.15 * 400          # adaptive labels drive FTL to linear regret
    assert r_m < 3 * np.sqrt(400)


def test_best_response_and_slope_reference():
    assert best_response([(1.0, Threshold(0.3))], 0.25, 0.75) == 0.75
    assert best_response([(1.0, Threshold(0.7))], 0.25, 0.75) == 0.25
    T = np.array([100, 400, 1600])
    assert loglog_slope(T, 3 * np.sqrt(T)) == pytest.approx(0.5)
    assert loglog_slope(T, 0.2 * T) == pytest.approx(1.0)


def test_deterministic():
    a = play(HybridOnlineLearner(threshold_erm, horizon=80, random_state=0), 80, np.random.default_rng(4), 0.25, 0.75)
    b = play(HybridOnlineLearner(threshold_erm, horizon=80, random_state=0), 80, np.random.default_rng(4), 0.25, 0.75)
    assert a == b


@pytest.mark.parametrize("kw, word", [({"horizon": 0}, "horizon"), ({"fw_steps": 0}, "fw_steps"),
                                      ({"gamma": 1.5}, "gamma"), ({"eta": -1.0}, "eta")])
def test_rejects_bad_parameters(kw, word):
    args = {"horizon": 10, **kw}
    with pytest.raises(ValueError, match=word):
        HybridOnlineLearner(threshold_erm, **args)


def test_rejects_bad_oracle_and_input():
    with pytest.raises(TypeError, match="erm_oracle"):
        HybridOnlineLearner("not an oracle", horizon=10)
    with pytest.raises(TypeError, match="erm_oracle"):
        FollowTheLeader(None)
    with pytest.raises(ValueError, match="scalar"):
        HybridOnlineLearner(threshold_erm, horizon=10).update(np.array([0.1, 0.2]), 1)
    with pytest.raises(ValueError, match="same length"):
        threshold_erm(np.zeros(3), np.zeros(2))


def test_smoke_experiment():
    out = run("smoke", 0)
    for arms in out["metrics"].values():
        assert all(np.isfinite(v) for v in arms.values())
    assert out["info"]["oracle_calls"]["method"] == [51, 101, 201]
