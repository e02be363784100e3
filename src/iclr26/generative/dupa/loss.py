"""DUPA's dual-path condition-alignment loss, the REPA loss it replaces, and the DDT training loop.

"Dual-Path Condition Alignment for Diffusion Transformers" (Peng, Ye, Du, Gao, Gao; ICLR 2026;
code https://github.com/PCH-gg/DUPA, not reachable from here). DUPA noises each image
independently twice, ``x_t^(k) = (1 - t) x_0 + t eps^(k)`` (``k = 1, 2``), runs both paths through a
decoupled diffusion transformer (:class:`~.model.DecoupledDiT`) and aligns the two *conditions*
(the condition encoder's outputs ``z^(1)``, ``z^(2)``) token by token with the negative-cosine
loss of REPA (Yu et al. 2024, arXiv:2410.06940, eq. 8: ``L_REPA = -E[1/N sum_n sim(y*_n,
h_phi(h_t^[n]))]``), with a learnable projector ``h_phi`` and the other path as target:

    L_align = 1/2 sum_{(a, b) in {(1, 2), (2, 1)}} 1/N sum_n [1 - cos(h_phi(z^(a)_n), sg(z^(b)_n))]
    L       = 1/2 (L_FM(path 1) + L_FM(path 2)) + lambda * L_align

The paper's text (beyond its abstract) could not be read here: the stop-gradient ``sg``, the
symmetrisation, the shared timestep of the two paths and ``lambda = 0.5`` are the reading of the
method given in the README (listed there as assumptions); each is a constructor argument.
"""
from __future__ import annotations

from typing import Callable

import numpy as np
import torch
from torch import nn

from iclr26.models.diffusion import train_diffusion

METHODS = ("none", "dual", "dupa", "repa")
MATCHES = ("compute", "images")


def negative_cosine(pred, target, stop_gradient: bool = True):
    """``mean(1 - cos(pred, target))`` over every leading index (batch and tokens); the cosine is
    over the last dimension. ``target`` may have fewer leading dimensions (e.g. a global ``(B, D)``
    target for ``(B, N, D)`` tokens) and is broadcast; with ``stop_gradient`` it is detached."""
    if pred.shape[-1] != target.shape[-1]:
        raise ValueError(f"pred and target must share the last dimension, got {tuple(pred.shape)} and {tuple(target.shape)}")
    if stop_gradient:
        target = target.detach()
    while target.dim() < pred.dim():
        target = target.unsqueeze(-2)
    cos = nn.functional.cosine_similarity(pred, target.expand_as(pred), dim=-1, eps=1e-8)
    return (1.0 - cos).mean()


def mlp_projector(in_dim: int, out_dim: int, hidden: int | None = None) -> nn.Module:
    """REPA's projector ``h_phi``: a 3-layer MLP with SiLU (REPA section 3.3), sized by ``hidden``."""
    hidden = hidden or 2 * max(in_dim, out_dim)
    if min(in_dim, out_dim, hidden) < 1:
        raise ValueError(f"in_dim, out_dim and hidden must be >= 1, got {in_dim}, {out_dim}, {hidden}")
    return nn.Sequential(nn.Linear(in_dim, hidden), nn.SiLU(), nn.Linear(hidden, hidden), nn.SiLU(),
                         nn.Linear(hidden, out_dim))


class DUPALoss(nn.Module):
    """Dual-path condition alignment ``L_align`` between the conditions of two noisings of the same
    images, ``z1``, ``z2`` of shape ``(B, N, D)`` (module docstring for the equation).

    ``projector``: ``True`` (an MLP ``D -> D``), ``False`` (identity) or a module; ``symmetric``
    averages both directions; ``stop_gradient`` detaches the target path.
    """

    def __init__(self, dim: int, projector: bool | nn.Module = True, symmetric: bool = True,
                 stop_gradient: bool = True, hidden: int | None = None):
        super().__init__()
        if dim < 1:
            raise ValueError(f"dim must be >= 1, got {dim}")
        self.dim, self.symmetric, self.stop_gradient = dim, bool(symmetric), bool(stop_gradient)
        if isinstance(projector, nn.Module):
            self.projector = projector
        elif projector is True:
            self.projector = mlp_projector(dim, dim, hidden)
        elif projector is False:
            self.projector = nn.Identity()
        else:
            raise ValueError(f"projector must be True, False or an nn.Module, got {projector!r}")

    def forward(self, z1, z2):
        if z1.shape != z2.shape or z1.shape[-1] != self.dim:
            raise ValueError(f"z1 and z2 must have the same shape (..., {self.dim}), got {tuple(z1.shape)} and {tuple(z2.shape)}")
        loss = negative_cosine(self.projector(z1), z2, self.stop_gradient)
        if self.symmetric:
            loss = 0.5 * (loss + negative_cosine(self.projector(z2), z1, self.stop_gradient))
        return loss


class REPALoss(nn.Module):
    """REPA (Yu et al. 2024, eq. 8): ``1/N sum_n [1 - cos(h_phi(h_n), y*_n)]`` between projected
    model tokens ``h`` ``(B, N, D)`` and targets of a frozen encoder, ``(B, N, E)`` per token or
    ``(B, E)`` one per image (broadcast to every token)."""

    def __init__(self, dim: int, target_dim: int, hidden: int | None = None):
        super().__init__()
        self.projector = mlp_projector(dim, target_dim, hidden)
        self.dim, self.target_dim = dim, target_dim

    def forward(self, h, target):
        if h.shape[-1] != self.dim or target.shape[-1] != self.target_dim:
            raise ValueError(f"h must end in {self.dim} and target in {self.target_dim}, got {tuple(h.shape)} and {tuple(target.shape)}")
        return negative_cosine(self.projector(h), target, stop_gradient=True)


def _noised(x0, t, eps):
    tv = t.view((-1,) + (1,) * (x0.dim() - 1))
    return (1.0 - tv) * x0 + tv * eps


def training_loss(model, x0, y, method: str = "dupa", align: nn.Module | None = None, lam: float = 0.5,
                  target: torch.Tensor | None = None, p_uncond: float = 0.1, share_t: bool = True,
                  generator=None):
    """One training objective of a :class:`~.model.DecoupledDiT` on clean images ``x0`` ``(B, ...)``.

    ``method``:

    * ``"none"``: rectified-flow matching, ``|D(x_t, t, E(x_t)) - (eps - x_0)|^2`` (the DDT baseline);
    * ``"dual"``: the same on two independent noisings of each image (the dual-path input of DUPA
      without the alignment term, an ablation);
    * ``"dupa"``: ``"dual"`` plus ``lam * align(z^(1), z^(2))`` (``align`` a :class:`DUPALoss`);
    * ``"repa"``: ``"none"`` plus ``lam * align(z, target)`` (``align`` a :class:`REPALoss`, ``target``
      the frozen encoder's features of ``x0``).

    Labels are dropped to the null class with probability ``p_uncond`` (the same drop for both paths).
    Returns ``(loss, fm_loss, align_loss)`` (the last two detached floats; ``align_loss`` 0 without one).
    """
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, got {method!r}")
    if method in ("dupa", "repa") and align is None:
        raise ValueError(f"method {method!r} needs an align module")
    if method == "repa" and target is None:
        raise ValueError("method 'repa' needs the encoder targets of x0")
    if not 0.0 <= p_uncond <= 1.0:
        raise ValueError(f"p_uncond must be in [0, 1], got {p_uncond}")
    if not np.isfinite(lam) or lam < 0:
        raise ValueError(f"lam must be finite and >= 0, got {lam}")
    if not torch.isfinite(x0).all():
        raise ValueError("x0 must be finite (it holds NaN or inf)")
    if target is not None and not torch.isfinite(target).all():
        raise ValueError("target must be finite (it holds NaN or inf)")
    B = x0.shape[0]
    drop = torch.rand(B, generator=generator) < p_uncond
    y = torch.where(drop, torch.full_like(y, model.n_classes), y)
    t1 = torch.rand(B, generator=generator)
    eps1 = torch.randn(x0.shape, generator=generator)
    if method in ("none", "repa"):
        v, z = model(_noised(x0, t1, eps1), t1, y, return_condition=True)
        fm = ((v - (eps1 - x0)) ** 2).mean()
        al = align(z, target) if method == "repa" else torch.zeros(())
    else:
        t2 = t1 if share_t else torch.rand(B, generator=generator)
        eps2 = torch.randn(x0.shape, generator=generator)
        xt = torch.cat([_noised(x0, t1, eps1), _noised(x0, t2, eps2)])
        v, z = model(xt, torch.cat([t1, t2]), torch.cat([y, y]), return_condition=True)
        fm = ((v - (torch.cat([eps1, eps2]) - torch.cat([x0, x0]))) ** 2).mean()
        al = align(z[:B], z[B:]) if method == "dupa" else torch.zeros(())
    loss = fm + lam * al if method in ("dupa", "repa") else fm
    if not torch.isfinite(loss):
        raise FloatingPointError(f"non-finite training loss ({float(loss.detach())}) for method {method!r}")
    return loss, float(fm.detach()), float(al.detach())


@torch.no_grad()
def condition_disagreement(model, x0, y, share_t: bool = True, generator=None) -> float:
    """Mechanism probe: ``mean_n [1 - cos(z^(1)_n, z^(2)_n)]`` between the raw conditions (no
    projector) of two independent noisings of ``x0`` at one timestep per image (``share_t``) or
    two. The quantity DUPA's ``L_align`` pushes down through ``h_phi``; measured with the model in
    eval mode, labels kept (no drop), so arms trained with and without the alignment term can be
    compared on the same held-out images and noise."""
    x0 = torch.as_tensor(x0, dtype=torch.float32)
    if not torch.isfinite(x0).all():
        raise ValueError("x0 must be finite (it holds NaN or inf)")
    B = x0.shape[0]
    t1 = torch.rand(B, generator=generator)
    t2 = t1 if share_t else torch.rand(B, generator=generator)
    e1, e2 = torch.randn(x0.shape, generator=generator), torch.randn(x0.shape, generator=generator)
    was = model.training
    model.eval()
    try:
        z1 = model.encode(_noised(x0, t1, e1), t1, y)
        z2 = model.encode(_noised(x0, t2, e2), t2, y)
    finally:
        model.train(was)
    return float(negative_cosine(z1, z2))


def train_ddt(model, X, y, method: str = "dupa", steps: int = 1000, batch_size: int = 128, lr: float = 1e-3,
              lam: float = 0.5, align: nn.Module | None = None, target_fn: Callable | None = None,
              p_uncond: float = 0.1, ema: float | None = 0.995, seed: int = 0, share_t: bool = True,
              checkpoints=(), on_checkpoint: Callable | None = None, match: str = "compute"):
    """Train ``model`` in place with AdamW at a constant ``lr``; returns a dict of per-step losses.

    ``match="compute"`` (the default): ``batch_size`` is the number of *noisy inputs* per step, so
    every method does the same number of model evaluations per step: ``"none"`` / ``"repa"`` see
    ``batch_size`` images, ``"dual"`` / ``"dupa"`` see ``batch_size / 2`` images twice (an odd
    ``batch_size`` is then rejected: it cannot be matched). ``match="images"``: ``batch_size`` is the
    number of *distinct images* per step for every method, so the dual-path methods evaluate the
    model on ``2 * batch_size`` inputs (the paper's comparison at equal epochs). ``target_fn(x0) ->
    features`` gives REPA's targets. At each step in ``checkpoints`` ``on_checkpoint(step, model)``
    is called with the EMA weights loaded (the model is restored afterwards); at the end the EMA
    weights are kept. A non-finite loss or gradient stops training with ``FloatingPointError``.
    """
    if steps < 1 or batch_size < 2:
        raise ValueError(f"steps must be >= 1 and batch_size >= 2, got {steps}, {batch_size}")
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, got {method!r}")
    if match not in MATCHES:
        raise ValueError(f"match must be one of {MATCHES}, got {match!r}")
    if match == "compute" and method in ("dual", "dupa") and batch_size % 2:
        raise ValueError(f"batch_size must be even for method {method!r} at matched compute "
                         f"(it counts noisy inputs, two per image), got {batch_size}")
    Xt = torch.as_tensor(np.asarray(X), dtype=torch.float32)
    if not torch.isfinite(Xt).all():
        raise ValueError("X must be finite (it holds NaN or inf)")
    if method == "repa" and target_fn is None:
        raise ValueError("method 'repa' needs target_fn")
    if ema is not None and not 0.0 <= ema < 1.0:
        raise ValueError(f"ema must be in [0, 1) or None, got {ema}")
    n_img = batch_size // 2 if method in ("dual", "dupa") and match == "compute" else batch_size

    def step_loss(m, x0, yb, generator):
        tgt = target_fn(x0) if method == "repa" else None
        loss, fm, al = training_loss(m, x0, yb, method, align, lam, tgt, p_uncond, share_t, generator)
        return loss, {"fm": fm, "align": al}

    logs = {"fm": [], "align": []}
    params = list(model.parameters()) + (list(align.parameters()) if align is not None else [])
    hooks = [p.register_hook(_finite_grad) for p in params if p.requires_grad]
    try:
        losses = train_diffusion(model, Xt, y, "flow", steps, n_img, lr, p_uncond, seed, ema, loss_fn=step_loss,
                                 extra_params=align.parameters() if align is not None else (),
                                 lr_schedule="constant", checkpoints=checkpoints, on_checkpoint=on_checkpoint,
                                 history=logs)
    finally:
        for h in hooks:
            h.remove()
    return {"loss": losses, "fm": logs["fm"], "align": logs["align"]}


def _finite_grad(grad):
    if not torch.isfinite(grad).all():
        raise FloatingPointError("non-finite gradient during training")
    return grad
