"""Claim checks for DUPA (dual-path condition alignment) on a tiny decoupled diffusion transformer.

One seed = one independently initialised and trained set of models (the unit of replication: the
paper's claim is about training a model, so each trained model is one draw; the samples of one model
are a cluster and enter only through that model's Frechet distance). Within a seed every arm starts
from the same initial weights, sees the same number of noisy inputs per step (matched compute) and
the same number of steps, and is sampled from the same starting noise (paired design):

* ``ddt``: the base model, rectified-flow matching on ``batch`` images per step;
* ``dupa``: ``batch / 2`` images, each noised twice, flow matching on both paths plus
  ``lambda * L_align`` between the two paths' conditions (:class:`.loss.DUPALoss`);
* ``dual``: the same two paths without the alignment term (ablation: isolates the alignment from
  the duplicated noise draws of the dual-path input);
* ``repa``: REPA with the features of a small MLP digit classifier trained on the train split
  (a separate network from the evaluator; not a pretrained foundation encoder: none exists offline).

Data: scikit-learn's 8x8 digits (``load_digits_8x8``), models trained on the train split. Metric:
the Frechet distance in the feature space of a :class:`~iclr26.models.diffusion.FeatureClassifier`
trained on the train split, between class-balanced samples (Euler sampler, no guidance) and the
test split, at three checkpoints (EMA weights); reported as ``log FD``. Nothing is tuned: every
arm uses the same optimiser, learning rate and ``lambda = 0.5``.
"""
from __future__ import annotations

import time

import numpy as np
import torch

from iclr26.common.seeding import seed_everything
from iclr26.models import diffusion as D

from .loss import DUPALoss, REPALoss, train_ddt
from .model import DDTConfig, DecoupledDiT

SCALES = {
    "smoke": dict(steps=10, batch=16, checkpoints=(2, 5, 10), per_class=4, sample_steps=3, clf_epochs=1,
                  width=32, enc_depth=1, dec_depth=1, lr=3e-3, ema=0.98, lam=0.5),
    "quick": dict(steps=500, batch=64, checkpoints=(100, 250, 500), per_class=50, sample_steps=10,
                  clf_epochs=40, width=64, enc_depth=2, dec_depth=2, lr=3e-3, ema=0.98, lam=0.5),
    # the paper: DDT-XL/2 (22 encoder + 6 decoder blocks, width 1152) on ImageNet 256x256 latents,
    # 400 epochs (~2M steps at batch 256), FID-50K; not run here
    "paper": dict(steps=2_000_000, batch=256, checkpoints=(400_000, 1_000_000, 2_000_000), per_class=50,
                  sample_steps=250, clf_epochs=60, width=1152, enc_depth=22, dec_depth=6, lr=1e-4, ema=0.9999,
                  lam=0.5),
}
SEEDS = {"smoke": 1, "quick": 5, "paper": 5}
ARMS = ("ddt", "dupa", "dual", "repa")
METHOD = {"ddt": "none", "dupa": "dupa", "dual": "dual", "repa": "repa"}


def run(scale: str, seed: int) -> dict:
    cfg = SCALES[scale]
    seed_everything(seed)
    t0 = time.perf_counter()
    Xtr, ytr = D.load_digits_8x8("train")
    Xte, _ = D.load_digits_8x8("test")
    flat = Xtr.reshape(len(Xtr), -1)
    evaluator = D.FeatureClassifier.fit(flat, ytr, epochs=cfg["clf_epochs"], seed=0)      # fixed evaluator
    repa_enc = D.FeatureClassifier.fit(flat, ytr, epochs=cfg["clf_epochs"], seed=1)       # REPA's encoder
    f_test = evaluator.features(Xte)

    def repa_target(x0):
        return torch.from_numpy(repa_enc.features(x0)).float()

    # trivial generator: independent per-pixel Gaussians fitted per class on the train split
    rng = np.random.default_rng(10_000 + seed)
    lab = np.repeat(np.arange(10), cfg["per_class"])
    mu = np.stack([flat[ytr == k].mean(0) for k in range(10)])
    sd = np.stack([flat[ytr == k].std(0) for k in range(10)])
    trivial = np.clip(mu[lab] + sd[lab] * rng.standard_normal((len(lab), 64)), -1, 1)
    fd_trivial = D.frechet_distance(evaluator.features(trivial), f_test)
    # untrained level: the sampler's starting noise, clipped to the pixel range
    fd_noise = D.frechet_distance(evaluator.features(np.clip(rng.standard_normal((len(lab), 64)), -1, 1)), f_test)

    config = DDTConfig(width=cfg["width"], enc_depth=cfg["enc_depth"], dec_depth=cfg["dec_depth"])
    torch.manual_seed(seed)
    init = DecoupledDiT(config).state_dict()
    y_s = torch.as_tensor(lab)
    noise = torch.randn((len(lab), 1, 8, 8), generator=torch.Generator().manual_seed(20_000 + seed))

    fd = {a: {} for a in ARMS}
    secs, hist = {}, {}
    for arm in ARMS:
        model = DecoupledDiT(config)
        model.load_state_dict(init)
        torch.manual_seed(30_000 + seed)                       # projector init: same for dupa and repa
        align = (DUPALoss(config.width) if arm == "dupa"
                 else REPALoss(config.width, evaluator.head.in_features) if arm == "repa" else None)

        def score(step, m, arm=arm):
            x = D.sample(m, y_s, (1, 8, 8), "flow", steps=cfg["sample_steps"], noise=noise).clamp(-1, 1)
            fd[arm][step] = D.frechet_distance(evaluator.features(x.reshape(len(x), -1)), f_test)

        ta = time.perf_counter()
        h = train_ddt(model, Xtr, ytr, METHOD[arm], steps=cfg["steps"], batch_size=cfg["batch"], lr=cfg["lr"],
                      lam=cfg["lam"], align=align, ema=cfg["ema"], target_fn=repa_target if arm == "repa" else None,
                      seed=40_000 + seed, checkpoints=cfg["checkpoints"], on_checkpoint=score)
        secs[arm] = time.perf_counter() - ta
        hist[arm] = {"fm_last50": float(np.mean(h["fm"][-50:])), "align_last50": float(np.mean(h["align"][-50:]))}

    c1, c2, c3 = cfg["checkpoints"]
    log = {a: {s: float(np.log(v)) for s, v in fd[a].items()} for a in ARMS}
    return {
        "metrics": {
            "log_fd_early": {a: log[a][c1] for a in ARMS},
            "log_fd_mid": {a: log[a][c2] for a in ARMS},
            "log_fd_final": {a: log[a][c3] for a in ARMS},
            "log_fd_auc": {a: float(np.mean([log[a][c] for c in (c1, c2, c3)])) for a in ARMS},
            # DUPA at the first checkpoint against the base model at the last (the paper's "5x")
            "log_fd_speedup": {"dupa_early": log["dupa"][c1], "ddt_final": log["ddt"][c3]},
        },
        "info": {"fd": {a: {str(s): v for s, v in fd[a].items()} for a in ARMS}, "fd_trivial": fd_trivial,
                 "log_fd_trivial": float(np.log(fd_trivial)), "log_fd_noise": float(np.log(fd_noise)), "checkpoints": list(cfg["checkpoints"]),
                 "train_seconds": secs, "losses": hist, "seconds": time.perf_counter() - t0},
    }
