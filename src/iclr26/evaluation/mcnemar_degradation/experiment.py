"""Claim checks for the McNemar degradation test, by simulation at the paper's sizes.

Each replication draws, per task, the paired 2x2 table of (base, optimised) correctness from a
multinomial with accuracy ``acc``, flip rate ``p_flip`` and accuracy drop ``delta``
(``delta = p_flip * (2q - 1)``, q the degradation probability), then applies every test to the
same table. The per-replication reject indicators are the paired items.

(a) type-I error: delta = 0, each aggregation's rejection rate against alpha;
(b) power at delta = 0.8 %, N = 25,282: the exact paired test vs the unpaired two-proportion z-test;
(c) pruning never-flipping samples (found with noisy re-runs) keeps the paired test's power;
(d) the real-model case (:mod:`.real_model`): on the same arithmetic items, a provably lossless
    change (another batch composition) is not flagged and a real degradation (two decoder layers
    removed) is.
"""
from __future__ import annotations

import numpy as np

from iclr26.common.seeding import seed_everything

from .real_model import real_model_case
from .test import AGGREGATIONS, _binom_p, aggregate_counts

# N = 25,282 is the paper's total evaluation size (Sec. 6); the split into four tasks is ours.
TASK_SIZES = (12_032, 8_000, 3_931, 1_319)
ALPHA = 0.05
SCALES = {
    "smoke": dict(reps=40, n_mc=200, p_flip=0.09, acc=0.6, delta=0.008, noise_runs=10, p_noise=0.3, flip_prone=0.5),
    "quick": dict(reps=1000, n_mc=2000, p_flip=0.09, acc=0.6, delta=0.008, noise_runs=10, p_noise=0.3, flip_prone=0.5),
    "paper": dict(reps=10_000, n_mc=10_000, p_flip=0.09, acc=0.6, delta=0.008, noise_runs=10, p_noise=0.3, flip_prone=0.5),
}
SEEDS = {"smoke": 1, "quick": 2, "paper": 2}


def simulate_tables(rng, sizes, acc: float, p_flip: float, delta: float, reps: int):
    """Per replication and task, counts (a, b, c, d): both wrong, only base right, only new right, both right."""
    q = 0.5 + delta / (2 * p_flip)
    if not 0 <= q <= 1:
        raise ValueError(f"delta={delta} is impossible with p_flip={p_flip}: need |delta| <= p_flip")
    b_p, c_p = p_flip * q, p_flip * (1 - q)
    d_p = acc - b_p
    a_p = 1 - b_p - c_p - d_p
    if min(a_p, d_p) < 0:
        raise ValueError("inconsistent acc/p_flip/delta: cell probabilities must be non-negative")
    probs = np.array([a_p, b_p, c_p, d_p])
    return np.stack([rng.multinomial(n, probs, size=reps) for n in sizes], axis=1)  # (reps, T, 4)


def unpaired_reject(tables, alpha: float) -> np.ndarray:
    """One-sided two-proportion z-test on pooled accuracies, ignoring the pairing."""
    from scipy import stats

    n = tables.sum(axis=(1, 2))
    acc_base = (tables[..., 1] + tables[..., 3]).sum(axis=1) / n
    acc_new = (tables[..., 2] + tables[..., 3]).sum(axis=1) / n
    pooled = (acc_base + acc_new) / 2
    se = np.sqrt(pooled * (1 - pooled) * 2 / n)
    return stats.norm.sf((acc_base - acc_new) / se) < alpha


def run(scale: str, seed: int) -> dict:
    cfg = SCALES[scale]
    rng = seed_everything(seed)
    reps = cfg["reps"]

    # (a) type-I error under delta = 0
    null = simulate_tables(rng, TASK_SIZES, cfg["acc"], cfg["p_flip"], 0.0, reps)
    rej = {m: [] for m in AGGREGATIONS}
    for r in range(reps):
        p = aggregate_counts(null[r, :, 1], null[r, :, 2], AGGREGATIONS, cfg["n_mc"], rng)
        for m in AGGREGATIONS:
            rej[m].append(float(p[m] < ALPHA))
    combined = np.max([rej[m] for m in AGGREGATIONS], axis=0)

    # (b) power at delta = 0.8 %, pooled over the four tasks (N = 25,282)
    alt = simulate_tables(rng, TASK_SIZES, cfg["acc"], cfg["p_flip"], cfg["delta"], reps)
    b_tot, c_tot = alt[..., 1].sum(axis=1), alt[..., 2].sum(axis=1)
    paired = np.array([_binom_p(int(b), int(b + c), "greater") < ALPHA for b, c in zip(b_tot, c_tot)])
    unpaired = unpaired_reject(alt, ALPHA)

    # (c) prune never-flipping samples: a flip-prone sample is kept when it flips in at least one of
    # `noise_runs` noisy re-runs (the paper: 10 runs at temperature 0.3). A fraction `flip_prone` of
    # the samples can flip at all (our choice, 0.5, near the paper's MMLU-Pro halving); samples that never flip carry no discordant pair, so only the
    # undetected flip-prone samples are lost (binomial thinning of b and c).
    p_detect = 1 - (1 - cfg["p_noise"]) ** cfg["noise_runs"]
    b_pr, c_pr = rng.binomial(b_tot, p_detect), rng.binomial(c_tot, p_detect)
    pruned = np.array([_binom_p(int(b), int(b + c), "greater") < ALPHA for b, c in zip(b_pr, c_pr)])
    n_total = sum(TASK_SIZES)
    kept = rng.binomial(n_total, cfg["flip_prone"] * p_detect, size=reps)  # samples left after pruning

    real = real_model_case(scale, seed)
    return {
        "metrics": {
            **real["metrics"],
            "type1_reject": {**{m: rej[m] for m in AGGREGATIONS}, "combined": combined.tolist()},
            "power_reject": {"paired_mcnemar": paired.astype(float).tolist(),
                             "unpaired_z": unpaired.astype(float).tolist(),
                             "pruned_mcnemar": pruned.astype(float).tolist()},
        },
        "info": {"real_model": real["info"], "n_total": n_total, "task_sizes": list(TASK_SIZES), "p_detect": p_detect,
                 "discordant_mean": float(np.mean(b_tot + c_tot)),
                 "kept_discordant_fraction": float(np.sum(b_pr + c_pr) / max(np.sum(b_tot + c_tot), 1)),
                 "kept_sample_fraction": float(np.mean(kept) / n_total),
                 "power": {"paired": float(paired.mean()), "unpaired": float(unpaired.mean()),
                           "pruned": float(pruned.mean())},
                 "type1": {m: float(np.mean(rej[m])) for m in AGGREGATIONS} | {"combined": float(combined.mean())}},
    }
