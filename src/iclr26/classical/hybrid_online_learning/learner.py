"""Oracle-efficient learner for hybrid online learning with a constrained adversary.

Paper: "Oracle-efficient Hybrid Learning with Constrained Adversaries", Princewill Okoroafor,
Robert Kleinberg, Michael P. Kim (ICLR 2026), arXiv:2603.04546. No official code.

Setting (paper Sec. 1-2): at round t the features ``x_t ~ D`` are i.i.d.; the adversary picks
``r_t`` from a fixed class ``R`` and the label is ``y_t = r_t(x_t)``; the learner plays a
randomised ``h_t ~ p_t`` over ``H`` and pays ``l(h_t(x_t), y_t)``. Regret is measured against
the best fixed ``h`` in hindsight. The learner may only touch ``H`` through an ERM oracle.

The algorithm implemented here follows the two tools the abstract names: follow-the-regularised-
leader over mixtures on ``H`` with a *truncated entropy* regulariser, solved by *Frank-Wolfe*
whose linear-minimisation step is one ERM-oracle call. With

    F_t(p) = eta * sum_h p(h) Lambda_t(h) + sum_h [phi_g(p(h)) - phi_g(0)],
    phi_g(u) = u log u  (u >= g),   phi_g(u) = g log g + (1 + log g)(u - g)  (u < g),

(``Lambda_t(h)`` the cumulative loss of ``h`` on the past rounds) the gradient at any hypothesis
outside the current support is ``eta Lambda_t(h) + 1 + log g`` -- a constant shift of its
cumulative loss -- so the best vertex outside the support is exactly ``ERM(past data)``. Inside
the (finite) support the gradient is explicit. Frank-Wolfe therefore needs one oracle call per
round. The truncation is what makes this work: the plain entropy has derivative ``-inf`` at 0.
The exact form of the paper's regulariser, its parameters and its FW schedule could not be
checked against the full text here; the README lists this reconstruction as a deviation.
"""
from __future__ import annotations

from numbers import Integral, Real
from typing import Callable

import numpy as np

__all__ = ["HybridOnlineLearner", "FollowTheLeader", "threshold_erm", "Threshold"]


class Threshold:
    """1-D threshold classifier ``h(x) = 1[sign * (x - theta) >= 0]`` (``sign = +1`` by default)."""

    __slots__ = ("theta", "sign")

    def __init__(self, theta: float, sign: int = 1):
        self.theta = float(theta)
        self.sign = int(sign)

    def predict(self, X) -> np.ndarray:
        X = np.asarray(X, dtype=float).reshape(-1)
        return (self.sign * (X - self.theta) >= 0).astype(int)

    def key(self):
        return (self.theta, self.sign)

    def __repr__(self):
        return f"Threshold(theta={self.theta:.4g}, sign={self.sign})"


def threshold_erm(X, y, sample_weight=None, signs=(1,)) -> Threshold:
    """Exact ERM over thresholds on the line (sorting, O(n log n)); ties go to the smallest theta.

    Minimises ``sum_i w_i 1[h(x_i) != y_i]``; the returned theta is the midpoint between the
    two data points it separates (or just outside the data range).
    """
    X = np.asarray(X, dtype=float).reshape(-1)
    y = np.asarray(y).reshape(-1)
    if X.shape != y.shape:
        raise ValueError(f"X and y must have the same length, got {X.shape[0]} and {y.shape[0]}")
    w = np.ones_like(X) if sample_weight is None else np.asarray(sample_weight, dtype=float).reshape(-1)
    if X.size == 0:
        return Threshold(0.0, signs[0])
    order = np.argsort(X, kind="stable")
    xs, ys, ws = X[order], y[order], w[order]
    best = None
    for sign in signs:
        pos = ws * (ys == 1)
        neg = ws * (ys == 0)
        # cut k: points 0..k-1 predicted as class (sign<0), points k.. predicted as (sign>0)
        if sign == 1:
            err = np.concatenate([[0.0], np.cumsum(pos)]) + (neg.sum() - np.concatenate([[0.0], np.cumsum(neg)]))
        else:
            err = np.concatenate([[0.0], np.cumsum(neg)]) + (pos.sum() - np.concatenate([[0.0], np.cumsum(pos)]))
        k = int(np.argmin(err))
        if best is None or err[k] < best[0]:
            best = (err[k], k, sign)
    _, k, sign = best
    if k == 0:
        theta = xs[0] - 1e-9 if sign == 1 else xs[0] - 1e-9
    elif k == xs.size:
        theta = xs[-1] + 1e-9
    else:
        theta = 0.5 * (xs[k - 1] + xs[k])
    if sign == -1:
        # h(x) = 1[x <= theta'] must hold for the first k points: use the cut itself
        return Threshold(theta, -1)
    return Threshold(theta, 1)


def _check_oracle(erm_oracle):
    if not callable(erm_oracle):
        raise TypeError(f"erm_oracle must be callable (X, y, sample_weight) -> hypothesis, got {erm_oracle!r}")


class HybridOnlineLearner:
    """FTRL with a truncated-entropy regulariser over mixtures on H, solved by Frank-Wolfe + ERM.

    Parameters
    ----------
    erm_oracle : callable ``(X, y, sample_weight) -> h`` with ``h.predict(X)``; hypotheses are
        identified by ``h.key()`` if present, else by ``id``.
    horizon : int, the number of rounds T (sets the defaults below).
    eta : float or None. Learning rate; default ``sqrt(log(1/gamma) / T)`` (ours).
    gamma : float or None. Truncation level of the entropy; default ``1/T`` (ours).
    fw_steps : int, default 5. Frank-Wolfe steps per round (warm-started from the last mixture).
    random_state : seed for sampling ``h_t ~ p_t`` in :meth:`sample`.

    Use: ``p = learner.mixture()`` (list of (weight, h)), ``learner.predict_proba(x)``,
    ``learner.update(x, y)``. ``oracle_calls_`` counts ERM calls.
    """

    def __init__(self, erm_oracle: Callable, horizon: int, eta=None, gamma=None, fw_steps: int = 5,
                 random_state=None):
        _check_oracle(erm_oracle)
        if not (isinstance(horizon, Integral) and horizon >= 1):
            raise ValueError(f"horizon must be a positive integer, got {horizon!r}")
        if not (isinstance(fw_steps, Integral) and fw_steps >= 1):
            raise ValueError(f"fw_steps must be a positive integer, got {fw_steps!r}")
        self.gamma = 1.0 / horizon if gamma is None else gamma
        if not (isinstance(self.gamma, Real) and 0 < self.gamma < 1):
            raise ValueError(f"gamma (entropy truncation level) must lie in (0, 1), got {gamma!r}")
        self.eta = np.sqrt(np.log(1.0 / self.gamma) / horizon) if eta is None else eta
        if not (isinstance(self.eta, Real) and self.eta > 0):
            raise ValueError(f"eta must be a positive number, got {eta!r}")
        self.erm_oracle = erm_oracle
        self.horizon = int(horizon)
        self.fw_steps = int(fw_steps)
        self.rng = np.random.default_rng(random_state)
        self._X, self._y = [], []
        self._hyps: list = []          # support hypotheses
        self._keys: dict = {}
        self._w = np.zeros(0)          # mixture weights on the support
        self._cum = np.zeros(0)        # cumulative losses of the support hypotheses
        self._theta = self._sign = None  # vectorised thresholds when every support member is one
        self.oracle_calls_ = 0
        self._fw_round()

    # -------------------------------------------------------------- regulariser
    def _phi(self, u):
        g = self.gamma
        return np.where(u >= g, u * np.log(np.maximum(u, g)), g * np.log(g) + (1 + np.log(g)) * (u - g))

    def _dphi(self, u):
        g = self.gamma
        return 1.0 + np.log(np.maximum(u, g))

    def _objective(self, w, cum):
        return self.eta * float(w @ cum) + float(np.sum(self._phi(w) - self._phi(np.zeros_like(w))))

    def _predict_support(self, x) -> np.ndarray:
        """Predictions of every support hypothesis at the scalar ``x`` (vectorised for thresholds)."""
        if self._theta is not None:
            return (self._sign * (x - self._theta) >= 0).astype(int)
        return np.array([h.predict(np.asarray([x]))[0] for h in self._hyps])

    def _prune(self):
        """Drop support hypotheses whose weight fell below 1e-9 (keeps Frank-Wolfe iterates sparse)."""
        keep = self._w > 1e-9
        if keep.all():
            return
        self._hyps = [h for h, k in zip(self._hyps, keep) if k]
        self._w, self._cum = self._w[keep], self._cum[keep]
        self._w /= self._w.sum()
        if self._theta is not None:
            self._theta, self._sign = self._theta[keep], self._sign[keep]
        self._keys = {self._key(h): i for i, h in enumerate(self._hyps)}

    def _key(self, h):
        return h.key() if hasattr(h, "key") else id(h)

    def _add(self, h) -> int:
        k = self._key(h)
        if k in self._keys:
            return self._keys[k]
        idx = len(self._hyps)
        self._keys[k] = idx
        self._hyps.append(h)
        loss = float(np.sum(h.predict(np.asarray(self._X)) != np.asarray(self._y))) if self._X else 0.0
        self._w = np.append(self._w, 0.0)
        self._cum = np.append(self._cum, loss)
        if isinstance(h, Threshold) and (self._theta is not None or idx == 0):
            self._theta = np.append(self._theta if idx else np.zeros(0), h.theta)
            self._sign = np.append(self._sign if idx else np.zeros(0, dtype=int), h.sign)
        else:
            self._theta = self._sign = None
        return idx

    def _fw_round(self):
        """One ERM call, then ``fw_steps`` Frank-Wolfe steps on F_t (line search on a grid)."""
        X, y = np.asarray(self._X, dtype=float), np.asarray(self._y)
        h_erm = self.erm_oracle(X, y, None)
        self.oracle_calls_ += 1
        j_erm = self._add(h_erm)
        if self._w.sum() == 0:            # first round: start at the ERM vertex
            self._w[j_erm] = 1.0
        alphas = np.linspace(0.0, 1.0, 65)[1:]
        for _ in range(self.fw_steps):
            grad = self.eta * self._cum + self._dphi(self._w)
            # vertices: every support hypothesis (explicit gradient) -- the ERM hypothesis is in the
            # support, and it minimises eta*Lambda + (1 + log g) over all hypotheses outside it
            j = int(np.argmin(grad))
            d = -self._w.copy()
            d[j] += 1.0
            if float(grad @ d) >= -1e-12:
                break
            W = self._w[None, :] + alphas[:, None] * d[None, :]
            vals = self.eta * (W @ self._cum) + np.sum(self._phi(W) - self._phi(np.zeros_like(W)), axis=1)
            a = alphas[int(np.argmin(vals))]
            if self._objective(self._w + a * d, self._cum) < self._objective(self._w, self._cum):
                self._w = np.clip(self._w + a * d, 0.0, None)
                self._w /= self._w.sum()
        self._prune()

    # -------------------------------------------------------------- interface
    def mixture(self):
        """Current mixture ``p_t`` as a list of ``(weight, hypothesis)`` with positive weight."""
        return [(float(w), h) for w, h in zip(self._w, self._hyps) if w > 0]

    def predict_proba(self, X) -> np.ndarray:
        """``P_{h ~ p_t}(h(x) = 1)`` for each row of ``X``."""
        X = np.asarray(X, dtype=float)
        out = np.zeros(X.reshape(X.shape[0], -1).shape[0] if X.ndim > 1 else X.size)
        for w, h in self.mixture():
            out += w * h.predict(X)
        return out

    def sample(self):
        """Draw ``h_t ~ p_t``."""
        mix = self.mixture()
        i = self.rng.choice(len(mix), p=np.array([w for w, _ in mix]) / sum(w for w, _ in mix))
        return mix[i][1]

    def update(self, x, y):
        """Observe round t's ``(x_t, y_t)`` and compute ``p_{t+1}``."""
        if np.size(x) != 1:
            raise ValueError("this implementation takes scalar features x (1-D instance space)")
        self._X.append(float(np.asarray(x, dtype=float).reshape(-1)[0]))
        self._y.append(int(y))
        if self._hyps:
            self._cum = self._cum + (self._predict_support(self._X[-1]) != int(y))
        self._fw_round()
        return self


class FollowTheLeader:
    """Baseline: play ``ERM(past data)`` deterministically (one oracle call per round)."""

    def __init__(self, erm_oracle: Callable):
        _check_oracle(erm_oracle)
        self.erm_oracle = erm_oracle
        self._X, self._y = [], []
        self.oracle_calls_ = 0
        self._h = self._call()

    def _call(self):
        self.oracle_calls_ += 1
        return self.erm_oracle(np.asarray(self._X, dtype=float), np.asarray(self._y), None)

    def mixture(self):
        return [(1.0, self._h)]

    def predict_proba(self, X):
        return self._h.predict(X).astype(float)

    def update(self, x, y):
        self._X.append(float(np.asarray(x).reshape(-1)[0]))
        self._y.append(int(y))
        self._h = self._call()
        return self
