"""A small DeAltHDR-style network around :class:`.fgma.FlowGuidedMaskedAttention`, its input
preparation (linearisation, exposure normalisation, flow, round-trip error) and its training loop.

Paper pieces kept (official ``dealthdr_arch.py`` / ``dealthdr_model.py`` and the paper's method
section as summarised in the README): separate input projections for short and long exposures,
a shared feature encoder, FGMA aligning each neighbour's features to the current frame, fusion of
the current features with both aligned neighbours, an output in the mu-law domain with an L1 loss
there, Adam (betas 0.9, 0.99) with cosine annealing, and the "mixed" training schedule of the
sensitivity s (30 % s = 0, 30 % s = inf, 40 % s drawn from 16 points). Everything is much smaller
(one scale, 16 channels) than the official Turtle-based U-Net.
"""
from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from iclr26.common.training import batches, train

from .data import EXPOSURE_RATIO, GAMMA, mu_law
from .fgma import (FlowGuidedMaskedAttention, block_matching_flow, consistency_error, occlusion_mask,
                   sample_training_sensitivities)


class NonFiniteTrainingError(RuntimeError):
    """The training loss or a gradient became non-finite."""


def prepare(ldr, exposure, *, radius: int = 4, window: int = 5) -> dict:
    """Network inputs for three-frame windows ``ldr`` (n, 3, 3, H, W) with ``exposure`` (n, 3).

    - ``inp`` (n, 3, 6, H, W): per frame ``[L', L'^(1/2.2)]`` with ``L' = LDR^2.2 / e`` the
      linearised frame brought to the short exposure's brightness (paper: inverse-gamma
      linearisation, long frames divided by the exposure ratio, the frame and its gamma version
      concatenated);
    - ``flow`` (n, 2, 2, H, W): block-matching flow from frame t to t-1 and to t+1
      (``warp(nbr, flow)`` is aligned with frame t), on exposure-normalised images (each frame
      brought to the long exposure and clipped, so that both saturate alike);
    - ``D`` (n, 2, 1, H, W): the round-trip error of frame t through each neighbour (Eq. 3-4);
    - ``is_long`` (n,): whether frame t is a long exposure; ``base`` (n, 3, H, W): the mu-law of
      frame t's own radiance estimate (the single-frame reconstruction).
    """
    ldr = torch.as_tensor(np.asarray(ldr), dtype=torch.float32)
    exposure = torch.as_tensor(np.asarray(exposure), dtype=torch.float32)
    if ldr.dim() != 5 or ldr.shape[1] != 3 or ldr.shape[2] != 3:
        raise ValueError(f"ldr must have shape (n, 3 frames, 3 channels, H, W), got {tuple(ldr.shape)}")
    if exposure.shape != ldr.shape[:2]:
        raise ValueError(f"exposure must have shape {tuple(ldr.shape[:2])}, got {tuple(exposure.shape)}")
    if not torch.isfinite(ldr).all() or ldr.min() < 0 or ldr.max() > 1:
        raise ValueError("ldr must hold finite values in [0, 1]")
    if not torch.isfinite(exposure).all() or (exposure <= 0).any():
        raise ValueError("exposure must hold positive finite values")
    lin = ldr.clamp_min(0) ** GAMMA / exposure[..., None, None, None]   # long frames scaled to the short exposure
    inp = torch.cat([lin, lin ** (1 / GAMMA)], dim=2)
    e_max = exposure.max(dim=1, keepdim=True).values
    norm = (lin * e_max[..., None, None, None]).clamp(0, 1) ** (1 / GAMMA)     # brought to the long exposure
    cur = norm[:, 1]
    flows, Ds = [], []
    for j in (0, 2):
        nbr = norm[:, j]
        f_cn = block_matching_flow(cur, nbr, radius, window)
        f_nc = block_matching_flow(nbr, cur, radius, window)
        flows.append(f_cn)
        Ds.append(consistency_error(cur, f_nc, f_cn))
    is_long = exposure[:, 1] >= exposure.max(dim=1).values
    base = mu_law(lin[:, 1].clamp(0, 1))
    return {"inp": inp, "flow": torch.stack(flows, 1), "D": torch.stack(Ds, 1), "is_long": is_long, "base": base}


class TinyDeAltHDR(nn.Module):
    """Exposure-specific input projections, a shared encoder, one FGMA shared by both neighbours,
    a fusion head; predicts the mu-law tone-mapped HDR frame t as the single-frame estimate plus a
    learned residual."""

    def __init__(self, dim: int = 16, num_heads: int = 1, sensitivity: float = 15.0, window: int | None = None,
                 qk_norm: bool = False, temperature: float = 1.0):
        super().__init__()
        if not isinstance(dim, int) or dim < 1:
            raise ValueError(f"dim must be a positive integer, got {dim!r}")
        act = nn.LeakyReLU(0.1)
        self.proj_short = nn.Conv2d(6, dim, 3, padding=1)
        self.proj_long = nn.Conv2d(6, dim, 3, padding=1)
        self.encoder = nn.Sequential(nn.Conv2d(dim, dim, 3, padding=1), act, nn.Conv2d(dim, dim, 3, padding=1), act)
        self.fgma = FlowGuidedMaskedAttention(dim, num_heads, sensitivity, window, qk_norm=qk_norm,
                                              temperature=temperature)
        self.fuse = nn.Sequential(nn.Conv2d(dim + 2 * (2 * dim + 1), dim, 3, padding=1), act,
                                  nn.Conv2d(dim, dim, 3, padding=1), act, nn.Conv2d(dim, 3, 3, padding=1))
        self.dim = dim

    def _features(self, inp: torch.Tensor, is_long: torch.Tensor) -> torch.Tensor:
        B, T = inp.shape[:2]
        frames = inp.flatten(0, 1)
        long_frame = torch.stack([~is_long, is_long, ~is_long], 1).flatten()         # neighbours: the other exposure
        f = torch.where(long_frame[:, None, None, None], self.proj_long(frames), self.proj_short(frames))
        f = self.encoder(f)
        return f.view(B, T, self.dim, *f.shape[-2:])

    def forward(self, batch: dict, s=None, mask_override: torch.Tensor | None = None):
        """``batch`` from :func:`prepare`; ``s`` a number or per-sample tensor (default: the FGMA's);
        ``mask_override`` (B, 2, 1, H, W) replaces the masks. Returns ``(output, masks)``."""
        f = self._features(batch["inp"], batch["is_long"])
        outs, masks = [], []
        for j, nb in enumerate((0, 2)):
            mo = None if mask_override is None else mask_override[:, j]
            o, m = self.fgma(f[:, 1], f[:, nb], batch["flow"][:, j], batch["D"][:, j], s, mo)
            outs.append(o)
            masks.append(m)
        out = batch["base"] + self.fuse(torch.cat([f[:, 1]] + outs, dim=1))
        return out, torch.stack(masks, 1)


def effective_keys(model: TinyDeAltHDR, batch: dict) -> float:
    """``exp`` of the mean entropy of the attention weights of every query over the previous
    frame's keys (global attention, as at s = inf): the number of keys a query effectively averages
    over. Close to ``H W`` means a uniform softmax, i.e. attention returns the frame mean of V."""
    fg = model.fgma
    if fg.window is not None:
        raise ValueError("effective_keys is defined for global attention (window=None)")
    with torch.no_grad():
        f = model._features(batch["inp"], batch["is_long"])
        B, _, C, H, W = f.shape
        h, d = fg.num_heads, C // fg.num_heads
        q = fg.q(f[:, 1]).view(B, h, d, H * W)
        k = fg.kv(f[:, 0])[:, :C].reshape(B, h, d, H * W)
        ents = []
        for b in range(B):
            qs, ks = fg._logit_scale(q[b], k[b], d)
            p = torch.einsum("hdn,hdk->hnk", qs, ks).softmax(-1)
            ents.append(-(p * p.clamp_min(1e-30).log()).sum(-1).mean())
        return float(torch.stack(ents).mean().exp())


def subset(batch: dict, idx) -> dict:
    return {k: v[idx] for k, v in batch.items()}


def conv_macs(model: TinyDeAltHDR, H: int, W: int) -> int:
    """Multiply-accumulates of the convolutions for one output frame (3 frames encoded)."""
    total = 0
    for name, m in model.named_modules():
        if isinstance(m, nn.Conv2d) and not name.startswith("fgma"):
            per = m.in_channels // m.groups * m.out_channels * m.kernel_size[0] * m.kernel_size[1] * H * W
            frames = 3 if name.startswith(("proj", "encoder")) else 1
            if name.startswith("proj"):
                frames = 1.5          # each frame goes through one of the two projections
            total += int(per * frames)
    return total


def model_macs(model: TinyDeAltHDR, masks: torch.Tensor) -> torch.Tensor:
    """Per-sample MACs (convolutions + the FGMA's attention for its masked pixels), masks (B, 2, 1, H, W)."""
    H, W = masks.shape[-2:]
    n_q = masks.flatten(2).sum(-1)                      # (B, 2)
    att = torch.zeros(masks.shape[0], dtype=torch.float64)
    for j in range(masks.shape[1]):
        nk = model.fgma.keys_per_query(H, W)
        att += torch.tensor([model.fgma.attention_macs(int(n), nk) for n in n_q[:, j]], dtype=torch.float64)
    return conv_macs(model, H, W) + att


def psnr(pred: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Per-image PSNR (dB) of tone-mapped images in [0, 1] (``pred`` clamped to [0, 1])."""
    mse = ((pred.clamp(0, 1) - target) ** 2).flatten(1).mean(1)
    return 10 * torch.log10(1.0 / mse.clamp_min(1e-12))


def train_model(model: TinyDeAltHDR, data: dict, target: torch.Tensor, *, steps: int, batch_size: int, lr: float,
                seed: int, schedule: str = "mixed") -> list[float]:
    """Train on ``data`` (from :func:`prepare`) against ``target`` (mu-law HDR) with the L1 loss.

    ``schedule``: ``"mixed"`` (the official per-sample sensitivities) or ``"flow"`` (s = 0 always:
    the flow-only comparator). Adam (betas 0.9, 0.99) with cosine annealing to 1e-7 (official
    ``options/DeAltHDR.yml``). Raises :class:`NonFiniteTrainingError` on a non-finite loss or
    gradient. Returns the loss per step.
    """
    if schedule not in ("mixed", "flow"):
        raise ValueError(f"schedule must be 'mixed' or 'flow', got {schedule!r}")
    if not (isinstance(steps, int) and steps >= 1):
        raise ValueError(f"steps must be a positive integer, got {steps!r}")
    if not (isinstance(lr, float) and math.isfinite(lr) and lr > 0):
        raise ValueError(f"lr must be a positive finite float, got {lr!r}")
    g = torch.Generator().manual_seed(seed)
    n = target.shape[0]
    idx = torch.arange(n)
    opt = torch.optim.Adam(model.parameters(), lr=lr, betas=(0.9, 0.99))
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=steps, eta_min=1e-7)

    def loss_fn(m, batch):
        i, _ = batch
        b = subset(data, i)
        s = sample_training_sensitivities(len(i), g) if schedule == "mixed" else 0.0
        out, _ = m(b, s)
        loss = (out - target[i]).abs().mean()
        if not torch.isfinite(loss):
            raise NonFiniteTrainingError(f"non-finite training loss {float(loss.detach())}")
        return loss

    def step_fn(m, o, batch):
        o.zero_grad(set_to_none=True)
        loss = loss_fn(m, batch)
        loss.backward()
        for p in m.parameters():
            if p.grad is not None and not torch.isfinite(p.grad).all():
                raise NonFiniteTrainingError("non-finite gradient")
        o.step()
        return loss

    res = train(model, opt, batches(idx, idx, batch_size, g), steps, loss_fn, step_fn=step_fn,
                scheduler=sched)
    return res.losses


def random_masks_like(masks: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """Masks with the same number of marked pixels per sample and neighbour as ``masks``, at
    uniformly random positions (the control for where FGMA places its attention)."""
    B, J, _, H, W = masks.shape
    flat = masks.reshape(B * J, H * W)
    counts = flat.sum(1).long()
    order = torch.rand(B * J, H * W, generator=generator).argsort(1)
    rank = order.argsort(1)
    out = (rank < counts[:, None]).to(masks.dtype)
    return out.view(B, J, 1, H, W)
