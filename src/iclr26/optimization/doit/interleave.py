"""Dynamic Optimizer Interleaving Training (DOIT).

"Towards Dynamic Interleaving Optimizers", ICLR 2026 (OpenReview AII8ADdDHt; no public code).
Training is cut into stages of ``stage_len`` steps. Each stage runs one optimizer from a candidate
set; at the end of a stage DOIT records the stage's reward (the relative fall of the training loss)
against the training state at the stage's start, fits one Gaussian-process surrogate per optimizer
(reward given state), and picks the next optimizer by an acquisition function that combines the
surrogates' prediction, a transferability assessment (how well the optimizer's past experience
applies to the current state, and the cost of switching away from the running optimizer) and the
training process (more exploration early, more exploitation late).

All candidates act on the same parameters; each keeps its own state (momentum, moments) between
its stages, so switching back resumes it.

The paper's formulas could not be read (no arXiv version, no public code; only its abstract and a
summary): the features, the reward, the acquisition and the exploration below are our
reconstruction of that description, and the claim check treats them as such (README, Deviations).

Learning-rate schedules: the wrapper's param groups carry ``lr``, a *scale* (1.0 at the start)
applied to every candidate's own learning rate at each step, so any ``torch.optim.lr_scheduler``
(StepLR, CosineAnnealingLR, LambdaLR, ...) attached to the wrapper scales all candidates alike.
"""
from __future__ import annotations

import math
import random
import warnings
from typing import Callable

import numpy as np
import torch
from sklearn.gaussian_process import GaussianProcessRegressor
from sklearn.gaussian_process.kernels import ConstantKernel, RBF, WhiteKernel


def state_features(progress: float, losses: list, grad_norm: float) -> np.ndarray:
    """The training state a surrogate reads: ``(progress, log loss, relative loss change over the
    last stage, log gradient norm)``."""
    cur = float(np.mean(losses[-5:]))
    first = float(np.mean(losses[:5]))
    slope = (cur - first) / max(abs(first), 1e-12)
    return np.array([progress, math.log(max(cur, 1e-12)), slope, math.log(max(grad_norm, 1e-12))])


def _window(n: int) -> int:
    return max(1, min(5, n // 2))


def stage_reward(losses: list) -> float:
    """Relative fall of the training loss over a stage: ``(mean first k - mean last k) / mean first k``,
    ``k = min(5, len // 2)`` (at least 1)."""
    if len(losses) < 2:
        raise ValueError("a stage needs at least two observed losses")
    k = _window(len(losses))
    a, b = float(np.mean(losses[:k])), float(np.mean(losses[-k:]))
    return (a - b) / max(abs(a), 1e-12)


def stage_reward_rate(losses: list) -> float:
    """:func:`stage_reward` per step: divided by ``len - k``, the number of steps between the centres
    of the first and last ``k``-loss windows, so that stages of different lengths (the short initial
    probes of :class:`DOIT`) give comparable rewards. For stages of one length it is the reward up to
    a constant, which the surrogates' standardisation removes."""
    return stage_reward(losses) / (len(losses) - _window(len(losses)))


class Interleaver(torch.optim.Optimizer):
    """A ``torch.optim.Optimizer`` that runs one of several optimizers per stage.

    ``candidates`` maps a name to ``(optimizer class, kwargs)``; all are built on ``params``.
    Call ``observe(loss)`` once per step (or pass a ``closure`` to :meth:`step`, whose loss is
    observed), then ``step()``. Subclasses choose the next optimizer in :meth:`choose`.
    """

    def __init__(self, params, candidates: dict, stage_len: int = 50, total_steps: int | None = None, seed: int = 0):
        if not isinstance(candidates, dict) or len(candidates) < 2:
            raise ValueError("candidates must be a dict of at least two {name: (optimizer class, kwargs)}")
        for name, spec in candidates.items():
            if not (isinstance(spec, tuple) and len(spec) == 2 and isinstance(spec[0], type)
                    and issubclass(spec[0], torch.optim.Optimizer) and isinstance(spec[1], dict)):
                raise ValueError(f"candidate {name!r} must be (torch.optim.Optimizer subclass, kwargs dict)")
        if not isinstance(stage_len, int) or stage_len < 2:
            raise ValueError(f"stage_len must be an integer >= 2, got {stage_len!r}")
        if total_steps is not None and (not isinstance(total_steps, int) or total_steps < stage_len):
            raise ValueError(f"total_steps must be None or an integer >= stage_len, got {total_steps!r}")
        params = list(params)
        super().__init__(params, dict(lr=1.0, stage_len=stage_len))
        self.names = list(candidates)
        self.optimizers = {n: cls(params, **kw) for n, (cls, kw) in candidates.items()}
        for n, o in self.optimizers.items():
            if len(o.param_groups) != len(self.param_groups) or any("lr" not in g for g in o.param_groups):
                raise ValueError(f"candidate {n!r} must have one param group with 'lr' per param group given")
        self.base_lrs = {n: [g["lr"] for g in o.param_groups] for n, o in self.optimizers.items()}
        self.stage_len, self.total_steps = stage_len, total_steps
        self.stage_steps = 0                     # steps done in the running stage
        self.current_len = stage_len             # length of the running stage
        self.rng = random.Random(seed)
        self.active = self.names[0]
        self.steps = 0
        self.stage_losses: list = []
        self.prev_losses: list = []
        self.stage_start = None                  # features at the start of the running stage
        self.history: list = []                  # (name, features, reward) per finished stage
        self.schedule: list = [self.active]      # the optimizer of every stage

    # ------------------------------------------------------------------ torch.optim interface
    def observe(self, loss) -> None:
        """Record this step's training loss (a float or a scalar tensor)."""
        v = float(loss.detach()) if isinstance(loss, torch.Tensor) else float(loss)
        if not math.isfinite(v):
            raise ValueError(f"observed loss must be finite, got {v}")
        self.stage_losses.append(v)

    def _grad_norm(self) -> float:
        sq = 0.0
        for g in self.param_groups:
            for p in g["params"]:
                if p.grad is not None:
                    sq += float(p.grad.detach().pow(2).sum())
        return math.sqrt(sq)

    def step(self, closure: Callable | None = None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
            self.observe(loss)
        if len(self.stage_losses) <= self.stage_steps:
            raise RuntimeError("call observe(loss) before every step() (or pass a closure)")
        gnorm = self._grad_norm()
        if not math.isfinite(gnorm):
            raise FloatingPointError(f"non-finite gradient at step {self.steps}; training stopped")
        if self.stage_start is None:
            self.current_len = self.stage_length()
            self.stage_start = state_features(self._progress(), self.stage_losses, gnorm)
        opt = self.optimizers[self.active]
        for g, own, base in zip(self.param_groups, opt.param_groups, self.base_lrs[self.active]):
            scale = g["lr"]
            if not (isinstance(scale, (int, float)) and math.isfinite(scale) and scale >= 0):
                raise ValueError(f"param group 'lr' (the scale of every candidate's rate) must be finite and "
                                 f">= 0, got {scale!r}")
            own["lr"] = base * scale
        opt.step()
        self.steps += 1
        self.stage_steps += 1
        if self.stage_steps >= self.current_len:
            self._end_stage()
        return loss

    def stage_length(self) -> int:
        """Length of the stage about to start (``stage_len``; :class:`DOIT` shortens its probes)."""
        return self.stage_len

    def zero_grad(self, set_to_none: bool = True) -> None:
        for opt in self.optimizers.values():
            opt.zero_grad(set_to_none=set_to_none)

    def _progress(self) -> float:
        if self.total_steps is None:
            return 0.0
        return min(1.0, self.steps / self.total_steps)

    def _end_stage(self) -> None:
        reward = stage_reward_rate(self.stage_losses)
        self.history.append((self.active, self.stage_start, reward))
        feats = state_features(self._progress(), self.stage_losses, self._grad_norm())
        self.prev_losses, self.stage_losses = self.stage_losses, []
        self.stage_start = None
        self.stage_steps = 0
        self.active = self.choose(feats)
        if self.active not in self.optimizers:
            raise RuntimeError(f"choose() returned {self.active!r}; allowed: {', '.join(self.names)}")
        self.schedule.append(self.active)

    def choose(self, feats: np.ndarray) -> str:
        raise NotImplementedError

    # ------------------------------------------------------------------ state
    def state_dict(self) -> dict:
        return {"optimizers": {n: o.state_dict() for n, o in self.optimizers.items()},
                "doit": {"active": self.active, "steps": self.steps, "stage_losses": list(self.stage_losses),
                         "prev_losses": list(self.prev_losses),
                         "stage_start": None if self.stage_start is None else self.stage_start.tolist(),
                         "history": [(n, f.tolist(), r) for n, f, r in self.history],
                         "schedule": list(self.schedule), "rng": self.rng.getstate(),
                         "stage_steps": self.stage_steps, "current_len": self.current_len,
                         "lr": [g["lr"] for g in self.param_groups]}}

    def load_state_dict(self, state_dict: dict) -> None:
        if set(state_dict.get("optimizers", {})) != set(self.optimizers):
            raise ValueError(f"state_dict holds optimizers {sorted(state_dict.get('optimizers', {}))}, "
                             f"this one {sorted(self.optimizers)}")
        for n, sd in state_dict["optimizers"].items():
            self.optimizers[n].load_state_dict(sd)
        d = state_dict["doit"]
        self.active, self.steps = d["active"], d["steps"]
        self.stage_losses, self.prev_losses = list(d["stage_losses"]), list(d["prev_losses"])
        self.stage_start = None if d["stage_start"] is None else np.array(d["stage_start"])
        self.history = [(n, np.array(f), r) for n, f, r in d["history"]]
        self.schedule = list(d["schedule"])
        self.stage_steps, self.current_len = d["stage_steps"], d["current_len"]
        for g, lr in zip(self.param_groups, d["lr"]):
            g["lr"] = lr
        st = d["rng"]
        self.rng.setstate((st[0], tuple(st[1]), st[2]))


class DOIT(Interleaver):
    """Dynamic Optimizer Interleaving Training: GP surrogates + acquisition pick each stage's optimizer.

    Acquisition (our reading of the paper's description; see the README):

        a(o) = mu_o(x) + kappa_t * sigma_o(x) - beta * (1 - T_o(x)),
        kappa_t = kappa * (1 - progress)                      (process: explore early, exploit late)
        T_o(x) = 1 for the running optimizer, else exp(-d_o(x)^2 / 2)   (transferability)

    ``mu_o, sigma_o``: the GP surrogate of optimizer ``o`` (reward standardised over all stages),
    ``d_o(x)``: distance from the current state ``x`` to the nearest state ``o`` was run from, in
    units of the features' spread. Before a candidate has ``n_init`` stages, the candidates are
    tried in turn (initial exploration).

    Exploration scaled to the run (ours): when ``total_steps`` is known and ``explore_frac`` is set,
    the initial probes together take at most ``explore_frac`` of the run: each probe lasts
    ``clip(floor(explore_frac * total_steps / (n_init * |O|)), 2, stage_len)`` steps (default 10 %:
    four candidates in a 200-step run get 5-step probes instead of four full stages). Rewards are
    per step (:func:`stage_reward_rate`), so short probes and full stages share one scale.
    ``explore_frac=None`` probes with full stages.
    """

    def __init__(self, params, candidates: dict, stage_len: int = 50, total_steps: int | None = None,
                 kappa: float = 2.0, beta: float = 0.5, n_init: int = 1, explore_frac: float | None = 0.1,
                 seed: int = 0):
        if not (isinstance(kappa, (int, float)) and math.isfinite(kappa) and kappa >= 0):
            raise ValueError(f"kappa must be a finite number >= 0, got {kappa!r}")
        if not (isinstance(beta, (int, float)) and math.isfinite(beta) and beta >= 0):
            raise ValueError(f"beta must be a finite number >= 0, got {beta!r}")
        if not isinstance(n_init, int) or n_init < 1:
            raise ValueError(f"n_init must be an integer >= 1, got {n_init!r}")
        if explore_frac is not None and not (isinstance(explore_frac, (int, float)) and 0 < explore_frac <= 1):
            raise ValueError(f"explore_frac must be None or a number in (0, 1], got {explore_frac!r}")
        super().__init__(params, candidates, stage_len, total_steps, seed)
        self.kappa, self.beta, self.n_init = float(kappa), float(beta), n_init
        self.explore_frac = explore_frac
        if explore_frac is None or total_steps is None:
            self.probe_len = stage_len
        else:
            per = int(explore_frac * total_steps) // (n_init * len(self.names))
            self.probe_len = min(stage_len, max(2, per))
        self.last_scores: dict = {}

    def surrogate(self, name: str, X: np.ndarray, y: np.ndarray) -> GaussianProcessRegressor:
        kernel = ConstantKernel(1.0, (1e-2, 1e2)) * RBF(np.ones(X.shape[1]), (1e-2, 1e2)) + WhiteKernel(0.1, (1e-4, 1.0))
        gp = GaussianProcessRegressor(kernel, normalize_y=False, random_state=0)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")              # hyperparameters at their bounds on few points
            return gp.fit(X, y)

    def acquisition(self, feats: np.ndarray) -> dict:
        """``{name: a(o)}`` for every candidate at state ``feats``."""
        X = np.array([f for _, f, _ in self.history])
        r = np.array([v for _, _, v in self.history])
        mu_x, sd_x = X.mean(0), X.std(0) + 1e-8
        y = (r - r.mean()) / (r.std() + 1e-12)
        x = ((feats - mu_x) / sd_x)[None, :]
        kappa_t = self.kappa * (1.0 - self._progress())
        scores = {}
        for n in self.names:
            idx = [i for i, (m, _, _) in enumerate(self.history) if m == n]
            Xn = (X[idx] - mu_x) / sd_x
            gp = self.surrogate(n, Xn, y[idx])
            mu, sd = gp.predict(x, return_std=True)
            d = float(np.min(np.linalg.norm(Xn - x, axis=1)))
            T = 1.0 if n == self.active else math.exp(-d * d / 2.0)
            scores[n] = float(mu[0] + kappa_t * sd[0] - self.beta * (1.0 - T))
        return scores

    def exploring(self) -> bool:
        """True while some candidate has fewer than ``n_init`` finished stages."""
        return any(sum(m == n for m, _, _ in self.history) < self.n_init for n in self.names)

    def stage_length(self) -> int:
        return self.probe_len if self.exploring() else self.stage_len

    def choose(self, feats: np.ndarray) -> str:
        counts = {n: sum(m == n for m, _, _ in self.history) for n in self.names}
        untried = [n for n in self.names if counts[n] < self.n_init]
        if untried:
            self.last_scores = {}
            return untried[0]
        self.last_scores = self.acquisition(feats)
        return max(self.names, key=lambda n: (self.last_scores[n], -self.names.index(n)))
