"""TI-DPO loss pieces (arXiv:2505.19653, Section 4): the Gaussian position prior, the hybrid token
weights, the token-weighted DPO term and the triplet term, as pure functions of tensors.

Notation (per preference pair, response tokens ``t = 0 .. T-1`` of ``y_w`` or ``y_l``):

* gradient attribution (Eq. 6): ``I_t = || d L_target / d e_t ||_1`` (see :mod:`.importance`);
* Gaussian prior (Section 4.2, Appendix B.6): ``P(t) = exp(-((t - mu) / sigma)^2 / 2)`` with
  ``mu = (T - 1) / 2`` and ``sigma = T / 4``;
* hybrid weights (Eq. 7): ``w_t = lambda * I~_t + (1 - lambda) * P~_t``, where ``I~`` and ``P~`` are
  ``I`` and ``P`` normalised over the response; here each is normalised to sum to ``T`` (mean 1), so
  that uniform weights give back the plain sequence log-ratio (see the README's deviations);
* token-weighted DPO (Eq. 8-9): ``u = sum_t w^w_t log(pi/pi_ref)(y_w^t) - sum_t w^l_t log(pi/pi_ref)(y_l^t)``,
  ``L_DPO-w = -log sigmoid(beta * u)``;
* triplet term (Eq. 4 / Eq. 10): with an anchor ``y ~ pi_theta(.|x)`` and the implicit rewards
  ``r(y) = beta * (weighted) log(pi/pi_ref)(y)``, ``L_tri = max(0, d(y, y_w) - d(y, y_l) + alpha)`` with
  ``d(a, b) = |r(a) - r(b)|``;
* ``L_TI-DPO = L_DPO-w + gamma * L_tri`` (Eq. 11).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

__all__ = ["gaussian_prior", "hybrid_weights", "weighted_logratio", "triplet_loss", "ti_dpo_loss",
           "DEFAULT_BETA", "DEFAULT_GAMMA", "DEFAULT_LAMBDA", "DEFAULT_TRIPLET_MARGIN"]

#: DPO temperature beta = 0.1 (Table B12)
DEFAULT_BETA = 0.1
#: triplet weight gamma = 0.1 (Table B12)
DEFAULT_GAMMA = 0.1
#: hybrid mix lambda = 0.7 (Table B12)
DEFAULT_LAMBDA = 0.7
#: triplet margin alpha = 0.01 (the official run script's ``alpha_triplet``; the paper gives no value)
DEFAULT_TRIPLET_MARGIN = 0.01


def _check_mask(mask, name="mask"):
    if not isinstance(mask, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(mask).__name__}")
    if mask.dim() != 2:
        raise ValueError(f"{name} must be 2-D (batch, tokens), got shape {tuple(mask.shape)}")


def _check_same(ref_name, ref, **tensors):
    for name, t in tensors.items():
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if t.shape != ref.shape:
            raise ValueError(f"{name} has shape {tuple(t.shape)}; it must match {ref_name} {tuple(ref.shape)}")


def _check_positive(name, v):
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not v > 0:
        raise ValueError(f"{name} must be a positive number, got {v!r}")


def _check_nonneg(name, v):
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not v >= 0:
        raise ValueError(f"{name} must be a non-negative number, got {v!r}")


def gaussian_prior(mask: torch.Tensor) -> torch.Tensor:
    """``P(t) = exp(-((t - mu) / sigma)^2 / 2)`` over each row's response tokens (``mask == 1``, in
    order), ``mu = (T - 1) / 2``, ``sigma = T / 4`` with ``T`` the row's response length (Appendix B.6);
    0 where ``mask == 0``. Shape of ``mask``."""
    _check_mask(mask)
    m = (mask > 0).to(torch.float64)
    pos = torch.cumsum(m, dim=1) - 1.0                 # index of each response token within its response
    T = m.sum(dim=1, keepdim=True)
    mu = (T - 1.0) / 2.0
    sigma = (T / 4.0).clamp_min(1e-12)
    p = torch.exp(-0.5 * ((pos - mu) / sigma) ** 2) * m
    return p.to(mask.dtype if mask.is_floating_point() else torch.float32)


def _sum_to_length(x, m):
    """``x`` restricted to ``m`` and rescaled so each row sums to its length (mean 1); a row whose
    restricted sum is 0 becomes uniform (all ones on ``m``)."""
    x = x * m
    s = x.sum(dim=1, keepdim=True)
    T = m.sum(dim=1, keepdim=True)
    uniform = m
    return torch.where(s > 0, x * T / s.clamp_min(torch.finfo(x.dtype).tiny), uniform)


def hybrid_weights(importance: torch.Tensor, mask: torch.Tensor, lam: float = DEFAULT_LAMBDA) -> torch.Tensor:
    """Hybrid token weights ``w = lam * I~ + (1 - lam) * P~`` (Eq. 7).

    ``importance``: (n, L) non-negative gradient attributions ``I_t`` (Eq. 6); ``mask``: (n, L), 1 on
    the response tokens. ``I~`` and ``P~`` (the Gaussian prior) are each normalised to sum to the
    response length ``T`` over the response, so weights average 1 and ``lam`` mixes two distributions
    of one scale. Returns (n, L) float weights, 0 off the response.
    """
    _check_mask(mask)
    _check_same("mask", mask, importance=importance)
    if isinstance(lam, bool) or not isinstance(lam, (int, float)) or not 0.0 <= lam <= 1.0:
        raise ValueError(f"lam must be a number in [0, 1], got {lam!r}")
    if not torch.isfinite(importance).all():
        raise ValueError("importance must be finite: a NaN or inf attribution (a non-finite gradient) "
                         "cannot be normalised into token weights")
    if torch.any(importance < 0):
        raise ValueError("importance must be non-negative (an L1 norm of gradients)")
    dtype = importance.dtype if importance.is_floating_point() else torch.float32
    m = (mask > 0).to(dtype)
    imp = _sum_to_length(importance.to(dtype).detach(), m)
    prior = _sum_to_length(gaussian_prior(m), m)
    return lam * imp + (1.0 - lam) * prior


def weighted_logratio(policy_logps: torch.Tensor, ref_logps: torch.Tensor, mask: torch.Tensor,
                      weights: torch.Tensor | None = None) -> torch.Tensor:
    """``sum_t w_t (log pi(y_t) - log pi_ref(y_t))`` over the response tokens (Eq. 8); per-token inputs of
    shape (n, L); ``weights=None`` means ``w_t = 1`` (the DPO sequence log-ratio). Returns (n,)."""
    _check_mask(mask)
    _check_same("mask", mask, policy_logps=policy_logps, ref_logps=ref_logps)
    if weights is not None:
        _check_same("mask", mask, weights=weights)
    m = (mask > 0).to(policy_logps.dtype)
    w = m if weights is None else weights.to(policy_logps.dtype) * m
    return (w * (policy_logps - ref_logps)).sum(dim=1)


def triplet_loss(anchor_reward: torch.Tensor, chosen_reward: torch.Tensor, rejected_reward: torch.Tensor,
                 margin: float = DEFAULT_TRIPLET_MARGIN) -> torch.Tensor:
    """Per-pair ``max(0, d(a, y_w) - d(a, y_l) + margin)`` with ``d(a, b) = |r(a) - r(b)|`` in
    implicit-reward space (Eq. 4). Inputs (n,); returns (n,)."""
    for name, t in (("anchor_reward", anchor_reward), ("chosen_reward", chosen_reward),
                    ("rejected_reward", rejected_reward)):
        if not isinstance(t, torch.Tensor) or t.dim() != 1:
            raise ValueError(f"{name} must be a 1-D torch.Tensor (one value per pair)")
    _check_same("anchor_reward", anchor_reward, chosen_reward=chosen_reward, rejected_reward=rejected_reward)
    _check_nonneg("margin", margin)
    d_pos = (anchor_reward - chosen_reward).abs()
    d_neg = (anchor_reward - rejected_reward).abs()
    return F.relu(d_pos - d_neg + margin)


def ti_dpo_loss(policy_chosen_logps, ref_chosen_logps, chosen_mask, policy_rejected_logps, ref_rejected_logps,
                rejected_mask, chosen_weights=None, rejected_weights=None, *, beta: float = DEFAULT_BETA,
                gamma: float = DEFAULT_GAMMA, anchor_logratio=None, margin: float = DEFAULT_TRIPLET_MARGIN,
                reduction: str = "mean"):
    """The TI-DPO loss ``L_DPO-w + gamma * L_tri`` (Eq. 11) of a batch of pairs.

    Parameters
    ----------
    policy_*_logps, ref_*_logps : (n, L) per-token log-probabilities of the chosen / rejected responses
        under the policy and the frozen reference.
    chosen_mask, rejected_mask : (n, L), 1 on response tokens.
    chosen_weights, rejected_weights : (n, L) token weights (:func:`hybrid_weights`); None = uniform.
    beta : DPO temperature (0.1, Table B12).
    gamma : triplet weight (0.1, Table B12); 0 drops the triplet term.
    anchor_logratio : (n,) ``log pi/pi_ref`` of an anchor response sampled from the policy for the same
        prompt (needed when ``gamma > 0``); the anchor's reward is ``beta * anchor_logratio``.
    margin : the triplet margin ``alpha``.
    reduction : "mean" or "none" (per-pair losses).
    """
    _check_positive("beta", beta)
    _check_nonneg("gamma", gamma)
    if reduction not in ("mean", "none"):
        raise ValueError(f"reduction must be 'mean' or 'none', got {reduction!r}")
    u_w = weighted_logratio(policy_chosen_logps, ref_chosen_logps, chosen_mask, chosen_weights)
    u_l = weighted_logratio(policy_rejected_logps, ref_rejected_logps, rejected_mask, rejected_weights)
    if u_w.shape != u_l.shape:
        raise ValueError(f"chosen and rejected batches differ in size: {u_w.shape[0]} vs {u_l.shape[0]}")
    per_pair = -F.logsigmoid(beta * (u_w - u_l))
    if gamma > 0:
        if anchor_logratio is None:
            raise ValueError("gamma > 0 needs anchor_logratio (log pi/pi_ref of a policy sample per prompt); "
                             "pass gamma=0 for the loss without the triplet term")
        per_pair = per_pair + gamma * triplet_loss(beta * anchor_logratio, beta * u_w, beta * u_l, margin)
    return per_pair.mean() if reduction == "mean" else per_pair
