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
    prior = GGDPositionalBias(GGDPriorConfig(2, scale_init=2.0, shape_init=0.5, eps=0.0))
    b = prior.bias(3)
    # exp(s) = 1/2; entry (i=2, j=0): -(1/2) * 2^0.5
    assert b.shape == (2, 3, 3)
    assert math.isclose(float(b[0, 2, 0].detach()), -0.5 * math.sqrt(2), rel_tol=1e-6)
    assert math.isclose(float(b[1, 2, 1].detach()), -0.5, rel_tol=1e-6)
    assert float(b[0, 1, 1]) == 0.0
    with torch.no_grad():
        prior.loc.fill_(-1.0)  # location shifts the mode: j - i = -1 gets the largest prior
    b = prior.bias(4)
    assert int(b[0, 3].argmax()) == 2


def test_alibi_slopes_match_press_et_al():
    """ALiBi slopes for 8 heads: 1/2, 1/4, ..., 1/256 (Press et al. 2022, Sec. 3)."""
    torch.testing.assert_close(alibi_slopes(8), torch.tensor([2.0 ** -(i + 1) for i in range(8)]))
    assert len(alibi_slopes(6)) == 6


def test_reduces_to_alibi_exactly():
    """beta = 1, scale = ALiBi slopes, eps = 0: the bias IS ALiBi's (Lemma 2: Laplace prior)."""
    prior = GGDPositionalBias(GGDPriorConfig(4, eps=0.0))
    torch.testing.assert_close(prior.bias(9), ALiBi(4).bias(9), rtol=0, atol=0)


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
    assert float(b[0]) > float(b[-2])


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
