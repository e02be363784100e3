"""Claim checks for MILR (test-time latent reasoning) on synthetic compositional scenes.

One seed = one independently trained tiny unified model (its own held-out combinations, training
draws and initialisation), the unit of replication: the test prompts of one seed share that model's
luck and are a cluster. Per seed:

1. ``n_held`` of the 48 (object type of "a", relation) combinations are held out of training; the
   tiny unified transformer (:class:`~iclr26.generative.milr.scenes.TinyUnifiedTransformer`) is
   trained briefly (600 steps) on random correct layouts of the other prompts on a 4x4 grid, so it is far
   from perfect on the held-out prompts. Those are split into a validation set (tuning) and a test
   set (the measurements).
2. The critic (the reward every arm selects with) is a noisy detector followed by the GenEval-like
   checker (:class:`~iclr26.generative.milr.scenes.DetectorCritic`); the held-out evaluator that
   grades the returned images is the exact checker
   (:func:`~iclr26.generative.milr.scenes.check_scenes`), so no arm is graded by its own reward.
3. Arms at an equal budget of critic calls: ``base`` (MILR's starting sample: greedy reasoning
   text, sampled image), ``best_of_n`` (N = budget; text decoding and temperature tuned on
   validation over a grid as large as MILR's), MILR ``text`` / ``image`` / ``both`` (one initial
   sample + budget - 1 Adam steps in argmax mode, as the official code; eta tuned per mode on
   validation), the premise control ``both_frozen`` (the same loop with eta = 0: the same budget
   of resampled images with the latents never moved) and ``both_sgd`` (the plain step at the
   paper's eta, for the record). Tuning reads only the critic on validation prompts. Every
   test prompt is run ``repeats`` times; items are paired by position across arms.
"""
from __future__ import annotations

import time

import numpy as np
import torch

from iclr26.common.seeding import seed_everything

from .reasoner import LatentReasoner, best_of_n
from .scenes import DetectorCritic, SceneSpec, all_prompts, check_scenes, train_scene_model

SCALES = {
    "smoke": dict(side=4, train_steps=30, d_model=32, n_held=12, n_val=8, n_test=8, repeats=1, budget=3,
                  lr_grid=(0.03, 0.3), bon_grid=((False, 1.0), (True, 1.0))),
    "quick": dict(side=4, train_steps=600, d_model=48, n_held=16, n_val=64, n_test=300, repeats=2, budget=16,
                  lr_grid=(0.01, 0.03, 0.1, 0.3),
                  bon_grid=((False, 1.0), (False, 0.8), (False, 1.25), (True, 1.0))),
    # the paper: Janus-Pro-7B on GenEval (553 prompts), T2I-CompBench and WISE, up to 30 steps,
    # lambda_t = 0.2, lambda_v = 0.02, eta = 0.03; written down, not run
    "paper": dict(side=4, train_steps=600, d_model=48, n_held=16, n_val=96, n_test=400, repeats=4, budget=31,
                  lr_grid=(0.01, 0.03, 0.1, 0.3),
                  bon_grid=((False, 1.0), (False, 0.8), (False, 1.25), (True, 1.0))),
}
SEEDS = {"smoke": 1, "quick": 6, "paper": 10}
MODES = ("text", "image", "both")
# optimised fractions on the toy's short sequences (4 plan tokens, 16 image tokens): 2 text and 2 image
# tokens; the paper's 0.2 / 0.02 would round to zero here (n_optimised keeps one)
TEXT_RATIO, IMAGE_RATIO = 0.5, 0.125
PAPER_LR = 0.03


def run(scale: str, seed: int) -> dict:
    torch.set_num_threads(1)
    cfg = SCALES[scale]
    rng = seed_everything(seed)
    t0 = time.perf_counter()
    spec = SceneSpec(cfg["side"])
    prompts = all_prompts()
    key = prompts[:, 1] * 12 + prompts[:, 2] * 4 + prompts[:, 3]          # (colour_a, shape_a, relation)
    held = np.isin(key, rng.choice(48, cfg["n_held"], replace=False))
    pool = prompts[held][rng.permutation(int(held.sum()))]
    val, test = pool[:cfg["n_val"]], pool[cfg["n_val"]:cfg["n_val"] + cfg["n_test"]]
    model = train_scene_model(prompts[~held], spec, cfg["train_steps"], seed, d_model=cfg["d_model"])
    t_train = time.perf_counter() - t0
    critic = DetectorCritic(spec, seed=seed)
    budget = cfg["budget"]

    def arm(name, par, ps, gseed):
        """(evaluator-correct 0/1, critic reward of the returned sample, critic calls, mean TV per step)."""
        g = torch.Generator().manual_seed(gseed)
        moves = np.nan
        if name == "base":
            res = LatentReasoner(model, critic, max_steps=0).generate(ps, g)
        elif name == "best_of_n":
            res = best_of_n(model, critic, ps, budget, temperature=par[1], greedy_text=par[0], generator=g)
        else:
            mode, opt = {"both_frozen": ("both", "adam"), "both_sgd": ("both", "sgd")}.get(name, (name, "adam"))
            res = LatentReasoner(model, critic, text_ratio=TEXT_RATIO, image_ratio=IMAGE_RATIO, lr=par,
                                 max_steps=budget - 1, mode=mode, optimizer=opt).generate(ps, g)
            steps = [x for mv in res.moves for x in mv]
            moves = float(np.mean(steps)) if steps else np.nan
        ok = check_scenes(ps, res.image.numpy(), spec).all(1).astype(float)
        return ok, res.reward.numpy().astype(float), res.calls.numpy().astype(float), moves

    # ---- tuning on the validation prompts, by the critic only
    val_curves, chosen = {}, {}
    grids = [("best_of_n", cfg["bon_grid"])] + [(m, cfg["lr_grid"]) for m in MODES]
    for name, grid in grids:
        val_curves[name] = [float((arm(name, par, val, 10_000 * seed + 7)[1] >= 0).mean()) for par in grid]
        chosen[name] = grid[int(np.argmax(val_curves[name]))]           # ties: the first value
    chosen["both_frozen"], chosen["both_sgd"] = 0.0, PAPER_LR
    t_tune = time.perf_counter() - t0 - t_train

    # ---- test prompts, ``repeats`` independent runs each
    test_rep = np.concatenate([test] * cfg["repeats"])
    names = ("base", "best_of_n") + MODES + ("both_frozen", "both_sgd")
    arms = {"base": "base", "best_of_n": "best_of_n", "text": "milr_text", "image": "milr_image",
            "both": "milr_both", "both_frozen": "milr_both_frozen", "both_sgd": "milr_both_sgd"}
    correct, critic_reward, calls, moves = {}, {}, {}, {}
    for i, name in enumerate(names):
        ok, r, c, mv = arm(name, chosen.get(name), test_rep, 20_000 * seed + 100 * i)
        a = arms[name]
        correct[a], critic_reward[a], calls[a] = ok.tolist(), r.tolist(), float(c.mean())
        if name not in ("base", "best_of_n"):
            moves[a] = mv
    chosen_out = {k: (list(v) if isinstance(v, tuple) else v) for k, v in chosen.items()}
    return {
        "metrics": {"correct": correct, "critic_reward": critic_reward},
        "info": {"accuracy": {k: float(np.mean(v)) for k, v in correct.items()},
                 "critic_solved": {k: float(np.mean(np.asarray(v) >= 0)) for k, v in critic_reward.items()},
                 "mean_critic_reward": {k: float(np.mean(v)) for k, v in critic_reward.items()},
                 "mean_critic_calls": calls, "mean_prefix_tv_per_step": moves, "budget": budget,
                 "optimised_tokens": [LatentReasoner(model, critic, TEXT_RATIO, IMAGE_RATIO).kt,
                                      LatentReasoner(model, critic, TEXT_RATIO, IMAGE_RATIO).kv],
                 "chosen": chosen_out, "val_critic_solved": val_curves, "n_test_items": len(test_rep),
                 "seconds_train": t_train, "seconds_tune": t_tune, "seconds": time.perf_counter() - t0},
    }
