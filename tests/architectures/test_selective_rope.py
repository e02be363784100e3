"""Tests of Selective RoPE (arXiv 2511.17388) and the shared tiny attention / task code it uses."""
import math

import numpy as np
import pytest
import torch

from iclr26.architectures.selective_rope import (SelectiveRoPE, SelectiveRoPEConfig, apply_selective_rotary,
                                                 selective_frequencies)
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
    (dict(head_dim=8, model_dim=16, base=0.5), "base must be >= 1 for the 'rope' schedule"),
    (dict(head_dim=8, model_dim=16, schedule="rfa", base=1.0), r"base must lie in \(0, 1\) for the 'rfa'"),
    (dict(head_dim=8, model_dim=16, schedule="rfa", base=0.0), "base must lie in"),
    (dict(head_dim=8, model_dim=16, schedule="yarn"), "schedule must be 'rope' or 'rfa'"),
    (dict(head_dim=8, model_dim=16, temp_max=0.0), "temp_max must be > 0"),
    (dict(head_dim=8, model_dim=16, d_conv=0), "d_conv"),
    (dict(head_dim=0, model_dim=16), "head_dim must be a positive integer"),
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
    with pytest.raises(ValueError, match="q has 3 heads of dim 8, expected 2 heads of dim 8"):
        layer(torch.randn(1, 3, 5, 8), torch.randn(1, 3, 5, 8), torch.randn(1, 5, 16))
    with pytest.raises(ValueError, match=r"q and k must both be \(B, H, T, D\), got \(1, 2, 3, 8\) and \(1, 2, 4, 8\)"):
        layer(torch.randn(1, 2, 3, 8), torch.randn(1, 2, 4, 8), torch.randn(1, 3, 16))
    with pytest.raises(ValueError, match=r"got \(2, 3, 8\) and \(2, 3, 8\)"):
        layer(torch.randn(2, 3, 8), torch.randn(2, 3, 8), torch.randn(1, 3, 16))


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
    assert set(out["metrics"]) == {"parity_accuracy", "parity_4x_accuracy", "copy_2x_accuracy",
                                   "copy_in_dist_accuracy"}
    for arms in out["metrics"].values():
        assert set(arms) == set(experiment.ARMS)
        assert all(math.isfinite(v) for v in arms.values())
    p = out["info"]["params"]
    assert p["parity/rope"] >= p["parity/selective_rope"] and p["parity/nope"] >= p["parity/selective_rope"]


def test_frequency_schedules_hand_computed():
    """Official rotary_temperature: "rope" temp_max / base^(2j/D); "rfa" temp_max tan(a_j/2) /
    max tan(a_j/2), a_j = linspace(0, theta pi, D/2)."""
    rfa = selective_frequencies(SelectiveRoPEConfig(8, 16, schedule="rfa", base=0.5, temp_max=0.25))
    expected = 0.25 * torch.tensor([0.0, math.tan(math.pi / 12), math.tan(math.pi / 6), 1.0])
    torch.testing.assert_close(rfa, expected)
    assert rfa.dtype == torch.float32
    rope = selective_frequencies(SelectiveRoPEConfig(8, 16, base=10000.0, temp_max=2.0))
    torch.testing.assert_close(rope, torch.tensor([2.0, 0.2, 0.02, 0.002]))
    layer = SelectiveRoPE(SelectiveRoPEConfig(8, 16, 2, schedule="rfa", base=0.9999, temp_max=0.25))
    torch.testing.assert_close(layer.omega.detach(), selective_frequencies(layer.config))
    assert layer.omega.shape == (4,) and float(layer.omega.max()) == pytest.approx(0.25)


def test_without_conv_the_phase_is_the_projection_itself():
    """Official skip_conv: phi_t - phi_{t-1}, so Phi_t = W2 W1 l2norm(x_t) (plus t+1 times exp(b))."""
    torch.manual_seed(7)
    layer = SelectiveRoPE(SelectiveRoPEConfig(8, 16, 2, use_conv=False, use_bias=True)).double()
    with torch.no_grad():
        layer.phi_bias.copy_(torch.tensor([[0.1, -0.2, 0.3, 0.0], [0.5, 0.0, -1.0, 0.2]], dtype=torch.float64))
    x = torch.randn(2, 6, 16, dtype=torch.float64)
    q, k = torch.randn(2, 2, 6, 8, dtype=torch.float64), torch.randn(2, 2, 6, 8, dtype=torch.float64)
    _, _, (cache, Phi_last) = layer.rotate(q, k, x)
    h = x.view(2, 6, 2, 8)
    h = (h / torch.sqrt(h.pow(2).sum(-1, keepdim=True) + 1e-6)).reshape(2, 6, 16)  # l2norm, eps 1e-6
    p = layer.phi_proj(h).view(2, 6, 2, 4).transpose(1, 2)  # (B, H, T, D/2)
    Phi = p + torch.arange(1, 7, dtype=torch.float64)[:, None] * torch.exp(layer.phi_bias)[None, :, None, :]
    torch.testing.assert_close(Phi_last, Phi[:, :, -1:], rtol=1e-10, atol=1e-10)
    qr, kr, _ = layer(q, k, x)
    ref = apply_selective_rotary(q, k, torch.diff(Phi, dim=-2, prepend=torch.zeros_like(Phi[:, :, :1])),
                                 layer.omega)
    torch.testing.assert_close(qr, ref[0], rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(kr, ref[1], rtol=1e-10, atol=1e-10)
    assert cache.shape == (2, 8, 1)


def test_cached_decoding_without_conv_matches_full_sequence():
    torch.manual_seed(8)
    layer = SelectiveRoPE(SelectiveRoPEConfig(8, 16, 2, use_conv=False, use_gate=True, schedule="rfa", base=0.9))
    q, k, x = torch.randn(1, 2, 7, 8), torch.randn(1, 2, 7, 8), torch.randn(1, 7, 16)
    qf, kf, _ = layer(q, k, x)
    cache, qs, ks = None, [], []
    for t in range(0, 7, 3):
        qt, kt, cache = layer.rotate(q[:, :, t : t + 3], k[:, :, t : t + 3], x[:, t : t + 3], cache)
        qs.append(qt)
        ks.append(kt)
    torch.testing.assert_close(torch.cat(qs, 2), qf, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(torch.cat(ks, 2), kf, atol=1e-5, rtol=1e-5)


def test_bfloat16_angles_are_computed_in_float32_at_long_positions():
    """Phases 1 per step (zero projection, bias exp(0)), module and inputs in bfloat16: at
    t >= 1500 the rotation must match the float64 RoPE rotation of the same bf16 inputs to bf16
    rounding (angles rounded to bf16 would be off by up to 4 radians there)."""
    torch.manual_seed(9)
    T = 1600
    layer = _const_phase_layer(head_dim=8, model_dim=16, heads=2, base=10000.0).to(torch.bfloat16)
    assert layer.omega.dtype == torch.bfloat16
    q = torch.randn(1, 2, T, 8).to(torch.bfloat16)
    k = torch.randn(1, 2, T, 8).to(torch.bfloat16)
    x = torch.randn(1, T, 16).to(torch.bfloat16)
    qs, ks, _ = layer(q, k, x)
    assert qs.dtype == torch.bfloat16 and ks.dtype == torch.bfloat16
    rope = RoPE(8, base=10000.0, offset=1)
    rope.omega = rope_frequencies(8, 10000.0).double()
    qr, kr, _ = rope(q.double(), k.double())
    tail = slice(1500, T)
    torch.testing.assert_close(qs[:, :, tail].double(), qr[:, :, tail], atol=3e-2, rtol=1e-2)
    torch.testing.assert_close(ks[:, :, tail].double(), kr[:, :, tail], atol=3e-2, rtol=1e-2)


def test_bfloat16_queries_with_float32_phases_rotate_in_float32():
    """A float32 module (learned phases plus bias, so Phi ~ t) given bf16 q, k: same rotation as
    for the float32 copies of those q, k, up to bf16 rounding of the output, at t >= 1500."""
    torch.manual_seed(10)
    T = 1600
    layer = SelectiveRoPE(SelectiveRoPEConfig(8, 16, 2, use_bias=True, base=10.0))
    q = torch.randn(1, 2, T, 8).to(torch.bfloat16)
    k = torch.randn(1, 2, T, 8).to(torch.bfloat16)
    x = torch.randn(1, T, 16)
    with torch.no_grad():
        qb, kb, _ = layer(q, k, x)
        qf, kf, _ = layer(q.float(), k.float(), x)
    assert qb.dtype == torch.bfloat16
    torch.testing.assert_close(qb[:, :, 1500:].float(), qf[:, :, 1500:], atol=3e-2, rtol=1e-2)
    torch.testing.assert_close(kb[:, :, 1500:].float(), kf[:, :, 1500:], atol=3e-2, rtol=1e-2)


def test_float64_stays_float64():
    torch.manual_seed(11)
    layer = SelectiveRoPE(SelectiveRoPEConfig(8, 16, 2, use_bias=True)).double()
    q, k, x = (torch.randn(1, 2, 5, 8, dtype=torch.float64), torch.randn(1, 2, 5, 8, dtype=torch.float64),
               torch.randn(1, 5, 16, dtype=torch.float64))
    qr, kr, (cache, Phi) = layer.rotate(q, k, x)
    assert qr.dtype == kr.dtype == Phi.dtype == torch.float64


def test_experiment_follows_the_official_configs():
    """RoPE base 5e5 (official rope.yaml); Selective RoPE: the state-tracking sweep (base 1, bias,
    conv) for parity, the copying config (skip_conv, rfa 0.9999, temp_max 0.25) for copying."""
    from iclr26.architectures.selective_rope import experiment as E
    cfg = E.SCALES["smoke"]
    T = E._TASKS_QUICK
    rope = E._build("rope", cfg, T["parity"], 2, 64).layers[0]["mixer"].positional
    assert isinstance(rope, RoPE) and rope.base == 500000.0
    sp = E._build("selective_rope", cfg, T["parity"], 2, 64).layers[0]["mixer"].positional.config
    assert (sp.base, sp.use_bias, sp.use_conv, sp.schedule) == (1.0, True, True, "rope")
    sc = E._build("selective_rope", cfg, T["copy"], 16, 64).layers[0]["mixer"].positional.config
    assert (sc.use_conv, sc.schedule, sc.base, sc.temp_max, sc.use_gate, sc.use_bias) == \
        (False, "rfa", 0.9999, 0.25, False, False)
    assert T["copy"]["test_lens"]["copy_2x"] == 2 * T["copy"]["max_len"]
    assert T["parity"]["test_lens"]["parity_4x"] == 4 * T["parity"]["seq_len"]
    with pytest.raises(ValueError, match="unknown arm"):
        E._build("alibi", cfg, T["parity"], 2, 64)


def test_rotary_accumulates_half_precision_phases_in_float32_on_their_device():
    """apply_selective_rotary: bf16 phases of 1 summed over 1600 steps stay exact (float32 cumsum);
    Phi has the promoted dtype; omega follows the phases' device (meta here)."""
    T = 1600
    ones = torch.ones(1, 1, T, 2, dtype=torch.bfloat16)
    q = torch.randn(1, 1, T, 4).to(torch.bfloat16)
    _, _, Phi = apply_selective_rotary(q, q, ones, torch.tensor([1.0, 0.5]))
    assert Phi.dtype == torch.float32
    torch.testing.assert_close(Phi[0, 0, :, 0], torch.arange(1.0, T + 1), rtol=0, atol=0)
    _, _, Phi = apply_selective_rotary(q.float(), q.float(), ones.float(), torch.tensor([1.0, 0.5]),
                                       offset=torch.full((1, 1, 1, 2), 0.5, dtype=torch.float64))
    assert Phi.dtype == torch.float32
    qm = torch.empty(1, 1, 3, 4, device="meta")
    out = apply_selective_rotary(qm, qm, torch.empty(1, 1, 3, 2, device="meta"), torch.tensor([1.0, 0.5]))
    assert all(t.device.type == "meta" for t in out)


def test_parameter_layout_follows_official_code():
    """phi projection without biases, gate projection with a bias (official SelectiveRoPE), depthwise
    conv initialised as nn.Conv1d (kaiming uniform, a = sqrt(5): bound 1/sqrt(d_conv))."""
    torch.manual_seed(12)
    layer = SelectiveRoPE(SelectiveRoPEConfig(16, 64, 4, use_gate=True))
    assert layer.phi_proj[0].bias is None and layer.phi_proj[1].bias is None
    assert layer.gate_proj.bias is not None
    w = layer.conv_weight.detach().abs()
    assert w.shape == (32, 4)
    assert float(w.max()) <= 0.5 and float(w.max()) > 0.47


def test_conv_activation_and_gate_exact():
    """conv_activation='silu' applies silu after the conv; the gate multiplies by sigmoid(W_g h)."""
    torch.manual_seed(13)
    plain = SelectiveRoPE(SelectiveRoPEConfig(8, 16, 2))
    act = SelectiveRoPE(SelectiveRoPEConfig(8, 16, 2, conv_activation="silu"))
    act.load_state_dict(plain.state_dict())
    x = torch.randn(2, 5, 16)
    torch.testing.assert_close(act.phases(x)[0], torch.nn.functional.silu(plain.phases(x)[0]))
    gated = SelectiveRoPE(SelectiveRoPEConfig(8, 16, 2, use_gate=True))
    gated.load_state_dict(plain.state_dict(), strict=False)
    with torch.no_grad():
        gated.gate_proj.weight.normal_()
        gated.gate_proj.bias.fill_(0.3)
    h = x.view(2, 5, 2, 8)
    h = (h * torch.rsqrt(h.pow(2).sum(-1, keepdim=True) + 1e-6)).reshape(2, 5, 16)
    g = torch.sigmoid(gated.gate_proj(h)).transpose(1, 2)[..., None]
    torch.testing.assert_close(gated.phases(x)[0], plain.phases(x)[0] * g)


@pytest.mark.parametrize("d_conv", [1, 2])
def test_cached_decoding_with_short_kernels(d_conv):
    torch.manual_seed(14)
    layer = SelectiveRoPE(SelectiveRoPEConfig(8, 16, 2, d_conv=d_conv))
    q, k, x = torch.randn(1, 2, 6, 8), torch.randn(1, 2, 6, 8), torch.randn(1, 6, 16)
    qf, _, _ = layer(q, k, x)
    cache, qs = None, []
    for t in range(6):
        qt, _, cache = layer.rotate(q[:, :, t : t + 1], k[:, :, t : t + 1], x[:, t : t + 1], cache)
        qs.append(qt)
        assert cache[0].shape == (1, 8, d_conv - 1)
    torch.testing.assert_close(torch.cat(qs, 2), qf, atol=1e-5, rtol=1e-5)


def test_frequencies_are_state():
    """The (frozen) frequencies are module state: loaded or edited values are the ones used, also
    after a cast to bfloat16 when they are trained."""
    torch.manual_seed(15)
    q, k, x = torch.randn(1, 2, 4, 8), torch.randn(1, 2, 4, 8), torch.randn(1, 4, 16)
    a = SelectiveRoPE(SelectiveRoPEConfig(8, 16, 2, use_bias=True, base=100.0))
    b = SelectiveRoPE(SelectiveRoPEConfig(8, 16, 2, use_bias=True, base=10000.0))
    b.load_state_dict(a.state_dict())
    torch.testing.assert_close(b(q, k, x)[0], a(q, k, x)[0])
    t = SelectiveRoPE(SelectiveRoPEConfig(8, 16, 2, use_bias=True, train_frequencies=True))
    with torch.no_grad():
        t.omega.copy_(torch.tensor([2.0, 1.0, 0.5, 0.25]))
    ref = t(q, k, x)[0]
    tb = t.to(torch.bfloat16)
    out = tb(q.to(torch.bfloat16), k.to(torch.bfloat16), x.to(torch.bfloat16))[0]
    torch.testing.assert_close(out.float(), ref, atol=0.1, rtol=0.05)


@pytest.mark.parametrize("kw", [dict(use_bias=True, use_gate=True), dict(use_bias=True, use_conv=False)])
def test_bfloat16_module_phases_match_float32_at_position_2000(kw):
    """A module cast with ``.bfloat16()`` against the float32 module with the same (bf16-rounded)
    weights: the phase path (bias exp(b) added to phi, gate, cumulative sum) runs in float32, so the
    rotated q, k at position 2000 differ by bf16 output rounding only (< 0.05). Adding the bias in
    bf16 (spacing 2^-7 near 1) drifts the cumulative phase by about 0.2-0.4 rad there."""
    import copy
    torch.manual_seed(16)
    T = 2001
    f32 = SelectiveRoPE(SelectiveRoPEConfig(8, 16, 2, base=10.0, **kw))
    with torch.no_grad():
        f32.phi_bias.normal_(0.0, 0.3)
        for p in f32.parameters():
            if p.requires_grad:  # learned weights; the frozen frequencies stay exact in both copies
                p.copy_(p.bfloat16().float())
    b16 = copy.deepcopy(f32).bfloat16()
    assert b16.phi_bias.dtype == torch.bfloat16
    for p, pb in zip(f32.parameters(), b16.parameters()):
        if p.requires_grad:
            assert torch.equal(p, pb.float())
    q, k, x = (torch.randn(1, 2, T, 8).bfloat16(), torch.randn(1, 2, T, 8).bfloat16(),
               torch.randn(1, T, 16).bfloat16())
    with torch.no_grad():
        qf, kf, (_, Pf) = f32.rotate(q.float(), k.float(), x.float())
        qb, kb, (_, Pb) = b16.rotate(q, k, x)
        phi_b, _ = b16.phases(x)
        phi_f, _ = f32.phases(x.float())
    assert qb.dtype == kb.dtype == torch.bfloat16 and Pb.dtype == phi_b.dtype == torch.float32
    assert float(Pf.abs().max()) > 500  # the bias makes the phase grow with the position
    torch.testing.assert_close(phi_b, phi_f, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(Pb, Pf, rtol=1e-6, atol=1e-3)
    assert float((phi_b.cumsum(-2)[:, :, 2000] - phi_f.cumsum(-2)[:, :, 2000]).abs().max()) < 0.05
    assert float((qb[:, :, 2000].float() - qf[:, :, 2000]).abs().max()) < 0.05
    assert float((kb[:, :, 2000].float() - kf[:, :, 2000]).abs().max()) < 0.05
