"""Tests of Conformal Robustness Control (ICLR 2026): equations, reductions, guarantees, contracts."""
import math

import numpy as np
import pytest
import torch
from scipy.stats import norm

from iclr26.classical.crc import (
    ConformalCRO,
    ConformalRobustnessControl,
    SimplexPortfolio,
    conformal_radius,
    smoothed_indicator,
)
from iclr26.classical.crc.experiment import sample

FAST = dict(steps=40, random_state=0)


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    old = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny models: extra threads only add contention
    yield
    torch.set_num_threads(old)


def _data(n, seed):
    return sample(n, np.random.default_rng(seed))


def test_box_solution_matches_brute_force_over_simplex_vertices_and_points():
    # Equation test: max_{y in box} -y^T z = -lo^T z, minimised over the simplex at e_{argmax lo}.
    rng = np.random.default_rng(0)
    prob = SimplexPortfolio()
    for _ in range(20):
        lo = rng.normal(size=4)
        hi = lo + rng.random(4)
        z, r = prob.solve_box(lo[None], hi[None])
        # brute force: worst case over the box corners for random simplex points and all vertices
        corners = np.array([[lo[k] if (c >> k) & 1 else hi[k] for k in range(4)] for c in range(16)])
        cands = np.vstack([np.eye(4), rng.dirichlet(np.ones(4), size=200)])
        worst = np.max(-(corners @ cands.T), axis=0)
        assert r[0] == pytest.approx(worst.min(), abs=1e-12) or r[0] < worst.min()
        assert r[0] == pytest.approx(np.max(-(corners @ z[0])), abs=1e-12)


def test_box_solution_torch_matches_numpy_and_keeps_gradient():
    lo = torch.tensor([[0.1, 0.5, -0.2]], dtype=torch.float64, requires_grad=True)
    z, r = SimplexPortfolio().solve_box(lo)
    zn, rn = SimplexPortfolio().solve_box(lo.detach().numpy())
    assert np.allclose(z.detach().numpy(), zn) and float(r.detach()) == pytest.approx(float(rn[0]))
    r.sum().backward()
    assert lo.grad.tolist() == [[0.0, -1.0, 0.0]]


def test_smoothed_indicator_is_normal_cdf():
    # (1 + erf(m / (sqrt(2) sigma))) / 2 = Phi(m / sigma)
    m = np.linspace(-1, 1, 11)
    np.testing.assert_allclose(smoothed_indicator(m, 0.3), norm.cdf(m / 0.3), atol=1e-12)
    np.testing.assert_allclose(smoothed_indicator(torch.tensor(m), 0.3).numpy(), norm.cdf(m / 0.3), atol=1e-12)


def test_conformal_radius_rank_and_infinite_case():
    s = np.arange(1.0, 20.0)  # n = 19
    assert conformal_radius(s, 0.1) == 18.0  # ceil(0.9 * 20) = 18th smallest
    assert conformal_radius(s, 0.5) == 10.0  # ceil(0.5 * 20) = 10
    assert math.isinf(conformal_radius(np.arange(5.0), 0.1))  # ceil(0.9 * 6) = 6 > 5


def test_conformal_radius_finite_sample_guarantee_by_simulation():
    # P{S_test <= t_hat} >= 1 - alpha exactly for exchangeable scores (n = 19, alpha = 0.1 -> 18/20).
    rng = np.random.default_rng(0)
    hits = [rng.normal() <= conformal_radius(rng.normal(size=19), 0.1) for _ in range(20000)]
    assert abs(np.mean(hits) - 0.9) < 0.01


def test_calibrated_crc_robustness_on_fresh_data():
    X, Y = _data(300, 1)
    Xc, Yc = _data(400, 2)
    Xt, Yt = _data(4000, 3)
    crc = ConformalRobustnessControl(alpha=0.1, **FAST).fit(X, Y).calibrate(Xc, Yc)
    rob = crc.score(Xt, Yt)
    assert 0.85 < rob < 0.95  # 1 - alpha = 0.9, calibration sd ~ 0.015
    # calibration only adds the radius to the certificate; the decision is unchanged
    crc2 = ConformalRobustnessControl(alpha=0.1, **FAST).fit(X, Y)
    z0, r0 = crc2.decide(Xt)
    z1, r1 = crc.decide(Xt)
    assert np.array_equal(z0, z1)
    np.testing.assert_allclose(r1 - r0, crc.radius_, atol=1e-10)


def test_cro_box_has_conformal_coverage_and_is_robust():
    X, Y = _data(300, 4)
    Xc, Yc = _data(400, 5)
    Xt, Yt = _data(4000, 6)
    cro = ConformalCRO(alpha=0.1, **FAST).fit(X, Y).calibrate(Xc, Yc)
    cov = cro.coverage(Xt, Yt)
    assert 0.85 < cov < 0.95
    assert cro.score(Xt, Yt) >= cov - 1e-12  # coverage implies robustness


@pytest.mark.slow
def test_lagrangian_training_lowers_certificate_below_cro():
    X, Y = _data(2000, 7)
    Xc, Yc = _data(1000, 8)
    Xt, Yt = _data(4000, 9)
    crc = ConformalRobustnessControl(alpha=0.1, steps=1500, random_state=0).fit(X, Y).calibrate(Xc, Yc)
    cro = ConformalCRO(alpha=0.1, steps=1500, random_state=0).fit(X, Y).calibrate(Xc, Yc)
    assert crc.decide(Xt)[1].mean() < cro.decide(Xt)[1].mean()
    assert crc.train_losses_[-1] < crc.train_losses_[0]


def test_deterministic_under_random_state():
    X, Y = _data(200, 10)
    a = ConformalRobustnessControl(**FAST).fit(X, Y).predict_set(X[:5])
    b = ConformalRobustnessControl(**FAST).fit(X, Y).predict_set(X[:5])
    np.testing.assert_array_equal(a[0], b[0])
    assert np.all(a[0] <= a[1])


def test_sklearn_clone_and_params():
    from sklearn.base import clone

    est = ConformalRobustnessControl(alpha=0.2, sigma=0.05)
    assert clone(est).get_params() == est.get_params()
    assert not hasattr(clone(est), "mean_net_")


@pytest.mark.parametrize(
    "kwargs,match",
    [
        (dict(alpha=0.0), "alpha must lie in"),
        (dict(alpha=1.5), "alpha must lie in"),
        (dict(sigma=0.0), "sigma must be"),
        (dict(steps=0), "steps must be"),
        (dict(hidden=-1), "hidden must be"),
        (dict(dual_lr=-1.0), "dual_lr must be"),
        (dict(decision_problem="knapsack"), "decision_problem must be"),
    ],
)
def test_rejects_bad_parameters(kwargs, match):
    X, Y = _data(50, 0)
    with pytest.raises(ValueError, match=match):
        ConformalRobustnessControl(**kwargs).fit(X, Y)


def test_rejects_bad_inputs():
    X, Y = _data(50, 0)
    with pytest.raises(ValueError, match="different numbers of samples"):
        ConformalCRO().fit(X, Y[:10])
    with pytest.raises(ValueError, match="y must be 2-D"):
        ConformalCRO().fit(X, Y[:, 0])
    with pytest.raises(ValueError, match="not fitted"):
        ConformalRobustnessControl().decide(X)
    est = ConformalRobustnessControl(steps=5).fit(X, Y)
    with pytest.raises(ValueError, match="features"):
        est.decide(X[:, :3])
    with pytest.raises(ValueError, match="NaN"):
        est.calibrate(np.full_like(X, np.nan), Y)


def test_smoke_experiment_runs():
    from iclr26.classical.crc.experiment import run

    out = run("smoke", 0)
    for metric in ("robustness", "certificate", "decision_loss"):
        assert set(out["metrics"][metric]) == {"cal_crc", "crc", "cro"}
        assert all(np.isfinite(v) for v in out["metrics"][metric].values())


def test_negative_radius_never_inverts_the_box():
    import numpy as np

    from iclr26.classical.crc import ConformalRobustnessControl

    rng = np.random.default_rng(0)
    X = rng.normal(size=(200, 3))
    y = X[:, :2] * 0.1 + rng.normal(scale=0.05, size=(200, 2))
    crc = ConformalRobustnessControl(steps=20, random_state=0).fit(X, y)
    crc.radius_ = -10.0  # a calibration that shrinks the box far below its learned width
    lo, hi = crc.predict_set(X)
    assert np.all(lo <= hi)
