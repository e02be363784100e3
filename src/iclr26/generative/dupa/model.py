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

from iclr26.models import diffusion as D
from iclr26.models.diffusion import timestep_embedding

#: the adaLN-Zero DiT block (per-sample or per-token condition) of :mod:`iclr26.models.diffusion`
AdaLNBlock = D.DiTBlock


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
        D.check_dit_sizes(self.image_size, self.patch, self.width, self.heads, channels=self.channels,
                          enc_depth=self.enc_depth, dec_depth=self.dec_depth, heads=self.heads,
                          n_classes=self.n_classes, patch=self.patch)


class DecoupledDiT(nn.Module):
    """DDT: ``v = D(x_t, t, E(x_t, t, y))``.

    ``forward(x, t, y)`` returns the velocity (shaped like ``x``); ``forward(..., return_condition=True)``
    returns ``(v, z)`` with ``z`` the encoder's self-condition ``(B, N, width)``; :meth:`encode` and
    :meth:`decode` expose the two halves (``decode`` with a ``z`` from another step is DDT's encoder
    sharing at inference). ``y == n_classes`` is the classifier-free null label.

    Built from the DiT pieces of :mod:`iclr26.models.diffusion`: each half has its own input layers
    (:func:`~iclr26.models.diffusion.input_layers`), the encoder the DiT condition embedding
    ``cond`` (:class:`~iclr26.models.diffusion.CondEmbed`; ``label`` and ``time`` name its parts)
    and the decoder the DiT output head (:func:`~iclr26.models.diffusion.output_layers`).
    """

    def __init__(self, config: DDTConfig | None = None):
        super().__init__()
        self.config = c = config or DDTConfig()
        self.n_classes = c.n_classes
        self.grid = c.image_size // c.patch
        n_tok = self.grid**2
        # encoder
        self.enc_in, self.enc_pos = D.input_layers(c, n_tok)
        self.cond = D.CondEmbed(c.n_classes, c.width)
        self.encoder = nn.ModuleList(AdaLNBlock(c.width, c.heads) for _ in range(c.enc_depth))
        self.enc_norm = nn.LayerNorm(c.width, elementwise_affine=False, eps=1e-6)
        # decoder
        self.dec_in, self.dec_pos = D.input_layers(c, n_tok)
        self.dec_time = D.time_mlp(c.width)
        self.decoder = nn.ModuleList(AdaLNBlock(c.width, c.heads) for _ in range(c.dec_depth))
        self.n_out, self.ada_out, self.out = D.output_layers(c)
        self.register_load_state_dict_pre_hook(_rename_old_keys)

    @property
    def label(self) -> nn.Embedding:
        """The label embedding (``n_classes + 1`` rows, the last the null label)."""
        return self.cond.label

    @property
    def time(self) -> nn.Sequential:
        """The encoder's timestep MLP."""
        return self.cond.time

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
        return D.patchify(x, self.config.patch)

    def unpatchify(self, tok):
        c = self.config
        return D.unpatchify(tok, (len(tok), c.channels, c.image_size, c.image_size), c.patch)

    # ------------------------------------------------------------------ halves
    def encode(self, x, t, y):
        """The condition encoder: ``z_t = E(x_t, t, y)``, ``(B, N, width)`` (layer-normalised)."""
        t, y = torch.as_tensor(t, dtype=torch.float32), torch.as_tensor(y, dtype=torch.long)
        self._check(x, t, y)
        cond = self.cond(t, y)
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
        return self.unpatchify(D.final_layer(h, cond, self.n_out, self.ada_out, self.out))

    def forward(self, x, t, y, return_condition: bool = False):
        z = self.encode(x, t, y)
        v = self.decode(x, t, z)
        return (v, z) if return_condition else v


def _rename_old_keys(module, state_dict, prefix, *args):
    """Load state dicts of the earlier layout, whose label embedding and time MLP were top-level
    ``label`` / ``time`` (now ``cond.label`` / ``cond.time``; the same parameters)."""
    for k in [k for k in state_dict if k.startswith(prefix + "label.") or k.startswith(prefix + "time.")]:
        state_dict[prefix + "cond." + k[len(prefix):]] = state_dict.pop(k)
