"""Last-iterate convex bound evaluated on a learning-rate schedule, and common schedules.

Paper: "Convex Dominance in Deep Learning I: A Scaling Law of Loss and Learning Rate",
Z. Bu, S. Xu, J. Mao, ICLR 2026, arXiv:2602.07145. Official code: none public.

The paper predicts the loss of the *last* iterate from the last-iterate bound for SGD on a convex,
G-Lipschitz objective with distance D from the start to a minimiser (Defazio, Cutkosky, Mehta and
Mishchenko 2023, "Optimal linear decay learning rate schedules and further refinements", Thm. 1):

    E[f(x_T)] - f*  <=  D^2 / (2 S_1)  +  G^2 Q_1 / (2 S_1)
                        + G^2 / 2 * sum_{k=1}^{T-1} eta_k / S_{k+1} * Q_k / S_k,

with suffix sums S_k = sum_{t=k}^T eta_t and Q_k = sum_{t=k}^T eta_t^2. The bound is therefore
``D^2 * d(eta) + G^2 * g(eta)`` with two schedule functionals, returned by :func:`bound_terms`.
For a schedule ``eta_t = eta_peak * s_t`` the first is ``d(s) / eta_peak`` and the second
``g(s) * eta_peak`` (degrees -1 and +1), which is what gives the optimal peak learning rate
``eta* = (D / G) * sqrt(d(s) / g(s))``, ``~ D / (G sqrt(T))`` for linear decay.
"""
from __future__ import annotations

import numpy as np

__all__ = ["bound_terms", "last_iterate_bound", "linear_schedule", "cosine_schedule",
           "wsd_schedule", "constant_schedule"]


def _check_lrs(lrs) -> np.ndarray:
    lrs = np.asarray(lrs, dtype=float)
    if lrs.ndim != 1 or lrs.size == 0:
        raise ValueError(f"lrs must be a non-empty 1-D sequence of learning rates, got shape {lrs.shape}")
    if not np.all(np.isfinite(lrs)) or np.any(lrs < 0):
        raise ValueError("lrs must be finite and non-negative")
    if lrs[-1] <= 0:
        raise ValueError("the last learning rate must be > 0: the last-iterate bound divides by the "
                         "suffix sum S_T = eta_T (end a decay schedule slightly above 0)")
    return lrs


def bound_terms(lrs) -> tuple[float, float]:
    """The two schedule functionals ``(d, g)`` of the last-iterate bound, so that
    ``bound = D**2 * d + G**2 * g`` (module docstring; Defazio et al. 2023, Thm. 1)."""
    lrs = _check_lrs(lrs)
    S = np.cumsum(lrs[::-1])[::-1]              # S_k, k = 1..T
    Q = np.cumsum((lrs ** 2)[::-1])[::-1]       # Q_k
    d = 1.0 / (2.0 * S[0])
    g = Q[0] / (2.0 * S[0])
    if lrs.size > 1:
        k = np.arange(lrs.size - 1)             # 0-based k = 1..T-1
        g += 0.5 * float(np.sum(lrs[k] / S[k + 1] * Q[k] / S[k]))
    return float(d), float(g)


def last_iterate_bound(lrs, D: float, G: float) -> float:
    """Upper bound on ``E[f(x_T)] - f*`` for SGD with step sizes ``lrs`` (module docstring)."""
    if not (np.isfinite(D) and D >= 0):
        raise ValueError(f"D (distance to a minimiser) must be finite and >= 0, got {D!r}")
    if not (np.isfinite(G) and G >= 0):
        raise ValueError(f"G (Lipschitz constant) must be finite and >= 0, got {G!r}")
    d, g = bound_terms(lrs)
    return D ** 2 * d + G ** 2 * g


def _check_T(T) -> int:
    if not isinstance(T, (int, np.integer)) or isinstance(T, bool) or T < 1:
        raise ValueError(f"T must be a positive integer, got {T!r}")
    return int(T)


def linear_schedule(T: int, peak: float = 1.0) -> np.ndarray:
    """Linear decay ``eta_t = peak * (T + 1 - t) / T``, t = 1..T (ends at peak / T > 0)."""
    T = _check_T(T)
    return peak * (T + 1 - np.arange(1, T + 1)) / T


def cosine_schedule(T: int, peak: float = 1.0) -> np.ndarray:
    """Cosine decay ``eta_t = peak * (1 + cos(pi (t - 1) / T)) / 2``, t = 1..T."""
    T = _check_T(T)
    return peak * 0.5 * (1.0 + np.cos(np.pi * np.arange(T) / T))


def wsd_schedule(T: int, peak: float = 1.0, decay_frac: float = 0.2) -> np.ndarray:
    """Warmup-free warmup-stable-decay: constant, then linear decay over the last ``decay_frac``."""
    T = _check_T(T)
    if not 0.0 < decay_frac <= 1.0:
        raise ValueError(f"decay_frac must be in (0, 1], got {decay_frac!r}")
    n_dec = max(1, int(round(decay_frac * T)))
    out = np.full(T, float(peak))
    out[T - n_dec:] = linear_schedule(n_dec, peak)
    return out


def constant_schedule(T: int, peak: float = 1.0) -> np.ndarray:
    """Constant learning rate (not a "qualified" schedule in the paper: its bound has no decay)."""
    T = _check_T(T)
    return np.full(T, float(peak))
