"""Tests of iclr26.common.tiny_attention: positional schemes, attention mixers, the tiny LM.

References are written independently of the module (complex-number rotations, per-position loops
in float64, the ALiBi paper's slope rule written out), and every fixture model has weights large
enough that attention is far from uniform, so a shifted mask or rotation changes the output.
"""
import math

import numpy as np
import pytest
import torch
from torch import nn

from iclr26.common.tiny_attention import (ALiBi, GatedLinearAttention, NoPE, RMSNorm, RoPE, SoftmaxAttention,
                                          SwiGLU, TinyLM, TinyLMConfig, alibi_slopes, count_parameters,
                                          gla_chunked, gla_parallel, gla_recurrent, lm_loss, masked_accuracy,
                                          relative_distance, rope_frequencies, rotate_half_pairs,
                                          ssmax_log_length)

F64 = torch.float64


def _sharpen(module: nn.Module, std: float = 0.5, seed: int = 0) -> nn.Module:
    """Re-draw every weight with a large std so attention patterns are peaked, not uniform."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.randn(p.shape, generator=g, dtype=p.dtype) * std + (1.0 if p.ndim == 1 else 0.0))
    return module


# ----------------------------------------------------------------------------- RoPE
def test_rope_frequencies_values():
    """omega_j = scale / base^(2j/D) (Su et al. 2021, Eq. 15)."""
    got = rope_frequencies(8, 100.0)
    want = torch.tensor([100.0 ** (-2 * j / 8) for j in range(4)])
    torch.testing.assert_close(got, want, rtol=0, atol=1e-7)
    assert got.dtype == torch.float32
    torch.testing.assert_close(rope_frequencies(8, 100.0, scale=0.5), 0.5 * want, rtol=0, atol=1e-7)
    torch.testing.assert_close(rope_frequencies(2, 7.0), torch.tensor([1.0]))


def test_rope_frequencies_rejections():
    with pytest.raises(ValueError, match=r"^head_dim must be even for rotary embeddings, got 5$"):
        rope_frequencies(5)
    with pytest.raises(ValueError, match=r"^base must be >= 1, got 0.5$"):
        rope_frequencies(4, 0.5)
    rope_frequencies(4, 1.0)  # base = 1 is allowed (all frequencies 1)


def _complex_rotate(x: torch.Tensor, angles: torch.Tensor) -> torch.Tensor:
    """Reference: pair (x_j, x_{j+D/2}) as the complex number x_j + i x_{j+D/2}, times e^{i angle}."""
    half = x.shape[-1] // 2
    z = torch.complex(x[..., :half].double(), x[..., half:].double()) * torch.exp(1j * angles.double())
    return torch.cat([z.real, z.imag], dim=-1)


def test_rotate_half_pairs_against_complex_multiplication():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(2, 3, 5, 6, generator=g, dtype=F64)
    a = torch.randn(5, 3, generator=g, dtype=F64) * 3
    torch.testing.assert_close(rotate_half_pairs(x, a), _complex_rotate(x, a), rtol=0, atol=1e-12)
    # norm of every pair is preserved, and angle 0 is the identity
    torch.testing.assert_close(rotate_half_pairs(x, torch.zeros(5, 3, dtype=F64)), x, rtol=0, atol=0)
    with pytest.raises(ValueError, match=r"last dimension of x must be even .* got 5"):
        rotate_half_pairs(torch.zeros(2, 5), torch.zeros(2, 2))


def test_rotate_half_pairs_keeps_input_dtype_and_computes_in_float32():
    x = torch.tensor([[1.0, 0.0]], dtype=torch.bfloat16)
    a = torch.tensor([[1000.5]], dtype=torch.float32)           # not representable in bfloat16
    out = rotate_half_pairs(x, a)
    assert out.dtype == torch.bfloat16
    want = torch.tensor([[math.cos(1000.5), math.sin(1000.5)]])
    torch.testing.assert_close(out.float(), want, rtol=0, atol=1e-2)


def _rope_reference(x: torch.Tensor, base: float, offset: int = 0) -> torch.Tensor:
    T, D = x.shape[-2], x.shape[-1]
    omega = torch.tensor([base ** (-2 * j / D) for j in range(D // 2)], dtype=F64)
    t = torch.arange(T, dtype=F64) + offset
    return _complex_rotate(x, t[:, None] * omega[None, :])


def test_rope_matches_reference_and_offset():
    g = torch.Generator().manual_seed(1)
    q, k = torch.randn(2, 2, 7, 8, generator=g, dtype=F64), torch.randn(2, 2, 7, 8, generator=g, dtype=F64)
    rope = RoPE(8, base=50.0, offset=3)
    qr, kr, bias = rope(q, k)
    assert bias is None and qr.dtype == F64
    # the frequencies are float32 numbers; the reference uses exact ones
    torch.testing.assert_close(qr, _rope_reference(q, 50.0, 3), rtol=0, atol=1e-6)
    torch.testing.assert_close(kr, _rope_reference(k, 50.0, 3), rtol=0, atol=1e-6)


def test_rope_scores_depend_on_relative_position_only():
    """<R_t q, R_s k> = Re(q conj(k) e^{i (t - s) omega}): the score matrix of a constant q, k is Toeplitz."""
    g = torch.Generator().manual_seed(2)
    q = torch.randn(8, generator=g, dtype=F64).expand(1, 1, 9, 8)
    k = torch.randn(8, generator=g, dtype=F64).expand(1, 1, 9, 8)
    qr, kr, _ = RoPE(8, base=10.0)(q, k)
    s = (qr @ kr.transpose(-1, -2))[0, 0]
    for d in range(-8, 9):
        diag = torch.diagonal(s, d)
        torch.testing.assert_close(diag, diag[:1].expand_as(diag), rtol=0, atol=1e-5)
    assert s.std() > 0.1  # the scores do vary with the distance


@pytest.mark.parametrize("cast", [torch.bfloat16, torch.float16])
def test_rope_half_precision_module_keeps_angles_exact_at_long_range(cast):
    """A bf16 / fp16 model at t up to 2047: angles in float32, only the output rounded to the input dtype."""
    T = 2048
    g = torch.Generator().manual_seed(3)
    q = torch.randn(1, 1, T, 16, generator=g) * 2
    rope = RoPE(16).to(cast)                       # casts the frequency buffer too
    qh = q.to(cast)
    out, _, _ = rope(qh, qh)
    assert out.dtype == cast
    ref = _rope_reference(qh.double(), 10000.0)
    err = (out.double() - ref).abs().max().item()
    assert err < 0.05, err                         # bf16 output rounding: |q| ~ 8 -> 2^-5
    # angles rounded to the input dtype would be off by radians: the error would be O(|q|)


def test_rope_float64_module_is_exact():
    q = torch.randn(1, 1, 40, 8, dtype=F64)
    rope = RoPE(8, base=10.0).double()
    assert rope.omega.dtype == F64
    out, _, _ = rope(q, q)
    omega = rope.omega
    t = torch.arange(40, dtype=F64)
    torch.testing.assert_close(out, _complex_rotate(q, t[:, None] * omega), rtol=0, atol=1e-12)


# ----------------------------------------------------------------------------- ALiBi
def test_alibi_slopes_power_of_two_and_interleaved():
    """Press et al. 2022, Sec. 3: 2^(-8h/n); other head counts take the closest power of two c, then
    every other slope of the 2c-head sequence."""
    torch.testing.assert_close(alibi_slopes(8), torch.tensor([2.0 ** -(h + 1) for h in range(8)]))
    torch.testing.assert_close(alibi_slopes(4), torch.tensor([2.0 ** -(2 * h + 2) for h in range(4)]))
    torch.testing.assert_close(alibi_slopes(1), torch.tensor([2.0 ** -8]))
    torch.testing.assert_close(alibi_slopes(6), torch.tensor([2.0 ** -2, 2.0 ** -4, 2.0 ** -6, 2.0 ** -8,
                                                              2.0 ** -1, 2.0 ** -3]))
    twelve = [2.0 ** -(h + 1) for h in range(8)] + [2.0 ** -(0.5 + h) for h in range(4)]
    torch.testing.assert_close(alibi_slopes(12), torch.tensor(twelve))
    assert alibi_slopes(3).dtype == torch.float32
    with pytest.raises(ValueError, match=r"^n_heads must be >= 1, got 0$"):
        alibi_slopes(0)


def test_relative_distance_values():
    torch.testing.assert_close(relative_distance(2, 4), torch.tensor([[-2.0, -1, 0, 1], [-3.0, -2, -1, 0]]))
    torch.testing.assert_close(relative_distance(3), torch.tensor([[0.0, 1, 2], [-1.0, 0, 1], [-2.0, -1, 0]]))
    assert relative_distance(2, device="meta").device.type == "meta"


def test_alibi_bias_values_and_protocol():
    alibi = ALiBi(2)
    b = alibi.bias(3)
    m = alibi_slopes(2)
    want = -m[:, None, None] * torch.tensor([[0.0, 1, 2], [1.0, 0, 1], [2.0, 1, 0]])
    torch.testing.assert_close(b, want, rtol=0, atol=0)
    q = torch.randn(1, 2, 3, 4)
    k = torch.randn(1, 2, 3, 4)
    q2, k2, bias = alibi(q, k)
    assert q2 is q and k2 is k
    torch.testing.assert_close(bias, want, rtol=0, atol=0)
    assert alibi.bias(2, 5).shape == (2, 2, 5)


def test_alibi_half_precision_module_keeps_float32_bias():
    full = ALiBi(4).bias(300, 300)
    half = ALiBi(4).to(torch.bfloat16)
    q = torch.zeros(1, 4, 300, 8, dtype=torch.bfloat16)
    _, _, bias = half(q, q)
    assert bias.dtype == torch.float32
    torch.testing.assert_close(bias, full, rtol=0, atol=0)
    _, _, b64 = ALiBi(4)(q.double(), q.double())
    assert b64.dtype == F64


# ----------------------------------------------------------------------------- blocks
def test_rmsnorm_formula_eps_and_dtype():
    norm = RMSNorm(4, eps=1e-2)
    with torch.no_grad():
        norm.weight.copy_(torch.tensor([1.0, 2.0, -1.0, 0.5]))
    x = torch.tensor([[1.0, -2.0, 3.0, 0.5], [0.1, 0.1, 0.1, 0.1]])
    rms = torch.sqrt((x**2).mean(-1, keepdim=True) + 1e-2)
    torch.testing.assert_close(norm(x), x / rms * norm.weight, rtol=1e-6, atol=0)
    assert norm.eps == 1e-2 and RMSNorm(3).eps == 1e-6
    xb = x.to(torch.bfloat16)
    assert norm.to(torch.bfloat16)(xb).dtype == torch.bfloat16


def test_swiglu_formula():
    torch.manual_seed(0)
    mlp = SwiGLU(3, 5)
    x = torch.randn(2, 3)
    a, b = x @ mlp.w1.weight.T, x @ mlp.w3.weight.T
    want = (a * torch.sigmoid(a) * b) @ mlp.w2.weight.T
    torch.testing.assert_close(mlp(x), want)


def test_ssmax_log_length_values():
    torch.testing.assert_close(ssmax_log_length(3, 5), torch.log(torch.tensor([[3.0], [4.0], [5.0]])))
    torch.testing.assert_close(ssmax_log_length(2), torch.log(torch.tensor([[1.0], [2.0]])))


def _attention_reference(layer: SoftmaxAttention, x: torch.Tensor, bias=None, ssmax_scale=None):
    """Per-position float64 loop: query t attends to keys s <= t."""
    B, T, d = x.shape
    H, D = layer.n_heads, layer.head_dim
    W = layer.qkv.weight.double()
    qkv = x.double() @ W.T
    q, k, v = qkv[..., :d], qkv[..., d:2 * d], qkv[..., 2 * d:]
    out = torch.zeros(B, T, d, dtype=F64)
    for b in range(B):
        for h in range(H):
            sl = slice(h * D, (h + 1) * D)
            qh, kh, vh = q[b, :, sl], k[b, :, sl], v[b, :, sl]
            if isinstance(layer.positional, RoPE):
                qh, kh = _rope_reference(qh, layer.positional.base), _rope_reference(kh, layer.positional.base)
            for t in range(T):
                logit = kh[: t + 1] @ qh[t] / math.sqrt(D)
                if bias is not None:
                    logit = logit + bias[h, t, : t + 1].double()
                if ssmax_scale is not None:
                    logit = logit * ssmax_scale[h] * math.log(t + 1)
                w = torch.softmax(logit, 0)
                out[b, t, sl] = w @ vh[: t + 1]
    return out @ layer.out.weight.double().T


@pytest.mark.parametrize("scheme", ["nope", "rope", "alibi", "ssmax"])
def test_softmax_attention_matches_per_position_reference(scheme):
    torch.manual_seed(0)
    pos = {"nope": NoPE(), "rope": RoPE(4, base=20.0), "alibi": ALiBi(3), "ssmax": ALiBi(3)}[scheme]
    layer = _sharpen(SoftmaxAttention(12, 3, pos, ssmax=scheme == "ssmax"), std=0.6)
    if scheme == "ssmax":
        with torch.no_grad():
            layer.ssmax_scale.copy_(torch.tensor([0.5, 1.0, 2.0]))
    x = torch.randn(2, 6, 12)
    bias = ALiBi(3).bias(6) if scheme in ("alibi", "ssmax") else None
    want = _attention_reference(layer, x, bias, layer.ssmax_scale.detach() if scheme == "ssmax" else None)
    torch.testing.assert_close(layer(x).double(), want, rtol=1e-4, atol=1e-4)
    if scheme == "nope":   # also against torch's own causal attention
        qkv = layer.qkv(x).view(2, 6, 3, 3, 4).permute(2, 0, 3, 1, 4)
        o = torch.nn.functional.scaled_dot_product_attention(qkv[0], qkv[1], qkv[2], is_causal=True)
        torch.testing.assert_close(layer(x), layer.out(o.transpose(1, 2).reshape(2, 6, 12)), rtol=1e-5, atol=1e-5)


def test_softmax_attention_rejects_indivisible_width():
    with pytest.raises(ValueError, match=r"^d_model \(10\) must be divisible by n_heads \(4\)$"):
        SoftmaxAttention(10, 4)
    with pytest.raises(ValueError, match=r"^d_model \(10\) must be divisible by n_heads \(4\)$"):
        GatedLinearAttention(10, 4)
    assert isinstance(SoftmaxAttention(8, 2).positional, NoPE)
    assert not hasattr(SoftmaxAttention(8, 2), "ssmax_scale")
    torch.testing.assert_close(SoftmaxAttention(8, 2, ssmax=True).ssmax_scale, torch.ones(2))


# ----------------------------------------------------------------------------- GLA
def _gla_inputs(B=2, H=2, T=11, Dk=3, Dv=4, seed=0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(B, H, T, Dk, generator=g, dtype=F64)
    k = torch.randn(B, H, T, Dk, generator=g, dtype=F64)
    v = torch.randn(B, H, T, Dv, generator=g, dtype=F64)
    log_alpha = -torch.rand(B, H, T, Dk, generator=g, dtype=F64) * 1.5
    return q, k, v, log_alpha


def test_gla_recurrence_hand_computed():
    """S_t = diag(alpha_t) S_{t-1} + k_t v_t^T, o_t = S_t^T q_t (Yang et al. 2024, Eq. 3-4)."""
    q = torch.tensor([2.0, 3.0], dtype=F64).view(1, 1, 2, 1)
    k = torch.tensor([5.0, 7.0], dtype=F64).view(1, 1, 2, 1)
    v = torch.tensor([11.0, 13.0], dtype=F64).view(1, 1, 2, 1)
    la = torch.log(torch.tensor([0.5, 0.25], dtype=F64)).view(1, 1, 2, 1)
    want = torch.tensor([2 * 5 * 11, 3 * (0.25 * 5 * 11 + 7 * 13)], dtype=F64).view(1, 1, 2, 1)
    for fn in (gla_recurrent, gla_parallel, gla_chunked):
        torch.testing.assert_close(fn(q, k, v, la), want, rtol=1e-12, atol=0)


@pytest.mark.parametrize("chunk", [1, 3, 4, 16])
def test_gla_forms_agree(chunk):
    q, k, v, la = _gla_inputs()
    ref = gla_recurrent(q, k, v, la)
    torch.testing.assert_close(gla_parallel(q, k, v, la), ref, rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(gla_chunked(q, k, v, la, chunk=chunk), ref, rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(gla_chunked(q, k, v, la), ref, rtol=1e-10, atol=1e-10)


def test_gla_half_precision_inputs_keep_dtype():
    q, k, v, la = (t.to(torch.bfloat16) for t in _gla_inputs(T=40))
    ref = gla_recurrent(*(t.double() for t in (q, k, v, la)))
    for out in (gla_chunked(q, k, v, la, chunk=16), gla_parallel(q, k, v, la)):
        assert out.dtype == torch.bfloat16
        assert (out.double() - ref).abs().max() < 0.05 * ref.abs().max()


def test_gated_linear_attention_block():
    torch.manual_seed(0)
    layer = GatedLinearAttention(8, 2)
    assert layer.chunk == 16 and layer.log_alpha_min == -4.0 and layer.gate_normalizer == 16.0
    assert layer.gk_proj[0].out_features == 16
    x = torch.randn(2, 5, 8)
    assert layer(x).shape == (2, 5, 8)
    with pytest.raises(ValueError, match=r"^GatedLinearAttention supports rotation schemes only, not additive biases$"):
        GatedLinearAttention(8, 2, ALiBi(2))(x)


def test_gated_linear_attention_matches_reference():
    """The block: gate logsigmoid(W_a2 W_a1 x)/16 clamped at -4, recurrence, per-head RMSNorm, swish gate."""
    torch.manual_seed(0)
    layer = _sharpen(GatedLinearAttention(8, 2, RoPE(4, base=10.0), gate_rank=3, chunk=2, log_alpha_min=-0.05),
                     std=0.5).double()
    x = torch.randn(1, 7, 8, dtype=F64)
    B, T, H, D = 1, 7, 2, 4

    def heads(t):
        return t.view(B, T, H, D).transpose(1, 2)

    q, k, v = heads(layer.q_proj(x)), heads(layer.k_proj(x)), heads(layer.v_proj(x))
    q, k = _rope_reference(q, 10.0), _rope_reference(k, 10.0)
    la = heads(torch.nn.functional.logsigmoid(layer.gk_proj(x)) / 16.0)
    assert la.min() < -0.05                                   # the clamp binds somewhere
    la = la.clamp_min(-0.05)
    o = gla_recurrent(q / 2.0, k, v, la)
    o = o * torch.rsqrt(o.pow(2).mean(-1, keepdim=True) + 1e-6) * layer.o_norm.weight
    o = o.transpose(1, 2).reshape(B, T, 8)
    want = layer.o_proj(o * torch.nn.functional.silu(layer.g_proj(x)))
    torch.testing.assert_close(layer(x), want, rtol=1e-6, atol=1e-6)   # float32 RoPE frequencies


# ----------------------------------------------------------------------------- TinyLM
@pytest.mark.parametrize("kwargs, match", [
    (dict(vocab_size=5, mixer="lstm"), r"^mixer must be 'softmax' or 'gla', got 'lstm'$"),
    (dict(vocab_size=0), r"^vocab_size must be >= 1, got 0$"),
    (dict(vocab_size=5, d_model=0), r"^d_model must be >= 1, got 0$"),
    (dict(vocab_size=5, n_layers=0), r"^n_layers must be >= 1, got 0$"),
    (dict(vocab_size=5, n_heads=0), r"^n_heads must be >= 1, got 0$"),
    (dict(vocab_size=5, mlp_hidden=0), r"^mlp_hidden must be >= 1, got 0$"),
    (dict(vocab_size=5, d_model=10, n_heads=4), r"^d_model \(10\) must be divisible by n_heads \(4\)$"),
    (dict(vocab_size=5, mixer="gla", ssmax=True), r"^ssmax applies to the softmax mixer only$"),
])
def test_config_rejections(kwargs, match):
    with pytest.raises(ValueError, match=match):
        TinyLMConfig(**kwargs)


def test_config_defaults():
    c = TinyLMConfig(vocab_size=7)
    assert (c.d_model, c.n_layers, c.n_heads, c.mlp_hidden, c.mixer, c.ssmax) == (64, 2, 4, 128, "softmax", False)
    TinyLMConfig(vocab_size=1, d_model=1, n_layers=1, n_heads=1, mlp_hidden=1)


def _lm(mixer="softmax", positional=None, seed=0, **kw):
    torch.manual_seed(seed)
    cfg = TinyLMConfig(vocab_size=13, d_model=16, n_layers=2, n_heads=2, mlp_hidden=24, mixer=mixer, **kw)
    return _sharpen(TinyLM(cfg, positional), std=0.4, seed=seed)


@pytest.mark.parametrize("mixer, pos", [("softmax", None), ("softmax", "rope"), ("softmax", "alibi"),
                                        ("softmax", "ssmax"), ("gla", None), ("gla", "rope")])
def test_lm_is_causal_and_sees_the_previous_token(mixer, pos):
    """Changing token t changes no logit before t, and changes the logits at t and after."""
    positional = {None: None, "rope": lambda i: RoPE(8, base=10.0), "alibi": ALiBi(2), "ssmax": ALiBi(2)}[pos]
    model = _lm(mixer, positional, ssmax=pos == "ssmax").double()
    g = torch.Generator().manual_seed(5)
    x = torch.randint(0, 13, (3, 12), generator=g)
    base = model(x)
    assert torch.isfinite(base).all()
    for t in (0, 4, 11):
        x2 = x.clone()
        x2[:, t] = (x2[:, t] + 1) % 13
        out = model(x2)
        torch.testing.assert_close(out[:, :t], base[:, :t], rtol=0, atol=1e-12)
        assert (out[:, t] - base[:, t]).abs().max() > 1e-3
        if t + 1 < 12:   # the change propagates through attention to later positions
            assert (out[:, t + 1:] - base[:, t + 1:]).abs().amax(-1).min() > 1e-6


def test_attention_with_sharp_rope_logits_reads_the_current_token():
    """Hand-set layer: q = k = (30, 0, 0, 0) before RoPE of frequency 1, so the logit of key s at query t
    is 900 cos(t - s) / 2, maximal at s = t; values copy feature 0 (= t), so the output is t."""
    layer = SoftmaxAttention(4, 1, RoPE(4, base=1.0)).double()
    with torch.no_grad():
        layer.qkv.weight.zero_()
        layer.qkv.weight[8:].copy_(torch.eye(4))
        layer.qkv.weight[0, 1] = layer.qkv.weight[4, 1] = 30.0
        layer.out.weight.copy_(torch.eye(4))
    T = 6
    x = torch.zeros(1, T, 4, dtype=F64)
    x[0, :, 0] = torch.arange(T, dtype=F64)
    x[0, :, 1] = 1.0
    out = layer(x)[0, :, 0]
    torch.testing.assert_close(out, torch.arange(T, dtype=F64), rtol=0, atol=1e-3)


def test_lm_shapes_positional_factory_and_sharing():
    made = []

    def factory(i):
        made.append(i)
        return RoPE(8)

    model = TinyLM(TinyLMConfig(vocab_size=9, d_model=16, n_heads=2, n_layers=3), factory)
    assert made == [0, 1, 2]
    assert model.layers[0]["mixer"].positional is not model.layers[1]["mixer"].positional
    shared = ALiBi(2)
    m2 = TinyLM(TinyLMConfig(vocab_size=9, d_model=16, n_heads=2, n_layers=3), shared)
    assert all(layer["mixer"].positional is shared for layer in m2.layers)
    m3 = TinyLM(TinyLMConfig(vocab_size=9, d_model=16, n_heads=2, n_layers=2, mixer="gla"))
    assert isinstance(m3.layers[1]["mixer"], GatedLinearAttention)
    assert isinstance(m3.layers[1]["mixer"].positional, NoPE)
    assert isinstance(model.layers[0]["mixer"], SoftmaxAttention)
    assert model(torch.zeros(2, 5, dtype=torch.long)).shape == (2, 5, 9)
    assert m2.layers[0]["mixer"].ssmax is False
    m4 = TinyLM(TinyLMConfig(vocab_size=9, d_model=16, n_heads=2, n_layers=1, ssmax=True))
    assert m4.layers[0]["mixer"].ssmax is True


def test_lm_init_and_parameter_count():
    torch.manual_seed(0)
    cfg = TinyLMConfig(vocab_size=50, d_model=32, n_heads=4, n_layers=2, mlp_hidden=64)
    model = TinyLM(cfg)
    w = torch.cat([model.embed.weight.flatten(), model.head.weight.flatten(),
                   model.layers[0]["mixer"].qkv.weight.flatten()])
    assert abs(w.std().item() - 0.02) < 0.002 and abs(w.mean().item()) < 0.002
    gla = TinyLM(TinyLMConfig(vocab_size=50, d_model=32, n_heads=4, n_layers=1, mixer="gla"))
    assert torch.count_nonzero(gla.layers[0]["mixer"].gk_proj[1].bias) == 0
    d, V, h = 32, 50, 64
    per_layer = 3 * d * d + d * d + 2 * d + 3 * d * h
    assert count_parameters(model) == V * d + 2 * per_layer + d + d * V
    shared = nn.Linear(3, 3)
    assert count_parameters(nn.Sequential(shared, shared)) == 12
    frozen = nn.Linear(3, 3)
    frozen.bias.requires_grad_(False)
    assert count_parameters(frozen) == 9


@pytest.mark.parametrize("mixer, pos", [("softmax", "rope"), ("softmax", "alibi"), ("gla", "rope")])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float64])
def test_lm_runs_in_the_dtype_of_its_parameters(mixer, pos, dtype):
    positional = (lambda i: RoPE(8)) if pos == "rope" else ALiBi(2)
    model = _lm(mixer, positional)
    ref = model(torch.arange(12).remainder(13)[None].repeat(2, 1))
    out = model.to(dtype)(torch.arange(12).remainder(13)[None].repeat(2, 1))
    assert out.dtype == dtype and torch.isfinite(out).all()
    tol = 1e-4 if dtype == F64 else 0.15 * ref.abs().max().item()
    assert (out.double() - ref.double()).abs().max().item() < tol


@pytest.mark.parametrize("mixer, pos", [("softmax", "rope"), ("softmax", "alibi"), ("softmax", "ssmax"),
                                        ("gla", "rope")])
def test_lm_runs_on_the_device_of_its_input(mixer, pos):
    """No tensor is created on a fixed device: on the meta device every op must stay on meta."""
    positional = (lambda i: RoPE(8)) if pos == "rope" else ALiBi(2)
    model = _lm(mixer, positional, ssmax=pos == "ssmax").to("meta")
    out = model(torch.zeros(2, 7, dtype=torch.long, device="meta"))
    assert out.device.type == "meta" and out.shape == (2, 7, 13)
    half = TinyLM(TinyLMConfig(vocab_size=13, d_model=16, n_heads=2), positional).to(torch.bfloat16).to("meta")
    assert half(torch.zeros(1, 3, dtype=torch.long, device="meta")).dtype == torch.bfloat16


# ----------------------------------------------------------------------------- loss and accuracy
class _FixedLogits(nn.Module):
    """Returns preset logits; records its training flag at call time."""

    def __init__(self, logits):
        super().__init__()
        self.logits = logits
        self.modes = []

    def forward(self, x):
        self.modes.append(self.training)
        return self.logits[x[:, 0]]


def test_lm_loss_ignores_masked_positions():
    torch.manual_seed(0)
    logits = torch.randn(2, 3, 4)
    model = _FixedLogits(logits)
    x = torch.tensor([[0, 0, 0], [1, 1, 1]])
    y = torch.tensor([[1, -100, 3], [-100, 0, 2]])
    lp = torch.log_softmax(logits, -1)
    want = -(lp[0, 0, 1] + lp[0, 2, 3] + lp[1, 1, 0] + lp[1, 2, 2]) / 4
    torch.testing.assert_close(lm_loss(model, (x, y)), want)


def test_masked_accuracy_per_position_and_exact_match():
    # predictions (argmax): row 0 -> [1, 2, 0], row 1 -> [3, 3, 3], row 2 -> [0, 1, 2]
    eye = torch.eye(4)
    logits = torch.stack([eye[[1, 2, 0]], eye[[3, 3, 3]], eye[[0, 1, 2]]])
    model = _FixedLogits(logits)
    model.train()
    x = torch.tensor([[0] * 3, [1] * 3, [2] * 3])
    y = torch.tensor([[1, 2, 3], [3, -100, 0], [-100, -100, -100]])
    acc = masked_accuracy(model, x, y, batch_size=2)
    torch.testing.assert_close(acc, torch.tensor([2 / 3, 1 / 2, 0.0]))
    y2 = torch.tensor([[1, 2, -100], [3, -100, 0], [0, 1, 2]])
    torch.testing.assert_close(masked_accuracy(model, x, y2, batch_size=1, per_sequence=True),
                               torch.tensor([1.0, 0.0, 1.0]))
    assert model.training and model.modes and not any(model.modes)   # evaluated in eval mode, restored
    model.eval()
    masked_accuracy(model, x, y)
    assert not model.training
    assert masked_accuracy(model, x, y).shape == (3,)


# ----------------------------------------------------------------------------- precision and devices
def test_rope_uses_its_own_float32_frequencies_and_float64_angles_for_float64_inputs():
    rope = RoPE(4, base=100.0)
    with torch.no_grad():
        rope.omega = torch.tensor([0.3, 0.07])                   # a user's float32 frequencies are honoured
    q = torch.zeros(1, 1, 20001, 4, dtype=F64)
    q[..., 0] = 1.0
    out, _, _ = rope(q, q)
    t = torch.arange(20001, dtype=F64)
    omega = torch.tensor([0.3, 0.07], dtype=torch.float32).double()
    # float64 angles: t * omega exact to ~1e-12 even at t = 20000 (float32 angles would be off by ~1e-3)
    torch.testing.assert_close(out[0, 0, :, 0], torch.cos(t * omega[0]), rtol=0, atol=1e-9)
    torch.testing.assert_close(out[0, 0, :, 2], torch.sin(t * omega[0]), rtol=0, atol=1e-9)


def test_rope_half_precision_module_recomputes_its_own_base():
    rope = RoPE(4, base=100.0).to(torch.bfloat16)
    q = torch.zeros(1, 1, 300, 4, dtype=torch.bfloat16)
    q[..., 1] = 1.0
    out, _, _ = rope(q, q)
    t = torch.arange(300, dtype=F64)
    torch.testing.assert_close(out[0, 0, :, 3].double(), torch.sin(t * 0.1), rtol=0, atol=1e-2)


def test_rotate_half_pairs_computes_cos_sin_in_float32_for_bfloat16_angles():
    x = torch.tensor([[1.0, 0.0]])
    a = torch.tensor([[3.0]], dtype=torch.bfloat16)             # exact in bfloat16
    torch.testing.assert_close(rotate_half_pairs(x, a), torch.tensor([[math.cos(3.0), math.sin(3.0)]]),
                               rtol=0, atol=1e-7)
    with pytest.raises(ValueError, match=r"^the last dimension of x must be even \(feature pairs\), got 5$"):
        rotate_half_pairs(torch.zeros(2, 3, 5), torch.zeros(3, 2))


def test_positional_buffers_are_not_saved():
    assert "omega" not in RoPE(8).state_dict() and "slopes" not in ALiBi(4).state_dict()
    model = TinyLM(TinyLMConfig(vocab_size=5, d_model=8, n_heads=2, n_layers=1), lambda i: RoPE(4))
    assert not any(k.endswith("omega") for k in model.state_dict())


def test_modules_on_cpu_follow_an_input_on_another_device():
    """A CPU module applied to a meta-device input: every constant follows the input's device."""
    q = torch.zeros(1, 2, 5, 4, device="meta")
    assert RoPE(4)(q, q)[0].device.type == "meta"
    _, _, b = ALiBi(2)(q, q)
    assert b.device.type == "meta" and b.shape == (2, 5, 5)
    assert rotate_half_pairs(q, torch.zeros(5, 2)).device.type == "meta"
    assert ALiBi(2).to(torch.bfloat16)(q.to(torch.bfloat16), q)[2].device.type == "meta"

    class CpuBias(nn.Module):
        def forward(self, q, k, x=None):
            return q, k, torch.zeros(q.shape[-2], k.shape[-2])

    layer = SoftmaxAttention(8, 2, CpuBias()).to("meta")
    assert layer(torch.zeros(1, 5, 8, device="meta")).device.type == "meta"


class _SeesInput(nn.Module):
    """A positional scheme that depends on the attention input x (as Selective RoPE does)."""

    def __init__(self, bias=True):
        super().__init__()
        self.bias, self.seen = bias, []

    def forward(self, q, k, x=None):
        self.seen.append(x)
        if self.bias:
            return q, k, x[..., :1].unsqueeze(1) * torch.ones_like(q[..., :1]).transpose(-1, -2)
        return q * (1 + x[:, None, :, :1]), k, None


def test_attention_passes_its_input_to_the_positional_scheme():
    torch.manual_seed(0)
    x = torch.randn(2, 5, 8)
    pos = _SeesInput()
    SoftmaxAttention(8, 2, pos)(x)
    assert pos.seen[0] is x
    pos = _SeesInput(bias=False)
    GatedLinearAttention(8, 2, pos)(x)
    assert pos.seen[0] is x


def test_rmsnorm_float32_weight_keeps_a_bfloat16_input_in_bfloat16():
    norm = RMSNorm(4)
    x = torch.randn(3, 4).to(torch.bfloat16)
    assert norm(x).dtype == torch.bfloat16
    assert norm(x.double()).dtype == F64


def test_gla_parameters_and_batch_not_equal_heads():
    layer = GatedLinearAttention(8, 2, gate_rank=3)
    names = {n: tuple(p.shape) for n, p in layer.named_parameters()}
    assert names == {"q_proj.weight": (8, 8), "k_proj.weight": (8, 8), "v_proj.weight": (8, 8),
                     "gk_proj.0.weight": (3, 8), "gk_proj.1.weight": (8, 3), "gk_proj.1.bias": (8,),
                     "g_proj.weight": (8, 8), "o_norm.weight": (4,), "o_proj.weight": (8, 8)}
    attn = SoftmaxAttention(8, 2)
    assert {n for n, _ in attn.named_parameters()} == {"qkv.weight", "out.weight"}
    assert {n for n, _ in SwiGLU(4, 6).named_parameters()} == {"w1.weight", "w2.weight", "w3.weight"}
    q, k, v, la = _gla_inputs(B=3, H=2, T=6)
    torch.testing.assert_close(gla_recurrent(q, k, v, la), gla_parallel(q, k, v, la), rtol=1e-10, atol=1e-10)


def test_lm_forward_is_the_pre_norm_residual_stack():
    model = _lm("softmax", lambda i: RoPE(8, base=10.0)).double()
    x = torch.randint(0, 13, (2, 7), generator=torch.Generator().manual_seed(1))
    h = model.embed(x)
    for layer in model.layers:
        h = h + layer["mixer"](layer["norm1"](h))
        h = h + layer["mlp"](layer["norm2"](h))
    torch.testing.assert_close(model(x), model.head(model.norm(h)), rtol=0, atol=0)
    gla = TinyLM(TinyLMConfig(vocab_size=9, d_model=16, n_heads=2, mixer="gla"), lambda i: RoPE(8))
    assert isinstance(gla.layers[0]["mixer"].positional, RoPE)
    assert {n for n, _ in model.named_parameters() if n.startswith("head")} == {"head.weight"}


def test_alibi_rectangular_and_device_defaults():
    q, k = torch.zeros(1, 2, 2, 4), torch.zeros(1, 2, 5, 4)
    _, _, b = ALiBi(2)(q, k)                          # 2 new queries against 5 cached keys
    torch.testing.assert_close(b, ALiBi(2).bias(2, 5))
    torch.testing.assert_close(b[0, 0], -alibi_slopes(2)[0] * torch.tensor([3.0, 2, 1, 0, 1]))
    assert ALiBi(2).to("meta").bias(3).device.type == "meta"
    # default RoPE base 10000 (Su et al. 2021)
    torch.testing.assert_close(rope_frequencies(4), torch.tensor([1.0, 0.01]), rtol=0, atol=0)
    torch.testing.assert_close(RoPE(4).omega, torch.tensor([1.0, 0.01]), rtol=0, atol=0)


def test_gla_parallel_on_the_input_device():
    q = torch.zeros(1, 1, 4, 2, device="meta")
    assert gla_parallel(q, q, q, q).device.type == "meta"
    assert gla_chunked(q, q, q, q, chunk=3).device.type == "meta"
