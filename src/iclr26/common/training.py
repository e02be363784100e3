"""One small, deterministic torch training loop shared by the papers' experiments.

Papers that need a custom step (SAM's two-pass closure, a schedule, a per-step probe) pass a
``step_fn`` or a ``callback`` instead of writing their own loop.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Iterable, Iterator

import torch
from torch import nn


@dataclass
class TrainResult:
    """What :func:`train` records: the loss per step and the evaluations at ``eval_every``."""

    losses: list[float] = field(default_factory=list)
    evals: list[tuple[int, dict]] = field(default_factory=list)

    @property
    def final_loss(self) -> float:
        return self.losses[-1] if self.losses else float("nan")

    def first_step_reaching(self, key: str, target: float, mode: str = "max") -> int | None:
        """First evaluated step where ``evals[key] >= target`` (mode max) or ``<= target`` (min)."""
        for step, ev in self.evals:
            if (ev[key] >= target) if mode == "max" else (ev[key] <= target):
                return step
        return None


def batches(x: torch.Tensor, y: torch.Tensor, batch_size: int, generator: torch.Generator) -> Iterator:
    """Endless shuffled minibatches of ``(x, y)`` drawn with ``generator``.

    Each pass is a fresh permutation (drawn on the generator's device) cut into ``n // batch_size``
    full batches; the last ``n % batch_size`` rows of a pass are dropped. When ``n < batch_size``
    every batch is the whole (shuffled) set. Batches stay on ``x``'s / ``y``'s device.
    """
    n = x.shape[0]
    if batch_size <= 0:
        raise ValueError(f"batch_size must be positive, got {batch_size}")
    if y.shape[0] != n:
        raise ValueError(f"x and y must have the same number of rows, got {n} and {y.shape[0]}")
    while True:
        perm = torch.randperm(n, generator=generator, device=generator.device)
        for i in range(0, n - batch_size + 1 if n >= batch_size else 1, batch_size):
            idx = perm[i : i + batch_size]
            yield x[idx.to(x.device)], y[idx.to(y.device)]


def train(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    data: Iterable,
    steps: int,
    loss_fn: Callable[[nn.Module, object], torch.Tensor],
    *,
    step_fn: Callable[[nn.Module, torch.optim.Optimizer, object], torch.Tensor] | None = None,
    scheduler=None,
    eval_fn: Callable[[nn.Module], dict] | None = None,
    eval_every: int = 0,
    callback: Callable[[int, nn.Module, float], None] | None = None,
    clip_grad: float | None = None,
) -> TrainResult:
    """Train ``model`` for ``steps`` optimizer steps on batches from ``data``.

    ``loss_fn(model, batch) -> scalar loss``. By default a step is zero_grad, backward, optional
    gradient clipping, ``optimizer.step()``. ``step_fn(model, optimizer, batch) -> loss`` replaces
    that whole step (e.g. for optimizers that need a closure). ``eval_fn(model) -> dict`` runs in
    ``torch.no_grad`` and eval mode every ``eval_every`` steps and after the last step.
    """
    if steps < 0:
        raise ValueError(f"steps must be >= 0, got {steps}")
    result = TrainResult()
    it = iter(data)

    def evaluate(step: int) -> None:
        if eval_fn is None:
            return
        was_training = model.training
        model.eval()
        with torch.no_grad():
            result.evals.append((step, dict(eval_fn(model))))
        model.train(was_training)

    model.train()
    if eval_every:
        evaluate(0)
    for step in range(1, steps + 1):
        batch = next(it)
        if step_fn is not None:
            loss = step_fn(model, optimizer, batch)
        else:
            optimizer.zero_grad(set_to_none=True)
            loss = loss_fn(model, batch)
            loss.backward()
            if clip_grad is not None:
                nn.utils.clip_grad_norm_(model.parameters(), clip_grad)
            optimizer.step()
        if scheduler is not None:
            scheduler.step()
        value = float(loss.detach())
        if value != value:  # NaN: stop early, keep what was recorded
            result.losses.append(value)
            break
        result.losses.append(value)
        if callback is not None:
            callback(step, model, value)
        if eval_every and step % eval_every == 0 and step != steps:
            evaluate(step)
    evaluate(len(result.losses))
    return result
