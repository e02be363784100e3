"""Neural Adaptive Binning (NAB) coordinate encoding, the random-Fourier-feature encoding it
replaces, and the coordinate MLP (INR) both feed.

Paper: Xie & Blaschko, "NAB: Neural Adaptive Binning for Sparse-View CT reconstruction",
arXiv 2602.02356 (ICLR 2026), method section. For a 2-D coordinate ``c = (x, y)`` and ``M`` bins:

    [x'_i, y'_i]^T = R(theta_i) [x - u_i, y - v_i]^T,   R(theta) = [[cos, -sin], [sin, cos]]
        x'_i = cos(theta_i) (x - u_i) - sin(theta_i) (y - v_i)     (rotation about the bin centre,
        y'_i = sin(theta_i) (x - u_i) + cos(theta_i) (y - v_i)      around the plane normal)
    gamma_i = 1/2 tanh(k_i (x'_i + h_i / 2)) - 1/2 tanh(k_i (x'_i - h_i / 2))   (square wave in x)
    mu_i    = 1/2 tanh(k_i (y'_i + w_i / 2)) - 1/2 tanh(k_i (y'_i - w_i / 2))   (square wave in y)
    g_i     = gamma_i * mu_i                                          (Hadamard product: a box)
    f_E(c)  = [lambda_1 g_1, ..., lambda_M g_M]

The rotation uses the paper's sign, ``R(theta)`` applied to the offset from the centre (counter-
clockwise for ``theta > 0`` with x rightwards and y upwards): the box itself is therefore turned
by ``-theta``. With ``theta_i = 0`` this is the paper's un-rotated square wave ``1/2 tanh(k_i (x -
u_i + h_i/2)) - 1/2 tanh(k_i (x - u_i - h_i/2))``; as ``k_i -> inf`` each ``g_i`` tends to the
indicator of the rotated box (the paper's link to random binning). Centres ``u, v``, sizes ``h,
w``, steepness ``k``, rotation ``theta`` and height ``lambda`` are all trained end to end.
Steepness is initialised from a multi-scale set ``{p_1..p_q}`` cycled over the bins (the paper's
mechanism for curved objects: e.g. ``{600, 800}`` on its CaCO3 data, ``{25, 50, 75}`` on
Workpieces). The number of bins defaults to the paper's ``M = 456`` (its implementation details,
as quoted by this library's review of the paper; the method section of the arXiv HTML was not
retrievable here).

The INR backbone follows NeRP (Shen et al., "NeRP: Implicit Neural Representation Learning with
Prior Embedding for Sparsely Sampled Image Reconstruction", official code ``liyues/NeRP``,
``networks.py`` ``FFN``), which the paper's INR baselines build on: ReLU hidden layers, a sigmoid
output, PyTorch's default ``nn.Linear`` initialisation, Adam with betas ``(0.9, 0.999)``.
"""
from __future__ import annotations

import math
from typing import Sequence

import torch
from torch import nn


def _positive_int(value, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")
    return value


def _finite_positive(value, name: str) -> float:
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a positive finite number, got {value!r}") from None
    if not math.isfinite(v) or v <= 0:
        raise ValueError(f"{name} must be a positive finite number, got {value!r}")
    return v


def _check_coords(coords: torch.Tensor, name: str = "coords") -> None:
    if not isinstance(coords, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor of shape (..., 2), got {type(coords).__name__}")
    if coords.ndim < 1 or coords.shape[-1] != 2:
        raise ValueError(f"{name} must have shape (..., 2), got {tuple(coords.shape)}")
    if not torch.isfinite(coords).all():
        raise ValueError(f"{name} contains NaN or inf")


class NABEncoding(nn.Module):
    """Neural Adaptive Binning: ``(..., 2)`` coordinates -> ``(..., n_bins)`` soft rotated boxes.

    Args:
        n_bins: number of bins ``M`` (default 456, the paper's value; source in the module
            docstring).
        k_scales: steepness scale set ``{p_1..p_q}``; bin ``i`` starts at ``k_scales[i % q]``.
            Default ``(150., 200.)``: the paper's CaCO3 set ``{600, 800}`` rescaled from a 256-pixel
            to a 64-pixel grid on ``[-1, 1]`` (same transition width in pixels; the paper's
            coordinate normalisation is an assumption of ours).
        rotation: learn ``theta_i`` (default ``True``, the paper's rotational extension); ``False``
            keeps every bin axis-aligned (``theta = 0``, not trained).
        learn_bins: train the bin geometry ``u, v, h, w, k, theta`` (default ``True``, the paper).
            ``False`` freezes them at initialisation (our control arm: the same encoding with
            un-learned bins); the heights ``lambda`` still train.
        extent: coordinates live in ``[-extent, extent]^2`` (default 1.0); centres are drawn
            uniformly there.
        width_range: bin sides ``h, w`` are drawn uniformly in this range, in coordinate units
            (default ``(0.05, 1.0)``: our choice; the paper's initialisation was not available).
        generator: a ``torch.Generator`` for the initial draw (default: torch's global one).
    """

    def __init__(self, n_bins: int = 456, k_scales: Sequence[float] = (150.0, 200.0), rotation: bool = True,
                 learn_bins: bool = True, extent: float = 1.0, width_range: tuple[float, float] = (0.05, 1.0),
                 generator: torch.Generator | None = None):
        super().__init__()
        n_bins = _positive_int(n_bins, "n_bins")
        if isinstance(k_scales, (int, float)):
            k_scales = (k_scales,)
        k_scales = tuple(_finite_positive(k, "k_scales") for k in k_scales)
        if not k_scales:
            raise ValueError("k_scales must hold at least one positive steepness")
        extent = _finite_positive(extent, "extent")
        lo, hi = (_finite_positive(w, "width_range") for w in width_range)
        if lo > hi:
            raise ValueError(f"width_range must be (low, high) with low <= high, got {width_range!r}")
        self.n_bins, self.k_scales, self.rotation, self.learn_bins = n_bins, k_scales, bool(rotation), bool(learn_bins)
        self.extent = extent
        g = generator

        def U(a, b):
            return a + (b - a) * torch.rand(n_bins, generator=g)

        geo = self.learn_bins
        self.u = nn.Parameter(U(-extent, extent), requires_grad=geo)
        self.v = nn.Parameter(U(-extent, extent), requires_grad=geo)
        self.h = nn.Parameter(U(lo, hi), requires_grad=geo)
        self.w = nn.Parameter(U(lo, hi), requires_grad=geo)
        k0 = torch.tensor([k_scales[i % len(k_scales)] for i in range(n_bins)], dtype=torch.float32)
        self.k = nn.Parameter(k0, requires_grad=geo)
        theta0 = U(-math.pi / 4, math.pi / 4) if self.rotation else torch.zeros(n_bins)
        self.theta = nn.Parameter(theta0, requires_grad=geo and self.rotation)
        self.lam = nn.Parameter(torch.ones(n_bins))  # the paper's height lambda_i, always trained

    @property
    def out_features(self) -> int:
        return self.n_bins

    def bins(self, coords: torch.Tensor) -> torch.Tensor:
        """The bins ``g_i(c) = gamma_i * mu_i`` before the heights, shape ``(..., n_bins)``."""
        _check_coords(coords)
        flat = coords.reshape(-1, 2).to(self.u.dtype)
        c, s, k = torch.cos(self.theta), torch.sin(self.theta), self.k
        # k x'_i and k y'_i as one affine map of (x, y) each (the same numbers as rotating the offsets
        # first, in one matmul instead of six elementwise passes over the (points, bins) grid)
        kx = torch.addmm(-k * (c * self.u - s * self.v), flat, torch.stack([k * c, -k * s]))
        ky = torch.addmm(-k * (s * self.u + c * self.v), flat, torch.stack([k * s, k * c]))
        kh, kw = 0.5 * k * self.h, 0.5 * k * self.w
        gamma = 0.5 * (torch.tanh(kx + kh) - torch.tanh(kx - kh))
        mu = 0.5 * (torch.tanh(ky + kw) - torch.tanh(ky - kw))
        return (gamma * mu).reshape(*coords.shape[:-1], self.n_bins)

    def forward(self, coords: torch.Tensor) -> torch.Tensor:
        """``f_E(c) = [lambda_i g_i(c)]_i``, shape ``(..., n_bins)``."""
        return self.bins(coords) * self.lam

    def extra_repr(self) -> str:
        return (f"n_bins={self.n_bins}, k_scales={self.k_scales}, rotation={self.rotation}, "
                f"learn_bins={self.learn_bins}")


class RFFEncoding(nn.Module):
    """Random Fourier features (Tancik et al. 2020), the encoding of the paper's INR baseline:
    ``[cos(2 pi B c), sin(2 pi B c)]`` with ``B ~ N(0, sigma^2)`` of shape ``(n_features // 2, 2)``,
    fixed (a buffer, not trained).

    Args:
        n_features: output width (even; default 456, matching ``NABEncoding``'s default ``n_bins``
            so both feed the same MLP).
        sigma: the frequency scale in cycles per coordinate unit (default 4.0; tune it).
        generator: a ``torch.Generator`` for the draw of ``B``.
    """

    def __init__(self, n_features: int = 456, sigma: float = 4.0, generator: torch.Generator | None = None):
        super().__init__()
        n_features = _positive_int(n_features, "n_features")
        if n_features % 2:
            raise ValueError(f"n_features must be even (cos and sin pairs), got {n_features}")
        self.sigma = _finite_positive(sigma, "sigma")
        self.register_buffer("B", torch.randn(n_features // 2, 2, generator=generator) * self.sigma)

    @property
    def out_features(self) -> int:
        return 2 * self.B.shape[0]

    def forward(self, coords: torch.Tensor) -> torch.Tensor:
        _check_coords(coords)
        proj = 2 * math.pi * coords.to(self.B.dtype) @ self.B.T
        return torch.cat([torch.cos(proj), torch.sin(proj)], dim=-1)


class CoordinateINR(nn.Module):
    """An implicit neural representation: ``encoding -> MLP -> attenuation`` at each coordinate, the
    MLP being NeRP's ``FFN`` (``layers`` ReLU hidden layers of width ``hidden``, then a linear layer
    and a sigmoid, so the attenuation lies in ``(0, 1)``; PyTorch's default ``nn.Linear`` init).

    Args:
        encoding: any module mapping ``(..., 2)`` to ``(..., encoding.out_features)``
            (``NABEncoding`` or ``RFFEncoding``).
        hidden: MLP width (default 256, NeRP's width).
        layers: hidden layers (default 7: NeRP's ``network_depth = 8`` counts the output layer too).
        output: ``"sigmoid"`` (NeRP's, default) or ``"linear"`` (no squashing, for data outside
            ``[0, 1]``).
    """

    def __init__(self, encoding: nn.Module, hidden: int = 256, layers: int = 7, output: str = "sigmoid"):
        super().__init__()
        hidden = _positive_int(hidden, "hidden")
        layers = _positive_int(layers, "layers")
        if output not in ("sigmoid", "linear"):
            raise ValueError(f"output must be 'sigmoid' or 'linear', got {output!r}")
        d = getattr(encoding, "out_features", None)
        if not isinstance(d, int):
            raise TypeError("encoding must expose an integer out_features")
        self.encoding = encoding
        mods: list[nn.Module] = []
        for _ in range(layers):
            mods += [nn.Linear(d, hidden), nn.ReLU()]
            d = hidden
        mods.append(nn.Linear(d, 1))
        if output == "sigmoid":
            mods.append(nn.Sigmoid())
        self.mlp = nn.Sequential(*mods)

    def forward(self, coords: torch.Tensor) -> torch.Tensor:
        """Attenuation at ``coords`` (shape ``(...,)``)."""
        return self.mlp(self.encoding(coords)).squeeze(-1)


def pixel_grid(size: int, extent: float = 1.0, dtype=torch.float32) -> torch.Tensor:
    """Pixel-centre coordinates of a ``size x size`` image on ``[-extent, extent]^2``, shape
    ``(size, size, 2)`` with ``[..., 0] = x`` (column, rightwards) and ``[..., 1] = y`` (row, downwards)."""
    size = _positive_int(size, "size")
    t = (torch.arange(size, dtype=dtype) + 0.5) / size * 2 * extent - extent
    yy, xx = torch.meshgrid(t, t, indexing="ij")
    return torch.stack([xx, yy], dim=-1)
