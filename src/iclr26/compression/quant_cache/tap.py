"""Calibration-set selection for PTQ of a cached DiT: TAP and the two usual baselines.

Source: Q&C (arXiv:2503.02508), Section 3.1 "temporal-aware parallel clustering" (TAP, the
paper's Algorithm 1). With a feature cache, the activations collected along the sampling
trajectories are redundant (the cached steps repeat the features of the last full step), so a
randomly drawn calibration set spends much of its budget on near-duplicates. TAP

1. collects candidate inputs ``(x_t, t, y)`` at every step of calibration trajectories;
2. describes each candidate by temporal-aware features: statistics of its activations (here the
   mean, standard deviation and largest magnitude of every block's output) together with a
   timestep embedding;
3. splits the steps into contiguous timestep groups and clusters each group independently (the
   groups are independent, hence "parallel"; k-means here);
4. takes from each cluster the candidates nearest to its centroid, as many as the cluster's share
   of the group (largest remainder), each group contributing in proportion to its size.

The paper's exact features, group count and cluster count could not be read; the choices above
are documented as guesses in the README. Baselines: :func:`random_select` (uniform over the pool)
and :func:`uniform_timestep_select` (the same number from every step, Q-Diffusion's time-step
aware calibration).
"""
from __future__ import annotations

import numpy as np
import torch
from torch import nn

from iclr26.models.diffusion import timestep_embedding


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


def tap_select(features, t, n_select: int, n_groups: int = 5, clusters_per_group: int | None = None,
               time_weight: float = 1.0, time_dim: int = 8, seed: int = 0) -> np.ndarray:
    """Indices of a TAP calibration set of ``n_select`` candidates.

    ``features`` ``(n, f)`` (e.g. :func:`activation_features`), ``t`` ``(n,)`` the candidates'
    timesteps. Features are standardised; a sinusoidal embedding of ``t`` (``time_dim`` columns,
    times ``time_weight``) is appended. The distinct timesteps are split into ``n_groups``
    contiguous groups; group ``g`` gets a share of ``n_select`` proportional to its candidates and
    is clustered by k-means into ``clusters_per_group`` clusters (default: half its share, at least
    1); each cluster gives its share (proportional to its size) of centroid-nearest candidates.
    """
    from sklearn.cluster import KMeans

    F = np.asarray(features, float)
    t = np.asarray(t, float).reshape(-1)
    if F.ndim != 2 or len(F) != len(t):
        raise ValueError(f"features must be (n, f) with n = len(t), got {F.shape} and {t.shape}")
    if not 1 <= n_select <= len(t):
        raise ValueError(f"n_select must be in 1..{len(t)}, got {n_select}")
    steps = np.unique(t)
    if not 1 <= n_groups <= len(steps):
        raise ValueError(f"n_groups must be in 1..{len(steps)} (the distinct timesteps), got {n_groups}")
    if clusters_per_group is not None and clusters_per_group < 1:
        raise ValueError(f"clusters_per_group must be >= 1 or None, got {clusters_per_group}")
    sd = F.std(0)
    Z = (F - F.mean(0)) / np.where(sd > 0, sd, 1.0)
    emb = timestep_embedding(torch.as_tensor(t), time_dim).double().numpy()
    Z = np.concatenate([Z, time_weight * emb], 1)
    groups = [np.flatnonzero(np.isin(t, g)) for g in np.array_split(steps, n_groups)]
    budget = _largest_remainder([len(g) for g in groups], n_select, [len(g) for g in groups])
    chosen = []
    for gi, (idx, b) in enumerate(zip(groups, budget)):
        if b == 0:
            continue
        k = clusters_per_group if clusters_per_group is not None else max(1, int(b) // 2)
        k = int(min(k, b, len(np.unique(Z[idx], axis=0))))
        km = KMeans(n_clusters=k, n_init=3, random_state=seed + gi).fit(Z[idx])
        sizes = np.bincount(km.labels_, minlength=k)
        take = _largest_remainder(sizes, int(b), sizes)
        for c in range(k):
            members = idx[km.labels_ == c]
            d = ((Z[members] - km.cluster_centers_[c]) ** 2).sum(1)
            chosen += list(members[np.argsort(d, kind="stable")[:take[c]]])
    return np.sort(np.asarray(chosen, np.int64))


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
