"""Tests of power-law / non-linear guidance (src/iclr26/generative/power_law_cfg)."""
import math

import numpy as np
import pytest
import torch

from iclr26.generative.power_law_cfg import (NonLinearGuidance, PowerLawGuidance, nonlinear_guidance,
                                             power_law_guidance)
from iclr26.models import diffusion as D


def _pair(seed=0, shape=(4, 3, 2)):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(shape, generator=g, dtype=torch.float64), torch.randn(shape, generator=g, dtype=torch.float64)


def test_power_law_equation_against_a_per_sample_reference():
    pc, pu = _pair()
    omega, alpha, c = 1.7, 0.9, 2.5
    out = power_law_guidance(pc, pu, omega, alpha, score_scale=c)
    for b in range(pc.shape[0]):
        d = (pc[b] - pu[b]).numpy()
        nrm = c * math.sqrt(float((d**2).sum()))                   # |dS| over every coordinate of sample b
        ref = pc[b].numpy() + omega * nrm**alpha * d
        np.testing.assert_allclose(out[b].numpy(), ref, rtol=1e-12)


def test_score_space_equivalence():
    # S = -(b x + c pred): the rule on predictions equals the rule on scores
    pc, pu = _pair(1)
    x = torch.randn(pc.shape, dtype=torch.float64)
    b, c, omega, alpha = 0.3, 1.8, 0.7, 0.6
    score = lambda p: -(b * x + c * p)
    sc, su = score(pc), score(pu)
    ds = sc - su
    n = ds.reshape(len(ds), -1).norm(dim=1).view(-1, 1, 1)
    s_pl = sc + omega * n**alpha * ds
    torch.testing.assert_close(score(power_law_guidance(pc, pu, omega, alpha, score_scale=c)), s_pl)
    # a per-sample score scale (the sampler passes (B, 1, ...)) is used per sample
    cs = torch.tensor([1.0, 2.0, 3.0, 4.0], dtype=torch.float64).view(-1, 1, 1)
    out = power_law_guidance(pc, pu, omega, alpha, score_scale=cs)
    for i in range(4):
        torch.testing.assert_close(out[i:i + 1], power_law_guidance(pc[i:i + 1], pu[i:i + 1], omega, alpha, float(cs[i])))


def test_reductions_to_cfg_and_to_the_conditional_model():
    pc, pu = _pair(2)
    cfg = D.ClassifierFreeGuidance(1.3)(pc, pu, None)
    torch.testing.assert_close(power_law_guidance(pc, pu, 1.3, alpha=0.0, score_scale=7.0), cfg)   # alpha = 0: CFG
    torch.testing.assert_close(PowerLawGuidance(1.3, 0.0)(pc, pu, 7.0), cfg)
    torch.testing.assert_close(NonLinearGuidance(lambda s: torch.full_like(s, 1.3))(pc, pu), cfg)
    torch.testing.assert_close(power_law_guidance(pc, pu, 0.0, 0.9), pc)                   # omega = 0
    torch.testing.assert_close(power_law_guidance(pc, pc.clone(), 5.0, -0.5), pc)          # dS = 0, alpha < 0
    assert torch.isfinite(power_law_guidance(pc, pc.clone(), 5.0, -0.5)).all()


def test_norm_dependence_distinguishes_power_law_from_cfg():
    # a large difference is amplified more, a small one less, than by CFG with the same omega
    pc = torch.zeros(2, 4)
    pu = torch.stack([torch.full((4,), -2.0), torch.full((4,), -0.01)])
    out = power_law_guidance(pc, pu, 1.0, 0.5)
    cfg = D.ClassifierFreeGuidance(1.0)(pc, pu, None)
    assert out[0, 0] > cfg[0, 0] and out[1, 0] < cfg[1, 0]
    assert float(out[0, 0]) == pytest.approx(2.0 * math.sqrt(4.0))     # |d| = 4, 4**0.5 * 2
    assert float(out[1, 0]) == pytest.approx(0.01 * math.sqrt(0.02))
    # the default alpha is 0.9
    assert PowerLawGuidance(1.0).alpha == 0.9
    torch.testing.assert_close(power_law_guidance(pc, pu, 1.0), PowerLawGuidance(1.0)(pc, pu))
    assert repr(PowerLawGuidance(2.0, 0.5)) == "PowerLawGuidance(omega=2.0, alpha=0.5)"
    torch.testing.assert_close(PowerLawGuidance(2.0, 0.5)(pc, pu, None), power_law_guidance(pc, pu, 2.0, 0.5))


def test_guidance_callable_in_the_sampler_and_dtype():
    g = D.GaussianMixture([[2.0, 0.0], [-2.0, 0.0]], std=1.0)
    for objective in ("eps", "flow"):
        m = D.ExactMixtureModel(g, objective)
        noise = torch.randn(300, 2, generator=torch.Generator().manual_seed(0))
        y = torch.zeros(300, dtype=torch.long)
        a = D.sample(m, y, (2,), objective, steps=30, noise=noise, guidance=PowerLawGuidance(0.0))
        b = D.sample(m, y, (2,), objective, steps=30, noise=noise)
        torch.testing.assert_close(a, b)
        c = D.sample(m, y, (2,), objective, steps=30, noise=noise, guidance=PowerLawGuidance(1.0, 0.0))
        e = D.sample(m, y, (2,), objective, steps=30, noise=noise, guidance=D.ClassifierFreeGuidance(1.0))
        torch.testing.assert_close(c, e)
    pc, pu = _pair(3)
    assert power_law_guidance(pc.float(), pu.float(), 1.0).dtype == torch.float32


@pytest.mark.parametrize("kw,match", [
    (dict(omega=-1.0), "omega must be a finite number >= 0"),
    (dict(omega=float("inf")), "omega must be a finite number >= 0"),
    (dict(omega="2"), "omega must be"),
    (dict(omega=1.0, alpha=-1.0), r"alpha must be a finite number > -1 \(so that s \* phi\(s\) -> 0"),
    (dict(omega=1.0, alpha=float("nan")), "alpha must be"),
])
def test_parameter_rejections(kw, match):
    with pytest.raises(ValueError, match=match):
        PowerLawGuidance(**kw)
    pc, pu = _pair()
    with pytest.raises(ValueError, match=match):
        power_law_guidance(pc, pu, kw["omega"], kw.get("alpha", 0.9))


def test_input_rejections():
    pc, pu = _pair()
    with pytest.raises(ValueError, match=r"same shape, got \(4, 3, 2\) and \(4, 3\)"):
        power_law_guidance(pc, pu[..., 0], 1.0)
    with pytest.raises(TypeError, match="must be torch tensors"):
        power_law_guidance(pc.numpy(), pu, 1.0)
    with pytest.raises(ValueError, match="leading batch dimension"):
        power_law_guidance(torch.tensor(1.0), torch.tensor(0.0), 1.0)
    with pytest.raises(TypeError, match="phi must be callable"):
        NonLinearGuidance(2.0)


def test_exact_mixture_artifacts_and_the_power_law_effect():
    """The exact two-Gaussian model: CFG overshoots and shrinks, less in higher d; PL overshoots less."""
    from iclr26.generative.power_law_cfg.experiment import gmm_artifacts, loglog_slope

    o1, s1, n1 = gmm_artifacts(1, 3000, 40, D.ClassifierFreeGuidance(1.0), 0)
    o16, s16, _ = gmm_artifacts(16, 3000, 40, D.ClassifierFreeGuidance(1.0), 0)
    p1, q1, m1 = gmm_artifacts(1, 3000, 40, PowerLawGuidance(1.0, 0.9), 0)
    assert o1 > 0.3 and s1 > 0.2 and o16 < o1 / 2 and s16 < s1 / 2
    assert p1 < 0.8 * o1
    assert 0.3 * n1 < m1 < 0.8 * n1           # at the same omega the power law guides less here
    z, zs, zn = gmm_artifacts(4, 2000, 30, D.ClassifierFreeGuidance(0.0), 0)
    assert z == pytest.approx(0.0, abs=1e-9) and zs == pytest.approx(0.0, abs=1e-9) and zn == 0.0
    assert loglog_slope([1, 4, 16], [1.0, 0.5, 0.25]) == pytest.approx(-0.5)


def test_velocity_variant_ignores_the_score_scale():
    from iclr26.generative.power_law_cfg.experiment import _VelocityPL

    pc, pu = _pair(4)
    torch.testing.assert_close(_VelocityPL(1.0, 0.9)(pc, pu, 9.0), power_law_guidance(pc, pu, 1.0, 0.9, 1.0))


def test_general_family_defaults_and_score_scale_are_used():
    pc, pu = _pair(5)
    d = pc - pu
    n = d.reshape(len(d), -1).norm(dim=1).view(-1, 1, 1)
    torch.testing.assert_close(nonlinear_guidance(pc, pu, lambda s: s), pc + n * d)          # default scale 1
    torch.testing.assert_close(NonLinearGuidance(lambda s: s)(pc, pu), pc + n * d)
    torch.testing.assert_close(NonLinearGuidance(lambda s: s)(pc, pu, None), pc + n * d)
    torch.testing.assert_close(NonLinearGuidance(lambda s: s)(pc, pu, 3.0), pc + 3.0 * n * d)
    # a batch of scalars (1-D predictions) is a valid input
    a, b = torch.tensor([1.0, 2.0]), torch.tensor([0.0, 4.0])
    torch.testing.assert_close(power_law_guidance(a, b, 1.0, 1.0), torch.tensor([2.0, -2.0]))


def test_exact_error_messages():
    pc, pu = _pair()
    with pytest.raises(TypeError, match="^pred_cond and pred_uncond must be torch tensors$"):
        power_law_guidance(pc, pu.numpy(), 1.0)
    with pytest.raises(TypeError, match="^pred_cond and pred_uncond must be torch tensors$"):
        power_law_guidance(pc.numpy(), pu, 1.0)
    with pytest.raises(ValueError, match="^predictions need a leading batch dimension$"):
        power_law_guidance(torch.tensor(1.0), torch.tensor(0.0), 1.0)
    with pytest.raises(TypeError, match=r"^phi must be callable: norms \(B, 1, \.\.\.\) -> factors$"):
        NonLinearGuidance(None)


def test_score_scale_takes_the_predictions_dtype():
    pc, pu = _pair(6)
    c = torch.full((4, 1, 1), 2.0, dtype=torch.float64)
    out = power_law_guidance(pc.float(), pu.float(), 1.0, 0.9, score_scale=c)
    assert out.dtype == torch.float32


@pytest.mark.parametrize("scale", [-1.0, -1e-3, float("nan"), float("inf"), -float("inf")])
def test_bad_score_scale_is_rejected_not_switched_off(scale):
    # a negative scale used to give NaN factors that the guard replaced by 0: no guidance at all
    pc, pu = _pair(7)
    with pytest.raises(ValueError, match=r"score_scale must be finite and >= 0"):
        power_law_guidance(pc, pu, 1.0, 0.9, score_scale=scale)
    with pytest.raises(ValueError, match=r"score_scale must be finite and >= 0"):
        PowerLawGuidance(1.0, 0.9)(pc, pu, scale)
    # one bad entry of a per-sample scale is enough
    cs = torch.tensor([1.0, 2.0, scale, 4.0], dtype=torch.float64).view(-1, 1, 1)
    with pytest.raises(ValueError, match=r"score_scale must be finite and >= 0"):
        nonlinear_guidance(pc, pu, lambda s: s, cs)


def test_zero_score_scale_and_zero_difference_are_the_only_zero_guidance_cases():
    pc, pu = _pair(8)
    # score_scale = 0 (t = 1 on the flow path): |dS| = 0; phi(0) is 0 for alpha > 0, omega for
    # alpha = 0 (CFG, kept) and infinite for alpha < 0 (the limit 0)
    torch.testing.assert_close(power_law_guidance(pc, pu, 2.0, -0.5, score_scale=0.0), pc)
    torch.testing.assert_close(power_law_guidance(pc, pu, 2.0, 0.9, score_scale=0.0), pc)
    torch.testing.assert_close(power_law_guidance(pc, pu, 2.0, 0.0, score_scale=0.0), pc + 2.0 * (pc - pu))
    # only the rows with dS = 0 are zeroed; the others keep phi(|dS|) with alpha < 0
    pu2 = pu.clone()
    pu2[1] = pc[1]
    out = power_law_guidance(pc, pu2, 2.0, -0.5)
    torch.testing.assert_close(out[1], pc[1])
    d0 = pc[0] - pu2[0]
    torch.testing.assert_close(out[0], pc[0] + 2.0 * d0.norm() ** -0.5 * d0)
    # a factor that is non-finite at a non-zero |dS| is an error, not silently "no guidance"
    with pytest.raises(ValueError, match="non-finite guidance factor at a non-zero"):
        nonlinear_guidance(pc, pu, lambda s: torch.full_like(s, float("inf")))
    with pytest.raises(ValueError, match="non-finite guidance factor at a non-zero"):
        nonlinear_guidance(pc, pu, lambda s: torch.full_like(s, float("nan")))
    bad = pc.clone()
    bad[0, 0, 0] = float("nan")
    with pytest.raises(ValueError, match="non-finite"):
        power_law_guidance(bad, pu, 1.0, 0.9)


def test_flow_score_scale_convention_t0_is_data():
    """On x_t = (1 - t) x_0 + t eps (t = 0 the data), S_c - S_u = -(1 - t)/t (v_c - v_u) for the exact
    mixture: the factor the sampler passes is the right one for this convention."""
    g = D.GaussianMixture([[1.5, 0.0], [-1.0, 0.5]], std=0.7)
    m = D.ExactMixtureModel(g, "flow")
    x = torch.randn(50, 2, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    for t in (0.2, 0.5, 0.9):
        tt = torch.full((50,), t, dtype=torch.float64)
        vc = m(x, tt, torch.zeros(50, dtype=torch.long))
        vu = m(x, tt, torch.full((50,), 2, dtype=torch.long))
        mix = g.noised(1.0 - t, t)
        ds = mix.score(x.numpy(), 0) - mix.score(x.numpy(), None)
        c = float(D.score_scale(torch.tensor(t), "flow"))
        assert c == pytest.approx((1.0 - t) / t, rel=1e-6)
        np.testing.assert_allclose(-c * (vc - vu).numpy(), ds, rtol=1e-5, atol=1e-8)
        # the other convention's factor t / (1 - t) is wrong here (they agree only at t = 1/2)
        assert t == 0.5 or not np.allclose(-(t / (1.0 - t)) * (vc - vu).numpy(), ds, rtol=1e-3)


def test_matched_cfg_arm_matches_the_mean_guidance_norm():
    from iclr26.generative.power_law_cfg.experiment import _NormRecorder, _gmm_sample, matched_cfg_omega

    rec = _NormRecorder(PowerLawGuidance(1.0, 0.9))
    _gmm_sample(1, 2000, 30, rec, 5)
    w = matched_cfg_omega(1, 2000, 30, rec.mean_norm(), 5)
    assert 0.3 < w < 0.8                                     # the power law is the weaker rule here
    chk = _NormRecorder(D.ClassifierFreeGuidance(w))
    _gmm_sample(1, 2000, 30, chk, 5)
    assert chk.mean_norm() == pytest.approx(rec.mean_norm(), rel=0.02)
    # the recorder passes the guided prediction through and records score units
    pc, pu = _pair(9)
    r = _NormRecorder(D.ClassifierFreeGuidance(2.0))
    c = torch.full((4, 1, 1), 3.0, dtype=torch.float64)
    torch.testing.assert_close(r(pc, pu, c), pc + 2.0 * (pc - pu))
    assert r.mean_norm() == pytest.approx(float((3.0 * 2.0 * (pc - pu)).reshape(4, -1).norm(dim=1).mean()))


def test_smoke_run_has_the_matched_arm():
    from iclr26.generative.power_law_cfg.experiment import run

    out = run("smoke", 0)
    m = out["metrics"]
    assert set(m["log_overshoot"]) == {"cfg", "pl", "cfg_matched"}
    assert set(m["log_shrinkage"]) == {"cfg", "pl", "cfg_matched"}
    art = out["info"]["artifacts"]
    for a, b in zip(art["pl"]["norm"], art["cfg_matched"]["norm"]):
        assert b == pytest.approx(a, rel=0.05)
    assert all(0.2 < w < 1.0 for w in out["info"]["matched_omega"])
