"""SWAX: sliding-window attention against an explicit per-query loop, the mLSTM parallel form
against its recurrence, the 1:1 hybrid layout, the stochastic window schedule and training step,
contract checks and rejections."""
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from iclr26.architectures.swax import (MLSTMLayer, SlidingWindowRoPE, StochasticWindowSchedule, SWAXConfig,
                                       SWAXForCausalLM, mlstm_parallel, stochastic_window_step)
from iclr26.common.tiny_attention import RoPE, SoftmaxAttention
from iclr26.common.training import train


def _mlstm_recurrent(q, k, v, i_pre, f_pre):
    """The mLSTM recurrence written step by step (xLSTM Eqs. 19-27), float64, no stabiliser."""
    B, H, T, Dk = q.shape
    C = torch.zeros(B, H, v.shape[-1], Dk, dtype=torch.float64)
    n = torch.zeros(B, H, Dk, dtype=torch.float64)
    out = []
    for t in range(T):
        f = torch.sigmoid(f_pre[:, :, t])[..., None]
        i = torch.exp(i_pre[:, :, t])[..., None]
        kt = k[:, :, t] / math.sqrt(Dk)
        C = f[..., None] * C + i[..., None] * v[:, :, t, :, None] * kt[..., None, :]
        n = f * n + i * kt
        num = (C @ q[:, :, t, :, None])[..., 0]
        den = torch.clamp((n * q[:, :, t]).sum(-1, keepdim=True).abs(), min=1.0)
        out.append(num / den)
    return torch.stack(out, dim=2)


def test_mlstm_parallel_matches_recurrence():
    g = torch.Generator().manual_seed(0)
    B, H, T, D = 2, 3, 17, 4
    q, k, v = (torch.randn(B, H, T, D, generator=g, dtype=torch.float64) for _ in range(3))
    i_pre = torch.randn(B, H, T, generator=g, dtype=torch.float64) * 2
    f_pre = torch.randn(B, H, T, generator=g, dtype=torch.float64) * 2 + 1
    torch.testing.assert_close(mlstm_parallel(q, k, v, i_pre, f_pre), _mlstm_recurrent(q, k, v, i_pre, f_pre))


def test_mlstm_parallel_stable_with_large_input_gates():
    g = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(1, 1, 9, 2, generator=g, dtype=torch.float64) for _ in range(3))
    i_pre = torch.full((1, 1, 9), 60.0, dtype=torch.float64)  # exp(60) overflows nothing here
    f_pre = torch.zeros(1, 1, 9, dtype=torch.float64)
    got = mlstm_parallel(q, k, v, i_pre, f_pre)
    torch.testing.assert_close(got, _mlstm_recurrent(q, k, v, i_pre, f_pre))
    big = mlstm_parallel(q.float(), k.float(), v.float(), i_pre.float() * 20, f_pre.float())
    assert torch.isfinite(big).all()


def test_mlstm_stabiliser_is_per_row():
    # very different row maxima: a single global stabiliser would underflow the early rows in float32
    g = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(1, 1, 5, 2, generator=g, dtype=torch.float64) for _ in range(3))
    i_pre = torch.tensor([[[0.0, 0.0, 0.0, 0.0, 150.0]]], dtype=torch.float64)
    f_pre = torch.zeros(1, 1, 5, dtype=torch.float64)
    want = _mlstm_recurrent(q, k, v, i_pre, f_pre)
    got = mlstm_parallel(q.float(), k.float(), v.float(), i_pre.float(), f_pre.float())
    torch.testing.assert_close(got.double(), want, rtol=1e-4, atol=1e-5)


def test_mlstm_dtype_and_causality():
    g = torch.Generator().manual_seed(2)
    q, k, v = (torch.randn(1, 2, 8, 4, generator=g) for _ in range(3))
    i_pre, f_pre = torch.randn(1, 2, 8, generator=g), torch.randn(1, 2, 8, generator=g)
    out = mlstm_parallel(q.bfloat16(), k.bfloat16(), v.bfloat16(), i_pre, f_pre)
    assert out.dtype == torch.bfloat16
    v2 = v.clone()
    v2[:, :, 5:] += 3.0
    a, b = mlstm_parallel(q, k, v, i_pre, f_pre), mlstm_parallel(q, k, v2, i_pre, f_pre)
    torch.testing.assert_close(a[:, :, :5], b[:, :, :5])
    assert not torch.allclose(a[:, :, 5:], b[:, :, 5:])


def test_mlstm_layer_gates_and_output():
    torch.manual_seed(0)
    layer = MLSTMLayer(8, 2).double()
    torch.testing.assert_close(layer.fgate.bias.detach(), torch.tensor([3.0, 6.0], dtype=torch.float64))
    torch.testing.assert_close(layer.igate.bias.detach(), torch.zeros(2, dtype=torch.float64))
    x = torch.randn(2, 5, 8, dtype=torch.float64)
    q, k, v = layer.qkv(x).view(2, 5, 3, 2, 4).permute(2, 0, 3, 1, 4)
    h = _mlstm_recurrent(q, k, v, layer.igate(x).transpose(1, 2), layer.fgate(x).transpose(1, 2))
    h = layer.norm(h).transpose(1, 2).reshape(2, 5, 8)
    torch.testing.assert_close(layer(x), layer.out(torch.sigmoid(layer.ogate(x)) * h))
    with pytest.raises(ValueError, match=r"d_model \(10\) must be divisible by n_heads \(4\)"):
        MLSTMLayer(10, 4)


def _window_reference(att, x, window):
    """Per-query loop: softmax over keys s with t - window < s <= t, RoPE from the common module."""
    B, T, _ = x.shape
    H, D = att.n_heads, att.head_dim
    q, k, v = att.qkv(x).view(B, T, 3, H, D).permute(2, 0, 3, 1, 4)
    q, k, _ = RoPE(D)(q, k)
    out = torch.zeros(B, H, T, D, dtype=x.dtype)
    for t in range(T):
        lo = max(0, t - window + 1)
        logits = q[:, :, t:t + 1] @ k[:, :, lo:t + 1].transpose(-1, -2) / math.sqrt(D)
        out[:, :, t] = (torch.softmax(logits, -1) @ v[:, :, lo:t + 1])[:, :, 0]
    return att.out(out.transpose(1, 2).reshape(B, T, -1))


@pytest.mark.parametrize("window", [1, 3, 7])
def test_sliding_window_attention_matches_loop(window):
    torch.manual_seed(0)
    att = SoftmaxAttention(8, 2, SlidingWindowRoPE(4, window)).double()
    with torch.no_grad():
        att.qkv.weight.mul_(4.0)  # peaked attention: a leaking mask shows
    x = torch.randn(2, 12, 8, dtype=torch.float64)
    torch.testing.assert_close(att(x), _window_reference(att, x, window))


def test_window_at_least_length_is_full_causal_rope():
    torch.manual_seed(0)
    swa = SoftmaxAttention(8, 2, SlidingWindowRoPE(4, 10)).double()
    full = SoftmaxAttention(8, 2, RoPE(4)).double()
    full.load_state_dict(swa.state_dict())
    x = torch.randn(1, 10, 8, dtype=torch.float64)
    torch.testing.assert_close(swa(x), full(x))
    swa.positional.window = None
    torch.testing.assert_close(swa(x), full(x))


def test_window_bias_layout():
    pos = SlidingWindowRoPE(4, 3)
    q = torch.zeros(1, 1, 5, 4)
    _, _, bias = pos(q, q)
    allowed = torch.isfinite(bias)
    i, j = torch.meshgrid(torch.arange(5), torch.arange(5), indexing="ij")
    assert torch.equal(allowed, (i - j < 3))  # future keys are left to the causal mask
    assert bias.dtype == torch.float32 and (bias[allowed] == 0).all()


def _model(window=8, seed=0):
    torch.manual_seed(seed)
    return SWAXForCausalLM(SWAXConfig(vocab_size=11, d_model=16, n_layers=4, n_heads=2, mlp_hidden=24, window=window))


def test_hybrid_layout_and_window_propagation():
    m = _model(window=8)
    kinds = [type(layer["mixer"]) for layer in m.layers]
    assert kinds == [SoftmaxAttention, MLSTMLayer, SoftmaxAttention, MLSTMLayer]
    assert all(l["mixer"].positional.window == 8 for l in m.layers[::2])
    m.window = 3
    assert m.window == 3 and all(l["mixer"].positional.window == 3 for l in m.layers[::2])
    for l in m.layers[1::2]:
        torch.testing.assert_close(l["mixer"].fgate.bias.detach(), torch.tensor([3.0, 6.0]))
    assert m.embed.weight.std().item() == pytest.approx(0.02, rel=0.2)
    assert m.head.weight.std().item() == pytest.approx(0.02, rel=0.2)


def test_forward_window_override_is_temporary_and_matters():
    m = _model(window=2).eval()
    x = torch.randint(0, 11, (2, 20))
    a = m(x)
    b = m(x, window=20)
    assert m.window == 2
    torch.testing.assert_close(m(x), a)
    assert not torch.allclose(a, b)
    torch.testing.assert_close(b, m(x, window=50))  # any window >= length is full attention
    torch.testing.assert_close(a[:, :2], b[:, :2])  # the first two positions see the same keys


def test_model_contracts():
    m = _model().eval()
    x = torch.randint(0, 11, (2, 9))
    out = m(x)
    assert out.shape == (2, 9, 11)
    m2 = _model(seed=5).eval()
    m2.load_state_dict(m.state_dict())
    torch.testing.assert_close(m2(x), out)
    assert m.double()(x).dtype == torch.float64
    # causal: changing the last token leaves earlier logits unchanged
    y = x.clone()
    y[:, -1] = (y[:, -1] + 1) % 11
    m = m.float()
    torch.testing.assert_close(m(x)[:, :-1], m(y)[:, :-1])


def test_config_and_window_rejections():
    with pytest.raises(ValueError, match="vocab_size must be a positive integer, got 0"):
        SWAXConfig(vocab_size=0)
    with pytest.raises(ValueError, match=r"d_model \(30\) must be divisible by n_heads \(4\)"):
        SWAXConfig(vocab_size=5, d_model=30, n_heads=4)
    with pytest.raises(ValueError, match="head_dim = d_model / n_heads must be even for RoPE, got 3$"):
        SWAXConfig(vocab_size=5, d_model=12, n_heads=4)
    with pytest.raises(ValueError, match="window must be a positive integer, got 0"):
        SWAXConfig(vocab_size=5, window=0)
    m = _model()
    with pytest.raises(ValueError, match="window must be a positive integer, got 0"):
        m.window = 0
    with pytest.raises(ValueError, match="window must be a positive integer, got 2.5"):
        m.window = 2.5
    m.window = np.int64(4)
    assert m.window == 4 and type(m.window) is int
    one = SWAXForCausalLM(SWAXConfig(vocab_size=1, d_model=2, n_layers=1, n_heads=1, mlp_hidden=1, window=1))
    assert one(torch.zeros(1, 3, dtype=torch.long)).shape == (1, 3, 1)


def test_forward_is_prenorm_residual_composition():
    m = _model(window=3).eval()
    x = torch.randint(0, 11, (2, 10))
    h = m.embed(x)
    for layer in m.layers:
        h = h + layer["mixer"](layer["norm1"](h))
        h = h + layer["mlp"](layer["norm2"](h))
    torch.testing.assert_close(m(x), m.head(m.norm(h)))


def test_no_biases_outside_the_gates():
    m = _model()
    names = {n for n, _ in m.named_parameters() if n.endswith("bias")}
    assert names == {f"layers.{i}.mixer.{g}.bias" for i in (1, 3) for g in ("igate", "fgate")}


def test_rope_base_is_used():
    torch.manual_seed(0)
    q, k = torch.randn(1, 1, 6, 4), torch.randn(1, 1, 6, 4)
    a = SlidingWindowRoPE(4, 3)(q, k)[0]
    b = SlidingWindowRoPE(4, 3, base=100.0)(q, k)[0]
    torch.testing.assert_close(a, RoPE(4)(q, k)[0])
    torch.testing.assert_close(b, RoPE(4, 100.0)(q, k)[0])
    assert not torch.allclose(a, b)


def test_schedule_probability_and_anneal():
    s = StochasticWindowSchedule(4, 32, total_steps=1000, p_short=0.25, anneal_frac=0.1,
                                 rng=np.random.default_rng(0))
    assert s.anneal_start == 900
    ws = [s(t) for t in range(1, 1001)]
    assert set(ws[:900]) == {4, 32}
    assert abs(np.mean([w == 4 for w in ws[:900]]) - 0.25) < 0.05
    assert ws[900:] == [32] * 100
    assert StochasticWindowSchedule(4, 32, 10, p_short=1.0, anneal_frac=0.0)(10) == 4
    assert StochasticWindowSchedule(4, 32, 10, p_short=1.0, anneal_frac=0.25).anneal_start == 8
    s = StochasticWindowSchedule(4, 32, 10, p_short=1.0, anneal_frac=0.25)
    assert [s(t) for t in (8, 9)] == [4, 32]
    assert {StochasticWindowSchedule(4, 32, 10, p_short=0.0)(t) for t in range(1, 10)} == {32}
    a = StochasticWindowSchedule(4, 32, 100)
    b = StochasticWindowSchedule(4, 32, 100)
    assert [a(t) for t in range(1, 90)] == [b(t) for t in range(1, 90)]  # default rng is seeded
    assert a.p_short == 0.5 and a.anneal_frac == 0.1 and a.total_steps == 100
    ref = np.random.default_rng(0)
    c = StochasticWindowSchedule(4, 32, 100)
    assert [c(t) for t in range(1, 50)] == [4 if ref.random() < 0.5 else 32 for _ in range(1, 50)]
    d = StochasticWindowSchedule(4, 32, 100, rng=np.random.default_rng(123))
    e = StochasticWindowSchedule(4, 32, 100, rng=np.random.default_rng(0))
    assert [d(t) for t in range(1, 50)] != [e(t) for t in range(1, 50)]
    one = StochasticWindowSchedule(1, 2, 1, p_short=1.0, anneal_frac=1.0)  # boundary values accepted
    assert one.anneal_start == 0 and one(1) == 2


def test_schedule_rejections():
    with pytest.raises(ValueError, match=r"need integer windows 1 <= short < long, got short=32, long=4"):
        StochasticWindowSchedule(32, 4, 10)
    with pytest.raises(ValueError, match=r"need integer windows 1 <= short < long, got short=4, long=4"):
        StochasticWindowSchedule(4, 4, 10)
    with pytest.raises(ValueError, match=r"need integer windows 1 <= short < long, got short=0, long=4"):
        StochasticWindowSchedule(0, 4, 10)
    with pytest.raises(ValueError, match=r"need integer windows 1 <= short < long, got short=2.0, long=4"):
        StochasticWindowSchedule(2.0, 4, 10)
    with pytest.raises(ValueError, match=r"p_short must be in \[0, 1\], got 1.5"):
        StochasticWindowSchedule(2, 4, 10, p_short=1.5)
    with pytest.raises(ValueError, match=r"p_short must be in \[0, 1\], got -0.1"):
        StochasticWindowSchedule(2, 4, 10, p_short=-0.1)
    with pytest.raises(ValueError, match=r"anneal_frac must be in \[0, 1\], got 2"):
        StochasticWindowSchedule(2, 4, 10, anneal_frac=2)
    with pytest.raises(ValueError, match=r"anneal_frac must be in \[0, 1\], got -1"):
        StochasticWindowSchedule(2, 4, 10, anneal_frac=-1)
    with pytest.raises(ValueError, match="total_steps must be >= 1, got 0"):
        StochasticWindowSchedule(2, 4, 0)


def test_stochastic_window_step_uses_schedule_and_restores():
    m = _model(window=16)
    seen = []

    def loss_fn(model, batch):
        seen.append(model.window)
        x, y = batch
        logits = model(x)
        return F.cross_entropy(logits.reshape(-1, 11), y.reshape(-1))

    x = torch.randint(0, 11, (4, 12))
    data = iter([(x, x)] * 10)
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    before = [p.detach().clone() for p in m.parameters()]
    res = train(m, opt, data, 5, loss_fn, step_fn=stochastic_window_step(lambda s: s + 1, loss_fn, clip_grad=None))
    assert seen == [2, 3, 4, 5, 6]
    assert m.window == 16 and len(res.losses) == 5
    assert any(not torch.equal(a, p) for a, p in zip(before, m.parameters()))


def test_stochastic_window_step_clips():
    m = _model()
    x = torch.randint(0, 11, (2, 6))

    def loss_fn(model, batch):
        return model(batch).pow(2).sum() * 1e3

    before = [p.detach().clone() for p in m.parameters()]
    opt = torch.optim.SGD(m.parameters(), lr=1.0)
    stochastic_window_step(lambda s: 3, loss_fn, clip_grad=1e-3)(m, opt, x)
    change = torch.sqrt(sum(((p - b) ** 2).sum() for p, b in zip(m.parameters(), before)))
    assert change.item() == pytest.approx(1e-3, rel=1e-3)
    m2 = _model()
    before = [p.detach().clone() for p in m2.parameters()]
    opt = torch.optim.SGD(m2.parameters(), lr=1.0)
    stochastic_window_step(lambda s: 3, loss_fn)(m2, opt, x)  # default clip 1.0
    change = torch.sqrt(sum(((p - b) ** 2).sum() for p, b in zip(m2.parameters(), before)))
    assert change.item() == pytest.approx(1.0, rel=1e-3)


def test_step_restores_window_on_error():
    m = _model(window=8)

    def bad(model, batch):
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        stochastic_window_step(lambda s: 2, bad)(m, torch.optim.SGD(m.parameters(), lr=0.1), None)
    assert m.window == 8


@pytest.mark.slow
def test_quick_scale_runs():
    from iclr26.architectures.swax.experiment import run
    out = run("quick", 0)
    assert set(out["metrics"]["retrieval_4x"]) == {"stochastic", "long", "short"}
