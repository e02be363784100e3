"""A dual encoder and the retrieval metrics of the paper's tables (R@1, R@5, R@10 both ways, R-sum)."""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

__all__ = ["DualEncoder", "retrieval_metrics"]


class DualEncoder(nn.Module):
    """Two MLP towers ``d_a -> hidden -> dim`` and ``d_b -> hidden -> dim``, L2-normalised outputs."""

    def __init__(self, d_a: int, d_b: int, dim: int = 64, hidden: int = 256):
        super().__init__()
        for name, v in (("d_a", d_a), ("d_b", d_b), ("dim", dim), ("hidden", hidden)):
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"{name} must be a positive integer, got {v!r}")
        self.tower_a = nn.Sequential(nn.Linear(d_a, hidden), nn.ReLU(), nn.Linear(hidden, dim))
        self.tower_b = nn.Sequential(nn.Linear(d_b, hidden), nn.ReLU(), nn.Linear(hidden, dim))

    def encode_a(self, x):
        return F.normalize(self.tower_a(x), dim=-1)

    def encode_b(self, y):
        return F.normalize(self.tower_b(y), dim=-1)

    def forward(self, x, y):
        return self.encode_a(x), self.encode_b(y)


def retrieval_metrics(emb_a: torch.Tensor, emb_b: torch.Tensor, ks=(1, 5, 10)) -> dict[str, float]:
    """Recall@k in percent for a->b and b->a retrieval where row i of each side is the one match.

    Returns ``a2b_R@k``, ``b2a_R@k`` for every k, ``rsum`` (their sum, the paper's R-sum when
    ks = (1, 5, 10)) and ``mean_R@k`` (the mean of the two directions). Ties are broken against the match (its rank counts every equal score).
    """
    if emb_a.dim() != 2 or emb_b.dim() != 2 or emb_a.shape != emb_b.shape:
        raise ValueError(f"emb_a and emb_b must be 2-d of equal shape, got {tuple(emb_a.shape)} and {tuple(emb_b.shape)}")
    if not (torch.isfinite(emb_a).all() and torch.isfinite(emb_b).all()):
        raise ValueError("embeddings contain NaN or infinite values")
    sim = F.normalize(emb_a, dim=1) @ F.normalize(emb_b, dim=1).T
    out = {}
    for name, s in (("a2b", sim), ("b2a", sim.T)):
        pos = torch.diagonal(s).unsqueeze(1)
        rank = (s >= pos).sum(1) - 1  # 0 = first; ties count against the match
        for k in ks:
            out[f"{name}_R@{k}"] = 100.0 * float((rank < k).double().mean())
    out["rsum"] = sum(v for key, v in out.items() if "_R@" in key)
    for k in ks:
        out[f"mean_R@{k}"] = 0.5 * (out[f"a2b_R@{k}"] + out[f"b2a_R@{k}"])
    return out
