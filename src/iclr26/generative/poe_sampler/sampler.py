"""Product-of-experts sampling by annealed MCMC with SMC resampling.

Paper: "Product of Experts for Visual Generation" (ICLR 2026; project page
product-of-experts.github.io; no official code found). The target is

    p(x)  ∝  prod_i p_i(x) * prod_j exp(r_j(x)),

with generative experts ``p_i`` (diffusion / flow models, known through their scores along a
probability path) and discriminative experts ``r_j`` (black-box, possibly non-differentiable
log-weights: a classifier's or VLM's score, a constraint). The sampler follows the annealed
targets ``p_t ∝ prod_i p_t^(i)`` of the flow path ``x_t = (1 - t) x_0 + t eps`` from ``t ≈ 1`` to
``t = 0`` with ``n_particles`` particles per chain; at each step it

1. moves every particle by a deterministic (DDIM / Euler) step of the summed expert scores;
2. runs ``langevin_steps`` unadjusted Langevin steps on ``sum_i grad log p_t^(i)`` (kernels that
   leave ``p_t`` invariant up to discretisation, so they add no path weight);
3. weights the particles by the discriminative experts evaluated on the predicted clean sample
   ``x0_hat`` and resamples within the chain.

Expert scores on the flow path relate to velocities by ``S = -(x + (1 - t) v) / t``; Tweedie's
formula gives ``x0_hat = (x + t^2 S) / (1 - t)``.
"""
from __future__ import annotations

import math
import numbers
from typing import Callable, Sequence

import torch

__all__ = ["FlowExpert", "RewardExpert", "GaussianConstraintExpert", "ProductOfExpertsSampler",
           "flow_score_from_velocity", "tweedie_x0"]


def flow_score_from_velocity(x, t, v):
    """``S = -(x + (1 - t) v) / t`` on the path ``x_t = (1 - t) x_0 + t eps`` (``v = eps - x_0``)."""
    return -(x + (1.0 - t) * v) / t


def tweedie_x0(x, t, score):
    """``E[x_0 | x_t] = (x_t + t^2 S) / (1 - t)`` on the same path."""
    return (x + t * t * score) / (1.0 - t)


class FlowExpert:
    """A generative expert known through its score ``score(x, t)`` on the flow path.

    Build it from a velocity model with :meth:`from_velocity` (``velocity(x, t) -> v`` with ``t``
    a ``(N,)`` tensor), or directly from a score function.
    """

    def __init__(self, score_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]):
        if not callable(score_fn):
            raise TypeError("score_fn must be callable: (x (N, D), t (N,)) -> score (N, D)")
        self.score_fn = score_fn

    @classmethod
    def from_velocity(cls, velocity_fn) -> "FlowExpert":
        if not callable(velocity_fn):
            raise TypeError("velocity_fn must be callable: (x (N, D), t (N,)) -> v (N, D)")
        return cls(lambda x, t: flow_score_from_velocity(x, t[:, None], velocity_fn(x, t)))

    def score(self, x, t):
        return self.score_fn(x, t)


class RewardExpert:
    """A discriminative expert: a black-box log-weight ``r(x0) -> (N,)`` times ``weight`` (it is
    evaluated on predicted clean samples and never differentiated)."""

    def __init__(self, reward_fn: Callable[[torch.Tensor], torch.Tensor], weight: float = 1.0):
        if not callable(reward_fn):
            raise TypeError("reward_fn must be callable: x0 (N, D) -> log-weights (N,)")
        if not math.isfinite(weight):
            raise ValueError(f"weight must be finite, got {weight}")
        self.reward_fn, self.weight = reward_fn, float(weight)

    def log_weight(self, x0):
        """``weight * r(x0)``; ``-inf`` (a hard constraint) is allowed, NaN and ``+inf`` are errors."""
        with torch.no_grad():
            r = torch.as_tensor(self.reward_fn(x0), dtype=x0.dtype)
        if r.shape != x0.shape[:1]:
            raise ValueError(f"reward_fn must return one value per sample, shape {tuple(x0.shape[:1])}, got {tuple(r.shape)}")
        if bool(torch.isnan(r).any()):
            raise ValueError("reward_fn returned NaN log-weights")
        if self.weight == 0:
            return torch.zeros_like(r)                   # 0 * (-inf) would be NaN
        lw = self.weight * r
        if bool((lw == float("inf")).any()):
            raise ValueError("a discriminative expert gave a log-weight of +inf (weight * reward_fn)")
        return lw


class GaussianConstraintExpert(RewardExpert):
    """A simulator's output ``c`` as the soft constraint ``exp(-w |x - c|^2)``."""

    def __init__(self, target, w: float = 1.0):
        target = torch.as_tensor(target)
        if not (math.isfinite(w) and w >= 0):
            raise ValueError(f"w must be a finite number >= 0, got {w}")
        super().__init__(lambda x: -((x - target.to(x.dtype)) ** 2).reshape(len(x), -1).sum(1), w)
        self.target = target


def _check_count(name, v, lo):
    """A whole number ``>= lo`` (a fractional count is an error, never truncated)."""
    if isinstance(v, bool) or not isinstance(v, numbers.Integral):
        raise TypeError(f"{name} must be an integer, got {v!r}")
    if v < lo:
        raise ValueError(f"{name} must be >= {lo}, got {v}")


def _check_chain_weights(logw):
    """``(n_chains, L)`` log-weights: NaN, or every particle of a chain at ``-inf``, is an error."""
    if bool(torch.isnan(logw).any()):
        raise ValueError("NaN importance log-weights (a reward of NaN, or -inf minus -inf)")
    dead = torch.isneginf(logw).all(dim=1)
    if bool(dead.any()):
        raise ValueError(f"every particle of chain {int(dead.nonzero()[0, 0])} has log-weight -inf "
                         f"(the discriminative experts rule out all of them): nothing to resample")
    return logw


class ProductOfExpertsSampler:
    """Annealed MCMC + SMC sampler of ``prod_i p_i(x) prod_j exp(r_j(x))``.

    ``n_particles`` particles per chain; ``n_steps`` annealing steps on a uniform grid from
    ``t_max`` to ``t_min``; ``langevin_steps`` Langevin moves per step with step
    ``step_size * t`` (shrinking with the noise level, but not as fast as its variance ``t^2``, so
    the moves still mix near ``t = 0``); ``resample`` turns the SMC
    weighting on (``resample=False`` keeps the same particles and moves and applies the importance
    weights ``exp(r(x0))`` only at the end: plain importance resampling). With one generative
    expert, no discriminative one, no Langevin steps and one particle the sampler is the expert's
    own DDIM sampler; ``langevin_steps = 0`` and ``n_particles = 1`` give the naive score-sum
    sampler. With one particle no weighting can happen: the discriminative experts are ignored.

    The resampling weights are incremental: the first is ``exp(r(x0_hat(t_1)))``, each later one
    ``exp(r(x0_hat(t_k)) - r(x0_hat(t_{k-1})))``, so that they multiply to ``exp(r)`` of the last
    predicted clean sample. Counts must be integers (a fractional count raises); a reward of NaN
    or ``+inf``, or a chain whose particles all have log-weight ``-inf``, raises ``ValueError``.

    :meth:`sample` returns ``(x, info)``: one output per chain, a particle drawn by the final
    weights (``select = "weighted"``) or the particle with the largest final reward
    (``select = "best"``, the paper's choice for images).
    """

    def __init__(self, generative_experts: Sequence[FlowExpert], discriminative_experts: Sequence[RewardExpert] = (),
                 n_particles: int = 8, n_steps: int = 50, langevin_steps: int = 2, step_size: float = 0.1,
                 resample: bool = True, t_max: float = 0.98, t_min: float = 0.02, select: str = "weighted"):
        self.generative_experts = list(generative_experts)
        self.discriminative_experts = list(discriminative_experts)
        if not self.generative_experts:
            raise ValueError("need at least one generative expert")
        if not all(isinstance(e, FlowExpert) for e in self.generative_experts):
            raise TypeError("generative_experts must be FlowExpert instances")
        if not all(isinstance(e, RewardExpert) for e in self.discriminative_experts):
            raise TypeError("discriminative_experts must be RewardExpert instances")
        for name, v, lo in (("n_particles", n_particles, 1), ("n_steps", n_steps, 1), ("langevin_steps", langevin_steps, 0)):
            _check_count(name, v, lo)
        if not step_size > 0:
            raise ValueError(f"step_size must be > 0, got {step_size}")
        if not 0.0 < t_min < t_max < 1.0:
            raise ValueError(f"need 0 < t_min < t_max < 1, got t_min={t_min}, t_max={t_max}")
        if select not in ("weighted", "best"):
            raise ValueError(f"select must be 'weighted' or 'best', got {select!r}")
        if not isinstance(resample, bool):
            raise TypeError(f"resample must be a bool, got {resample!r}")
        self.n_particles, self.n_steps, self.langevin_steps = int(n_particles), int(n_steps), int(langevin_steps)
        self.step_size, self.resample, self.t_max, self.t_min, self.select = float(step_size), bool(resample), t_max, t_min, select

    def score(self, x, t: float):
        tt = torch.full((x.shape[0],), t, dtype=x.dtype)
        return sum(e.score(x, tt).to(x.dtype) for e in self.generative_experts)

    def log_reward(self, x0):
        if not self.discriminative_experts:
            return torch.zeros(x0.shape[0], dtype=x0.dtype)
        return sum(e.log_weight(x0) for e in self.discriminative_experts)

    def _resample(self, logw, n_chains, generator):
        """Multinomial resampling within each chain; returns flat indices ``(n_chains * L,)``."""
        L = self.n_particles
        w = torch.softmax(_check_chain_weights(logw.view(n_chains, L)), dim=1)
        idx = torch.multinomial(w, L, replacement=True, generator=generator)
        return (idx + L * torch.arange(n_chains)[:, None]).reshape(-1)

    @torch.no_grad()
    def sample(self, n_chains: int, dim: int, generator: torch.Generator | None = None, dtype=torch.float64):
        _check_count("n_chains", n_chains, 1)
        _check_count("dim", dim, 1)
        L, M = self.n_particles, len(self.generative_experts)
        ts = torch.linspace(self.t_max, self.t_min, self.n_steps + 1, dtype=torch.float64).tolist()
        # the product of M standard-normal-like marginals at t ~ 1 has variance t^2 / M
        x = torch.randn((n_chains * L, dim), generator=generator, dtype=dtype) * (ts[0] / math.sqrt(M))
        # the first weights are the full rewards (the initial twist), so that the product of the
        # weights along a particle's path telescopes to exp(r(x0_hat)) at the last step
        prev_r = torch.zeros(n_chains * L, dtype=dtype)
        n_resample = 0
        for t, tn in zip(ts[:-1], ts[1:]):
            s = self.score(x, t)
            x0 = tweedie_x0(x, t, s)
            eps = (x - (1.0 - t) * x0) / t
            x = (1.0 - tn) * x0 + tn * eps                             # deterministic step to tn
            eta = self.step_size * tn
            for _ in range(self.langevin_steps):
                z = torch.randn(x.shape, generator=generator, dtype=dtype)
                x = x + eta * self.score(x, tn) + math.sqrt(2.0 * eta) * z
            if self.discriminative_experts and L > 1:
                r = self.log_reward(tweedie_x0(x, tn, self.score(x, tn)))
                if self.resample:
                    idx = self._resample(r - prev_r, n_chains, generator)   # incremental (twisted) weights
                    x, r = x[idx], r[idx]
                    n_resample += 1
                prev_r = r
        x = tweedie_x0(x, ts[-1], self.score(x, ts[-1]))                 # final denoising to t = 0
        xr = x.view(n_chains, L, dim)
        if L == 1:
            out = xr[:, 0]
        else:
            r = self.log_reward(x).view(n_chains, L)
            if self.select == "best":
                pick = _check_chain_weights(r).argmax(1)
            else:
                logw = r - prev_r.view(n_chains, L) if self.resample else r
                pick = torch.multinomial(torch.softmax(_check_chain_weights(logw), 1), 1, generator=generator)[:, 0]
            out = xr[torch.arange(n_chains), pick]
        return out, {"n_resample": n_resample}
