"""Post-hoc DP audit from natural identifiers (Sec. 4 of arXiv 2606.24408).

Each of ``m`` NIDs that occur in the training data is hidden among ``c - 1`` GIDs drawn from its
generator: the candidate set ``V_i = {NID_i} ∪ {c - 1 GIDs}`` (cardinality ``c``). The NID was one IID
draw of the generator and the GIDs are more draws, so which member of ``V_i`` was trained on is
uniformly random: a reconstruction game in the style of the one-run audit of Steinke, Nasr and
Jagielski (NeurIPS 2023), played without retraining. The auditor ranks ``V_i`` by a
membership-inference score and scores a *hit* when the NID lands in the top ``r``.

Per guess, if training is ``epsilon``-DP (replace-one adjacency; averaging the DP inequality over
the ``c`` equally likely candidates):

    P(hit) <= p(epsilon) = r * e^epsilon / (c - 1 + e^epsilon)                       (hit bound)

and the number of hits ``W`` is stochastically dominated by ``Binomial(m, p(epsilon))`` (Steinke et
al. 2023, Thm. 2, with their two-candidate probability replaced by the bound above). With
``delta > 0`` the tail gets Steinke et al.'s additive term (their Thm. 3):

    P(W >= v) <= f(v) + 2 m delta * max_{1 <= i <= m} (f(v - i) - f(v)) / i,
    f(v) = P(Binomial(m, p(epsilon)) >= v).

The audited lower bound ``epsilon_hat`` is the largest ``epsilon`` this tail rejects at level
``beta`` for the observed hits (0 when even ``epsilon = 0`` is not rejected).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import stats


def hit_bound(epsilon: float, cardinality: int, top_r: int = 1) -> float:
    """p(epsilon) = r e^eps / (c - 1 + e^eps), capped at 1: the largest per-guess hit probability of
    an ``epsilon``-DP training run (Sec. 4; reduces to Steinke et al.'s e^eps / (1 + e^eps) at c = 2,
    r = 1, and to the chance rate r / c at epsilon = 0)."""
    _check_game(cardinality, top_r)
    if not epsilon >= 0:
        raise ValueError(f"epsilon must be >= 0, got {epsilon!r}")
    if np.isinf(epsilon):
        return 1.0
    # divide through by e^eps for numerical stability at large epsilon
    return float(min(1.0, top_r / ((cardinality - 1) * np.exp(-epsilon) + 1.0)))


def _check_game(cardinality, top_r):
    if not isinstance(cardinality, (int, np.integer)) or cardinality < 2:
        raise ValueError(f"cardinality must be an integer >= 2 (the NID plus at least one GID), got {cardinality!r}")
    if not isinstance(top_r, (int, np.integer)) or not 1 <= top_r < cardinality:
        raise ValueError(f"top_r must be an integer in [1, cardinality - 1] = [1, {cardinality - 1}], got {top_r!r}")


def hits_tail(hits: int, m: int, epsilon: float, cardinality: int, top_r: int = 1, delta: float = 0.0) -> float:
    """Upper bound on P(W >= hits) for ``m`` guesses under (epsilon, delta)-DP (Steinke et al. Thm. 2-3)."""
    p = hit_bound(epsilon, cardinality, top_r)
    f = lambda v: stats.binom.sf(np.asarray(v) - 1, m, p)  # P(Bin(m, p) >= v); 1 for v <= 0
    tail = float(f(hits))
    if delta > 0 and hits > 0:
        i = np.arange(1, m + 1)
        tail += 2 * m * delta * float(np.max((f(hits - i) - tail) / i))
    return min(1.0, tail)


@dataclass(frozen=True)
class AuditResult:
    """Result of :func:`dp_audit_epsilon`.

    epsilon: the audited lower bound epsilon_hat (0 when no epsilon is rejected);
    pvalue: the tail bound at epsilon = 0 (the p-value of "training leaks nothing");
    hits, m, cardinality, top_r, delta, beta: the game and the test level.
    """
    epsilon: float
    pvalue: float
    hits: int
    m: int
    cardinality: int
    top_r: int
    delta: float
    beta: float

    @property
    def hit_rate(self) -> float:
        return self.hits / self.m


def dp_audit_epsilon(hits, m: int | None = None, cardinality: int = 2, top_r: int = 1, delta: float = 0.0,
                     beta: float = 0.05, eps_max: float = 50.0, tol: float = 1e-6) -> AuditResult:
    """The audited DP lower bound epsilon_hat from ``hits`` correct guesses out of ``m`` (Sec. 4).

    ``hits`` is a count (then ``m`` is required) or a 0/1 array of per-NID hits (``m`` = its length).
    epsilon_hat = sup {epsilon in [0, eps_max] : P_epsilon(W >= hits) <= beta}, found by bisection
    (the tail grows with epsilon). ``delta`` = 0 audits pure epsilon-DP; the paper uses delta = 1e-4
    ([notes]: Sec. 5 setting) and the DP-SGD runs it audits fix their own delta.
    """
    if m is None:
        arr = np.asarray(hits)
        if arr.ndim != 1 or not np.isin(arr, (0, 1)).all():
            raise ValueError("hits must be a count with m given, or a 1-D array of 0/1 per-NID hits")
        hits, m = int(arr.sum()), int(arr.size)
    if not isinstance(m, (int, np.integer)) or m < 1:
        raise ValueError(f"m (the number of audited NIDs) must be a positive integer, got {m!r}")
    if not isinstance(hits, (int, np.integer)) or not 0 <= hits <= m:
        raise ValueError(f"hits must be an integer in [0, m] = [0, {m}], got {hits!r}")
    _check_game(cardinality, top_r)
    if not 0 < beta < 1:
        raise ValueError(f"beta must lie in (0, 1), got {beta!r}")
    if not 0 <= delta < 1:
        raise ValueError(f"delta must lie in [0, 1), got {delta!r}")
    tail = lambda e: hits_tail(hits, m, e, cardinality, top_r, delta)
    p0 = tail(0.0)
    if p0 > beta:
        eps = 0.0
    elif tail(eps_max) <= beta:
        eps = float(eps_max)
    else:
        lo, hi = 0.0, float(eps_max)
        while hi - lo > tol:
            mid = (lo + hi) / 2
            if tail(mid) <= beta:
                lo = mid
            else:
                hi = mid
        eps = lo
    return AuditResult(epsilon=eps, pvalue=p0, hits=int(hits), m=int(m), cardinality=int(cardinality),
                       top_r=int(top_r), delta=float(delta), beta=float(beta))


def count_hits(nid_scores, gid_scores, top_r: int = 1, rng=None) -> np.ndarray:
    """Per NID, 1 if it ranks in the top ``top_r`` of its candidate set, else 0 (Sec. 4).

    ``nid_scores``: shape (m,); ``gid_scores``: shape (m, c - 1); higher = more member-like (e.g. the
    negative loss). Ties are broken uniformly at random, so an uninformative score hits at exactly the
    chance rate r / c.
    """
    nid = np.asarray(nid_scores, dtype=float)
    gid = np.asarray(gid_scores, dtype=float)
    if nid.ndim != 1 or gid.ndim != 2 or gid.shape[0] != nid.shape[0]:
        raise ValueError(f"need nid_scores of shape (m,) and gid_scores of shape (m, c - 1); got {nid.shape} and {gid.shape}")
    _check_game(gid.shape[1] + 1, top_r)
    if not (np.isfinite(nid).all() and np.isfinite(gid).all()):
        raise ValueError("scores must be finite")
    rng = np.random.default_rng(rng)
    above = (gid > nid[:, None]).sum(1)
    ties = (gid == nid[:, None]).sum(1)
    rank = above + rng.integers(0, ties + 1)  # 0 = top; the NID's place among its ties is uniform
    return (rank < top_r).astype(int)
