"""Two-layer Kolmogorov-Arnold network with first-layer training, and its tangent kernel.

Paper: the ICLR 2026 paper on the optimisation of two-layer KANs in the over-parameterised regime
with only the first-layer coefficients trained (exact title and arXiv id not available offline; the
paper says its code is "TBC"). Model of its Section 3::

    f(x) = m^{-1/2} sum_{p=1..m} sum_{l=1..g} beta_{pl} phi_l(z_p),
    z_p  = sum_{k=1..d} sum_{j=1..g} alpha_{pjk} phi_j(x_k),

with only the first-layer coefficients ``alpha`` trained (``beta`` in {-1, +1} fixed), full-batch
gradient descent on L = 1/2 ||y - u||^2. The KAN tangent kernel (KAN-TK, Section 4) is
H_ij = <d f(x_i)/d alpha, d f(x_j)/d alpha>; with the factorisation above it has the closed form
(derived in :func:`kan_tangent_kernel`)::

    H = (S S^T / m) * (Psi Psi^T)      (elementwise product)
    S_ip = sum_l beta_pl phi_l'(z_p(x_i)),  Psi_i = vec(phi_j(x_ik))_{k,j}.

The bases phi are B-splines of order k on a uniform grid (pykan's convention: G intervals,
G + k functions) or the Gaussian RBFs of FastKAN, which the paper's experiments use.
A two-layer ReLU network with first-layer training (Du et al., 2019), the baseline the paper's
width comparison refers to, is in :class:`TwoLayerReLU`.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

__all__ = [
    "KANTKConfig",
    "TwoLayerKAN",
    "TwoLayerReLU",
    "bspline_basis",
    "bspline_basis_derivative",
    "rbf_basis",
    "rbf_basis_derivative",
    "kan_tangent_kernel",
    "relu_tangent_kernel",
    "empirical_tangent_kernel",
    "predicted_residual",
]

_BASES = ("bspline", "rbf")


def _knots(grid_size: int, order: int, lo: float, hi: float, dtype, device) -> torch.Tensor:
    """Uniform knot vector extended by ``order`` knots on each side (pykan's grid extension)."""
    h = (hi - lo) / grid_size
    i = torch.arange(-order, grid_size + order + 1, dtype=dtype, device=device)
    return lo + i * h


def _cox_de_boor(x: torch.Tensor, grid_size: int, extend: int, order: int, domain) -> torch.Tensor:
    """Order-``order`` B-splines on the uniform grid extended by ``extend`` knots per side."""
    lo, hi = float(domain[0]), float(domain[1])
    t = _knots(grid_size, extend, lo, hi, x.dtype, x.device)
    h = (hi - lo) / grid_size
    xe = x.unsqueeze(-1)
    b = ((xe >= t[:-1]) & (xe < t[1:])).to(x.dtype)  # order 0: G + 2*extend intervals
    for p in range(1, order + 1):
        left = (xe - t[: -(p + 1)]) / (p * h) * b[..., :-1]
        right = (t[p + 1 :] - xe) / (p * h) * b[..., 1:]
        b = left + right
    return b


def bspline_basis(x: torch.Tensor, grid_size: int, order: int, domain=(-1.0, 1.0)) -> torch.Tensor:
    """B-spline basis values by the Cox-de Boor recursion, shape ``x.shape + (grid_size + order,)``.

    B_{i,0}(x) = 1[t_i <= x < t_{i+1}],
    B_{i,p}(x) = (x - t_i)/(t_{i+p} - t_i) B_{i,p-1}(x) + (t_{i+p+1} - x)/(t_{i+p+1} - t_{i+1}) B_{i+1,p-1}(x).
    On the extended uniform grid the G + k functions sum to one on ``domain``.
    """
    return _cox_de_boor(x, grid_size, order, order, domain)


def bspline_basis_derivative(x: torch.Tensor, grid_size: int, order: int, domain=(-1.0, 1.0)) -> torch.Tensor:
    """d/dx of :func:`bspline_basis`: B'_{i,k} = (B_{i,k-1} - B_{i+1,k-1}) / h on a uniform grid
    (de Boor's derivative formula with t_{i+k} - t_i = k h)."""
    lower = _cox_de_boor(x, grid_size, order, order - 1, domain)  # G + k + 1 functions
    h = (float(domain[1]) - float(domain[0])) / grid_size
    return (lower[..., :-1] - lower[..., 1:]) / h


def _rbf_centres(num: int, domain, dtype, device):
    lo, hi = float(domain[0]), float(domain[1])
    mu = torch.linspace(lo, hi, num, dtype=dtype, device=device)
    width = (hi - lo) / (num - 1)
    return mu, width


def rbf_basis(x: torch.Tensor, num: int, domain=(-1.0, 1.0)) -> torch.Tensor:
    """FastKAN Gaussian bases phi_j(x) = exp(-(x - mu_j)^2 / (2 s^2)), centres evenly spaced, s = spacing."""
    mu, s = _rbf_centres(num, domain, x.dtype, x.device)
    return torch.exp(-((x.unsqueeze(-1) - mu) ** 2) / (2 * s * s))


def rbf_basis_derivative(x: torch.Tensor, num: int, domain=(-1.0, 1.0)) -> torch.Tensor:
    """d/dx of :func:`rbf_basis`: -(x - mu_j)/s^2 phi_j(x)."""
    mu, s = _rbf_centres(num, domain, x.dtype, x.device)
    diff = x.unsqueeze(-1) - mu
    return -diff / (s * s) * torch.exp(-(diff**2) / (2 * s * s))


@dataclass
class KANTKConfig:
    """Configuration of :class:`TwoLayerKAN`.

    in_features: d. width: m (hidden nodes p). basis: "bspline" (default, KAN of Liu et al.) or
    "rbf" (FastKAN, used in the paper's experiments). grid_size / spline_order: G and k of the
    B-splines (G + k functions per edge; pykan defaults G=5, k=3); for "rbf", ``grid_size`` is the
    number of Gaussians g. domain: the interval the first- and second-layer grids cover.
    init_std: sigma of alpha(0) ~ N(0, sigma^2) (the paper initialises alpha small; value ours).
    symmetric_init: pair hidden node p with node p + m/2 (same alpha, opposite beta) so u(0) = 0
    exactly; the kernel at init is unchanged in distribution (deviation, see README).
    """

    in_features: int
    width: int
    basis: str = "bspline"
    grid_size: int = 5
    spline_order: int = 3
    domain: tuple[float, float] = (-1.0, 1.0)
    init_std: float = 0.1
    symmetric_init: bool = False

    def __post_init__(self):
        if not isinstance(self.in_features, int) or self.in_features < 1:
            raise ValueError(f"in_features must be a positive int, got {self.in_features!r}")
        if not isinstance(self.width, int) or self.width < 1:
            raise ValueError(f"width must be a positive int, got {self.width!r}")
        if self.basis not in _BASES:
            raise ValueError(f"basis must be one of {_BASES}, got {self.basis!r}")
        if not isinstance(self.grid_size, int) or self.grid_size < (2 if self.basis == "rbf" else 1):
            raise ValueError(f"grid_size must be an int >= {2 if self.basis == 'rbf' else 1}, got {self.grid_size!r}")
        if not isinstance(self.spline_order, int) or self.spline_order < 1:
            raise ValueError(f"spline_order must be an int >= 1 (the kernel needs phi'), got {self.spline_order!r}")
        lo, hi = self.domain
        if not hi > lo:
            raise ValueError(f"domain must be (lo, hi) with hi > lo, got {self.domain!r}")
        if not self.init_std >= 0:
            raise ValueError(f"init_std must be >= 0, got {self.init_std!r}")
        if self.symmetric_init and self.width % 2:
            raise ValueError(f"symmetric_init needs an even width, got {self.width}")

    @property
    def num_basis(self) -> int:
        return self.grid_size + self.spline_order if self.basis == "bspline" else self.grid_size


class TwoLayerKAN(nn.Module):
    """Two-layer KAN of eq. (2): trainable first-layer coefficients ``alpha`` (m, d, g), fixed
    second-layer signs ``beta`` (m, g) in {-1, +1} (a buffer, so optimisers see only ``alpha``)."""

    def __init__(self, config: KANTKConfig, generator: torch.Generator | None = None):
        super().__init__()
        self.config = c = config
        g = c.num_basis
        m = c.width // 2 if c.symmetric_init else c.width
        alpha = torch.randn(m, c.in_features, g, generator=generator) * c.init_std
        beta = torch.randint(0, 2, (m, g), generator=generator).to(torch.get_default_dtype()) * 2 - 1
        if c.symmetric_init:
            alpha = torch.cat([alpha, alpha.clone()])
            beta = torch.cat([beta, -beta])
        self.alpha = nn.Parameter(alpha)
        self.register_buffer("beta", beta)

    def basis(self, x: torch.Tensor) -> torch.Tensor:
        c = self.config
        if c.basis == "bspline":
            return bspline_basis(x, c.grid_size, c.spline_order, c.domain)
        return rbf_basis(x, c.grid_size, c.domain)

    def basis_derivative(self, x: torch.Tensor) -> torch.Tensor:
        c = self.config
        if c.basis == "bspline":
            return bspline_basis_derivative(x, c.grid_size, c.spline_order, c.domain)
        return rbf_basis_derivative(x, c.grid_size, c.domain)

    def _check(self, x: torch.Tensor) -> None:
        if x.ndim != 2 or x.shape[1] != self.config.in_features:
            raise ValueError(f"x must have shape (n, {self.config.in_features}), got {tuple(x.shape)}")

    def hidden(self, x: torch.Tensor) -> torch.Tensor:
        """z_p(x) = sum_{k,j} alpha_pjk phi_j(x_k), shape (n, m)."""
        self._check(x)
        return torch.einsum("nkj,pkj->np", self.basis(x), self.alpha)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        z = self.hidden(x)
        return (self.basis(z) * self.beta).sum((-1, -2)) / math.sqrt(self.config.width)


def kan_tangent_kernel(model: TwoLayerKAN, x: torch.Tensor) -> torch.Tensor:
    """KAN-TK H_ij = <grad_alpha f(x_i), grad_alpha f(x_j)> in closed form.

    d f(x)/d alpha_pjk = m^{-1/2} s_p(x) phi_j(x_k) with s_p(x) = sum_l beta_pl phi_l'(z_p(x)), hence
    H = (S S^T / m) * (Psi Psi^T), an elementwise product of an n x n output-layer kernel and the
    Gram matrix of the flattened first-layer basis features.
    """
    with torch.no_grad():
        psi = model.basis(x).flatten(1)
        z = model.hidden(x)
        s = (model.basis_derivative(z) * model.beta).sum(-1)
        return (s @ s.T) / model.config.width * (psi @ psi.T)


class TwoLayerReLU(nn.Module):
    """Two-layer ReLU network f(x) = m^{-1/2} sum_r a_r relu(w_r . x) with w_r(0) ~ N(0, sigma^2 I)
    trained, a_r in {-1, +1} fixed (Du et al., 2019, the baseline of the width comparison)."""

    def __init__(self, in_features: int, width: int, init_std: float = 1.0, symmetric_init: bool = False,
                 generator: torch.Generator | None = None):
        super().__init__()
        if in_features < 1 or width < 1:
            raise ValueError(f"in_features and width must be positive, got {in_features}, {width}")
        if symmetric_init and width % 2:
            raise ValueError(f"symmetric_init needs an even width, got {width}")
        self.width = width
        half = width // 2 if symmetric_init else width
        w = torch.randn(half, in_features, generator=generator) * init_std
        a = torch.randint(0, 2, (half,), generator=generator).to(torch.get_default_dtype()) * 2 - 1
        if symmetric_init:
            w, a = torch.cat([w, w.clone()]), torch.cat([a, -a])
        self.weight = nn.Parameter(w)
        self.register_buffer("a", a)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x @ self.weight.T) @ self.a / math.sqrt(self.width)


def relu_tangent_kernel(model: TwoLayerReLU, x: torch.Tensor) -> torch.Tensor:
    """H_ij = (x_i . x_j) / m * sum_r a_r^2 1[w_r . x_i > 0] 1[w_r . x_j > 0] (Du et al., 2019, eq. 3)."""
    with torch.no_grad():
        act = (x @ model.weight.T > 0).to(x.dtype) * model.a.abs()
        return (act @ act.T) / model.width * (x @ x.T)


def empirical_tangent_kernel(model: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """J J^T with J the Jacobian of the n outputs w.r.t. all trainable parameters (torch.autograd)."""
    params = [p for p in model.parameters() if p.requires_grad]
    rows = []
    for i in range(x.shape[0]):
        grads = torch.autograd.grad(model(x[i : i + 1]).sum(), params)
        rows.append(torch.cat([g.reshape(-1) for g in grads]))
    jac = torch.stack(rows)
    return jac @ jac.T


def predicted_residual(H, r0, eta: float, steps) -> np.ndarray:
    """Thm 4.6: ||y - u(t)|| ~= sqrt(sum_i (1 - eta lambda_i)^{2t} (v_i^T (y - u(0)))^2).

    ``H``: the (n, n) KAN-TK at init; ``r0``: the initial residual y - u(0) (= y when u(0) = 0, the
    theorem's setting); ``steps``: an int or array of t. Returns the predicted residual norms.
    """
    H = np.asarray(H, dtype=np.float64)
    r0 = np.asarray(r0, dtype=np.float64).reshape(-1)
    if H.ndim != 2 or H.shape[0] != H.shape[1] or H.shape[0] != r0.shape[0]:
        raise ValueError(f"H must be (n, n) and r0 (n,), got {H.shape} and {r0.shape}")
    if not eta > 0:
        raise ValueError(f"eta must be > 0, got {eta!r}")
    lam, v = np.linalg.eigh((H + H.T) / 2)
    proj2 = (v.T @ r0) ** 2
    t = np.atleast_1d(np.asarray(steps, dtype=np.float64))
    if np.any(t < 0):
        raise ValueError("steps must be >= 0")
    decay = np.abs(1.0 - eta * lam)[None, :] ** (2 * t[:, None])
    out = np.sqrt(decay @ proj2)
    return out if np.ndim(steps) else out[0]
