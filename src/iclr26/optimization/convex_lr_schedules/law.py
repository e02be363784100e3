"""The loss / learning-rate scaling law built on the last-iterate bound (paper, Sec. 4-5).

    L(T, eta_peak) = L_inf + A * d(s_T) / eta_peak + B * g(s_T) * eta_peak,

where ``(d, g) = bound_terms(s_T)`` for the unit-peak schedule shape ``s_T`` of horizon T, and
``A = D^2``, ``B = G^2``, ``L_inf`` are fitted (non-negative least squares: the law is linear in
them). Consequences (exact for this law): the optimal peak learning rate

    eta*(T) = sqrt(A d(s_T) / (B g(s_T)))      (~ D / (G sqrt T) for linear decay)

and the optimal loss ``L*(T) = L_inf + 2 sqrt(A B d g)`` (~ L_inf + 2 D G / sqrt T).
"""
from __future__ import annotations

from typing import Callable

import numpy as np
from scipy.optimize import nnls

from .bound import bound_terms, cosine_schedule, linear_schedule, wsd_schedule, constant_schedule

__all__ = ["ConvexScalingLaw", "sqrt_horizon_transfer", "r2_score", "SCHEDULES"]

SCHEDULES: dict[str, Callable[[int], np.ndarray]] = {
    "linear": linear_schedule, "cosine": cosine_schedule, "wsd": wsd_schedule,
    "constant": constant_schedule,
}


def sqrt_horizon_transfer(eta_ref: float, T_ref: int, T) -> np.ndarray:
    """Transfer an optimal peak LR from horizon ``T_ref`` to ``T``: ``eta_ref * sqrt(T_ref / T)``."""
    if not eta_ref > 0 or not T_ref > 0:
        raise ValueError("eta_ref and T_ref must be positive")
    T = np.asarray(T, dtype=float)
    if np.any(T <= 0):
        raise ValueError("T must be positive")
    return eta_ref * np.sqrt(T_ref / T)


class ConvexScalingLaw:
    """Fit ``L(T, eta) = L_inf + A d(T)/eta + B g(T) eta`` on (horizon, peak LR, final loss) runs.

    ``schedule``: name in :data:`SCHEDULES` or a callable ``T -> unit-peak schedule``.
    After :meth:`fit`: ``L_inf_``, ``A_`` (= D^2), ``B_`` (= G^2), ``r2_`` (on the fitted runs).
    """

    def __init__(self, schedule: str | Callable[[int], np.ndarray] = "linear", fit_offset: bool = True):
        if isinstance(schedule, str):
            if schedule not in SCHEDULES:
                raise ValueError(f"unknown schedule {schedule!r}; allowed: {sorted(SCHEDULES)} or a callable")
        elif not callable(schedule):
            raise TypeError("schedule must be a name or a callable T -> schedule array")
        self.schedule = schedule
        self.fit_offset = fit_offset
        self._cache: dict[int, tuple[float, float]] = {}

    def _shape(self, T: int) -> np.ndarray:
        fn = SCHEDULES[self.schedule] if isinstance(self.schedule, str) else self.schedule
        return np.asarray(fn(int(T)), dtype=float)

    def terms(self, T: int) -> tuple[float, float]:
        """``(d, g)`` of the unit-peak schedule at horizon T (cached)."""
        T = int(T)
        if T not in self._cache:
            self._cache[T] = bound_terms(self._shape(T))
        return self._cache[T]

    def _design(self, T, eta) -> np.ndarray:
        dg = np.array([self.terms(t) for t in T])
        cols = [dg[:, 0] / eta, dg[:, 1] * eta]
        if self.fit_offset:
            cols.insert(0, np.ones(len(T)))
        return np.column_stack(cols)

    @staticmethod
    def _inputs(T, eta, loss=None):
        T = np.asarray(T).astype(int).ravel()
        eta = np.asarray(eta, dtype=float).ravel()
        if T.shape != eta.shape:
            raise ValueError(f"T and eta_peak must have the same length, got {T.shape} and {eta.shape}")
        if T.size == 0:
            raise ValueError("no runs given")
        if np.any(T < 1) or np.any(~np.isfinite(eta)) or np.any(eta <= 0):
            raise ValueError("T must be >= 1 and eta_peak finite and > 0")
        if loss is not None:
            loss = np.asarray(loss, dtype=float).ravel()
            if loss.shape != T.shape:
                raise ValueError(f"final_loss must have the same length as T, got {loss.shape}")
            if not np.all(np.isfinite(loss)):
                raise ValueError("final_loss must be finite (drop diverged runs before fitting)")
        return T, eta, loss

    def fit(self, T, eta_peak, final_loss) -> "ConvexScalingLaw":
        T, eta, y = self._inputs(T, eta_peak, final_loss)
        n_par = 3 if self.fit_offset else 2
        if T.size < n_par:
            raise ValueError(f"need at least {n_par} runs to fit, got {T.size}")
        X = self._design(T, eta)
        scale = np.abs(X).max(0)
        scale[scale == 0] = 1.0
        coef, _ = nnls(X / scale, y)
        coef = coef / scale
        if self.fit_offset:
            self.L_inf_, self.A_, self.B_ = map(float, coef)
        else:
            self.L_inf_, (self.A_, self.B_) = 0.0, map(float, coef)
        self.r2_ = r2_score(y, self.predict(T, eta))
        return self

    def _check_fitted(self):
        if not hasattr(self, "A_"):
            raise RuntimeError("ConvexScalingLaw is not fitted yet: call fit(T, eta_peak, final_loss)")

    def predict(self, T, eta_peak) -> np.ndarray:
        self._check_fitted()
        T, eta, _ = self._inputs(T, eta_peak)
        dg = np.array([self.terms(t) for t in T])
        return self.L_inf_ + self.A_ * dg[:, 0] / eta + self.B_ * dg[:, 1] * eta

    def optimal_peak_lr(self, T) -> np.ndarray:
        """``eta*(T) = sqrt(A d / (B g))`` (module docstring); inf if the fitted B is 0."""
        self._check_fitted()
        T = np.atleast_1d(np.asarray(T)).astype(int)
        dg = np.array([self.terms(t) for t in T])
        with np.errstate(divide="ignore"):
            return np.sqrt(self.A_ * dg[:, 0] / (self.B_ * dg[:, 1]))

    def optimal_loss(self, T) -> np.ndarray:
        """``L*(T) = L_inf + 2 sqrt(A B d g)``."""
        self._check_fitted()
        T = np.atleast_1d(np.asarray(T)).astype(int)
        dg = np.array([self.terms(t) for t in T])
        return self.L_inf_ + 2.0 * np.sqrt(self.A_ * self.B_ * dg[:, 0] * dg[:, 1])


def r2_score(y, pred) -> float:
    y, pred = np.asarray(y, float), np.asarray(pred, float)
    ss = np.sum((y - y.mean()) ** 2)
    return float(1.0 - np.sum((y - pred) ** 2) / ss) if ss > 0 else float("nan")
