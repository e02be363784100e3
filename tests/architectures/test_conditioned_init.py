"""Tests for iclr26.architectures.conditioned_init."""
import math

import numpy as np
import pytest
import torch
from torch import nn

from iclr26.architectures.conditioned_init import (AttentionConfig, SelfAttention, attention_jacobian,
                                                   attention_jacobian_condition, attention_weights,
                                                   conditioned_init_, mimetic_init_, scale_matched_init_)
from iclr26.architectures.conditioned_init.init import _attention_fn


def _mha(dim=16, heads=4, seed=0):
    """An attention layer whose softmax is far from uniform (weights N(0, 0.5^2), biases N(0, 0.1^2))."""
    torch.manual_seed(seed)
    attn = nn.MultiheadAttention(dim, heads, batch_first=True)
    with torch.no_grad():
        attn.in_proj_weight.normal_(0, 0.5)
        attn.in_proj_bias.normal_(0, 0.1)
        attn.out_proj.weight.normal_(0, 0.3)
        attn.out_proj.bias.normal_(0, 0.1)
    return attn


# ---------------------------------------------------------------- the recipe (Sec. 3.2)
@pytest.mark.parametrize("make", [lambda: _mha(), lambda: SelfAttention(dim=16, num_heads=4)])
def test_conditioned_init_recipe(make):
    attn = conditioned_init_(make())
    w = attention_weights(attn)
    d = 16 // 4
    assert torch.equal(w.v, torch.eye(16))                       # rectangular identity W_V
    for mat in (w.q, w.k):
        for i in range(4):
            blk = mat[i * d:(i + 1) * d].double()
            assert torch.allclose(blk @ blk.T, torch.eye(d, dtype=torch.float64), atol=1e-6)
            s = torch.linalg.svdvals(blk)
            assert (s.max() / s.min()).item() == pytest.approx(1.0, abs=1e-5)   # kappa = 1


def test_rectangular_value_identity_and_semi_orthogonal_columns():
    attn = nn.Module()
    attn.num_heads = 2
    attn.q_proj, attn.k_proj = nn.Linear(8, 4), nn.Linear(8, 4)
    attn.v_proj = nn.Linear(8, 6)
    conditioned_init_(attn)
    assert torch.equal(attn.v_proj.weight, torch.eye(6, 8))
    q = attn.q_proj.weight[:2].double()
    assert torch.allclose(q @ q.T, torch.eye(2, dtype=torch.float64), atol=1e-6)


def test_init_keeps_biases_and_out_proj():
    attn = _mha()
    with torch.no_grad():
        attn.in_proj_bias.fill_(0.3)
    out_before = attn.out_proj.weight.clone()
    conditioned_init_(attn)
    assert torch.all(attn.in_proj_bias == 0.3)
    assert torch.equal(attn.out_proj.weight, out_before)


def test_init_is_seeded_by_generator():
    a = conditioned_init_(_mha(seed=1), generator=torch.Generator().manual_seed(5))
    b = conditioned_init_(_mha(seed=2), generator=torch.Generator().manual_seed(5))
    assert torch.equal(a.in_proj_weight, b.in_proj_weight)


def test_mimetic_products_match_targets_in_expectation():
    # per head, W_Q^(i)T W_K^(i) is the best rank-d approximation of alpha Z + beta I; summed over
    # heads its diagonal mean is close to beta * d / D * (number of heads) = beta for full rank.
    attn = mimetic_init_(_mha(dim=32, heads=1), generator=torch.Generator().manual_seed(0))
    w = attention_weights(attn)
    prod = (w.q.T @ w.k).double()        # x W_Q^T (x W_K^T)^T = x (W_Q^T W_K) x^T
    assert torch.diagonal(prod).mean().item() == pytest.approx(0.7, abs=0.1)
    vo = (w.v.T @ w.out.T).double()
    assert torch.diagonal(vo).mean().item() == pytest.approx(-0.4, abs=0.1)


# ---------------------------------------------------------------- Jacobian
def test_functional_attention_matches_torch_mha():
    attn = _mha()
    x = torch.randn(1, 7, 16)
    w = attention_weights(attn)
    got = _attention_fn(w, True, attn.out_proj.bias)(x[0])
    want = attn(x, x, x, need_weights=False)[0][0]
    assert torch.allclose(got, want, atol=1e-5)


def _sharp_self_attention(dim=16, heads=4, bias=True):
    torch.manual_seed(1)
    attn = SelfAttention(dim=dim, num_heads=heads, bias=bias)
    with torch.no_grad():
        for p in attn.parameters():
            p.normal_(0, 0.5 if p.ndim == 2 else 0.1)
    return attn


def test_functional_attention_matches_self_attention():
    attn = _sharp_self_attention()
    x = torch.randn(1, 5, 16)
    got = _attention_fn(attention_weights(attn), True, attn.out_proj.bias)(x[0])
    assert torch.allclose(got, attn(x)[0], atol=1e-5)


@pytest.mark.parametrize("bias", [True, False])
def test_self_attention_matches_torch_multihead_attention(bias):
    attn = _sharp_self_attention(bias=bias)
    mha = nn.MultiheadAttention(16, 4, batch_first=True, bias=bias)
    with torch.no_grad():
        mha.in_proj_weight.copy_(torch.cat([attn.q_proj.weight, attn.k_proj.weight, attn.v_proj.weight]))
        mha.out_proj.weight.copy_(attn.out_proj.weight)
        if bias:
            mha.in_proj_bias.copy_(torch.cat([attn.q_proj.bias, attn.k_proj.bias, attn.v_proj.bias]))
            mha.out_proj.bias.copy_(attn.out_proj.bias)
    x = torch.randn(3, 7, 16)
    torch.testing.assert_close(attn(x), mha(x, x, x, need_weights=False)[0], rtol=1e-5, atol=1e-5)
    assert (attn.q_proj.bias is None) == (not bias)
    c = SelfAttention().config
    assert (c.dim, c.num_heads, c.bias) == (64, 4, True)
    assert SelfAttention(AttentionConfig(dim=8, num_heads=2)).num_heads == 2


def test_jacobian_against_finite_differences():
    attn = _mha(dim=8, heads=2)
    x = torch.randn(4, 8, dtype=torch.float32)
    J = attention_jacobian(attn, x).double()
    f = _attention_fn(attention_weights(attn), False, None)
    eps = 1e-3
    i = 5
    e = torch.zeros(32)
    e[i] = eps
    fd = (f(x + e.view(4, 8)) - f(x - e.view(4, 8))).reshape(-1) / (2 * eps)
    assert torch.allclose(J[:, i].float(), fd.detach(), atol=2e-3)


def test_jacobian_of_uniform_attention_identity_values():
    # W_Q = W_K = 0: softmax is uniform, A(X) = (1/N) 1 1^T X W_V^T. With W_V = I the Jacobian is
    # (1/N) 1 1^T (x) I_D: rank D, so its condition number is infinite (sigma_min = 0).
    attn = _mha(dim=4, heads=1)
    with torch.no_grad():
        attn.in_proj_weight.zero_()
        attn.in_proj_weight[8:].copy_(torch.eye(4))
    x = torch.randn(3, 4)
    J = attention_jacobian(attn, x).double()
    want = torch.kron(torch.full((3, 3), 1 / 3, dtype=torch.float64), torch.eye(4, dtype=torch.float64))
    assert torch.allclose(J, want, atol=1e-6)


def test_conditioned_lowers_condition_number_against_small_gaussian():
    torch.manual_seed(0)
    attn = _mha(dim=16, heads=4)
    with torch.no_grad():
        nn.init.trunc_normal_(attn.in_proj_weight, std=0.02)
    x = torch.nn.functional.layer_norm(torch.randn(3, 9, 16), (16,))
    before = attention_jacobian_condition(attn, x)
    after = attention_jacobian_condition(conditioned_init_(attn), x)
    assert torch.all(after < before)


# ---------------------------------------------------------------- rejection tests
def test_rejections():
    with pytest.raises(TypeError, match="q_proj"):
        conditioned_init_(nn.Linear(4, 4), num_heads=1)
    with pytest.raises(ValueError, match="num_heads"):
        conditioned_init_(_mha(dim=16, heads=4), num_heads=3)
    m = nn.Module()
    m.q_proj, m.k_proj, m.v_proj = nn.Linear(4, 4), nn.Linear(4, 4), nn.Linear(4, 4)
    with pytest.raises(ValueError, match="num_heads is required"):
        conditioned_init_(m)
    with pytest.raises(ValueError, match="shape"):
        attention_jacobian(_mha(), torch.randn(16))
    with pytest.raises(ValueError, match=r"^dim \(10\) must be a positive multiple of num_heads \(3\)$"):
        SelfAttention(dim=10, num_heads=3)
    with pytest.raises(ValueError, match=r"^dim \(0\) must be a positive multiple of num_heads \(1\)$"):
        AttentionConfig(dim=0, num_heads=1)
    with pytest.raises(ValueError, match=r"^dim \(4\) must be a positive multiple of num_heads \(0\)$"):
        AttentionConfig(dim=4, num_heads=0)


# ---------------------------------------------------------------- experiment: lr search and smoke
def test_experiment_smoke():
    from iclr26.architectures.conditioned_init.experiment import ARMS, SCALES, run
    out = run("smoke", 0)
    for metric in ("log10_cond_init", "steps_to_target", "final_test_accuracy", "tuned_lr",
                   "tuned_lr_at_edge", "val_accuracy"):
        assert set(out["metrics"][metric]) == set(ARMS)
        assert all(np.isfinite(v) for v in out["metrics"][metric].values())
    grid = SCALES["smoke"]["lr_grid"]
    for arm in ARMS:
        tried = [float(k) for k in out["info"]["search"][arm]]
        assert all(any(math.isclose(g, t) for t in tried) for g in grid)       # same grid for all
        assert 3 <= len(tried) <= 3 + SCALES["smoke"]["max_widen"]
        assert any(math.isclose(out["metrics"]["tuned_lr"][arm], t) for t in tried)


def _log_calls(fn):
    calls = []

    def evaluate(lr):
        calls.append(lr)
        return fn(lr)
    return evaluate, calls


def test_search_lr_stops_at_an_interior_best():
    from iclr26.architectures.conditioned_init.experiment import search_lr
    ev, calls = _log_calls(lambda lr: -abs(math.log(lr / 1e-3)))
    best, tried, at_edge = search_lr(ev, (5e-4, 1e-3, 2e-3))
    assert calls == [5e-4, 1e-3, 2e-3] and best == 1e-3 and not at_edge


def test_search_lr_widens_outward_until_interior_or_the_cap():
    from iclr26.architectures.conditioned_init.experiment import search_lr
    ev, calls = _log_calls(lambda lr: -abs(math.log(lr / 4e-3)))     # optimum one step beyond
    best, tried, at_edge = search_lr(ev, (5e-4, 1e-3, 2e-3), max_widen=2)
    assert calls == pytest.approx([5e-4, 1e-3, 2e-3, 4e-3, 8e-3]) and best == pytest.approx(4e-3)
    assert not at_edge
    ev, calls = _log_calls(lambda lr: lr)                              # larger always better
    best, tried, at_edge = search_lr(ev, (5e-4, 1e-3, 2e-3), max_widen=1)
    assert len(calls) == 4 and best == pytest.approx(4e-3) and at_edge
    ev, calls = _log_calls(lambda lr: -lr)                             # smaller always better
    best, tried, at_edge = search_lr(ev, (5e-4, 1e-3, 2e-3), max_widen=2)
    assert calls[3:] == pytest.approx([2.5e-4, 1.25e-4]) and at_edge


@pytest.mark.parametrize("grid,widen,match", [((1e-3, 2e-3), 2, "three positive"),
                                              ((0.0, 1e-3, 2e-3), 2, "three positive"),
                                              ((1e-3, 2e-3, 3e-3), 2, "geometric"),
                                              ((2e-3, 1e-3, 5e-4), 2, "increasing"),
                                              ((5e-4, 1e-3, 2e-3), -1, "max_widen"),
                                              ((5e-4, 1e-3, 2e-3), 1.5, "max_widen")])
def test_search_lr_rejects_bad_grids(grid, widen, match):
    from iclr26.architectures.conditioned_init.experiment import search_lr
    with pytest.raises(ValueError, match=match):
        search_lr(lambda lr: lr, grid, widen)


def test_run_rejects_bad_scale_and_seed():
    from iclr26.architectures.conditioned_init.experiment import run
    with pytest.raises(ValueError, match="scale"):
        run("huge", 0)
    for seed in (-1, 2.0, False):
        with pytest.raises(ValueError, match="seed"):
            run("smoke", seed)


def test_training_raises_on_non_finite_loss():
    from iclr26.architectures.conditioned_init.experiment import SCALES, TinyViT, _data, _fit
    cfg = dict(SCALES["smoke"], steps=3)
    xtr, ytr, xva, yva, xte, yte = _data(0)
    torch.manual_seed(0)
    model = TinyViT(cfg["dim"], cfg["depth"], cfg["heads"])
    with torch.no_grad():
        model.head.weight.fill_(float("nan"))
    with pytest.raises(FloatingPointError, match="non-finite loss"):
        _fit(model, 1e-3, cfg, 0, xtr, ytr, xva, yva, xte, yte, "default (lr 0.001)")


# ---------------------------------------------------------------- condition number values
def _kappa(m):
    s = torch.linalg.svdvals(m.double())
    return (s[0] / s[-1]).item()


@pytest.mark.parametrize("include_out_proj", [False, True])
def test_condition_number_value_single_token(include_out_proj):
    """N = 1: softmax over one key is 1, so A(x) = x W_V^T (+ W_O): J = W_V (or W_O W_V) and
    kappa(J) is exactly kappa(W_V) (or kappa(W_O W_V))."""
    torch.manual_seed(3)
    attn = _mha(dim=6, heads=2)
    with torch.no_grad():
        wv = torch.diag(torch.tensor([1.0, 2.0, 3.0, 4.0, 5.0, 8.0])) + 0.1 * torch.randn(6, 6)
        attn.in_proj_weight[12:].copy_(wv)
        attn.in_proj_weight[:12].normal_(0, 2.0)
    x = torch.randn(1, 6)
    want = _kappa(attn.out_proj.weight @ wv) if include_out_proj else _kappa(wv)
    got = attention_jacobian_condition(attn, x, include_out_proj=include_out_proj).item()
    assert got == pytest.approx(want, rel=1e-5)
    assert got > 3.0                                                    # a non-trivial value
    conditioned_init_(attn)
    if not include_out_proj:
        assert attention_jacobian_condition(attn, x).item() == pytest.approx(1.0, abs=1e-6)


def test_condition_number_value_two_tokens_closed_form():
    """N = 2, D = 1, one head, W_Q = W_K = W_V = 1 (bias-free): A_i = sum_j p_ij x_j with
    p_i1 = sigmoid(x_i (x_1 - x_2)); its 2 x 2 Jacobian, written out by hand, gives kappa."""
    attn = SelfAttention(dim=1, num_heads=1, bias=False)
    with torch.no_grad():
        for lin in (attn.q_proj, attn.k_proj, attn.v_proj):
            lin.weight.fill_(1.0)
    x1, x2 = 0.7, -1.3
    x = torch.tensor([[x1], [x2]])
    d = x1 - x2

    def row(xi, own):            # gradient of A_i w.r.t. (x_1, x_2) for query i (own = 0 or 1)
        # A_i = p x_1 + (1 - p) x_2 = x_2 + p d with p = sigmoid(x_i d), d = x_1 - x_2:
        # grad A_i = e_2 + p grad d + d p (1 - p) (x_i grad d + d e_i)
        p = 1 / (1 + math.exp(-xi * d))
        grad_d = torch.tensor([1.0, -1.0])
        e_i = torch.eye(2)[own]
        return torch.eye(2)[1] + p * grad_d + d * p * (1 - p) * (xi * grad_d + d * e_i)

    J = torch.stack([row(x1, 0), row(x2, 1)]).double()
    got = attention_jacobian(attn, x).double()
    torch.testing.assert_close(got, J, rtol=1e-5, atol=1e-6)
    assert attention_jacobian_condition(attn, x).item() == pytest.approx(_kappa(J), rel=1e-5)


def test_condition_number_batches_and_scalars():
    attn = _mha(dim=8, heads=2)
    x = torch.randn(3, 5, 8)
    batch = attention_jacobian_condition(attn, x)
    assert batch.shape == (3,) and batch.dtype == torch.float64
    for i in range(3):
        one = attention_jacobian_condition(attn, x[i])
        assert one.ndim == 0 and one.item() == pytest.approx(batch[i].item())
        s = torch.linalg.svdvals(attention_jacobian(attn, x[i]).double())
        assert one.item() == pytest.approx((s.max() / s.min()).item())


# ---------------------------------------------------------------- scale-matched control
@pytest.mark.parametrize("make", [lambda: _mha(dim=16, heads=4), lambda: SelfAttention(dim=16, num_heads=4)])
def test_scale_matched_init_has_conditioned_scale_but_not_its_conditioning(make):
    a, b = make(), make()
    conditioned_init_(a)
    scale_matched_init_(b, generator=torch.Generator().manual_seed(0))
    wa, wb = attention_weights(a), attention_weights(b)
    d = 4
    for ma, mb in ((wa.q, wb.q), (wa.k, wb.k), (wa.v, wb.v)):
        for i in range(4):
            blk_a, blk_b = ma[i * d:(i + 1) * d], mb[i * d:(i + 1) * d]
            assert blk_b.norm().item() == pytest.approx(blk_a.norm().item(), rel=1e-5)   # = 2 = sqrt(d)
            assert blk_b.norm().item() == pytest.approx(2.0, rel=1e-5)
            assert _kappa(blk_b) > 1.5                                                   # spread spectrum
    assert _kappa(wb.v) > 5.0                                        # a square Gaussian W_V is ill-conditioned
    # the entries look Gaussian: mean ~0, no identity structure
    assert abs(torch.diagonal(wb.v).mean().item()) < 0.5


def test_scale_matched_init_rectangular_seeded_keeps_bias_and_out():
    attn = nn.Module()
    attn.num_heads = 2
    attn.q_proj, attn.k_proj = nn.Linear(8, 4), nn.Linear(8, 4)
    attn.v_proj = nn.Linear(8, 12)          # out > in: head 1's rows of eye(12, 8) hold 2 ones
    attn.out_proj = nn.Linear(12, 8)
    bias, out = attn.q_proj.bias.clone(), attn.out_proj.weight.clone()
    scale_matched_init_(attn, generator=torch.Generator().manual_seed(1))
    assert attn.v_proj.weight[:6].norm().item() == pytest.approx(math.sqrt(6), rel=1e-5)
    assert attn.v_proj.weight[6:].norm().item() == pytest.approx(math.sqrt(2), rel=1e-5)
    assert attn.q_proj.weight[:2].norm().item() == pytest.approx(math.sqrt(2), rel=1e-5)
    assert torch.equal(attn.q_proj.bias, bias) and torch.equal(attn.out_proj.weight, out)
    again = nn.Module()
    again.num_heads = 2
    again.q_proj, again.k_proj, again.v_proj = nn.Linear(8, 4), nn.Linear(8, 4), nn.Linear(8, 12)
    scale_matched_init_(again, generator=torch.Generator().manual_seed(1))
    assert torch.equal(again.v_proj.weight, attn.v_proj.weight)
    assert torch.equal(again.k_proj.weight, attn.k_proj.weight)
    # a block of the identity with no ones stays zero
    wide = nn.Module()
    wide.num_heads = 3
    wide.q_proj, wide.k_proj, wide.v_proj = nn.Linear(2, 3), nn.Linear(2, 3), nn.Linear(2, 6)
    scale_matched_init_(wide)
    assert torch.count_nonzero(wide.v_proj.weight[4:]) == 0


def test_scale_matched_attention_is_not_uniform_at_init():
    """Sanity of the control: its attention at init is far from uniform, unlike timm's 0.02 default."""
    torch.manual_seed(0)
    default = _mha(dim=16, heads=4)
    with torch.no_grad():
        nn.init.trunc_normal_(default.in_proj_weight, std=0.02)
    matched = scale_matched_init_(_mha(dim=16, heads=4), generator=torch.Generator().manual_seed(0))
    x = torch.nn.functional.layer_norm(torch.randn(1, 9, 16), (16,))
    dev = []
    with torch.no_grad():
        for attn in (default, matched):
            w = attn(x, x, x, need_weights=True, average_attn_weights=False)[1][0]
            dev.append((w - 1 / 9).abs().max().item())
    assert dev[0] < 0.01 and dev[1] > 10 * dev[0]


# ---------------------------------------------------------------- mimetic: exact products
def _truncated(m, r):
    u, s, vh = torch.linalg.svd(m)
    return (u[:, :r] * s[:r]) @ vh[:r]


@pytest.mark.parametrize("heads", [1, 2])
def test_mimetic_products_equal_the_targets(heads):
    """Per head W_Q^(i)T W_K^(i) = best rank-d approximation of 0.7 Z_i + 0.7 I, and the layer's
    W_V^T W_O^T = 0.4 Z - 0.4 I (D = 8, so W_V has full rank), with Z = N(0, 1/D) drawn from the
    generator in that order (Trockman & Kolter 2023, Sec. 3)."""
    D, d = 8, 8 // heads
    attn = mimetic_init_(_mha(dim=D, heads=heads), generator=torch.Generator().manual_seed(3))
    g = torch.Generator().manual_seed(3)
    eye = torch.eye(D, dtype=torch.float64)
    w = attention_weights(attn)
    for i in range(heads):
        z = torch.randn(D, D, generator=g, dtype=torch.float64) / math.sqrt(D)
        want = _truncated(0.7 * z + 0.7 * eye, d)
        got = (w.q[i * d:(i + 1) * d].T @ w.k[i * d:(i + 1) * d]).double()
        torch.testing.assert_close(got, want, rtol=0, atol=1e-5)
    z = torch.randn(D, D, generator=g, dtype=torch.float64) / math.sqrt(D)
    torch.testing.assert_close((w.v.T @ w.out.T).double(), 0.4 * z - 0.4 * eye, rtol=0, atol=1e-5)
    other = mimetic_init_(_mha(dim=D, heads=heads), alpha1=0.0, beta1=1.0, alpha2=0.0, beta2=2.0)
    wo = attention_weights(other)
    if heads == 1:
        torch.testing.assert_close((wo.q.T @ wo.k).double(), eye, rtol=0, atol=1e-5)
    torch.testing.assert_close((wo.v.T @ wo.out.T).double(), -2 * eye, rtol=0, atol=1e-5)


def test_mimetic_without_output_projection_leaves_values():
    attn = nn.Module()
    attn.num_heads = 1
    attn.q_proj, attn.k_proj, attn.v_proj = nn.Linear(4, 4), nn.Linear(4, 4), nn.Linear(4, 4)
    v = attn.v_proj.weight.clone()
    mimetic_init_(attn)
    assert torch.equal(attn.v_proj.weight, v)
    cross = _mha(dim=4, heads=1)
    cross2 = nn.MultiheadAttention(4, 1, kdim=3, vdim=3)
    with pytest.raises(ValueError, match=r"^mimetic_init_ needs equal query and key input widths \(self-attention\)$"):
        mimetic_init_(cross2)
    assert mimetic_init_(cross) is cross


# ---------------------------------------------------------------- layouts and Haar draws
def test_separate_projection_weights_and_query_key_value_names():
    mha = nn.MultiheadAttention(8, 2, kdim=6, vdim=6, batch_first=True)
    assert mha.in_proj_weight is None
    conditioned_init_(mha, generator=torch.Generator().manual_seed(0))
    assert torch.equal(mha.v_proj_weight, torch.eye(8, 6))
    blk = mha.k_proj_weight[:4].double()
    torch.testing.assert_close(blk @ blk.T, torch.eye(4, dtype=torch.float64), rtol=0, atol=1e-6)
    w = attention_weights(mha)
    assert w.q is mha.q_proj_weight and w.out is mha.out_proj.weight and w.num_heads == 2
    assert w.q_bias.shape == (8,)
    nobias = nn.MultiheadAttention(8, 2, bias=False, kdim=6, vdim=6)
    assert attention_weights(nobias).q_bias is None
    hf = nn.Module()
    hf.query, hf.key, hf.value = nn.Linear(6, 4), nn.Linear(6, 4), nn.Linear(6, 4)
    hf.o_proj = nn.Linear(4, 6)
    w = attention_weights(hf, num_heads=2)
    assert w.q is hf.query.weight and w.v is hf.value.weight and w.out is hf.o_proj.weight
    assert w.k_bias is hf.key.bias


def test_attention_weights_rejections():
    m = nn.Module()
    m.q_proj, m.k_proj, m.v_proj = nn.Linear(4, 4), nn.Linear(4, 2), nn.Linear(4, 4)
    with pytest.raises(ValueError, match=r"^query and key widths differ \(4 vs 2\)$"):
        attention_weights(m, num_heads=1)
    with pytest.raises(ValueError, match=r"^num_heads=3 does not divide the projection widths \(q 4, k 2, v 4\)$"):
        attention_weights(m, num_heads=3)
    with pytest.raises(ValueError, match=r"^num_heads must be a positive integer, got 0$"):
        attention_weights(m, num_heads=0)
    with pytest.raises(ValueError, match=r"^num_heads must be a positive integer, got 2.0$"):
        attention_weights(m, num_heads=2.0)
    with pytest.raises(ValueError, match=r"^num_heads is required: the module has no 'num_heads' attribute$"):
        attention_weights(m)
    with pytest.raises(TypeError, match=r"^unsupported attention module: expected nn.MultiheadAttention or Linear "
                                        r"children q_proj/k_proj/v_proj \(or query/key/value\), got Linear$"):
        attention_weights(nn.Linear(2, 2), num_heads=1)
    with pytest.raises(ValueError, match=r"^x must be one sequence of shape \(N, D\), got \(2, 3, 16\)$"):
        attention_jacobian(_mha(), torch.randn(2, 3, 16))
    with pytest.raises(ValueError, match=r"^x has width 8, the attention expects 16$"):
        attention_jacobian(_mha(), torch.randn(3, 8))


def test_semi_orthogonal_blocks_are_haar_and_tall_blocks_have_orthonormal_columns():
    from iclr26.architectures.conditioned_init.init import _semi_orthogonal_

    g = torch.Generator().manual_seed(0)
    w = torch.empty(3, 3)
    first = []
    for _ in range(1500):
        _semi_orthogonal_(w, g)
        first.append(w[0, 0].item())
    # Haar: every entry has mean 0 (a QR without the sign fix has a biased first column)
    assert abs(np.mean(first)) < 0.05
    tall = torch.empty(5, 2)
    _semi_orthogonal_(tall, g)
    torch.testing.assert_close(tall.T.double() @ tall.double(), torch.eye(2, dtype=torch.float64),
                               rtol=0, atol=1e-6)
    attn = nn.Module()
    attn.num_heads = 2
    attn.q_proj, attn.k_proj, attn.v_proj = nn.Linear(2, 8), nn.Linear(2, 8), nn.Linear(2, 8)
    conditioned_init_(attn)
    blk = attn.q_proj.weight[4:].double()           # 4 x 2 per head: orthonormal columns
    torch.testing.assert_close(blk.T @ blk, torch.eye(2, dtype=torch.float64), rtol=0, atol=1e-6)


# ---------------------------------------------------------------- functional form, rectangular and bias-free
def _hf_attention(d_in=6, d_qk=4, d_v=4, heads=2, bias=False, out=False, seed=4):
    torch.manual_seed(seed)
    m = nn.Module()
    m.q_proj, m.k_proj = nn.Linear(d_in, d_qk, bias=bias), nn.Linear(d_in, d_qk, bias=bias)
    m.v_proj = nn.Linear(d_in, d_v, bias=bias)
    if out:
        m.out_proj = nn.Linear(d_v, d_in, bias=bias)
    with torch.no_grad():
        for p in m.parameters():
            p.normal_(0, 0.6)
    return m, heads


def _reference_attention(m, heads, x, out=False):
    """Per-head loop in float64: softmax(q_h k_h^T / sqrt(d)) v_h, heads concatenated (+ W_O)."""
    x = x.double()

    def lin(l):
        return x @ l.weight.double().T + (l.bias.double() if l.bias is not None else 0)

    q, k, v = lin(m.q_proj), lin(m.k_proj), lin(m.v_proj)
    dq, dv = q.shape[1] // heads, v.shape[1] // heads
    parts = []
    for h in range(heads):
        qh, kh, vh = q[:, h * dq:(h + 1) * dq], k[:, h * dq:(h + 1) * dq], v[:, h * dv:(h + 1) * dv]
        parts.append(torch.softmax(qh @ kh.T / math.sqrt(dq), -1) @ vh)
    a = torch.cat(parts, 1)
    if out:
        o = m.out_proj
        a = a @ o.weight.double().T + (o.bias.double() if o.bias is not None else 0)
    return a


@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("out", [False, True])
def test_functional_attention_rectangular_against_reference(bias, out):
    m, heads = _hf_attention(d_in=6, d_qk=4, d_v=8, bias=bias, out=out)
    x = torch.randn(5, 6)
    w = attention_weights(m, num_heads=heads)
    got = _attention_fn(w, out, m.out_proj.bias if out else None)(x)
    torch.testing.assert_close(got.double(), _reference_attention(m, heads, x, out), rtol=1e-5, atol=1e-5)
    # the Jacobian of a module without num_heads: the count is passed through
    J = attention_jacobian(m, x, num_heads=heads, include_out_proj=out)
    assert J.shape == (5 * (6 if out else 8), 5 * 6)
    kappa = attention_jacobian_condition(m, x[None], num_heads=heads, include_out_proj=out)
    s = torch.linalg.svdvals(J.double())
    assert kappa.item() == pytest.approx((s[0] / s[-1]).item(), rel=1e-6)


def test_bias_free_multihead_attention_and_division_checks():
    mha = nn.MultiheadAttention(8, 2, bias=False)
    w = attention_weights(mha)
    assert w.q_bias is None and w.k_bias is None and w.v_bias is None
    m, _ = _hf_attention(d_in=6, d_qk=4, d_v=10)
    with pytest.raises(ValueError, match=r"^num_heads=4 does not divide the projection widths \(q 4, k 4, v 10\)$"):
        attention_weights(m, num_heads=4)
    m.k_proj, m.v_proj = nn.Linear(6, 2), nn.Linear(6, 4)       # only the key width is not divisible
    with pytest.raises(ValueError, match=r"^num_heads=4 does not divide the projection widths \(q 4, k 2, v 4\)$"):
        attention_weights(m, num_heads=4)
    m.v_proj = nn.Linear(6, 10)
    with pytest.raises(ValueError, match=r"^query and key widths differ \(4 vs 2\)$"):
        attention_weights(m, num_heads=2)


def test_self_attention_bias_flag_reaches_every_projection():
    for bias in (True, False):
        attn = SelfAttention(dim=8, num_heads=2, bias=bias)
        assert all((lin.bias is not None) == bias for lin in (attn.q_proj, attn.k_proj, attn.v_proj, attn.out_proj))


# ---------------------------------------------------------------- experiment wiring (tuning, data use)
def test_fit_trains_at_the_given_learning_rate(monkeypatch):
    from iclr26.architectures.conditioned_init import experiment as ex

    seen = []

    class Recorder(torch.optim.AdamW):
        def __init__(self, params, lr, **kw):
            seen.append(lr)
            super().__init__(params, lr=lr, **kw)

    monkeypatch.setattr(torch.optim, "AdamW", Recorder)
    cfg = dict(ex.SCALES["smoke"], steps=2, eval_every=1)
    xtr, ytr, xva, yva, xte, yte = ex._data(0)
    model = ex.TinyViT(cfg["dim"], cfg["depth"], cfg["heads"])
    ex._fit(model, 0.0123, cfg, 0, xtr[:64], ytr[:64], xva[:32], yva[:32], xte[:32], yte[:32], "t")
    assert seen == [0.0123]


def test_run_chooses_on_validation_and_initialises_each_arm(monkeypatch):
    # a fake trainer whose validation and test accuracies disagree: the choice must follow validation;
    # it also records each arm's initial attention weights, which must differ between arms
    from iclr26.architectures.conditioned_init import experiment as ex

    inits = {}

    def fake_fit(model, lr, cfg, seed, xtr, ytr, xva, yva, xte, yte, where):
        arm = where.split(" ")[0]
        inits.setdefault(arm, torch.cat([p.detach().flatten() for p in model.blocks[0].attn.parameters()]))
        val = {5e-4: 0.9, 1e-3: 0.5, 2e-3: 0.4}.get(lr, 0.1)     # validation prefers 5e-4 (interior after widening)
        test = {5e-4: 0.1, 1e-3: 0.99, 2e-3: 0.2}.get(lr, 0.0)   # the test split would prefer 1e-3
        return {"val_acc": val, "val_loss": 1.0 - val, "test_acc": test, "steps": 10.0, "curve": []}

    monkeypatch.setattr(ex, "_fit", fake_fit)
    out = ex.run("smoke", 0)
    for arm in ex.ARMS:
        assert out["metrics"]["tuned_lr"][arm] == 5e-4
        assert out["metrics"]["final_test_accuracy"][arm] == 0.1
    keys = list(inits)
    assert set(keys) == set(ex.ARMS)
    for i, a in enumerate(keys):
        for b in keys[i + 1:]:
            assert not torch.allclose(inits[a], inits[b]), (a, b)
