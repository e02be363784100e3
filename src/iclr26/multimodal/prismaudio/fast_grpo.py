"""Fast-GRPO for flow-matching models (PrismAudio, arXiv 2511.18833; project page
PrismAudio.github.io, no public code found).

Hybrid ODE/SDE sampling: Euler ODE steps outside a random window of ``window`` steps, Flow-GRPO SDE
steps inside it (Liu et al. 2025, Flow-GRPO, github yifan123/flow_grpo); the Gaussian policy of an SDE
step gives a closed-form likelihood ratio; rewards are a weighted sum of several reward functions,
normalised within each group; the loss is the PPO-style clipped objective averaged over the window.

Convention (that of :mod:`iclr26.models.diffusion`): ``x_t = (1 - t) x_0 + t eps``, the model predicts
``v = eps - x_0``, sampling runs from ``t = 1`` to ``t = 0``. The score is ``-(x + (1 - t) v) / t``, so
the reverse SDE step from ``t`` to ``t - dt`` is
``x' = x - dt [v + sigma_t^2 / (2 t) (x + (1 - t) v)] + sigma_t sqrt(dt) eps`` with
``sigma_t = a sqrt(t / (1 - t))`` (Flow-GRPO, Sec. 4.1, ``a = 0.7``; at ``t = 1`` the ``1 - t`` is replaced by ``dt``, as
flow_grpo's ``sde_step_with_logprob`` uses ``sigma_max``).
"""
from __future__ import annotations

import math
from typing import Callable, Sequence

import numpy as np
import torch


def _check(name, value, lo=None, hi=None, integer=False):
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise TypeError(f"{name} must be a number, got {type(value).__name__}")
    if not math.isfinite(float(value)) or (integer and int(value) != value):
        raise ValueError(f"{name} must be a finite {'integer' if integer else 'number'}, got {value!r}")
    if (lo is not None and value < lo) or (hi is not None and value > hi):
        raise ValueError(f"{name} must be in [{lo}, {hi}], got {value!r}")


def time_grid(steps: int, t_max: float = 1.0, t_min: float = 0.0) -> torch.Tensor:
    """``steps + 1`` uniform times from ``t_max`` down to ``t_min``."""
    return torch.linspace(t_max, t_min, steps + 1)


def sde_mean_std(x, v, t, dt, noise_level: float = 0.7):
    """Mean and std of one Flow-GRPO SDE step from ``t`` to ``t - dt`` (module docstring)."""
    t = float(t)
    # at t = 1 the denominator 1 - t is replaced by dt (Flow-GRPO's sigma_max = sigmas[1] rule)
    sigma = noise_level * math.sqrt(t / max(1.0 - t, dt))
    mean = x - dt * (v + sigma**2 / (2 * t) * (x + (1 - t) * v))
    return mean, sigma * math.sqrt(dt)


def gaussian_logp(x, mean, std):
    """Per-sample log density of ``N(mean, std^2 I)``, summed over all but the batch axis."""
    d = (x - mean) ** 2 / (2 * std**2) + math.log(std) + 0.5 * math.log(2 * math.pi)
    return -d.reshape(len(x), -1).sum(1)


@torch.no_grad()
def hybrid_ode_sde_sample(model, y, shape, steps: int = 10, window: int = 2, start: int | None = None,
                          noise_level: float = 0.7, generator=None, noise=None):
    """Sample with ODE steps outside ``[start, start + window)`` and SDE steps inside it.

    ``model(x, t, y) -> v``. ``start=None`` draws it uniformly from ``0..steps - window``
    (PrismAudio's random window); ``window=0`` is the plain Euler ODE sampler, ``window=steps`` the
    full-SDE sampler of Flow-GRPO. The first step starts at ``t = 1``; the last SDE step may not end at
    ``t = 0`` (the step into ``t = 0`` is an ODE step, as Flow-GRPO does not sample at ``t = 0``).
    Returns ``(x0, traj)`` with ``traj`` a dict of the window's states before (``xs``) and after
    (``nexts``) each SDE step,
    times ``ts``, step sizes ``dts`` and the old log-probabilities ``logps`` ``(window, B)``.
    """
    _check("steps", steps, 1, integer=True)
    _check("window", window, 0, steps - 1 if steps > 1 else 0, integer=True)
    _check("noise_level", noise_level, 0.0)
    y = torch.as_tensor(y, dtype=torch.long)
    B = len(y)
    if start is None:
        start = int(torch.randint(0, steps - window, (1,), generator=generator)) if steps > window else 0
    _check("start", start, 0, steps - 1 - window if window else steps, integer=True)
    x = torch.randn((B,) + tuple(shape), generator=generator) if noise is None else noise.clone()
    grid = time_grid(steps)
    xs, nexts, ts, dts, logps = [], [], [], [], []
    for i in range(steps):
        t, dt = float(grid[i]), float(grid[i] - grid[i + 1])
        v = model(x, torch.full((B,), t), y)
        if start <= i < start + window and noise_level > 0:
            mean, std = sde_mean_std(x, v, t, dt, noise_level)
            xs.append(x)
            x = mean + std * torch.randn(x.shape, generator=generator)
            nexts.append(x)
            ts.append(t)
            dts.append(dt)
            logps.append(gaussian_logp(x, mean, std))
        else:
            x = x - dt * v
        if not torch.isfinite(x).all():
            raise FloatingPointError(f"non-finite sample at step {i}")
    traj = {"xs": xs, "nexts": nexts, "ts": ts, "dts": dts, "start": start,
            "logps": torch.stack(logps) if logps else torch.zeros(0, B)}
    return x, traj


def group_advantages(rewards, group_size: int, eps: float = 1e-4):
    """``A_i = (R_i - mean_group) / (std_group + eps)`` over consecutive groups of ``group_size``."""
    r = torch.as_tensor(rewards, dtype=torch.float32)
    _check("group_size", group_size, 1, integer=True)
    if r.dim() != 1 or len(r) % group_size:
        raise ValueError(f"rewards must be 1-D with a length divisible by group_size={group_size}, got {tuple(r.shape)}")
    if not torch.isfinite(r).all():
        raise ValueError("rewards must be finite")
    g = r.view(-1, group_size)
    return ((g - g.mean(1, keepdim=True)) / (g.std(1, unbiased=False, keepdim=True) + eps)).view(-1)


def clipped_loss(logp_new, logp_old, adv, clip: float = 0.2):
    """``-mean min(r A, clip(r, 1 - clip, 1 + clip) A)`` with ``r = exp(logp_new - logp_old)``
    (averaged over window steps and samples, PrismAudio's objective)."""
    _check("clip", clip, 0.0)
    if not (torch.isfinite(logp_new).all() and torch.isfinite(logp_old).all() and torch.isfinite(adv).all()):
        raise ValueError("clipped_loss: logp_new, logp_old and adv must be finite")
    ratio = torch.exp((logp_new - logp_old).clamp(-20, 20))
    a = adv.unsqueeze(0) if logp_new.dim() == 2 else adv
    return -torch.minimum(ratio * a, ratio.clamp(1 - clip, 1 + clip) * a).mean()


class FastGRPOTrainer:
    """GRPO on a flow model with hybrid ODE/SDE sampling.

    ``reward_fns`` map final samples ``(B, ...)`` and labels to per-sample rewards; ``weights`` the
    lambda_k of ``R = sum_k lambda_k R_k``. ``window=steps`` is Flow-GRPO (every step stochastic and
    trained); ``random_window=False`` slides the window deterministically (the control).
    :meth:`step` runs one iteration and returns a log dict with ``grad_evals`` (model evaluations
    with gradient in it).
    """

    def __init__(self, model, reward_fns: Sequence[Callable], weights=None, shape=(2,), steps: int = 10,
                 window: int = 2, group_size: int = 8, lr: float = 1e-4, clip: float = 0.2,
                 noise_level: float = 0.7, random_window: bool = True, full_sde: bool = False, seed: int = 0):
        if not reward_fns:
            raise ValueError("reward_fns must hold at least one reward function")
        weights = [1.0] * len(reward_fns) if weights is None else list(weights)
        if len(weights) != len(reward_fns) or not all(np.isfinite(weights)):
            raise ValueError(f"weights must be {len(reward_fns)} finite numbers, got {weights}")
        _check("steps", steps, 1, integer=True)
        _check("lr", lr, 0.0)
        _check("group_size", group_size, 2, integer=True)
        _check("clip", clip, 0.0)
        _check("noise_level", noise_level, 0.0)
        if noise_level == 0:
            raise ValueError("noise_level must be > 0 (the SDE window's policy needs a positive std), got 0")
        if not full_sde:
            _check("window", window, 1, steps - 1, integer=True)
        self.model, self.reward_fns, self.weights = model, list(reward_fns), weights
        self.shape, self.steps, self.window = tuple(shape), steps, (steps - 1 if full_sde else window)
        self.full_sde = full_sde
        self.group_size, self.clip, self.noise_level = group_size, clip, noise_level
        self.random_window, self.it = random_window, 0
        self.g = torch.Generator().manual_seed(int(seed))
        self.opt = torch.optim.Adam(model.parameters(), lr=lr)

    def rewards(self, x, y):
        parts = [torch.as_tensor(f(x, y), dtype=torch.float32) for f in self.reward_fns]
        return sum(w * p for w, p in zip(self.weights, parts)), parts

    def step(self, labels):
        """One GRPO iteration on prompts ``labels`` (each repeated ``group_size`` times)."""
        y = torch.as_tensor(labels, dtype=torch.long).repeat_interleave(self.group_size)
        if self.full_sde:
            start = 0
        elif self.random_window:
            start = None
        else:
            start = self.it % (self.steps - self.window)
        self.model.eval()
        x0, traj = hybrid_ode_sde_sample(self.model, y, self.shape, self.steps, self.window, start,
                                         self.noise_level, self.g)
        R, parts = self.rewards(x0, y)
        adv = group_advantages(R, self.group_size)
        self.model.train()
        new = []
        for x, x_next, t, dt in zip(traj["xs"], traj["nexts"], traj["ts"], traj["dts"]):
            v = self.model(x, torch.full((len(y),), t), y)
            mean, std = sde_mean_std(x, v, t, dt, self.noise_level)
            new.append(gaussian_logp(x_next, mean, std))
        loss = clipped_loss(torch.stack(new), traj["logps"], adv, self.clip)
        if not torch.isfinite(loss):
            raise FloatingPointError(f"non-finite Fast-GRPO loss at iteration {self.it}")
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        self.opt.step()
        self.it += 1
        return {"loss": float(loss.detach()), "reward": float(R.mean()), "grad_evals": len(new) * len(y),
                "parts": [float(p.mean()) for p in parts]}
