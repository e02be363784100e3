"""Oracle-efficient learner for hybrid online learning with a constrained adversary.

Paper: "Oracle-efficient Hybrid Learning with Constrained Adversaries", Princewill Okoroafor,
Robert Kleinberg, Michael P. Kim (ICLR 2026), arXiv:2603.04546. No official code.

Protocol (abstract): at round ``t`` the features ``x_t ~ D`` are i.i.d. from an unknown ``D``; the
adversary picks a label function ``r_t`` from a fixed class ``R`` and the label is
``y_t = r_t(x_t)``; the learner plays a random ``h_t ~ p_t`` over ``H`` and pays
``1[h_t(x_t) != y_t]``. Regret is measured against the best fixed ``h`` in hindsight. The learner
reaches ``H`` only through an ERM oracle. Here the learner observes ``r_t`` after the round (our
reading of the constrained-adversary protocol, listed in the README).

Algorithm (our construction from the abstract's description; the README lists what is ours):

1. *Feature samples.* Keep samples ``z_1..z_m`` of ``D``: the features observed so far (``D`` is
   unknown), or a given i.i.d. sample. Label every sample with every observed ``r_s``: with
   ``n1_j = #{s < t : r_s(z_j) = 1}`` the estimated cumulative loss of a mixture whose prediction
   vector on the samples is ``mu`` (``mu_j = P_{h ~ p}(h(z_j) = 1)``) is
   ``Lambda_t(mu) = (1/m) sum_j [mu_j a_j + n1_j]`` with ``a_j = (t - 1) - 2 n1_j``, the empirical
   counterpart of ``sum_s E_{x ~ D} 1[h(x) != r_s(x)]``. Its uniform error over ``H x R`` is the
   Rademacher complexity of ``l o (H x R)`` that the paper's bound scales with.
2. *FTRL with a truncated entropy.* ``p_t`` minimises
   ``F_t(mu) = eta Lambda_t(mu) + (1/m) sum_j phi_g(mu_j)`` over the marginal polytope
   ``conv{h(z_1..z_m) : h in H}``, with ``phi_g`` the truncated negative binary entropy
   (:mod:`.regularizer`).
3. *Frank-Wolfe reduction.* ``F_t`` is minimised by Frank-Wolfe, warm-started from ``p_{t-1}``. The
   linear step ``min_h <grad F_t(mu), h(z)>`` is one ERM call on the samples with labels
   ``1[grad_j < 0]`` and weights ``|grad_j|``; the truncation keeps ``grad`` finite at the
   polytope's vertices. The step size is an exact line search; Frank-Wolfe stops when its duality
   gap (an upper bound on ``F_t(mu) - min F_t``) falls below ``fw_tol`` or after ``max_fw_steps``.

Defaults (ours, from the standard FTRL bound; the paper's constants could not be read here):
``eta = sqrt(8 log 2 / T)`` (range of ``(1/m) sum phi`` is ``log 2``; it is ``4/m``-strongly convex
in l2 while one round's loss vector has squared l2 norm ``<= 1/m``: Orabona, "A Modern Introduction
to Online Learning", Cor. 7.9), ``gamma = min(1/T, 1/4)``, ``fw_tol = 1/T`` (an ``eps``-accurate
``F_t`` moves the per-round loss by at most ``sqrt(eps/2)``, so ``1/T`` keeps the total below
``sqrt(T/2)``), ``max_fw_steps = 25`` oracle calls per round and at most 50 pairwise steps inside the
active set after each call.
"""
from __future__ import annotations

from numbers import Integral, Real
from typing import Callable

import numpy as np
from scipy.optimize import brentq

from .oracles import as_features, predict_labels, predict_many
from .regularizer import truncated_entropy, truncated_entropy_grad

__all__ = ["SampleLedger", "HybridOnlineLearner", "FollowTheLeader"]


def _check_oracle(erm_oracle):
    if not callable(erm_oracle):
        raise TypeError(f"erm_oracle must be callable (X, y, sample_weight) -> hypothesis, got {erm_oracle!r}")


def _check_label_function(r):
    if not (hasattr(r, "predict") or callable(r)):
        raise TypeError(f"the label function r must have predict(X) or be callable, got {r!r}")


class SampleLedger:
    """Feature samples labelled by every label function observed so far.

    ``feature_samples=None`` grows the sample with each observed feature ``x_t`` (``D`` unknown);
    otherwise the given ``(m, d)`` sample is fixed. After ``t`` observed rounds ``n1[j]`` counts the
    label functions with ``r_s(z_j) = 1`` and ``advantage[j] = t - 2 n1[j]`` is the cumulative loss
    of predicting 1 minus that of predicting 0 at ``z_j``.
    """

    def __init__(self, feature_samples=None, n_features: int = 1):
        if not (isinstance(n_features, Integral) and n_features >= 1):
            raise ValueError(f"n_features must be a positive integer, got {n_features!r}")
        self.fixed = feature_samples is not None
        if self.fixed:
            self.Z = as_features(feature_samples, "feature_samples")
            if self.Z.shape[0] == 0:
                raise ValueError("feature_samples must hold at least one sample")
        else:
            self.Z = np.zeros((0, int(n_features)))
        self.n1 = np.zeros(self.Z.shape[0])
        self.rounds = 0
        self._labelers: dict = {}

    @property
    def m(self) -> int:
        return int(self.Z.shape[0])

    @property
    def advantage(self) -> np.ndarray:
        return self.rounds - 2.0 * self.n1

    def observe(self, x, r) -> int:
        """Add round ``(x_t, r_t)``; return the label ``y_t = r_t(x_t)``."""
        _check_label_function(r)
        x = np.asarray(x, dtype=float)
        x = as_features(x.reshape(1, -1) if x.ndim <= 1 else x, "x")
        if x.shape != (1, self.Z.shape[1]):
            raise ValueError(f"x must be one point with {self.Z.shape[1]} feature(s), got shape {x.shape}")
        y = int(predict_labels(r, x, "the label function r")[0])
        if not self.fixed:
            n1_new = sum(c * predict_labels(f, x, "the label function r")[0] for f, c in self._labelers.values())
            self.Z = np.vstack([self.Z, x])
            self.n1 = np.append(self.n1, float(n1_new))
        self.n1 += predict_labels(r, self.Z, "the label function r")
        key = r.key() if hasattr(r, "key") else id(r)
        entry = self._labelers.setdefault(key, [r, 0])
        entry[1] += 1
        self.rounds += 1
        return y

    def estimated_loss(self, V) -> np.ndarray:
        """``Lambda_t`` of prediction vectors ``V`` (rows, 0/1 or marginals) on the samples."""
        if self.m == 0:
            return np.zeros(np.shape(V)[0]) if np.ndim(V) == 2 else np.float64(0.0)
        return (np.asarray(V, dtype=float) @ self.advantage + self.n1.sum()) / self.m


class HybridOnlineLearner:
    """FTRL with a truncated entropy on the feature samples, solved by Frank-Wolfe with an ERM oracle.

    Parameters
    ----------
    erm_oracle : callable ``(X, y, sample_weight) -> h`` returning a weighted-ERM hypothesis of
        ``H`` with ``h.predict(X)`` in {0, 1} (e.g. :func:`.threshold_erm`).
    horizon : int, the number of rounds ``T`` (sets the defaults).
    eta : learning rate; default ``sqrt(8 log 2 / T)`` (ours, module docstring).
    gamma : truncation level of the entropy, in (0, 1/2); default ``min(1/T, 1/4)`` (ours).
    max_fw_steps : Frank-Wolfe steps (= ERM calls) per round at most; default 25 (ours).
    fw_tol : stop Frank-Wolfe once its duality gap is at most this; default ``1/T`` (ours).
    feature_samples : ``(m, d)`` i.i.d. draws from ``D``; default None, the observed features.
    n_features : feature dimension before any feature is observed (growing samples only).
    random_state : seed for :meth:`sample`.

    Use: ``learner.mixture()`` (list of ``(weight, h)``), ``learner.predict_proba(X)``,
    ``learner.sample()``, then ``learner.update(x_t, r_t)`` with the round's label function.
    ``oracle_calls_`` counts ERM calls, ``fw_gap_`` is the last duality gap.
    """

    def __init__(self, erm_oracle: Callable, horizon: int, eta=None, gamma=None, max_fw_steps: int = 25,
                 fw_tol=None, feature_samples=None, n_features: int = 1, random_state=None):
        _check_oracle(erm_oracle)
        if not (isinstance(horizon, Integral) and horizon >= 1):
            raise ValueError(f"horizon must be a positive integer, got {horizon!r}")
        if not (isinstance(max_fw_steps, Integral) and max_fw_steps >= 1):
            raise ValueError(f"max_fw_steps must be a positive integer, got {max_fw_steps!r}")
        self.eta = float(np.sqrt(8.0 * np.log(2.0) / horizon)) if eta is None else eta
        if not (isinstance(self.eta, Real) and np.isfinite(self.eta) and self.eta > 0):
            raise ValueError(f"eta must be a positive finite number, got {eta!r}")
        self.gamma = min(1.0 / horizon, 0.25) if gamma is None else gamma
        if not (isinstance(self.gamma, Real) and 0 < self.gamma < 0.5):
            raise ValueError(f"gamma (the entropy's truncation level) must lie in (0, 0.5), got {gamma!r}")
        self.fw_tol = 1.0 / horizon if fw_tol is None else fw_tol
        if not (isinstance(self.fw_tol, Real) and self.fw_tol >= 0):
            raise ValueError(f"fw_tol must be a non-negative number, got {fw_tol!r}")
        self.erm_oracle = erm_oracle
        self.horizon = int(horizon)
        self.max_fw_steps = int(max_fw_steps)
        self.rng = np.random.default_rng(random_state)
        self.ledger = SampleLedger(feature_samples, n_features)
        self.oracle_calls_ = 0
        self.fw_steps_ = 0
        self.fw_gap_ = np.nan
        Z = self.ledger.Z
        h0 = self._oracle(Z[:0], np.zeros(0, dtype=int), np.zeros(0))
        self.atoms = [h0]
        self.weights = np.ones(1)
        self.V = predict_labels(h0, Z, "the ERM oracle's hypothesis")[None, :]
        self._solve()

    # ---------------------------------------------------------------- objective
    @property
    def marginals_(self) -> np.ndarray:
        """``mu``: the mixture's probability of predicting 1 at each feature sample."""
        return self.weights @ self.V

    def objective(self, mu=None) -> float:
        """``F_t(mu) = eta Lambda_t(mu) + (1/m) sum_j phi_g(mu_j)`` (default: at the current mixture)."""
        mu = self.marginals_ if mu is None else np.asarray(mu)
        if self.ledger.m == 0:
            return 0.0
        reg = float(np.sum(truncated_entropy(mu, self.gamma))) / self.ledger.m
        return self.eta * float(self.ledger.estimated_loss(mu[None, :])[0]) + reg

    def _gradient(self, mu) -> np.ndarray:
        return (self.eta * self.ledger.advantage + truncated_entropy_grad(mu, self.gamma)) / self.ledger.m

    def _oracle(self, X, y, w):
        h = self.erm_oracle(X, y, w)
        self.oracle_calls_ += 1
        return h

    def _line_search(self, mu, d) -> float:
        """Exact ``argmin_{alpha in [0, 1]} F_t(mu + alpha d)``: the root of the (non-decreasing)
        derivative, found by Brent's method, or 1 where ``F_t`` still decreases at ``alpha = 1``."""
        lin = self.eta * self.ledger.advantage

        def deriv(alpha):
            return float(d @ (lin + truncated_entropy_grad(mu + alpha * d, self.gamma)))

        if deriv(1.0) <= 0:
            return 1.0
        return brentq(deriv, 0.0, 1.0, xtol=1e-14)

    def _solve(self):
        """Frank-Wolfe on ``F_t``, warm-started at the current mixture; one ERM call per outer step.

        Each outer step asks the oracle for the vertex minimising the linearised objective, stops if
        the duality gap is at most ``fw_tol``, and otherwise adds that vertex to the active set and
        runs pairwise steps inside the active set (mass moves from the active hypothesis with the
        largest linearised loss to the one with the smallest; exact line search), which need no
        oracle call (blended pairwise conditional gradients, Tsuji, Tanaka and Pokutta 2022).
        """
        Z = self.ledger.Z
        if Z.shape[0] == 0:
            return
        for _ in range(self.max_fw_steps):
            mu = self.marginals_
            g = self._gradient(mu)
            h = self._oracle(Z, g < 0, np.abs(g))
            v = predict_labels(h, Z, "the ERM oracle's hypothesis")
            self.fw_gap_ = float(g @ (mu - v))
            if self.fw_gap_ <= self.fw_tol:
                break
            self._add(h, v)
            self._pairwise_steps()
            self.fw_steps_ += 1

    def _add(self, h, v) -> int:
        """Index of the active hypothesis labelling the samples as ``v`` (added with weight 0 if new)."""
        same = np.flatnonzero(np.all(self.V == v[None, :], axis=1))
        if same.size:
            return int(same[0])
        self.atoms.append(h)
        self.weights = np.append(self.weights, 0.0)
        self.V = np.vstack([self.V, v[None, :]])
        return len(self.atoms) - 1

    def _pairwise_steps(self, max_steps: int = 50):
        """Pairwise Frank-Wolfe steps over the active set until its local gap is at most ``fw_tol``."""
        for _ in range(max_steps):
            mu = self.marginals_
            score = self.V @ self._gradient(mu)
            best = int(np.argmin(score))
            live = np.flatnonzero(self.weights > 0)
            worst = int(live[np.argmax(score[live])])
            if score[worst] - score[best] <= self.fw_tol:
                break
            d = self.weights[worst] * (self.V[best] - self.V[worst])
            alpha = self._line_search(mu, d) * self.weights[worst]
            self.weights[best] += alpha
            self.weights[worst] -= alpha
        keep = self.weights > 1e-12
        if not keep.all():
            self.atoms = [a for a, k in zip(self.atoms, keep) if k]
            self.weights, self.V = self.weights[keep], self.V[keep]
        self.weights = self.weights / self.weights.sum()

    # ---------------------------------------------------------------- interface
    def mixture(self):
        """Current mixture ``p_t`` as a list of ``(weight, hypothesis)``."""
        return [(float(w), h) for w, h in zip(self.weights, self.atoms)]

    def predict_proba(self, X) -> np.ndarray:
        """``P_{h ~ p_t}(h(x) = 1)`` for each row of ``X``."""
        return self.weights @ predict_many(self.atoms, as_features(X))

    def sample(self):
        """Draw ``h_t ~ p_t``."""
        return self.atoms[int(self.rng.choice(len(self.atoms), p=self.weights))]

    def update(self, x, r):
        """Observe round ``t``'s feature ``x_t`` and label function ``r_t``; compute ``p_{t+1}``."""
        self.ledger.observe(x, r)
        if not self.ledger.fixed:
            self.V = np.hstack([self.V, predict_many(self.atoms, self.ledger.Z[-1:], "the ERM oracle's hypothesis")])
        self._solve()
        return self


class FollowTheLeader:
    """Baseline: play ``argmin_h Lambda_t(h)`` (one ERM call per round, no regulariser).

    It sees exactly what :class:`HybridOnlineLearner` sees (the same feature samples labelled by the
    same label functions); it is that learner's ``eta -> infinity`` limit.
    """

    def __init__(self, erm_oracle: Callable, feature_samples=None, n_features: int = 1):
        _check_oracle(erm_oracle)
        self.erm_oracle = erm_oracle
        self.ledger = SampleLedger(feature_samples, n_features)
        self.oracle_calls_ = 0
        self._leader()

    def _leader(self):
        a = self.ledger.advantage
        self.h_ = self.erm_oracle(self.ledger.Z, a < 0, np.abs(a))
        self.oracle_calls_ += 1

    def mixture(self):
        return [(1.0, self.h_)]

    def predict_proba(self, X) -> np.ndarray:
        return predict_labels(self.h_, as_features(X), "the leader").astype(float)

    def update(self, x, r):
        self.ledger.observe(x, r)
        self._leader()
        return self
