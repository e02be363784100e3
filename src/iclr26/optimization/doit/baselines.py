"""Baselines for DOIT: random switching between the same candidates, and SWATS.

SWATS: Keskar & Socher, "Improving Generalization Performance by Switching from Adam to SGD"
(arXiv:1712.07628), Algorithm 1: run Adam; at each step estimate the SGD learning rate that would
give the Adam step's projection, ``gamma_k = p^T p / (-p^T g)`` with ``p`` the Adam step and ``g``
the gradient, average it ``lambda_k = beta2 lambda_{k-1} + (1 - beta2) gamma_k``, and switch to SGD
with momentum ``beta1`` and learning rate ``lambda_k / (1 - beta2^k)`` once
``|lambda_k / (1 - beta2^k) - gamma_k| < eps`` (``eps = 1e-9`` in the paper), ``k > 1``.
"""
from __future__ import annotations

import math

import numpy as np
import torch

from .interleave import Interleaver


class RandomInterleaving(Interleaver):
    """The DOIT stage loop with the next optimizer drawn uniformly at random (the control arm)."""

    def choose(self, feats: np.ndarray) -> str:
        return self.rng.choice(self.names)


class SWATS(torch.optim.Optimizer):
    """Adam that switches to SGD with momentum (Keskar & Socher 2017, Algorithm 1)."""

    def __init__(self, params, lr: float = 1e-3, betas=(0.9, 0.999), eps: float = 1e-8, switch_eps: float = 1e-9,
                 weight_decay: float = 0.0):
        if not lr > 0:
            raise ValueError(f"lr must be > 0, got {lr}")
        if not (0 <= betas[0] < 1 and 0 <= betas[1] < 1):
            raise ValueError(f"betas must lie in [0, 1), got {betas}")
        if not switch_eps > 0:
            raise ValueError(f"switch_eps must be > 0, got {switch_eps}")
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps, switch_eps=switch_eps, weight_decay=weight_decay,
                                      phase="adam", sgd_lr=None, lam=0.0, k=0))

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for g in self.param_groups:
            ps = [p for p in g["params"] if p.grad is not None]
            if not ps:
                continue
            b1, b2 = g["betas"]
            grads = [p.grad.add(p, alpha=g["weight_decay"]) if g["weight_decay"] else p.grad for p in ps]
            if g["phase"] == "sgd":
                for p, gr in zip(ps, grads):
                    st = self.state[p]
                    buf = st.setdefault("v", torch.zeros_like(p))
                    buf.mul_(b1).add_(gr)
                    p.add_(buf, alpha=-(1 - b1) * g["sgd_lr"])
                continue
            g["k"] += 1
            k = g["k"]
            steps, pg, pp = [], 0.0, 0.0
            for p, gr in zip(ps, grads):
                st = self.state[p]
                m = st.setdefault("m", torch.zeros_like(p))
                v = st.setdefault("vv", torch.zeros_like(p))
                m.mul_(b1).add_(gr, alpha=1 - b1)
                v.mul_(b2).addcmul_(gr, gr, value=1 - b2)
                mh = m / (1 - b1 ** k)
                vh = v / (1 - b2 ** k)
                step = -g["lr"] * mh / (vh.sqrt() + g["eps"])
                steps.append(step)
                pg += float((step * gr).sum())
                pp += float((step * step).sum())
            for p, s in zip(ps, steps):
                p.add_(s)
            if pg != 0:
                gamma = pp / (-pg)
                g["lam"] = b2 * g["lam"] + (1 - b2) * gamma
                corrected = g["lam"] / (1 - b2 ** k)
                if k > 1 and gamma > 0 and abs(corrected - gamma) < g["switch_eps"]:
                    g["phase"], g["sgd_lr"] = "sgd", corrected
                    g["switched_at"] = k
        return loss

    @property
    def switched(self) -> bool:
        return all(g["phase"] == "sgd" for g in self.param_groups)
