"""Variance compensation (VC) of the noise prediction of a quantised + cached diffusion model.

Source: Q&C (arXiv:2503.02508), Section 3.2. Quantisation and caching together amplify the
exposure bias of sampling: the variance of the accelerated model's outputs drifts from that of the
full-precision model over the steps (the paper's Figure 4), and the error accumulates. VC changes
the variance of a normally distributed quantity ``f ~ N(mu, sigma^2)`` to a target ``sigma_new``
with the mean-preserving scaling of Eq. 9,

    Y = mu + (sigma_new / sigma) (f - mu),

with a training-free correction factor per timestep computed from a small batch of intermediate
samples. Here ``f`` is the noise prediction of one sample at step ``t``, ``mu`` its mean over its
elements, ``sigma_new^2`` the mean per-sample variance of the full-precision, cache-free
prediction at ``t`` and ``sigma^2`` that of the accelerated model, both recorded on the same
calibration noises (:class:`PredictionVarianceRecorder`, :func:`compensation_factors`):
``rho_t = sigma_new / sigma``. The paper's Eq. 10-12 (how the factor is generated) could not be
read; this reading is listed in the README.
"""
from __future__ import annotations

import warnings
from collections import deque

import numpy as np
import torch
from torch import nn


def _per_sample_var(pred: torch.Tensor) -> torch.Tensor:
    return pred.reshape(len(pred), -1).var(1, unbiased=False)


class PredictionVarianceRecorder(nn.Module):
    """Passes calls through and records, per timestep, the mean per-sample variance of the
    prediction. :meth:`reference` returns ``(t, var)`` sorted by ``t``."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model
        self.n_classes = model.n_classes
        self._sum: dict[float, float] = {}
        self._n: dict[float, int] = {}

    def forward(self, x, t, y):
        pred = self.model(x, t, y)
        v = _per_sample_var(pred.detach())
        for tv in torch.unique(t):
            rows = t == tv
            key = float(tv)
            self._sum[key] = self._sum.get(key, 0.0) + float(v[rows].sum())
            self._n[key] = self._n.get(key, 0) + int(rows.sum())
        return pred

    def reference(self):
        if not self._n:
            raise RuntimeError("nothing was recorded")
        ts = np.array(sorted(self._n))
        return ts, np.array([self._sum[k] / self._n[k] for k in ts])


def compensation_factors(reference, observed, strict: bool = False):
    """``(t, rho_t)`` with ``rho_t = sqrt(Var_ref(t) / Var_obs(t))`` on the reference's timesteps;
    ``reference`` and ``observed`` are ``(t, var)`` pairs (:meth:`PredictionVarianceRecorder.reference`),
    the observed table interpolated linearly in ``t``. Reference timesteps outside the observed
    range get the observed table's end value (a constant extrapolation): this warns
    (``UserWarning``), and ``strict=True`` refuses it (``ValueError``)."""
    rt, rv = (np.asarray(a, float).reshape(-1) for a in reference)
    ot, ov = (np.asarray(a, float).reshape(-1) for a in observed)
    for name, (t, v) in (("reference", (rt, rv)), ("observed", (ot, ov))):
        if len(t) == 0 or t.shape != v.shape:
            raise ValueError(f"{name} t and var must be non-empty and of equal length, got {t.shape}, {v.shape}")
        if not np.all(np.isfinite(t)):
            raise ValueError(f"{name} t must be finite (got NaN or inf)")
        if not np.all(np.isfinite(v)) or np.any(v <= 0):
            raise ValueError(f"{name} variances must be finite and > 0")
        if np.any(np.diff(t) <= 0):
            raise ValueError(f"{name} t must be strictly increasing")
    outside = (rt < ot[0]) | (rt > ot[-1])
    if np.any(outside):
        msg = (f"{int(outside.sum())} reference timesteps lie outside the observed range "
               f"[{ot[0]:g}, {ot[-1]:g}]; the observed variance is extrapolated as a constant there")
        if strict:
            raise ValueError(msg)
        warnings.warn(msg, UserWarning, stacklevel=2)
    return rt, np.sqrt(rv / np.interp(rt, ot, ov))


class VarianceCompensation(nn.Module):
    """Wraps an (accelerated) noise-prediction model: ``forward(x, t, y)`` returns, per sample,
    ``mu + rho_t (f - mu)`` (Eq. 9) with ``f = model(x, t, y)`` and ``mu`` the sample's mean over its
    elements (``center=False``: ``rho_t f``, the plain rescaling). The factor table ``(t, rho)`` is
    interpolated linearly in ``t`` (constant beyond its ends); the last ``history_size`` factors
    used are kept in ``history`` (a bounded deque of ``(t, rho)``).
    """

    def __init__(self, model: nn.Module, t, rho, center: bool = True, history_size: int = 10_000):
        super().__init__()
        t = np.asarray(t, float).reshape(-1)
        rho = np.asarray(rho, float).reshape(-1)
        if len(t) == 0 or t.shape != rho.shape:
            raise ValueError(f"t and rho must be non-empty and of equal length, got {t.shape}, {rho.shape}")
        if not np.all(np.isfinite(t)):
            raise ValueError("t must be finite (got NaN or inf)")
        if not np.all(np.isfinite(rho)) or np.any(rho <= 0):
            raise ValueError("rho must be finite and > 0")
        if np.any(np.diff(t) <= 0):
            raise ValueError("t must be strictly increasing")
        self.model = model
        self.n_classes = model.n_classes
        self.t, self.rho, self.center = t, rho, bool(center)
        if isinstance(history_size, bool) or not isinstance(history_size, int) or history_size < 0:
            raise ValueError(f"history_size must be an integer >= 0, got {history_size!r}")
        self.history: deque[tuple[float, float]] = deque(maxlen=history_size)

    def factor(self, t: float) -> float:
        """``rho_t``, interpolated."""
        return float(np.interp(t, self.t, self.rho))

    def forward(self, x, t, y):
        pred = self.model(x, t, y)
        out = pred.clone()
        dims = tuple(range(1, pred.dim()))
        for tv in torch.unique(t):
            rows = t == tv
            rho = self.factor(float(tv))
            self.history.append((float(tv), rho))
            p = pred[rows]
            mu = p.mean(dims, keepdim=True) if self.center and dims else torch.zeros_like(p)
            out[rows] = mu + rho * (p - mu)
        return out
