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
        (dict(in_features=0, width=4), r"^in_features must be a positive int, got 0$"),
        (dict(in_features=2.0, width=4), r"^in_features must be a positive int, got 2.0$"),
        (dict(in_features=2, width=0), r"^width must be a positive int, got 0$"),
        (dict(in_features=2, width=4.0), r"^width must be a positive int, got 4.0$"),
        (dict(in_features=2, width=4, basis="chebyshev"),
         r"^basis must be one of \('bspline', 'rbf'\), got 'chebyshev'$"),
        (dict(in_features=2, width=4, grid_size=0), r"^grid_size must be an int >= 1, got 0$"),
        (dict(in_features=2, width=4, grid_size=1.5), r"^grid_size must be an int >= 1, got 1.5$"),
        (dict(in_features=2, width=4, basis="rbf", grid_size=1), r"^grid_size must be an int >= 2, got 1$"),
        (dict(in_features=2, width=4, spline_order=0),
         r"^spline_order must be an int >= 1 \(the kernel needs phi'\), got 0$"),
        (dict(in_features=2, width=4, spline_order=2.0),
         r"^spline_order must be an int >= 1 \(the kernel needs phi'\), got 2.0$"),
        (dict(in_features=2, width=4, domain=(1.0, -1.0)), r"^domain must be \(lo, hi\) with hi > lo, got \(1.0, -1.0\)$"),
        (dict(in_features=2, width=4, domain=(1.0, 1.0)), r"^domain must be \(lo, hi\) with hi > lo, got \(1.0, 1.0\)$"),
        (dict(in_features=2, width=4, init_std=-1.0), r"^init_std must be >= 0, got -1.0$"),
        (dict(in_features=2, width=4, init_std=float("nan")), r"^init_std must be >= 0, got nan$"),
        (dict(in_features=2, width=5, symmetric_init=True), r"^symmetric_init needs an even width, got 5$"),
    ],
)
def test_config_rejects_bad_values(kwargs, match):
    with pytest.raises(ValueError, match=match):
        KANTKConfig(**kwargs)


def test_config_boundaries_and_defaults():
    c = KANTKConfig(1, 1)
    assert (c.basis, c.grid_size, c.spline_order, c.domain, c.init_std, c.symmetric_init) == \
        ("bspline", 5, 3, (-1.0, 1.0), 0.1, False)
    assert c.num_basis == 8 and KANTKConfig(1, 1, basis="rbf", grid_size=2).num_basis == 2
    KANTKConfig(1, 2, grid_size=1, spline_order=1, init_std=0.0, symmetric_init=True)
    with pytest.raises(ValueError, match=r"^in_features and width must be positive, got 0, 3$"):
        TwoLayerReLU(0, 3)
    with pytest.raises(ValueError, match=r"^in_features and width must be positive, got 2, 0$"):
        TwoLayerReLU(2, 0)
    with pytest.raises(ValueError, match=r"^symmetric_init needs an even width, got 3$"):
        TwoLayerReLU(2, 3, symmetric_init=True)
    TwoLayerReLU(1, 1)


def test_rbf_basis_hand_values():
    """FastKAN: centres evenly spaced on the domain, width = spacing: phi_j(x) = exp(-(x - mu_j)^2 / (2 h^2))."""
    b = rbf_basis(torch.tensor([0.0, 0.5], dtype=torch.float64), 3)
    e = math.exp
    want = torch.tensor([[e(-0.5), 1.0, e(-0.5)], [e(-1.125), e(-0.125), e(-0.125)]], dtype=torch.float64)
    torch.testing.assert_close(b, want)
    b = rbf_basis(torch.tensor([2.0], dtype=torch.float64), 2, domain=(0.0, 4.0))   # centres 0, 4, h = 4
    torch.testing.assert_close(b, torch.tensor([[e(-0.125), e(-0.125)]], dtype=torch.float64))
    d = rbf_basis_derivative(torch.tensor([0.5], dtype=torch.float64), 3)
    torch.testing.assert_close(d, torch.tensor([[-1.5 * e(-1.125), -0.5 * e(-0.125), 0.5 * e(-0.125)]],
                                               dtype=torch.float64))


def test_bspline_on_another_domain_and_order():
    # domain (0, 2), G = 2 (h = 1), order 1 (hat functions on knots -1, 0, 1, 2, 3): x = 0.25 -> 0.75 B_1 + 0.25 B_2
    b = bspline_basis(torch.tensor([0.25, 1.5], dtype=torch.float64), 2, 1, domain=(0.0, 2.0))
    assert b.shape == (2, 3)
    torch.testing.assert_close(b[0], torch.tensor([0.75, 0.25, 0.0], dtype=torch.float64))
    torch.testing.assert_close(b[1], torch.tensor([0.0, 0.5, 0.5], dtype=torch.float64))
    d = bspline_basis_derivative(torch.tensor([0.25], dtype=torch.float64), 2, 1, domain=(0.0, 2.0))
    torch.testing.assert_close(d[0], torch.tensor([-1.0, 1.0, 0.0], dtype=torch.float64))
    x = torch.linspace(0.01, 1.99, 37, dtype=torch.float64)
    torch.testing.assert_close(bspline_basis(x, 4, 2, domain=(0.0, 2.0)).sum(-1), torch.ones_like(x))


def test_kan_forward_against_a_loop():
    """f(x) = m^{-1/2} sum_p sum_l beta_pl phi_l(z_p), z_p = sum_k sum_j alpha_pjk phi_j(x_k) (Section 3)."""
    model = TwoLayerKAN(KANTKConfig(3, 4, init_std=0.5), generator=_gen(20)).double()
    x = (torch.rand(5, 3, generator=_gen(21), dtype=torch.float64) * 2 - 1) * 0.9
    want = torch.zeros(5, dtype=torch.float64)
    for i in range(5):
        for p in range(4):
            z = sum(model.alpha[p, k, j] * bspline_basis(x[i, k:k + 1], 5, 3)[0, j]
                    for k in range(3) for j in range(8))
            want[i] += (model.beta[p] * bspline_basis(z.reshape(1), 5, 3)[0]).sum()
    torch.testing.assert_close(model(x), want / 2.0)
    assert model.hidden(x).shape == (5, 4)
    assert model.alpha.shape == (4, 3, 8) and model.beta.shape == (4, 8)


def test_init_scales_and_symmetric_pairs():
    model = TwoLayerKAN(KANTKConfig(6, 400, init_std=0.3, symmetric_init=True), generator=_gen(22))
    a, b = model.alpha.detach(), model.beta
    assert abs(a.std().item() - 0.3) < 0.01 and abs(a.mean().item()) < 0.01
    assert torch.equal(a[:200], a[200:]) and torch.equal(b[:200], -b[200:])
    assert abs(b.mean().item()) < 0.1
    plain = TwoLayerKAN(KANTKConfig(6, 400), generator=_gen(23))
    assert not torch.equal(plain.alpha[:200], plain.alpha[200:])
    relu = TwoLayerReLU(5, 400, init_std=2.0, symmetric_init=True, generator=_gen(24))
    w = relu.weight.detach()
    assert abs(w.std().item() - 2.0) < 0.05 and torch.equal(w[:200], w[200:])
    assert torch.equal(relu.a[:200], -relu.a[200:]) and set(relu.a.tolist()) == {-1.0, 1.0}
    x = torch.randn(7, 5)
    assert torch.allclose(relu(x), torch.zeros(7), atol=1e-5)
    one = TwoLayerReLU(5, 400, generator=_gen(25))
    torch.testing.assert_close(one(x), torch.relu(x @ one.weight.T) @ one.a / 20.0)


def test_rejects_bad_shapes():
    model = TwoLayerKAN(KANTKConfig(3, 4))
    with pytest.raises(ValueError, match=r"shape \(n, 3\)"):
        model(torch.zeros(2, 5))
    with pytest.raises(ValueError, match=r"^x must have shape \(n, 3\), got \(2, 3, 1\)$"):
        model.hidden(torch.zeros(2, 3, 1))
    with pytest.raises(ValueError, match=r"^H must be \(n, n\) and r0 \(n,\), got \(3, 3\) and \(2,\)$"):
        predicted_residual(np.eye(3), np.ones(2), 0.1, 1)
    with pytest.raises(ValueError, match=r"^H must be \(n, n\) and r0 \(n,\), got \(2, 3\) and \(2,\)$"):
        predicted_residual(np.ones((2, 3)), np.ones(2), 0.1, 1)
    with pytest.raises(ValueError, match=r"^H must be \(n, n\) and r0 \(n,\), got \(2,\) and \(2,\)$"):
        predicted_residual(np.ones(2), np.ones(2), 0.1, 1)
    with pytest.raises(ValueError, match=r"^eta must be > 0, got 0.0$"):
        predicted_residual(np.eye(2), np.ones(2), 0.0, 1)
    with pytest.raises(ValueError, match=r"^steps must be >= 0$"):
        predicted_residual(np.eye(2), np.ones(2), 0.1, [0, -1])
    predicted_residual(np.eye(2), np.ones(2), 1e-9, 0)


def test_predicted_residual_symmetrises_and_uses_the_modulus_of_the_decay():
    # eta lambda = 1.5 > 1: the factor is |1 - 1.5| = 0.5, also at fractional t
    H = np.diag([3.0, 1.0])
    y = np.array([2.0, 0.0])
    assert predicted_residual(H, y, 0.5, 0.5) == pytest.approx(2.0 * 0.5 ** 0.5)
    out = predicted_residual(H, y, 0.5, np.array([1.0, 2.0]))
    assert isinstance(out, np.ndarray) and out.shape == (2,)
    np.testing.assert_allclose(out, [1.0, 0.5])
    # only the symmetric part of H counts
    A = np.array([[2.0, 1.0], [-1.0, 1.0]])
    assert predicted_residual(A, np.array([1.0, 1.0]), 0.2, 3) == pytest.approx(
        predicted_residual(np.diag([2.0, 1.0]), np.array([1.0, 1.0]), 0.2, 3))


def test_experiment_rejects_unknown_scale():
    from iclr26.architectures.kan_tk.experiment import run

    with pytest.raises(ValueError, match="scale must be one of"):
        run("huge", 0)


def test_gradient_descent_stops_at_the_first_step_below_the_target():
    from iclr26.architectures.kan_tk.experiment import gradient_descent

    x = torch.nn.functional.normalize(torch.randn(12, 5, generator=_gen(11), dtype=torch.float64), dim=1)
    y = torch.randn(12, generator=_gen(12), dtype=torch.float64)

    def fresh():
        return TwoLayerReLU(5, 64, symmetric_init=True, generator=_gen(13)).double()

    eta = 1.0 / float(torch.linalg.eigvalsh(relu_tangent_kernel(fresh(), x))[-1])
    full = gradient_descent(fresh(), x, y, 60, eta)
    assert len(full) == 61 and full[-1] < 1e-2 * full[0]
    stopped = gradient_descent(fresh(), x, y, 60, eta, stop_ratio=1e-2)
    t = int(np.argmax(full <= 1e-2 * full[0]))
    np.testing.assert_allclose(stopped, full[: t + 1], rtol=1e-10)      # same path, cut at the crossing


def test_width_needed_is_the_first_grid_width_that_fits_and_censors():
    from iclr26.architectures.kan_tk.experiment import width_needed

    x = torch.nn.functional.normalize(torch.randn(12, 5, generator=_gen(11), dtype=torch.float64), dim=1)
    y = torch.randn(12, generator=_gen(12), dtype=torch.float64)
    cfg = dict(grid_m=(2, 16, 64), width_steps=600, zero_tol=1e-3)
    m, runs = width_needed("relu", x, y, cfg, _gen(16))
    assert m == 16.0                                    # 2 hidden units (10 weights) cannot fit 12 points
    assert [r["m"] for r in runs] == [2, 16] and runs[0]["loss_ratio"] > 1e-3 >= runs[1]["loss_ratio"]
    assert runs[0]["steps"] == 600 and runs[1]["steps"] < 600
    m, runs = width_needed("kan", x, y, dict(cfg, grid_m=(2, 4), width_steps=5, zero_tol=1e-12), _gen(16))
    assert m == 8.0 and runs[-1] == {"censored": True}


def test_bases_follow_the_input_device_and_precision():
    x = torch.zeros(3, device="meta", dtype=torch.float64)
    for b in (bspline_basis(x, 5, 3), bspline_basis_derivative(x, 5, 3), rbf_basis(x, 4), rbf_basis_derivative(x, 4)):
        assert b.device.type == "meta" and b.dtype == torch.float64
    # float64 centres: mu = -1/3 is not a float32 number
    xs = torch.tensor([-1 / 3, 0.2], dtype=torch.float64)
    mu = torch.tensor([-1.0, -1 / 3, 1 / 3, 1.0], dtype=torch.float64)
    want = torch.exp(-((xs[:, None] - mu) ** 2) / (2 * (2 / 3) ** 2))
    torch.testing.assert_close(rbf_basis(xs, 4), want, rtol=1e-14, atol=0)
    assert rbf_basis(xs, 4)[0, 1].item() == 1.0
    dwant = -(xs[:, None] - mu) / (2 / 3) ** 2 * want
    torch.testing.assert_close(rbf_basis_derivative(xs, 4), dwant, rtol=1e-14, atol=1e-15)


@pytest.mark.parametrize("basis", ["bspline", "rbf"])
def test_model_bases_use_the_configured_domain(basis):
    cfg = KANTKConfig(2, 4, basis=basis, grid_size=4, spline_order=2, domain=(0.0, 3.0))
    model = TwoLayerKAN(cfg, generator=_gen(30)).double()
    x = torch.tensor([0.4, 2.1], dtype=torch.float64)
    if basis == "bspline":
        want, dwant = bspline_basis(x, 4, 2, (0.0, 3.0)), bspline_basis_derivative(x, 4, 2, (0.0, 3.0))
    else:
        want, dwant = rbf_basis(x, 4, (0.0, 3.0)), rbf_basis_derivative(x, 4, (0.0, 3.0))
    torch.testing.assert_close(model.basis(x), want)
    torch.testing.assert_close(model.basis_derivative(x), dwant)
    assert not torch.allclose(want, bspline_basis(x, 4, 2) if basis == "bspline" else rbf_basis(x, 4))


def test_models_are_seeded_by_their_generator_and_relu_defaults():
    a = TwoLayerKAN(KANTKConfig(3, 6), generator=_gen(31))
    torch.manual_seed(99)
    b = TwoLayerKAN(KANTKConfig(3, 6), generator=_gen(31))
    assert torch.equal(a.alpha, b.alpha) and torch.equal(a.beta, b.beta)
    assert set(a.beta.flatten().tolist()) == {-1.0, 1.0}
    r1 = TwoLayerReLU(4, 300, generator=_gen(32))
    torch.manual_seed(98)
    r2 = TwoLayerReLU(4, 300, generator=_gen(32))
    assert torch.equal(r1.weight, r2.weight) and torch.equal(r1.a, r2.a)
    assert r1.weight.shape == (300, 4) and r1.a.shape == (300,)
    assert abs(r1.weight.std().item() - 1.0) < 0.05                  # w ~ N(0, I) by default
    assert set(r1.a.tolist()) == {-1.0, 1.0} and abs(r1.a.mean().item()) < 0.3


def test_predicted_residual_computes_in_float64_and_takes_a_column_label():
    rot = np.array([[0.6, 0.8], [-0.8, 0.6]])
    H = (rot @ np.diag([1.0, 1e-3]) @ rot.T).astype(np.float32)
    y = np.array([1.0, 2.0], dtype=np.float32)
    lam, v = np.linalg.eigh(H.astype(np.float64))
    t = 2000
    want = np.sqrt(((1 - lam) ** (2 * t)) @ (v.T @ y.astype(np.float64)) ** 2)
    assert want > 0.01
    assert predicted_residual(H, y, 1.0, t) == pytest.approx(want, rel=1e-10, abs=0)
    # float32 labels are also taken in float64
    y32 = np.array([1.0, 1 / 3], dtype=np.float32)
    want = np.sqrt(((1 - lam) ** (2 * t)) @ (v.T @ y32.astype(np.float64)) ** 2)
    assert predicted_residual(H.astype(np.float64), y32, 1.0, t) == pytest.approx(want, rel=1e-12, abs=0)
    col = predicted_residual(H.astype(np.float64), y.reshape(2, 1), 1.0, [0, 3])
    assert col.shape == (2,) and col[0] == pytest.approx(np.linalg.norm(y))
