"""DART: instance-level inverse-OT matching plus reliability-weighted unbalanced Wasserstein
feature alignment.

Paper: "Beyond Instance-Level Alignment: Dual-Level Optimal Transport for Audio-Text Retrieval"
(DART, Dual-level Alignment via Robust Transport), ICLR 2026, OpenReview cFhcd4WGjO. No official
code is public; the instance-level loss follows its predecessor m-LTM (Luong et al., ICLR 2024,
github.com/v-manhlt3/m-LTM-Audio-Text-Retrieval, ``tools/loss.py``).

All losses take two batches of paired embeddings ``emb_a`` (B, d) and ``emb_b`` (B, d) whose row i
are presumed to match, and return a scalar tensor. The optimal-transport solves use POT
(``ot.sinkhorn`` in the log domain, ``ot.unbalanced.sinkhorn_unbalanced``) with its torch backend.
"""
from __future__ import annotations

import math
import warnings

import ot
import torch
import torch.nn.functional as F
from torch import nn

__all__ = [
    "info_nce_loss",
    "iot_loss",
    "reliability_scores",
    "feature_cost",
    "feature_transport_plan",
    "uwd_loss",
    "InfoNCELoss",
    "IOTLoss",
    "DARTLoss",
]


# --------------------------------------------------------------------------------------- checks
def _check_pair(emb_a, emb_b, name_a="emb_a", name_b="emb_b", min_rows=2):
    for name, t in ((name_a, emb_a), (name_b, emb_b)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if t.dim() != 2:
            raise ValueError(f"{name} must be 2-d (batch, dim), got shape {tuple(t.shape)}")
        if not t.is_floating_point():
            raise TypeError(f"{name} must be a floating-point tensor, got {t.dtype}")
        if t.shape[0] < min_rows:
            raise ValueError(f"{name} needs at least {min_rows} rows, got {t.shape[0]}")
        if not torch.isfinite(t).all():
            raise ValueError(f"{name} contains NaN or infinite values")
    if emb_a.shape[0] != emb_b.shape[0]:
        raise ValueError(f"emb_a and emb_b must have the same batch size, got {emb_a.shape[0]} and {emb_b.shape[0]}")


def _positive(name, value):
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be a number, got {type(value).__name__}")
    if not (math.isfinite(value) and value > 0):
        raise ValueError(f"{name} must be a positive finite number, got {value}")
    return float(value)


def _nonneg(name, value):
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be a number, got {type(value).__name__}")
    if not (math.isfinite(value) and value >= 0):
        raise ValueError(f"{name} must be a non-negative finite number, got {value}")
    return float(value)


def _int_at_least(name, value, lo):
    if isinstance(value, bool) or not isinstance(value, int) or value < lo:
        raise ValueError(f"{name} must be an integer >= {lo}, got {value!r}")
    return value


def _finite_loss(loss: torch.Tensor, what: str) -> torch.Tensor:
    if not torch.isfinite(loss):
        raise FloatingPointError(f"{what} is not finite ({float(loss)}): training cannot continue")
    return loss


# ----------------------------------------------------------------------------- instance level
def info_nce_loss(emb_a: torch.Tensor, emb_b: torch.Tensor, temperature: float = 0.07) -> torch.Tensor:
    """Symmetric InfoNCE on cosine similarities / ``temperature`` (CLIP / m-LTM ``NTXent``)."""
    _check_pair(emb_a, emb_b)
    t = _positive("temperature", temperature)
    logits = F.normalize(emb_a, dim=1) @ F.normalize(emb_b, dim=1).T / t
    target = torch.arange(emb_a.shape[0], device=emb_a.device)
    loss = 0.5 * (F.cross_entropy(logits, target) + F.cross_entropy(logits.T, target))
    return _finite_loss(loss, "InfoNCE loss")


def iot_loss(emb_a: torch.Tensor, emb_b: torch.Tensor, eps: float = 0.03, n_iter: int = 50) -> torch.Tensor:
    """Instance-level inverse-OT loss KL(Pi_hat || Pi(theta, phi)).

    ``C_ij = ||a_i - b_j||_2 / max C``, the Euclidean (not squared) distance divided by its max, as
    in m-LTM ``tools/loss.py`` (``MahalalobisLoss``: the square root of the Mahalanobis distance,
    ``M = I`` here, divided by its max; ``torch.cdist``, whose gradient at a zero distance is 0);
    ``Pi`` is the entropic plan between uniform marginals (``ot.sinkhorn``, log domain, ``eps``
    0.03 from m-LTM's settings file), differentiated through the Sinkhorn iterations; the target
    is the ground-truth matching ``Pi_hat = I / B``, so ``KL = -(1/B) sum_i log(B Pi_ii)``, which is
    zero exactly when ``Pi = I / B``.
    """
    _check_pair(emb_a, emb_b)
    eps = _positive("eps", eps)
    n_iter = _int_at_least("n_iter", n_iter, 1)
    n = emb_a.shape[0]
    cost = torch.cdist(emb_a, emb_b, p=2)  # Euclidean, as m-LTM (sqrt of the squared distance)
    cost = cost / cost.max().clamp_min(torch.finfo(cost.dtype).tiny)
    w = torch.full((n,), 1.0 / n, dtype=emb_a.dtype, device=emb_a.device)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # POT warns when n_iter is reached before stopThr
        plan = ot.sinkhorn(w, w, cost, eps, method="sinkhorn_log", numItermax=n_iter, stopThr=0.0)
    diag = torch.diagonal(plan).clamp_min(torch.finfo(plan.dtype).tiny)
    loss = -(torch.log(n * diag)).mean()
    return _finite_loss(loss, "IOT loss")


# ------------------------------------------------------------------------------ feature level
def _excess_kurtosis(x: torch.Tensor) -> torch.Tensor:
    z = x - x.mean(0, keepdim=True)
    var = (z ** 2).mean(0)
    return (z ** 4).mean(0) / var.clamp_min(1e-12) ** 2 - 3.0


def reliability_scores(U: torch.Tensor, V: torch.Tensor) -> torch.Tensor:
    """Per-channel reliability ``r_j = sigmoid(corr_j - var_j - kurt_j)`` of a batch (no EMA).

    ``corr_j``: Pearson correlation over the batch between channel j of ``U`` and of ``V`` (the
    cross-modal consistency); ``var_j``: the mean of the two modalities' variances of channel j;
    ``kurt_j``: the mean of their excess kurtoses (heavy-tailed, transient channels score low).
    The paper combines the three statistics this way; how it scales and averages the two
    modalities was not readable, so the mean over modalities is this library's choice.
    Computed without gradients; shape (d,).
    """
    _check_pair(U, V, "U", "V")
    if U.shape[1] != V.shape[1]:
        raise ValueError(f"U and V must have the same number of channels, got {U.shape[1]} and {V.shape[1]}")
    with torch.no_grad():
        zu = U - U.mean(0, keepdim=True)
        zv = V - V.mean(0, keepdim=True)
        var_u, var_v = (zu ** 2).mean(0), (zv ** 2).mean(0)
        corr = (zu * zv).mean(0) / (var_u * var_v).sqrt().clamp_min(1e-12)
        var = 0.5 * (var_u + var_v)
        kurt = 0.5 * (_excess_kurtosis(U) + _excess_kurtosis(V))
        return torch.sigmoid(corr - var - kurt)


def feature_cost(U: torch.Tensor, V: torch.Tensor) -> torch.Tensor:
    """Channel-to-channel cost ``C[i, j] = ||U[:, i] - V[:, j]||_2`` over the batch, shape (d_u, d_v)."""
    _check_pair(U, V, "U", "V")
    return torch.cdist(U.T.contiguous(), V.T.contiguous(), p=2)


def feature_transport_plan(cost: torch.Tensor, u: torch.Tensor, v: torch.Tensor, reg: float = 0.05,
                           reg_m: float = 1.0, n_iter: int = 50) -> torch.Tensor:
    """Entropic unbalanced plan ``argmin <C, P> + reg KL(P || u v^T) + reg_m (KL(P1 || u) + KL(P^T 1 || v))``.

    (POT's ``reg_type="kl"``: the entropic term is relative to the product of the marginals.)

    Solved by ``ot.unbalanced.sinkhorn_unbalanced`` (torch backend) on the detached cost divided
    by its max (the same scaling as the instance level); the plan is returned detached.
    """
    if not isinstance(cost, torch.Tensor) or cost.dim() != 2:
        raise ValueError("cost must be a 2-d torch.Tensor")
    reg = _positive("reg", reg)
    reg_m = _positive("reg_m", reg_m)
    n_iter = _int_at_least("n_iter", n_iter, 1)
    for name, m, size in (("u", u, cost.shape[0]), ("v", v, cost.shape[1])):
        if not isinstance(m, torch.Tensor) or m.shape != (size,):
            raise ValueError(f"{name} must be a tensor of shape ({size},)")
        if not torch.isfinite(m).all() or (m < 0).any() or float(m.sum()) <= 0:
            raise ValueError(f"{name} must be finite, non-negative and not all zero")
    with torch.no_grad():
        c = cost.detach()
        c = c / c.max().clamp_min(torch.finfo(c.dtype).tiny)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            plan = ot.unbalanced.sinkhorn_unbalanced(u.to(c), v.to(c), c, reg, reg_m,
                                                     method="sinkhorn", numItermax=n_iter)
    if not torch.isfinite(plan).all():
        raise FloatingPointError("unbalanced Sinkhorn returned a non-finite plan; raise reg")
    return plan


def uwd_loss(U: torch.Tensor, V: torch.Tensor, u: torch.Tensor | None = None, v: torch.Tensor | None = None,
             reg: float = 0.05, reg_m: float = 1.0, n_iter: int = 50) -> torch.Tensor:
    """Feature-level term ``<C_feat, P>`` with the plan ``P`` detached (uniform marginals by default)."""
    _check_pair(U, V, "U", "V")
    cost = feature_cost(U, V)
    if u is None:
        u = torch.full((U.shape[1],), 1.0 / U.shape[1], dtype=U.dtype, device=U.device)
    if v is None:
        v = torch.full((V.shape[1],), 1.0 / V.shape[1], dtype=V.dtype, device=V.device)
    plan = feature_transport_plan(cost, u, v, reg=reg, reg_m=reg_m, n_iter=n_iter)
    return _finite_loss((cost * plan).sum(), "UWD loss")


# ------------------------------------------------------------------------------------ modules
class InfoNCELoss(nn.Module):
    """``InfoNCELoss(temperature)(emb_a, emb_b)``: symmetric InfoNCE."""

    def __init__(self, temperature: float = 0.07):
        super().__init__()
        self.temperature = _positive("temperature", temperature)

    def forward(self, emb_a, emb_b):
        return info_nce_loss(emb_a, emb_b, self.temperature)


class IOTLoss(nn.Module):
    """``IOTLoss(eps, n_iter)(emb_a, emb_b)``: the instance-level inverse-OT loss (m-LTM)."""

    def __init__(self, eps: float = 0.03, n_iter: int = 50):
        super().__init__()
        self.eps = _positive("eps", eps)
        self.n_iter = _int_at_least("n_iter", n_iter, 1)

    def forward(self, emb_a, emb_b):
        return iot_loss(emb_a, emb_b, self.eps, self.n_iter)


class DARTLoss(nn.Module):
    """DART objective ``L_IOT + lam * <C_feat, P>`` with reliability-weighted marginals.

    ``r`` is an exponential moving average (``ema`` = 0.9, as the paper's notes give) of
    :func:`reliability_scores` over training batches, kept in the buffer ``reliability``; the
    marginals are ``u = v = r / sum r``. ``marginals="uniform"`` replaces them by ``1/d`` (the
    control that removes the reliability weighting). ``lam = 0`` is exactly :class:`IOTLoss`.
    The EMA is updated only in training mode; the embedding widths must be equal.
    """

    def __init__(self, lam: float = 0.1, eps: float = 0.03, reg: float = 0.05, reg_m: float = 1.0,
                 ema: float = 0.9, marginals: str = "reliability", n_iter: int = 50, uot_iter: int = 50):
        super().__init__()
        self.lam = _nonneg("lam", lam)
        self.eps = _positive("eps", eps)
        self.reg = _positive("reg", reg)
        self.reg_m = _positive("reg_m", reg_m)
        if isinstance(ema, bool) or not isinstance(ema, (int, float)) or not 0 <= ema < 1:
            raise ValueError(f"ema must lie in [0, 1), got {ema!r}")
        self.ema = float(ema)
        if marginals not in ("reliability", "uniform"):
            raise ValueError(f"marginals must be 'reliability' or 'uniform', got {marginals!r}")
        self.marginals = marginals
        self.n_iter = _int_at_least("n_iter", n_iter, 1)
        self.uot_iter = _int_at_least("uot_iter", uot_iter, 1)
        self.register_buffer("reliability", torch.empty(0))

    def current_marginals(self, U: torch.Tensor) -> torch.Tensor:
        d = U.shape[1]
        if self.marginals == "uniform":
            return torch.full((d,), 1.0 / d, dtype=U.dtype, device=U.device)
        r = self.reliability.to(U)
        return r / r.sum()

    def update_reliability(self, U: torch.Tensor, V: torch.Tensor) -> None:
        r = reliability_scores(U, V)
        if self.reliability.numel() != r.numel():
            self.reliability = r.clone()
        else:
            self.reliability = self.ema * self.reliability.to(r) + (1 - self.ema) * r

    def forward(self, emb_a, emb_b):
        _check_pair(emb_a, emb_b)
        if emb_a.shape[1] != emb_b.shape[1]:
            raise ValueError(f"DART needs equal embedding widths, got {emb_a.shape[1]} and {emb_b.shape[1]}")
        loss = iot_loss(emb_a, emb_b, self.eps, self.n_iter)
        if self.lam == 0:
            return loss
        if self.training or self.reliability.numel() == 0:
            self.update_reliability(emb_a.detach(), emb_b.detach())
        m = self.current_marginals(emb_a)
        feat = uwd_loss(emb_a, emb_b, m, m, reg=self.reg, reg_m=self.reg_m, n_iter=self.uot_iter)
        return _finite_loss(loss + self.lam * feat, "DART loss")
