"""Limiting logit distributions of the (margin-rebalanced) max-margin classifier.

Paper: "A statistical theory of overfitting for imbalanced classification",
Jingyang Lyu, Kangjie Zhou, Yiqiao Zhong (ICLR 2026), arXiv:2502.11323.
Official code: https://github.com/jlyu55/Imbalanced_Classification_iclr

Model (paper Sec. 2): ``y = +1`` with probability ``pi`` (the minority class), ``y = -1``
otherwise, ``x | y ~ N(y mu, I_d)``, ``n / d -> delta``. The classifier is
``f(x) = <x, beta> + beta0`` with ``||beta||_2 = 1``.

Variational problem (the separable-data theorem, Sec. 2-3 of the paper; written here in the
closed form we derived for it, see the README):

    maximise kappa over (rho, beta0, kappa), rho in [-1, 1],
    subject to  E[(tau_Y kappa - rho ||mu|| - G - Y beta0)_+^2] <= (1 - rho^2) / delta,

with ``G ~ N(0, 1)`` independent of ``Y``, ``tau_{+1} = tau`` (minority margin ratio) and
``tau_{-1} = 1``. This is the paper's constraint ``rho||mu|| + G + Y beta0 + sqrt(1 - rho^2) xi
>= tau_Y kappa`` with ``E[xi^2] <= 1/delta`` after choosing the smallest feasible ``xi``.
At the solution ``(rho*, beta0*, kappa*)``:

* training logits (ELD): ``Y f(x_i) -> max{tau_Y kappa*, rho*||mu|| + G + Y beta0*}``
  (the rectified Gaussian ``max{kappa, N(., 1)}``);
* test logits (TLD): ``Y f(x) -> rho*||mu|| + G + Y beta0*``;
* test errors: ``Err_+ = Phi(-rho*||mu|| - beta0*)``, ``Err_- = Phi(-rho*||mu|| + beta0*)``.
"""
from __future__ import annotations

from dataclasses import dataclass
from numbers import Real

import numpy as np
from scipy import optimize, stats

__all__ = ["ImbalanceAsymptotics", "imbalance_asymptotics", "optimal_tau", "truncated_logit_cdf",
           "sample_training_logits"]


def _h(a):
    """``E[(a - G)_+^2] = (a^2 + 1) Phi(a) + a phi(a)`` for ``G ~ N(0, 1)`` (closed form)."""
    a = np.asarray(a, dtype=float)
    return (a * a + 1.0) * stats.norm.cdf(a) + a * stats.norm.pdf(a)


def _dh(a):
    """Derivative of :func:`_h`: ``2 E[(a - G)_+] = 2 (a Phi(a) + phi(a))``."""
    a = np.asarray(a, dtype=float)
    return 2.0 * (a * stats.norm.cdf(a) + stats.norm.pdf(a))


@dataclass(frozen=True)
class ImbalanceAsymptotics:
    """Solution of the variational problem and the quantities it predicts."""

    rho: float          #: cosine between beta and mu
    beta0: float        #: limiting intercept
    kappa: float        #: limiting (majority) margin; the minority margin is tau * kappa
    tau: float          #: margin ratio used
    pi: float
    mu_norm: float
    delta: float
    err_minority: float  #: Err_+ = Phi(-rho ||mu|| - beta0)
    err_majority: float  #: Err_- = Phi(-rho ||mu|| + beta0)

    @property
    def err_balanced(self) -> float:
        return 0.5 * (self.err_minority + self.err_majority)

    @property
    def separable(self) -> bool:
        """Whether the data are asymptotically linearly separable (``kappa* > 0``)."""
        return self.kappa > 0

    def minority_logit_law(self):
        """(truncation point, mean) of the minority training logit law ``max{t, N(mean, 1)}``."""
        return self.tau * self.kappa, self.rho * self.mu_norm + self.beta0

    def majority_logit_law(self):
        """(truncation point, mean) of the majority training logit law (``Y f``)."""
        return self.kappa, self.rho * self.mu_norm - self.beta0


def _check(pi, mu_norm, delta, tau):
    for name, v in (("pi", pi), ("mu_norm", mu_norm), ("delta", delta), ("tau", tau)):
        if not isinstance(v, Real) or not np.isfinite(v):
            raise ValueError(f"{name} must be a finite real number, got {v!r}")
    if not 0.0 < pi < 1.0:
        raise ValueError(f"pi (minority proportion) must lie in (0, 1), got {pi!r}")
    if mu_norm < 0:
        raise ValueError(f"mu_norm must be >= 0, got {mu_norm!r}")
    if delta <= 0:
        raise ValueError(f"delta = n/d must be > 0, got {delta!r}")
    if tau <= 0:
        raise ValueError(f"tau (margin ratio) must be > 0, got {tau!r}")


def _kkt_point(z, cons_jac, tol=1e-6):
    """Whether ``z`` satisfies the first-order conditions of ``max a + b`` under the one constraint.

    SLSQP ends with status 8 ("positive directional derivative in the line search") when it sits on
    the optimum and ``ftol`` asks for more than double precision gives (it happens at Cover's
    capacity point, where the solution is ``(0, 0, 0)``, depending on the BLAS threading). Such a
    result is accepted only when it is a KKT point: ``(0, 1, 1) = -lambda grad c`` with
    ``lambda > 0``, the ``rho`` component free unless ``rho`` sits on a bound of ``[-1, 1]``.
    """
    g = np.asarray(cons_jac(z), dtype=float)
    if not np.all(np.isfinite(g)) or g[1] >= 0 or g[2] >= 0:
        return False
    lam = -2.0 / (g[1] + g[2])
    resid = [lam * g[1] + 1.0, lam * g[2] + 1.0]
    if abs(abs(z[0]) - 1.0) > 1e-9:
        resid.append(lam * g[0])
    return bool(np.max(np.abs(resid)) < tol)


def _solve_symmetric(pi, mu_norm, delta):
    """Solve the tau-free form of the problem.

    With ``a = tau kappa - beta0`` and ``b = kappa + beta0`` the constraint reads
    ``pi h(a - rho m) + (1 - pi) h(b - rho m) <= (1 - rho^2)/delta`` and the objective is
    ``kappa = (a + b)/(1 + tau)``, so ``(rho*, a*, b*)`` do not depend on ``tau``: margin
    rebalancing moves only the intercept. The problem is convex (``h`` is convex), solved by SLSQP.
    """
    m = float(mu_norm)

    def cons(z):
        rho, a, b = z
        return (1.0 - rho * rho) / delta - pi * _h(a - rho * m) - (1.0 - pi) * _h(b - rho * m)

    def cons_jac(z):
        rho, a, b = z
        da, db = _dh(a - rho * m), _dh(b - rho * m)
        return np.array([-2.0 * rho / delta + m * (pi * da + (1.0 - pi) * db), -pi * da, -(1.0 - pi) * db])

    best = None
    for rho0 in (0.3, 0.7, 0.95):
        res = optimize.minimize(
            lambda z: -(z[1] + z[2]), x0=np.array([rho0, -1.0, -1.0]),
            jac=lambda z: np.array([0.0, -1.0, -1.0]), method="SLSQP",
            bounds=[(-1.0, 1.0), (None, None), (None, None)],
            constraints=[{"type": "ineq", "fun": cons, "jac": cons_jac}],
            options={"ftol": 1e-13, "maxiter": 500},
        )
        if (res.success or (res.get("status") == 8 and _kkt_point(res.x, cons_jac))) and cons(res.x) > -1e-7 \
                and (best is None or res.fun < best.fun):
            best = res
    if best is None:
        raise RuntimeError("the variational problem could not be solved (SLSQP did not converge)")
    return best.x


def imbalance_asymptotics(pi: float, mu_norm: float, delta: float, tau: float = 1.0) -> ImbalanceAsymptotics:
    """Solve the variational problem for the (margin-rebalanced) max-margin classifier.

    Parameters
    ----------
    pi : minority proportion, in (0, 1) (the class ``y = +1``).
    mu_norm : signal strength ``||mu||_2``.
    delta : aspect ratio ``n / d``.
    tau : minority margin ratio (``tau = 1``: the plain max-margin SVM).

    Returns an :class:`ImbalanceAsymptotics`; ``kappa <= 0`` means the data are not separable and
    the max-margin solution (and this characterisation) does not apply.
    """
    _check(pi, mu_norm, delta, tau)
    rho, a, b = _solve_symmetric(float(pi), float(mu_norm), float(delta))
    kappa = (a + b) / (1.0 + tau)
    beta0 = (tau * b - a) / (1.0 + tau)
    m = rho * mu_norm
    return ImbalanceAsymptotics(
        rho=float(rho), beta0=float(beta0), kappa=float(kappa), tau=float(tau), pi=float(pi),
        mu_norm=float(mu_norm), delta=float(delta),
        err_minority=float(stats.norm.cdf(-m - beta0)), err_majority=float(stats.norm.cdf(-m + beta0)),
    )


def optimal_tau(pi: float, mu_norm: float, delta: float) -> float:
    """Margin ratio minimising the limiting balanced error.

    ``rho*`` does not depend on ``tau`` (see :func:`_solve_symmetric`), and the balanced error
    ``(Phi(-rho m - beta0) + Phi(-rho m + beta0))/2`` is minimised at ``beta0* = 0``, i.e. at
    ``tau = a*/b*``. Returns that ratio (``> 1`` when ``pi < 1/2``).
    """
    _check(pi, mu_norm, delta, 1.0)
    rho, a, b = _solve_symmetric(float(pi), float(mu_norm), float(delta))
    if a + b <= 0:
        raise ValueError("data are not separable at these (pi, mu_norm, delta): no max-margin classifier")
    if b <= 0 or a <= 0:
        raise ValueError("no positive margin ratio reaches beta0* = 0 at these parameters")
    return float(a / b)


def truncated_logit_cdf(t, trunc: float, mean: float):
    """CDF of ``max{trunc, N(mean, 1)}``: 0 below ``trunc``, ``Phi(t - mean)`` at and above it."""
    t = np.asarray(t, dtype=float)
    return np.where(t < trunc, 0.0, stats.norm.cdf(t - mean))


def sample_training_logits(asym: ImbalanceAsymptotics, n: int, cls: int = 1, random_state=None):
    """Draw ``n`` logits ``Y f`` from the limiting training law of class ``cls`` (+1 or -1)."""
    if cls not in (1, -1):
        raise ValueError(f"cls must be +1 (minority) or -1 (majority), got {cls!r}")
    rng = np.random.default_rng(random_state)
    trunc, mean = asym.minority_logit_law() if cls == 1 else asym.majority_logit_law()
    return np.maximum(trunc, mean + rng.standard_normal(n))
