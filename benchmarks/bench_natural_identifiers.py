"""Cost of the NID audit pieces against the peer a user would otherwise run: single-threaded CPU time
(``time.process_time``), best of ``--repeats``, reported as ratios.

    python benchmarks/bench_natural_identifiers.py [--repeats 3]

- ``dp_audit_epsilon`` (bisection on the Steinke-style tail, delta = 0 and 1e-5) against a grid search
  of the same tail over 2,000 epsilons (vectorised scipy), at m = 1,024 NIDs and c = 32; both give
  epsilon_hat, the grid to its step.
- ``dataset_inference`` with the default GBDT (4 features, 5 grouped folds) against the single-score
  ranking, at n NIDs with 127 GIDs each (the paper's GID count).
"""
from __future__ import annotations

import argparse
import time

import numpy as np
from scipy import stats

from iclr26.evaluation.natural_identifiers import dataset_inference, dp_audit_epsilon, hit_bound


def best_of(fn, repeats):
    times, out = [], None
    for _ in range(repeats):
        t = time.process_time()
        out = fn()
        times.append(time.process_time() - t)
    return min(times), out


def grid_epsilon(hits, m, c, beta=0.05, eps_max=50.0, points=2000):
    eps = np.linspace(0, eps_max, points)
    p = np.array([hit_bound(e, c) for e in eps])
    ok = stats.binom.sf(hits - 1, m, p) <= beta
    return float(eps[ok].max()) if ok.any() else 0.0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    m, c = 1024, 32
    print("| piece | setting | time (s) | peer | peer time (s) | ratio peer / piece | values |")
    print("|---|---|---|---|---|---|---|")
    for hits in (100, 600, 1023):
        for delta in (0.0, 1e-5):
            t, a = best_of(lambda: dp_audit_epsilon(hits, m, cardinality=c, delta=delta), args.repeats)
            tg, g = best_of(lambda: grid_epsilon(hits, m, c), args.repeats)
            print(f"| dp_audit_epsilon | hits {hits}/{m}, c {c}, delta {delta:g} | {t:.4f} | grid (2,000 eps, delta 0) "
                  f"| {tg:.4f} | {tg / max(t, 1e-9):.2f} | {a.epsilon:.4f} vs {g:.4f} |")
    rng = np.random.default_rng(0)
    for n in (50, 200):
        nid = rng.normal(size=(n, 4)); nid[:, 0] += 0.5
        gid = rng.normal(size=(n, 127, 4))
        t, r = best_of(lambda: dataset_inference(nid, gid, random_state=0), 1)
        t1, r1 = best_of(lambda: dataset_inference(nid[:, 0], gid[..., 0], random_state=0), args.repeats)
        print(f"| dataset_inference (GBDT) | n {n}, k 127, F 4 | {t:.3f} | single-score ranking | {t1:.4f} "
              f"| {t1 / max(t, 1e-9):.4f} | p {r.pvalue:.2g} vs {r1.pvalue:.2g} |")


if __name__ == "__main__":
    main()
