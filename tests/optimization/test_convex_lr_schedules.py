"""Tests for iclr26.optimization.convex_lr_schedules (last-iterate bound and scaling law)."""
import numpy as np
import pytest

from iclr26.optimization.convex_lr_schedules import (ConvexScalingLaw, bound_terms, constant_schedule,
                                                     cosine_schedule, last_iterate_bound,
                                                     linear_schedule, sqrt_horizon_transfer,
                                                     wsd_schedule)


# ---------------------------------------------------------------- equation tests (the bound)
def test_one_step_bound_is_classic():
    # T = 1: S_1 = eta, Q_1 = eta^2, no residual: D^2/(2 eta) + G^2 eta / 2
    assert last_iterate_bound([0.3], D=2.0, G=5.0) == pytest.approx(4 / 0.6 + 25 * 0.3 / 2)


def test_two_step_bound_hand_computed():
    a, b, D, G = 0.5, 0.2, 1.5, 2.0
    S1, S2, Q1 = a + b, b, a * a + b * b
    want = D ** 2 / (2 * S1) + G ** 2 * Q1 / (2 * S1) + G ** 2 / 2 * (a / S2) * (Q1 / S1)
    assert last_iterate_bound([a, b], D, G) == pytest.approx(want)


def test_bound_terms_homogeneity():
    s = cosine_schedule(300)
    d, g = bound_terms(s)
    d3, g3 = bound_terms(3.0 * s)
    assert d3 == pytest.approx(d / 3) and g3 == pytest.approx(3 * g)


def test_linear_decay_asymptotics():
    # linear decay: sum eta = eta T / 2 (d ~ 1/T) and the G^2 part tends to eta (Sec. 4 derivation)
    d, g = bound_terms(linear_schedule(20000))
    assert d * 20000 == pytest.approx(1.0, rel=1e-3)
    assert g == pytest.approx(1.0, rel=2e-3)


@pytest.mark.parametrize("sched", [linear_schedule, cosine_schedule, wsd_schedule, constant_schedule])
def test_bound_holds_for_subgradient_descent_on_abs(sched):
    # f(x) = G |x - x*| is convex and G-Lipschitz; deterministic subgradient descent from x_0,
    # D = |x_0 - x*|. The last iterate's gap must be below the bound (Defazio et al. 2023, Thm. 1).
    G, x_star = 1.7, 0.4
    for peak in (0.01, 0.1, 1.0):
        for x0 in (-3.0, 2.5):
            lrs = sched(200, peak)
            x = x0
            for eta in lrs[:-1]:          # x_T is reached after T - 1 steps from x_1 = x0
                x -= eta * G * np.sign(x - x_star)
            gap = G * abs(x - x_star)
            assert gap <= last_iterate_bound(lrs, D=abs(x0 - x_star), G=G) + 1e-12


# ---------------------------------------------------------------- the fitted law
def _synthetic(A=2.0, B=0.3, L_inf=0.1):
    law = ConvexScalingLaw("linear")
    Ts = np.repeat([100, 200, 400], 6)
    etas = np.tile(2.0 ** np.arange(-4, 2), 3)
    dg = np.array([law.terms(t) for t in Ts])
    y = L_inf + A * dg[:, 0] / etas + B * dg[:, 1] * etas
    return Ts, etas, y


def test_fit_recovers_parameters_and_extrapolates():
    Ts, etas, y = _synthetic()
    law = ConvexScalingLaw("linear").fit(Ts, etas, y)
    assert (law.A_, law.B_, law.L_inf_) == pytest.approx((2.0, 0.3, 0.1), rel=1e-6)
    assert law.r2_ == pytest.approx(1.0)
    T_long = 8000
    d, g = bound_terms(linear_schedule(T_long))
    assert law.predict([T_long], [0.05])[0] == pytest.approx(0.1 + 2 * d / 0.05 + 0.3 * g * 0.05)


def test_optimal_lr_is_argmin_and_scales_as_inverse_sqrt_T():
    Ts, etas, y = _synthetic()
    law = ConvexScalingLaw("linear").fit(Ts, etas, y)
    for T in (500, 5000):
        grid = np.exp(np.linspace(np.log(1e-3), np.log(10), 20001))
        brute = grid[np.argmin(law.predict(np.full(grid.size, T), grid))]
        assert law.optimal_peak_lr(T)[0] == pytest.approx(brute, rel=1e-3)
        assert law.optimal_loss(T)[0] == pytest.approx(law.predict([T], [brute])[0], rel=1e-6)
    ratio = law.optimal_peak_lr(400)[0] / law.optimal_peak_lr(6400)[0]
    assert ratio == pytest.approx(4.0, rel=0.02)     # sqrt(6400 / 400) for linear decay


def test_sqrt_horizon_transfer():
    assert sqrt_horizon_transfer(0.4, 100, 1600) == pytest.approx(0.1)


def test_schedules_shapes():
    assert linear_schedule(4, 2.0).tolist() == [2.0, 1.5, 1.0, 0.5]
    assert cosine_schedule(2).tolist() == pytest.approx([1.0, 0.5])
    w = wsd_schedule(10, 1.0, decay_frac=0.2)
    assert w[:8].tolist() == [1.0] * 8 and w[-1] > 0


# ---------------------------------------------------------------- rejection tests
def test_rejects_bad_inputs():
    with pytest.raises(ValueError, match="last learning rate"):
        bound_terms([1.0, 0.0])
    with pytest.raises(ValueError, match="non-negative"):
        bound_terms([1.0, -0.1, 0.2])
    with pytest.raises(ValueError, match="D"):
        last_iterate_bound([0.1], D=-1.0, G=1.0)
    with pytest.raises(ValueError, match="schedule"):
        ConvexScalingLaw("exponential")
    with pytest.raises(RuntimeError, match="not fitted"):
        ConvexScalingLaw().predict([100], [0.1])
    with pytest.raises(ValueError, match="finite"):
        ConvexScalingLaw().fit([100, 200, 400], [0.1, 0.1, 0.1], [1.0, np.nan, 0.5])
    with pytest.raises(ValueError, match="T must be a positive integer"):
        linear_schedule(0)


# ---------------------------------------------------------------- experiment smoke
def test_experiment_smoke():
    from iclr26.optimization.convex_lr_schedules.experiment import run
    out = run("smoke", 0)
    m = out["metrics"]
    assert set(m["extrap_log_error"]) == {"convex_law", "power_law", "persistence"}
    assert len(m["lr_grid_steps_off"]["convex_law"]) == len(m["lr_grid_steps_off"]["constant_transfer"])
