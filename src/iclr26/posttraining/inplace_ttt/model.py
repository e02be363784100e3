"""A tiny sliding-window-attention LM whose gated MLPs can carry In-Place TTT fast weights.

The from-scratch configuration of the paper (arXiv 2604.06169, Sec. 4.2: sliding-window attention
models pretrained with In-Place TTT) at toy size: pre-norm blocks of sliding-window causal softmax
attention (RoPE) and a Llama-style gated MLP (``gate_proj``, ``up_proj``, ``down_proj``, SiLU).
With ``ttt="ntp"`` or ``ttt="reconstruction"`` the MLPs of ``ttt_layers`` are
:class:`~.ttt.InPlaceTTTMLP` wrappers whose target reads the token embeddings ``X_0``
(the paper's target input); ``ttt="none"`` is the sliding-window baseline.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn

from iclr26.common.tiny_attention import RMSNorm, RoPE

from .ttt import InPlaceTTTMLP

__all__ = ["SWATTTConfig", "SWATTTLM", "sliding_window_mask", "GatedMLP"]

TTT_KINDS = ("ntp", "reconstruction", "none")


def sliding_window_mask(T: int, window: int, device=None) -> torch.Tensor:
    """Boolean ``(T, T)`` mask, True where query ``t`` may attend to key ``s``: ``t - window < s <= t``."""
    if window < 1:
        raise ValueError(f"window must be >= 1, got {window}")
    t = torch.arange(T, device=device)
    d = t[:, None] - t[None, :]
    return (d >= 0) & (d < window)


class GatedMLP(nn.Module):
    """``down_proj(silu(gate_proj x) * up_proj x)`` with Llama's attribute names."""

    def __init__(self, d_model: int, hidden: int):
        super().__init__()
        self.gate_proj = nn.Linear(d_model, hidden, bias=False)
        self.up_proj = nn.Linear(d_model, hidden, bias=False)
        self.down_proj = nn.Linear(hidden, d_model, bias=False)
        self.act_fn = nn.SiLU()

    def forward(self, x, target=None):
        return self.down_proj(self.act_fn(self.gate_proj(x)) * self.up_proj(x))


class SlidingWindowAttention(nn.Module):
    def __init__(self, d_model: int, n_heads: int, window: int):
        super().__init__()
        self.n_heads, self.head_dim, self.window = n_heads, d_model // n_heads, window
        self.qkv = nn.Linear(d_model, 3 * d_model, bias=False)
        self.out = nn.Linear(d_model, d_model, bias=False)
        self.rope = RoPE(self.head_dim)

    def forward(self, x):
        B, T, _ = x.shape
        q, k, v = self.qkv(x).view(B, T, 3, self.n_heads, self.head_dim).permute(2, 0, 3, 1, 4)
        q, k, _ = self.rope(q, k, x)
        mask = sliding_window_mask(T, self.window, x.device)
        o = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        return self.out(o.transpose(1, 2).reshape(B, T, -1))


@dataclass
class SWATTTConfig:
    """Configuration of :class:`SWATTTLM`. ``ttt_layers=None`` means every layer."""

    vocab_size: int
    d_model: int = 64
    n_layers: int = 2
    n_heads: int = 4
    mlp_hidden: int = 128
    window: int = 16
    ttt: str = "ntp"
    ttt_layers: tuple | None = None
    chunk_size: int = 64
    eta: float = 0.3
    kernel_size: int = 5
    target_init: str = "official"

    def __post_init__(self):
        if self.ttt not in TTT_KINDS:
            raise ValueError(f"ttt must be one of {TTT_KINDS}, got {self.ttt!r}")
        for name in ("vocab_size", "d_model", "n_layers", "n_heads", "mlp_hidden", "window", "chunk_size"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"{name} must be a positive integer, got {v!r}")
        if self.d_model % self.n_heads:
            raise ValueError(f"d_model ({self.d_model}) must be divisible by n_heads ({self.n_heads})")
        if self.ttt_layers is not None:
            bad = [i for i in self.ttt_layers if not 0 <= int(i) < self.n_layers]
            if bad:
                raise ValueError(f"ttt_layers must lie in [0, {self.n_layers}), got {self.ttt_layers!r}")


class SWATTTLM(nn.Module):
    """Embedding, ``n_layers`` x (sliding-window attention + gated MLP), RMSNorm, linear head."""

    def __init__(self, config: SWATTTConfig):
        super().__init__()
        self.config = c = config
        self.embed = nn.Embedding(c.vocab_size, c.d_model)
        ttt_layers = set(range(c.n_layers) if c.ttt_layers is None else (int(i) for i in c.ttt_layers))
        self.blocks = nn.ModuleList()
        for i in range(c.n_layers):
            mlp = GatedMLP(c.d_model, c.mlp_hidden)
            self.blocks.append(nn.ModuleDict(dict(norm1=RMSNorm(c.d_model), attn=SlidingWindowAttention(c.d_model, c.n_heads, c.window),
                                                  norm2=RMSNorm(c.d_model), mlp=mlp)))
        self.norm = RMSNorm(c.d_model)
        self.head = nn.Linear(c.d_model, c.vocab_size, bias=False)
        for m in self.modules():
            if isinstance(m, (nn.Linear, nn.Embedding)):
                nn.init.normal_(m.weight, std=0.02)
        # wrap after the init so the target modules keep their own (official) init
        if c.ttt != "none":
            for i in sorted(ttt_layers):
                blk = self.blocks[i]
                blk["mlp"] = InPlaceTTTMLP(blk["mlp"], chunk_size=c.chunk_size, eta=c.eta, kernel_size=c.kernel_size,
                                           target=c.ttt, init=c.target_init)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x0 = self.embed(tokens)
        h = x0
        for blk in self.blocks:
            h = h + blk["attn"](blk["norm1"](h))
            h = h + blk["mlp"](blk["norm2"](h), target=x0)
        return self.head(self.norm(h))
