"""Hypotheses and ERM oracles for the hybrid online learner (arXiv:2603.04546).

Paper: "Oracle-efficient Hybrid Learning with Constrained Adversaries", Princewill Okoroafor,
Robert Kleinberg, Michael P. Kim (ICLR 2026), arXiv:2603.04546. No official code.

The learner reaches its class ``H`` only through an *ERM oracle* (abstract): a callable
``erm_oracle(X, y, sample_weight) -> h`` that returns a hypothesis minimising the weighted number of
mistakes ``sum_i w_i 1[h(x_i) != y_i]`` over ``H``, where ``h.predict(X)`` gives 0/1 labels. The
label functions ``r`` of the adversary's class ``R`` use the same ``predict`` interface (a plain
callable ``r(X) -> labels`` is accepted too). This module holds the two oracles used here:

* :func:`threshold_erm`: exact ERM over 1-D thresholds by sorting, ``O(n log n)``;
* :class:`FiniteClassERM`: exact ERM over an explicit finite list of hypotheses (brute force).
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

__all__ = ["Threshold", "threshold_erm", "FiniteClassERM", "as_features", "binary_labels"]


def as_features(X, name: str = "X") -> np.ndarray:
    """``X`` as a finite 2-D float array ``(n, d)`` (a 1-D input is ``n`` scalar features)."""
    A = np.asarray(X, dtype=float)
    if A.ndim == 0:
        A = A.reshape(1, 1)
    elif A.ndim == 1:
        A = A.reshape(-1, 1)
    elif A.ndim != 2:
        raise ValueError(f"{name} must be 1-D (scalar features) or 2-D (n, d), got shape {A.shape}")
    if not np.all(np.isfinite(A)):
        raise ValueError(f"{name} contains NaN or infinite features; only finite features are allowed")
    return A


def binary_labels(y, name: str) -> np.ndarray:
    """``y`` as an int array after checking every entry is 0 or 1 (bools allowed)."""
    a = np.asarray(y)
    if a.dtype == bool:
        return a.astype(int).reshape(-1)
    a = a.reshape(-1)
    ok = (a == 0) | (a == 1)
    if not ok.all():
        raise ValueError(f"{name} must be 0 or 1, got {a[~ok][0].item()!r}")
    return a.astype(int)


def predict_labels(f, X: np.ndarray, name: str) -> np.ndarray:
    """0/1 labels of hypothesis or label function ``f`` on the rows of ``X`` (checked)."""
    out = f.predict(X) if hasattr(f, "predict") else f(X)
    out = binary_labels(out, f"{name} outputs")
    if out.shape[0] != X.shape[0]:
        raise ValueError(f"{name} returned {out.shape[0]} labels for {X.shape[0]} points")
    return out


class Threshold:
    """1-D threshold ``h(x) = 1[sign * (x - theta) >= 0]`` (``sign = +1``: upward, the default)."""

    __slots__ = ("theta", "sign")

    def __init__(self, theta: float, sign: int = 1):
        if sign not in (1, -1):
            raise ValueError(f"sign must be +1 or -1, got {sign!r}")
        if not np.isfinite(theta):
            raise ValueError(f"theta must be finite, got {theta!r}")
        self.theta = float(theta)
        self.sign = int(sign)

    def predict(self, X) -> np.ndarray:
        X = as_features(X)
        if X.shape[1] != 1:
            raise ValueError(f"a Threshold takes one feature, got {X.shape[1]}")
        return (self.sign * (X[:, 0] - self.theta) >= 0).astype(int)

    def key(self):
        return (self.theta, self.sign)

    def __eq__(self, other):
        return isinstance(other, Threshold) and self.key() == other.key()

    def __hash__(self):
        return hash(self.key())

    def __repr__(self):
        return f"Threshold(theta={self.theta:.6g}, sign={self.sign})"


def predict_many(hypotheses: Sequence, X: np.ndarray, name: str = "hypothesis") -> np.ndarray:
    """Predictions of every hypothesis on the rows of ``X``: an int array ``(len(hypotheses), n)``.

    Thresholds are evaluated in one vectorised step; anything else one hypothesis at a time.
    """
    if len(hypotheses) and all(type(h) is Threshold for h in hypotheses) and X.shape[1] == 1:
        th = np.array([h.theta for h in hypotheses])[:, None]
        sg = np.array([h.sign for h in hypotheses])[:, None]
        return (sg * (X[None, :, 0] - th) >= 0).astype(int)
    out = np.zeros((len(hypotheses), X.shape[0]), dtype=int)
    for i, h in enumerate(hypotheses):
        out[i] = predict_labels(h, X, name)
    return out


def _check_erm_input(X, y, sample_weight):
    X = as_features(X)
    y = binary_labels(y, "y")
    if X.shape[0] != y.shape[0]:
        raise ValueError(f"X and y must have the same length, got {X.shape[0]} and {y.shape[0]}")
    if sample_weight is None:
        w = np.ones(y.shape[0])
    else:
        w = np.asarray(sample_weight, dtype=float).reshape(-1)
        if w.shape[0] != y.shape[0]:
            raise ValueError(f"sample_weight must have one weight per point, got {w.shape[0]} for {y.shape[0]}")
        if not np.all(np.isfinite(w)) or np.any(w < 0):
            raise ValueError("sample_weight must be finite and non-negative")
    return X, y, w


def threshold_erm(X, y, sample_weight=None, signs=(1,)) -> Threshold:
    """Exact weighted ERM over 1-D thresholds (sorting, ``O(n log n)``).

    Minimises ``sum_i w_i 1[h(x_i) != y_i]`` over ``h(x) = 1[s (x - theta) >= 0]`` with ``s`` in
    ``signs``. The returned ``theta`` is the midpoint between the two sorted points it separates
    (``x_min`` itself when every point is labelled by the ``x >= theta`` side, just above ``x_max``
    when none is). Ties go to the first sign in ``signs``, then to the smallest cut.
    With no data it returns ``Threshold(0.0, signs[0])``.
    """
    if not signs or any(s not in (1, -1) for s in signs):
        raise ValueError(f"signs must be a non-empty subset of (1, -1), got {signs!r}")
    X, y, w = _check_erm_input(X, y, sample_weight)
    if X.shape[1] != 1:
        raise ValueError(f"threshold_erm takes one feature, got {X.shape[1]}")
    if X.shape[0] == 0:
        return Threshold(0.0, signs[0])
    x = X[:, 0]
    order = np.argsort(x)
    xs, ys, ws = x[order], y[order], w[order]
    # group equal feature values: a threshold cannot separate them
    starts = np.r_[True, xs[1:] != xs[:-1]]
    gid = np.cumsum(starts) - 1
    ux = xs[starts]
    pos = np.bincount(gid, weights=ws * (ys == 1))
    neg = np.bincount(gid, weights=ws * (ys == 0))
    cpos, cneg = np.r_[0.0, np.cumsum(pos)], np.r_[0.0, np.cumsum(neg)]
    best = None
    for s in signs:
        # cut k: groups 0..k-1 on one side, k.. on the other; upward thresholds predict 1 from group k on
        err = cpos + (cneg[-1] - cneg) if s == 1 else cneg + (cpos[-1] - cpos)
        k = int(np.argmin(err))
        if best is None or err[k] < best[0]:
            best = (err[k], k, s)
    _, k, s = best
    if s == 1:   # predicts 1 on groups k.., so theta lies in (ux[k-1], ux[k]]
        theta = ux[0] if k == 0 else (np.nextafter(ux[-1], np.inf) if k == ux.size else 0.5 * (ux[k - 1] + ux[k]))
        return Threshold(theta)
    # sign -1 predicts 1 on groups 0..k-1, i.e. x <= theta with theta in [ux[k-1], ux[k])
    theta = np.nextafter(ux[0], -np.inf) if k == 0 else (ux[-1] if k == ux.size else 0.5 * (ux[k - 1] + ux[k]))
    return Threshold(theta, -1)


class FiniteClassERM:
    """Exact ERM over an explicit finite class ``hypotheses`` (brute force over the list).

    Calling it as ``oracle(X, y, sample_weight)`` returns the first hypothesis with the smallest
    weighted number of mistakes.
    """

    def __init__(self, hypotheses: Sequence):
        hypotheses = list(hypotheses)
        if not hypotheses:
            raise ValueError("FiniteClassERM needs at least one hypothesis")
        for h in hypotheses:
            if not (hasattr(h, "predict") or callable(h)):
                raise TypeError(f"every hypothesis needs predict(X) or must be callable, got {h!r}")
        self.hypotheses = hypotheses

    def __call__(self, X, y, sample_weight=None):
        X, y, w = _check_erm_input(X, y, sample_weight)
        P = predict_many(self.hypotheses, X)
        err = (P != y[None, :]) @ w
        return self.hypotheses[int(np.argmin(err))]
