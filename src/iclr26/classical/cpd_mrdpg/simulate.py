"""Simulated dynamic multilayer RDPG sequences (after the paper's simulation design, Sec. 5)."""
from __future__ import annotations

from numbers import Integral, Real

import numpy as np

__all__ = ["simulate_dmrdpg"]


def simulate_dmrdpg(T=200, n=50, L=4, d=5, change_points=(70, 140), jump=1.0, random_state=None):
    """Sequence ``A`` of shape ``(T, n, n, L)`` with ``P(t)_{..l} = X W^(l)(t) Y^T``.

    Latent positions ``X, Y`` (directed graph) are rows of Dirichlet(1, ..., 1) in dimension ``d``
    and stay fixed. Layer ``l`` (1-based) draws its entries of ``W^(l)`` uniformly from
    ``[(2L + l - 1)/(4L), (2L + l)/(4L)]`` before the first change and alternates with a second
    regime whose layer ``l`` draws from ``[(3L + l - 1)/(4L), (3L + l)/(4L)]`` (the official
    scenario f1: two change points at 70 and 140 of T = 200, regimes 1-2-1). ``jump`` in (0, 1]
    shrinks the second regime towards the first: ``W2 <- W1 + jump (W2 - W1)``.
    ``change_points`` are the first (0-based) time indices of the new segments: distinct integers
    strictly inside ``(0, T)``. Returns ``(A, P_list, change_points)``.
    """
    for name, v, low in (("T", T, 2), ("n", n, 1), ("L", L, 1), ("d", d, 1)):
        if not (isinstance(v, Integral) and not isinstance(v, bool) and v >= low):
            raise ValueError(f"{name} must be an integer >= {low}, got {v!r}")
    if not (isinstance(jump, Real) and not isinstance(jump, bool) and 0 < jump <= 1):
        raise ValueError(f"jump must lie in (0, 1], got {jump!r}")
    raw = list(change_points)
    if not all(isinstance(c, Integral) and not isinstance(c, bool) for c in raw):
        raise ValueError(f"change_points must be integers (time indices), got {raw!r}")
    cps = np.asarray(sorted(int(c) for c in raw), dtype=int)
    if cps.size and (cps[0] <= 0 or cps[-1] >= T):
        raise ValueError(f"change_points must lie strictly inside (0, T={T}), got {cps.tolist()}")
    if np.any(np.diff(cps) == 0):
        raise ValueError(f"change_points must be distinct, got {raw!r}")
    rng = np.random.default_rng(random_state)
    X = rng.dirichlet(np.ones(d), size=n)
    Y = rng.dirichlet(np.ones(d), size=n)
    grid = np.linspace(0.0, 1.0, 4 * L + 1)
    W1 = np.stack([rng.uniform(grid[2 * L + l], grid[2 * L + l + 1], (d, d)) for l in range(L)])
    W2_raw = np.stack([rng.uniform(grid[3 * L + l], grid[3 * L + l + 1], (d, d)) for l in range(L)])
    W2 = W1 + jump * (W2_raw - W1)
    P1 = np.einsum("ia,lab,jb->ijl", X, W1, Y)
    P2 = np.einsum("ia,lab,jb->ijl", X, W2, Y)
    bounds = [0, *cps.tolist(), T]
    A = np.empty((T, n, n, L), dtype=np.float32)
    Ps = []
    for k in range(len(bounds) - 1):
        P = P1 if k % 2 == 0 else P2
        Ps.append(P)
        a, b = bounds[k], bounds[k + 1]
        A[a:b] = rng.random((b - a, n, n, L)) < P
    return A, Ps, cps
