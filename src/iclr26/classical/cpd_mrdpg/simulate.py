"""Simulated dynamic multilayer RDPG sequences (after the paper's simulation design, Sec. 5)."""
from __future__ import annotations

import numpy as np

__all__ = ["simulate_dmrdpg"]


def simulate_dmrdpg(T=200, n=50, L=4, d=5, change_points=(50, 100, 150), jump=1.0, random_state=None):
    """Sequence ``A`` of shape ``(T, n, n, L)`` with ``P(t)_{..l} = X W^(l)(t) Y^T``.

    Latent positions ``X, Y`` (directed graph) are rows of Dirichlet(1, ..., 1) in dimension ``d``
    and stay fixed. Layer ``l`` (1-based) draws its entries of ``W^(l)`` uniformly from
    ``[(2L + l - 1)/(4L), (2L + l)/(4L)]`` before the first change and alternates with a second
    regime whose entries are those of a fresh draw from ``[(3L + l - 1)/(4L), (3L + l)/(4L)]``
    assigned to the reversed layer order (the paper's Dirichlet scenario). ``jump`` in (0, 1]
    shrinks the second regime towards the first: ``W2 <- W1 + jump (W2 - W1)``.
    Returns ``(A, P_list, change_points)``.
    """
    if not 0 < jump <= 1:
        raise ValueError(f"jump must lie in (0, 1], got {jump!r}")
    cps = np.asarray(sorted(change_points), dtype=int)
    if cps.size and (cps[0] <= 0 or cps[-1] >= T):
        raise ValueError(f"change points must lie strictly inside (0, T={T}), got {cps.tolist()}")
    rng = np.random.default_rng(random_state)
    X = rng.dirichlet(np.ones(d), size=n)
    Y = rng.dirichlet(np.ones(d), size=n)
    grid = np.linspace(0.0, 1.0, 4 * L + 1)
    W1 = np.stack([rng.uniform(grid[2 * L + l], grid[2 * L + l + 1], (d, d)) for l in range(L)])
    W2_raw = np.stack([rng.uniform(grid[3 * L + l], grid[3 * L + l + 1], (d, d)) for l in range(L)])[::-1]
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
