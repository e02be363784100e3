"""Claim checks for Many-for-Many: one multi-task model against single-task models, on a toy.

One seed = one independently trained set of models from one initialisation: a rectified-flow video
DiT with the MfM light adapter (:class:`.adapter.MfMVideoTransformer`: 4 frames of 16x16 px, 4x4
patches, 64 tokens) trained on moving 8x8 digits (:func:`iclr26.models.video.moving_digits`, train
split of the digits) for three tasks: class-to-video (``c2v``, the text-to-video stand-in),
image-to-video (``i2v``, first frame given) and inpainting (``inpaint``, a centred 8x8 hole in every
frame). Arms, all from the same initial weights and the same batch stream:

* ``multi``: ONE model trained on the three tasks (task drawn uniformly per example) for ``steps``
  optimiser steps of ``batch`` videos: the paper's many-for-many training;
* ``single``: for each task, one model trained on that task alone with the same ``steps`` x
  ``batch`` (each single-task model costs what the multi-task model costs; the multi-task model
  serves the three tasks for the cost of one of them, which is the paper's point);
* ``multi_3x``: the multi-task model trained for ``3 * steps`` (equal exposure: each task is then
  drawn about as often as by its single-task model, and the three tasks together cost what the
  three single-task models cost), so that a deficit of ``multi`` that is only its third of the
  per-task exposure is told apart from a cost of sharing one model.

Per task on held-out videos (test split of the digits, new trajectories): the flow-matching loss at
a fixed ``t`` grid and fixed noise over the pixels the task generates; and a sample metric (Euler,
20 steps, same noise for both arms): for ``i2v`` / ``inpaint`` the MSE of the sample to the true
video on the generated pixels, for ``c2v`` the Frechet distance to real test videos in the features
of a classifier trained on the train videos. Metrics are logs (differences are log ratios).
"""
from __future__ import annotations

import time

import numpy as np
import torch

from iclr26.common.seeding import seed_everything
from iclr26.models import diffusion as D
from iclr26.models.video import moving_digits

from .adapter import TASKS, MfMVideoTransformer, task_condition
from .training import flow_matching_loss, sample_task, train_multitask

SCALES = {
    "smoke": dict(frames=4, width=16, depth=1, n_train=64, steps=3, batch=8, n_eval=8, n_fd=12, sample_steps=3,
                  clf_epochs=1, lr=2e-3, ema=0.9),
    "quick": dict(frames=4, width=48, depth=3, n_train=3000, steps=200, batch=32, n_eval=96, n_fd=128,
                  sample_steps=20, clf_epochs=15, lr=2e-3, ema=0.99),
    # the paper: 2B / 8B DiT, >10 tasks, resolution-progressive joint image-video training on tens of
    # millions of clips; written down for reference, not runnable on a CPU
    "paper": dict(frames=16, width=384, depth=12, n_train=200000, steps=200000, batch=256, n_eval=1000, n_fd=2000,
                  sample_steps=50, clf_epochs=30, lr=1e-4, ema=0.9999),
}
SEEDS = {"smoke": 1, "quick": 3, "paper": 5}


def _model(cfg, seed):
    torch.manual_seed(seed)
    return MfMVideoTransformer(cfg["frames"], D.DiTConfig(image_size=16, patch=4, width=cfg["width"],
                                                          depth=cfg["depth"], heads=4))


def _evaluate(model, task, Xe, ye, Xf, yf, cfg, seed, clf, real_feat):
    """(log flow-matching loss, log sample metric) of ``model`` on ``task``."""
    fm = flow_matching_loss(model, Xe, ye, task, seed=seed + 7)
    if task == "c2v":
        noise = torch.randn((len(Xf),) + tuple(Xf.shape[1:]), generator=torch.Generator().manual_seed(seed + 11))
        s = sample_task(model, Xf, yf, task, steps=cfg["sample_steps"], noise=noise)
        q = D.frechet_distance(clf.features(s.numpy()), real_feat)
    else:
        noise = torch.randn(Xe.shape, generator=torch.Generator().manual_seed(seed + 13))
        s = sample_task(model, Xe, ye, task, steps=cfg["sample_steps"], noise=noise)
        _, mask = task_condition(torch.as_tensor(Xe), task)
        free = 1.0 - mask
        q = float((((s - torch.as_tensor(Xe)) ** 2) * free).sum() / free.sum())
    return float(np.log(fm)), float(np.log(max(q, 1e-12)))


def run(scale: str, seed: int) -> dict:
    cfg = SCALES[scale]
    seed_everything(seed)
    t0 = time.process_time()
    X, y = moving_digits(cfg["n_train"], frames=cfg["frames"], seed=seed, split="train")
    Xe, ye = moving_digits(cfg["n_eval"], frames=cfg["frames"], seed=seed + 1000, split="test")
    Xf, yf = moving_digits(cfg["n_fd"], frames=cfg["frames"], seed=seed + 2000, split="test")
    clf = D.FeatureClassifier.fit(X.reshape(len(X), -1), y, n_classes=10, epochs=cfg["clf_epochs"], seed=seed)
    real_feat = clf.features(Xf.reshape(len(Xf), -1))
    train = dict(steps=cfg["steps"], batch_size=cfg["batch"], lr=cfg["lr"], ema=cfg["ema"], seed=seed)

    fm = {t: {} for t in TASKS}
    quality = {t: {} for t in TASKS}
    curves = {}
    untrained = _model(cfg, seed)
    for task in TASKS:
        fm[task]["untrained"], quality[task]["untrained"] = _evaluate(untrained, task, Xe, ye, Xf, yf, cfg, seed,
                                                                      clf, real_feat)
    multi = _model(cfg, seed)
    curves["multi"] = train_multitask(multi, X, y, TASKS, **train)
    for task in TASKS:
        fm[task]["multi"], quality[task]["multi"] = _evaluate(multi, task, Xe, ye, Xf, yf, cfg, seed, clf, real_feat)
    del multi
    multi3 = _model(cfg, seed)
    curves["multi_3x"] = train_multitask(multi3, X, y, TASKS, **{**train, "steps": 3 * cfg["steps"]})
    for task in TASKS:
        fm[task]["multi_3x"], quality[task]["multi_3x"] = _evaluate(multi3, task, Xe, ye, Xf, yf, cfg, seed, clf,
                                                                    real_feat)
    del multi3
    for task in TASKS:
        single = _model(cfg, seed)
        curves[f"single_{task}"] = train_multitask(single, X, y, (task,), **train)
        fm[task]["single"], quality[task]["single"] = _evaluate(single, task, Xe, ye, Xf, yf, cfg, seed, clf,
                                                                real_feat)
        del single

    metrics = {}
    for task in TASKS:
        metrics[f"log_fm_loss_{task}"] = fm[task]
        name = "log_fd_c2v" if task == "c2v" else f"log_mse_{task}"
        metrics[name] = quality[task]
    tail = max(1, cfg["steps"] // 10)
    return {
        "metrics": metrics,
        "info": {
            "train_loss_last10pct": {k: float(np.mean(v[-tail:])) for k, v in curves.items()},
            "cpu_seconds": time.process_time() - t0,
        },
    }
