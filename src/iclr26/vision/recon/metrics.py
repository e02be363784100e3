"""Circular Wasserstein-1 distance between two samples of angles."""
from __future__ import annotations

import math

import numpy as np


def _as_angles(name, a) -> np.ndarray:
    a = np.asarray(a.detach().cpu() if hasattr(a, "detach") else a, dtype=np.float64).ravel()
    if a.size == 0:
        raise ValueError(f"{name} is empty")
    if not np.isfinite(a).all():
        raise ValueError(f"{name} contains NaN or inf")
    return np.mod(a, 2 * math.pi)


def circular_w1(a, b) -> float:
    """W1 between the empirical distributions of angles ``a`` and ``b`` (radians, any lengths) on
    the circle of circumference ``2 pi`` with the arc-length metric.

    On the circle ``W1 = min_mu int_0^{2 pi} |F_a(t) - F_b(t) - mu| dt`` (Rabin, Delon & Gousseau
    2011), ``F`` the cumulative distribution functions from angle 0; ``F_a - F_b`` is piecewise
    constant between the sorted sample points, so the minimising ``mu`` is the length-weighted
    median of its values and the integral is exact.
    """
    a, b = _as_angles("a", a), _as_angles("b", b)
    t = np.unique(np.concatenate([a, b, [0.0, 2 * math.pi]]))
    left = t[:-1]
    lengths = np.diff(t)
    fa = np.searchsorted(np.sort(a), left, side="right") / a.size
    fb = np.searchsorted(np.sort(b), left, side="right") / b.size
    d = fa - fb
    order = np.argsort(d)
    cw = np.cumsum(lengths[order])
    mu = d[order][np.searchsorted(cw, cw[-1] / 2)]
    return float(np.sum(lengths * np.abs(d - mu)))
