"""Exact checks for arXiv:2512.00003 (a theory paper: it has no empirical table).

Everything here is a deterministic computation given the inputs; nothing is estimated. The seed
only draws the random binary inputs, so one trial is enough (``SEEDS``), and the claims' items are
the computations themselves (``cluster = "none"``; the sign and binomial tests of ``claims.toml``
only count how many of them lie on the claimed side).

1. **Exactness.** A check set of random inputs per machine (binary increment, copy, palindrome) at
   small space bounds: each construction -- the layered queues with ``k' = 2`` and ``k' = 3``
   (:class:`.QueueSimulator`) and the single-queue construction executed tick by tick
   (:class:`.SingleQueueSimulator`) -- must reproduce the reference TM configuration after every
   TM step (metric ``simulator_exact``, 1/0 per run). The transformer itself
   (:class:`.QueueMachineTransformer`, hard attention at the queue offsets and a ReLU FFN) runs
   short inputs token by token; its TM state and tapes, decoded from its own tokens after every
   TM step, must equal the reference machine's (metric ``transformer_exact``, 1/0 per run).
2. **Exponents.** For every machine and ``draws`` random inputs of length ``s // 2 - 2`` at each
   space bound ``s``, the overhead (mean ticks per TM step) of each construction; the *local*
   exponent between consecutive bounds, ``log(o(s2) / o(s1)) / log(s2 / s1)``, is one item per
   (machine, input draw, pair of bounds) (metric ``local_exponent``). The single-queue
   construction is executed tick by tick up to ``single_s[-1]`` (its per-tick cost makes larger
   bounds too slow here), so its comparison with ``k' = 2`` uses those bounds and the same inputs
   (metric ``local_exponent_vs_single``). The fitted exponents (least-squares slope of log overhead
   on log s per machine) are exact numbers stored in ``info``.
The ``s`` values are sixth powers, so ``b = s^(1/k')`` has no rounding for ``k' = 2, 3``.
"""
from __future__ import annotations

import math
import random
import time

import numpy as np

from iclr26.common.seeding import seed_everything

from .machines import MACHINES, run_reference
from .queues import QueueSimulator, SingleQueueSimulator, loglog_slope, overhead_per_step
from .transformer import QueueMachineTransformer

SCALES = {
    "smoke": dict(s_values=(64, 729), single_s=(64, 729), draws=1, check_s=(64,), n_check=2, check_len=20,
                  check_min=17, transformer=dict(s=16, k_prime=2, k_prime_for={"binary_increment": 3}, layers=2,
                                                 n_runs=1, min_len=7, max_len=7)),
    "quick": dict(s_values=(64, 729, 4096, 15625), single_s=(64, 729, 4096), draws=2, check_s=(64,),
                  n_check=12, check_len=30, check_min=17,
                  transformer=dict(s=16, k_prime=2, k_prime_for={"binary_increment": 3}, layers=2, n_runs=4,
                                   min_len=7, max_len=7)),
    "paper": dict(s_values=(64, 729, 4096, 15625, 46656, 117649), single_s=(64, 729, 4096, 15625), draws=5,
                  check_s=(64,), n_check=20, check_len=30, check_min=17,
                  transformer=dict(s=64, k_prime=3, k_prime_for={}, layers=3, n_runs=20, min_len=10, max_len=12)),
}
SEEDS = {"smoke": 1, "quick": 1, "paper": 1}
ARMS = ("levels2", "levels3", "single_queue")


def make_input(machine: str, n: int, rng: random.Random, palindrome: bool | None = None) -> str:
    """A uniform random binary word of length ``n``; for the palindrome machine, a palindrome with
    probability 1/2 (so both answers occur), or exactly when ``palindrome`` is True when it is given
    (so one input draw keeps its type across the space bounds)."""
    if n < 0:
        raise ValueError(f"input length n must be >= 0, got {n}")
    w = "".join(rng.choice("01") for _ in range(n))
    pal = rng.random() < 0.5 if palindrome is None else palindrome
    if machine == "palindrome" and pal:
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


def local_exponents(s_values, overheads) -> list[float]:
    """``log(o_{j+1} / o_j) / log(s_{j+1} / s_j)`` for consecutive space bounds."""
    if len(s_values) != len(overheads) or len(s_values) < 2:
        raise ValueError("need at least two (s, overhead) pairs of equal length")
    if any(not (o > 0 and math.isfinite(o)) for o in overheads) or any(b <= a for a, b in zip(s_values, s_values[1:])):
        raise ValueError("overheads must be finite and > 0 and s_values strictly increasing")
    return [math.log(overheads[j + 1] / overheads[j]) / math.log(s_values[j + 1] / s_values[j])
            for j in range(len(s_values) - 1)]


def transformer_matches(tm, word: str, s: int, k_prime: int, layers: int) -> bool:
    """Run ``word`` on the transformer token by token; True when its TM state and tapes, decoded
    from its own tokens after every TM step, equal the reference machine's configurations."""
    return transformer_run(tm, word, s, k_prime, layers)[0]


def transformer_run(tm, word: str, s: int, k_prime: int, layers: int):
    """``(matches, copy_ticks)``: ``matches`` as in :func:`transformer_matches`, which also needs the
    head moves the network's own FFN wrote at every ``delta`` tick to equal the machine's;
    ``copy_ticks`` counts the level-move (``copy``) opcodes the run executed."""
    sim = QueueSimulator(tm, s, k_prime, record=True).run(word)
    net = QueueMachineTransformer(tm, sim.queue_lengths, layers=layers)
    tokens = net.run(sim.prompt_cells, sim.clock.ops, sim.clock.t)
    ref = run_reference(tm, word)
    copies = sum(op[0] == "copy" for _, op in sim.clock.ops)
    if len(sim.step_end) != len(ref):
        return False, copies
    got = [(net.state_at(tokens, end), sim.decode(net.queue_cells(tokens, end), sim.step_layouts[i]))
           for i, end in enumerate(sim.step_end)]
    net_moves = [net.moves_at(tokens, t) for t, op in sim.clock.ops if op[0] == "delta"]
    return got == ref and net_moves == sim.step_moves, copies


def run(scale: str, seed: int) -> dict:
    cfg = SCALES[scale]
    seed_everything(seed)
    rng = random.Random(seed)
    t0 = time.perf_counter()

    # 1. exactness of the three constructions (check set) and of the transformer
    # Inputs are long enough that the layered runs move blocks between levels (copy opcodes); a
    # run without any copy opcode would leave the levels unchecked, so it is an error.
    exact = {a: [] for a in ARMS}
    copy_ops = {"levels2": [], "levels3": []}
    for m, make in MACHINES.items():
        tm = make()
        for j in range(cfg["n_check"]):
            s = cfg["check_s"][j % len(cfg["check_s"])]
            word = make_input(m, rng.randint(cfg["check_min"], min(cfg["check_len"], s // 2 - 2)), rng)
            ref = run_reference(tm, word)
            for arm in ARMS:
                sim = simulate(arm, tm, s).run(word)
                exact[arm].append(float(sim.configs == ref))
                if arm in copy_ops:
                    copy_ops[arm].append(sim.clock.counts["copy"])
                    if copy_ops[arm][-1] == 0:
                        raise RuntimeError(f"check run {m} {word!r} s={s} ({arm}) made no level move")
    tcfg = cfg["transformer"]
    t_net = time.perf_counter()
    net_exact, net_copies = [], []
    for m, make in MACHINES.items():
        kp = tcfg["k_prime_for"].get(m, tcfg["k_prime"])
        for _ in range(tcfg["n_runs"]):
            word = make_input(m, rng.randint(tcfg["min_len"], tcfg["max_len"]), rng)
            ok, c = transformer_run(make(), word, tcfg["s"], kp, tcfg["layers"])
            if c == 0:
                raise RuntimeError(f"transformer run {m} {word!r} made no level move (no copy opcode)")
            net_exact.append(float(ok))
            net_copies.append(c)
    t_net = time.perf_counter() - t_net

    # 2. overheads and exponents
    S, S1 = list(cfg["s_values"]), list(cfg["single_s"])
    if S1 != S[: len(S1)]:
        raise ValueError("single_s must be a prefix of s_values")
    over = {a: {m: [] for m in MACHINES} for a in ARMS}      # per machine: one list per draw
    loc = {"levels2": [], "levels3": []}
    top = {"levels2": [], "levels3": []}               # the local exponent at the two largest bounds
    loc_single = {"levels2": [], "single_queue": []}
    for m, make in MACHINES.items():
        tm = make()
        for d in range(cfg["draws"]):
            pal = d % 2 == 0                                # one input type per draw, at every s
            words = [make_input(m, s // 2 - 2, rng, palindrome=pal) for s in S]
            o = {a: [overhead_per_step(simulate(a, tm, s).run(w, snapshots=False))
                     for s, w in zip(S if a != "single_queue" else S1, words)] for a in ARMS}
            if any(o["levels2"] == p2 and o["levels3"] == p3
                   for p2, p3 in zip(over["levels2"][m], over["levels3"][m])):
                continue                                    # an identical computation (copy is input-blind)
            for a in ARMS:
                over[a][m].append(o[a])
            for a in loc:
                loc[a] += local_exponents(S, o[a])
                top[a].append(local_exponents(S, o[a])[-1])
            loc_single["levels2"] += local_exponents(S1, o["levels2"][: len(S1)])
            loc_single["single_queue"] += local_exponents(S1, o["single_queue"])
    fitted = {a: {m: float(np.mean([loglog_slope(S if a != "single_queue" else S1, o) for o in over[a][m]]))
                  for m in MACHINES} for a in ARMS}
    return {
        "metrics": {
            "simulator_exact": exact,
            "transformer_exact": {"transformer": net_exact},
            "local_exponent": loc,
            "local_exponent_top": top,
            "local_exponent_vs_single": loc_single,
        },
        "info": {"s_values": S, "single_s": S1, "overhead": over, "fitted_exponent": fitted,
                 "largest_pair_exponent": {a: {m: [local_exponents(S, o)[-1] for o in over[a][m]] for m in MACHINES}
                                           for a in ("levels2", "levels3")},
                 "copy_ops": {"check": copy_ops, "transformer": net_copies},
                 "fitted_exponent_mean": {a: float(np.mean(list(v.values()))) for a, v in fitted.items()},
                 "transformer": tcfg, "seconds": {"transformer": t_net, "total": time.perf_counter() - t0}},
    }
