"""Claim checks for the product-of-experts sampler against an exact product density (2-D).

Generative experts: two Gaussian mixtures with exact scores along the flow path
``x_t = (1 - t) x_0 + t eps`` (:class:`iclr26.models.diffusion.GaussianMixture`), a ring of eight
components (``p_1``) and two broad components (``p_2``). Discriminative expert: the
non-differentiable indicator of the upper half-plane, ``r(x) = lam * 1[x_2 > 0]``. The product
``p_1 p_2 exp(r)`` is itself a Gaussian mixture reweighted by ``exp(r)``, so the ground truth is
sampled exactly (:func:`product_mixture` then rejection). Each seed is an independent draw of
every chain; the error is the kernel MMD (RBF, biased V-statistic, bandwidth 1) between the chains'
outputs and exact samples of the product.

Arms (all on the same experts, steps and Langevin moves):

* ``smc_L{2,4,16}``: the full method (annealed MCMC + SMC resampling on the reward), L particles;
* ``best_single_smc_L16``: the baseline a user would pick instead of a product: one generative
  expert *with* the reward, through the same sampler (MCMC + SMC, 16 particles); which expert is
  chosen per seed on a separate validation draw (fresh chains and fresh exact samples), the test
  draw then scores it (``single1_smc_L16`` / ``single2_smc_L16`` are both stored);
* ``final_weights_L16``: the final-reweighting control: the same 16 particles and moves, no
  resampling on the way, the importance weights ``exp(r(x0))`` applied only at the end;
* ``mcmc_L1``: one particle (no weighting can happen with one particle: the reward is ignored);
* ``mcmc_noreward``: one particle, MCMC, no reward; ``naive``: the summed scores integrated by
  DDIM, no MCMC, no weighting (plain product-of-scores guidance); ``expert1``: the ring expert
  alone.
"""
from __future__ import annotations

import time

import numpy as np
import torch

from iclr26.common.seeding import seed_everything
from iclr26.models import diffusion as D

from .sampler import FlowExpert, ProductOfExpertsSampler, RewardExpert

SCALES = {
    "smoke": dict(n_chains=50, n_truth=400, n_steps=10, langevin_steps=1, step_size=0.5, lam=2.0,
                  particles=(1, 2, 4, 16)),
    "quick": dict(n_chains=800, n_truth=3000, n_steps=40, langevin_steps=3, step_size=0.5, lam=2.0,
                  particles=(1, 2, 4, 16)),
    "paper": dict(n_chains=2000, n_truth=10000, n_steps=100, langevin_steps=5, step_size=0.5, lam=2.0,
                  particles=(1, 2, 4, 16, 32)),
}
SEEDS = {"smoke": 1, "quick": 10, "paper": 10}


def experts():
    p1 = D.ring_mixture(8, radius=3.0, std=0.5)
    p2 = D.GaussianMixture([[2.0, 1.0], [-2.5, -1.0]], std=[1.5, 1.2], weights=[0.35, 0.65])
    return p1, p2


def product_mixture(a: D.GaussianMixture, b: D.GaussianMixture) -> D.GaussianMixture:
    """The normalised product of two isotropic Gaussian mixtures (a Gaussian mixture)."""
    means, stds, logw = [], [], []
    for i in range(a.n_components):
        for j in range(b.n_components):
            va, vb = a.std[i] ** 2, b.std[j] ** 2
            v = 1.0 / (1.0 / va + 1.0 / vb)
            means.append(v * (a.means[i] / va + b.means[j] / vb))
            stds.append(np.sqrt(v))
            d2 = float(((a.means[i] - b.means[j]) ** 2).sum())
            logw.append(np.log(a.weights[i]) + np.log(b.weights[j]) - 0.5 * d2 / (va + vb)
                        - 0.5 * a.dim * np.log(2 * np.pi * (va + vb)))
    logw = np.array(logw)
    w = np.exp(logw - logw.max())
    return D.GaussianMixture(np.array(means), np.array(stds), w / w.sum())


def reward(x, lam):
    return lam * (x[:, 1] > 0).to(x.dtype)


def truth_samples(n, lam, rng):
    """Exact draws of ``p_1 p_2 exp(lam 1[x_2 > 0])`` by rejection from the product mixture."""
    prod = product_mixture(*experts())
    out = []
    while sum(len(o) for o in out) < n:
        x, _ = prod.sample(4 * n, rng)
        acc = rng.random(len(x)) < np.exp(lam * (x[:, 1] > 0) - lam)
        out.append(x[acc])
    return np.concatenate(out)[:n]


def flow_expert(g: D.GaussianMixture) -> FlowExpert:
    def score(x, t):
        tv = float(t[0])
        return torch.from_numpy(g.noised(1.0 - tv, tv).score(x.numpy())).to(x.dtype)
    return FlowExpert(score)


def _kmean(a, b, bandwidth):
    d2 = (a**2).sum(1)[:, None] + (b**2).sum(1)[None] - 2 * a @ b.T
    return float(np.exp(-np.maximum(d2, 0.0) / (2 * bandwidth**2)).mean())


def mmd(x, y, bandwidth=1.0, kyy=None):
    """Biased (V-statistic) RBF-kernel MMD between two samples (``kyy``: a cached mean of k(y, y))."""
    kyy = _kmean(y, y, bandwidth) if kyy is None else kyy
    v = _kmean(x, x, bandwidth) + kyy - 2 * _kmean(x, y, bandwidth)
    return float(np.sqrt(max(v, 0.0)))


def run(scale: str, seed: int) -> dict:
    cfg = SCALES[scale]
    seed_everything(seed)
    t0 = time.perf_counter()
    rng = np.random.default_rng(seed)
    p1, p2 = experts()
    e1, e2 = flow_expert(p1), flow_expert(p2)
    rexp = RewardExpert(lambda x: reward(x, 1.0), weight=cfg["lam"])
    truth = truth_samples(cfg["n_truth"], cfg["lam"], rng)
    common = dict(n_steps=cfg["n_steps"], step_size=cfg["step_size"])
    arms = {
        "naive": ProductOfExpertsSampler([e1, e2], [], n_particles=1, langevin_steps=0, **common),
        "expert1": ProductOfExpertsSampler([e1], [], n_particles=1, langevin_steps=0, **common),
        "mcmc_noreward": ProductOfExpertsSampler([e1, e2], [], n_particles=1,
                                                     langevin_steps=cfg["langevin_steps"], **common),
    }
    for L in cfg["particles"]:
        name = "mcmc_L1" if L == 1 else f"smc_L{L}"
        arms[name] = ProductOfExpertsSampler([e1, e2], [rexp], n_particles=L,
                                             langevin_steps=cfg["langevin_steps"], **common)
    arms["final_weights_L16"] = ProductOfExpertsSampler([e1, e2], [rexp], n_particles=16, resample=False,
                                                        langevin_steps=cfg["langevin_steps"], **common)
    singles = {f"single{k}_smc_L16": ProductOfExpertsSampler([e], [rexp], n_particles=16,
                                                             langevin_steps=cfg["langevin_steps"], **common)
               for k, e in ((1, e1), (2, e2))}
    # which single expert (with the reward) a user would pick: chosen on a validation draw
    val_truth = truth_samples(cfg["n_truth"], cfg["lam"], rng)
    val_kyy = _kmean(val_truth, val_truth, 1.0)
    val_err = {}
    for i, (name, s) in enumerate(singles.items()):
        x, _ = s.sample(cfg["n_chains"], 2, generator=torch.Generator().manual_seed(1000 * seed + 500 + i))
        val_err[name] = mmd(x.numpy(), val_truth, kyy=val_kyy)
    best_single = min(val_err, key=val_err.get)
    arms.update(singles)
    kyy = _kmean(truth, truth, 1.0)
    err, upper = {}, {}
    for i, (name, s) in enumerate(arms.items()):
        x, _ = s.sample(cfg["n_chains"], 2, generator=torch.Generator().manual_seed(1000 * seed + i))
        x = x.numpy()
        err[name] = mmd(x, truth, kyy=kyy)
        upper[name] = float((x[:, 1] > 0).mean())
    err["best_single_smc_L16"] = err[best_single]
    upper["best_single_smc_L16"] = upper[best_single]
    Ls = [L for L in cfg["particles"] if L > 1]           # counts that all use the reward
    slope = float(np.polyfit(np.log(Ls), np.log([err[f"smc_L{L}"] for L in Ls]), 1)[0])
    return {
        "metrics": {
            "log_mmd": {k: float(np.log(v)) for k, v in err.items()},
            "mmd_slope_reward_particles": {"method": slope},
        },
        "info": {"mmd": err, "upper_share": upper, "truth_upper_share": float((truth[:, 1] > 0).mean()),
                 "best_single": best_single, "val_mmd_single": val_err,
                 "seconds": time.perf_counter() - t0},
    }
