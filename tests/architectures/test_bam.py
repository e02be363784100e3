"""Tests of the BAM generalised-Gaussian positional prior (arXiv 2505.22842)."""
import math

import numpy as np
import pytest
import torch

from iclr26.architectures.bam import GGDPositionalBias, GGDPriorConfig
from iclr26.common.synthetic_tasks import passkey
from iclr26.common.tiny_attention import (ALiBi, NoPE, SoftmaxAttention, TinyLM, TinyLMConfig, alibi_slopes,
                                          ssmax_log_length)


def _attn_with(pos, seed=0, ssmax=False):
    torch.manual_seed(seed)
    return SoftmaxAttention(16, 4, pos, ssmax=ssmax).double()


def test_bias_hand_computed():
    """g_h(i, j) = -exp(s_h) (|j - i - mu_h| + eps)^beta_h (Sec. 2.3; official AttentionPrior)."""
    prior = GGDPositionalBias(GGDPriorConfig(2, scale_init=2.0, shape_init=0.5, eps=0.25))
    b = prior.bias(3)
    # exp(s) = 1/2; entry (i=2, j=0): -(1/2) * (2 + 1/4)^0.5 = -3/4
    assert b.shape == (2, 3, 3)
    assert math.isclose(float(b[0, 2, 0].detach()), -0.75, rel_tol=1e-6)
    assert math.isclose(float(b[1, 2, 1].detach()), -0.5 * math.sqrt(1.25), rel_tol=1e-6)
    assert math.isclose(float(b[0, 1, 1].detach()), -0.25, rel_tol=1e-6)  # distance 0: -(1/2) eps^0.5
    with torch.no_grad():
        prior.loc.fill_(-1.0)  # location shifts the mode: j - i = -1 gets the largest prior
    b = prior.bias(4)
    assert int(b[0, 3].argmax()) == 2


def test_alibi_slopes_match_press_et_al():
    """ALiBi slopes for 8 heads: 1/2, 1/4, ..., 1/256 (Press et al. 2022, Sec. 3)."""
    torch.testing.assert_close(alibi_slopes(8), torch.tensor([2.0 ** -(i + 1) for i in range(8)]))
    assert len(alibi_slopes(6)) == 6


def test_reduces_to_alibi_exactly():
    """beta = 1, scale = ALiBi slopes: the bias IS ALiBi's minus the per-head constant m_h eps
    (Lemma 2: Laplace prior). eps = 2^-10 and power-of-two slopes make every step exact."""
    eps = 2.0 ** -10
    prior = GGDPositionalBias(GGDPriorConfig(4, eps=eps))
    shift = (alibi_slopes(4) * eps)[:, None, None]
    torch.testing.assert_close(prior.bias(9), ALiBi(4).bias(9) - shift, rtol=0, atol=0)


def test_default_eps_gives_alibi_attention():
    """With the default eps = 1e-5 the bias differs from ALiBi by a per-head constant only,
    which softmax ignores: the attention outputs are ALiBi's."""
    x = torch.randn(2, 11, 16, dtype=torch.float64)
    a = _attn_with(ALiBi(4))
    b = _attn_with(GGDPositionalBias(GGDPriorConfig(4)).double())
    # tolerance: the log-scale parameter was created in float32 (exp(log m) rounding)
    torch.testing.assert_close(a(x), b(x), rtol=1e-7, atol=1e-7)


def test_reduces_to_nope():
    """beta = 0 is a uniform prior (Lemma 1: NoPE): same attention outputs as NoPE."""
    x = torch.randn(2, 11, 16, dtype=torch.float64)
    a = _attn_with(NoPE())
    b = _attn_with(GGDPositionalBias(GGDPriorConfig(4, shape_init=0.0)).double())
    torch.testing.assert_close(a(x), b(x), rtol=1e-10, atol=1e-10)
    bias = GGDPositionalBias(GGDPriorConfig(4, shape_init=0.0)).bias(5)
    assert torch.all(bias == bias[:, :1, :1])  # constant per head


def test_negative_shape_is_anti_local():
    """beta < 0: the prior grows with distance ("retrieval" heads in the paper's analysis)."""
    b = GGDPositionalBias(GGDPriorConfig(1, shape_init=-0.5)).bias(50)[0, -1]
    assert torch.all(b[:-1] >= b[1:])  # row of the last query: farther keys get more prior mass
    assert float(b[0].detach()) > float(b[-2].detach())


def test_ssmax_scales_logits_by_log_length():
    """SSMax: logits of query i times s_h log n_i, n_i = i + 1 (Nakanishi 2025; BAM Sec. 3).

    With NoPE this equals plain attention whose query row i is scaled by log(i + 1)."""
    torch.testing.assert_close(ssmax_log_length(4)[:, 0], torch.log(torch.arange(1.0, 5.0)))
    torch.manual_seed(0)
    a = SoftmaxAttention(8, 2, NoPE(), ssmax=True).double()

    class ScaledQ(torch.nn.Module):
        def forward(self, q, k, x=None):
            return q * ssmax_log_length(q.shape[-2]).double(), k, None

    b = SoftmaxAttention(8, 2, ScaledQ()).double()
    b.load_state_dict({k: v for k, v in a.state_dict().items() if k != "ssmax_scale"})
    x = torch.randn(1, 6, 8, dtype=torch.float64)
    torch.testing.assert_close(a(x), b(x))
    assert a.ssmax_scale.requires_grad


def test_gradients_reach_shape_and_scale_not_loc():
    prior = GGDPositionalBias(GGDPriorConfig(4))
    model = TinyLM(TinyLMConfig(20, 16, 2, 4, 32, ssmax=True), prior)
    loss = model(torch.randint(0, 20, (2, 12))).logsumexp(-1).mean()
    loss.backward()
    assert prior.shape.grad is not None and prior.shape.grad.abs().sum() > 0
    assert prior.log_scale.grad is not None
    assert not prior.loc.requires_grad  # mu fixed at 0 (official default train_loc=False)


def test_state_dict_round_trip():
    a = GGDPositionalBias(GGDPriorConfig(4, shape_init=0.3))
    b = GGDPositionalBias(GGDPriorConfig(4))
    b.load_state_dict(a.state_dict())
    torch.testing.assert_close(a.bias(7), b.bias(7))


@pytest.mark.parametrize("kw, word", [
    (dict(n_heads=0), "n_heads"),
    (dict(n_heads=4, scale_init="slope"), "scale_init"),
    (dict(n_heads=4, scale_init=-1.0), "scale_init"),
    (dict(n_heads=4, shape_init=float("nan")), "shape_init"),
    (dict(n_heads=4, eps=-1.0), "eps"),
    (dict(n_heads=4, eps=0.0), r"eps must be a finite number > 0 .*got 0.0"),
    (dict(n_heads=4, eps=float("nan")), "eps must be a finite number > 0"),
    (dict(n_heads=4, eps=float("inf")), "eps must be a finite number > 0"),
    (dict(n_heads=4, shape_init=float("-inf")), "shape_init must be finite"),
    (dict(n_heads=4, shape_init=-10.0), r"with eps=1e-05, shape_init must be > -7.70\d*, got -10.0"),
    (dict(n_heads=4, shape_init=-40.0, eps=0.1), r"with eps=0.1, shape_init must be > -38.5"),
    (dict(n_heads=4, shape_init=20.0, eps=100.0), r"with eps=100.0, shape_init must be < 19.2"),
    (dict(n_heads=4, loc_init=float("nan")), "loc_init must be finite"),
])
def test_rejects_bad_config(kw, word):
    with pytest.raises(ValueError, match=word):
        GGDPriorConfig(**kw)


def test_rejects_bad_lengths():
    with pytest.raises(ValueError, match="T_q"):
        GGDPositionalBias(GGDPriorConfig(2)).bias(5, 3)


def test_passkey_task_layout():
    rng = np.random.default_rng(0)
    x, yk, ylm = passkey(5, 40, rng, key_len=3)
    assert x.shape == (5, 40)
    assert ((yk != -100).sum(1) == 3).all()
    for i in range(5):
        pos = int((x[i] == 10).nonzero()[0])  # KEY marker
        torch.testing.assert_close(x[i, pos + 1 : pos + 4], yk[i, -3:])
        assert int(x[i, -3]) == 11 or int(x[i, -4]) == 11  # QUERY marker before the answer
    assert (ylm[ylm != -100] >= 12).all()  # LM targets are filler tokens only
    with pytest.raises(ValueError, match="too short"):
        passkey(2, 5, rng, key_len=3)


def test_experiment_smoke_contract():
    from iclr26.architectures.bam import experiment
    out = experiment.run("smoke", 0)
    m = out["metrics"]
    assert "lm_nll" in m and "passkey_16x" in m
    n = {len(v) for arms in m.values() for v in arms.values()}
    assert len(n) >= 1
    for arms in m.values():
        assert set(arms) == set(experiment.ARMS)
        lengths = {len(v) for v in arms.values()}
        assert len(lengths) == 1  # items paired by position across arms
        assert all(math.isfinite(x) for v in arms.values() for x in v)


def _reference_bias(log_scale, shape, loc, eps, T_q, T_k):
    """Independent numpy form of g_h(i, j) = -exp(s_h) (|j - i - mu_h| + eps)^beta_h, query i of
    T_q aligned to the last T_q of T_k keys."""
    out = np.empty((len(shape), T_q, T_k))
    for h in range(len(shape)):
        for a in range(T_q):
            i = T_k - T_q + a
            for j in range(T_k):
                out[h, a, j] = -math.exp(log_scale[h]) * (abs(j - i - loc[h]) + eps) ** shape[h]
    return out


def test_bias_matches_reference_with_loc_eps_and_rectangular_lengths():
    prior = GGDPositionalBias(GGDPriorConfig(3, scale_init=3.0, eps=0.25)).double()
    with torch.no_grad():
        prior.log_scale.copy_(torch.tensor([-1.5, 0.3, -0.2], dtype=torch.float64))
        prior.shape.copy_(torch.tensor([1.7, -0.4, 0.6], dtype=torch.float64))
        prior.loc.copy_(torch.tensor([0.0, 1.5, -2.25], dtype=torch.float64))
    ref = _reference_bias([-1.5, 0.3, -0.2], [1.7, -0.4, 0.6], [0.0, 1.5, -2.25], 0.25, 4, 9)
    np.testing.assert_allclose(prior.bias(4, 9).detach().numpy(), ref, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(prior.bias(9).detach().numpy(), _reference_bias(
        [-1.5, 0.3, -0.2], [1.7, -0.4, 0.6], [0.0, 1.5, -2.25], 0.25, 9, 9), rtol=1e-12, atol=1e-12)


def test_initial_values_follow_official_code():
    """exp(s_h) = ALiBi slope (scale_init 'slope'), or 1/a for a float a; shape 1; loc 0; eps 1e-5;
    scale and shape trained, loc fixed (official AttentionPrior defaults)."""
    p = GGDPositionalBias(GGDPriorConfig(8))
    torch.testing.assert_close(p.log_scale.exp().detach(), alibi_slopes(8))
    assert torch.all(p.shape == 1.0) and torch.all(p.loc == 0.0) and p.config.eps == 1e-5
    assert p.log_scale.requires_grad and p.shape.requires_grad and not p.loc.requires_grad
    q = GGDPositionalBias(GGDPriorConfig(2, scale_init=4.0, shape_init=0.5, loc_init=0.75, train_scale=False,
                                         train_shape=False, train_loc=True))
    torch.testing.assert_close(q.log_scale.exp().detach(), torch.full((2,), 0.25))
    assert torch.all(q.shape == 0.5) and torch.all(q.loc == 0.75)
    assert not q.log_scale.requires_grad and not q.shape.requires_grad and q.loc.requires_grad
    assert "n_heads=8" in repr(p) and "eps=1e-05" in repr(p)


def test_forward_protocol_dtype_and_shapes():
    prior = GGDPositionalBias(GGDPriorConfig(2, shape_init=0.5))
    q, k = torch.randn(1, 2, 5, 4, dtype=torch.float64), torch.randn(1, 2, 5, 4, dtype=torch.float64)
    q2, k2, b = prior(q, k)
    assert q2 is q and k2 is k and b.dtype == torch.float64 and b.shape == (2, 5, 5)
    torch.testing.assert_close(b, prior.bias(5).double())


def test_ssmax_scales_the_prior_too():
    """BAM's ssmax_prior=True: (q.k/sqrt(D) + prior) * s_h log n_i. With zero q/k weights the
    logits are the scaled prior alone, so the attention weights are softmax(prior * log n)."""
    torch.manual_seed(0)
    prior = GGDPositionalBias(GGDPriorConfig(2, scale_init=2.0, shape_init=0.7)).double()
    attn = SoftmaxAttention(4, 2, prior, ssmax=True).double()
    with torch.no_grad():
        attn.qkv.weight[:8].zero_()  # q = k = 0
        attn.ssmax_scale.copy_(torch.tensor([1.0, 2.0]))
        attn.out.weight.copy_(torch.eye(4))
    T = 6
    x = torch.randn(1, T, 4, dtype=torch.float64)
    v = (x @ attn.qkv.weight[8:].T).view(1, T, 2, 2).transpose(1, 2)
    logn = torch.log(torch.arange(1.0, T + 1, dtype=torch.float64))[:, None]
    logits = prior.bias(T) * torch.tensor([1.0, 2.0], dtype=torch.float64)[:, None, None] * logn
    logits = logits.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf"))
    ref = (torch.softmax(logits, -1) @ v[0]).transpose(0, 1).reshape(1, T, 4)
    torch.testing.assert_close(attn(x), ref)


def test_experiment_arms_and_optimizer_groups():
    """Six arms: {BAM, ALiBi, RoPE (base 5e5, official rope_theta)} x {SSMax, none}; weight decay on
    matrices only (official train.py groups), never on the prior or the SSMax scales."""
    from iclr26.architectures.bam import experiment as E
    from iclr26.common.tiny_attention import RoPE
    cfg = E.SCALES["smoke"]
    kinds = {"bam": GGDPositionalBias, "alibi": ALiBi, "rope": RoPE}
    for arm in E.ARMS:
        m = E._build(arm, cfg, 28)
        mixer = m.layers[0]["mixer"]
        assert mixer.ssmax == arm.endswith("_ssmax")
        assert isinstance(mixer.positional, kinds[arm.split("_")[0]])
        if arm.startswith("rope"):
            assert mixer.positional.base == 500000.0
        if arm.startswith("bam"):
            assert m.layers[1]["mixer"].positional is mixer.positional  # one shared prior
            opt = E._optimizer(m, cfg)
            decay, rest = opt.param_groups
            assert decay["weight_decay"] == 0.1 and rest["weight_decay"] == 0.0
            ids = {id(p) for p in rest["params"]}
            assert id(mixer.positional.shape) in ids and id(mixer.positional.log_scale) in ids
            assert all(p.dim() >= 2 for p in decay["params"])
            assert opt.defaults["betas"] == (0.9, 0.95)
            if arm == "bam_ssmax":
                assert id(mixer.ssmax_scale) in ids
    with pytest.raises(ValueError, match="unknown arm"):
        E._build("sinusoidal", cfg, 28)


def test_single_query_and_rectangular_forward():
    """One query (decoding step) is allowed; forward uses the key length (queries last-aligned)."""
    prior = GGDPositionalBias(GGDPriorConfig(2, shape_init=0.5))
    torch.testing.assert_close(prior.bias(1), torch.full((2, 1, 1), 0.0) - prior.log_scale.exp().detach()[:, None, None]
                               * 1e-5 ** 0.5)
    torch.testing.assert_close(prior.bias(1, 4), prior.bias(4)[:, -1:])
    q, k = torch.randn(1, 2, 3, 4), torch.randn(1, 2, 5, 4)
    _, _, b = prior(q, k)
    assert b.shape == (2, 3, 5)
    torch.testing.assert_close(b, prior.bias(5)[:, -3:])


def test_bias_follows_the_module_device():
    """On the meta device (no data), the bias is built where the parameters are."""
    prior = GGDPositionalBias(GGDPriorConfig(2)).to("meta")
    assert prior.bias(4).device.type == "meta"
    q = torch.empty(1, 2, 4, 4, device="meta")
    assert prior(q, q)[2].device.type == "meta"


def test_scale_init_bounds():
    with pytest.raises(ValueError, match="scale_init"):
        GGDPriorConfig(2, scale_init=0.0)
    with pytest.raises(ValueError, match="scale_init"):
        GGDPriorConfig(2, scale_init=float("inf"))
    p = GGDPositionalBias(GGDPriorConfig(2, scale_init=0.5))  # exp(s) = 2
    torch.testing.assert_close(p.log_scale.exp().detach(), torch.full((2,), 2.0))


def test_eps_zero_was_the_nan_path_and_shapes_at_the_bound_are_accepted():
    """With eps = 0 a negative shape made the diagonal prior -inf and the first query's attention
    NaN; eps must now be > 0. Just inside the allowed shape range the prior is finite."""
    GGDPriorConfig(4, shape_init=-7.6)  # eps = 1e-5: the bound is log(float32 max) / log(1e-5) = -7.71
    GGDPriorConfig(4, shape_init=-1e6, eps=1.0)  # eps = 1: eps ** beta = 1 for every beta
    prior = GGDPositionalBias(GGDPriorConfig(4, shape_init=-7.6, scale_init=1.0))
    assert bool(torch.isfinite(prior.bias(6)).all())
    prior = GGDPositionalBias(GGDPriorConfig(4, shape_init=-0.5))
    prior.config.eps = 0.0  # edited after construction
    with pytest.raises(ValueError, match=r"^config.eps must be a finite number > 0, got 0.0$"):
        prior.bias(4)


@pytest.mark.parametrize("value, match", [
    (-10.0, r"head 0: shape -10, log-scale -1.386, loc 0 \(allowed shapes here: \(-7\.\d+, 19\.\d+\)\)"),
    (float("nan"), r"head 0: shape nan"),
    (30.0, r"head 0: shape 30, .*\(allowed shapes here: \(-7\.\d+, 19\.\d+\)\)"),
])
def test_learned_shape_that_breaks_the_prior_raises_instead_of_nan(value, match):
    """A shape learned (or loaded) out of range makes exp(s) z ** beta overflow: at distance 0
    (beta < log(max) / log(eps)) or at the longest distance (beta = 30 at 100 keys). The forward
    pass raises, naming the head, its parameters and the allowed range, instead of returning NaN."""
    torch.manual_seed(0)
    prior = GGDPositionalBias(GGDPriorConfig(4))
    model = TinyLM(TinyLMConfig(20, 16, 2, 4, 32, ssmax=True), prior)
    x = torch.randint(0, 20, (1, 100))
    assert bool(torch.isfinite(model(x)).all())
    with torch.no_grad():
        prior.shape[0] = value
    with pytest.raises(ValueError, match=r"^the GGD prior -exp\(s\) \(\|j - i - mu\| \+ eps\) \*\* beta is not "
                                         r"finite in torch.float32 for distances up to 99 \(eps=1e-05\)"):
        model(x)
    with pytest.raises(ValueError, match=match):
        prior.bias(100)


def test_prior_that_overflows_the_queries_dtype_raises():
    """The prior is cast to the queries' dtype in ``forward``: -m eps^beta beyond float16's range
    (-0.25 * (1e-5)^-1.2 = -2.5e5) raises instead of becoming -inf there."""
    prior = GGDPositionalBias(GGDPriorConfig(4, shape_init=-1.2))
    q = torch.randn(1, 4, 3, 8, dtype=torch.float16)
    with pytest.raises(ValueError, match=r"overflows in the queries' dtype torch.float16"):
        prior(q, q)
    assert prior(q.float(), q.float())[2].dtype == torch.float32
