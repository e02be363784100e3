"""The loss / learning-rate scaling law built on the last-iterate bound (paper, Sec. 4-5).

Paper: "Convex Dominance in Deep Learning I: A Scaling Law of Loss and Learning Rate",
Z. Bu, S. Xu, J. Mao, ICLR 2026, arXiv:2602.07145. Official code: none public.

A run has horizon ``T``, peak learning rate ``eta`` and schedule ``eta * s_T`` (``s_T`` the
unit-peak shape of horizon T). The loss of its iterate after ``t <= T`` steps is modelled by the
last-iterate bound of the schedule's first ``t`` steps (:func:`~.bound.bound_terms`), with the
bound's constants replaced by fitted ones:

    L(t; T, eta) = L_inf + A * d(s_T[:t]) / eta + B * g(s_T[:t]) * eta,

``(d, g) = bound_terms(s_T[:t])`` (degrees -1 and +1 in the peak learning rate), ``A = D^2``,
``B = G^2`` and ``L_inf`` fitted by non-negative least squares (the law is linear in them). With
``t = T`` this is the law of final losses, ``L_inf + q1^2 / (T eta) + q2^2 eta`` for linear decay;
with every ``t`` of a run it predicts the run's whole loss curve. Consequences (exact for the law):
the optimal peak learning rate

    eta*(T) = sqrt(A d(s_T) / (B g(s_T)))      (~ D / (G sqrt T) for linear decay)

and the optimal final loss ``L*(T) = L_inf + 2 sqrt(A B d g)`` (~ L_inf + 2 D G / sqrt T).
"""
from __future__ import annotations

from typing import Callable

import numpy as np
from scipy.optimize import nnls

from .bound import bound_terms, constant_schedule, cosine_schedule, linear_schedule, wsd_schedule

__all__ = ["ConvexScalingLaw", "sqrt_horizon_transfer", "r2_score", "SCHEDULES"]

SCHEDULES: dict[str, Callable[[int], np.ndarray]] = {
    "linear": linear_schedule, "cosine": cosine_schedule, "wsd": wsd_schedule,
    "constant": constant_schedule,
}


def _steps(name: str, values) -> np.ndarray:
    """``values`` as a 1-D int64 array of step counts >= 1; non-integer values are rejected."""
    a = np.atleast_1d(np.asarray(values))
    if a.dtype == bool or a.dtype.kind not in "iuf":
        raise ValueError(f"{name} must be whole numbers of steps (integers >= 1), got {values!r}")
    if a.dtype.kind == "f":
        bad = ~np.isfinite(a) | (a != np.round(a))
        if bad.any():
            raise ValueError(f"{name} must be whole numbers of steps (integers >= 1), "
                             f"got a non-integer value {a[bad][0]!r}")
    a = a.astype(np.int64).ravel()
    if np.any(a < 1):
        raise ValueError(f"{name} must be whole numbers of steps (integers >= 1), got {a[a < 1][0]}")
    return a


def sqrt_horizon_transfer(eta_ref: float, T_ref: int, T) -> np.ndarray:
    """Transfer an optimal peak LR from horizon ``T_ref`` to ``T``: ``eta_ref * sqrt(T_ref / T)``
    (the ``eta* ~ 1/sqrt(T)`` rule of qualified schedules, paper Sec. 4)."""
    if not (np.isfinite(eta_ref) and eta_ref > 0):
        raise ValueError(f"eta_ref must be a finite learning rate > 0, got {eta_ref!r}")
    T_ref = _steps("T_ref", T_ref)
    if T_ref.size != 1:
        raise ValueError("T_ref must be a single horizon")
    return eta_ref * np.sqrt(T_ref[0] / _steps("T", T).astype(float))


class ConvexScalingLaw:
    """Fit ``L(t; T, eta) = L_inf + A d(s_T[:t])/eta + B g(s_T[:t]) eta`` (module docstring) on
    runs given as (horizon, peak LR, loss) triples, optionally with the step ``t`` at which each
    loss was measured (default: the final step ``T``, i.e. final losses only).

    ``schedule``: name in :data:`SCHEDULES` or a callable ``T -> unit-peak schedule`` (length T).
    After :meth:`fit`: ``L_inf_``, ``A_`` (= D^2), ``B_`` (= G^2), ``r2_`` (on the fitted points).
    """

    def __init__(self, schedule: str | Callable[[int], np.ndarray] = "linear", fit_offset: bool = True):
        if isinstance(schedule, str):
            if schedule not in SCHEDULES:
                raise ValueError(f"unknown schedule {schedule!r}; allowed: {sorted(SCHEDULES)} or a callable")
        elif not callable(schedule):
            raise TypeError("schedule must be a name or a callable T -> schedule array")
        self.schedule = schedule
        self.fit_offset = fit_offset
        self._cache: dict[tuple[int, int], tuple[float, float]] = {}

    def _shape(self, T: int) -> np.ndarray:
        fn = SCHEDULES[self.schedule] if isinstance(self.schedule, str) else self.schedule
        s = np.asarray(fn(int(T)), dtype=float)
        if s.shape != (T,):
            raise ValueError(f"the schedule for horizon {T} must have {T} learning rates, got shape {s.shape}")
        return s

    def terms(self, T: int, t: int | None = None) -> tuple[float, float]:
        """``(d, g)`` of the first ``t`` steps (default all ``T``) of the unit-peak schedule of
        horizon ``T`` (cached)."""
        T = int(_steps("T", T)[0])
        t = T if t is None else int(_steps("t", t)[0])
        if t > T:
            raise ValueError(f"t must be <= T (a step of the run), got t = {t} > T = {T}")
        if (T, t) not in self._cache:
            self._cache[(T, t)] = bound_terms(self._shape(T)[:t])
        return self._cache[(T, t)]

    def _terms(self, T: np.ndarray, t: np.ndarray) -> np.ndarray:
        return np.array([self.terms(a, b) for a, b in zip(T.tolist(), t.tolist())]).reshape(-1, 2)

    def _design(self, T, t, eta) -> np.ndarray:
        dg = self._terms(T, t)
        cols = [dg[:, 0] / eta, dg[:, 1] * eta]
        if self.fit_offset:
            cols.insert(0, np.ones(len(T)))
        return np.column_stack(cols)

    @staticmethod
    def _inputs(T, eta, t=None, loss=None):
        T = _steps("T", T)
        eta = np.atleast_1d(np.asarray(eta, dtype=float)).ravel()
        if T.shape != eta.shape:
            raise ValueError(f"T and eta_peak must have the same length, got {T.size} and {eta.size}")
        if np.any(~np.isfinite(eta)) or np.any(eta <= 0):
            raise ValueError("eta_peak must be finite and > 0")
        if t is None:
            t = T.copy()
        else:
            t = _steps("t", t)
            if t.shape != T.shape:
                raise ValueError(f"t must have the same length as T, got {t.size} and {T.size}")
            if np.any(t > T):
                raise ValueError("t must be <= T: t is the step of a run at which its loss was measured")
        if loss is not None:
            loss = np.atleast_1d(np.asarray(loss, dtype=float)).ravel()
            if loss.shape != T.shape:
                raise ValueError(f"loss must have the same length as T, got {loss.size} and {T.size}")
            if not np.all(np.isfinite(loss)):
                raise ValueError("loss must be finite (drop diverged runs before fitting)")
        return T, eta, t, loss

    def fit(self, T, eta_peak, loss, t=None) -> "ConvexScalingLaw":
        """Fit on runs ``(T[i], eta_peak[i])`` whose loss after ``t[i]`` steps (default ``T[i]``,
        the final loss) is ``loss[i]``. Whole loss curves: one row per (run, measured step)."""
        T, eta, t, y = self._inputs(T, eta_peak, t, loss)
        n_par = 3 if self.fit_offset else 2
        if T.size < n_par:
            raise ValueError(f"need at least {n_par} measurements to fit, got {T.size}")
        X = self._design(T, t, eta)
        scale = np.abs(X).max(0)            # > 0: d, g > 0 for any schedule with a last lr > 0
        coef, _ = nnls(X / scale, y)
        coef = coef / scale
        if self.fit_offset:
            self.L_inf_, self.A_, self.B_ = map(float, coef)
        else:
            self.L_inf_, (self.A_, self.B_) = 0.0, map(float, coef)
        self.r2_ = r2_score(y, self.predict(T, eta, t))
        return self

    def _check_fitted(self):
        if not hasattr(self, "A_"):
            raise RuntimeError("ConvexScalingLaw is not fitted yet: call fit(T, eta_peak, loss)")

    def predict(self, T, eta_peak, t=None) -> np.ndarray:
        """The law's loss after ``t`` steps (default: the final step) of runs ``(T, eta_peak)``."""
        self._check_fitted()
        T, eta, t, _ = self._inputs(T, eta_peak, t)
        dg = self._terms(T, t)
        return self.L_inf_ + self.A_ * dg[:, 0] / eta + self.B_ * dg[:, 1] * eta

    def optimal_peak_lr(self, T) -> np.ndarray:
        """``eta*(T) = sqrt(A d / (B g))`` of the final step (module docstring); inf if B is 0."""
        self._check_fitted()
        T = _steps("T", T)
        dg = self._terms(T, T)
        with np.errstate(divide="ignore"):
            return np.sqrt(self.A_ * dg[:, 0] / (self.B_ * dg[:, 1]))

    def optimal_loss(self, T) -> np.ndarray:
        """``L*(T) = L_inf + 2 sqrt(A B d g)``: the law's final loss at ``eta*(T)``."""
        self._check_fitted()
        T = _steps("T", T)
        dg = self._terms(T, T)
        return self.L_inf_ + 2.0 * np.sqrt(self.A_ * self.B_ * dg[:, 0] * dg[:, 1])


def r2_score(y, pred) -> float:
    """Coefficient of determination ``1 - sum (y - pred)^2 / sum (y - mean y)^2`` (nan if y is
    constant)."""
    y, pred = np.asarray(y, float).ravel(), np.asarray(pred, float).ravel()
    if y.shape != pred.shape or y.size == 0:
        raise ValueError(f"y and pred must be non-empty and of the same length, got {y.size} and {pred.size}")
    ss = np.sum((y - y.mean()) ** 2)
    return float(1.0 - np.sum((y - pred) ** 2) / ss) if ss > 0 else float("nan")
