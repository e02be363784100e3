"""RECON: canonical orientation normalisation on SO(2) (arXiv 2505.13289).

A class-pose decomposition (an invariant-equivariant autoencoder, :mod:`.backbone`) factors an
input ``x`` into an invariant code ``z`` and a pose ``g_hat`` in SO(2), with
``x = rho(g_hat) c(z)`` for a canonical ``c(z)`` that the training run chose arbitrarily. RECON
corrects the arbitrary canonical by a right translation (the paper's central equation):

    g_nat(x) = g_hat(x) * m(x)^{-1},

where ``m(x)`` is a robust Frechet mean, on the group, of the poses ``g_hat`` of the ``k`` nearest
neighbours of ``x`` in invariant space (its equivalence class of similar shapes). The natural poses of
a neighbourhood are thereby centred on the identity, so the canonical becomes the data's own
average orientation instead of the training run's choice. On SO(2) (angles, composition is
addition) this reads ``theta_nat = wrap(theta_hat - m)`` with

    m = argmin_{mu in SO(2)} sum_j rho_c(d(mu, theta_hat_j)),   d(a, b) = |wrap(a - b)|,

for an M-estimator loss ``rho_c``: the squared distance (the plain Frechet mean), the distance
(the Frechet median), Huber's loss or Tukey's biweight (the default: a redescending loss that
ignores neighbours whose pose is beyond ``c``, so a neighbourhood that mixes two orientations,
e.g. a digit seen upright and upside down, locks onto one of them instead of averaging them).

Conventions: angles in radians, positive = counter-clockwise as the image is displayed;
:func:`rotate` applies ``rho(theta)`` to images, ``torch.rot90(x, 1, (-2, -1))`` equals
``rotate(x, pi / 2)`` up to interpolation round-off.
"""
from __future__ import annotations

import math

import torch
from torch import nn
import torch.nn.functional as F

ESTIMATORS = ("tukey", "huber", "median", "mean", "trimmed")
TWO_PI = 2 * math.pi


def wrap_angle(theta: torch.Tensor) -> torch.Tensor:
    """Angles mapped to ``[-pi, pi)``."""
    return torch.remainder(theta + math.pi, TWO_PI) - math.pi


def _check_finite(name: str, t: torch.Tensor) -> None:
    if not torch.is_tensor(t):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if t.numel() == 0:
        raise ValueError(f"{name} is empty")
    if not torch.isfinite(t).all():
        raise ValueError(f"{name} contains NaN or inf")


def rotate(x: torch.Tensor, theta: torch.Tensor | float) -> torch.Tensor:
    """Rotate images ``x`` (``(B, C, H, W)``, square) counter-clockwise by ``theta`` radians
    (a scalar or one angle per image), bilinear, zeros outside; differentiable in ``theta``."""
    if x.dim() != 4 or x.shape[-1] != x.shape[-2]:
        raise ValueError(f"x must be (B, C, H, W) with H == W, got {tuple(x.shape)}")
    theta = torch.as_tensor(theta, dtype=x.dtype, device=x.device)
    if not torch.isfinite(theta).all():
        raise ValueError("theta contains NaN or inf")
    if theta.dim() == 0:
        theta = theta.expand(x.shape[0])
    if theta.shape != (x.shape[0],):
        raise ValueError(f"theta must be a scalar or have shape ({x.shape[0]},), got {tuple(theta.shape)}")
    c, s = torch.cos(theta), torch.sin(theta)
    # output pixel p samples the input at R(theta)^{-1} p in display coordinates; the normalised
    # grid has y pointing down, which flips the sign of the off-diagonal terms
    A = torch.stack([torch.stack([c, -s, torch.zeros_like(c)], -1),
                     torch.stack([s, c, torch.zeros_like(c)], -1)], -2)
    grid = F.affine_grid(A, list(x.shape), align_corners=False)
    return F.grid_sample(x, grid, mode="bilinear", padding_mode="zeros", align_corners=False)


def _loss_and_weight(d: torch.Tensor, estimator: str, c: float):
    """``rho_c(d)`` and the IRLS weight ``rho'(d) / d`` for distances ``d >= 0``."""
    if estimator == "mean":
        return d ** 2, torch.ones_like(d)
    if estimator == "huber":
        loss = torch.where(d <= c, 0.5 * d ** 2, c * (d - 0.5 * c))
        return loss, torch.where(d <= c, torch.ones_like(d), c / d.clamp_min(1e-12))
    if estimator == "tukey":
        u = (d / c).clamp(max=1.0)
        loss = (c ** 2 / 6) * (1 - (1 - u ** 2) ** 3)
        return loss, torch.where(d < c, (1 - u ** 2) ** 2, torch.zeros_like(d))
    raise ValueError(f"estimator must be one of {ESTIMATORS}, got {estimator!r}")


def _trim_keep(d: torch.Tensor, w: torch.Tensor, trim: float) -> torch.Tensor:
    """0/1 mask over the last axis: the points nearest to the candidate whose weight makes up the
    ``1 - trim`` share of the row's total weight (the point that crosses the share is kept)."""
    order = d.argsort(-1)
    ws = torch.gather(w.expand_as(d), -1, order)
    before = ws.cumsum(-1) - ws                                   # weight strictly nearer
    keep_sorted = (before < (1 - trim) * ws.sum(-1, keepdim=True) - 1e-12).to(d.dtype)
    return torch.zeros_like(d).scatter(-1, order, keep_sorted)


def robust_frechet_mean(theta: torch.Tensor, estimator: str = "tukey", c: float = math.pi / 2,
                        weights: torch.Tensor | None = None, iters: int = 30, trim: float = 0.2) -> torch.Tensor:
    """Robust Frechet mean on SO(2) of each row of ``theta`` (``(..., n)`` radians): the angle
    ``mu`` minimising ``sum_j w_j rho_c(|wrap(theta_j - mu)|)``; returns ``(...)`` in ``[-pi, pi)``.

    ``estimator``: ``"tukey"`` (biweight, default), ``"huber"``, ``"median"`` (``rho = d``),
    ``"mean"`` (``rho = d^2``, the Frechet mean) or ``"trimmed"`` (``rho = d^2`` summed over the
    points nearest to ``mu`` that hold the ``1 - trim`` share of the weight: a trimmed Frechet
    mean, minimised by concentration steps, each the weighted tangent mean of the kept points,
    which never raise the objective). ``c`` is the scale of Huber and Tukey in radians; ``trim``
    in ``[0, 0.5)`` the trimmed share. ``weights`` (``(..., n)``, non-negative, a positive sum per row) weight the points;
    zero weights drop them. The objective is non-convex on the circle, so it is minimised from
    every data point as a start (iteratively re-weighted tangent-space means, ``iters`` steps)
    and the start with the lowest objective wins; the median's minimum lies at a data point
    (the objective is piecewise linear with convex kinks only there) and is found exactly.
    """
    _check_finite("theta", theta)
    if estimator not in ESTIMATORS:
        raise ValueError(f"estimator must be one of {ESTIMATORS}, got {estimator!r}")
    if not (isinstance(c, (int, float)) and math.isfinite(c) and 0 < c <= math.pi):
        raise ValueError(f"c must be a scale in (0, pi] radians, got {c!r}")
    if not isinstance(iters, int) or iters < 1:
        raise ValueError(f"iters must be a positive integer, got {iters!r}")
    if not (isinstance(trim, (int, float)) and math.isfinite(trim) and 0 <= trim < 0.5):
        raise ValueError(f"trim must be a share in [0, 0.5), got {trim!r}")
    if weights is None:
        weights = torch.ones_like(theta)
    else:
        _check_finite("weights", weights)
        if weights.shape != theta.shape:
            raise ValueError(f"weights must have theta's shape {tuple(theta.shape)}, got {tuple(weights.shape)}")
        if (weights < 0).any() or (weights.sum(-1) <= 0).any():
            raise ValueError("weights must be non-negative with a positive sum in every row")
    theta = wrap_angle(theta)
    w = weights.unsqueeze(-2)                                     # (..., 1, n)
    mu = theta.clone()                                            # (..., n) starts: every data point

    def objective(m):
        d = wrap_angle(theta.unsqueeze(-2) - m.unsqueeze(-1)).abs()  # (..., starts, n)
        if estimator == "median":
            return (w * d).sum(-1)
        if estimator == "trimmed":
            return (w * _trim_keep(d, w, trim) * d ** 2).sum(-1)
        return (w * _loss_and_weight(d, estimator, c)[0]).sum(-1)

    if estimator != "median":
        for _ in range(iters):
            r = wrap_angle(theta.unsqueeze(-2) - mu.unsqueeze(-1))   # tangent vectors at mu
            if estimator == "trimmed":
                iw = w * _trim_keep(r.abs(), w, trim)
            else:
                iw = w * _loss_and_weight(r.abs(), estimator, c)[1]
            tot = iw.sum(-1)
            step = (iw * r).sum(-1) / tot.clamp_min(1e-12)
            mu = wrap_angle(mu + torch.where(tot > 0, step, torch.zeros_like(step)))
    best = objective(mu).argmin(-1, keepdim=True)
    return torch.gather(mu, -1, best).squeeze(-1)


class RECON(nn.Module):
    """Canonical orientation normaliser over ``(z, g_hat)`` pairs of a class-pose decomposition.

    ``fit(z, g_hat)`` stores a reference set (invariant codes ``(n, d)``, poses ``(n,)`` radians)
    as buffers (so it travels with ``state_dict`` and ``.to``); ``forward(z, g_hat)`` returns the
    natural poses ``g_nat = wrap(g_hat - m)`` with ``m`` the robust Frechet mean
    (:func:`robust_frechet_mean`) of the poses of the ``k`` reference points nearest to ``z``
    (Euclidean; with ``standardize=True``, the default and this library's choice, after z-scoring
    each coordinate by the reference set's mean and standard deviation, so that no code dimension's
    scale decides the neighbours). ``exclude_self=True`` (for queries that are the reference set itself) drops each
    query's own entry (its nearest point at distance 0).

    ``estimator``, ``c``, ``iters`` and ``trim`` are passed to :func:`robust_frechet_mean`.
    Defaults: ``k = 25`` neighbours (the planning notes' reading of the paper; not verified in its
    text), Tukey's biweight with ``c = pi / 2`` (this library's choice: the scale that separates
    two antipodal orientations, see the module docstring).
    """

    def __init__(self, k: int = 25, estimator: str = "tukey", c: float = math.pi / 2, iters: int = 30,
                 standardize: bool = True, chunk: int = 1024, trim: float = 0.2):
        super().__init__()
        if not isinstance(k, int) or isinstance(k, bool) or k < 1:
            raise ValueError(f"k must be a positive integer, got {k!r}")
        if estimator not in ESTIMATORS:
            raise ValueError(f"estimator must be one of {ESTIMATORS}, got {estimator!r}")
        if not (isinstance(c, (int, float)) and math.isfinite(c) and 0 < c <= math.pi):
            raise ValueError(f"c must be a scale in (0, pi] radians, got {c!r}")
        if not isinstance(chunk, int) or chunk < 1:
            raise ValueError(f"chunk must be a positive integer, got {chunk!r}")
        if not (isinstance(trim, (int, float)) and math.isfinite(trim) and 0 <= trim < 0.5):
            raise ValueError(f"trim must be a share in [0, 0.5), got {trim!r}")
        self.trim = float(trim)
        self.k, self.estimator, self.c, self.iters, self.chunk = k, estimator, float(c), iters, chunk
        self.standardize = bool(standardize)
        self.register_buffer("z_ref", torch.empty(0, 0))
        self.register_buffer("z_mean", torch.empty(0))
        self.register_buffer("z_scale", torch.empty(0))
        self.register_buffer("g_ref", torch.empty(0))

    @staticmethod
    def _check_pair(z: torch.Tensor, g: torch.Tensor, what: str) -> None:
        _check_finite(f"{what} z", z)
        _check_finite(f"{what} g_hat", g)
        if z.dim() != 2:
            raise ValueError(f"{what} z must be (n, d), got {tuple(z.shape)}")
        if g.shape != (z.shape[0],):
            raise ValueError(f"{what} g_hat must have shape ({z.shape[0]},), got {tuple(g.shape)}")

    def fit(self, z: torch.Tensor, g_hat: torch.Tensor) -> "RECON":
        """Store the reference set; needs at least ``k`` points."""
        self._check_pair(z, g_hat, "reference")
        if z.shape[0] < self.k:
            raise ValueError(f"the reference set has {z.shape[0]} points, fewer than k={self.k}")
        z = z.detach().clone()
        if self.standardize:
            self.z_mean, self.z_scale = z.mean(0), z.std(0, unbiased=False).clamp_min(1e-12)
        else:
            self.z_mean = torch.zeros(z.shape[1], dtype=z.dtype, device=z.device)
            self.z_scale = torch.ones(z.shape[1], dtype=z.dtype, device=z.device)
        self.z_ref = (z - self.z_mean) / self.z_scale
        self.g_ref = wrap_angle(g_hat.detach().clone())
        return self

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):
        # the reference set's size is only known from the checkpoint: resize the buffers first
        for name in ("z_ref", "g_ref", "z_mean", "z_scale"):
            if prefix + name in state_dict:
                setattr(self, name, torch.empty_like(state_dict[prefix + name]))
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)

    @property
    def fitted(self) -> bool:
        return self.g_ref.numel() > 0

    def neighbours(self, z: torch.Tensor, exclude_self: bool = False) -> torch.Tensor:
        """Indices ``(n, k)`` of the ``k`` nearest reference points of each row of ``z``."""
        if not self.fitted:
            raise RuntimeError("RECON is not fitted: call fit(z, g_hat) on a reference set first")
        _check_finite("z", z)
        if z.dim() != 2 or z.shape[1] != self.z_ref.shape[1]:
            raise ValueError(f"z must be (n, {self.z_ref.shape[1]}), got {tuple(z.shape)}")
        kk = self.k + int(exclude_self)
        if kk > self.z_ref.shape[0]:
            raise ValueError(f"k={self.k} (+1 for exclude_self) exceeds the {self.z_ref.shape[0]} reference points")
        out = []
        for i in range(0, z.shape[0], self.chunk):
            q = (z[i:i + self.chunk].to(self.z_ref.dtype) - self.z_mean) / self.z_scale
            d = torch.cdist(q, self.z_ref)
            idx = d.topk(kk, dim=1, largest=False).indices
            out.append(idx[:, 1:] if exclude_self else idx)
        return torch.cat(out)

    def neighbourhood_mean(self, z: torch.Tensor, exclude_self: bool = False) -> torch.Tensor:
        """``m`` per query: the robust Frechet mean of its neighbours' poses."""
        idx = self.neighbours(z, exclude_self)
        return robust_frechet_mean(self.g_ref[idx], self.estimator, self.c, iters=self.iters, trim=self.trim)

    def forward(self, z: torch.Tensor, g_hat: torch.Tensor, exclude_self: bool = False) -> torch.Tensor:
        """Natural poses ``g_nat = g_hat * m^{-1}`` (radians in ``[-pi, pi)``)."""
        self._check_pair(z, g_hat, "query")
        return wrap_angle(g_hat - self.neighbourhood_mean(z, exclude_self).to(g_hat.dtype))

    def extra_repr(self) -> str:
        return f"k={self.k}, estimator={self.estimator!r}, c={self.c:.4g}, reference={self.g_ref.numel()}"


def class_frechet_means(g_hat: torch.Tensor, labels: torch.Tensor, estimator: str = "tukey",
                        c: float = math.pi / 2, iters: int = 30, trim: float = 0.2) -> dict[int, float]:
    """Per-label robust Frechet mean of poses: the label-supervised correction
    ``g_sup = g_hat * m_y^{-1}`` with one mean per class (it cannot follow a canonical that varies
    within a class; :func:`class_restricted_recon` is the neighbourhood version)."""
    _check_finite("g_hat", g_hat)
    if labels.shape != g_hat.shape:
        raise ValueError(f"labels must have g_hat's shape {tuple(g_hat.shape)}, got {tuple(labels.shape)}")
    return {int(y): float(robust_frechet_mean(g_hat[labels == y], estimator, c, iters=iters, trim=trim))
            for y in torch.unique(labels)}


def class_restricted_recon(z_ref: torch.Tensor, g_ref: torch.Tensor, y_ref, z: torch.Tensor, g: torch.Tensor, y,
                           **recon_kwargs) -> torch.Tensor:
    """Label-supervised RECON: natural poses of the queries ``(z, g)`` with each query's neighbours
    searched only among the reference points of its own label (``y_ref``, ``y``: integer labels);
    ``recon_kwargs`` go to :class:`RECON`. Every query label must have at least ``k`` references."""
    y_ref, y = torch.as_tensor(y_ref), torch.as_tensor(y)
    if y_ref.shape != g_ref.shape or y.shape != g.shape:
        raise ValueError("y_ref and y must have the shapes of g_ref and g")
    out = torch.empty_like(g)
    for c in torch.unique(y):
        q, r = y == c, y_ref == c
        if not r.any():
            raise ValueError(f"label {int(c)} has no reference points")
        out[q] = RECON(**recon_kwargs).fit(z_ref[r], g_ref[r])(z[q], g[q]).to(g.dtype)
    return out


class TestTimeCanonicalizer(nn.Module):
    """The plug-in layer: ``x -> classifier(rotate(x, -g_nat(x)))``.

    ``backbone(x)`` must return ``(z, g_hat)`` (e.g. :class:`.backbone.IEAutoencoder.encode`);
    ``recon`` is a fitted :class:`RECON`; ``classifier`` is any frozen model trained on
    upright inputs. ``mask`` (optional, ``(H, W)``) is multiplied into the canonicalised input.
    """

    __test__ = False  # not a pytest class

    def __init__(self, backbone: nn.Module, recon: RECON, classifier: nn.Module, mask: torch.Tensor | None = None):
        super().__init__()
        self.backbone, self.recon, self.classifier = backbone, recon, classifier
        self.register_buffer("mask", mask if mask is not None else torch.empty(0))

    def canonicalise(self, x: torch.Tensor) -> torch.Tensor:
        z, g = self.backbone(x)
        xc = rotate(x, -self.recon(z, g))
        return xc * self.mask if self.mask.numel() else xc

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.canonicalise(x))
