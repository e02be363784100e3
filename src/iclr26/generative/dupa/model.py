"""Decoupled diffusion transformer (DDT: condition encoder + velocity decoder).

From "DDT: Decoupled Diffusion Transformer" (Wang, Tian, Huang, Wang 2025; arXiv:2504.05741,
code https://github.com/MCG-NJU/DDT), the base model of "Dual-Path Condition Alignment for
Diffusion Transformers" (DUPA, Peng et al., ICLR 2026; code https://github.com/PCH-gg/DUPA).

* condition encoder ``z_t = E(x_t, t, y)``: patch tokens through adaLN-Zero DiT blocks conditioned
  on the timestep and label embedding; its (layer-normalised) output tokens are the
  *self-condition* ``z_t`` (DDT, method section, "condition encoder"; the low-frequency semantic
  component that DUPA aligns);
* velocity decoder ``v = D(x_t, t, z_t)``: a second stack of adaLN-Zero DiT blocks on a fresh
  embedding of ``x_t``, modulated *per token* by ``z_t`` plus the timestep embedding (DDT, method section,
  "velocity decoder"), and an adaLN-Zero output layer.

Flow convention of :mod:`iclr26.models.diffusion`: ``x_t = (1 - t) x_0 + t eps``, the model predicts
``v = eps - x_0``; ``forward(x, t, y)`` has the signature of :class:`~iclr26.models.diffusion.TinyDiT`
so the shared samplers (:func:`iclr26.models.diffusion.sample`) run it unchanged.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from iclr26.models.diffusion import timestep_embedding


@dataclass
class DDTConfig:
    """Size of a :class:`DecoupledDiT`. Defaults: a tiny DDT for 8x8 digits (patch 2, 2 encoder and
    2 decoder blocks, width 64), a CPU-sized stand-in for the paper's DDT-B/XL (12-22 encoder and
    2-6 decoder blocks, width 768-1152)."""

    image_size: int = 8
    channels: int = 1
    patch: int = 2
    width: int = 64
    enc_depth: int = 2
    dec_depth: int = 2
    heads: int = 4
    n_classes: int = 10

    def __post_init__(self):
        if self.image_size % self.patch:
            raise ValueError(f"image_size {self.image_size} must be divisible by patch {self.patch}")
        if self.width % self.heads or self.width % 2:
            raise ValueError(f"width {self.width} must be even and divisible by heads {self.heads}")
        if min(self.channels, self.enc_depth, self.dec_depth, self.heads, self.n_classes, self.patch) < 1:
            raise ValueError("channels, enc_depth, dec_depth, heads, n_classes and patch must be >= 1")


class AdaLNBlock(nn.Module):
    """A DiT block with adaLN-Zero modulation (Peebles & Xie 2023, Fig. 3). The condition ``c`` is
    ``(B, W)`` (one per image, as in DiT / the DDT encoder) or ``(B, N, W)`` (one per token, as in
    the DDT decoder, whose condition is the encoder's token-wise output)."""

    def __init__(self, width: int, heads: int):
        super().__init__()
        self.n1 = nn.LayerNorm(width, elementwise_affine=False, eps=1e-6)
        self.attn = nn.MultiheadAttention(width, heads, batch_first=True)
        self.n2 = nn.LayerNorm(width, elementwise_affine=False, eps=1e-6)
        self.mlp = nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(approximate="tanh"), nn.Linear(4 * width, width))
        self.ada = nn.Sequential(nn.SiLU(), nn.Linear(width, 6 * width))
        nn.init.zeros_(self.ada[1].weight)
        nn.init.zeros_(self.ada[1].bias)

    def forward(self, h, c):
        mod = self.ada(c)
        if mod.dim() == 2:
            mod = mod[:, None]
        s1, b1, g1, s2, b2, g2 = mod.chunk(6, -1)
        u = self.n1(h) * (1 + s1) + b1
        h = h + g1 * self.attn(u, u, u, need_weights=False)[0]
        return h + g2 * self.mlp(self.n2(h) * (1 + s2) + b2)


class DecoupledDiT(nn.Module):
    """DDT: ``v = D(x_t, t, E(x_t, t, y))``.

    ``forward(x, t, y)`` returns the velocity (shaped like ``x``); ``forward(..., return_condition=True)``
    returns ``(v, z)`` with ``z`` the encoder's self-condition ``(B, N, width)``; :meth:`encode` and
    :meth:`decode` expose the two halves (``decode`` with a ``z`` from another step is DDT's encoder
    sharing at inference). ``y == n_classes`` is the classifier-free null label.
    """

    def __init__(self, config: DDTConfig | None = None):
        super().__init__()
        self.config = c = config or DDTConfig()
        self.n_classes = c.n_classes
        self.grid = c.image_size // c.patch
        pdim = c.channels * c.patch**2
        n_tok = self.grid**2
        # encoder
        self.enc_in = nn.Linear(pdim, c.width)
        self.enc_pos = nn.Parameter(0.02 * torch.randn(1, n_tok, c.width))
        self.label = nn.Embedding(c.n_classes + 1, c.width)
        self.time = nn.Sequential(nn.Linear(c.width, c.width), nn.SiLU(), nn.Linear(c.width, c.width))
        self.encoder = nn.ModuleList(AdaLNBlock(c.width, c.heads) for _ in range(c.enc_depth))
        self.enc_norm = nn.LayerNorm(c.width, elementwise_affine=False, eps=1e-6)
        # decoder
        self.dec_in = nn.Linear(pdim, c.width)
        self.dec_pos = nn.Parameter(0.02 * torch.randn(1, n_tok, c.width))
        self.dec_time = nn.Sequential(nn.Linear(c.width, c.width), nn.SiLU(), nn.Linear(c.width, c.width))
        self.decoder = nn.ModuleList(AdaLNBlock(c.width, c.heads) for _ in range(c.dec_depth))
        self.n_out = nn.LayerNorm(c.width, elementwise_affine=False, eps=1e-6)
        self.ada_out = nn.Sequential(nn.SiLU(), nn.Linear(c.width, 2 * c.width))
        self.out = nn.Linear(c.width, pdim)
        for m in (self.ada_out[1], self.out):
            nn.init.zeros_(m.weight)
            nn.init.zeros_(m.bias)

    # ------------------------------------------------------------------ helpers
    def _check(self, x, t, y=None):
        c = self.config
        if x.dim() != 4 or tuple(x.shape[1:]) != (c.channels, c.image_size, c.image_size):
            raise ValueError(f"x must have shape (B, {c.channels}, {c.image_size}, {c.image_size}), got {tuple(x.shape)}")
        if t.shape != (x.shape[0],):
            raise ValueError(f"t must have shape ({x.shape[0]},), got {tuple(t.shape)}")
        if y is not None and (y.shape != (x.shape[0],) or y.min() < 0 or y.max() > self.n_classes):
            raise ValueError(f"y must be {x.shape[0]} labels in 0..{self.n_classes} ({self.n_classes} = no label)")

    def patchify(self, x):
        c, g, p = self.config, self.grid, self.config.patch
        return x.reshape(len(x), c.channels, g, p, g, p).permute(0, 2, 4, 1, 3, 5).reshape(len(x), g * g, -1)

    def unpatchify(self, tok):
        c, g, p = self.config, self.grid, self.config.patch
        return tok.reshape(len(tok), g, g, c.channels, p, p).permute(0, 3, 1, 4, 2, 5).reshape(
            len(tok), c.channels, c.image_size, c.image_size)

    # ------------------------------------------------------------------ halves
    def encode(self, x, t, y):
        """The condition encoder: ``z_t = E(x_t, t, y)``, ``(B, N, width)`` (layer-normalised)."""
        t, y = torch.as_tensor(t, dtype=torch.float32), torch.as_tensor(y, dtype=torch.long)
        self._check(x, t, y)
        cond = self.time(timestep_embedding(t, self.config.width)) + self.label(y)
        h = self.enc_in(self.patchify(x)) + self.enc_pos
        for blk in self.encoder:
            h = blk(h, cond)
        return self.enc_norm(h)

    def decode(self, x, t, z):
        """The velocity decoder: ``v = D(x_t, t, z_t)``, modulated per token by ``z_t + emb(t)``."""
        t = torch.as_tensor(t, dtype=torch.float32)
        self._check(x, t)
        if z.shape != (x.shape[0], self.grid**2, self.config.width):
            raise ValueError(f"z must have shape ({x.shape[0]}, {self.grid**2}, {self.config.width}), got {tuple(z.shape)}")
        cond = z + self.dec_time(timestep_embedding(t, self.config.width))[:, None]
        h = self.dec_in(self.patchify(x)) + self.dec_pos
        for blk in self.decoder:
            h = blk(h, cond)
        sh, sc = self.ada_out(cond).chunk(2, -1)
        return self.unpatchify(self.out(self.n_out(h) * (1 + sc) + sh))

    def forward(self, x, t, y, return_condition: bool = False):
        z = self.encode(x, t, y)
        v = self.decode(x, t, z)
        return (v, z) if return_condition else v
