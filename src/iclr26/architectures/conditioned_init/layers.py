"""A small multi-head self-attention layer with separate q/k/v projections (the layout most
transformer code uses), to show :func:`conditioned_init_` on a module other than
``nn.MultiheadAttention``."""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn

__all__ = ["AttentionConfig", "SelfAttention"]


@dataclass
class AttentionConfig:
    dim: int = 64
    num_heads: int = 4
    bias: bool = True

    def __post_init__(self):
        if self.dim < 1 or self.num_heads < 1 or self.dim % self.num_heads:
            raise ValueError(f"dim ({self.dim}) must be a positive multiple of num_heads ({self.num_heads})")


class SelfAttention(nn.Module):
    """Multi-head self-attention ``softmax(Q K^T / sqrt(d)) V`` then ``out_proj``; (B, N, D) -> (B, N, D)."""

    def __init__(self, config: AttentionConfig | None = None, **kwargs):
        super().__init__()
        self.config = config or AttentionConfig(**kwargs)
        c = self.config
        self.num_heads = c.num_heads
        self.q_proj = nn.Linear(c.dim, c.dim, bias=c.bias)
        self.k_proj = nn.Linear(c.dim, c.dim, bias=c.bias)
        self.v_proj = nn.Linear(c.dim, c.dim, bias=c.bias)
        self.out_proj = nn.Linear(c.dim, c.dim, bias=c.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, dim = x.shape
        h, d = self.num_heads, dim // self.num_heads
        q = self.q_proj(x).view(b, n, h, d).transpose(1, 2)
        k = self.k_proj(x).view(b, n, h, d).transpose(1, 2)
        v = self.v_proj(x).view(b, n, h, d).transpose(1, 2)
        a = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(d), -1) @ v
        return self.out_proj(a.transpose(1, 2).reshape(b, n, dim))
