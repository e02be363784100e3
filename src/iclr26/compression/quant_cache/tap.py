"""Calibration-set selection for PTQ of a cached DiT: TAP and the two usual baselines.

Source: Q&C (arXiv:2503.02508), Section 3.1 "temporal-aware parallel clustering" (TAP, the
paper's Algorithm 1, Eq. 4-8). With a feature cache, the inputs collected along the sampling
trajectories are redundant, so a calibration set drawn from them uniformly spends its budget on
near-duplicates. TAP clusters the ``N`` candidates and samples the calibration set evenly from the
clusters:

1. ``m`` subsets ``S_i`` of ``n`` candidates each are drawn at random (the paper: ``m = 3``,
   ``n = N / 20``); for each, an ``N x n`` affinity between every candidate and the subset is built
   as ``A_final = alpha * A_spatial + (1 - alpha) * A_temporal`` (Eq. 6), with the cosine similarity
   of feature vectors (Eq. 7) and ``exp(-|t_k - t_h|)`` of the timestamps (Eq. 8);
2. ``L = D_r^{-1/2} A_final D_c^{-1/2}`` with the row and column degrees (Eq. 4-5); its top ``k``
   (left singular) vectors embed every candidate, and k-means on the rows clusters them
   (Algorithm 1, lines 10-13);
3. the ``m`` clusterings are aggregated (line 14; here: k-means on the concatenated embeddings)
   and the calibration set is drawn from the ``k`` clusters. The paper's text gives 100 clusters
   and 800 samples in all, with 3-10 samples per cluster, without the rule that sets the count
   per cluster; this module reads it as an even draw (``n_select / k`` from every cluster, the
   mean of the paper's numbers), at random within each cluster. That is a reading, not the
   paper's stated rule: a draw proportional to cluster size between 3 and 10 would fit the text
   as well (listed in the README).

Readings where the paper is silent are listed in the README (negative cosines clipped to 0,
the aggregation rule, the feature vectors, timestamps as sampler step indices). Baselines:
:func:`random_select` (uniform over the pool) and :func:`uniform_timestep_select` (the same
number from every step, the usual time-step aware calibration of Q-Diffusion / PTQ4DiT).
"""
from __future__ import annotations

import numpy as np
import torch
from torch import nn



class InputRecorder(nn.Module):
    """Passes calls through to ``model`` and stores every ``(x, t, y)`` it was called with."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model
        self.n_classes = model.n_classes
        self.inputs: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = []

    def forward(self, x, t, y):
        self.inputs.append((x.detach().clone(), t.detach().clone(), y.detach().clone()))
        return self.model(x, t, y)

    def pool(self):
        """All recorded inputs concatenated: ``(x, t, y)``."""
        if not self.inputs:
            raise RuntimeError("nothing was recorded")
        return tuple(torch.cat([r[i] for r in self.inputs]) for i in range(3))


@torch.no_grad()
def activation_features(model: nn.Module, x, t, y, batch_size: int = 512) -> np.ndarray:
    """Per candidate, the mean, standard deviation and largest magnitude of every block's output
    (``3 * depth`` columns), read with forward hooks on ``model.blocks``."""
    blocks = getattr(model, "blocks", None)
    if blocks is None:
        raise TypeError("activation_features needs a DiT with .blocks (e.g. TinyDiT)")
    out, feats = [], []
    hooks = [b.register_forward_hook(lambda m, i, o: feats.append(o)) for b in blocks]
    try:
        for i in range(0, len(x), batch_size):
            feats.clear()
            model(x[i:i + batch_size], t[i:i + batch_size], y[i:i + batch_size])
            cols = []
            for h in feats:
                h = h.reshape(len(h), -1)
                cols += [h.mean(1), h.std(1), h.abs().amax(1)]
            out.append(torch.stack(cols, 1))
    finally:
        for hk in hooks:
            hk.remove()
    return torch.cat(out).double().numpy()


def _largest_remainder(weights, total: int, caps=None) -> np.ndarray:
    """Integer shares of ``total`` proportional to ``weights`` (largest remainder), each at most
    its cap (default: unbounded); the shares sum to ``min(total, sum(caps))``."""
    w = np.asarray(weights, float)
    caps = np.full(len(w), int(total), np.int64) if caps is None else np.asarray(caps, np.int64)
    total = int(min(total, caps.sum()))
    ideal = total * w / w.sum()
    share = np.minimum(np.floor(ideal).astype(np.int64), caps)
    while share.sum() < total:
        deficit = np.where(share < caps, ideal - share, -np.inf)
        share[int(np.argmax(deficit))] += 1
    return share


def _finite_2d(features, t):
    F = np.asarray(features, float)
    t = np.asarray(t, float).reshape(-1)
    if F.ndim != 2 or len(F) != len(t):
        raise ValueError(f"features must be (n, f) with n = len(t), got {F.shape} and {t.shape}")
    if not np.all(np.isfinite(F)):
        raise ValueError("features must be finite (got NaN or inf)")
    if not np.all(np.isfinite(t)):
        raise ValueError("t must be finite (got NaN or inf)")
    return F, t


def tap_cluster(features, t, n_clusters: int, alpha: float = 0.5, n_subsets: int = 3,
                subset_size: int | None = None, seed: int = 0) -> np.ndarray:
    """TAP cluster labels (``(N,)`` in ``0..n_clusters-1``) of ``N`` candidates (Algorithm 1).

    ``features`` ``(N, f)``: one feature vector per candidate (columns are scaled to unit root
    mean square so no column dominates the cosine); ``t`` ``(N,)`` their timestamps (Eq. 8 uses
    ``|t_k - t_h|`` as is: pass step indices for the paper's scale). ``alpha`` weighs the spatial
    against the temporal affinity (Eq. 6; the paper's 0.5). ``n_subsets`` parallel subsets of
    ``subset_size`` candidates (default ``max(n_clusters + 1, ceil(N / 20))``, the paper's 1/20).
    """
    from sklearn.cluster import KMeans

    F, t = _finite_2d(features, t)
    N = len(t)
    if not 0.0 <= float(alpha) <= 1.0:
        raise ValueError(f"alpha must be in [0, 1], got {alpha}")
    if int(n_subsets) < 1:
        raise ValueError(f"n_subsets must be >= 1, got {n_subsets}")
    if not 1 <= int(n_clusters) <= N:
        raise ValueError(f"n_clusters must be in 1..{N}, got {n_clusters}")
    k = int(n_clusters)
    n = max(k + 1, int(np.ceil(N / 20))) if subset_size is None else int(subset_size)
    if not k <= n <= N:
        raise ValueError(f"subset_size must be in {k}..{N} (n_clusters..number of candidates), got {n}")
    if k == 1:
        return np.zeros(N, np.int64)
    rms = np.sqrt((F ** 2).mean(0))
    Z = F / np.where(rms > 0, rms, 1.0)
    norm = np.linalg.norm(Z, axis=1)
    Zn = Z / np.where(norm > 0, norm, 1.0)[:, None]
    rng = np.random.default_rng(seed)
    embeds = []
    for _ in range(int(n_subsets)):
        S = np.sort(rng.choice(N, n, replace=False))
        A_sp = np.clip(Zn @ Zn[S].T, 0.0, None)                     # Eq. 7 (negatives clipped)
        A_tm = np.exp(-np.abs(t[:, None] - t[S][None, :]))          # Eq. 8
        A = alpha * A_sp + (1.0 - alpha) * A_tm                     # Eq. 6
        d_r, d_c = A.sum(1), A.sum(0)                               # Eq. 5
        L = A / np.sqrt(np.where(d_r > 0, d_r, 1.0))[:, None] / np.sqrt(np.where(d_c > 0, d_c, 1.0))[None, :]
        U = np.linalg.svd(L, full_matrices=False)[0][:, :k]         # top-k eigenvectors of L L^T
        embeds.append(U)
    E = np.concatenate(embeds, 1)
    k_eff = int(min(k, len(np.unique(np.round(E, 12), axis=0))))
    return KMeans(n_clusters=k_eff, n_init=3, random_state=seed).fit(E).labels_.astype(np.int64)


def tap_select(features, t, n_select: int, n_clusters: int | None = None, alpha: float = 0.5,
               n_subsets: int = 3, subset_size: int | None = None, seed: int = 0) -> np.ndarray:
    """Indices of a TAP calibration set of ``n_select`` candidates (sorted).

    Clusters with :func:`tap_cluster` (default ``n_clusters = max(1, round(n_select / 8))``, the
    paper's 800 samples from 100 clusters) and draws the same number from every cluster, at random
    within it; a cluster smaller than its share gives all it has and the rest goes to the others.
    """
    F, t = _finite_2d(features, t)
    if not 1 <= int(n_select) <= len(t):
        raise ValueError(f"n_select must be in 1..{len(t)}, got {n_select}")
    k = max(1, int(round(n_select / 8))) if n_clusters is None else int(n_clusters)
    labels = tap_cluster(F, t, k, alpha=alpha, n_subsets=n_subsets, subset_size=subset_size, seed=seed)
    return _even_draw(labels, n_select, seed)


def _even_draw(labels: np.ndarray, n_select: int, seed: int) -> np.ndarray:
    """``n_select`` indices drawn evenly from the clusters ``labels`` (largest-remainder shares, a
    cluster smaller than its share gives all it has), sorted; the draw of :func:`tap_select` and
    :func:`kmeans_select`."""
    ids = np.unique(labels)
    sizes = np.array([(labels == c).sum() for c in ids])
    take = _largest_remainder(np.ones(len(ids)), int(n_select), sizes)
    rng = np.random.default_rng(seed + 1)
    out = [rng.choice(np.flatnonzero(labels == c), int(m), replace=False) for c, m in zip(ids, take) if m > 0]
    return np.sort(np.concatenate(out))


def kmeans_select(features, n_select: int, n_clusters: int | None = None, seed: int = 0) -> np.ndarray:
    """The plain clustering baseline of the paper's Table 5: k-means on the standardised features
    alone (no timestamps, no spectral embedding), then the same even draw from the clusters as
    :func:`tap_select` (default ``n_clusters = max(1, round(n_select / 8))``)."""
    from sklearn.cluster import KMeans

    F = np.asarray(features, float)
    if F.ndim != 2 or len(F) == 0:
        raise ValueError(f"features must be a non-empty (n, f) array, got {F.shape}")
    if not np.all(np.isfinite(F)):
        raise ValueError("features must be finite (got NaN or inf)")
    if not 1 <= int(n_select) <= len(F):
        raise ValueError(f"n_select must be in 1..{len(F)}, got {n_select}")
    k = max(1, int(round(n_select / 8))) if n_clusters is None else int(n_clusters)
    if not 1 <= k <= len(F):
        raise ValueError(f"n_clusters must be in 1..{len(F)}, got {n_clusters}")
    sd = F.std(0)
    Z = (F - F.mean(0)) / np.where(sd > 0, sd, 1.0)
    k = int(min(k, len(np.unique(Z, axis=0))))
    labels = KMeans(n_clusters=k, n_init=3, random_state=seed).fit(Z).labels_
    return _even_draw(labels, n_select, seed)


def random_select(n_pool: int, n_select: int, seed: int = 0) -> np.ndarray:
    """``n_select`` distinct indices drawn uniformly from ``range(n_pool)`` (sorted)."""
    if not 1 <= n_select <= n_pool:
        raise ValueError(f"n_select must be in 1..{n_pool}, got {n_select}")
    return np.sort(np.random.default_rng(seed).choice(n_pool, n_select, replace=False))


def uniform_timestep_select(t, n_select: int, seed: int = 0) -> np.ndarray:
    """The same number of candidates from every timestep, drawn at random within each step. When
    ``n_select`` is not a multiple of the step count, the extra candidates go to evenly spaced
    steps over the whole trajectory (so fewer picks than steps still span it)."""
    t = np.asarray(t, float).reshape(-1)
    if not np.all(np.isfinite(t)):
        raise ValueError("t must be finite (got NaN or inf)")
    if not 1 <= n_select <= len(t):
        raise ValueError(f"n_select must be in 1..{len(t)}, got {n_select}")
    rng = np.random.default_rng(seed)
    steps = np.unique(t)
    per = [np.flatnonzero(t == s) for s in steps]
    base, extra = divmod(n_select, len(steps))
    take = np.full(len(steps), base, np.int64)
    take[np.round(np.linspace(0, len(steps) - 1, extra)).astype(np.int64)] += 1
    caps = np.array([len(p) for p in per])
    if np.any(take > caps):                       # unequal steps: proportional shares within the caps
        take = _largest_remainder(np.ones(len(steps)), n_select, caps)
    out = [rng.choice(p, int(k), replace=False) for p, k in zip(per, take) if k > 0]
    return np.sort(np.concatenate(out))
