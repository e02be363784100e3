"""Claim checks for Astraea (token-wise acceleration of video DiTs), on a toy video DiT.

One seed = one independently trained model: a class-conditional rectified-flow video DiT
(:class:`iclr26.models.video.TinyVideoDiT`, 5 frames of 16x16 px, 4x4 patches: 80 tokens, 4 adaLN-Zero blocks)
trained on moving 8x8 digits (train split), sampled with 20 Euler steps and classifier-free guidance
``omega = 4`` (diffusers ``guidance_scale = 5``, the default of Wan2.1, the paper's main model; the
conditional and unconditional passes go through the transformer as one batch). Every arm starts from the same
test noise and labels as the full-compute sample of the same model; the metric is the per-sample
PSNR against that full-compute sample (the paper's PSNR against the original model's video).

Arms, all at the same token-compute budget (mean fraction of token-block evaluations ``target``):

* ``astraea``: the paper's score with the per-step budget found by :func:`search_token_budget` on
  *validation* noise (fitness: MSE against the full-compute samples of the validation noise);
* ``astraea_uniform``: the same score with the uniform budget (control for the search);
* ``random``: uniformly random tokens; ``fixed``: the tokens ranked once by the score at the first
  reduced step and kept (the paper's fixed-token ablation); ``round_robin``: the penalty term alone
  (``w_alpha = 0``: the least recently computed tokens, i.e. a round-robin that covers every token
  equally often), the control that isolates the significance term ``S_LSE * Delta`` from mere
  coverage. Each takes the better of the uniform and the searched schedule on the validation noise
  (tuned with the same budget);
* ``step_skip``: step-level skipping at the same budget: the model output is reused at every other
  step (the paper's timestep-level skipping ablation; for the Euler sampler this is exactly Euler
  with half as many steps);
* ``independent``: the full-compute sample from other noise (the trivial level of the metric).

Premise metric ``flow_loss``: the held-out rectified-flow loss of the trained model (``trained``)
against the zero-velocity predictor (``zero_velocity``) on test-split videos with the same noise and
times: the model has learned its task, so the caches are compared on a denoiser, not a random net.

Info: the CPU wall-clock of one sampling run against the kept fraction of tokens.
"""
from __future__ import annotations

import time

import numpy as np
import torch

from iclr26.common.seeding import seed_everything
from iclr26.models import diffusion as D

from .acceleration import StepSkip, apply_astraea, psnr, search_token_budget, uniform_budget
from iclr26.models.video import TinyVideoDiT, moving_digits

SCALES = {
    "smoke": dict(frames=5, width=32, depth=2, n_train=64, train_steps=4, batch=16, steps=6, target=0.5,
                  omega=4.0, n_val=4, n_test=4, population=3, generations=1, children=2, timing_fracs=(0.5, 1.0),
                  timing_reps=1),
    "quick": dict(frames=5, width=64, depth=4, n_train=3000, train_steps=600, batch=32, steps=20, target=0.5,
                  omega=4.0, n_val=12, n_test=32, population=8, generations=5, children=6,
                  timing_fracs=(0.25, 0.5, 0.75, 1.0), timing_reps=2),
    # the paper: Wan2.1-1.3B / HunyuanVideo / OpenSora 1.2, 50 steps, search with population 50,
    # 30 generations, 30 children, fitness on 4 prompts, VBench prompts for the test
    "paper": dict(frames=5, width=128, depth=8, n_train=20000, train_steps=20000, batch=64, steps=50, target=0.5,
                  omega=4.0, n_val=4, n_test=256, population=50, generations=30, children=30,
                  timing_fracs=(0.2, 0.4, 0.5, 0.6, 0.8, 1.0), timing_reps=5),
}
SEEDS = {"smoke": 1, "quick": 5, "paper": 5}


def _sampler(model, y, shape, steps, noise, omega):
    return D.sample(model, y, shape, "flow", steps=steps, noise=noise, guidance=D.ClassifierFreeGuidance(omega))


def _astraea_run(model, y, shape, steps, noise, omega, budget, selection="astraea", seed=0):
    """One sampling run with the cache; ``selection="round_robin"`` is the score with ``w_alpha = 0``."""
    if selection == "round_robin":
        acc = apply_astraea(model, budget, w_alpha=0.0, selection="astraea", seed=seed)
    else:
        acc = apply_astraea(model, budget, selection=selection, seed=seed)
    try:
        x = _sampler(model, y, shape, steps, noise, omega)
        frac = acc.token_fraction
    finally:
        acc.remove()
    return x, frac


def run(scale: str, seed: int) -> dict:
    cfg = SCALES[scale]
    seed_everything(seed)
    t0 = time.perf_counter()
    T, target, om = cfg["steps"], cfg["target"], cfg["omega"]
    X, y = moving_digits(cfg["n_train"], frames=cfg["frames"], seed=seed, split="train")
    model = TinyVideoDiT(cfg["frames"], D.DiTConfig(image_size=16, patch=4, width=cfg["width"],
                                                   depth=cfg["depth"], heads=4))
    losses = D.train_diffusion(model, X, y, "flow", steps=cfg["train_steps"], batch_size=cfg["batch"],
                               lr=2e-3, seed=seed)
    shape = tuple(X.shape[1:])

    def draw(n, s):
        g = torch.Generator().manual_seed(s)
        return torch.randn((n,) + shape, generator=g), torch.randint(0, 10, (n,), generator=g)

    nv, yv = draw(cfg["n_val"], 10_000 + seed)           # validation noise: the search and choices
    nt, yt = draw(cfg["n_test"], 20_000 + seed)          # test noise: the claims only
    no, _ = draw(cfg["n_test"], 30_000 + seed)           # other noise: the trivial level
    with torch.no_grad():
        full_v = _sampler(model, yv, shape, T, nv, om)
        full_t = _sampler(model, yt, shape, T, nt, om)
        other_t = _sampler(model, yt, shape, T, no, om)

        def val_mse(budget, selection="astraea"):
            x, _ = _astraea_run(model, yv, shape, T, nv, om, budget, selection, seed)
            return float(((x - full_v) ** 2).mean())

        t_s = time.perf_counter()
        res = search_token_budget(val_mse, T, target, population=cfg["population"],
                                  generations=cfg["generations"], children=cfg["children"],
                                  tolerance=0.0, seed=seed)
        search_s = time.perf_counter() - t_s
        searched, uniform = res.budget, uniform_budget(T, target)

        arms, fracs, choice = {}, {}, {}
        arms["astraea"], fracs["astraea"] = _astraea_run(model, yt, shape, T, nt, om, searched)
        arms["astraea_uniform"], fracs["astraea_uniform"] = _astraea_run(model, yt, shape, T, nt, om, uniform)
        for sel in ("random", "fixed", "round_robin"):
            cands = {"uniform": uniform, "searched": searched}
            v = {k: val_mse(b, sel) for k, b in cands.items()}
            choice[sel] = min(v, key=v.get)
            arms[sel], fracs[sel] = _astraea_run(model, yt, shape, T, nt, om, cands[choice[sel]], sel, seed)
        n_keep = int(round(target * T))
        mask = np.zeros(T, bool)
        mask[(np.arange(n_keep) * T) // n_keep] = True                  # every other step at 50 %
        arms["step_skip"] = _sampler(StepSkip(model, mask), yt, shape, T, nt, om)
        fracs["step_skip"] = float(mask.mean())

        timing = _timing(model, yt, shape, T, nt, om, cfg["timing_fracs"], cfg["timing_reps"])

    metrics = {"psnr": {k: psnr(x, full_t).tolist() for k, x in arms.items()}}
    metrics["psnr"]["independent"] = psnr(other_t, full_t).tolist()
    metrics["flow_loss"] = _held_out_flow_loss(model, cfg["n_test"], cfg["frames"], seed)
    i50 = min(range(len(cfg["timing_fracs"])), key=lambda i: abs(cfg["timing_fracs"][i] - target))
    metrics["speedup"] = {"astraea": timing["plain_model_seconds"] / timing["seconds"][i50]}
    return {
        "metrics": metrics,
        "info": {
            "train_loss_last100": float(np.mean(losses[-100:])),
            "searched_budget": [float(b) for b in searched],
            "uniform_budget": [float(b) for b in uniform],
            "search_history_val_mse": [float(h) for h in res.history],
            "search_evaluations": res.evaluations,
            "search_seconds": search_s,
            "token_fraction": fracs,
            "baseline_schedule_on_val": choice,
            "mean_psnr": {k: float(np.mean(v)) for k, v in metrics["psnr"].items()},
            "wallclock_vs_kept_fraction": timing,
            "seconds": time.perf_counter() - t0,
        },
    }


def _held_out_flow_loss(model, n, frames, seed):
    """Per-video rectified-flow loss ``||v(x_t, t, y) - (eps - x_0)||^2`` (mean over pixels) on
    test-split videos, for the trained model and for the zero-velocity predictor (the same ``x_0``,
    ``eps``, ``t``): the premise that the model learned its task."""
    X, y = moving_digits(n, frames=frames, seed=seed, split="test")
    g = torch.Generator().manual_seed(40_000 + seed)
    x0, y = torch.from_numpy(X), torch.from_numpy(y)
    t = torch.rand(n, generator=g)
    eps = torch.randn(x0.shape, generator=g)
    tt = t.view((n,) + (1,) * (x0.dim() - 1))
    xt, target = (1 - tt) * x0 + tt * eps, eps - x0
    with torch.no_grad():
        pred = model(xt, t, y)
    per = lambda d: (d ** 2).reshape(n, -1).mean(1).tolist()
    return {"trained": per(pred - target), "zero_velocity": per(target)}


def _timing(model, y, shape, T, noise, omega, fracs, reps):
    """CPU seconds of one sampling run (best of ``reps``) with a uniform budget at each kept
    fraction (the first step always full), and of the unwrapped model."""
    out = {"kept_fraction": [], "seconds": [], "plain_model_seconds": None}
    for f in fracs:
        b = np.full(T, float(f))
        b[0] = 1.0
        best = float("inf")
        for _ in range(reps):
            t = time.process_time()
            _astraea_run(model, y, shape, T, noise, omega, b)
            best = min(best, time.process_time() - t)
        out["kept_fraction"].append(float(b.mean()))
        out["seconds"].append(best)
    best = float("inf")
    for _ in range(reps):
        t = time.process_time()
        _sampler(model, y, shape, T, noise, omega)
        best = min(best, time.process_time() - t)
    out["plain_model_seconds"] = best
    return out
