"""Hyper-parameter selection for the ali_cfm claim check, on validation draws only.

Each method gets the same number of configurations (four), scored by the check's own protocol
(leave one time point out, integrate from the previous snapshot, W1 against a fresh sample) on draws
with seeds 1000+ (never an evaluation seed) at held-out indices 2 and 4 (the check holds out 3).
ALI-CFM: GAN learning rate x CFM coupling; OT-CFM and MMFM: the CFM learning rate.

    nice -n 10 .venv/bin/python benchmarks/bench_ali_cfm.py [n_draws]
"""
import json
import sys
import time

import numpy as np
import torch

from iclr26.generative.ali_cfm import experiment as E

ALI_GRID = [dict(gan_lr=lr, reg=10.0, coupling=c, cfm_lr=1e-3) for lr in (3e-4, 1e-3) for c in ("border", "chain")]
CFM_GRID = (3e-4, 1e-3, 3e-3, 1e-2)


def main(n_draws: int = 1) -> dict:
    torch.set_num_threads(1)
    cfg = E.SCALES["quick"]
    scores = {}
    for d in range(n_draws):
        seed = 1000 + d
        times, snaps, tests = E.draw(cfg["n"], cfg["n_test"], np.random.default_rng(seed))
        for h in (2, 4):
            for a in ALI_GRID:
                key = f"ali lr={a['gan_lr']:g} coupling={a['coupling']}"
                r = E.leave_one_out(cfg, seed, times, snaps, tests, h, ali=a, arms=("ali_cfm",))
                scores.setdefault(key, []).append(np.log(r["ali_cfm"]))
                scores.setdefault(key + " [interp]", []).append(np.log(r["ali_interp"]))
                print(key, h, {k: round(v, 3) for k, v in r.items()}, flush=True)
            for lr in CFM_GRID:
                r = E.leave_one_out(cfg, seed, times, snaps, tests, h, cfm_lr={"ot_linear": lr, "cubic_spline": lr},
                                    arms=("ot_cfm", "mmfm"))
                for arm in ("ot_cfm", "mmfm"):
                    scores.setdefault(f"{arm} lr={lr:g}", []).append(np.log(r[arm]))
                print("cfm", lr, h, {k: round(v, 3) for k, v in r.items()}, flush=True)
    return {k: float(np.mean(v)) for k, v in scores.items()}


if __name__ == "__main__":
    t0 = time.perf_counter()
    res = main(int(sys.argv[1]) if len(sys.argv) > 1 else 1)
    print(json.dumps(res, indent=1))
    print(f"seconds {time.perf_counter() - t0:.0f}")
