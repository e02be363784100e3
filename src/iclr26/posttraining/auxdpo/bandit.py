"""Linear-softmax contextual bandits and exact (small-model) DPO / IPO / AuxDPO / RLHF solutions
(arXiv:2510.20413, Sections 3-5 and the didactic bandit examples).

A policy class ``pi_theta(a|s) ∝ exp(theta . phi(s, a))`` over ``S`` states and ``K`` actions with
``d``-dimensional features; ``rho`` is the state distribution; ``theta0`` the base policy.

* implicit reward (Section 3): ``r_theta^beta(s, a) = beta log(pi_theta(a|s) / pi_theta0(a|s))``;
* ``A_{rho, theta0}`` (Section 4): the ``d x m`` matrix (``m = S K``) whose ``(s, a)`` column is
  ``rho(s) pi0(a|s) grad log pi0(a|s)``, and the Fisher matrix ``F = sum rho pi0 g g^T``;
* the RLHF local solution (Section 4): ``theta* = theta0 + (1/beta) F^+ A r*``;
* the exact AuxDPO form for small models (Section 5): ``delta = Gamma c`` with ``Gamma`` an
  orthonormal basis of the null space of ``A``, so ``A delta = 0`` holds exactly.

All fits minimise the empirical loss on preference counts with L-BFGS in float64.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from scipy.linalg import null_space

from .loss import auxdpo_loss, dpo_loss, ipo_loss

__all__ = ["LinearSoftmaxBandit", "PreferenceCounts", "null_space_basis", "fit_dpo", "fit_ipo", "fit_auxdpo",
           "fit_ipo_matched_kl", "fit_bt_reward", "rlhf_solution", "rlhf_local_solution", "three_arm_example", "sample_preferences",
           "random_bandit"]

_T = torch.float64


def _lbfgs(params, closure_fn, max_iter=500):
    """Minimise ``closure_fn()`` over ``params`` with L-BFGS; raises ``FloatingPointError`` on a
    non-finite loss or gradient (at any evaluation) or non-finite parameters at the end."""
    opt = torch.optim.LBFGS(params, lr=1.0, max_iter=max_iter, tolerance_grad=1e-10, tolerance_change=1e-13,
                            history_size=50, line_search_fn="strong_wolfe")

    def closure():
        opt.zero_grad()
        loss = closure_fn()
        if not torch.isfinite(loss):
            raise FloatingPointError(f"non-finite loss {loss.item()} in an L-BFGS fit")
        loss.backward()
        if any(p.grad is not None and not torch.isfinite(p.grad).all() for p in params):
            raise FloatingPointError("non-finite gradient in an L-BFGS fit")
        return loss

    opt.step(closure)
    if not all(torch.isfinite(p).all() for p in params):
        raise FloatingPointError("an L-BFGS fit ended at non-finite parameters")
    return params


@dataclass
class PreferenceCounts:
    """Comparison data as counts: ``(s, a, b, n_ab, n_ba)`` = state, pair, times ``a`` won, times ``b`` won."""

    s: np.ndarray
    a: np.ndarray
    b: np.ndarray
    wins_a: np.ndarray
    wins_b: np.ndarray

    def __post_init__(self):
        arrs = [np.asarray(x) for x in (self.s, self.a, self.b, self.wins_a, self.wins_b)]
        if len({x.shape for x in arrs}) != 1 or arrs[0].ndim != 1:
            raise ValueError("s, a, b, wins_a, wins_b must be 1-D arrays of one length")
        for name, x in (("wins_a", arrs[3]), ("wins_b", arrs[4])):
            if not np.all(np.isfinite(x.astype(float))):
                raise ValueError(f"{name} holds NaN or inf counts")
        if np.any(arrs[3] < 0) or np.any(arrs[4] < 0):
            raise ValueError("win counts must be non-negative")
        for name, x in (("s", arrs[0]), ("a", arrs[1]), ("b", arrs[2])):
            if x.size and not (np.issubdtype(x.dtype, np.integer) or np.all(np.asarray(x, float) == np.round(x))):
                raise ValueError(f"{name} must hold integer indices")
        if np.any(arrs[1] == arrs[2]):
            raise ValueError("a pair must compare two different actions (a == b found)")
        self.s, self.a, self.b = (x.astype(int) for x in arrs[:3])
        self.wins_a, self.wins_b = (x.astype(float) for x in arrs[3:])

    def as_pairs(self):
        """Winner-loser arrays with weights: ``(s, w, l, weight)`` for both orientations."""
        s = np.concatenate([self.s, self.s])
        w = np.concatenate([self.a, self.b])
        l_ = np.concatenate([self.b, self.a])
        n = np.concatenate([self.wins_a, self.wins_b])
        keep = n > 0
        return s[keep], w[keep], l_[keep], n[keep]


class LinearSoftmaxBandit:
    """``pi_theta(a|s) ∝ exp(theta . phi[s, a])``; ``phi`` (S, K, d), ``theta0`` (d,), ``rho`` (S,)."""

    def __init__(self, phi, theta0, rho=None):
        phi = np.asarray(phi, float)
        if phi.ndim != 3:
            raise ValueError(f"phi must have shape (S, K, d), got {phi.shape}")
        self.S, self.K, self.d = phi.shape
        if self.K < 2:
            raise ValueError(f"need at least 2 actions, got K={self.K}")
        theta0 = np.asarray(theta0, float)
        if theta0.shape != (self.d,):
            raise ValueError(f"theta0 must have shape ({self.d},), got {theta0.shape}")
        if not (np.all(np.isfinite(phi)) and np.all(np.isfinite(theta0))):
            raise ValueError("phi and theta0 must be finite (NaN or inf found)")
        rho = np.full(self.S, 1.0 / self.S) if rho is None else np.asarray(rho, float)
        if rho.shape != (self.S,) or np.any(rho < 0) or not np.isclose(rho.sum(), 1.0):
            raise ValueError(f"rho must be a probability vector of length S={self.S}")
        self.phi, self.theta0, self.rho = phi, theta0, rho
        self._phi_t = torch.tensor(phi, dtype=_T)

    # ---------------------------------------------------------------- policy
    def logpi(self, theta):
        """``log pi_theta(a|s)``, shape (S, K); numpy in, numpy out; torch in, torch out."""
        if isinstance(theta, torch.Tensor):
            return torch.log_softmax(self._phi_t @ theta, dim=-1)
        z = self.phi @ np.asarray(theta, float)
        z = z - z.max(-1, keepdims=True)
        return z - np.log(np.exp(z).sum(-1, keepdims=True))

    def _lp0_t(self):
        if getattr(self, "_lp0_cache", None) is None:
            self._lp0_cache = torch.tensor(self.logpi(self.theta0), dtype=_T)
        return self._lp0_cache

    def policy(self, theta):
        return np.exp(self.logpi(theta))

    def expected_reward(self, theta, r):
        """``sum_s rho(s) sum_a pi_theta(a|s) r(s, a)``."""
        return float(self.rho @ (self.policy(theta) * np.asarray(r, float).reshape(self.S, self.K)).sum(-1))

    def kl(self, theta_p, theta_q):
        """``sum_s rho(s) KL(pi_p(.|s) || pi_q(.|s))``."""
        lp, lq = self.logpi(theta_p), self.logpi(theta_q)
        return float(self.rho @ (np.exp(lp) * (lp - lq)).sum(-1))

    def regularised_objective(self, theta, r, beta):
        """The KL-regularised RLHF objective (Section 4, the objective two-stage RLHF maximises):
        ``sum_s rho(s) [E_{pi_theta} r(s, .) - beta KL(pi_theta(.|s) || pi_theta0(.|s))]``."""
        if not (isinstance(beta, (int, float)) and beta >= 0):
            raise ValueError(f"beta must be a non-negative number, got {beta!r}")
        return self.expected_reward(theta, r) - beta * self.kl(theta, self.theta0)

    def implicit_reward(self, theta, beta):
        """``beta log(pi_theta / pi_theta0)``, shape (S, K) (Section 3)."""
        return beta * (self.logpi(theta) - self.logpi(self.theta0))

    # ---------------------------------------------------------------- geometry at theta0
    def score(self, theta=None):
        """``grad_theta log pi_theta(a|s) = phi(s, a) - E_pi phi(s, .)``, shape (S, K, d)."""
        p = self.policy(self.theta0 if theta is None else theta)
        return self.phi - np.einsum("sk,skd->sd", p, self.phi)[:, None, :]

    def A_matrix(self):
        """``A_{rho, theta0}``: (d, S*K), column (s, a) = ``rho(s) pi0(a|s) grad log pi0(a|s)`` (Section 4)."""
        w = self.rho[:, None] * self.policy(self.theta0)
        return (w[..., None] * self.score()).reshape(self.S * self.K, self.d).T

    def fisher(self):
        """``F = sum_{s,a} rho(s) pi0(a|s) g g^T`` with ``g = grad log pi0(a|s)``."""
        g = self.score().reshape(-1, self.d)
        w = (self.rho[:, None] * self.policy(self.theta0)).reshape(-1)
        return (g * w[:, None]).T @ g


def null_space_basis(A, rcond=None):
    """Orthonormal basis ``Gamma`` (m, m - rank A) of the null space of ``A`` (d, m): ``A Gamma = 0``."""
    A = np.asarray(A, float)
    if A.ndim != 2:
        raise ValueError(f"A must be a 2-D matrix, got shape {A.shape}")
    return null_space(A, rcond=rcond)


# -------------------------------------------------------------------- data
def sample_preferences(bandit, r, pair_probs, n, rng):
    """Draw ``n`` comparisons: state ~ rho, pair ~ ``pair_probs[s]`` (dict-free (S, P) over all a<b pairs),
    winner by the Bradley-Terry-Luce model on ``r``. Returns :class:`PreferenceCounts`."""
    S, K = bandit.S, bandit.K
    ia, ib = np.triu_indices(K, 1)
    pair_probs = np.asarray(pair_probs, float)
    if pair_probs.shape != (S, ia.size):
        raise ValueError(f"pair_probs must have shape (S, K(K-1)/2) = ({S}, {ia.size}), got {pair_probs.shape}")
    r = np.asarray(r, float).reshape(S, K)
    joint = (bandit.rho[:, None] * pair_probs).reshape(-1)
    cnt = rng.multinomial(n, joint / joint.sum()).reshape(S, ia.size)
    s_idx, p_idx = np.nonzero(cnt)
    a, b = ia[p_idx], ib[p_idx]
    pa = 1.0 / (1.0 + np.exp(-(r[s_idx, a] - r[s_idx, b])))
    wa = rng.binomial(cnt[s_idx, p_idx], pa)
    return PreferenceCounts(s_idx, a, b, wa, cnt[s_idx, p_idx] - wa)


def _check_data(bandit, data):
    if not isinstance(bandit, LinearSoftmaxBandit):
        raise TypeError(f"bandit must be a LinearSoftmaxBandit, got {type(bandit).__name__}")
    if not isinstance(data, PreferenceCounts):
        raise TypeError(f"data must be PreferenceCounts, got {type(data).__name__}")
    if data.s.size == 0 or (data.wins_a.sum() + data.wins_b.sum()) <= 0:
        raise ValueError("data holds no comparisons")
    if np.any((data.s < 0) | (data.s >= bandit.S)):
        raise ValueError(f"data.s must index states 0..{bandit.S - 1}")
    for name, x in (("data.a", data.a), ("data.b", data.b)):
        if np.any((x < 0) | (x >= bandit.K)):
            raise ValueError(f"{name} must index actions 0..{bandit.K - 1}")


def _check_positive(x, name):
    if isinstance(x, bool) or not (isinstance(x, (int, float)) and 0 < x < float("inf")):
        raise ValueError(f"{name} must be a positive finite number, got {x!r}")


def _check_reward(bandit, r):
    r = np.asarray(r, float)
    if r.size != bandit.S * bandit.K or not np.all(np.isfinite(r)):
        raise ValueError(f"r must hold S*K = {bandit.S * bandit.K} finite rewards, got shape {r.shape}")


def _pairs_t(data):
    s, w, l_, n = data.as_pairs()
    return s, w, l_, torch.tensor(n / n.sum(), dtype=_T)


def _logps(bandit, theta, s, w, l_):
    lp = bandit.logpi(theta)
    lp0 = bandit._lp0_t()
    return lp[s, w], lp[s, l_], lp0[s, w], lp0[s, l_]


def fit_dpo(bandit, data, beta):
    """``argmin_theta`` of the weighted empirical DPO loss (Section 3; Proposition 1's estimator)."""
    _check_data(bandit, data)
    s, w, l_, wt = _pairs_t(data)
    theta = torch.tensor(bandit.theta0, dtype=_T, requires_grad=True)
    _lbfgs([theta], lambda: (wt * dpo_loss(*_logps(bandit, theta, s, w, l_), beta=beta)).sum())
    return theta.detach().numpy()


def fit_ipo(bandit, data, tau):
    """``argmin_theta`` of the weighted empirical IPO loss (Azar et al. 2024)."""
    _check_data(bandit, data)
    s, w, l_, wt = _pairs_t(data)
    theta = torch.tensor(bandit.theta0, dtype=_T, requires_grad=True)
    _lbfgs([theta], lambda: (wt * ipo_loss(*_logps(bandit, theta, s, w, l_), tau=tau)).sum())
    return theta.detach().numpy()


def fit_ipo_matched_kl(bandit, data, target_kl, *, tau_range=(1e-3, 1e3), iters=20):
    """IPO at a prescribed regularisation strength: the ``tau`` (bisection on ``log tau`` within
    ``tau_range``) whose fitted policy has ``KL(pi_ipo || pi_theta0) = target_kl``. Uses the data and
    the policy class only (no reward), so it may be applied to evaluation data. Returns
    ``(theta, tau)``; at a ``tau_range`` end when the target is out of reach there.

    Not from the paper: a comparison protocol at matched regularisation (equal KL to the base
    policy) for methods whose regularisation constants are on different scales (IPO's ``tau`` and
    DPO's ``beta``)."""
    if not (isinstance(target_kl, (int, float, np.floating)) and np.isfinite(target_kl) and target_kl >= 0):
        raise ValueError(f"target_kl must be a finite non-negative number, got {target_kl!r}")
    lo, hi = (float(t) for t in tau_range)
    if not (0 < lo < hi and np.isfinite(hi)):
        raise ValueError(f"tau_range must be (low, high) with 0 < low < high, got {tau_range!r}")
    if not (isinstance(iters, int) and iters >= 1):
        raise ValueError(f"iters must be a positive integer, got {iters!r}")
    kl = lambda th: bandit.kl(th, bandit.theta0)  # noqa: E731
    # KL to the base falls as tau grows (IPO's target log-ratio gap is 1/(2 tau))
    th_lo, th_hi = fit_ipo(bandit, data, lo), fit_ipo(bandit, data, hi)
    if kl(th_lo) <= target_kl:
        return th_lo, lo
    if kl(th_hi) >= target_kl:
        return th_hi, hi
    a, b = np.log(lo), np.log(hi)
    best = (abs(kl(th_lo) - target_kl), th_lo, lo)
    for _ in range(iters):
        m = 0.5 * (a + b)
        th = fit_ipo(bandit, data, float(np.exp(m)))
        k = kl(th)
        if abs(k - target_kl) < best[0]:
            best = (abs(k - target_kl), th, float(np.exp(m)))
        if k > target_kl:
            a = m
        else:
            b = m
    return best[1], best[2]


def fit_auxdpo(bandit, data, beta, lambda_amp, *, Gamma=None, return_delta=False):
    """AuxDPO, exact small-model form (Section 5): ``delta = Gamma c`` over an exact null-space basis of
    ``A_{rho, theta0}``, so the null-space penalty is identically zero; ``lambda_amp ||delta||^2`` is kept.
    ``delta`` is indexed by (s, a) and discarded after training (returned only if ``return_delta``)."""
    _check_data(bandit, data)
    if isinstance(lambda_amp, bool) or not (isinstance(lambda_amp, (int, float)) and 0 <= lambda_amp < float("inf")):
        raise ValueError(f"lambda_amp must be a non-negative finite number, got {lambda_amp!r}")
    s, w, l_, wt = _pairs_t(data)
    Gamma = null_space_basis(bandit.A_matrix()) if Gamma is None else np.asarray(Gamma, float)
    if Gamma.ndim != 2 or Gamma.shape[0] != bandit.S * bandit.K:
        raise ValueError(f"Gamma must have shape (S*K, k) = ({bandit.S * bandit.K}, k), got {Gamma.shape}")
    A = bandit.A_matrix()
    if Gamma.size and np.abs(A @ Gamma).max() > 1e-8 * max(1.0, np.abs(A).max() * np.abs(Gamma).max()):
        raise ValueError(f"Gamma must span a subspace of null(A) (max |A Gamma| = {np.abs(A @ Gamma).max():.3g})")
    G = torch.tensor(Gamma, dtype=_T)
    theta = torch.tensor(bandit.theta0, dtype=_T, requires_grad=True)
    c = torch.zeros(Gamma.shape[1], dtype=_T, requires_grad=True)
    K = bandit.K

    def obj():
        delta = G @ c
        per = auxdpo_loss(*_logps(bandit, theta, s, w, l_), delta[s * K + w], delta[s * K + l_], beta=beta,
                          reduction="none")
        return (wt * per).sum() + lambda_amp * (delta ** 2).sum()

    _lbfgs([theta, c], obj)
    th = theta.detach().numpy()
    return (th, (G @ c).detach().numpy().reshape(bandit.S, K)) if return_delta else th


def fit_bt_reward(bandit, data, ridge=1e-3):
    """Two-stage RLHF, stage 1: a tabular Bradley-Terry reward ``r(s, a)`` fitted by penalised maximum
    likelihood (``ridge ||r||^2`` makes unobserved actions identifiable)."""
    _check_data(bandit, data)
    if not (isinstance(ridge, (int, float)) and 0 < ridge < float("inf")):
        raise ValueError(f"ridge must be a positive finite number, got {ridge!r}")
    s, w, l_, wt = _pairs_t(data)
    r = torch.zeros(bandit.S * bandit.K, dtype=_T, requires_grad=True)
    K = bandit.K
    _lbfgs([r], lambda: -(wt * torch.nn.functional.logsigmoid(r[s * K + w] - r[s * K + l_])).sum()
           + ridge * (r ** 2).sum())
    return r.detach().numpy().reshape(bandit.S, K)


def rlhf_solution(bandit, r, beta):
    """Two-stage RLHF, stage 2 (exact): ``argmax_theta sum_s rho(s) [E_pi r - beta KL(pi || pi0)]``."""
    _check_positive(beta, "beta")
    _check_reward(bandit, r)
    rt = torch.tensor(np.asarray(r, float).reshape(bandit.S, bandit.K), dtype=_T)
    rho = torch.tensor(bandit.rho, dtype=_T)
    lp0 = bandit._lp0_t()
    theta = torch.tensor(bandit.theta0, dtype=_T, requires_grad=True)

    def obj():
        lp = bandit.logpi(theta)
        p = lp.exp()
        return -(rho * (p * (rt - beta * (lp - lp0))).sum(-1)).sum()

    _lbfgs([theta], obj)
    return theta.detach().numpy()


def rlhf_local_solution(bandit, r, beta):
    """``theta0 + (1/beta) F^+ A_{rho, theta0} r`` (Section 4, the natural-gradient step)."""
    _check_positive(beta, "beta")
    _check_reward(bandit, r)
    return bandit.theta0 + np.linalg.pinv(bandit.fisher()) @ bandit.A_matrix() @ np.asarray(r, float).reshape(-1) / beta


def random_bandit(rng, S=4, K=20, d=3, theta0_scale=0.5, pair_concentration=0.3):
    """A random misspecified instance: Gaussian features, a non-uniform base policy, a reward drawn
    independently of the features (so not realisable by the class), skewed pair frequencies."""
    phi = rng.standard_normal((S, K, d))
    bandit = LinearSoftmaxBandit(phi, theta0_scale * rng.standard_normal(d))
    r = rng.standard_normal((S, K))
    pairs = rng.dirichlet(np.full(K * (K - 1) // 2, pair_concentration), size=S)
    return bandit, r, pairs


def three_arm_example():
    """The paper's didactic example (Section 3): one state, ``pi_theta ∝ [e^theta, e^-theta, 1]``,
    ``r* = [1, 2, 0]``, comparisons skewed towards the pair (1, 3), ``beta = 1``.
    Returns ``(bandit, r_star, counts)`` with population counts ``n_12 = 1, n_13 = 10, n_23 = 1``
    split by the BTL probabilities (fractional counts: the population loss)."""
    bandit = LinearSoftmaxBandit(np.array([[[1.0], [-1.0], [0.0]]]), np.zeros(1))
    r = np.array([[1.0, 2.0, 0.0]])
    a, b, n = np.array([0, 0, 1]), np.array([1, 2, 2]), np.array([1.0, 10.0, 1.0])
    p = 1.0 / (1.0 + np.exp(-(r[0, a] - r[0, b])))
    return bandit, r, PreferenceCounts(np.zeros(3, int), a, b, n * p, n * (1 - p))
