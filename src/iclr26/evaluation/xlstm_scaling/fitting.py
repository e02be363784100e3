"""Scaling-law fitting for any table of training runs (Beck et al., "xLSTM Scaling Laws", ICLR 2026,
Sec. 2 and App. C; the procedures of the paper's released analysis code).

* :func:`log_parametric_loss` / :func:`fit_parametric_law`: the parametric law
  ``L(N, D) = E + (A N^-alpha + B D^-beta)^gamma`` (Hoffmann et al. 2022, with the exponent
  ``gamma`` of Busbridge et al. 2025), fitted in log space,
  ``log L = LSE(gamma * LSE(a - alpha log N, b - beta log D), e)`` with ``A = e^a``, ``B = e^b``,
  ``E = e^e``, by minimising the summed Huber loss (``delta = 1e-3``) between observed and
  predicted log-loss with L-BFGS-B from every point of an initialisation grid, keeping the best.
* :func:`isoflop_optimum`: the IsoFLOP approach (Hoffmann et al.'s approach 2): at one compute
  budget, a second-degree polynomial of the loss in ``log10`` of the model size (or token count),
  whose vertex is the compute-optimal size.
* :func:`fit_power_law`: ``y = A' C^a`` fitted as a straight line in log-log space, for
  ``N*(C)`` and ``D*(C)``.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass, field

import numpy as np
from scipy import optimize
from scipy.special import expit

__all__ = [
    "PAPER_INIT_GRID", "huber", "huber_objective", "log_parametric_loss", "ParametricFit", "fit_parametric_law",
    "isoflop_optimum", "fit_power_law", "PowerLawFit",
]

#: The initialisation grid of the paper's released fits (its stored fit tables hold these values:
#: a, b in {0, 5, 10, 15, 20}, e in {-1, -0.5, 0, 0.5, 1}, alpha, beta in {0, 0.2, 0.5, 1}).
PAPER_INIT_GRID = {
    "a": (0.0, 5.0, 10.0, 15.0, 20.0),
    "b": (0.0, 5.0, 10.0, 15.0, 20.0),
    "e": (-1.0, -0.5, 0.0, 0.5, 1.0),
    "alpha": (0.0, 0.2, 0.5, 1.0),
    "beta": (0.0, 0.2, 0.5, 1.0),
}


def _positive_array(name, x) -> np.ndarray:
    arr = np.asarray(x, dtype=float).ravel()
    if arr.size == 0:
        raise ValueError(f"{name} is empty")
    if not np.all(np.isfinite(arr)) or np.any(arr <= 0):
        raise ValueError(f"{name} must hold finite positive numbers")
    return arr


def huber(x, delta: float) -> np.ndarray:
    """Huber loss: ``x^2 / 2`` for ``|x| <= delta``, ``delta (|x| - delta / 2)`` beyond."""
    if not delta > 0:
        raise ValueError(f"huber delta must be > 0, got {delta!r}")
    x = np.asarray(x, dtype=float)
    ax = np.abs(x)
    return np.where(ax <= delta, 0.5 * x**2, delta * (ax - 0.5 * delta))


def log_parametric_loss(N, D, a, b, e, alpha, beta, gamma=1.0) -> np.ndarray:
    """``log L(N, D) = LSE(gamma * LSE(a - alpha log N, b - beta log D), e)`` (natural logs)."""
    N = np.asarray(N, dtype=float)
    D = np.asarray(D, dtype=float)
    t_n = a - alpha * np.log(N)
    t_d = b - beta * np.log(D)
    inner = gamma * np.logaddexp(t_n, t_d)
    return np.logaddexp(inner, e)


def huber_objective(x, logN, logD, y, huber_delta: float, fit_gamma: bool = False) -> tuple[float, np.ndarray]:
    """The fitting objective ``sum_i Huber_delta(y_i - log L(N_i, D_i))`` at parameters
    ``x = (a, b, e, alpha, beta[, gamma])`` and its analytic gradient in ``x``
    (``logN``, ``logD``, ``y`` = log-loss are arrays of the runs)."""
    a, b, e, alpha, beta = x[:5]
    gamma = x[5] if fit_gamma else 1.0
    t_n, t_d = a - alpha * logN, b - beta * logD
    s = np.logaddexp(t_n, t_d)
    inner = gamma * s
    r = y - np.logaddexp(inner, e)
    hp = np.clip(r, -huber_delta, huber_delta)          # the Huber derivative
    w, u = expit(inner - e), expit(t_n - t_d)            # d log L / d inner, d s / d t_n
    g = -hp * w * gamma
    grad = [np.sum(g * u), np.sum(g * (1 - u)), -np.sum(hp * (1 - w)),
            -np.sum(g * u * logN), -np.sum(g * (1 - u) * logD)]
    if fit_gamma:
        grad.append(-np.sum(hp * w * s))
    return float(np.sum(huber(r, huber_delta))), np.asarray(grad)


@dataclass
class ParametricFit:
    """The fitted ``L(N, D) = E + (A N^-alpha + B D^-beta)^gamma``; ``a, b, e`` are ``log A, log B,
    log E``. ``objective`` is the summed Huber loss at the optimum, ``n_inits`` how many starting
    points were tried."""
    a: float
    b: float
    e: float
    alpha: float
    beta: float
    gamma: float
    objective: float
    n_inits: int
    converged: bool = True
    extra: dict = field(default_factory=dict)

    @property
    def A(self) -> float:
        return float(np.exp(self.a))

    @property
    def B(self) -> float:
        return float(np.exp(self.b))

    @property
    def E(self) -> float:
        return float(np.exp(self.e))

    def predict(self, N, D) -> np.ndarray:
        """The fitted loss ``L(N, D)``."""
        return np.exp(log_parametric_loss(N, D, self.a, self.b, self.e, self.alpha, self.beta, self.gamma))

    def compute_optimal(self, C, flops_per_param_token: float = 6.0, n_grid=None) -> tuple[np.ndarray, np.ndarray]:
        """``(N*, D*)`` minimising the fitted loss under ``C = k N D`` (``k =
        flops_per_param_token``, 6 in the usual approximation), by a dense search over
        ``log N`` (``n_grid``, default 1e4 to 1e13 in 4,000 steps), one pair per budget in ``C``."""
        C = _positive_array("C", C)
        if not flops_per_param_token > 0:
            raise ValueError(f"flops_per_param_token must be > 0, got {flops_per_param_token!r}")
        grid = np.logspace(4, 13, 4000) if n_grid is None else _positive_array("n_grid", n_grid)
        D = C[:, None] / (flops_per_param_token * grid[None, :])
        loss = self.predict(grid[None, :], D)
        i = np.argmin(loss, axis=1)
        return grid[i], D[np.arange(len(C)), i]


def fit_parametric_law(N, D, loss, *, huber_delta: float = 1e-3, fit_gamma: bool = False,
                       init_grid: dict | None = None, gamma_grid=(0.5, 1.0, 2.0)) -> ParametricFit:
    """Fit ``L(N, D)`` to runs with ``N`` parameters, ``D`` training tokens and final ``loss``.

    Minimises ``sum_i Huber_delta(log loss_i - log L(N_i, D_i))`` with L-BFGS-B from every point of
    ``init_grid`` (default :data:`PAPER_INIT_GRID`, 2,000 points; with ``fit_gamma`` also over
    ``gamma_grid``) and returns the fit with the smallest objective (the paper's protocol). With
    ``fit_gamma=False``, ``gamma = 1`` (the Chinchilla form)."""
    N = _positive_array("N", N)
    D = _positive_array("D", D)
    y = np.log(_positive_array("loss", loss))
    if not (len(N) == len(D) == len(y)):
        raise ValueError(f"N, D and loss must have the same length, got {len(N)}, {len(D)}, {len(y)}")
    n_free = 6 if fit_gamma else 5
    if len(y) < n_free:
        raise ValueError(f"the law has {n_free} free parameters; at least {n_free} runs are needed, got {len(y)}")
    if not huber_delta > 0:
        raise ValueError(f"huber_delta must be > 0, got {huber_delta!r}")
    grid = PAPER_INIT_GRID if init_grid is None else init_grid
    keys = ("a", "b", "e", "alpha", "beta")
    if set(grid) != set(keys):
        raise ValueError(f"init_grid must give values for exactly {keys}, got {sorted(grid)}")
    logN, logD = np.log(N), np.log(D)

    def objective(x):
        return huber_objective(x, logN, logD, y, huber_delta, fit_gamma)

    starts = list(itertools.product(*(grid[k] for k in keys)))
    if fit_gamma:
        starts = [s + (g,) for s in starts for g in gamma_grid]
    best = None
    for x0 in starts:
        res = optimize.minimize(objective, np.asarray(x0, dtype=float), jac=True, method="L-BFGS-B")
        if best is None or res.fun < best.fun:
            best = res
    x = best.x
    return ParametricFit(a=float(x[0]), b=float(x[1]), e=float(x[2]), alpha=float(x[3]), beta=float(x[4]),
                         gamma=float(x[5]) if fit_gamma else 1.0, objective=float(best.fun),
                         n_inits=len(starts), converged=bool(best.success))


def isoflop_optimum(x, loss) -> tuple[float, np.ndarray]:
    """The IsoFLOP vertex: fit ``loss = c2 u^2 + c1 u + c0`` with ``u = log10 x`` over the runs of
    one compute budget (``x`` the model sizes or token counts) and return ``(x*, (c2, c1, c0))``
    with ``x* = 10^(-c1 / (2 c2))``. Raises when the parabola opens downwards (no minimum)."""
    x = _positive_array("x", x)
    loss = np.asarray(loss, dtype=float).ravel()
    if len(loss) != len(x):
        raise ValueError(f"x and loss must have the same length, got {len(x)} and {len(loss)}")
    if not np.all(np.isfinite(loss)):
        raise ValueError("loss must be finite")
    if len(np.unique(x)) < 3:
        raise ValueError("an IsoFLOP parabola needs at least 3 distinct sizes")
    coef = np.polyfit(np.log10(x), loss, 2)
    if not coef[0] > 0:
        raise ValueError(f"the IsoFLOP parabola has no minimum (quadratic coefficient {coef[0]:.3g} <= 0)")
    return float(10 ** (-coef[1] / (2 * coef[0]))), coef


@dataclass
class PowerLawFit:
    """``y = coefficient * C^exponent``, fitted in log-log space (``r2`` there)."""
    coefficient: float
    exponent: float
    r2: float

    def predict(self, C) -> np.ndarray:
        return self.coefficient * np.asarray(C, dtype=float) ** self.exponent


def fit_power_law(C, y) -> PowerLawFit:
    """Least-squares line ``log y = log A' + a log C`` (the paper's ``N*(H) = A' H^a``)."""
    C = _positive_array("C", C)
    y = _positive_array("y", y)
    if len(C) != len(y):
        raise ValueError(f"C and y must have the same length, got {len(C)} and {len(y)}")
    if len(np.unique(C)) < 2:
        raise ValueError("a power law needs at least 2 distinct budgets")
    lc, ly = np.log(C), np.log(y)
    slope, intercept = np.polyfit(lc, ly, 1)
    resid = ly - (intercept + slope * lc)
    ss = float(np.sum((ly - ly.mean()) ** 2))
    r2 = 1.0 - float(np.sum(resid**2)) / ss if ss > 0 else 1.0
    return PowerLawFit(coefficient=float(np.exp(intercept)), exponent=float(slope), r2=r2)

