"""Reference learners for 1-D upward thresholds (not oracle-efficient: they enumerate the class).

Paper: "Oracle-efficient Hybrid Learning with Constrained Adversaries" (arXiv:2603.04546). Both
learners see what :class:`.HybridOnlineLearner` sees (feature samples labelled by the observed
label functions, :class:`.SampleLedger`) and use the class of upward thresholds explicitly:

* :class:`CoverExponentialWeights`: exponential weights over the sample cover ``H|_Z`` (one
  threshold per cut between sorted samples), the statistically optimal but computationally
  inefficient route the abstract contrasts with (Wu et al., 2023). ``eta = sqrt(8 log N / T)``
  with ``N`` the cover size at the horizon (Hedge's tuning; Cesa-Bianchi and Lugosi 2006, Thm 2.2).
* :class:`ExactThresholdFTRL`: the *exact* minimiser of the learner's objective ``F_t`` over the
  marginal polytope of thresholds, which is the set of vectors non-decreasing along the sorted
  samples. For a separable objective ``sum_j w_j [phi(mu_j) - v_j mu_j]`` under an order
  constraint the minimiser is ``(phi')^{-1}`` of the weighted least-squares isotonic regression of
  ``v`` (Robertson, Wright and Dykstra 1988, Thm 1.5.1; it pools the same blocks for every convex
  ``phi``), so ``mu = truncated_entropy_argmin(iso(-eta a / c), gamma)`` with ``c`` the multiplicity
  of each distinct sample.
"""
from __future__ import annotations

from numbers import Integral, Real

import numpy as np
from sklearn.isotonic import isotonic_regression

from .learner import SampleLedger
from .oracles import Threshold, as_features
from .regularizer import truncated_entropy_argmin

__all__ = ["CoverExponentialWeights", "ExactThresholdFTRL", "cut_thresholds"]


def cut_thresholds(ux: np.ndarray) -> np.ndarray:
    """One upward threshold per cut of the sorted distinct samples ``ux``: cut ``k`` predicts 1
    from ``ux[k]`` on (``k = 0``: at ``ux[0]``; ``k = len(ux)``: just above ``ux[-1]``; else the
    midpoint). With no samples: the single threshold 0."""
    if ux.size == 0:
        return np.zeros(1)
    return np.r_[ux[0], 0.5 * (ux[:-1] + ux[1:]), np.nextafter(ux[-1], np.inf)]


def _groups(ledger: SampleLedger):
    """Sorted distinct samples, their multiplicities and their summed ``n1``."""
    if ledger.Z.shape[1] != 1:
        raise ValueError(f"threshold learners take one feature, got {ledger.Z.shape[1]}")
    ux, inv, cnt = np.unique(ledger.Z[:, 0], return_inverse=True, return_counts=True)
    return ux, cnt, np.bincount(inv, weights=ledger.n1)


def _check_horizon(horizon):
    if not (isinstance(horizon, Integral) and horizon >= 1):
        raise ValueError(f"horizon must be a positive integer, got {horizon!r}")


class _ThresholdMixture:
    """Shared interface: a mixture over the cut thresholds, recomputed after each round."""

    def threshold_mixture(self):
        """``(thetas, weights)`` of the current mixture over upward thresholds."""
        return self.thetas_, self.weights_

    def mixture(self):
        return [(float(w), Threshold(t)) for t, w in zip(self.thetas_, self.weights_) if w > 0]

    def predict_proba(self, X) -> np.ndarray:
        x = as_features(X)[:, 0]
        return (x[:, None] >= self.thetas_[None, :]) @ self.weights_

    def update(self, x, r):
        self.ledger.observe(x, r)
        self._fit()
        return self


class CoverExponentialWeights(_ThresholdMixture):
    """Exponential weights over the sample cover of upward thresholds (module docstring)."""

    def __init__(self, horizon: int, eta=None, feature_samples=None):
        _check_horizon(horizon)
        self.ledger = SampleLedger(feature_samples)
        n_cover = (self.ledger.m + 1) if self.ledger.fixed else (horizon + 1)
        self.eta = float(np.sqrt(8.0 * np.log(n_cover) / horizon)) if eta is None else eta
        if not (isinstance(self.eta, Real) and np.isfinite(self.eta) and self.eta > 0):
            raise ValueError(f"eta must be a positive finite number, got {eta!r}")
        self._fit()

    def cover_losses(self) -> np.ndarray:
        """``Lambda_t`` of every cut threshold (cut ``k`` predicts 0 below ``ux[k]``, 1 from it)."""
        ux, cnt, n1 = _groups(self.ledger)
        if ux.size == 0:
            return np.zeros(1)
        n0 = self.ledger.rounds * cnt - n1
        below = np.r_[0.0, np.cumsum(n1)]                 # mistakes on samples predicted 0
        above = n0.sum() - np.r_[0.0, np.cumsum(n0)]      # mistakes on samples predicted 1
        return (below + above) / self.ledger.m

    def _fit(self):
        ux, _, _ = _groups(self.ledger)
        z = -self.eta * self.cover_losses()
        w = np.exp(z - z.max())
        self.thetas_, self.weights_ = cut_thresholds(ux), w / w.sum()


class ExactThresholdFTRL(_ThresholdMixture):
    """The exact FTRL solution of :class:`.HybridOnlineLearner`'s objective for upward thresholds."""

    def __init__(self, horizon: int, eta=None, gamma=None, feature_samples=None):
        _check_horizon(horizon)
        self.eta = float(np.sqrt(8.0 * np.log(2.0) / horizon)) if eta is None else eta
        if not (isinstance(self.eta, Real) and np.isfinite(self.eta) and self.eta > 0):
            raise ValueError(f"eta must be a positive finite number, got {eta!r}")
        self.gamma = min(1.0 / horizon, 0.25) if gamma is None else gamma
        if not (isinstance(self.gamma, Real) and 0 < self.gamma < 0.5):
            raise ValueError(f"gamma (the entropy's truncation level) must lie in (0, 0.5), got {gamma!r}")
        self.ledger = SampleLedger(feature_samples)
        self._fit()

    def group_marginals(self) -> np.ndarray:
        """The minimiser ``mu`` at each distinct sample, sorted (non-decreasing)."""
        ux, cnt, n1 = _groups(self.ledger)
        if ux.size == 0:
            return np.zeros(0)
        a = self.ledger.rounds * cnt - 2.0 * n1           # summed advantage of each distinct value
        iso = isotonic_regression(-self.eta * a / cnt, sample_weight=cnt, increasing=True)
        return truncated_entropy_argmin(iso, self.gamma)

    def _fit(self):
        ux, _, _ = _groups(self.ledger)
        mu = self.group_marginals()
        # weight of cut k = mu_k - mu_{k-1} (mu is non-decreasing, so these are >= 0 and sum to 1)
        self.thetas_, self.weights_ = cut_thresholds(ux), np.diff(np.r_[0.0, mu, 1.0])
