"""Tests for iclr26.architectures.conditioned_init."""
import math

import numpy as np
import pytest
import torch
from torch import nn

from iclr26.architectures.conditioned_init import (SelfAttention, attention_jacobian,
                                                   attention_jacobian_condition, attention_weights,
                                                   conditioned_init_, mimetic_init_)
from iclr26.architectures.conditioned_init.init import _attention_fn


def _mha(dim=16, heads=4, seed=0):
    torch.manual_seed(seed)
    return nn.MultiheadAttention(dim, heads, batch_first=True)


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


def test_functional_attention_matches_self_attention():
    attn = SelfAttention(dim=16, num_heads=4)
    x = torch.randn(1, 5, 16)
    got = _attention_fn(attention_weights(attn), True, attn.out_proj.bias)(x[0])
    assert torch.allclose(got, attn(x)[0], atol=1e-5)


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
    with pytest.raises(ValueError, match="dim"):
        SelfAttention(dim=10, num_heads=3)


# ---------------------------------------------------------------- experiment smoke
def test_experiment_smoke():
    from iclr26.architectures.conditioned_init.experiment import ARMS, run
    out = run("smoke", 0)
    for metric in ("log10_cond_init", "steps_to_target", "final_test_accuracy"):
        assert set(out["metrics"][metric]) == set(ARMS)
        assert all(np.isfinite(v) for v in out["metrics"][metric].values())
