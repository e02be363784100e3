"""Truncated entropy regulariser on the learner's predictions at the feature samples.

Paper: "Oracle-efficient Hybrid Learning with Constrained Adversaries" (arXiv:2603.04546), whose
abstract names a "Frank-Wolfe reduction with truncated entropy regularizer". The exact form used
here is our reading (the README lists it as a reconstruction):

    phi(u)   = u log u + (1 - u) log(1 - u)                    (negative binary entropy, u in [0, 1])
    phi_g(u) = phi(u)                                           for g <= u <= 1 - g
             = phi(g) + phi'(g) (u - g)                         for u < g
             = phi(1 - g) + phi'(1 - g) (u - 1 + g)             for u > 1 - g

i.e. the entropy with its two ends replaced by tangent lines at ``g`` and ``1 - g`` (C^1, convex).
Its gradient ``phi_g'(u) = logit(clip(u, g, 1 - g))`` is bounded by ``log((1 - g) / g)``: at the
vertices of the marginal polytope (every coordinate 0 or 1), where Frank-Wolfe iterates start,
the untruncated gradient is infinite and the linear step would have no finite weights.
"""
from __future__ import annotations

import numpy as np

__all__ = ["truncated_entropy", "truncated_entropy_grad", "truncated_entropy_argmin"]


def _check_gamma(gamma: float) -> float:
    if not (np.isscalar(gamma) and np.isfinite(gamma) and 0 < gamma < 0.5):
        raise ValueError(f"gamma (the truncation level) must lie in (0, 0.5), got {gamma!r}")
    return float(gamma)


def _logit(u):
    return np.log(u) - np.log1p(-u)


def truncated_entropy(u, gamma: float) -> np.ndarray:
    """``phi_g(u)`` elementwise (see the module docstring), for ``u`` in ``[0, 1]``."""
    g = _check_gamma(gamma)
    c = np.clip(u, g, 1.0 - g)
    inner = c * np.log(c) + (1.0 - c) * np.log1p(-c)
    return inner + _logit(c) * (u - c)


def truncated_entropy_grad(u, gamma: float) -> np.ndarray:
    """``phi_g'(u) = logit(clip(u, g, 1 - g))``."""
    g = _check_gamma(gamma)
    return _logit(np.clip(u, g, 1.0 - g))


def truncated_entropy_argmin(v, gamma: float) -> np.ndarray:
    """``argmin_{u in [0, 1]} phi_g(u) - v u`` elementwise: ``sigmoid(v)`` inside the range of
    ``phi_g'``, 1 above it and 0 below it (the gradient of the conjugate of ``phi_g``)."""
    g = _check_gamma(gamma)
    v = np.asarray(v)
    top = _logit(1.0 - g)
    return np.where(v > top, 1.0, np.where(v < -top, 0.0, 0.5 * (1.0 + np.tanh(0.5 * v))))   # tanh form of sigmoid
