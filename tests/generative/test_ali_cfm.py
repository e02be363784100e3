"""Tests of ALI-CFM and its OT-CFM / MMFM baselines (src/iclr26/generative/ali_cfm)."""
import numpy as np
import pytest
import torch

from iclr26.generative.ali_cfm import (ALICFM, AdversarialInterpolant, Discriminator, MultiMarginalFlowMatcher,
                                       VectorField, exact_ot_plan, integrate, sample_conditional, sample_plan,
                                       train_interpolant, train_vector_field)


def snapshots(times, n=60, seed=0):
    """A curved path: mean (4t, 3 sin(pi t)), anisotropic noise (not a near-uniform random model)."""
    rng = np.random.default_rng(seed)
    return [(rng.normal(size=(n, 2)) * [0.5, 0.3] + [4 * t, 3 * np.sin(np.pi * t)]).astype(np.float32)
            for t in times]


def trained_interp(dim=2, seed=0):
    torch.manual_seed(seed)
    m = AdversarialInterpolant(dim, width=16, depth=2, zero_init=False)
    return m


def match_rows(a, b, atol=1e-5):
    """For each row of a, the index of the equal row of b (asserts one exists)."""
    d = torch.cdist(a.double(), b.double())
    v, i = d.min(1)
    assert float(v.max()) < atol, float(v.max())
    return i


# ---------------------------------------------------------------- equations

def test_interpolant_matches_its_definition_and_endpoints():
    m = trained_interp()
    g = torch.Generator().manual_seed(1)
    x0, x1, t = torch.randn(9, 2, generator=g), torch.randn(9, 2, generator=g), torch.rand(9, generator=g)
    f = m.f(torch.cat([x0, x1, t[:, None]], 1))
    ref = (1 - t[:, None]) * x0 + t[:, None] * x1 + t[:, None] * (1 - t[:, None]) * f
    torch.testing.assert_close(m(x0, x1, t), ref)
    assert float(f.abs().mean()) > 1e-2                      # the correction is not trivially zero
    torch.testing.assert_close(m(x0, x1, 0.0), x0)
    torch.testing.assert_close(m(x0, x1, 1.0), x1)


def test_velocity_equals_autograd_and_finite_difference_time_derivative():
    m = trained_interp().double()
    g = torch.Generator().manual_seed(2)
    x0 = torch.randn(7, 2, generator=g, dtype=torch.float64)
    x1 = torch.randn(7, 2, generator=g, dtype=torch.float64)
    t = torch.rand(7, generator=g, dtype=torch.float64).requires_grad_(True)
    out = m(x0, x1, t)
    grads = torch.stack([torch.autograd.grad(out[:, k].sum(), t, retain_graph=True)[0] for k in range(2)], 1)
    v = m.velocity(x0, x1, t.detach())
    torch.testing.assert_close(v, grads)
    h = 1e-6
    fd = (m(x0, x1, t.detach() + h) - m(x0, x1, t.detach() - h)) / (2 * h)
    torch.testing.assert_close(v, fd.detach(), rtol=1e-6, atol=1e-7)
    assert float((v - (x1 - x0)).abs().max()) > 1e-3          # the correction changes the velocity
    assert not v.requires_grad
    vg = m.velocity(x0, x1, t.detach(), create_graph=True)
    assert vg.requires_grad
    torch.testing.assert_close(vg.detach(), v)


# ---------------------------------------------------------------- reductions

def test_zero_correction_gives_the_linear_interpolant_and_ot_cfm_targets():
    m = AdversarialInterpolant(2, width=8, depth=2)                # zero_init: f = 0
    g = torch.Generator().manual_seed(0)
    x0, x1, t = torch.randn(5, 2, generator=g), torch.randn(5, 2, generator=g), torch.rand(5, generator=g)
    torch.testing.assert_close(m(x0, x1, t), (1 - t[:, None]) * x0 + t[:, None] * x1)
    torch.testing.assert_close(m.velocity(x0, x1, t), x1 - x0)
    snaps = snapshots([0.0, 0.5, 1.0], n=40)
    fm = MultiMarginalFlowMatcher(snaps, [0.0, 0.5, 1.0], "adversarial", m)
    xs = [torch.as_tensor(s) for s in snaps]
    perm = fm.plans[0].argmax(1)                                  # equal sizes: the plan is a permutation
    assert torch.allclose(fm.plans[0].sum(1), torch.full((40,), 1 / 40, dtype=torch.float64))
    t, xt, ut = fm.sample_location_and_conditional_flow(64, torch.Generator().manual_seed(3))
    i = match_rows(xt - t[:, None] * ut, xs[0])                   # x_t - t u_t is the source point
    torch.testing.assert_close(xt + (1 - t[:, None]) * ut, xs[2][perm[i]])   # ... paired by the OT plan


def test_ot_linear_targets_are_piecewise_linear_between_ot_paired_snapshots():
    times = [0.0, 0.3, 1.0]
    snaps = snapshots(times, n=30)
    xs = [torch.as_tensor(s) for s in snaps]
    fm = MultiMarginalFlowMatcher(snaps, [2.0, 2.6, 4.0], "ot_linear")      # rescaled to 0, 0.3, 1
    np.testing.assert_allclose(fm.times, times)
    t, xt, ut = fm.sample_location_and_conditional_flow(200, torch.Generator().manual_seed(1))
    for s, (lo, hi) in enumerate([(0.0, 0.3), (0.3, 1.0)]):
        m = (t >= lo) & (t < hi)
        assert m.sum() > 20
        a = xt[m] - (t[m] - lo)[:, None] * ut[m]
        b = xt[m] + (hi - t[m])[:, None] * ut[m]
        i, j = match_rows(a, xs[s], 1e-4), match_rows(b, xs[s + 1], 1e-4)
        assert torch.equal(fm.plans[s].argmax(1)[i], j)


def test_cubic_spline_passes_through_ot_chains_with_consistent_derivative():
    times = [0.0, 0.25, 0.75, 1.0]
    snaps = snapshots(times, n=30)
    xs = [torch.as_tensor(s) for s in snaps]
    fm = MultiMarginalFlowMatcher(snaps, times, "cubic_spline", n_chains=50, generator=torch.Generator().manual_seed(0))
    assert fm.chains.shape == (4, 50, 2)
    for k in range(3):                                            # each link follows the consecutive OT plan
        i, j = match_rows(fm.chains[k], xs[k]), match_rows(fm.chains[k + 1], xs[k + 1])
        assert torch.equal(fm.plans[k].argmax(1)[i], j)
    for k, tk in enumerate(times):
        np.testing.assert_allclose(fm.spline(tk), fm.chains[k].double().numpy(), atol=1e-6)
    t, xt, ut = fm.sample_location_and_conditional_flow(40, torch.Generator().manual_seed(2))
    h = 1e-5
    tn = t.double().numpy()
    c = match_rows(xt, torch.from_numpy(fm.spline(tn)[np.arange(40), :, :].reshape(-1, 2)).float(), 1e-4) % 50
    fd = (fm.spline(tn + h) - fm.spline(tn - h))[np.arange(40), c.numpy()] / (2 * h)
    np.testing.assert_allclose(ut.numpy(), fd, rtol=1e-3, atol=1e-3)
    assert float(ut.std()) > 0.1


def test_ot_plan_is_monotone_in_one_dimension_and_samplers_follow_it():
    rng = np.random.default_rng(0)
    a, b = np.sort(rng.normal(size=12))[:, None], np.sort(rng.normal(size=12) + 3)[:, None]
    pa = rng.permutation(12)
    plan = exact_ot_plan(a[pa], b)
    torch.testing.assert_close(plan.argmax(1), torch.as_tensor(pa))   # rank k goes to rank k
    torch.testing.assert_close(plan.sum(), torch.tensor(1.0, dtype=torch.float64))
    i, j = sample_plan(plan, 500, torch.Generator().manual_seed(0))
    assert torch.equal(plan.argmax(1)[i], j) and len(set(i.tolist())) == 12
    jj = sample_conditional(plan, torch.arange(12), torch.Generator().manual_seed(0))
    assert torch.equal(jj, plan.argmax(1))
    p = torch.tensor([[0.5, 0.0], [0.0, 0.5]], dtype=torch.float64)
    assert torch.equal(sample_conditional(p, torch.tensor([1, 0, 1])), torch.tensor([1, 0, 1]))
    i, j = sample_plan(torch.tensor([[0.0, 1.0], [0.0, 0.0]], dtype=torch.float64), 5)
    assert i.tolist() == [0] * 5 and j.tolist() == [1] * 5


def test_rk4_integrates_a_linear_field_exactly_enough():
    class Lin(torch.nn.Module):
        def forward(self, x, t):
            return x * 0.5 + t
    x0 = torch.tensor([[1.0, -2.0]])
    x = integrate(Lin(), x0, 1.0, n_steps=20)
    # dx/dt = x/2 + t: x(t) = (x0 + 4) e^{t/2} - 2 t - 4
    ref = (x0 + 4) * np.exp(0.5) - 2 - 4
    torch.testing.assert_close(x, ref, rtol=1e-6, atol=1e-6)
    x = integrate(Lin(), x0, 0.8, n_steps=16, t_start=0.3)
    ref = (x0 + 2 * 0.3 + 4) * np.exp(0.25) - 2 * 0.8 - 4
    torch.testing.assert_close(x, ref, rtol=1e-6, atol=1e-6)


# ---------------------------------------------------------------- learning

def test_adversarial_interpolant_bends_towards_the_intermediate_snapshot():
    times = [0.0, 0.5, 1.0]
    snaps = snapshots(times, n=200, seed=1)                       # mid-snapshot mean (2, 3)
    torch.manual_seed(0)
    m, d = AdversarialInterpolant(2, width=32, depth=2), Discriminator(2, width=32, depth=2)
    hist = train_interpolant(m, d, snaps, times, steps=300, batch_size=64, lr=3e-3,
                             generator=torch.Generator().manual_seed(0))
    assert len(hist["d"]) == len(hist["g"]) == 300 and np.isfinite(hist["g"]).all()
    x0, x1 = torch.as_tensor(snaps[0]), torch.as_tensor(snaps[2])
    perm = exact_ot_plan(x0, x1).argmax(1)
    with torch.no_grad():
        mid = m(x0, x1[perm], 0.5).mean(0)
    assert float(mid[1]) > 1.5                                     # linear interpolant: about 0
    assert abs(float(mid[0]) - 2.0) < 0.7


def test_regulariser_shrinks_the_correction():
    times = [0.0, 0.5, 1.0]
    snaps = snapshots(times, n=100, seed=2)
    outs = []
    for reg in (0.0, 5.0):
        torch.manual_seed(0)
        m, d = AdversarialInterpolant(2, width=16, depth=2), Discriminator(2, width=16, depth=2)
        train_interpolant(m, d, snaps, times, steps=80, batch_size=32, lr=3e-3, reg=reg,
                          generator=torch.Generator().manual_seed(0))
        x = torch.as_tensor(snaps[0])
        outs.append(float(m.correction(x, x, torch.full((100,), 0.5)).pow(2).sum(1).mean()))
    assert outs[1] < 0.5 * outs[0]


def test_vector_field_regression_reduces_the_loss_and_estimator_reaches_the_end_marginal():
    times = [0.0, 0.5, 1.0]
    snaps = snapshots(times, n=100, seed=3)
    for interp in ("adversarial", "ot_linear", "cubic_spline"):
        est = ALICFM(interp, width=32, depth=2, gan_steps=40, cfm_steps=300, batch_size=64, lr=3e-3,
                     ode_steps=20, seed=0).fit(snaps, times)
        assert np.mean(est.cfm_losses_[-30:]) < 0.5 * np.mean(est.cfm_losses_[:10])
        out = est.predict(snaps[0], 1.0)
        assert out.shape == (100, 2)
        np.testing.assert_allclose(out.mean(0), snaps[2].mean(0), atol=0.6)
        assert (est.interpolant_model_ is None) == (interp != "adversarial")
        np.testing.assert_allclose(est.predict(snaps[0], 0.0), snaps[0], atol=1e-6)


def test_vector_field_training_with_a_fixed_matcher():
    times = [0.0, 1.0, 2.0]
    fm = MultiMarginalFlowMatcher(snapshots([0.0, 0.5, 1.0], n=50), times, "ot_linear")
    torch.manual_seed(0)
    v = VectorField(2, width=16, depth=2)
    losses = train_vector_field(v, fm, steps=150, batch_size=64, lr=5e-3, generator=torch.Generator().manual_seed(0))
    assert len(losses) == 150 and np.mean(losses[-20:]) < np.mean(losses[:5])


# ---------------------------------------------------------------- contracts

def test_state_dict_round_trip_and_float64():
    m = trained_interp()
    m2 = AdversarialInterpolant(2, width=16, depth=2)
    m2.load_state_dict(m.state_dict())
    x = torch.randn(4, 2)
    torch.testing.assert_close(m2(x, x + 1, 0.3), m(x, x + 1, 0.3))
    md = m.double()
    out = md(x.double(), x.double(), torch.full((4,), 0.3, dtype=torch.float64))
    assert out.dtype == torch.float64
    d = Discriminator(2, width=8, depth=1)
    assert d(x, 0.5).shape == (4,)
    assert VectorField(2, width=8, depth=1)(x, 0.5).shape == (4, 2)


# ---------------------------------------------------------------- rejections

def test_rejections_name_what_is_wrong():
    snaps = snapshots([0.0, 0.5, 1.0], n=10)
    with pytest.raises(ValueError, match="interpolant must be one of"):
        ALICFM("linear")
    with pytest.raises(ValueError, match="interpolant must be one of"):
        MultiMarginalFlowMatcher(snaps, [0, 0.5, 1], "spline")
    with pytest.raises(ValueError, match="needs a model"):
        MultiMarginalFlowMatcher(snaps, [0, 0.5, 1], "adversarial")
    with pytest.raises(ValueError, match="strictly increasing"):
        MultiMarginalFlowMatcher(snaps, [0, 0.5, 0.5], "ot_linear")
    with pytest.raises(ValueError, match="3 snapshots but 2 times"):
        MultiMarginalFlowMatcher(snaps, [0, 1], "ot_linear")
    with pytest.raises(ValueError, match="at least two snapshots"):
        MultiMarginalFlowMatcher(snaps[:1], [0.0], "ot_linear")
    with pytest.raises(ValueError, match="one common d"):
        MultiMarginalFlowMatcher([snaps[0], snaps[1][:, :1]], [0, 1], "ot_linear")
    with pytest.raises(ValueError, match="n_i >= 2"):
        MultiMarginalFlowMatcher([snaps[0], snaps[1][:1]], [0, 1], "ot_linear")
    with pytest.raises(ValueError, match="at least one intermediate snapshot"):
        train_interpolant(AdversarialInterpolant(2), Discriminator(2), snaps[:2], [0, 1])
    with pytest.raises(ValueError, match="steps must be >= 0 and batch_size >= 2"):
        train_interpolant(AdversarialInterpolant(2), Discriminator(2), snaps, [0, 0.5, 1], steps=-1)
    with pytest.raises(ValueError, match="steps must be >= 0 and batch_size >= 2"):
        train_interpolant(AdversarialInterpolant(2), Discriminator(2), snaps, [0, 0.5, 1], batch_size=1)
    with pytest.raises(ValueError, match=r"dim, width and depth must be >= 1"):
        AdversarialInterpolant(0)
    with pytest.raises(ValueError, match=r"t must be a scalar or have shape \(3,\)"):
        AdversarialInterpolant(2)(torch.zeros(3, 2), torch.zeros(3, 2), torch.zeros(2))
    with pytest.raises(ValueError, match="same d"):
        exact_ot_plan(torch.zeros(3, 2), torch.zeros(3, 1))
    with pytest.raises(ValueError, match="n_steps must be >= 1"):
        integrate(VectorField(2), torch.zeros(2, 2), 1.0, n_steps=0)
    with pytest.raises(RuntimeError, match="fit"):
        ALICFM().predict(snaps[0], 0.5)
    est = ALICFM("ot_linear", cfm_steps=1, batch_size=4, width=4, depth=1).fit(snaps, [1.0, 2.0, 3.0])
    with pytest.raises(ValueError, match=r"t_eval must lie in \[1.0, 3.0\]"):
        est.predict(snaps[0], 0.5)
    assert est.predict(snaps[0], 3.0).shape == (10, 2)


def test_quick_scale_would_run_the_library_component():
    from iclr26.generative.ali_cfm import experiment
    assert experiment.SEEDS["quick"] >= 5
    assert experiment.HELD_OUT not in experiment.OBSERVED


def test_estimator_defaults_and_that_fit_uses_its_settings():
    est = ALICFM()
    assert (est.interpolant, est.width, est.depth, est.gan_steps, est.cfm_steps, est.batch_size, est.lr,
            est.reg, est.ode_steps, est.seed) == ("adversarial", 64, 3, 2000, 2000, 256, 1e-3, 0.0, 50, 0)
    times = [0.0, 0.5, 1.0]
    snaps = snapshots(times, n=40, seed=4)
    kw = dict(width=12, depth=2, gan_steps=7, cfm_steps=9, batch_size=16, lr=2e-3, ode_steps=8)
    a = ALICFM("adversarial", seed=3, **kw).fit(snaps, times)
    assert len(a.gan_history_["d"]) == 7 and len(a.cfm_losses_) == 9
    assert a.field_.net[0].out_features == 12 and len(a.field_.net) == 5
    assert a.interpolant_model_.f[0].out_features == 12 and len(a.interpolant_model_.f) == 5
    assert a.discriminator_.net[0].out_features == 12 and len(a.discriminator_.net) == 5
    b = ALICFM("adversarial", seed=3, **kw).fit(snaps, times)
    np.testing.assert_array_equal(a.predict(snaps[0], 0.5), b.predict(snaps[0], 0.5))
    c = ALICFM("adversarial", seed=4, **kw).fit(snaps, times)
    assert not np.allclose(a.predict(snaps[0], 0.5), c.predict(snaps[0], 0.5))
    # predict integrates with round(ode_steps * s) RK4 steps on the rescaled time
    ref = integrate(a.field_, torch.as_tensor(snaps[0]), 0.5, 4).numpy()
    np.testing.assert_allclose(a.predict(snaps[0], 0.5), ref, rtol=1e-6, atol=1e-6)
    ref1 = integrate(a.field_, torch.as_tensor(snaps[0]), 0.05, 1).numpy()
    np.testing.assert_allclose(a.predict(snaps[0], 0.05), ref1, rtol=1e-6, atol=1e-6)
    # lr reaches both stages: with lr = 0 nothing moves
    z = ALICFM("adversarial", seed=3, **{**kw, "lr": 0.0}).fit(snaps, times)
    assert float(z.interpolant_model_.f[-1].weight.abs().max()) == 0.0
    assert len(z.cfm_losses_) == 9 and np.ptp(z.cfm_losses_) > 0      # fresh batches, same field


def test_training_loops_take_optimiser_steps_and_compute_their_losses():
    times = [0.0, 0.5, 1.0]
    snaps = snapshots(times, n=40, seed=5)
    torch.manual_seed(0)
    m, d = AdversarialInterpolant(2, 8, 2, zero_init=False), Discriminator(2, 8, 2)
    m0 = [p.detach().clone() for p in m.parameters()]
    d0 = [p.detach().clone() for p in d.parameters()]
    h = train_interpolant(m, d, snaps, times, steps=1, batch_size=16, lr=1e-2, generator=torch.Generator().manual_seed(0))
    assert all(not torch.equal(a, b) for a, b in zip(m0, m.parameters()))
    assert all(not torch.equal(a, b) for a, b in zip(d0, d.parameters()))
    assert h["d"][0] == pytest.approx(2 * np.log(2), abs=0.3) and h["g"][0] > 0
    fm = MultiMarginalFlowMatcher(snaps, times, "ot_linear")
    v = VectorField(2, 8, 2)
    g1, g2 = torch.Generator().manual_seed(1), torch.Generator().manual_seed(1)
    with torch.no_grad():
        t, xt, ut = fm.sample_location_and_conditional_flow(16, g2)
        ref = float((v(xt, t) - ut).pow(2).sum(1).mean())
    losses = train_vector_field(v, fm, steps=1, batch_size=16, lr=0.5, generator=g1)
    assert losses[0] == pytest.approx(ref, rel=1e-5)
