"""SAM and CSAM as ``torch.optim.Optimizer`` subclasses.

Paper: "Towards Understanding The Calibration Benefits of Sharpness-Aware Minimization",
C. Tan et al., ICLR 2026, arXiv:2505.23866. Official code: none public.

SAM (Foret et al., 2021) takes two gradient evaluations per step (paper, Sec. 2):

    theta_tilde = theta + rho * g / ||g||            (ascent, g = grad L(theta))
    theta      <- base_step(theta, grad L(theta_tilde))   (descent with the perturbed gradient)

CSAM (paper, Sec. 4) keeps the ascent step of SAM and changes only the per-sample loss that is
differentiated at the perturbed point ``theta_tilde``: with p = softmax(f(x; theta_tilde))_y,

    l_tilde = -log p                        if p <= 1/2
    l_tilde = -(1 + p)^(-gamma) * log p     if p >  1/2

so confident samples are pushed less towards probability one (see :func:`csam_loss`).
"""
from __future__ import annotations

from typing import Callable

import torch
import torch.nn.functional as F

__all__ = ["SAM", "CSAM", "csam_loss"]


def csam_loss(logits: torch.Tensor, target: torch.Tensor, gamma: float = 1.0,
              threshold: float = 0.5, reduction: str = "mean") -> torch.Tensor:
    """CSAM's descent-step loss (paper Sec. 4, the piecewise loss above).

    ``logits``: (N, C) scores; ``target``: (N,) class indices. ``gamma`` >= 0 (the paper uses
    0.5, 1 and 2; gamma = 0 gives cross-entropy exactly). ``threshold`` is the probability above
    which a sample counts as confident (1/2 in the paper). The weight ``(1 + p)^-gamma`` is part
    of the loss and is differentiated through, as the formula is written.
    """
    if logits.ndim != 2:
        raise ValueError(f"logits must have shape (N, C), got {tuple(logits.shape)}")
    if target.ndim != 1 or target.shape[0] != logits.shape[0]:
        raise ValueError(f"target must have shape ({logits.shape[0]},), got {tuple(target.shape)}")
    if not gamma >= 0:
        raise ValueError(f"gamma must be >= 0, got {gamma!r}")
    if not 0.0 < threshold < 1.0:
        raise ValueError(f"threshold must be in (0, 1), got {threshold!r}")
    if reduction not in ("mean", "sum", "none"):
        raise ValueError(f"reduction must be 'mean', 'sum' or 'none', got {reduction!r}")
    logp = F.log_softmax(logits, dim=-1).gather(1, target[:, None]).squeeze(1)
    p = logp.exp()
    weight = torch.where(p > threshold, (1.0 + p).pow(-gamma), torch.ones_like(p))
    loss = -weight * logp
    if reduction == "mean":
        return loss.mean()
    if reduction == "sum":
        return loss.sum()
    return loss


class SAM(torch.optim.Optimizer):
    """Sharpness-aware minimisation around any base optimizer (Foret et al., 2021).

    ``SAM(params, base_optimizer=torch.optim.SGD, rho=0.05, adaptive=False, **base_kwargs)``.
    ``rho = 0.05`` is the paper's radius for CIFAR-10 / ImageNet ResNets (0.2 for CIFAR-100 and
    ViTs; paper Sec. 5). ``adaptive=True`` scales the perturbation by ``|theta|`` (ASAM).

    Use either ``step(closure)``, where ``closure()`` zeroes nothing, computes the loss, calls
    ``backward()`` and returns the loss (it is called twice: at theta and at theta_tilde), or
    call ``first_step()`` / ``second_step()`` yourself around two backward passes. The
    optimizer's ``param_groups`` are shared with the base optimizer, so LR schedulers attached to
    the SAM instance drive the base optimizer.
    """

    def __init__(self, params, base_optimizer: type = torch.optim.SGD, rho: float = 0.05,
                 adaptive: bool = False, **kwargs):
        if not isinstance(rho, (int, float)) or not rho >= 0.0:
            raise ValueError(f"rho must be a non-negative number, got {rho!r}")
        if not (isinstance(base_optimizer, type) and issubclass(base_optimizer, torch.optim.Optimizer)):
            raise TypeError("base_optimizer must be a torch.optim.Optimizer subclass "
                            f"(e.g. torch.optim.SGD), got {base_optimizer!r}")
        if not isinstance(adaptive, bool):
            raise TypeError(f"adaptive must be a bool, got {adaptive!r}")
        defaults = dict(rho=float(rho), adaptive=adaptive, **kwargs)
        super().__init__(params, defaults)
        self.base_optimizer = base_optimizer(self.param_groups, **kwargs)
        self.param_groups = self.base_optimizer.param_groups
        self.defaults.update(self.base_optimizer.defaults)

    @torch.no_grad()
    def _grad_norm(self) -> torch.Tensor:
        norms = []
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                g = p.grad * p.abs() if group["adaptive"] else p.grad
                norms.append(g.norm(2))
        if not norms:
            return torch.tensor(0.0)
        return torch.stack(norms).norm(2)

    @torch.no_grad()
    def first_step(self, zero_grad: bool = True) -> None:
        """Move to theta_tilde = theta + rho * g / ||g|| (eq. of the SAM ascent step)."""
        norm = self._grad_norm()
        for group in self.param_groups:
            scale = group["rho"] / (norm + 1e-12)
            for p in group["params"]:
                if p.grad is None:
                    continue
                e = p.grad * scale
                if group["adaptive"]:
                    e = e * p.pow(2)
                p.add_(e)
                self.state[p]["e_w"] = e
        if zero_grad:
            self.zero_grad(set_to_none=True)

    @torch.no_grad()
    def second_step(self, zero_grad: bool = True) -> None:
        """Return to theta and apply the base optimizer with the gradient taken at theta_tilde."""
        for group in self.param_groups:
            for p in group["params"]:
                e = self.state[p].pop("e_w", None) if p in self.state else None
                if e is not None:
                    p.sub_(e)
        self.base_optimizer.step()
        if zero_grad:
            self.zero_grad(set_to_none=True)

    def _descent_closure(self, closure: Callable) -> Callable:
        return closure

    def step(self, closure: Callable | None = None):
        """One SAM step. ``closure`` is required: it must compute the loss and call backward."""
        if closure is None:
            raise ValueError("SAM needs a closure: step(closure) evaluates the loss twice "
                             "(at theta and at the perturbed theta); closure() must call backward()")
        with torch.enable_grad():
            self.zero_grad(set_to_none=True)
            loss = closure()
        self.first_step(zero_grad=True)
        with torch.enable_grad():
            self._descent_closure(closure)()
        self.second_step(zero_grad=True)
        return loss

    # The base optimizer keeps the momentum buffers etc.; SAM's own state only holds e_w between
    # the two half-steps. Save and restore both.
    def state_dict(self):
        return {"sam": super().state_dict(), "base": self.base_optimizer.state_dict()}

    def load_state_dict(self, state_dict):
        if not (isinstance(state_dict, dict) and {"sam", "base"} <= set(state_dict)):
            raise ValueError("state_dict must come from SAM.state_dict() (keys 'sam' and 'base')")
        super().load_state_dict(state_dict["sam"])
        self.base_optimizer.load_state_dict(state_dict["base"])
        # keep the two optimizers on the same param_groups after loading
        self.base_optimizer.param_groups = self.param_groups


class CSAM(SAM):
    """Calibrated SAM (paper Sec. 4): SAM whose descent gradient is that of :func:`csam_loss`.

    ``CSAM(params, base_optimizer=torch.optim.SGD, rho=0.05, gamma=1.0, **base_kwargs)``.
    ``gamma`` in [0, 2] in the paper's experiments (0.5, 1, 2); ``gamma = 0`` is exactly SAM.

    ``step(closure)`` calls ``closure(loss_fn)`` twice: first with plain cross-entropy (the ascent
    step is SAM's), then with the CSAM loss at the perturbed point. The closure must compute
    ``loss = loss_fn(logits, target)``, call ``loss.backward()`` and return the loss. The
    returned loss is the cross-entropy at theta.
    """

    def __init__(self, params, base_optimizer: type = torch.optim.SGD, rho: float = 0.05,
                 gamma: float = 1.0, adaptive: bool = False, threshold: float = 0.5, **kwargs):
        if not isinstance(gamma, (int, float)) or not gamma >= 0.0:
            raise ValueError(f"gamma must be a non-negative number (paper uses 0.5, 1, 2), got {gamma!r}")
        if not isinstance(threshold, (int, float)) or not 0.0 < threshold < 1.0:
            raise ValueError(f"threshold must be in (0, 1), got {threshold!r}")
        super().__init__(params, base_optimizer=base_optimizer, rho=rho, adaptive=adaptive, **kwargs)
        self.gamma = float(gamma)
        self.threshold = float(threshold)

    def descent_loss(self, logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return csam_loss(logits, target, gamma=self.gamma, threshold=self.threshold)

    def step(self, closure: Callable | None = None):
        if closure is None:
            raise ValueError("CSAM needs a closure: step(closure) calls closure(loss_fn) twice; "
                             "closure must compute loss_fn(logits, target), call backward() and return it")
        with torch.enable_grad():
            self.zero_grad(set_to_none=True)
            loss = closure(F.cross_entropy)
        self.first_step(zero_grad=True)
        with torch.enable_grad():
            closure(self.descent_loss)
        self.second_step(zero_grad=True)
        return loss

    def state_dict(self):
        sd = super().state_dict()
        sd["csam"] = {"gamma": self.gamma, "threshold": self.threshold}
        return sd

    def load_state_dict(self, state_dict):
        super().load_state_dict(state_dict)
        extra = state_dict.get("csam", {})
        self.gamma = float(extra.get("gamma", self.gamma))
        self.threshold = float(extra.get("threshold", self.threshold))
