"""Claim checks for power-law guidance ("Overshoot and Shrinkage in Classifier-Free Guidance").

Two parts per seed (one seed = one independent draw of the exact check and one trained model):

**Exact check** (the paper's theory model): two equal Gaussians ``N(+m, I)``, ``N(-m, I)`` with
``|m| = sqrt(d)``, class ``+`` as the condition, exact conditional and unconditional scores
(:class:`iclr26.models.diffusion.ExactMixtureModel`), sampled by the ancestral (``eta = 1``) DDIM
sampler on the cosine VP path. Both classes share the covariance, so ``dS`` lies along ``m`` and
the coordinates orthogonal to ``m`` follow the unguided reverse process exactly: the guided law
differs from the target only along ``m / |m|``, and ``|dS|`` is the absolute value of its
projection. The simulation therefore runs the 1-D projection with means ``+-sqrt(d)``, which is
exact for every ``d``. Each arm uses the same noise as the unguided sampler (``none``), and

* overshoot ``= mean(x_guided) - mean(x_none)`` along ``m / |m|`` (in units of the class std);
* shrinkage ``= 1 - var(x_guided) / var(x_none)``.

Comparing with the unguided sampler on the same noise removes the discretisation error of the
sampler itself (about 1-3 % of the variance at this number of steps).

**Learned check**: a class-conditional rectified-flow MLP trained on the 8x8 digits (train split,
10 % label dropout), sampled with 25 Euler steps. For CFG and power-law guidance the guidance
strength ``omega`` is chosen on a grid by the Frechet distance to the validation split (features
of a classifier trained on the train split); fresh samples at that ``omega`` are scored against the
test split. Robustness: the same model at ``4 omega*`` (four times the validation choice).
"""
from __future__ import annotations

import time

import numpy as np
import torch

from iclr26.common.seeding import seed_everything
from iclr26.models import diffusion as D

from .guidance import PowerLawGuidance

SCALES = {
    "smoke": dict(dims=(1, 8), n=500, steps=20, omega=1.0, alpha=0.9,
                  train_steps=30, width=32, per_class=6, grid=(0.5, 1.0), flow_steps=5, clf_epochs=2),
    "quick": dict(dims=(1, 2, 4, 8, 16, 32, 64), n=10000, steps=100, omega=1.0, alpha=0.9,
                  train_steps=1500, width=256, per_class=36, grid=(0.125, 0.25, 0.5, 1.0, 2.0, 4.0),
                  flow_steps=25, clf_epochs=40),
    # the paper: GMM simulations (dimensions up to ~10^3); EDM2-S / DiT-XL/2 on ImageNet, MMDiT
    "paper": dict(dims=(1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024), n=20000, steps=500, omega=1.0,
                  alpha=0.9, train_steps=20000, width=512, per_class=500,
                  grid=(0.125, 0.25, 0.5, 1.0, 2.0, 4.0), flow_steps=50, clf_epochs=60),
}
SEEDS = {"smoke": 1, "quick": 6, "paper": 10}
ROBUST_FACTOR = 4.0


def gmm_artifacts(d, n, steps, guidance, seed):
    """(overshoot, shrinkage) of ``guidance`` against the unguided sampler on the same noise."""
    g = D.GaussianMixture([[np.sqrt(d)], [-np.sqrt(d)]], 1.0)
    model = D.ExactMixtureModel(g, "eps")
    y = torch.zeros(n, dtype=torch.long)
    out = []
    for gd in (None, guidance):
        gen = torch.Generator().manual_seed(seed)
        out.append(D.sample(model, y, (1,), "eps", steps=steps, eta=1.0, guidance=gd, generator=gen).numpy()[:, 0])
    base, x = out
    return float(x.mean() - base.mean()), float(1.0 - x.var() / base.var())


def loglog_slope(d, v):
    return float(np.polyfit(np.log(d), np.log(np.maximum(np.asarray(v, float), 1e-4)), 1)[0])


class _VelocityPL(PowerLawGuidance):
    """Power-law rule with the norm of the velocity difference (the notes' "simply s^alpha")."""

    def __call__(self, pred_cond, pred_uncond, score_scale=None):
        return super().__call__(pred_cond, pred_uncond, 1.0)


def run(scale: str, seed: int) -> dict:
    cfg = SCALES[scale]
    seed_everything(seed)
    t0 = time.perf_counter()
    dims = np.array(cfg["dims"], float)
    art = {a: {"overshoot": [], "shrinkage": []} for a in ("cfg", "pl")}
    for i, d in enumerate(cfg["dims"]):
        for arm, gd in (("cfg", D.ClassifierFreeGuidance(cfg["omega"])),
                        ("pl", PowerLawGuidance(cfg["omega"], cfg["alpha"]))):
            o, s = gmm_artifacts(d, cfg["n"], cfg["steps"], gd, 1000 * seed + i)
            art[arm]["overshoot"].append(o)
            art[arm]["shrinkage"].append(s)
    t_gmm = time.perf_counter() - t0

    # ---- learned check
    Xtr, ytr = D.load_digits_8x8("train")
    Xva, _ = D.load_digits_8x8("val")
    Xte, _ = D.load_digits_8x8("test")
    Xtr = Xtr.reshape(len(Xtr), -1)
    clf = D.FeatureClassifier.fit(Xtr, ytr, epochs=cfg["clf_epochs"], seed=0)   # fixed evaluator
    f_val, f_test = clf.features(Xva), clf.features(Xte)
    torch.manual_seed(seed)
    model = D.ConditionalMLP(64, 10, width=cfg["width"], depth=3)
    D.train_diffusion(model, Xtr, ytr, "flow", steps=cfg["train_steps"], batch_size=128, lr=2e-3,
                      p_uncond=0.1, seed=seed)
    y = torch.as_tensor(np.repeat(np.arange(10), cfg["per_class"]))

    def fd(guidance, ref, noise_seed):
        noise = torch.randn(len(y), 64, generator=torch.Generator().manual_seed(noise_seed))
        x = D.sample(model, y, (64,), "flow", steps=cfg["flow_steps"], guidance=guidance, noise=noise).clamp(-1, 1)
        return D.frechet_distance(ref, clf.features(x))

    makers = {"cfg": lambda w: D.ClassifierFreeGuidance(w),
              "pl": lambda w: PowerLawGuidance(w, cfg["alpha"]),
              "pl_velocity": lambda w: _VelocityPL(w, cfg["alpha"])}
    best, test_fd, robust_fd, val_curves = {}, {}, {}, {}
    for arm, mk in makers.items():
        val_curves[arm] = [fd(mk(w), f_val, 10_000 + seed) for w in cfg["grid"]]
        best[arm] = float(cfg["grid"][int(np.argmin(val_curves[arm]))])
        test_fd[arm] = fd(mk(best[arm]), f_test, 20_000 + seed)
        robust_fd[arm] = fd(mk(ROBUST_FACTOR * best[arm]), f_test, 20_000 + seed)
    test_fd["none"] = fd(None, f_test, 20_000 + seed)
    robust_fd["none"] = test_fd["none"]
    return {
        "metrics": {
            "overshoot_slope": {a: loglog_slope(dims, art[a]["overshoot"]) for a in art},
            "shrinkage_slope": {a: loglog_slope(dims, art[a]["shrinkage"]) for a in art},
            "log_overshoot": {a: float(np.mean(np.log(np.maximum(art[a]["overshoot"], 1e-4)))) for a in art},
            "log_shrinkage": {a: float(np.mean(np.log(np.maximum(art[a]["shrinkage"], 1e-4)))) for a in art},
            "log_fd": {a: float(np.log(v)) for a, v in test_fd.items()},
            "log_fd_degradation": {a: float(np.log(robust_fd[a] / test_fd[a])) for a in makers},
        },
        "info": {"dims": list(cfg["dims"]), "artifacts": art, "best_omega": best, "grid": list(cfg["grid"]),
                 "val_fd": val_curves, "test_fd": test_fd, "robust_fd": robust_fd,
                 "seconds_gmm": t_gmm, "seconds": time.perf_counter() - t0},
    }
