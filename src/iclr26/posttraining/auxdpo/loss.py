"""AuxDPO loss (arXiv:2510.20413, Section 5, the AuxDPO objective) in batched torch form.

For a batch of ``n`` preference pairs ``(s_i, a_w_i, a_l_i)`` with DPO margin
``m_i = beta * [(log pi(a_w|s) - log pi0(a_w|s)) - (log pi(a_l|s) - log pi0(a_l|s))]`` the loss is

    L(theta, delta) = -(1/n) sum_i log sigmoid(m_i + delta_w_i - delta_l_i)
                      + lambda_null * || A_B delta_B ||^2 + lambda_amp * || delta_B ||^2

where ``delta_B`` stacks the auxiliary offsets of the batch (one per chosen and one per rejected
response) and the columns of ``A_B`` are ``rho(s) pi0(a|s) grad log pi0(a|s)`` of the same responses
(the matrix ``A_{rho, theta0}`` of Section 4). With ``delta = 0`` the loss is the DPO loss.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

__all__ = ["auxdpo_loss", "dpo_loss", "ipo_loss"]


def _check_batch(**tensors):
    shape = None
    for name, t in tensors.items():
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if t.dim() != 1:
            raise ValueError(f"{name} must be 1-D (one value per pair), got shape {tuple(t.shape)}")
        if shape is None:
            shape = t.shape
        elif t.shape != shape:
            raise ValueError(f"{name} has shape {tuple(t.shape)}; all per-pair inputs must have shape {tuple(shape)}")


def _check_beta(beta, name="beta"):
    if isinstance(beta, bool) or not (isinstance(beta, (int, float)) and beta > 0 and beta < float("inf")):
        raise ValueError(f"{name} must be a positive finite number, got {beta!r}")


def dpo_loss(policy_chosen_logps, policy_rejected_logps, ref_chosen_logps, ref_rejected_logps, beta: float = 0.1):
    """Per-pair DPO loss ``-log sigmoid(beta * (chosen log-ratio - rejected log-ratio))`` (Rafailov et al. 2023)."""
    _check_beta(beta)
    _check_batch(policy_chosen_logps=policy_chosen_logps, policy_rejected_logps=policy_rejected_logps,
                 ref_chosen_logps=ref_chosen_logps, ref_rejected_logps=ref_rejected_logps)
    h = (policy_chosen_logps - ref_chosen_logps) - (policy_rejected_logps - ref_rejected_logps)
    return -F.logsigmoid(beta * h)


def ipo_loss(policy_chosen_logps, policy_rejected_logps, ref_chosen_logps, ref_rejected_logps, tau: float = 0.1):
    """Per-pair IPO loss ``(h - 1/(2 tau))^2`` on the log-ratio difference ``h`` (Azar et al. 2024, Eq. 17)."""
    _check_beta(tau, "tau")
    _check_batch(policy_chosen_logps=policy_chosen_logps, policy_rejected_logps=policy_rejected_logps,
                 ref_chosen_logps=ref_chosen_logps, ref_rejected_logps=ref_rejected_logps)
    h = (policy_chosen_logps - ref_chosen_logps) - (policy_rejected_logps - ref_rejected_logps)
    return (h - 1.0 / (2.0 * tau)) ** 2


def auxdpo_loss(policy_chosen_logps, policy_rejected_logps, ref_chosen_logps, ref_rejected_logps,
                delta_chosen, delta_rejected, beta: float = 0.1, *, A_chosen=None, A_rejected=None,
                lambda_null: float = 0.0, lambda_amp: float = 0.0, reduction: str = "mean"):
    """AuxDPO loss of a batch (arXiv:2510.20413, Section 5).

    Parameters
    ----------
    policy_*_logps, ref_*_logps : (n,) summed log-probabilities of the chosen / rejected responses
        under the policy and the reference (base) policy.
    delta_chosen, delta_rejected : (n,) auxiliary offsets added to the chosen / rejected implicit rewards.
    beta : KL coefficient of the implicit reward ``beta * log(pi / pi0)``.
    A_chosen, A_rejected : optional (d, n) columns of ``A_{rho, theta0}`` for the batch's responses
        (``rho(s) pi0(a|s) grad log pi0(a|s)``); required when ``lambda_null > 0``.
    lambda_null : weight of the null-space penalty ``||A_B delta_B||^2``.
    lambda_amp : weight of the amplitude penalty ``||delta_B||^2``.
    reduction : "mean" (the loss) or "none" (per-pair preference terms; penalties are then not added).
    """
    _check_beta(beta)
    _check_batch(policy_chosen_logps=policy_chosen_logps, policy_rejected_logps=policy_rejected_logps,
                 ref_chosen_logps=ref_chosen_logps, ref_rejected_logps=ref_rejected_logps,
                 delta_chosen=delta_chosen, delta_rejected=delta_rejected)
    for name, lam in (("lambda_null", lambda_null), ("lambda_amp", lambda_amp)):
        if not (isinstance(lam, (int, float)) and lam >= 0):
            raise ValueError(f"{name} must be a non-negative number, got {lam!r}")
    if reduction not in ("mean", "none"):
        raise ValueError(f"reduction must be 'mean' or 'none', got {reduction!r}")
    h = (policy_chosen_logps - ref_chosen_logps) - (policy_rejected_logps - ref_rejected_logps)
    per_pair = -F.logsigmoid(beta * h + delta_chosen - delta_rejected)
    if reduction == "none":
        return per_pair
    loss = per_pair.mean()
    if lambda_null > 0:
        if A_chosen is None or A_rejected is None:
            raise ValueError("lambda_null > 0 needs A_chosen and A_rejected (the (d, n) columns of A for the batch)")
        n = delta_chosen.shape[0]
        for name, A in (("A_chosen", A_chosen), ("A_rejected", A_rejected)):
            if not isinstance(A, torch.Tensor) or A.dim() != 2 or A.shape[1] != n:
                raise ValueError(f"{name} must be a (d, {n}) tensor, got "
                                 f"{tuple(A.shape) if isinstance(A, torch.Tensor) else type(A).__name__}")
        Ad = A_chosen @ delta_chosen + A_rejected @ delta_rejected
        loss = loss + lambda_null * (Ad ** 2).sum()
    if lambda_amp > 0:
        loss = loss + lambda_amp * ((delta_chosen ** 2).sum() + (delta_rejected ** 2).sum())
    return loss
