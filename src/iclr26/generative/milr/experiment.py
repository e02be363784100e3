"""Claim checks for MILR (test-time latent reasoning) on synthetic compositional scenes.

One seed = one independently trained tiny unified model (its own held-out combinations, training
draws and initialisation), the unit of replication: the test prompts of one seed share that model's
luck and are a cluster. Per seed:

1. 12 of the 48 (object type of "a", relation) combinations are held out of training; the tiny
   unified transformer (:class:`~iclr26.generative.milr.scenes.TinyUnifiedTransformer`) is trained on
   random correct layouts of the other prompts. The held-out prompts are split into a validation
   set (tuning) and a test set (the measurements), so base sampling is imperfect on the test set.
2. The critic is the programmatic GenEval-like checker (binding, counts, relation), used as the
   reward exactly as the paper uses each benchmark's evaluator.
3. Arms at an equal budget of critic calls: ``base`` (one sample at temperature 1),
   ``best_of_n`` (N = budget, temperature tuned on validation), and MILR ``text`` / ``image`` /
   ``both`` (one initial sample + budget - 1 REINFORCE steps; eta tuned per mode on validation).
   Every prompt is run ``repeats`` times (independent sampling noise); the items are paired by
   position across arms.
"""
from __future__ import annotations

import time

import numpy as np
import torch

from iclr26.common.seeding import seed_everything

from .reasoner import LatentReasoner, best_of_n
from .scenes import SceneSpec, all_prompts, check_scenes, scene_reward, train_scene_model

SCALES = {
    "smoke": dict(train_steps=30, d_model=32, n_held=12, n_val=8, n_test=8, repeats=1, budget=3,
                  lr_grid=(0.03, 3.0), temp_grid=(1.0, 1.3)),
    "quick": dict(train_steps=800, d_model=64, n_held=12, n_val=64, n_test=300, repeats=2, budget=16,
                  lr_grid=(0.03, 0.3, 3.0), temp_grid=(1.0, 0.8, 1.25)),
    # the paper: Janus-Pro-7B on GenEval (553 prompts), T2I-CompBench and WISE, up to 30 steps,
    # lambda_t = 0.2, lambda_v = 0.02, eta = 0.03; written down, not run
    "paper": dict(train_steps=800, d_model=64, n_held=12, n_val=96, n_test=300, repeats=4, budget=31,
                  lr_grid=(0.03, 0.01, 0.3, 3.0), temp_grid=(1.0, 0.8, 0.9, 1.25)),
}
SEEDS = {"smoke": 1, "quick": 6, "paper": 10}
MODES = ("text", "image", "both")


def run(scale: str, seed: int) -> dict:
    cfg = SCALES[scale]
    rng = seed_everything(seed)
    t0 = time.perf_counter()
    spec = SceneSpec(4)
    prompts = all_prompts()
    key = prompts[:, 1] * 12 + prompts[:, 2] * 4 + prompts[:, 3]          # (colour_a, shape_a, relation)
    held = np.isin(key, rng.choice(48, cfg["n_held"], replace=False))
    pool = prompts[held][rng.permutation(int(held.sum()))]
    val, test = pool[:cfg["n_val"]], pool[cfg["n_val"]:cfg["n_val"] + cfg["n_test"]]
    model = train_scene_model(prompts[~held], spec, cfg["train_steps"], seed, d_model=cfg["d_model"])
    t_train = time.perf_counter() - t0

    def reward(p, t, v):
        return scene_reward(p, t, v, spec)

    budget = cfg["budget"]

    def arm(name, par, ps, gseed):
        g = torch.Generator().manual_seed(gseed)
        if name == "base":
            t, v, _, _ = model.continue_sequences(ps, torch.zeros(len(ps), 0), torch.zeros(len(ps), 0), generator=g)
            return check_scenes(ps, v.numpy(), spec).all(1).astype(float), np.ones(len(ps))
        if name == "best_of_n":
            res = best_of_n(model, reward, ps, budget, temperature=par, generator=g)
        else:
            res = LatentReasoner(model, reward, lr=par, max_steps=budget - 1, mode=name).generate(ps, g)
        ok = check_scenes(ps, res.image.numpy(), spec).all(1).astype(float)
        return ok, res.calls.numpy().astype(float)

    # ---- tuning on the validation prompts only
    val_curves, chosen = {}, {}
    for name, grid in [("best_of_n", cfg["temp_grid"])] + [(m, cfg["lr_grid"]) for m in MODES]:
        val_curves[name] = [float(arm(name, par, val, 10_000 * seed + 7)[0].mean()) for par in grid]
        chosen[name] = float(grid[int(np.argmax(val_curves[name]))])      # ties: the first (paper's) value
    t_tune = time.perf_counter() - t0 - t_train

    # ---- test prompts, ``repeats`` independent runs each
    test_rep = np.concatenate([test] * cfg["repeats"])
    correct, calls = {}, {}
    for i, name in enumerate(("base", "best_of_n") + MODES):
        ok, c = arm(name, chosen.get(name), test_rep, 20_000 * seed + 100 * i)
        correct[name], calls[name] = ok.tolist(), float(c.mean())
    arms = {"base": "base", "best_of_n": "best_of_n", "text": "milr_text", "image": "milr_image",
            "both": "milr_both"}
    return {
        "metrics": {"correct": {arms[k]: v for k, v in correct.items()}},
        "info": {"accuracy": {arms[k]: float(np.mean(v)) for k, v in correct.items()},
                 "mean_critic_calls": {arms[k]: v for k, v in calls.items()}, "budget": budget,
                 "chosen": chosen, "val_accuracy": val_curves, "n_test_items": len(test_rep),
                 "seconds_train": t_train, "seconds_tune": t_tune, "seconds": time.perf_counter() - t0},
    }
