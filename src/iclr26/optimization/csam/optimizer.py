"""SAM and CSAM as ``torch.optim.Optimizer`` subclasses.

Paper: "Towards Understanding The Calibration Benefits of Sharpness-Aware Minimization",
C. Tan et al., ICLR 2026, arXiv:2505.23866. Official code: none public.

SAM (Foret et al., 2021) takes two gradient evaluations per step (paper, Sec. 2):

    theta_tilde = theta + rho * g / ||g||            (ascent, g = grad L(theta))
    theta      <- base_step(theta, grad L(theta_tilde))   (descent with the perturbed gradient)

CSAM (paper, Sec. 4) keeps the ascent step of SAM (cross-entropy) and changes only the per-sample
loss that is differentiated at the perturbed point ``theta_tilde``: with
p = softmax(f(x; theta_tilde))_y,

    l_tilde = -log p                        if p <= 1/2
    l_tilde = -(1 + p)^(-gamma) * log p     if p >  1/2

so confident samples are pushed less towards probability one (see :func:`csam_loss`).
"""
from __future__ import annotations

import inspect
import math
from typing import Callable

import numpy as np
import torch
import torch.nn.functional as F

__all__ = ["SAM", "CSAM", "csam_loss"]


def _number(x) -> bool:
    """A real scalar: Python int/float or a NumPy real scalar (bools are rejected)."""
    return isinstance(x, (int, float, np.integer, np.floating)) and not isinstance(x, (bool, np.bool_))


def _check_gamma(gamma) -> None:
    if not (_number(gamma) and math.isfinite(gamma) and gamma >= 0):
        raise ValueError(f"gamma must be a finite number >= 0 (the paper uses 0.5, 1 and 2), got {gamma!r}")


def _check_threshold(threshold) -> None:
    if not (_number(threshold) and 0.0 < threshold < 1.0):
        raise ValueError(f"threshold must be a number in (0, 1) (the paper uses 1/2), got {threshold!r}")


def csam_loss(logits: torch.Tensor, target: torch.Tensor, gamma: float = 1.0,
              threshold: float = 0.5, reduction: str = "mean") -> torch.Tensor:
    """CSAM's descent-step loss (paper Sec. 4, the piecewise loss in the module docstring).

    ``logits``: (N, C) scores; ``target``: (N,) class indices. ``gamma`` >= 0 (the paper uses
    0.5, 1 and 2; gamma = 0 gives cross-entropy exactly). ``threshold`` is the probability above
    which a sample counts as confident (1/2 in the paper). The weight ``(1 + p)^-gamma`` is part
    of the loss and is differentiated through, as the formula is written: per sample,
    ``d l / d logits = (onehot(y) - softmax) * (gamma p (1 + p)^(-gamma-1) log p - (1 + p)^-gamma)``
    for a confident sample.
    """
    if logits.ndim != 2:
        raise ValueError(f"logits must have shape (N, C), got {tuple(logits.shape)}")
    if target.ndim != 1 or target.shape[0] != logits.shape[0]:
        raise ValueError(f"target must have shape ({logits.shape[0]},), got {tuple(target.shape)}")
    _check_gamma(gamma)
    _check_threshold(threshold)
    if reduction not in ("mean", "sum", "none"):
        raise ValueError(f"reduction must be 'mean', 'sum' or 'none', got {reduction!r}")
    if logits.shape[0] == 0:
        raise ValueError("logits is an empty batch: the CSAM loss needs at least one sample")
    if not torch.isfinite(logits).all():
        raise ValueError("logits holds NaN or inf values")
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
    ViTs; paper Sec. 5). ``adaptive=True`` scales the perturbation by ``|theta|`` (ASAM; not
    used in the paper).

    Use either ``step(closure)``, where ``closure()`` zeroes nothing, computes the loss, calls
    ``backward()`` and returns the loss (it is called twice: at theta and at theta_tilde), or
    call ``first_step()`` / ``second_step()`` yourself around two backward passes.

    The wrapper and the base optimizer share one ``param_groups`` list and one ``state``, so LR
    schedulers attached to the SAM instance drive the base optimizer, and ``state_dict()`` has the
    standard ``torch.optim`` layout (``{"state": ..., "param_groups": [...]}``, the groups holding
    ``rho`` and ``adaptive`` beside the base optimizer's hyperparameters; the state holds the base
    optimizer's buffers, e.g. ``momentum_buffer``).
    """

    def __init__(self, params, base_optimizer: type = torch.optim.SGD, rho: float = 0.05,
                 adaptive: bool = False, **kwargs):
        self._check_rho(rho)
        if not (isinstance(base_optimizer, type) and issubclass(base_optimizer, torch.optim.Optimizer)):
            raise TypeError("base_optimizer must be a torch.optim.Optimizer subclass "
                            f"(e.g. torch.optim.SGD), got {base_optimizer!r}")
        if not isinstance(adaptive, bool):
            raise TypeError(f"adaptive must be a bool, got {adaptive!r}")
        defaults = dict(rho=float(rho), adaptive=adaptive, **kwargs)
        super().__init__(params, defaults)
        for group in self.param_groups:
            self._check_rho(group["rho"])
        self.base_optimizer = base_optimizer(self.param_groups, **kwargs)
        self._link()
        self.defaults.update(self.base_optimizer.defaults)

    @staticmethod
    def _check_rho(rho) -> None:
        if not (_number(rho) and math.isfinite(rho) and rho >= 0.0):
            raise ValueError(f"rho must be a finite number >= 0 (the paper uses 0.05 and 0.2), got {rho!r}")

    def _link(self) -> None:
        """One param_groups list and one state for the wrapper and the base optimizer."""
        self.base_optimizer.__setstate__({"state": self.state, "param_groups": self.param_groups})

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
        """Move to theta_tilde = theta + rho * g / ||g|| (the SAM ascent step)."""
        norm = self._grad_norm()
        if not torch.isfinite(norm):
            raise FloatingPointError(f"SAM first_step: the gradient norm is {float(norm)} (NaN or inf gradients)")
        for group in self.param_groups:
            scale = group["rho"] / (norm + 1e-12)
            for p in group["params"]:
                if p.grad is None:
                    continue
                e = p.grad * scale
                if group["adaptive"]:
                    e = e * p.pow(2)
                self.state[p]["old_p"] = p.detach().clone()   # restored exactly by second_step
                p.add_(e)
        if zero_grad:
            self.zero_grad(set_to_none=True)

    @torch.no_grad()
    def second_step(self, zero_grad: bool = True) -> None:
        """Return to theta and apply the base optimizer with the gradient taken at theta_tilde."""
        for group in self.param_groups:
            for p in group["params"]:
                old = self.state[p].pop("old_p", None) if p in self.state else None
                if old is not None:
                    p.copy_(old)
        self.base_optimizer.step()
        if zero_grad:
            self.zero_grad(set_to_none=True)

    def step(self, closure: Callable | None = None):
        """One SAM step. ``closure`` is required: it must compute the loss and call backward."""
        if closure is None:
            raise ValueError("SAM needs a closure: step(closure) evaluates the loss twice "
                             "(at theta and at the perturbed theta); closure() must call backward()")
        with torch.enable_grad():
            self.zero_grad(set_to_none=True)
            loss = closure()
        if isinstance(loss, torch.Tensor) and not torch.isfinite(loss).all():
            raise FloatingPointError(f"{type(self).__name__}.step: the closure returned a non-finite loss {loss}")
        self.first_step(zero_grad=True)
        with torch.enable_grad():
            closure()
        self.second_step(zero_grad=True)
        return loss

    def load_state_dict(self, state_dict) -> None:
        """Load a state dict of the standard ``torch.optim`` layout (e.g. from ``state_dict()``)."""
        if not (isinstance(state_dict, dict) and {"state", "param_groups"} <= set(state_dict)):
            raise ValueError("state_dict must have the torch.optim layout: a dict with keys "
                             "'state' and 'param_groups' (as returned by state_dict())")
        for group in state_dict["param_groups"]:
            if "rho" not in group:
                raise ValueError("state_dict param_groups lack 'rho': it does not come from SAM/CSAM")
            self._check_rho(group["rho"])
        super().load_state_dict(state_dict)
        self._link()


class CSAM(SAM):
    """Calibrated SAM (paper Sec. 4): SAM whose descent gradient is that of :func:`csam_loss`.

    ``CSAM(params, base_optimizer=torch.optim.SGD, rho=0.05, gamma=1.0, threshold=0.5,
    **base_kwargs)``. ``gamma`` in [0, 2] in the paper (0.5, 1, 2); ``gamma = 0`` is exactly SAM.
    ``gamma`` and ``threshold`` are stored in every param group (so ``state_dict`` carries them);
    the loss is per sample, so all groups must share one value of each.

    ``step(closure)`` calls ``closure(loss_fn)`` twice: first with plain cross-entropy (the ascent
    step is SAM's), then with the CSAM loss at the perturbed point. The closure must compute
    ``loss = loss_fn(logits, target)``, call ``loss.backward()`` and return the loss. The
    returned loss is the cross-entropy at theta.
    """

    def __init__(self, params, base_optimizer: type = torch.optim.SGD, rho: float = 0.05,
                 gamma: float = 1.0, adaptive: bool = False, threshold: float = 0.5, **kwargs):
        _check_gamma(gamma)
        _check_threshold(threshold)
        super().__init__(params, base_optimizer=base_optimizer, rho=rho, adaptive=adaptive, **kwargs)
        for group in self.param_groups:
            group.setdefault("gamma", float(gamma))
            group.setdefault("threshold", float(threshold))
        self.defaults.update(gamma=float(gamma), threshold=float(threshold))
        self._check_groups(self.param_groups)

    @staticmethod
    def _check_groups(groups) -> None:
        for key, check in (("gamma", _check_gamma), ("threshold", _check_threshold)):
            values = {g.get(key) for g in groups}
            if len(values) != 1:
                raise ValueError(f"all param groups must share one {key} (the CSAM loss is per "
                                 f"sample, not per parameter), got {sorted(map(str, values))}")
            check(values.pop())

    @property
    def gamma(self) -> float:
        return self.param_groups[0]["gamma"]

    @property
    def threshold(self) -> float:
        return self.param_groups[0]["threshold"]

    def descent_loss(self, logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        """The loss differentiated at theta_tilde: :func:`csam_loss` with this optimizer's gamma."""
        return csam_loss(logits, target, gamma=self.gamma, threshold=self.threshold)

    def step(self, closure: Callable | None = None):
        if closure is None:
            raise ValueError("CSAM needs a closure: step(closure) calls closure(loss_fn) twice; "
                             "closure must compute loss_fn(logits, target), call backward() and return it")
        try:
            inspect.signature(closure).bind(F.cross_entropy)
        except TypeError:
            raise TypeError("CSAM's closure takes one argument, loss_fn: it must compute loss_fn(logits, target), "
                            "call backward() and return the loss (a SAM-style closure() with no argument "
                            "cannot receive the CSAM loss)") from None
        except ValueError:      # no signature (a builtin): let the call decide
            pass
        with torch.enable_grad():
            self.zero_grad(set_to_none=True)
            loss = closure(F.cross_entropy)
        if isinstance(loss, torch.Tensor) and not torch.isfinite(loss).all():
            raise FloatingPointError(f"CSAM.step: the closure returned a non-finite loss {loss}")
        self.first_step(zero_grad=True)
        with torch.enable_grad():
            closure(self.descent_loss)
        self.second_step(zero_grad=True)
        return loss

    def load_state_dict(self, state_dict) -> None:
        if isinstance(state_dict, dict) and isinstance(state_dict.get("param_groups"), list):
            self._check_groups(state_dict["param_groups"])
        super().load_state_dict(state_dict)
