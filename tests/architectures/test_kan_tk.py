"""Tests for kan_tk: B-spline bases, the KAN tangent kernel, Thm 4.6, the layer's contract."""
import itertools
import math

import numpy as np
import pytest
import torch

from iclr26.architectures.kan_tk import (
    KANTKConfig,
    TwoLayerKAN,
    TwoLayerReLU,
    bspline_basis,
    bspline_basis_derivative,
    empirical_tangent_kernel,
    kan_tangent_kernel,
    predicted_residual,
    rbf_basis,
    rbf_basis_derivative,
    relu_tangent_kernel,
)
from iclr26.common.training import train


def _gen(seed=0):
    return torch.Generator().manual_seed(seed)


def test_cubic_bspline_matches_hand_values():
    # Uniform cubic B-spline (cardinal, knots 0..4, h=1): N(1)=1/6, N(2)=2/3, N(3)=1/6, N(1.5)=23/48.
    # With domain (0, 1), G=1, k=3 the knots are -3..4 with h=1, so basis 0 is N(x + 3).
    x = torch.tensor([0.0, 0.5], dtype=torch.float64)
    b = bspline_basis(x, grid_size=1, order=3, domain=(0.0, 1.0))
    assert b.shape == (2, 4)
    assert torch.allclose(b[0], torch.tensor([1 / 6, 2 / 3, 1 / 6, 0.0], dtype=torch.float64))
    assert torch.allclose(b[1], torch.tensor([1 / 48, 23 / 48, 23 / 48, 1 / 48], dtype=torch.float64))


def test_bspline_partition_of_unity_and_derivative():
    x = torch.linspace(-0.999, 0.999, 101, dtype=torch.float64)
    b = bspline_basis(x, 5, 3)
    assert torch.allclose(b.sum(-1), torch.ones_like(x))
    # de Boor's derivative formula against a central finite difference
    h = 1e-6
    fd = (bspline_basis(x + h, 5, 3) - bspline_basis(x - h, 5, 3)) / (2 * h)
    assert torch.allclose(bspline_basis_derivative(x, 5, 3), fd, atol=1e-6)
    fd = (rbf_basis(x + h, 6) - rbf_basis(x - h, 6)) / (2 * h)
    assert torch.allclose(rbf_basis_derivative(x, 6), fd, atol=1e-6)


@pytest.mark.parametrize("basis", ["bspline", "rbf"])
def test_kan_tangent_kernel_equals_autograd_jacobian_gram(basis):
    # KAN-TK closed form H = (S S^T / m) * (Psi Psi^T) vs J J^T from torch.autograd
    torch.manual_seed(0)
    model = TwoLayerKAN(KANTKConfig(3, 7, basis=basis, init_std=0.4), generator=_gen(1)).double()
    x = (torch.rand(6, 3, generator=_gen(2), dtype=torch.float64) * 2 - 1) * 0.95
    H = kan_tangent_kernel(model, x)
    J = empirical_tangent_kernel(model, x)
    assert torch.allclose(H, J, rtol=1e-10, atol=1e-10)
    assert torch.allclose(H, H.T)
    assert torch.linalg.eigvalsh(H)[0] > -1e-10


def test_relu_tangent_kernel_equals_autograd_jacobian_gram():
    model = TwoLayerReLU(4, 9, generator=_gen(3)).double()
    x = torch.randn(5, 4, generator=_gen(4), dtype=torch.float64)
    assert torch.allclose(relu_tangent_kernel(model, x), empirical_tangent_kernel(model, x), atol=1e-12)


def test_symmetric_init_gives_zero_output_and_only_alpha_trains():
    model = TwoLayerKAN(KANTKConfig(4, 10, symmetric_init=True), generator=_gen(5))
    x = torch.rand(8, 4) * 2 - 1
    assert torch.allclose(model(x), torch.zeros(8), atol=1e-6)
    assert [n for n, p in model.named_parameters()] == ["alpha"]
    assert set(model.state_dict()) == {"alpha", "beta"}
    assert set(model.beta.unique().tolist()) <= {-1.0, 1.0}


def test_state_dict_round_trip():
    a = TwoLayerKAN(KANTKConfig(3, 6), generator=_gen(6))
    b = TwoLayerKAN(KANTKConfig(3, 6), generator=_gen(7))
    x = torch.rand(5, 3) * 2 - 1
    assert not torch.allclose(a(x), b(x))
    b.load_state_dict(a.state_dict())
    assert torch.allclose(a(x), b(x))


def test_predicted_residual_equation_and_linear_model_reduction():
    # Thm 4.6 with u(0)=0 on a diagonal kernel: ||r(t)||^2 = sum_i (1 - eta l_i)^{2t} y_i^2
    H = np.diag([4.0, 1.0])
    y = np.array([1.0, 2.0])
    t = np.array([0, 1, 3])
    want = np.sqrt(0.5 ** (2 * t) * 1 + 0.875 ** (2 * t) * 4)
    assert np.allclose(predicted_residual(H, y, 0.125, t), want)
    assert np.isclose(predicted_residual(H, y, 0.125, 0), np.linalg.norm(y))
    # GD on a linear model u = Phi w has kernel Phi Phi^T, and Thm 4.6 is then exact.
    rng = np.random.default_rng(0)
    phi, y = rng.standard_normal((5, 8)), rng.standard_normal(5)
    K = phi @ phi.T
    eta = 1.0 / np.linalg.eigvalsh(K)[-1]
    w = np.zeros(8)
    for _ in range(7):
        w -= eta * phi.T @ (phi @ w - y)
    assert np.isclose(np.linalg.norm(y - phi @ w), predicted_residual(K, y, eta, 7))


def test_wide_kan_gd_tracks_theorem_and_reaches_small_loss():
    # learns: first-layer GD through the shared loop drives the loss down at the rate Thm 4.6 predicts
    torch.manual_seed(0)
    n, d = 6, 3
    x = torch.randn(n, d, generator=_gen(8), dtype=torch.float64)
    x = x / x.norm(dim=1, keepdim=True)
    y = torch.randn(n, generator=_gen(9), dtype=torch.float64)
    model = TwoLayerKAN(KANTKConfig(d, 256, symmetric_init=True), generator=_gen(10)).double()
    H = kan_tangent_kernel(model, x)
    eta = 1.0 / float(torch.linalg.eigvalsh(H)[-1])
    opt = torch.optim.SGD(model.parameters(), lr=eta)
    res = train(model, opt, itertools.repeat((x, y)), 60, lambda m, b: 0.5 * ((m(b[0]) - b[1]) ** 2).sum())
    assert res.losses[-1] < 1e-2 * res.losses[0]
    pred = predicted_residual(H.numpy(), y.numpy(), eta, 20)
    obs = math.sqrt(2 * res.losses[20])
    assert abs(math.log(obs / pred)) < 0.5


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(in_features=0, width=4), "in_features"),
        (dict(in_features=2, width=0), "width"),
        (dict(in_features=2, width=4, basis="chebyshev"), "basis must be one of"),
        (dict(in_features=2, width=4, spline_order=0), "spline_order"),
        (dict(in_features=2, width=4, domain=(1.0, -1.0)), "domain"),
        (dict(in_features=2, width=4, init_std=-1.0), "init_std"),
        (dict(in_features=2, width=5, symmetric_init=True), "even width"),
    ],
)
def test_config_rejects_bad_values(kwargs, match):
    with pytest.raises(ValueError, match=match):
        KANTKConfig(**kwargs)


def test_rejects_bad_shapes():
    model = TwoLayerKAN(KANTKConfig(3, 4))
    with pytest.raises(ValueError, match=r"shape \(n, 3\)"):
        model(torch.zeros(2, 5))
    with pytest.raises(ValueError, match="H must be"):
        predicted_residual(np.eye(3), np.ones(2), 0.1, 1)
    with pytest.raises(ValueError, match="eta"):
        predicted_residual(np.eye(2), np.ones(2), 0.0, 1)


def test_experiment_rejects_unknown_scale():
    from iclr26.architectures.kan_tk.experiment import run

    with pytest.raises(ValueError, match="scale must be one of"):
        run("huge", 0)
