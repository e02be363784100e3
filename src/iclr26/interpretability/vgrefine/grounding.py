"""Visual-grounding diagnostics of a VLM's attention (attention ratio, KL, JS against a box mask) and
the grounding-head ranking of VGRefine.

Paper: "How Do Medical MLLMs Fail? A Study on Visual Grounding in Medical Images" (Liu, Yu,
Ebrahimkhani, Lin, Ng, Cheung; ICLR 2026; arXiv 2603.14323). Project page:
https://github.com/Guimeng-Leo-Liu/Medical-MLLMs-Fail (the code is in the supplementary material,
not in that repository). Everything here is written from the paper's description; see README.md
for what could and could not be checked against it.

Shapes: an attention map over the visual tokens of one image is a non-negative tensor ``(..., N)``
(``N`` image tokens in raster order, ``N = g * g`` for a ``g x g`` token grid); a box mask is a
``(..., N)`` tensor in ``[0, 1]`` (1 inside the box).
"""
from __future__ import annotations

import math

import numpy as np
import torch

#: smoothing added to both distributions before the logarithms of KL and JS (keeps them finite
#: where a map is exactly zero, e.g. knocked-out tokens); an implementation choice, not the paper's
EPS = 1e-8

#: the number of grounding heads VGRefine keeps (paper Sec. 5: top K = 20 heads ranked by KL)
DEFAULT_K = 20


def _check_map(name: str, x) -> torch.Tensor:
    if not isinstance(x, torch.Tensor):
        if isinstance(x, np.ndarray):
            x = torch.from_numpy(x)
        else:
            raise TypeError(f"{name} must be a torch.Tensor or numpy array, got {type(x).__name__}")
    if x.ndim < 1 or x.shape[-1] == 0:
        raise ValueError(f"{name} must have a non-empty last axis (the visual tokens), got shape {tuple(x.shape)}")
    if not torch.is_floating_point(x):
        x = x.to(torch.float32)
    if not torch.isfinite(x).all():
        raise ValueError(f"{name} holds non-finite values")
    if (x < 0).any():
        raise ValueError(f"{name} must be non-negative")
    return x


def box_token_mask(box, image_size: int, grid: int) -> torch.Tensor:
    """``(grid * grid,)`` float mask, 1 for every visual token whose cell overlaps the pixel box.

    ``box`` is ``(x0, y0, x1, y1)`` with ``x1``/``y1`` exclusive (:mod:`iclr26.data.vision_tasks`);
    the image is cut into ``grid x grid`` square cells of ``image_size / grid`` pixels, in raster
    order (the order of the image tokens of an Idefics3/SmolVLM single view).
    """
    if not isinstance(image_size, (int, np.integer)) or image_size <= 0:
        raise ValueError(f"image_size must be a positive integer, got {image_size!r}")
    if not isinstance(grid, (int, np.integer)) or grid <= 0 or image_size % grid:
        raise ValueError(f"grid must be a positive integer dividing image_size={image_size}, got {grid!r}")
    if len(box) != 4:
        raise ValueError(f"box must be (x0, y0, x1, y1), got {box!r}")
    x0, y0, x1, y1 = (float(v) for v in box)
    if not all(math.isfinite(v) for v in (x0, y0, x1, y1)) or x1 <= x0 or y1 <= y0:
        raise ValueError(f"box must be finite with x1 > x0 and y1 > y0, got {box!r}")
    cell = image_size / grid
    edges = torch.arange(grid, dtype=torch.float64) * cell
    cols = (edges < x1) & (edges + cell > x0)
    rows = (edges < y1) & (edges + cell > y0)
    return (rows[:, None] & cols[None, :]).reshape(-1).to(torch.float32)


def grounding_metrics(attention, mask, *, eps: float = EPS) -> dict[str, torch.Tensor]:
    """The paper's three grounding diagnostics of an attention map against a box mask.

    ``attention``: ``(..., N)`` non-negative weights of one query (the last token) over the visual
    tokens; ``mask``: ``(..., N)`` in ``[0, 1]``, broadcastable. Both are normalised to
    distributions over the ``N`` tokens, ``P = a / sum(a)`` and ``Q = m / sum(m)``; then

    - ``ar`` (attention ratio) ``= sum_i P_i [m_i > 0]``: the share of visual attention inside the box;
    - ``kl`` ``= KL(Q || P) = sum_i Q_i log(Q_i / P_i)``: how far the attention is from the box;
    - ``js`` ``= (KL(P || M) + KL(Q || M)) / 2`` with ``M = (P + Q) / 2`` (natural log, at most log 2).

    ``eps`` is added to both distributions inside the logarithms only. Higher ``ar`` and lower
    ``kl``/``js`` mean better grounding. Returns tensors of shape ``(...)``.
    """
    a = _check_map("attention", attention)
    m = _check_map("mask", mask).to(a.dtype)
    if (m > 1).any():
        raise ValueError("mask must lie in [0, 1]")
    if not (isinstance(eps, (int, float)) and math.isfinite(eps) and eps >= 0):
        raise ValueError(f"eps must be a finite non-negative number, got {eps!r}")
    try:
        a, m = torch.broadcast_tensors(a, m)
    except RuntimeError as err:
        raise ValueError(f"attention {tuple(a.shape)} and mask {tuple(m.shape)} do not broadcast") from err
    sa, sm = a.sum(-1, keepdim=True), m.sum(-1, keepdim=True)
    if (sa <= 0).any():
        raise ValueError("attention sums to zero over the visual tokens for some map")
    if (sm <= 0).any():
        raise ValueError("mask is empty (no token inside the box) for some map")
    p, q = a / sa, m / sm
    ar = (p * (m > 0)).sum(-1)
    def kl_div(x, y):                                   # sum x log(x / y), with 0 log 0 = 0
        return (torch.xlogy(x, x + eps) - torch.xlogy(x, y + eps)).sum(-1)

    kl = kl_div(q, p)
    mid = (p + q) / 2
    js = 0.5 * kl_div(p, mid) + 0.5 * kl_div(q, mid)
    return {"ar": ar, "kl": kl, "js": js}


def head_kl(attention, masks, *, eps: float = EPS) -> torch.Tensor:
    """Mean KL(box || attention) of every head: ``attention`` ``(B, L, H, N)`` (per item, layer,
    head), ``masks`` ``(B, N)``; returns ``(L, H)``."""
    a = _check_map("attention", attention)
    if a.ndim != 4:
        raise ValueError(f"attention must be (items, layers, heads, tokens), got shape {tuple(a.shape)}")
    m = _check_map("masks", masks)
    if m.ndim != 2 or m.shape[0] != a.shape[0] or m.shape[1] != a.shape[-1]:
        raise ValueError(f"masks must be (items, tokens) = {(a.shape[0], a.shape[-1])}, got {tuple(m.shape)}")
    return grounding_metrics(a, m[:, None, None, :], eps=eps)["kl"].mean(0)


def select_grounding_heads(attention, masks, k: int = DEFAULT_K, *, eps: float = EPS) -> torch.Tensor:
    """VGRefine step 1: the ``k`` heads whose last-token visual attention is closest to the box
    (lowest mean KL, paper Sec. 5), as a ``(k, 2)`` long tensor of ``(layer, head)`` rows, best
    first (ties broken by position). ``attention`` ``(B, L, H, N)``; ``masks`` ``(B, N)``."""
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 0:
        raise ValueError(f"k must be a non-negative integer, got {k!r}")
    scores = head_kl(attention, masks, eps=eps)
    n_layers, n_heads = scores.shape
    if k > n_layers * n_heads:
        raise ValueError(f"k={k} exceeds the {n_layers * n_heads} heads")
    order = torch.sort(scores.reshape(-1), stable=True).indices[:k]
    return torch.stack([order // n_heads, order % n_heads], dim=1).long()


def random_heads(n_layers: int, n_heads: int, k: int, generator: torch.Generator | None = None) -> torch.Tensor:
    """``k`` distinct heads drawn uniformly (the random-heads control), ``(k, 2)`` long tensor."""
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or not 0 <= k <= n_layers * n_heads:
        raise ValueError(f"k must be an integer in [0, {n_layers * n_heads}], got {k!r}")
    idx = torch.randperm(n_layers * n_heads, generator=generator)[:k]
    return torch.stack([idx // n_heads, idx % n_heads], dim=1).long()
