"""Boxes in the torchvision.ops convention (``(x0, y0, x1, y1)``, float tensors of shape ``(N, 4)``):
pairwise IoU, greedy NMS, and sound IoU bounds for boxes whose coordinates are only known to lie in
intervals (the "interval arithmetic" of ODPV's formal NMS step, Liu et al., ICLR 2026, step 2).

torchvision is not installed here; :func:`box_iou` and :func:`nms` follow ``torchvision.ops.box_iou``
and ``torchvision.ops.nms`` (a box is suppressed when its IoU with a kept, higher-scoring box is
strictly greater than ``iou_threshold``; ties in score keep the lower index first).
"""
from __future__ import annotations

import torch

__all__ = ["box_area", "box_iou", "nms", "interval_box_iou", "min_iou_to_box"]


def _check_boxes(b: torch.Tensor, name: str) -> torch.Tensor:
    if not isinstance(b, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(b).__name__}")
    if b.ndim != 2 or b.shape[-1] != 4:
        raise ValueError(f"{name} must have shape (N, 4), got {tuple(b.shape)}")
    if not torch.isfinite(b).all():
        raise ValueError(f"{name} holds non-finite values")
    return b


def box_area(boxes: torch.Tensor) -> torch.Tensor:
    """Area of ``(x0, y0, x1, y1)`` boxes; a box with ``x1 < x0`` or ``y1 < y0`` has area 0."""
    return (boxes[..., 2] - boxes[..., 0]).clamp(min=0) * (boxes[..., 3] - boxes[..., 1]).clamp(min=0)


def box_iou(boxes1: torch.Tensor, boxes2: torch.Tensor) -> torch.Tensor:
    """Pairwise IoU, ``(N, 4) x (M, 4) -> (N, M)`` (0 where the union is empty)."""
    _check_boxes(boxes1, "boxes1")
    _check_boxes(boxes2, "boxes2")
    lt = torch.maximum(boxes1[:, None, :2], boxes2[None, :, :2])
    rb = torch.minimum(boxes1[:, None, 2:], boxes2[None, :, 2:])
    wh = (rb - lt).clamp(min=0)
    inter = wh[..., 0] * wh[..., 1]
    union = box_area(boxes1)[:, None] + box_area(boxes2)[None, :] - inter
    return torch.where(union > 0, inter / union.clamp(min=torch.finfo(union.dtype).tiny), torch.zeros_like(union))


def nms(boxes: torch.Tensor, scores: torch.Tensor, iou_threshold: float) -> torch.Tensor:
    """Indices of the boxes greedy NMS keeps, by decreasing score (``torchvision.ops.nms`` semantics)."""
    _check_boxes(boxes, "boxes")
    if not isinstance(scores, torch.Tensor) or scores.shape != boxes.shape[:1]:
        raise ValueError(f"scores must be a tensor of shape ({boxes.shape[0]},), got "
                         f"{tuple(scores.shape) if isinstance(scores, torch.Tensor) else type(scores).__name__}")
    if not 0.0 <= float(iou_threshold) <= 1.0:
        raise ValueError(f"iou_threshold must lie in [0, 1], got {iou_threshold}")
    order = torch.sort(scores, descending=True, stable=True).indices
    iou = box_iou(boxes, boxes)
    alive = torch.ones(len(order), dtype=torch.bool)
    keep = []
    for rank, i in enumerate(order.tolist()):
        if not alive[rank]:
            continue
        keep.append(i)
        later = order[rank + 1:]
        alive[rank + 1:] &= iou[i, later] <= iou_threshold
    return torch.tensor(keep, dtype=torch.long)


def interval_box_iou(lo1: torch.Tensor, hi1: torch.Tensor, lo2: torch.Tensor, hi2: torch.Tensor):
    """Sound pairwise bounds ``(lower, upper)``, each ``(N, M)``, on IoU(b1, b2) over every box b1 with
    ``lo1 <= b1 <= hi1`` coordinate-wise and every b2 with ``lo2 <= b2 <= hi2``.

    Intersection and areas are bounded by interval arithmetic on the corners; then
    ``IoU = I / (A + B - I)`` is increasing in I and decreasing in A and B, and the union is at least
    ``max(A, B)``: ``lower = I_min / (A_max + B_max - I_min)``,
    ``upper = min(1, I_max / max(A_min + B_min - I_max, A_min, B_min))``. With point intervals
    (``lo == hi``) both equal :func:`box_iou`.
    """
    for t, n in ((lo1, "lo1"), (hi1, "hi1"), (lo2, "lo2"), (hi2, "hi2")):
        _check_boxes(t, n)
    if lo1.shape != hi1.shape or lo2.shape != hi2.shape:
        raise ValueError("lo1/hi1 and lo2/hi2 must have matching shapes")
    if (lo1 > hi1).any() or (lo2 > hi2).any():
        raise ValueError("every lower corner bound must be <= its upper bound (lo <= hi)")
    # intersection width: min(x1, x1') - max(x0, x0'); smallest with x1 low, x0 high
    iw_min = (torch.minimum(lo1[:, None, 2], lo2[None, :, 2]) - torch.maximum(hi1[:, None, 0], hi2[None, :, 0])).clamp(min=0)
    ih_min = (torch.minimum(lo1[:, None, 3], lo2[None, :, 3]) - torch.maximum(hi1[:, None, 1], hi2[None, :, 1])).clamp(min=0)
    iw_max = (torch.minimum(hi1[:, None, 2], hi2[None, :, 2]) - torch.maximum(lo1[:, None, 0], lo2[None, :, 0])).clamp(min=0)
    ih_max = (torch.minimum(hi1[:, None, 3], hi2[None, :, 3]) - torch.maximum(lo1[:, None, 1], lo2[None, :, 1])).clamp(min=0)
    i_min, i_max = iw_min * ih_min, iw_max * ih_max

    def areas(lo, hi):
        amin = (lo[:, 2] - hi[:, 0]).clamp(min=0) * (lo[:, 3] - hi[:, 1]).clamp(min=0)
        amax = (hi[:, 2] - lo[:, 0]).clamp(min=0) * (hi[:, 3] - lo[:, 1]).clamp(min=0)
        return amin, amax

    a_min, a_max = areas(lo1, hi1)
    b_min, b_max = areas(lo2, hi2)
    tiny = torch.finfo(i_min.dtype).tiny
    u_max = a_max[:, None] + b_max[None, :] - i_min
    lower = torch.where(u_max > 0, i_min / u_max.clamp(min=tiny), torch.zeros_like(u_max))
    u_min = torch.maximum(a_min[:, None] + b_min[None, :] - i_max, torch.maximum(a_min[:, None], b_min[None, :]))
    upper = torch.where(u_min > 0, i_max / u_min.clamp(min=tiny), (i_max > 0).to(i_max.dtype)).clamp(max=1.0)
    return lower.clamp(min=0.0, max=1.0), upper


def min_iou_to_box(lo: torch.Tensor, hi: torch.Tensor, box: torch.Tensor) -> torch.Tensor:
    """Exact ``min IoU(b, box)`` over every ``b`` with ``lo <= b <= hi`` coordinate-wise, per row of
    ``lo``/``hi`` (K, 4), for one fixed ``box`` (4,).

    With the other three corners fixed, the IoU with a fixed box rises then falls (or is constant) as
    one corner moves, so its minimum over an interval sits at an endpoint; hence the minimum over the
    product of intervals sits at one of its 16 vertices. Tighter than the lower bound of
    :func:`interval_box_iou`, which decouples the intersection from the areas.
    """
    _check_boxes(lo, "lo")
    _check_boxes(hi, "hi")
    if lo.shape != hi.shape or (lo > hi).any():
        raise ValueError("lo and hi must have the same shape with lo <= hi")
    box = torch.as_tensor(box, dtype=lo.dtype).reshape(1, 4)
    _check_boxes(box, "box")
    bits = torch.tensor([[(v >> j) & 1 for j in range(4)] for v in range(16)], dtype=torch.bool)   # (16, 4)
    verts = torch.where(bits[None], hi[:, None, :], lo[:, None, :])                                 # (K, 16, 4)
    return box_iou(verts.reshape(-1, 4), box).reshape(len(lo), 16).min(dim=1).values
