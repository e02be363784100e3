"""Tests of the product-of-experts sampler (src/iclr26/generative/poe_sampler)."""
import math

import numpy as np
import pytest
import torch

from iclr26.generative.poe_sampler import (FlowExpert, GaussianConstraintExpert, ProductOfExpertsSampler,
                                           RewardExpert, flow_score_from_velocity, tweedie_x0)
from iclr26.models import diffusion as D


def gauss_expert(mu, std):
    """Exact flow-path score of N(mu, std^2 I): the marginal at t is N((1-t) mu, (1-t)^2 std^2 + t^2)."""
    mu = torch.as_tensor(mu, dtype=torch.float64)

    def score(x, t):
        t = t[:, None]
        return -(x - (1 - t) * mu) / ((1 - t) ** 2 * std**2 + t**2)
    return FlowExpert(score)


def mix_expert(g):
    return FlowExpert(lambda x, t: torch.from_numpy(g.noised(1 - float(t[0]), float(t[0])).score(x.numpy())))


def test_score_velocity_and_tweedie_identities():
    g = D.GaussianMixture([[1.0, 0.5], [-2.0, 0.0]], std=[0.6, 1.1], weights=[0.4, 0.6])
    m = D.ExactMixtureModel(g, "flow")
    x = torch.randn(7, 2, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    t = 0.35
    v = m(x, torch.full((7,), t, dtype=torch.float64), torch.full((7,), 2))
    score = g.noised(1 - t, t).score(x.numpy())
    np.testing.assert_allclose(flow_score_from_velocity(x, t, v).numpy(), score, rtol=1e-10)
    # Tweedie for a single Gaussian N(mu, s^2): E[x0 | xt] = mu + (1-t) s^2 / ((1-t)^2 s^2 + t^2) (xt - (1-t) mu)
    mu, s = torch.tensor([1.5, -0.5], dtype=torch.float64), 0.8
    sc = gauss_expert(mu, s).score(x, torch.full((7,), t, dtype=torch.float64))
    ref = mu + (1 - t) * s**2 / ((1 - t) ** 2 * s**2 + t**2) * (x - (1 - t) * mu)
    torch.testing.assert_close(tweedie_x0(x, t, sc), ref)
    e = FlowExpert.from_velocity(lambda xx, tt: m(xx, tt, torch.full((len(xx),), 2)))
    torch.testing.assert_close(e.score(x, torch.full((7,), t, dtype=torch.float64)),
                               torch.from_numpy(score))


def test_reduction_to_the_experts_own_deterministic_sampler():
    e = gauss_expert([1.0, -1.0], 0.5)
    s = ProductOfExpertsSampler([e], [], n_particles=1, n_steps=12, langevin_steps=0, t_max=0.9, t_min=0.05)
    g = torch.Generator().manual_seed(3)
    out, info = s.sample(5, 2, generator=g)
    x = torch.randn((5, 2), generator=torch.Generator().manual_seed(3), dtype=torch.float64) * 0.9
    ts = torch.linspace(0.9, 0.05, 13, dtype=torch.float64).tolist()
    for t, tn in zip(ts[:-1], ts[1:]):
        v = -(x + t * e.score(x, torch.full((5,), t, dtype=torch.float64))) / (1 - t)   # v from the score
        x = x + (tn - t) * v                                                           # Euler
    ref = tweedie_x0(x, ts[-1], e.score(x, torch.full((5,), ts[-1], dtype=torch.float64)))
    torch.testing.assert_close(out, ref)
    assert info["n_resample"] == 0


def test_annealed_mcmc_samples_a_product_of_gaussians_and_beats_naive():
    # N(2, 1) x N(-1, 0.5^2) = N(mu, v), v = 1 / (1 + 4) = 0.2, mu = v (2 + 4 * -1) = -0.4
    experts = [gauss_expert([2.0], 1.0), gauss_expert([-1.0], 0.5)]
    gen = lambda: torch.Generator().manual_seed(0)
    full = ProductOfExpertsSampler(experts, [], n_particles=1, n_steps=40, langevin_steps=4, step_size=0.5)
    naive = ProductOfExpertsSampler(experts, [], n_particles=1, n_steps=40, langevin_steps=0)
    x = full.sample(4000, 1, generator=gen())[0].numpy()[:, 0]
    xn = naive.sample(4000, 1, generator=gen())[0].numpy()[:, 0]
    assert x.mean() == pytest.approx(-0.4, abs=0.05) and x.var() == pytest.approx(0.2, abs=0.03)
    err = abs(x.mean() + 0.4) + abs(x.var() - 0.2)
    err_naive = abs(xn.mean() + 0.4) + abs(xn.var() - 0.2)
    assert err < err_naive


def test_smc_reweights_by_a_non_differentiable_reward():
    # N(0, 1) x exp(lam * 1[x > 0]): P(x > 0) = e^lam / (1 + e^lam)
    lam = 1.5
    e = gauss_expert([0.0], 1.0)
    r = RewardExpert(lambda x: (x[:, 0] > 0).double(), weight=lam)
    s = ProductOfExpertsSampler([e], [r], n_particles=16, n_steps=30, langevin_steps=1, step_size=0.3)
    x, info = s.sample(3000, 1, generator=torch.Generator().manual_seed(0))
    assert (x[:, 0] > 0).double().mean() == pytest.approx(math.exp(lam) / (1 + math.exp(lam)), abs=0.04)
    assert info["n_resample"] == 30
    s0 = ProductOfExpertsSampler([e], [r], n_particles=1, n_steps=30, langevin_steps=1, step_size=0.3)
    x0, info0 = s0.sample(3000, 1, generator=torch.Generator().manual_seed(0))
    assert (x0[:, 0] > 0).double().mean() == pytest.approx(0.5, abs=0.04) and info0["n_resample"] == 0
    # importance weighting at the end only (no resampling) also tilts, "best" takes the top reward
    sn = ProductOfExpertsSampler([e], [r], n_particles=16, n_steps=30, langevin_steps=1, step_size=0.3, resample=False)
    xn, infon = sn.sample(3000, 1, generator=torch.Generator().manual_seed(0))
    assert (xn[:, 0] > 0).double().mean() == pytest.approx(math.exp(lam) / (1 + math.exp(lam)), abs=0.04)
    assert infon["n_resample"] == 0
    sb = ProductOfExpertsSampler([e], [r], n_particles=16, n_steps=10, langevin_steps=0, select="best", resample=False)
    xb, _ = sb.sample(500, 1, generator=torch.Generator().manual_seed(0))
    assert (xb[:, 0] > 0).double().mean() > 0.99


def test_gaussian_constraint_and_reward_contracts():
    c = GaussianConstraintExpert([1.0, 2.0], w=0.5)
    x = torch.tensor([[1.0, 2.0], [0.0, 0.0]], dtype=torch.float64)
    torch.testing.assert_close(c.log_weight(x), torch.tensor([0.0, -2.5], dtype=torch.float64))
    with pytest.raises(ValueError, match="one value per sample"):
        RewardExpert(lambda x: x).log_weight(x)
    with pytest.raises(ValueError, match="w must be a finite number >= 0"):
        GaussianConstraintExpert([0.0], w=-1.0)
    with pytest.raises(ValueError, match="weight must be finite"):
        RewardExpert(lambda x: x[:, 0], weight=float("inf"))
    with pytest.raises(TypeError, match="reward_fn must be callable"):
        RewardExpert(3.0)
    with pytest.raises(TypeError, match="score_fn must be callable"):
        FlowExpert(None)
    with pytest.raises(TypeError, match="velocity_fn must be callable"):
        FlowExpert.from_velocity(None)


def test_resampling_stays_within_chains():
    s = ProductOfExpertsSampler([gauss_expert([0.0], 1.0)], [], n_particles=4)
    logw = torch.tensor([0.0, -50, -50, -50, -50, -50, -50, 0.0, -50, 0.0, -50, -50], dtype=torch.float64)
    idx = s._resample(logw, 3, torch.Generator().manual_seed(0))
    assert idx.tolist() == [0] * 4 + [7] * 4 + [9] * 4


@pytest.mark.parametrize("kw,err,match", [
    (dict(generative_experts=[]), ValueError, "at least one generative expert"),
    (dict(generative_experts=["x"]), TypeError, "FlowExpert instances"),
    (dict(discriminative_experts=[lambda x: x]), TypeError, "RewardExpert instances"),
    (dict(n_particles=0), ValueError, "n_particles must be >= 1, got 0"),
    (dict(n_steps=0), ValueError, "n_steps must be >= 1, got 0"),
    (dict(langevin_steps=-1), ValueError, "langevin_steps must be >= 0, got -1"),
    (dict(n_particles=2.5), TypeError, r"n_particles must be an integer, got 2.5"),
    (dict(n_particles=16.0), TypeError, r"n_particles must be an integer, got 16.0"),
    (dict(n_particles=True), TypeError, r"n_particles must be an integer, got True"),
    (dict(n_steps=10.5), TypeError, r"n_steps must be an integer"),
    (dict(langevin_steps=1.5), TypeError, r"langevin_steps must be an integer"),
    (dict(resample=1), TypeError, r"resample must be a bool, got 1"),
    (dict(step_size=0.0), ValueError, "step_size must be > 0"),
    (dict(t_min=0.5, t_max=0.4), ValueError, "0 < t_min < t_max < 1"),
    (dict(t_max=1.0), ValueError, "t_max=1.0"),
    (dict(select="max"), ValueError, "select must be 'weighted' or 'best'"),
])
def test_rejections(kw, err, match):
    args = dict(generative_experts=[gauss_expert([0.0], 1.0)])
    args.update(kw)
    with pytest.raises(err, match=match):
        ProductOfExpertsSampler(**args)


def test_sample_rejections_and_defaults():
    s = ProductOfExpertsSampler([gauss_expert([0.0], 1.0)])
    assert (s.n_particles, s.n_steps, s.langevin_steps, s.step_size, s.t_max, s.t_min, s.select, s.resample) == \
        (8, 50, 2, 0.1, 0.98, 0.02, "weighted", True)
    with pytest.raises(ValueError, match="n_chains must be >= 1, got 0"):
        s.sample(0, 1)
    with pytest.raises(ValueError, match="dim must be >= 1, got 0"):
        s.sample(1, 0)
    with pytest.raises(TypeError, match="n_chains must be an integer, got 2.5"):
        s.sample(2.5, 1)
    assert ProductOfExpertsSampler([gauss_expert([0.0], 1.0)], n_particles=np.int64(3)).n_particles == 3
    x, _ = s.sample(3, 2, dtype=torch.float32)
    assert x.shape == (3, 2) and x.dtype == torch.float32


def test_exact_product_mixture_and_truth():
    from iclr26.generative.poe_sampler.experiment import experts, mmd, product_mixture, truth_samples

    p1, p2 = experts()
    prod = product_mixture(p1, p2)
    xs = np.linspace(-6, 6, 241)
    grid = np.stack(np.meshgrid(xs, xs), -1).reshape(-1, 2)
    dens = np.exp(p1.log_prob(grid) + p2.log_prob(grid))
    dens /= dens.sum()
    np.testing.assert_allclose(np.exp(prod.log_prob(grid)) * (xs[1] - xs[0]) ** 2, dens, atol=2e-6)
    t = truth_samples(4000, 2.0, np.random.default_rng(0))
    up = (dens * (grid[:, 1] > 0)).sum()
    assert (t[:, 1] > 0).mean() == pytest.approx(up * math.e**2 / (up * math.e**2 + 1 - up), abs=0.03)
    a = np.random.default_rng(1).standard_normal((300, 2))
    assert mmd(a, a) == pytest.approx(0.0, abs=1e-6)
    assert mmd(a, a + 3.0) > 0.5


def test_exact_messages_defaults_and_edge_values():
    e = gauss_expert([0.0], 1.0)
    with pytest.raises(TypeError, match=r"^score_fn must be callable: \(x \(N, D\), t \(N,\)\) -> score \(N, D\)$"):
        FlowExpert(1)
    with pytest.raises(TypeError, match=r"^velocity_fn must be callable: \(x \(N, D\), t \(N,\)\) -> v \(N, D\)$"):
        FlowExpert.from_velocity(1)
    with pytest.raises(TypeError, match=r"^reward_fn must be callable: x0 \(N, D\) -> log-weights \(N,\)$"):
        RewardExpert(1)
    with pytest.raises(ValueError, match="^need at least one generative expert$"):
        ProductOfExpertsSampler([])
    with pytest.raises(TypeError, match="^generative_experts must be FlowExpert instances$"):
        ProductOfExpertsSampler([1])
    with pytest.raises(TypeError, match="^discriminative_experts must be RewardExpert instances$"):
        ProductOfExpertsSampler([e], [1])
    x = torch.zeros(3, 2, dtype=torch.float64)
    with pytest.raises(ValueError, match=r"shape \(3,\), got \(3, 2\)$"):
        RewardExpert(lambda z: z).log_weight(x)
    # defaults: weight 1, w 1; w = 0 allowed; the target is kept
    assert RewardExpert(lambda z: z[:, 0]).weight == 1.0
    c = GaussianConstraintExpert([1.0, 1.0])
    torch.testing.assert_close(c.log_weight(x), torch.full((3,), -2.0, dtype=torch.float64))
    torch.testing.assert_close(GaussianConstraintExpert([1.0, 1.0], w=0.0).log_weight(x), torch.zeros(3, dtype=torch.float64))
    torch.testing.assert_close(c.target, torch.tensor([1.0, 1.0]))
    # reward values come back in the sample's dtype
    assert RewardExpert(lambda z: torch.ones(len(z), dtype=torch.float32)).log_weight(x).dtype == torch.float64
    # edge values of the schedule: one step, t_min close to t_max
    out, _ = ProductOfExpertsSampler([e], n_steps=1, n_particles=1).sample(4, 1)
    assert out.shape == (4, 1)
    ProductOfExpertsSampler([e], t_min=0.5, t_max=0.5000001)
    with pytest.raises(ValueError, match="t_min=0.0"):
        ProductOfExpertsSampler([e], t_min=0.0)
    with pytest.raises(ValueError, match="t_min=0.5, t_max=0.5"):
        ProductOfExpertsSampler([e], t_min=0.5, t_max=0.5)


def test_dtypes_and_reproducible_resampling():
    seen = []

    def score(x, t):
        seen.append(t.dtype)
        return -x
    s = ProductOfExpertsSampler([FlowExpert(score)], n_steps=2, n_particles=2)
    s.sample(2, 1, dtype=torch.float64)
    assert set(seen) == {torch.float64}
    assert s.log_reward(torch.zeros(3, 1, dtype=torch.float32)).dtype == torch.float32
    assert s.log_reward(torch.zeros(3, 1, dtype=torch.float64)).dtype == torch.float64
    logw = torch.randn(40, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    s8 = ProductOfExpertsSampler([FlowExpert(score)], n_particles=8)
    a = s8._resample(logw, 5, torch.Generator().manual_seed(1))
    torch.manual_seed(123)
    b = s8._resample(logw, 5, torch.Generator().manual_seed(1))
    assert torch.equal(a, b)
    c = s8._resample(logw, 5, torch.Generator().manual_seed(2))
    assert not torch.equal(a, c)


def _upper(x):
    return (x[:, 1] > 0).double()


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_nan_or_plus_inf_rewards_raise(bad):
    e = RewardExpert(lambda z: torch.full((len(z),), bad, dtype=z.dtype))
    with pytest.raises(ValueError, match="NaN log-weights" if bad != bad else r"\+inf"):
        e.log_weight(torch.zeros(3, 2, dtype=torch.float64))
    s = ProductOfExpertsSampler([gauss_expert([0.0, 0.0], 1.0)], [e], n_particles=4, n_steps=3)
    with pytest.raises(ValueError):
        s.sample(2, 2, generator=torch.Generator().manual_seed(0))


def test_all_minus_inf_rewards_raise_and_hard_constraints_work():
    never = RewardExpert(lambda z: torch.full((len(z),), -float("inf"), dtype=z.dtype))
    for kw in (dict(), dict(resample=False), dict(select="best")):
        s = ProductOfExpertsSampler([gauss_expert([0.0, 0.0], 1.0)], [never], n_particles=4, n_steps=3, **kw)
        with pytest.raises(ValueError, match="every particle of chain 0 has log-weight -inf"):
            s.sample(2, 2, generator=torch.Generator().manual_seed(0))
    # a hard constraint (-inf outside the upper half-plane) is a valid expert: the outputs obey it
    hard = RewardExpert(lambda z: torch.where(z[:, 1] > 0, 0.0, -float("inf")).to(z.dtype))
    s = ProductOfExpertsSampler([gauss_expert([0.0, 0.0], 1.0)], [hard], n_particles=16, n_steps=20,
                                langevin_steps=0)
    x, _ = s.sample(200, 2, generator=torch.Generator().manual_seed(1))
    assert bool((x[:, 1] > 0).double().mean() > 0.95)
    # weight 0 switches an expert off, even with -inf rewards (no 0 * inf = NaN)
    torch.testing.assert_close(RewardExpert(never.reward_fn, weight=0.0).log_weight(torch.zeros(3, 2)), torch.zeros(3))


def test_chain_weight_check():
    from iclr26.generative.poe_sampler.sampler import _check_chain_weights
    ok = torch.tensor([[0.0, -float("inf")], [-1.0, 2.0]])
    assert _check_chain_weights(ok) is ok
    with pytest.raises(ValueError, match="NaN importance log-weights"):
        _check_chain_weights(torch.tensor([[0.0, float("nan")]]))
    with pytest.raises(ValueError, match="every particle of chain 1 has log-weight -inf"):
        _check_chain_weights(torch.tensor([[0.0, 1.0], [-float("inf"), -float("inf")]]))


def test_first_resampling_uses_the_full_reward():
    """The weights telescope to exp(r(x0_hat)) at the last step: with one annealing step the only
    resampling uses the reward itself (not r - r at t_max), so a steep reward is obeyed."""
    seen = []

    def reward(z):
        seen.append(z.clone())
        return 50.0 * (z[:, 0] > 0).double()
    s = ProductOfExpertsSampler([gauss_expert([0.0], 1.0)], [RewardExpert(reward)], n_particles=32, n_steps=1,
                                langevin_steps=0, t_max=0.5, t_min=0.4)
    x, info = s.sample(100, 1, generator=torch.Generator().manual_seed(0))
    assert info["n_resample"] == 1
    assert bool((x[:, 0] > 0).all())
    assert len(seen) == 2          # the resampling at t_min and the final weights: none at t_max


def test_final_reweighting_mode_applies_weights_only_at_the_end():
    calls = []
    s = ProductOfExpertsSampler([gauss_expert([0.0, 0.0], 1.0)], [RewardExpert(_upper, weight=3.0)],
                                n_particles=8, n_steps=5, langevin_steps=1, resample=False)
    x, info = s.sample(300, 2, generator=torch.Generator().manual_seed(0))
    assert info["n_resample"] == 0
    # the final importance weights tilt the outputs: the upper half-plane share rises from 1/2
    # towards e^3 / (1 + e^3) = 0.95 (limited by 8 particles)
    share = float((x[:, 1] > 0).double().mean())
    assert 0.75 < share < 0.99
    s1 = ProductOfExpertsSampler([gauss_expert([0.0, 0.0], 1.0)], [RewardExpert(_upper, weight=3.0)],
                                 n_particles=1, n_steps=5, langevin_steps=1, resample=False)
    x1, _ = s1.sample(300, 2, generator=torch.Generator().manual_seed(0))
    assert 0.35 < float((x1[:, 1] > 0).double().mean()) < 0.65        # one particle: no tilt at all


def test_experiment_arms_and_best_single_choice():
    from iclr26.generative.poe_sampler.experiment import run
    out = run("smoke", 0)
    m = out["metrics"]["log_mmd"]
    for arm in ("smc_L2", "smc_L4", "smc_L16", "final_weights_L16", "single1_smc_L16", "single2_smc_L16",
                "best_single_smc_L16", "naive", "mcmc_L1", "mcmc_noreward", "expert1"):
        assert arm in m and math.isfinite(m[arm])
    info = out["info"]
    assert info["best_single"] == min(info["val_mmd_single"], key=info["val_mmd_single"].get)
    assert m["best_single_smc_L16"] == m[info["best_single"]]
    assert math.isfinite(out["metrics"]["mmd_slope_reward_particles"]["method"])
