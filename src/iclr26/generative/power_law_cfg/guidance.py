"""Non-linear classifier-free guidance and power-law guidance.

Paper: "Overshoot and Shrinkage in Classifier-Free Guidance: From Theory to Practice" (ICLR 2026;
earlier version arXiv:2502.07849, "Understanding Classifier-Free Guidance: High-Dimensional Theory
and Non-Linear Generalizations", Lehman Pavasovic, Verbeek, Biroli, Mezard). No official code.

With the conditional and unconditional scores ``S(x, c)`` and ``S(x)`` and ``dS = S(x, c) - S(x)``:

* CFG: ``S^CFG = S(x, c) + omega dS``;
* the non-linear family: ``S^phi = S(x, c) + phi_t(|dS|) dS`` with ``lim_{s -> 0} s phi_t(s) = 0``
  (CFG is ``phi = omega``);
* power-law guidance: ``phi(s) = omega s^alpha``, i.e. ``S^PL = S(x, c) + omega |dS|^alpha dS``, the
  norm taken per sample over all of its coordinates.

Networks predict ``eps`` or a flow velocity ``v`` rather than the score; both are affine in the
score at a given ``x_t``, ``S = -(b x_t + c pred)``, so a rule on scores is the same rule on
predictions once the norm is converted: ``|dS| = c |pred_c - pred_u|`` with ``c = 1 / sigma_t`` for
``eps`` and ``c = (1 - t) / t`` for rectified-flow velocities (the ``score_scale`` that
:func:`iclr26.models.diffusion.sample` passes; ``c = 1`` when the predictions are scores).

Time convention of the flow factor: ``t = 0`` is the data and ``t = 1`` the noise, ``x_t = (1 - t)
x_0 + t eps`` and ``v = eps - x_0`` (diffusers' ``FlowMatchEulerDiscreteScheduler``, whose
``sigma`` is this ``t``), so ``S = -(x_t + (1 - t) v) / t`` and ``c = (1 - t) / t``. The paper's
theory runs its forward (Ornstein-Uhlenbeck) process from the data at ``t = 0`` as well. Under the
other common flow convention (``t = 1`` the data, ``x_t = t x_1 + (1 - t) eps``) the same factor
reads ``t / (1 - t)``: pass that as ``score_scale``.

``score_scale`` must be finite and ``>= 0`` (a negative scale is a sign error; it used to turn the
guidance off silently). An infinite ``phi(0)`` (``alpha < 0``) at ``|dS| = 0`` gives the term its
limit 0 (``s phi(s) -> 0``); any other non-finite factor is an error.
"""
from __future__ import annotations

from typing import Callable

import math

import torch

__all__ = ["nonlinear_guidance", "power_law_guidance", "NonLinearGuidance", "PowerLawGuidance"]


def _per_sample_norm(d: torch.Tensor) -> torch.Tensor:
    """``|d|`` over all non-batch dimensions, shaped to broadcast against ``d``."""
    n = d.reshape(d.shape[0], -1).norm(dim=1)
    return n.view((d.shape[0],) + (1,) * (d.dim() - 1))


def _check_pair(pred_cond, pred_uncond):
    if not (torch.is_tensor(pred_cond) and torch.is_tensor(pred_uncond)):
        raise TypeError("pred_cond and pred_uncond must be torch tensors")
    if pred_cond.shape != pred_uncond.shape:
        raise ValueError(f"pred_cond and pred_uncond must have the same shape, got "
                         f"{tuple(pred_cond.shape)} and {tuple(pred_uncond.shape)}")
    if pred_cond.dim() < 1:
        raise ValueError("predictions need a leading batch dimension")


def nonlinear_guidance(pred_cond, pred_uncond, phi: Callable[[torch.Tensor], torch.Tensor], score_scale=1.0):
    """``pred_c + phi(|dS|) (pred_c - pred_u)`` with ``|dS| = score_scale * |pred_c - pred_u|``
    per sample (the paper's general non-linear family; ``phi`` maps the ``(B, 1, ...)`` norms to
    factors of the same shape)."""
    _check_pair(pred_cond, pred_uncond)
    d = pred_cond - pred_uncond
    c = torch.as_tensor(score_scale, dtype=d.dtype)
    if not bool(torch.isfinite(c).all()) or bool((c < 0).any()):
        raise ValueError(f"score_scale must be finite and >= 0 (a negative scale flips the score "
                         f"difference), got {score_scale!r}")
    s = c * _per_sample_norm(d)
    f = phi(s)
    # only at |dS| = 0 may a factor be infinite (phi(0) with alpha < 0): the family's limit
    # s phi(s) -> 0 makes that term 0 (a finite phi(0), e.g. CFG's omega, is kept)
    f = torch.where((s == 0) & ~torch.isfinite(f), torch.zeros_like(f), f)
    if not bool(torch.isfinite(f).all()):
        raise ValueError("phi returned a non-finite guidance factor at a non-zero |dS| "
                         "(non-finite predictions, or a factor that overflows)")
    return pred_cond + f * d


def power_law_guidance(pred_cond, pred_uncond, omega: float, alpha: float = 0.9, score_scale=1.0):
    """Power-law guidance ``pred_c + omega |dS|^alpha (pred_c - pred_u)``; ``alpha = 0`` is CFG.

    ``alpha = 0.9`` is the value the paper's summaries report for latent-space models (a default of
    the method's public ComfyUI port as well); ``omega`` has no universal default.
    """
    _check_params(omega, alpha)
    return nonlinear_guidance(pred_cond, pred_uncond, lambda s: omega * s.pow(alpha), score_scale)


def _check_params(omega, alpha):
    if not (isinstance(omega, (int, float)) and math.isfinite(omega) and omega >= 0):
        raise ValueError(f"omega must be a finite number >= 0, got {omega!r}")
    if not (isinstance(alpha, (int, float)) and math.isfinite(alpha) and alpha > -1):
        raise ValueError(f"alpha must be a finite number > -1 (so that s * phi(s) -> 0 as s -> 0), got {alpha!r}")


class NonLinearGuidance:
    """Guidance callable ``(pred_cond, pred_uncond, score_scale) -> pred`` for a factor ``phi``."""

    def __init__(self, phi: Callable[[torch.Tensor], torch.Tensor]):
        if not callable(phi):
            raise TypeError("phi must be callable: norms (B, 1, ...) -> factors")
        self.phi = phi

    def __call__(self, pred_cond, pred_uncond, score_scale=1.0):
        return nonlinear_guidance(pred_cond, pred_uncond, self.phi, 1.0 if score_scale is None else score_scale)


class PowerLawGuidance(NonLinearGuidance):
    """Power-law guidance as a guidance callable (``omega``, ``alpha`` as in
    :func:`power_law_guidance`)."""

    def __init__(self, omega: float, alpha: float = 0.9):
        _check_params(omega, alpha)
        self.omega, self.alpha = float(omega), float(alpha)
        super().__init__(lambda s: self.omega * s.pow(self.alpha))

    def __repr__(self):
        return f"PowerLawGuidance(omega={self.omega}, alpha={self.alpha})"
