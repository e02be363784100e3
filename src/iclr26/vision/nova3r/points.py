"""Point-set utilities: farthest point sampling and the point-cloud metrics of NOVA3R's evaluation.

Metric definitions follow the official evaluation (wrchen530/nova3r ``eval/mv_recon/metric.py``):
nearest-neighbour Euclidean (not squared) distances in both directions; the Chamfer distance is the
mean of the two directional means, ``(mean_i d(p_i, G) + mean_j d(g_j, P)) / 2``; the F-score at
``tau`` is the harmonic mean of precision (share of predicted points within ``tau`` of the ground
truth) and recall (share of ground-truth points within ``tau`` of the prediction); the hole ratio at
``tau`` is the share of ground-truth points farther than ``tau`` from every predicted point.
"""
from __future__ import annotations

import torch


def _check_cloud(x, name: str) -> torch.Tensor:
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor of shape (B, N, 3), got {type(x).__name__}")
    if x.ndim != 3 or x.shape[-1] != 3:
        raise ValueError(f"{name} must have shape (B, N, 3), got {tuple(x.shape)}")
    if x.shape[1] == 0:
        raise ValueError(f"{name} must hold at least one point per cloud, got N = 0")
    if not torch.isfinite(x).all():
        raise ValueError(f"{name} holds non-finite coordinates")
    return x


def _check_pair(pred, gt):
    _check_cloud(pred, "pred")
    _check_cloud(gt, "gt")
    if pred.shape[0] != gt.shape[0]:
        raise ValueError(f"pred and gt must have the same batch size, got {pred.shape[0]} and {gt.shape[0]}")


def _check_tau(tau) -> float:
    if isinstance(tau, bool) or not isinstance(tau, (int, float)):
        raise TypeError(f"tau must be a positive number, got {type(tau).__name__}")
    if not (tau > 0 and tau < float("inf")):
        raise ValueError(f"tau must be a positive finite number, got {tau}")
    return float(tau)


def nearest_distances(pred: torch.Tensor, gt: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(d_pred, d_gt)``: for every predicted point its distance to the nearest ground-truth point
    (B, N_pred), and for every ground-truth point its distance to the nearest prediction (B, N_gt)."""
    _check_pair(pred, gt)
    d = torch.cdist(pred, gt)
    return d.min(dim=2).values, d.min(dim=1).values


def chamfer_distance(pred: torch.Tensor, gt: torch.Tensor) -> torch.Tensor:
    """Per-cloud Chamfer distance (B,), ``(mean d_pred + mean d_gt) / 2`` with Euclidean distances
    (the official evaluation's definition)."""
    d_pred, d_gt = nearest_distances(pred, gt)
    return (d_pred.mean(1) + d_gt.mean(1)) / 2


def chamfer_loss(pred: torch.Tensor, gt: torch.Tensor) -> torch.Tensor:
    """Scalar Chamfer training loss: squared nearest-neighbour distances averaged over the points of
    each direction, the two directions summed, averaged over the batch (the usual L2 Chamfer loss, as
    ``chamferdist`` computes for the official ``CDLoss``)."""
    _check_pair(pred, gt)
    d2 = torch.cdist(pred, gt).pow(2)
    return (d2.min(dim=2).values.mean(1) + d2.min(dim=1).values.mean(1)).mean()


def fscore(pred: torch.Tensor, gt: torch.Tensor, tau: float) -> torch.Tensor:
    """Per-cloud F-score at ``tau`` (B,): ``2 P R / (P + R)``, 0 where both are 0."""
    tau = _check_tau(tau)
    d_pred, d_gt = nearest_distances(pred, gt)
    p = (d_pred < tau).float().mean(1)
    r = (d_gt < tau).float().mean(1)
    denom = p + r
    return torch.where(denom > 0, 2 * p * r / denom.clamp_min(1e-12), torch.zeros_like(denom))


def hole_ratio(pred: torch.Tensor, gt: torch.Tensor, tau: float) -> torch.Tensor:
    """Per-cloud hole ratio at ``tau`` (B,): the share of ground-truth points with no predicted point
    within ``tau``."""
    tau = _check_tau(tau)
    _, d_gt = nearest_distances(pred, gt)
    return (d_gt > tau).float().mean(1)


def farthest_point_sample(points: torch.Tensor, m: int, start: torch.Tensor | None = None) -> torch.Tensor:
    """Indices (B, m) of ``m`` farthest points of each cloud, greedily: start at ``start`` (B,) (index 0
    by default), then repeatedly take the point farthest from those chosen."""
    _check_cloud(points, "points")
    if isinstance(m, bool) or not isinstance(m, int):
        raise TypeError(f"m must be an int, got {type(m).__name__}")
    B, N, _ = points.shape
    if not 1 <= m <= N:
        raise ValueError(f"m must lie in [1, N = {N}], got {m}")
    idx = torch.empty(B, m, dtype=torch.long, device=points.device)
    cur = torch.zeros(B, dtype=torch.long, device=points.device) if start is None else start.long()
    dist = torch.full((B, N), float("inf"), device=points.device, dtype=points.dtype)
    ar = torch.arange(B, device=points.device)
    for i in range(m):
        idx[:, i] = cur
        d = (points - points[ar, cur][:, None, :]).pow(2).sum(-1)
        dist = torch.minimum(dist, d)
        cur = dist.argmax(dim=1)
    return idx


def gather_points(points: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
    """``points[b, idx[b]]`` for every cloud: (B, m, 3)."""
    return torch.gather(points, 1, idx[..., None].expand(-1, -1, points.shape[-1]))
