"""Variance compensation (VC) of the noise prediction of a quantised + cached diffusion model.

Source: Q&C (arXiv:2503.02508), Section 3.2. Quantisation and caching together amplify the
exposure bias of sampling (Ning et al. 2024, "Elucidating the exposure bias in diffusion models"):
the variance of the accelerated model's prediction drifts from that of the full-precision model,
and the error accumulates over the steps. VC corrects the sampling distribution with a
training-free, per-step correction factor generated adaptively from the running statistics:

    rho_t = sqrt( Var_ref(eps_hat_t) / Var_obs(eps_hat_t) ),        eps_hat_t <- rho_t * eps_hat_t,

where ``Var(eps_hat_t)`` is the mean over samples of the variance over each sample's elements of
the prediction at step ``t``: ``Var_ref`` for the full-precision, cache-free model and ``Var_obs``
for the accelerated (quantised + cached) model, both recorded on the same calibration noises
(:class:`PredictionVarianceRecorder`, :func:`compensation_factors`), so the factor adapts to the
particular quantisation and cache setting and to every step. The paper's exact equations (its
Eq. 9-12) could not be read; this reading, and the per-batch alternative that was tried and
dropped, are documented in the README.
"""
from __future__ import annotations

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


def compensation_factors(reference, observed):
    """``(t, rho_t)`` with ``rho_t = sqrt(Var_ref(t) / Var_obs(t))`` on the reference's timesteps;
    ``reference`` and ``observed`` are ``(t, var)`` pairs (:meth:`PredictionVarianceRecorder.reference`),
    the observed table interpolated linearly in ``t``."""
    rt, rv = (np.asarray(a, float).reshape(-1) for a in reference)
    ot, ov = (np.asarray(a, float).reshape(-1) for a in observed)
    for name, (t, v) in (("reference", (rt, rv)), ("observed", (ot, ov))):
        if len(t) == 0 or t.shape != v.shape:
            raise ValueError(f"{name} t and var must be non-empty and of equal length, got {t.shape}, {v.shape}")
        if not np.all(np.isfinite(v)) or np.any(v <= 0):
            raise ValueError(f"{name} variances must be finite and > 0")
        if np.any(np.diff(t) <= 0):
            raise ValueError(f"{name} t must be strictly increasing")
    return rt, np.sqrt(rv / np.interp(rt, ot, ov))


class VarianceCompensation(nn.Module):
    """Wraps an (accelerated) noise-prediction model: ``forward(x, t, y)`` returns
    ``rho_t * model(x, t, y)``, with the factor table ``(t, rho)`` interpolated linearly in ``t``
    (constant beyond its ends). The factors used are kept in ``history`` as ``(t, rho)``.
    """

    def __init__(self, model: nn.Module, t, rho):
        super().__init__()
        t = np.asarray(t, float).reshape(-1)
        rho = np.asarray(rho, float).reshape(-1)
        if len(t) == 0 or t.shape != rho.shape:
            raise ValueError(f"t and rho must be non-empty and of equal length, got {t.shape}, {rho.shape}")
        if not np.all(np.isfinite(rho)) or np.any(rho <= 0):
            raise ValueError("rho must be finite and > 0")
        if np.any(np.diff(t) <= 0):
            raise ValueError("t must be strictly increasing")
        self.model = model
        self.n_classes = model.n_classes
        self.t, self.rho = t, rho
        self.history: list[tuple[float, float]] = []

    def factor(self, t: float) -> float:
        """``rho_t``, interpolated."""
        return float(np.interp(t, self.t, self.rho))

    def forward(self, x, t, y):
        pred = self.model(x, t, y)
        out = pred.clone()
        for tv in torch.unique(t):
            rows = t == tv
            rho = self.factor(float(tv))
            self.history.append((float(tv), rho))
            out[rows] = pred[rows] * rho
        return out
