"""Tests of Selective RoPE (arXiv 2511.17388) and the shared tiny attention / task code it uses."""
import math

import numpy as np
import pytest
import torch

from iclr26.architectures.selective_rope import SelectiveRoPE, SelectiveRoPEConfig, apply_selective_rotary
from iclr26.common.synthetic_tasks import copying, group_table, mqar, state_tracking
from iclr26.common.tiny_attention import (GatedLinearAttention, RoPE, SoftmaxAttention, TinyLM, TinyLMConfig,
                                          gla_chunked, gla_parallel, gla_recurrent, lm_loss, rope_frequencies)


def _const_phase_layer(head_dim=8, model_dim=16, heads=2, base=10000.0):
    """Selective RoPE whose phase is the constant 1: zero projection, no conv, bias exp(0) = 1."""
    cfg = SelectiveRoPEConfig(head_dim, model_dim, heads, use_conv=False, use_bias=True, base=base)
    layer = SelectiveRoPE(cfg)
    with torch.no_grad():
        for p in layer.phi_proj.parameters():
            p.zero_()
    return layer


def test_constant_phase_equals_rope_exactly():
    """Reduction (method section: RoPE is the case phi_t == 1): phi_t == 1 gives Phi_t = t + 1, i.e. RoPE at positions 1..T."""
    torch.manual_seed(0)
    layer = _const_phase_layer().double()
    q, k = torch.randn(3, 2, 11, 8, dtype=torch.float64), torch.randn(3, 2, 11, 8, dtype=torch.float64)
    x = torch.randn(3, 11, 16, dtype=torch.float64)
    qs, ks, _ = layer(q, k, x)
    rope = RoPE(8, base=10000.0, offset=1)
    rope.omega = rope.omega.double()
    qr, kr, _ = rope(q, k)
    torch.testing.assert_close(qs, qr, rtol=0, atol=1e-12)
    torch.testing.assert_close(ks, kr, rtol=0, atol=1e-12)
    # relative angles only: attention scores equal those of RoPE at positions 0..T-1
    rope0 = RoPE(8, base=10000.0)
    rope0.omega = rope0.omega.double()
    q0, k0, _ = rope0(q, k)
    torch.testing.assert_close(qs @ ks.transpose(-1, -2), q0 @ k0.transpose(-1, -2), rtol=0, atol=1e-12)


def test_rope_rotation_hand_computed():
    """RoPE Eq.: pair (x_0, x_{D/2}) at position t rotates by t * omega_0 = t (omega_0 = 1)."""
    q = torch.zeros(1, 1, 3, 4)
    q[..., 0] = 1.0
    qr, _, _ = RoPE(4, base=100.0)(q, q)
    t = torch.arange(3.0)
    torch.testing.assert_close(qr[0, 0, :, 0], torch.cos(t))
    torch.testing.assert_close(qr[0, 0, :, 2], torch.sin(t))
    # second pair frequency: 1 / 100^(2/4) = 0.1
    torch.testing.assert_close(rope_frequencies(4, 100.0), torch.tensor([1.0, 0.1]))


def test_selective_phases_are_cumulative_and_relative():
    """<R(Phi_t) q, R(Phi_s) k> depends on Phi_t - Phi_s = sum_{s<r<=t} phi_r only."""
    torch.manual_seed(1)
    q, k = torch.randn(1, 1, 5, 4, dtype=torch.float64), torch.randn(1, 1, 5, 4, dtype=torch.float64)
    phases = torch.rand(1, 1, 5, 2, dtype=torch.float64)
    omega = torch.tensor([1.0, 0.5], dtype=torch.float64)
    q1, k1, Phi = apply_selective_rotary(q, k, phases, omega)
    q2, k2, _ = apply_selective_rotary(q, k, phases, omega, offset=torch.full((1, 1, 1, 2), 3.7, dtype=torch.float64))
    torch.testing.assert_close(q1 @ k1.transpose(-1, -2), q2 @ k2.transpose(-1, -2))
    torch.testing.assert_close(Phi[0, 0, -1], phases[0, 0].sum(0))
    # norms are preserved (rotation)
    torch.testing.assert_close(q1.norm(dim=-1), q.norm(dim=-1))


def test_input_dependence_and_causality():
    torch.manual_seed(2)
    layer = SelectiveRoPE(SelectiveRoPEConfig(8, 16, 2, use_gate=True, use_bias=True))
    q, k = torch.randn(2, 2, 9, 8), torch.randn(2, 2, 9, 8)
    x = torch.randn(2, 9, 16)
    q1, _, _ = layer(q, k, x)
    x2 = x.clone()
    x2[:, 5:] += torch.randn(2, 4, 16)
    q2, _, _ = layer(q, k, x2)
    torch.testing.assert_close(q1[:, :, :5], q2[:, :, :5])  # causal: the future does not move the past
    assert not torch.allclose(q1[:, :, 5:], q2[:, :, 5:])  # selective: angles depend on the input


def test_cached_decoding_matches_full_sequence():
    torch.manual_seed(3)
    layer = SelectiveRoPE(SelectiveRoPEConfig(8, 16, 2, d_conv=3, use_bias=True))
    q, k, x = torch.randn(1, 2, 7, 8), torch.randn(1, 2, 7, 8), torch.randn(1, 7, 16)
    qf, kf, _ = layer(q, k, x)
    cache, qs = None, []
    for t in range(7):
        qt, kt, cache = layer.rotate(q[:, :, t : t + 1], k[:, :, t : t + 1], x[:, t : t + 1], cache)
        qs.append(qt)
    torch.testing.assert_close(torch.cat(qs, 2), qf, atol=1e-5, rtol=1e-5)


def test_state_dict_round_trip_and_backward():
    torch.manual_seed(4)
    cfg = SelectiveRoPEConfig(8, 16, 2, use_gate=True, use_bias=True)
    a, b = SelectiveRoPE(cfg), SelectiveRoPE(cfg)
    b.load_state_dict(a.state_dict())
    q, k, x = torch.randn(1, 2, 5, 8), torch.randn(1, 2, 5, 8), torch.randn(1, 5, 16, requires_grad=True)
    qa, _, _ = a(q, k, x)
    qb, _, _ = b(q, k, x)
    torch.testing.assert_close(qa, qb)
    qa.sum().backward()
    assert x.grad is not None and torch.isfinite(x.grad).all()
    assert not a.omega.requires_grad  # frequencies frozen by default (temp_grad=False in the code)


@pytest.mark.parametrize("kw, word", [
    (dict(head_dim=7, model_dim=14), "even"),
    (dict(head_dim=8, model_dim=15, num_heads=2), "divisible"),
    (dict(head_dim=8, model_dim=16, base=0.5), "base"),
    (dict(head_dim=8, model_dim=16, phi_rank=0), "phi_rank"),
    (dict(head_dim=8, model_dim=16, conv_activation="relu"), "conv_activation"),
])
def test_rejects_bad_config(kw, word):
    with pytest.raises(ValueError, match=word):
        SelectiveRoPEConfig(**kw)


def test_rejects_wrong_shapes():
    layer = SelectiveRoPE(SelectiveRoPEConfig(8, 16, 2))
    with pytest.raises(ValueError, match="model_dim"):
        layer(torch.randn(1, 2, 3, 8), torch.randn(1, 2, 3, 8), torch.randn(1, 3, 12))
    with pytest.raises(ValueError, match="heads"):
        layer(torch.randn(1, 3, 3, 8), torch.randn(1, 3, 3, 8), torch.randn(1, 3, 16))


# ---- shared modules used by the experiment --------------------------------------------------
def test_gla_parallel_and_chunked_equal_recurrence():
    """GLA recurrence S_t = diag(alpha_t) S_{t-1} + k_t v_t^T, o_t = S_t^T q_t (Yang et al. Eq. 3)."""
    torch.manual_seed(5)
    q, k = torch.randn(2, 2, 13, 4, dtype=torch.float64), torch.randn(2, 2, 13, 4, dtype=torch.float64)
    v = torch.randn(2, 2, 13, 3, dtype=torch.float64)
    la = torch.nn.functional.logsigmoid(torch.randn(2, 2, 13, 4, dtype=torch.float64))
    ref = gla_recurrent(q, k, v, la)
    torch.testing.assert_close(gla_parallel(q, k, v, la), ref)
    torch.testing.assert_close(gla_chunked(q, k, v, la, chunk=4), ref)


def test_gla_with_selective_rope_is_causal_and_rejects_bias():
    torch.manual_seed(6)
    layer = GatedLinearAttention(16, 2, SelectiveRoPE(SelectiveRoPEConfig(8, 16, 2)))
    x = torch.randn(1, 10, 16)
    y1 = layer(x)
    x2 = x.clone()
    x2[:, 6:] = 0
    torch.testing.assert_close(layer(x2)[:, :6], y1[:, :6])
    from iclr26.common.tiny_attention import ALiBi
    with pytest.raises(ValueError, match="rotation"):
        GatedLinearAttention(16, 2, ALiBi(2))(x)


def test_softmax_attention_with_selective_rope_runs():
    attn = SoftmaxAttention(16, 2, SelectiveRoPE(SelectiveRoPEConfig(8, 16, 2)))
    assert attn(torch.randn(2, 5, 16)).shape == (2, 5, 16)


def test_tiny_lm_learns_parity_with_selective_rope():
    """Learns: a 1-layer GLA with Selective RoPE fits tagged parity quickly (loss falls)."""
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    x, y = state_tracking(64, 8, "parity", rng)
    sr = SelectiveRoPEConfig(8, 16, 2, base=1.0, use_bias=True)
    model = TinyLM(TinyLMConfig(2, 16, 1, 2, 32, mixer="gla"), lambda i: SelectiveRoPE(sr))
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    first = float(lm_loss(model, (x, y)).detach())
    for _ in range(40):
        opt.zero_grad()
        loss = lm_loss(model, (x, y))
        loss.backward()
        opt.step()
    assert float(loss.detach()) < first - 0.05


def test_tasks():
    rng = np.random.default_rng(0)
    x, y = state_tracking(4, 9, "parity", rng)
    torch.testing.assert_close(y, torch.cumsum(x, 1) % 2)
    T = group_table("S3")
    assert T.shape == (6, 6) and (T[0] == np.arange(6)).all()  # identity first
    assert not (T == T.T).all()  # S3 is not abelian
    x, y = mqar(8, 30, 5, 40, rng)
    scored = y != -100
    assert (scored.sum(1) == 5).all()
    for i in range(8):
        pairs = dict(zip(x[i, 0:10:2].tolist(), x[i, 1:10:2].tolist()))
        for t in torch.nonzero(scored[i]).flatten().tolist():
            assert pairs[int(x[i, t])] == int(y[i, t])
    x, y = copying(3, 5, 10, rng)
    torch.testing.assert_close(y[:, 5:], x[:, :5])
    with pytest.raises(ValueError, match="n_pairs"):
        mqar(2, 30, 30, 40, rng)
    with pytest.raises(ValueError, match="group"):
        group_table("Q8")
    with pytest.raises(TypeError, match="Generator"):
        copying(2, 3, 10, 0)


def test_experiment_smoke_contract():
    from iclr26.architectures.selective_rope import experiment
    out = experiment.run("smoke", 0)
    assert set(out["metrics"]) == {"parity_accuracy", "mqar_accuracy", "copy_accuracy"}
    for arms in out["metrics"].values():
        assert set(arms) == set(experiment.ARMS)
        assert all(math.isfinite(v) for v in arms.values())
    p = out["info"]["params"]
    assert p["parity/rope"] >= p["parity/selective_rope"] and p["parity/nope"] >= p["parity/selective_rope"]
