"""Overhead-exponent check for arXiv:2512.00003 (a theory paper: it has no empirical table).

For each seed and each machine (binary increment, copy, palindrome) a random input of length
``s // 2 - 2`` is run at every space bound ``s`` by three constructions: the paper's layered queues
with ``k' = 2`` and ``k' = 3`` levels per stack (:class:`.QueueSimulator`) and the single-queue
construction (:class:`.SingleQueueSimulator`). Each run is checked against the reference TM; its
overhead is the mean number of ticks (CoT steps) per simulated TM step. Per seed and construction,
the least-squares slope of log overhead on log s is fitted per machine and averaged over the three
machines: one exponent per seed (the seed = an independent draw of the inputs is the unit).
The ``s`` values are exact squares and cubes, so ``b = s^(1/k')`` has no rounding.
"""
from __future__ import annotations

import random
import time

import numpy as np

from iclr26.common.seeding import seed_everything

from .machines import MACHINES, run_reference
from .queues import QueueSimulator, SingleQueueSimulator, loglog_slope, overhead_per_step

SCALES = {
    "smoke": dict(s_values=(64, 729), check_upto=64),
    "quick": dict(s_values=(64, 729, 4096, 15625), check_upto=729),
    "paper": dict(s_values=(64, 729, 4096, 15625, 46656, 117649), check_upto=729),
}
SEEDS = {"smoke": 1, "quick": 10, "paper": 30}
ARMS = ("levels2", "levels3", "single_queue")


def make_input(machine: str, n: int, rng: random.Random) -> str:
    """A uniform random binary word of length ``n``; for the palindrome machine, a palindrome with
    probability 1/2 (so both answers occur)."""
    w = "".join(rng.choice("01") for _ in range(n))
    if machine == "palindrome" and rng.random() < 0.5:
        half = w[: n // 2]
        w = half + (w[n // 2] if n % 2 else "") + half[::-1]
    return w


def simulate(arm: str, tm, s: int):
    if arm == "levels2":
        return QueueSimulator(tm, s, 2)
    if arm == "levels3":
        return QueueSimulator(tm, s, 3)
    if arm == "single_queue":
        return SingleQueueSimulator(tm, s)
    raise ValueError(f"unknown arm {arm!r}; allowed: {', '.join(ARMS)}")


def run(scale: str, seed: int) -> dict:
    cfg = SCALES[scale]
    seed_everything(seed)
    rng = random.Random(seed)
    t0 = time.perf_counter()
    S = list(cfg["s_values"])
    over = {a: {m: [] for m in MACHINES} for a in ARMS}
    checked = 0
    for m, make in MACHINES.items():
        tm = make()
        for s in S:
            word = make_input(m, s // 2 - 2, rng)
            check = s <= cfg["check_upto"]
            ref = run_reference(tm, word) if check else None
            for arm in ARMS:
                sim = simulate(arm, tm, s).run(word, snapshots=check)
                if check:
                    if sim.configs != ref:
                        raise AssertionError(f"{arm} diverged from the TM on {m}, s={s}")
                    checked += 1
                over[arm][m].append(overhead_per_step(sim))
    slope = {a: float(np.mean([loglog_slope(S, over[a][m]) for m in MACHINES])) for a in ARMS}
    return {
        "metrics": {
            "exponent": slope,
            "overhead_at_max_s": {a: float(np.mean([over[a][m][-1] for m in MACHINES])) for a in ARMS},
        },
        "info": {"s_values": S, "overhead": over, "runs_checked_step_by_step": checked,
                 "seconds": time.perf_counter() - t0},
    }
