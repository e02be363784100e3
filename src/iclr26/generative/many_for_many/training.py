"""Multi-task flow-matching training and per-task evaluation for Many-for-Many (arXiv:2506.01758).

The paper trains one DiT on many tasks at once with the flow-matching objective (Sec. 3; the
official pipeline samples with diffusers' ``FlowMatchEulerDiscreteScheduler``); each training
example carries its own task, i.e. its own unified condition (:func:`.adapter.task_condition`).
:func:`train_multitask` draws a task per example from ``tasks`` (uniformly, or with
``task_weights``) and takes one step of the shared objective
:func:`iclr26.models.diffusion.diffusion_loss` (``"flow"``: ``x_t = (1 - t) x_0 + t eps``, target
``eps - x_0``, classifier-free label dropout) on the model bound to the batch's conditions. With a
single task it is single-task training with the same optimiser, schedule and compute.

:func:`flow_matching_loss` is the validation objective at a fixed ``t`` grid and fixed noise,
averaged over the pixels the task has to generate (mask 0); :func:`sample_task` samples a task with
the shared Euler sampler.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np
import torch

from iclr26.models import diffusion as D

from .adapter import TASKS, MfMVideoTransformer, bind_condition, task_condition


def _check_tasks(tasks, task_weights):
    tasks = (tasks,) if isinstance(tasks, str) else tuple(tasks)
    if not tasks or any(t not in TASKS for t in tasks):
        raise ValueError(f"tasks must be a non-empty sequence from {TASKS}, got {tasks}")
    if task_weights is None:
        w = np.full(len(tasks), 1.0 / len(tasks))
    else:
        w = np.asarray(task_weights, dtype=float)
        if w.shape != (len(tasks),) or np.any(~np.isfinite(w)) or np.any(w < 0) or w.sum() <= 0:
            raise ValueError(f"task_weights must be {len(tasks)} non-negative numbers with a positive sum, got {task_weights}")
        w = w / w.sum()
    return tasks, torch.as_tensor(w, dtype=torch.float64)


def train_multitask(model: MfMVideoTransformer, X, y, tasks: Sequence[str] = TASKS, task_weights=None,
                    steps: int = 600, batch_size: int = 32, lr: float = 2e-3, p_uncond: float = 0.1,
                    seed: int = 0, ema: float | None = 0.999, hole: int | None = None):
    """Train ``model`` in place on the videos ``X`` ``(n, F, C, H, W)`` with labels ``y`` and return
    the loss per step.

    Every step draws ``batch_size`` videos and one task per video (``task_weights``, default
    uniform), builds their unified conditions and takes an AdamW step on
    :func:`iclr26.models.diffusion.diffusion_loss` (``"flow"``) of the model bound to them: the
    loop (optimiser, cosine-decayed ``lr``, weight EMA) is
    :func:`iclr26.models.diffusion.train_diffusion` with this per-batch loss. Non-finite videos are
    rejected; a non-finite loss or gradient stops training with ``FloatingPointError``.
    """
    tasks, w = _check_tasks(tasks, task_weights)
    X = torch.as_tensor(np.asarray(X), dtype=torch.float32)
    y = torch.as_tensor(np.asarray(y), dtype=torch.long)
    if X.dim() != 5 or len(X) != len(y):
        raise ValueError(f"X must be (n, F, C, H, W) with one label per video, got {tuple(X.shape)} and {len(y)} labels")
    if not torch.isfinite(X).all():
        raise ValueError("X must be finite (it holds NaN or inf)")

    def step_loss(m, x0, yb, generator):
        pick = torch.multinomial(w, len(x0), replacement=True, generator=generator)
        cond, _ = task_condition(x0, [tasks[int(k)] for k in pick], hole)
        loss = D.diffusion_loss(bind_condition(m, cond), x0, yb, "flow", p_uncond, generator)
        if not torch.isfinite(loss):
            raise FloatingPointError(f"non-finite training loss ({float(loss.detach())})")
        return loss

    hooks = [p.register_hook(_finite_grad) for p in model.parameters() if p.requires_grad]
    try:
        return D.train_diffusion(model, X, y, "flow", steps, batch_size, lr, p_uncond, seed, ema, loss_fn=step_loss)
    finally:
        for h in hooks:
            h.remove()


def _finite_grad(grad):
    if not torch.isfinite(grad).all():
        raise FloatingPointError("non-finite gradient during training")
    return grad


@torch.no_grad()
def flow_matching_loss(model: MfMVideoTransformer, X, y, task: str, t_grid=None, seed: int = 0,
                       hole: int | None = None, per_video: bool = False):
    """The flow-matching validation loss of ``task`` on the videos ``X`` (labels ``y``).

    For every ``t`` of ``t_grid`` (default ``(0.05, 0.15, ..., 0.95)``) and every video: ``x_t = (1
    - t) x_0 + t eps`` with noise fixed by ``seed`` (the same for every model), the squared error of
    the predicted velocity against ``eps - x_0``, averaged over the pixels the task generates (mask
    0; all pixels for ``"c2v"``) and over the grid. Returns the mean, or one value per video.
    """
    X = torch.as_tensor(np.asarray(X), dtype=torch.float32)
    y = torch.as_tensor(np.asarray(y), dtype=torch.long)
    t_grid = torch.arange(0.05, 1.0, 0.1) if t_grid is None else torch.as_tensor(t_grid, dtype=torch.float32)
    if t_grid.dim() != 1 or len(t_grid) < 1 or t_grid.min() < 0 or t_grid.max() > 1:
        raise ValueError(f"t_grid must be a non-empty 1-D grid in [0, 1], got {t_grid}")
    cond, mask = task_condition(X, task, hole)
    free = 1.0 - mask
    model.eval()
    g = torch.Generator().manual_seed(int(seed))
    B, view = len(X), (len(X), 1, 1, 1, 1)
    total = torch.zeros(B)
    for t in t_grid:
        eps = torch.randn(X.shape, generator=g)
        tt = torch.full((B,), float(t))
        xt = (1 - tt).view(view) * X + tt.view(view) * eps
        err = (model(xt, tt, y, cond) - (eps - X)) ** 2
        total += (err * free).sum((1, 2, 3, 4)) / (free.sum((1, 2, 3, 4)) * X.shape[2])
    per = total / len(t_grid)
    return per.numpy().astype(float) if per_video else float(per.mean())


@torch.no_grad()
def sample_task(model: MfMVideoTransformer, X, y, task: str, steps: int = 20, noise=None, generator=None,
                guidance=None, hole: int | None = None):
    """Sample ``task`` for the videos ``X`` (their given pixels are the condition; for ``"c2v"``
    only the labels ``y`` count) with the shared Euler sampler of
    :func:`iclr26.models.diffusion.sample` (``"flow"``). Returns the samples ``(B, F, C, H, W)``."""
    X = torch.as_tensor(np.asarray(X), dtype=torch.float32)
    cond, _ = task_condition(X, task, hole)
    model.eval()
    return D.sample(bind_condition(model, cond), torch.as_tensor(np.asarray(y)), tuple(X.shape[1:]), "flow",
                    steps=steps, guidance=guidance, generator=generator, noise=noise)
