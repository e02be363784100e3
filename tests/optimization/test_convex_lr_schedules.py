"""Tests for iclr26.optimization.convex_lr_schedules (last-iterate bound and scaling law)."""
import math
import warnings

import numpy as np
import pytest

from iclr26.optimization.convex_lr_schedules import (ConvexScalingLaw, bound_terms, constant_schedule,
                                                     cosine_schedule, last_iterate_bound,
                                                     linear_schedule, r2_score,
                                                     sqrt_horizon_transfer, wsd_schedule)


def _bound_loop(lrs, D, G):
    """Defazio, Cutkosky, Mehta, Mishchenko (2023), Thm. 1, written as plain loops."""
    T = len(lrs)
    S = [sum(lrs[k:]) for k in range(T)]
    Q = [sum(e * e for e in lrs[k:]) for k in range(T)]
    out = D ** 2 / (2 * S[0]) + G ** 2 * Q[0] / (2 * S[0])
    for k in range(T - 1):
        out += G ** 2 / 2 * lrs[k] / S[k + 1] * Q[k] / S[k]
    return out


# ---------------------------------------------------------------- equation tests (the bound)
def test_one_step_bound_is_classic():
    # T = 1: S_1 = eta, Q_1 = eta^2, no residual: D^2/(2 eta) + G^2 eta / 2
    assert last_iterate_bound([0.3], D=2.0, G=5.0) == pytest.approx(4 / 0.6 + 25 * 0.3 / 2)


def test_two_step_bound_hand_computed():
    a, b, D, G = 0.5, 0.2, 1.5, 2.0
    S1, S2, Q1 = a + b, b, a * a + b * b
    want = D ** 2 / (2 * S1) + G ** 2 * Q1 / (2 * S1) + G ** 2 / 2 * (a / S2) * (Q1 / S1)
    assert last_iterate_bound([a, b], D, G) == pytest.approx(want)


@pytest.mark.parametrize("lrs", [[0.9, 0.1, 0.4, 0.3], list(cosine_schedule(17, 0.7)), list(wsd_schedule(13, 0.2))])
def test_bound_against_loop(lrs):
    assert last_iterate_bound(lrs, D=1.3, G=0.7) == pytest.approx(_bound_loop(lrs, 1.3, 0.7), rel=1e-12)
    d, g = bound_terms(lrs)
    assert d == pytest.approx(_bound_loop(lrs, 1.0, 0.0), rel=1e-12)
    assert g == pytest.approx(_bound_loop(lrs, 0.0, 1.0), rel=1e-12)


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


def test_schedules_shapes():
    assert linear_schedule(4, 2.0).tolist() == [2.0, 1.5, 1.0, 0.5]
    assert cosine_schedule(2).tolist() == pytest.approx([1.0, 0.5])
    assert cosine_schedule(4, 2.0).tolist() == pytest.approx([2.0, 1 + math.cos(math.pi / 4), 1.0,
                                                              1 + math.cos(3 * math.pi / 4)])
    assert wsd_schedule(10, 1.0, decay_frac=0.2).tolist() == [1.0] * 8 + [1.0, 0.5]
    assert wsd_schedule(10, 2.0, decay_frac=0.5).tolist() == [2.0] * 5 + [2.0, 1.6, 1.2, 0.8, 0.4]
    assert wsd_schedule(5, 1.0, decay_frac=0.01).tolist() == [1.0] * 5      # at least one decay step
    assert wsd_schedule(4, 1.0, decay_frac=1.0).tolist() == linear_schedule(4).tolist()
    assert constant_schedule(3, 0.25).tolist() == [0.25] * 3
    # unit peak by default
    assert wsd_schedule(10).max() == constant_schedule(3).max() == linear_schedule(3).max() == 1.0
    assert cosine_schedule(3).max() == 1.0


# ---------------------------------------------------------------- the fitted law
def _synthetic(A=2.0, B=0.3, L_inf=0.1, curves=False):
    law = ConvexScalingLaw("linear")
    T = np.repeat([100, 200, 400], 6)
    eta = np.tile(2.0 ** np.arange(-4, 2), 3)
    if curves:                        # every run measured at t = T/4, T/2, 3T/4, T
        T, eta = np.repeat(T, 4), np.repeat(eta, 4)
        t = (T * np.tile([1, 2, 3, 4], 18)) // 4
    else:
        t = T
    dg = np.array([law.terms(a, b) for a, b in zip(T, t)])
    y = L_inf + A * dg[:, 0] / eta + B * dg[:, 1] * eta
    return T, eta, t, y


def test_terms_of_a_prefix_are_the_bound_of_the_prefix():
    law = ConvexScalingLaw("linear")
    assert law.terms(400, 100) == pytest.approx(bound_terms(linear_schedule(400)[:100]), rel=1e-12)
    assert law.terms(400) == law.terms(400, 400) == pytest.approx(bound_terms(linear_schedule(400)))
    assert ConvexScalingLaw("cosine").terms(50, 7) == pytest.approx(bound_terms(cosine_schedule(50)[:7]))
    # a prefix of a long decay is not the full schedule of a short horizon
    assert law.terms(400, 100) != pytest.approx(law.terms(100))


def test_fit_recovers_parameters_and_extrapolates():
    T, eta, _, y = _synthetic()
    law = ConvexScalingLaw("linear").fit(T, eta, y)
    assert (law.A_, law.B_, law.L_inf_) == pytest.approx((2.0, 0.3, 0.1), rel=1e-6)
    assert law.r2_ == pytest.approx(1.0)
    T_long = 8000
    d, g = bound_terms(linear_schedule(T_long))
    assert law.predict([T_long], [0.05])[0] == pytest.approx(0.1 + 2 * d / 0.05 + 0.3 * g * 0.05)


def test_fit_on_whole_curves_and_predict_curves():
    T, eta, t, y = _synthetic(A=1.5, B=0.2, L_inf=0.7, curves=True)
    law = ConvexScalingLaw("linear").fit(T, eta, y, t=t)
    assert (law.A_, law.B_, law.L_inf_) == pytest.approx((1.5, 0.2, 0.7), rel=1e-6)
    assert law.r2_ == pytest.approx(1.0)
    d, g = bound_terms(0.25 * linear_schedule(3200)[:800])
    assert law.predict([3200], [0.25], t=[800])[0] == pytest.approx(0.7 + 1.5 * d + 0.2 * g)
    # treating the curve points as final losses of short runs is a different (wrong) model
    wrong = ConvexScalingLaw("linear").fit(t, eta, y)
    assert wrong.r2_ < 0.999


def test_fit_without_offset():
    T, eta, _, y = _synthetic(L_inf=0.0)
    law = ConvexScalingLaw("linear", fit_offset=False).fit(T, eta, y)
    assert (law.L_inf_, law.A_, law.B_) == pytest.approx((0.0, 2.0, 0.3), rel=1e-6)
    assert ConvexScalingLaw("linear", fit_offset=False).fit(T[:2], eta[:2], y[:2]).A_ >= 0


def test_fit_is_non_negative():
    # a loss that grows with 1/eta-less runs would need A < 0: NNLS keeps A = 0
    T = np.array([100, 100, 100, 200, 200, 200])
    eta = np.array([0.1, 0.2, 0.4, 0.1, 0.2, 0.4])
    law = ConvexScalingLaw().fit(T, eta, 1.0 - 0.5 / (T * eta))
    assert law.A_ == 0.0 and law.B_ >= 0.0


def test_optimal_lr_is_argmin_and_scales_as_inverse_sqrt_T():
    T, eta, _, y = _synthetic()
    law = ConvexScalingLaw("linear").fit(T, eta, y)
    for horizon in (500, 5000):
        grid = np.exp(np.linspace(np.log(1e-3), np.log(10), 20001))
        brute = grid[np.argmin(law.predict(np.full(grid.size, horizon), grid))]
        assert law.optimal_peak_lr(horizon)[0] == pytest.approx(brute, rel=1e-3)
        assert law.optimal_loss(horizon)[0] == pytest.approx(law.predict([horizon], [brute])[0], rel=1e-6)
    ratio = law.optimal_peak_lr(400)[0] / law.optimal_peak_lr(6400)[0]
    assert ratio == pytest.approx(4.0, rel=0.02)     # sqrt(6400 / 400) for linear decay
    assert law.optimal_peak_lr([400.0, 6400])[1] == law.optimal_peak_lr(6400)[0]


def test_optimal_lr_is_infinite_without_noise_term():
    T, eta, _, y = _synthetic(B=-0.05)           # loss falls with eta everywhere: NNLS sets B = 0
    law = ConvexScalingLaw().fit(T, eta, y)
    with warnings.catch_warnings():
        warnings.simplefilter("error")             # no division warning either
        assert law.B_ == 0.0 and np.isinf(law.optimal_peak_lr(400)[0])


def test_sqrt_horizon_transfer():
    assert sqrt_horizon_transfer(0.4, 100, 1600) == pytest.approx(0.1)
    assert sqrt_horizon_transfer(0.4, 100, [100, 400]).tolist() == pytest.approx([0.4, 0.2])


def test_r2_score():
    assert r2_score([1.0, 2.0, 3.0], [1.0, 2.0, 4.0]) == pytest.approx(1 - 1 / 2)
    assert r2_score([1.0, 2.0, 3.0], [2.0, 2.0, 2.0]) == pytest.approx(0.0)
    assert math.isnan(r2_score([1.0, 1.0], [1.0, 2.0]))


def test_custom_schedule_callable():
    law = ConvexScalingLaw(lambda T: np.linspace(1.0, 0.5, T))
    assert law.terms(10) == pytest.approx(bound_terms(np.linspace(1.0, 0.5, 10)))


# ---------------------------------------------------------------- rejection tests
def test_bound_accepts_zero_constants():
    assert last_iterate_bound([0.5, 0.25], D=0.0, G=1.0) == pytest.approx(bound_terms([0.5, 0.25])[1])
    assert last_iterate_bound([0.5, 0.25], D=0.5, G=0.0) == pytest.approx(0.25 * bound_terms([0.5, 0.25])[0])


def test_bound_rejects_bad_inputs():
    with pytest.raises(ValueError, match=r"^the last learning rate must be > 0: the last-iterate bound divides by "
                                         r"the suffix sum S_T = eta_T \(end a decay schedule slightly above 0\)$"):
        bound_terms([1.0, 0.0])
    with pytest.raises(ValueError, match=r"^lrs must be finite and non-negative"):
        bound_terms([1.0, -0.1, 0.2])
    with pytest.raises(ValueError, match=r"^lrs must be finite and non-negative"):
        bound_terms([1.0, np.inf, 0.2])
    with pytest.raises(ValueError, match=r"^lrs must be a non-empty 1-D sequence"):
        bound_terms([])
    with pytest.raises(ValueError, match=r"^lrs must be a non-empty 1-D sequence"):
        bound_terms([[0.1, 0.2]])
    with pytest.raises(ValueError, match=r"^D \(distance to a minimiser\) must be finite and >= 0"):
        last_iterate_bound([0.1], D=-1.0, G=1.0)
    with pytest.raises(ValueError, match=r"^G \(Lipschitz constant\) must be finite and >= 0"):
        last_iterate_bound([0.1], D=1.0, G=np.inf)


@pytest.mark.parametrize("sched", [linear_schedule, cosine_schedule, wsd_schedule, constant_schedule])
@pytest.mark.parametrize("T", [0, -3, 100.0, 100.5, "100", True])
def test_schedules_reject_non_integer_T(sched, T):
    with pytest.raises(ValueError, match=r"^T must be a positive integer"):
        sched(T)


def test_wsd_rejects_bad_decay_frac():
    with pytest.raises(ValueError, match=r"^decay_frac must be in \(0, 1\]"):
        wsd_schedule(10, decay_frac=0.0)
    with pytest.raises(ValueError, match=r"^decay_frac must be in \(0, 1\]"):
        wsd_schedule(10, decay_frac=1.5)


def test_law_rejects_non_integer_horizons_and_steps():
    law = ConvexScalingLaw()
    T, eta, _, y = _synthetic()
    bad_T = T.astype(float)
    bad_T[3] = 100.5
    with pytest.raises(ValueError, match=r"^T must be whole numbers of steps"):
        law.fit(bad_T, eta, y)
    with pytest.raises(ValueError, match=r"^T must be whole numbers of steps"):
        law.fit(np.where(T == 100, 0, T), eta, y)
    with pytest.raises(ValueError, match=r"^T must be whole numbers of steps"):
        law.fit(np.full(T.shape, True), eta, y)
    with pytest.raises(ValueError, match=r"^T must be whole numbers of steps"):
        law.terms(99.9)
    with pytest.raises(ValueError, match=r"^t must be whole numbers of steps"):
        law.terms(400, 12.5)
    with pytest.raises(ValueError, match=r"^T must be whole numbers of steps \(integers >= 1\), got 0$"):
        law.fit([100, 0, 400, 400], [0.1] * 4, [1.0] * 4)
    with pytest.raises(ValueError, match=r"^t must be whole numbers of steps \(integers >= 1\), got -2$"):
        law.fit([100, 200, 400, 400], [0.1] * 4, [1.0] * 4, t=[1, 5, -2, 7])
    with pytest.raises(ValueError, match=r"^T must be whole numbers of steps"):
        law.fit(["100", "200", "400"], [0.1] * 3, [1.0] * 3)
    # one step is a run too
    assert law.terms(1) == pytest.approx(bound_terms([1.0]))
    assert law.terms(100, 1) == pytest.approx(bound_terms([1.0]))
    law.fit(T.astype(float), eta, y)           # integral floats are horizons too
    with pytest.raises(ValueError, match=r"^T must be whole numbers of steps"):
        law.predict([400.5], [0.1])
    with pytest.raises(ValueError, match=r"^T must be whole numbers of steps"):
        law.optimal_peak_lr(6400.25)
    with pytest.raises(ValueError, match=r"^T must be whole numbers of steps"):
        law.optimal_loss([np.nan])
    with pytest.raises(ValueError, match=r"^t must be whole numbers of steps"):
        law.predict([400], [0.1], t=[12.5])
    with pytest.raises(ValueError, match=r"^t must be <= T: t is the step of a run"):
        law.predict([400], [0.1], t=[401])
    with pytest.raises(ValueError, match=r"^t must be <= T \(a step of the run\), got t = 401 > T = 400"):
        law.terms(400, 401)
    with pytest.raises(ValueError, match=r"^t must have the same length as T"):
        law.predict([400, 800], [0.1, 0.1], t=[100])
    with pytest.raises(ValueError, match=r"^T must be whole numbers of steps"):
        sqrt_horizon_transfer(0.4, 100, 1600.5)
    with pytest.raises(ValueError, match=r"^T_ref must be whole numbers of steps"):
        sqrt_horizon_transfer(0.4, 99.5, 1600)
    with pytest.raises(ValueError, match=r"^T_ref must be a single horizon"):
        sqrt_horizon_transfer(0.4, [100, 200], 1600)
    with pytest.raises(ValueError, match=r"^eta_ref must be a finite learning rate > 0"):
        sqrt_horizon_transfer(0.0, 100, 1600)


def test_law_rejects_bad_inputs():
    with pytest.raises(ValueError, match=r"^unknown schedule 'exponential'"):
        ConvexScalingLaw("exponential")
    with pytest.raises(TypeError, match=r"^schedule must be a name or a callable T -> schedule array$"):
        ConvexScalingLaw(3)
    with pytest.raises(ValueError, match=r"^the schedule for horizon 10 must have 10 learning rates"):
        ConvexScalingLaw(lambda T: np.ones(T + 1)).terms(10)
    with pytest.raises(RuntimeError, match=r"^ConvexScalingLaw is not fitted yet"):
        ConvexScalingLaw().predict([100], [0.1])
    with pytest.raises(RuntimeError, match=r"^ConvexScalingLaw is not fitted yet"):
        ConvexScalingLaw().optimal_peak_lr([100])
    with pytest.raises(RuntimeError, match=r"^ConvexScalingLaw is not fitted yet"):
        ConvexScalingLaw().optimal_loss([100])
    with pytest.raises(ValueError, match=r"^loss must be finite"):
        ConvexScalingLaw().fit([100, 200, 400], [0.1, 0.1, 0.1], [1.0, np.nan, 0.5])
    with pytest.raises(ValueError, match=r"^loss must have the same length as T"):
        ConvexScalingLaw().fit([100, 200, 400], [0.1, 0.1, 0.1], [1.0, 0.5])
    with pytest.raises(ValueError, match=r"^T and eta_peak must have the same length"):
        ConvexScalingLaw().fit([100, 200, 400], [0.1, 0.1], [1.0, 0.7, 0.5])
    with pytest.raises(ValueError, match=r"^eta_peak must be finite and > 0"):
        ConvexScalingLaw().fit([100, 200, 400], [0.1, 0.0, 0.1], [1.0, 0.7, 0.5])
    with pytest.raises(ValueError, match=r"^eta_peak must be finite and > 0"):
        ConvexScalingLaw().fit([100, 200, 400], [0.1, np.inf, 0.1], [1.0, 0.7, 0.5])
    with pytest.raises(ValueError, match=r"^need at least 3 measurements to fit"):
        ConvexScalingLaw().fit([100, 200], [0.1, 0.1], [1.0, 0.7])
    with pytest.raises(ValueError, match=r"^need at least 2 measurements to fit"):
        ConvexScalingLaw(fit_offset=False).fit([100], [0.1], [1.0])
    with pytest.raises(ValueError, match=r"^y and pred must be non-empty and of the same length"):
        r2_score([1.0, 2.0], [1.0])
    with pytest.raises(ValueError, match=r"^y and pred must be non-empty and of the same length"):
        r2_score([], [])


# ---------------------------------------------------------------- experiment helpers and smoke
def test_checkpoints_and_empirical_best():
    from iclr26.optimization.convex_lr_schedules.experiment import checkpoints, empirical_best_log2
    assert checkpoints(800) == [100, 200, 300, 400, 500, 600, 700, 800]
    assert len(checkpoints(100)) == 8 and checkpoints(100)[-1] == 100
    c = checkpoints(100, 32)
    assert len(set(c)) == 32 and c[-1] == 100 and c[7] == 25        # t = T/4 is the 8th point
    grid = np.arange(-3, 3).astype(float)
    loss = (grid - 0.3) ** 2 + 1.0                            # a parabola: exact vertex
    assert empirical_best_log2(loss, grid) == pytest.approx(0.3)
    assert empirical_best_log2(np.array([1.0, 2, 3, 4, 5, 6]), grid) == -3.0      # edge minimum
    assert empirical_best_log2(np.array([6.0, 5, 4, 3, 2, 1]), grid) == 2.0
    flat = np.array([3.0, 2.0, 1.0, 1.0, 2.0, 3.0])            # vertex between the two minima
    assert empirical_best_log2(flat, grid) == pytest.approx(-0.5)
    with_nan = np.array([3.0, np.nan, 1.0, 1.5, 2.0, 3.0])      # a diverged neighbour
    assert empirical_best_log2(with_nan, grid) == -1.0


def test_experiment_helpers_reject_bad_input():
    from iclr26.optimization.convex_lr_schedules.experiment import (SCALES, analyse, check_config,
                                                                    checkpoints, empirical_best_log2, run)
    with pytest.raises(ValueError, match=r"^T must be an integer horizon >= n_points = 32"):
        checkpoints(16, 32)
    with pytest.raises(ValueError, match=r"^T must be an integer"):
        checkpoints(True)
    with pytest.raises(ValueError, match=r"^n_points must be an integer >= 2"):
        checkpoints(100, 1.5)
    with pytest.raises(ValueError, match=r"^scale must be one of"):
        run("huge", 0)
    with pytest.raises(ValueError, match=r"^seed must be an integer >= 0"):
        run("smoke", -1)
    cfg = SCALES["quick"]
    with pytest.raises(ValueError, match=r"^cfg\['fit_from'\] must be a fraction"):
        check_config(dict(cfg, fit_from=0.5))
    with pytest.raises(ValueError, match=r"^cfg\['fit_from'\] must be a fraction"):
        check_config(dict(cfg, fit_from=0.0))
    with pytest.raises(ValueError, match=r"^cfg is missing \['fit_from'\]"):
        check_config({k: v for k, v in cfg.items() if k != "fit_from"})
    with pytest.raises(ValueError, match=r"^cfg\['fit_max_T'\] must be one of the horizons"):
        check_config(dict(cfg, fit_max_T=6400))
    with pytest.raises(ValueError, match=r"^cfg\['horizons'\] must be at least two increasing"):
        check_config(dict(cfg, horizons=[400, 200]))
    with pytest.raises(ValueError, match=r"^cfg\['window'\] must be an integer >= 0"):
        check_config(dict(cfg, window=-1))
    with pytest.raises(ValueError, match=r"^curves must have shape"):
        analyse(cfg, np.ones((7, 8, 8)), 3.0, 1.0)
    with pytest.raises(ValueError, match=r"^init_loss must be finite and above the Bayes loss"):
        analyse(cfg, np.ones((7, 8, 32)), 1.0, 1.0)
    with pytest.raises(ValueError, match=r"^final_row has no finite loss"):
        empirical_best_log2(np.full(3, np.nan), np.arange(3.0))
    with pytest.raises(ValueError, match=r"^final_row and grid_log2 must be 1-D of the same length"):
        empirical_best_log2(np.ones(3), np.arange(4.0))


def test_grid_raises_when_every_run_diverges():
    from iclr26.optimization.convex_lr_schedules.experiment import run_grid
    cfg = dict(horizons=[8, 16], fit_max_T=8, lr_grid_log2=[40, 41, 42], hidden=4, batch=4,
               n_eval=16, window=1, n_points=8, fit_from=0.25)
    with pytest.raises(FloatingPointError, match=r"^every run of the grid diverged"):
        run_grid(cfg, 0)


def _law_curves(cfg, bump=0.0, late=0.0):
    """Curves that follow the law exactly (L_inf = 1, A = 2, B = 0.05), plus ``bump`` on the points
    before T/4 (a pre-convex phase) and ``late`` on the points after T/2."""
    from iclr26.optimization.convex_lr_schedules.experiment import checkpoints
    law = ConvexScalingLaw("linear")
    n = cfg["n_points"]
    out = np.zeros((len(cfg["horizons"]), len(cfg["lr_grid_log2"]), n))
    for i, T in enumerate(cfg["horizons"]):
        for j, e in enumerate(cfg["lr_grid_log2"]):
            for k, t in enumerate(checkpoints(T, n)):
                d, g = law.terms(T, t)
                out[i, j, k] = 1.0 + 2.0 * d / 2.0 ** e + 0.05 * g * 2.0 ** e
            out[i, j, : n // 4 - 1] += bump
            out[i, j, n // 2:] += late * np.linspace(0, 1, n - n // 2)
    return out


_SYN = dict(horizons=[100, 200, 400, 800, 1600], fit_max_T=200, lr_grid_log2=list(range(-5, 3)),
            hidden=8, batch=8, n_eval=16, window=2, n_points=16, fit_from=0.25)


def test_analyse_recovers_a_law_and_leaves_out_the_initial_phase():
    from iclr26.optimization.convex_lr_schedules.experiment import analyse
    curves = _law_curves(_SYN, bump=0.5)
    out = analyse(_SYN, curves, init_loss=3.0 * curves.max(), bayes=0.9)
    m, info = out["metrics"], out["info"]
    # the law's own curves past T/4: every held-out R^2 is 1, whatever the first quarter does
    assert m["heldout_r2"]["convex_law"] == pytest.approx(1.0, abs=1e-6)
    assert m["seq2seq_r2"]["convex_law"] == pytest.approx(1.0, abs=1e-6)
    assert m["seq2seq_r2"]["convex_law_per_run"] == pytest.approx(1.0, abs=1e-4)
    assert m["fit_r2"]["convex_law"] == pytest.approx(1.0, abs=1e-6)
    assert info["fit"]["L_inf"] == pytest.approx(1.0, rel=1e-5)
    assert info["fit"]["A"] == pytest.approx(2.0, rel=1e-5)
    assert info["fit"]["B"] == pytest.approx(0.05, rel=1e-5)
    assert m["lr_log2_error"]["convex_law"] < 0.35     # the grid optimum, interpolated
    # the window of earlier versions (from t = T/8) takes in the bumped point and fits worse
    assert info["from_T_over_8"]["seq2seq_r2"] < 0.99
    assert info["from_T_over_8"]["heldout_r2"] < 0.99


def test_analyse_scores_held_out_points_only():
    # a second half that departs from the law: the fits never see it (in-sample R^2 stays 1),
    # the held-out R^2 must fall
    from iclr26.optimization.convex_lr_schedules.experiment import analyse
    curves = _law_curves(_SYN, late=-0.3)
    out = analyse(_SYN, curves, init_loss=3.0 * curves.max(), bayes=0.5)
    m = out["metrics"]
    assert out["info"]["fit_seq2seq"]["r2_fit"] == pytest.approx(1.0, abs=1e-6)
    assert m["seq2seq_r2"]["convex_law"] < 0.95
    assert m["seq2seq_r2"]["convex_law_per_run"] < 0.95
    assert m["heldout_r2"]["convex_law"] < 0.95


def test_experiment_smoke():
    from iclr26.optimization.convex_lr_schedules.experiment import run
    out = run("smoke", 0)
    m = out["metrics"]
    assert set(m["extrap_log_error"]) == {"convex_law", "power_law", "persistence", "initial_loss"}
    assert set(m["lr_log2_error"]) == {"convex_law", "constant_transfer"}
    assert set(m["seq2seq_r2"]) == {"convex_law", "convex_law_per_run"}
    assert set(m["fit_r2"]) == {"convex_law"} and set(m["gap_closed"]) == {"sgd"}
    assert all(np.isfinite(v) for metric in m.values() for v in metric.values())
    assert np.array(out["info"]["heldout_runs"]).sum() > 0 and np.array(out["info"]["fit_runs"]).sum() > 0
    assert len(out["info"]["checkpoints"][0]) == 16
