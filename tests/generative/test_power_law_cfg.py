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

    o1, s1 = gmm_artifacts(1, 3000, 40, D.ClassifierFreeGuidance(1.0), 0)
    o16, s16 = gmm_artifacts(16, 3000, 40, D.ClassifierFreeGuidance(1.0), 0)
    p1, q1 = gmm_artifacts(1, 3000, 40, PowerLawGuidance(1.0, 0.9), 0)
    assert o1 > 0.3 and s1 > 0.2 and o16 < o1 / 2 and s16 < s1 / 2
    assert p1 < 0.8 * o1
    z, zs = gmm_artifacts(4, 2000, 30, D.ClassifierFreeGuidance(0.0), 0)
    assert z == pytest.approx(0.0, abs=1e-9) and zs == pytest.approx(0.0, abs=1e-9)
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
