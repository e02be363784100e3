"""Claim checks for arXiv:2510.20413 (AuxDPO) on random misspecified linear-softmax bandits.

Each trial (seed) draws its own validation bandits and evaluation bandits (independent draws):

* a bandit: ``S`` states, ``K`` actions, ``d``-dim Gaussian features, a non-uniform base policy
  ``theta0``, a reward ``r*`` drawn independently of the features (so not realisable by the class:
  misspecified), and skewed pair frequencies (Dirichlet with concentration < 1);
* ``n_pairs`` comparisons labelled by the Bradley-Terry-Luce model on ``r*``;
* arms, all at the KL weight ``beta`` of the objective: ``dpo`` (:func:`.fit_dpo`), ``ipo``
  (:func:`.fit_ipo`, ``tau`` tuned), ``auxdpo`` (:func:`.fit_auxdpo`, exact null-space form,
  ``lambda_amp`` tuned), ``rlhf`` (two-stage: :func:`.fit_bt_reward` then :func:`.rlhf_solution`)
  and ``base`` (``theta0``);
* hyper-parameters are chosen by the mean true expected reward on the trial's validation bandits,
  never on its evaluation bandits;
* metrics per evaluation bandit: the true expected reward ``E_{pi_theta} r*`` and the KL divergence
  from the (population) RLHF policy ``argmax_theta E r* - beta KL`` to the learned policy.

The paper's three-arm example (Section 3) is exact arithmetic: its population values are checked in
the tests and returned under ``info["three_arm"]``; the metric ``three_arm_reward`` is its
finite-sample version (``n_three`` independent data sets of ``n_three_pairs`` comparisons drawn with
the example's pair frequencies), so that the sign of the effect is a statistical claim.
"""
from __future__ import annotations

import time

import numpy as np
import torch

from iclr26.common.seeding import seed_everything

from .bandit import (PreferenceCounts, fit_auxdpo, fit_bt_reward, fit_dpo, fit_ipo, null_space_basis, random_bandit, rlhf_solution,
                     sample_preferences, three_arm_example)

SCALES = {
    "smoke": dict(S=2, K=5, d=2, n_pairs=200, n_val=1, n_eval=2, beta=1.0, n_three=2, n_three_pairs=600,
                  lambda_grid=(0.0, 0.1), tau_grid=(0.5, 1.0)),
    "quick": dict(S=3, K=10, d=3, n_pairs=1000, n_val=5, n_eval=20, beta=1.0, n_three=20, n_three_pairs=600,
                  lambda_grid=(0.0, 0.01, 0.1, 1.0), tau_grid=(0.03, 0.1, 0.3, 1.0)),
    # the paper's LLM run, written down (not run on CPU): AuxDPOTrainer on SmolLM2-135M + LoRA,
    # HH-RLHF harmless-base pairs (shipped: iclr26/data/files/hh-rlhf), beta = 0.1 (TRL default)
    "paper": dict(S=3, K=10, d=3, n_pairs=1000, n_val=5, n_eval=20, beta=1.0, n_three=20, n_three_pairs=600,
                  lambda_grid=(0.0, 0.01, 0.1, 1.0), tau_grid=(0.03, 0.1, 0.3, 1.0),
                  llm=dict(model="SmolLM2-135M", lora_r=4, lora_alpha=8, beta=0.1, lambda_null=1.0,
                           lambda_amp=0.01, learning_rate=5e-5, epochs=1, data="hh-rlhf harmless-base",
                           n_train=2000, n_eval=312)),
}
SEEDS = {"smoke": 1, "quick": 10, "paper": 10}
ARMS = ("base", "dpo", "ipo", "auxdpo", "rlhf")


def _draw(rng, cfg):
    bandit, r, pairs = random_bandit(rng, S=cfg["S"], K=cfg["K"], d=cfg["d"])
    data = sample_preferences(bandit, r, pairs, cfg["n_pairs"], rng)
    return bandit, r, data


def _tune(cfg, val):
    """Pick ``lambda_amp`` (AuxDPO) and ``tau`` (IPO) by mean true reward on validation bandits."""
    beta = cfg["beta"]
    lam_score = [np.mean([b.expected_reward(fit_auxdpo(b, dt, beta, lam, Gamma=G), r) for b, r, dt, G in val])
                 for lam in cfg["lambda_grid"]]
    tau_score = [np.mean([b.expected_reward(fit_ipo(b, dt, tau), r) for b, r, dt, _ in val])
                 for tau in cfg["tau_grid"]]
    return cfg["lambda_grid"][int(np.argmax(lam_score))], cfg["tau_grid"][int(np.argmax(tau_score))]


def three_arm_sampled(rng, n_pairs):
    """Finite-sample version of the three-arm example: ``n_pairs`` comparisons drawn with the example's
    pair frequencies (1 : 10 : 1), labelled by BTL on ``r*``; expected rewards of base / DPO / AuxDPO."""
    b, r, pop = three_arm_example()
    n = rng.multinomial(n_pairs, (pop.wins_a + pop.wins_b) / (pop.wins_a + pop.wins_b).sum())
    p = 1.0 / (1.0 + np.exp(-(r[0, pop.a] - r[0, pop.b])))
    wa = rng.binomial(n, p)
    data = PreferenceCounts(pop.s, pop.a, pop.b, wa, n - wa)
    return {"base": b.expected_reward(b.theta0, r), "dpo": b.expected_reward(fit_dpo(b, data, 1.0), r),
            "auxdpo": b.expected_reward(fit_auxdpo(b, data, 1.0, 0.0), r)}


def three_arm_values():
    """Expected rewards of base / DPO / IPO / AuxDPO / RLHF-local in the paper's three-arm example."""
    from .bandit import rlhf_local_solution
    b, r, data = three_arm_example()
    th = {"base": b.theta0, "dpo": fit_dpo(b, data, 1.0), "ipo": fit_ipo(b, data, 1.0),
          "auxdpo": fit_auxdpo(b, data, 1.0, 0.0), "rlhf_local": rlhf_local_solution(b, r, 1.0)}
    return {k: b.expected_reward(v, r) for k, v in th.items()}


def run(scale: str, seed: int) -> dict:
    cfg = SCALES[scale]
    seed_everything(seed)
    torch.set_num_threads(1)
    t0 = time.perf_counter()
    rng = np.random.default_rng([seed, 2510])
    beta = cfg["beta"]
    val = []
    for _ in range(cfg["n_val"]):
        b, r, dt = _draw(rng, cfg)
        val.append((b, r, dt, null_space_basis(b.A_matrix())))
    lam, tau = _tune(cfg, val)
    reward = {a: [] for a in ARMS}
    kl = {a: [] for a in ARMS}
    for _ in range(cfg["n_eval"]):
        b, r, dt = _draw(rng, cfg)
        th = {"base": b.theta0, "dpo": fit_dpo(b, dt, beta), "ipo": fit_ipo(b, dt, tau),
              "auxdpo": fit_auxdpo(b, dt, beta, lam), "rlhf": rlhf_solution(b, fit_bt_reward(b, dt), beta)}
        target = rlhf_solution(b, r, beta)
        for a in ARMS:
            reward[a].append(b.expected_reward(th[a], r))
            kl[a].append(b.kl(target, th[a]))
    three = three_arm_values()
    sampled = [three_arm_sampled(rng, cfg["n_three_pairs"]) for _ in range(cfg["n_three"])]
    return {
        "metrics": {
            "true_reward": reward,
            "kl_from_rlhf": kl,
            # 1 where AuxDPO's policy is nearer the RLHF policy than DPO's (in KL), per bandit
            "auxdpo_nearer_than_dpo": {"auxdpo": [float(a < b) for a, b in zip(kl["auxdpo"], kl["dpo"])]},
            "three_arm_reward": {k: [d[k] for d in sampled] for k in ("base", "dpo", "auxdpo")},
        },
        "info": {"lambda_amp": lam, "tau": tau, "three_arm": three, "seconds": time.perf_counter() - t0},
    }
