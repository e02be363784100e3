"""FORA-style feature caching for a DiT: recompute every ``interval`` steps, reuse in between.

Source: Q&C (arXiv:2503.02508), Section 2 (cache mechanism: features of adjacent denoising steps
are redundant, so the blocks are computed every ``N`` steps and their features reused otherwise);
the cache itself is FORA (Selvaraju et al. 2024, "Fast-Forward Caching in Diffusion Transformer
Acceleration"): the outputs of each block's attention and MLP layers are stored at a full step and
reused at the next ``N - 1`` steps, while the cheap adaLN modulation (shift, scale, gates) is
recomputed from the current timestep. ``interval = 1`` is the plain model.

The wrapper counts forward calls: call ``k`` (from 0 after :meth:`CachedDiT.reset`) recomputes when
``k % interval == 0``. One sampler run is one call per step (the batched conditional and null
predictions of classifier-free guidance are one call), so a run must start with ``reset()``.
"""
from __future__ import annotations

import copy

import torch
from torch import nn


class CachedBranch(nn.Module):
    """Wraps one branch (attention or MLP) of a block: computes and stores its output on refresh
    steps, returns the stored output on cached steps."""

    def __init__(self, inner: nn.Module):
        super().__init__()
        self.inner = inner
        self.refresh = True
        self.stored = None

    def forward(self, x, *args, **kw):
        if self.refresh or self.stored is None:
            self.stored = self.inner(x, *args, **kw)
            return self.stored
        ref = self.stored[0] if isinstance(self.stored, tuple) else self.stored
        if ref.shape[0] != x.shape[0]:
            raise RuntimeError(f"cached features are for a batch of {ref.shape[0]}, got {x.shape[0]}: "
                               "call reset() before a new sampling run")
        return self.stored


class CachedDiT(nn.Module):
    """A copy of a DiT whose blocks' ``attn`` and ``mlp`` are :class:`CachedBranch` es.

    ``forward(x, t, y)`` as the wrapped model. Attributes ``interval``, ``calls`` (forward calls
    since the last reset) and ``refreshes`` (how many of them recomputed the blocks).
    """

    def __init__(self, model: nn.Module, interval: int = 3):
        super().__init__()
        if isinstance(interval, bool) or not isinstance(interval, int) or interval < 1:
            raise ValueError(f"interval must be an integer >= 1, got {interval!r}")
        blocks = getattr(model, "blocks", None)
        if blocks is None or not all(hasattr(b, "attn") and hasattr(b, "mlp") for b in blocks):
            raise TypeError("CachedDiT needs a DiT whose .blocks each have .attn and .mlp (e.g. TinyDiT)")
        self.model = copy.deepcopy(model)
        self.interval = interval
        self.n_classes = model.n_classes
        self.branches: list[CachedBranch] = []
        for blk in self.model.blocks:
            blk.attn = CachedBranch(blk.attn)
            blk.mlp = CachedBranch(blk.mlp)
            self.branches += [blk.attn, blk.mlp]
        self.reset()

    def reset(self):
        """Forget the cached features; the next call recomputes."""
        self.calls, self.refreshes = 0, 0
        for b in self.branches:
            b.stored = None

    def forward(self, x, t, y):
        refresh = self.calls % self.interval == 0
        for b in self.branches:
            b.refresh = refresh
        self.calls += 1
        self.refreshes += int(refresh)
        return self.model(x, t, y)


def apply_feature_cache(model: nn.Module, interval: int = 3) -> CachedDiT:
    """``CachedDiT(model, interval)``: FORA caching with recomputation every ``interval`` steps
    (``interval = 3`` is the FORA / Q&C setting for DiT with 250 DDPM steps)."""
    return CachedDiT(model, interval)
